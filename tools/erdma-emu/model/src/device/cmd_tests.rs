// SPDX-License-Identifier: GPL-2.0

//! Unit tests of the command queue, the event queues and the control language, driven through
//! BAR0 and test guest memory by [`TestDriver`].

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::caps::Caps;
use crate::clock::ManualClock;
use crate::cmdq::*;
use crate::control;
use crate::eq::{EqError, PostError};
use crate::regs::*;
use crate::roce::{AddressHandle, AhTable, GidEntry, GidTable};
use crate::testing::{ipv4_av, ipv4_gid, layout, TestDriver, XorShift};
use crate::wire::AeqEvent;
use crate::GuestMemory;

fn driver() -> TestDriver {
    let mut t = TestDriver::new(DeviceConfig::default());
    assert!(t.init());
    t
}

fn driver_with(config: DeviceConfig) -> TestDriver {
    let mut t = TestDriver::new(config);
    assert!(t.init());
    t
}

/// A driver on a manual clock with small rings: SQ/CQ 16, CMDQ EQ 4, AEQ 4.
fn small(clock: Arc<ManualClock>) -> TestDriver {
    let mut t = TestDriver::with(DeviceConfig::default(), clock, 16, 4, 4);
    assert!(t.init());
    t
}

fn code(sub: u8, op: u8) -> OpCode {
    OpCode { sub, op }
}

fn ok(c: &Cqe) {
    assert_eq!(c.status, 0, "{c:?}");
}

fn status(c: &Cqe, s: Status) {
    assert_eq!(c.status, s.code(), "{c:?}");
}

fn create_eq_req(eqn: u8, vector: u8, depth_log2: u8) -> CreateEq {
    CreateEq {
        ring: TestDriver::ceq_ring(eqn),
        vector,
        eqn,
        depth_log2,
        ty: EQ_TYPE_CEQ,
        dbrec: layout::CEQ_DBRECS + 8 * u64::from(eqn),
    }
}

fn destroy_eq(t: &mut TestDriver, eqn: u8) -> Cqe {
    let r = DestroyEq {
        vector: eqn,
        eqn,
        ty: EQ_TYPE_CEQ,
    };
    t.exec(Command::DestroyEq, |s| r.write_fields(s))
}

fn get_stats(t: &mut TestDriver, addr: u64, len: u32) -> Cqe {
    let r = GetStats {
        index: 0,
        addr,
        len,
    };
    t.exec(Command::GetStats, |s| r.write_fields(s))
}

fn alloc_db(t: &mut TestDriver) -> Cqe {
    let r = AllocDb {
        enable: DB_SQ | DB_RQ | DB_CQ,
    };
    t.exec(Command::AllocDb, |s| r.write_fields(s))
}

fn free_db(t: &mut TestDriver, sq: u16, rq: u16, cq: u16) -> Cqe {
    let r = FreeDb {
        enable: DB_SQ | DB_RQ | DB_CQ,
        rq_page: rq,
        sq_page: sq,
        cq_page: cq,
    };
    t.exec(Command::FreeDb, |s| r.write_fields(s))
}

fn conf_device(t: &mut TestDriver, enable: bool, shift: u8) -> Cqe {
    let r = ConfDevice {
        page_size_enable: enable,
        page_shift: shift,
    };
    t.exec(Command::ConfDevice, |s| r.write_fields(s))
}

fn conf_mtu(t: &mut TestDriver, mtu: u32) -> Cqe {
    t.exec(Command::ConfMtu, |s| ConfMtu { mtu }.write_fields(s))
}

/// `fe80::n`.
fn v6_gid(n: u8) -> Gid {
    let mut g = [0u8; GID_SIZE];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[15] = n;
    g
}

fn add_gid(t: &mut TestDriver, index: u16, net_type: NetType, gid: Gid) -> Cqe {
    let r = SetGid {
        index,
        op: GidOp::Add { net_type, gid },
    };
    t.exec(Command::SetGid, |s| r.write_fields(s))
}

fn del_gid(t: &mut TestDriver, index: u16) -> Cqe {
    let r = SetGid {
        index,
        op: GidOp::Delete,
    };
    t.exec(Command::SetGid, |s| r.write_fields(s))
}

fn create_ah(t: &mut TestDriver, pdn: u32, ahn: u32, av: AddressVector) -> Cqe {
    let r = CreateAh { pdn, ahn, av };
    t.exec(Command::CreateAh, |s| r.write_fields(s))
}

fn destroy_ah(t: &mut TestDriver, pdn: u32, ahn: u32) -> Cqe {
    let r = DestroyAh { pdn, ahn };
    t.exec(Command::DestroyAh, |s| r.write_fields(s))
}

fn gids_of(t: &TestDriver) -> Vec<(u16, GidEntry)> {
    t.dev.gid_table().iter().map(|(i, e)| (i, *e)).collect()
}

// ------------------------------------------------------------------------------------------------
// QUERY_DEVICE, QUERY_FW_INFO, CQE layout
// ------------------------------------------------------------------------------------------------

#[test]
fn query_device_reports_the_configured_caps() {
    let caps = Caps {
        qp_blocks: 0xabc,
        max_cqe_log2: 17,
        max_mr_size_log2: 0x3f,
        max_recv_wr_log2: 9,
        max_ah_log2: 0x15,
        max_mw_log2: 7,
        max_gid_log2: 0xd,
        atomic: true,
        mtt_va: false,
        extend_db: true,
        cc: 3,
        local_dma_lkey: 0x8765_4321,
        fw_version: 0x0102_0304,
    };
    let mut t = driver_with(DeviceConfig {
        caps,
        ..Default::default()
    });
    let c = t.exec(Command::QueryDevice, |_| {});
    ok(&c);
    assert_eq!((c.opcode, c.qtype, c.owner), (0, CQE_QTYPE_CMDQ, true));
    let (r0, r1) = (c.resp0, c.resp1);
    assert_eq!(r0 & 0xff, 0x3f, "max_mr_size");
    assert_eq!(r0 >> 8 & 0xff, 0x15, "max_ah");
    assert_eq!(r0 >> 16 & 0xff, 9, "max_recv_wr");
    assert_eq!(r0 >> 24 & 0xff, 0x88, "ATOMIC | EXTEND_DB");
    assert_eq!(r0 >> 32 & 0xff, 0, "reserved");
    assert_eq!(r0 >> 40 & 0xff, 17, "max_cqe");
    assert_eq!(r0 >> 48 & 0xf, 0xd, "max_gid");
    assert_eq!(r0 >> 52, 0, "reserved");
    assert_eq!(r1 & 0xff, 7, "max_mw");
    assert_eq!(r1 >> 8 & 0xff, 0, "reserved");
    assert_eq!(r1 >> 16 & 0xfff, 0xabc, "qp blocks");
    assert_eq!(r1 >> 28 & 0xf, 3, "cc");
    assert_eq!(r1 >> 32, 0x8765_4321, "local DMA lkey");

    let f = t.exec(Command::QueryFwInfo, |_| {});
    ok(&f);
    assert_eq!((f.resp0, f.resp1, f.opcode), (0x0102_0304, 0, 2));
}

#[test]
fn cqe_bytes_are_big_endian_and_echo_the_start_index() {
    let mut t = driver();
    t.exec(Command::QueryDevice, |_| {});
    let start = t.queue(Command::QueryFwInfo.code(), |_| {});
    assert_eq!(start, 4);
    t.ring();
    let raw = t.cqe_raw(1);
    let fw = crate::caps::DEFAULT_FW_VERSION.to_be_bytes();
    #[rustfmt::skip]
    let want = [
        0x80, 2, CQE_QTYPE_CMDQ, 0, // owner, opcode QUERY_FW_INFO, CMDQ, success
        0, 0, 0, 4,                 // start WQEBB index of the command
        fw[0], fw[1], fw[2], fw[3], // w0 = resp0 bits 31:0
        0, 0, 0, 0,                 // w1
        0, 0, 0, 0, 0, 0, 0, 0,     // resp1
        0, 0, 0, 0, 0, 0, 0, 0,     // unused
    ];
    assert_eq!(raw, want);
    assert!(t.poll_cqe().is_some());
    // An error CQE carries the status in byte 3.
    t.exec_code(code(0, 200), |_| {});
    assert_eq!(&t.cqe_raw(2)[..8], &[0x80, 200, 2, 1, 0, 0, 0, 8]);
}

#[test]
fn owner_bit_and_start_index_across_laps_and_16_bit_wrap() {
    let clock = Arc::new(ManualClock::new());
    let mut t = small(clock);
    // 4 WQEBBs per command: the SQ (16) wraps every 4 commands, the CQ (16) every 16, and the
    // 16-bit WQEBB counter every 16384.
    for i in 0..16384u32 + 40 {
        let start = t.queue(Command::QueryFwInfo.code(), |_| {});
        t.ring();
        let raw = t.cqe_raw(i);
        let c = Cqe::decode(&raw);
        assert_eq!(c.owner, (i / 16) % 2 == 0, "command {i}");
        assert_eq!(c.start, u32::from(start), "command {i}");
        assert_eq!(c.start, (i * 4) & 0xffff);
        assert_eq!(t.poll_cqe(), Some(c));
        assert_eq!(t.poll_cqe(), None, "nothing else is valid");
    }
    assert_eq!(t.dev.commands_processed(), 16384 + 40);
}

#[test]
fn several_commands_per_doorbell_and_short_commands() {
    let mut t = driver();
    // Header-only commands may use a single WQEBB; CREATE_EQ fits in one (28 bytes).
    let h = |t: &TestDriver, c: Command, n: u16| {
        Header {
            wqebb_index: t.sq_pi.wrapping_add(n),
            code: c.code(),
            cookie: 99,
            wqebbs: n,
        }
        .encode()
    };
    let h1 = h(&t, Command::QueryDevice, 1);
    let s1 = t.queue_raw(h1, 1, |_| {});
    let h2 = h(&t, Command::CreateEq, 1);
    let s2 = t.queue_raw(h2, 1, |s| create_eq_req(1, 1, 8).write_fields(s));
    let h3 = h(&t, Command::QueryFwInfo, 2);
    let s3 = t.queue_raw(h3, 2, |_| {});
    t.ring();
    let starts: Vec<(u32, u8)> = std::iter::from_fn(|| t.poll_cqe())
        .map(|c| (c.start, c.status))
        .collect();
    assert_eq!(
        starts,
        [(s1.into(), 0), (s2.into(), 0), (s3.into(), 0)],
        "in order, one CQE each"
    );
    assert_eq!((s1, s2, s3), (0, 1, 2));
    assert_eq!(t.dev.ceqs(), [1]);
    assert_eq!(t.dev.cmdq_state().unwrap().0, 4);
}

// ------------------------------------------------------------------------------------------------
// Malformed commands, PI jumps
// ------------------------------------------------------------------------------------------------

#[test]
fn malformed_headers_complete_with_an_error_and_the_queue_goes_on() {
    let mut t = driver();
    // WQEBB count 5..=8.
    for n in 5..=8u16 {
        let h = Header {
            wqebb_index: t.sq_pi.wrapping_add(n),
            code: Command::QueryDevice.code(),
            cookie: 0,
            wqebbs: n,
        };
        let start = t.queue_raw(h.encode(), n, |_| {});
        t.ring();
        let c = t.poll_cqe().unwrap();
        status(&c, Status::Malformed);
        assert_eq!(c.start, start.into());
        assert_eq!(t.dev.cmdq_state().unwrap().0, t.sq_pi, "skipped {n} WQEBBs");
    }
    // Header index inconsistent with the position.
    let mut h = Header::decode(t.header(Command::QueryDevice.code()));
    h.wqebb_index = h.wqebb_index.wrapping_add(4);
    t.queue_raw(h.encode(), 4, |_| {});
    t.ring();
    status(&t.poll_cqe().unwrap(), Status::Malformed);
    // A command that runs past the doorbell's producer index: the device consumes up to the PI.
    let h = t.header(Command::QueryDevice.code());
    let start = t.queue_raw(h, 4, |_| {});
    t.sq_pi = start.wrapping_add(2);
    t.ring();
    let c = t.poll_cqe().unwrap();
    status(&c, Status::Malformed);
    assert_eq!(c.start, start.into());
    assert_eq!(t.dev.cmdq_state().unwrap().0, t.sq_pi);
    // Unknown sub-modules and opcodes, known but not modelled (out-of-tree only).
    for c in [
        code(2, 0),
        code(3, 0xff),
        code(0, 7),
        code(1, 12),
        Command::QueryQpc.code(),
        Command::QueryCqc.code(),
        Command::SetExtAttr.code(),
    ] {
        let cqe = t.exec_code(c, |_| {});
        status(&cqe, Status::Unsupported);
        assert_eq!(cqe.opcode, c.op);
    }
    // The queue still works.
    ok(&t.exec(Command::QueryDevice, |_| {}));
}

#[test]
fn one_wqebb_commands_and_the_request_bounds() {
    let mut t = driver();
    let h = Header {
        wqebb_index: t.sq_pi.wrapping_add(1),
        code: Command::GetStats.code(),
        cookie: 0,
        wqebbs: 1,
    };
    // GET_STATS fits in 28 bytes: fine with one WQEBB.
    t.queue_raw(h.encode(), 1, |s| {
        GetStats {
            index: 0,
            addr: layout::SCRATCH,
            len: 256,
        }
        .write_fields(s)
    });
    t.ring();
    ok(&t.poll_cqe().unwrap());
    // Every COMMON request fits in one WQEBB; a field beyond the command's extent (the RDMA
    // requests of up to 120 bytes) is refused as malformed by the request accessors.
    let r = Request::new(&[0u8; 32]);
    assert_eq!(r.u32(32), Err(Status::Malformed));
    assert_eq!(r.u64(28), Err(Status::Malformed));
    assert_eq!(r.u32(28), Ok(0));
}

#[test]
fn a_producer_index_jump_beyond_the_depth_resyncs() {
    let mut t = driver();
    ok(&t.exec(Command::QueryDevice, |_| {}));
    // 513 WQEBBs ahead with a 512-WQEBB ring.
    t.sq_pi = t.sq_pi.wrapping_add(513);
    t.ring();
    assert_eq!(t.poll_cqe(), None, "nothing executed");
    assert_eq!(t.dev.cmdq_state().unwrap().0, t.sq_pi, "resynchronised");
    // Commands after the jump work.
    ok(&t.exec(Command::QueryFwInfo, |_| {}));
    // A PI behind the device (i.e. 65535 ahead) is a jump too.
    t.sq_pi = t.sq_pi.wrapping_sub(1);
    t.ring();
    assert_eq!(t.poll_cqe(), None);
    ok(&t.exec(Command::QueryFwInfo, |_| {}));
    // The same PI again is a no-op.
    t.ring();
    assert_eq!(t.poll_cqe(), None);
}

#[test]
fn unreachable_rings_do_not_stop_the_device() {
    // SQ outside guest memory: each command completes with a DMA error.
    let mut t = TestDriver::new(DeviceConfig::default());
    t.program();
    t.w32(CMDQ_SQ_ADDR_H, 0x10);
    assert!(t.start());
    t.sq_pi = 8;
    t.ring();
    let a = t.poll_cqe().unwrap();
    let b = t.poll_cqe().unwrap();
    status(&a, Status::DmaError);
    status(&b, Status::DmaError);
    assert_eq!((a.start, b.start), (0, 4));
    assert_eq!(t.poll_cqe(), None);

    // CQ outside guest memory: commands execute, their CQEs are dropped.
    let mut t = TestDriver::new(DeviceConfig::default());
    t.program();
    t.w32(CMDQ_CQ_ADDR_H, 0x10);
    assert!(t.start());
    t.arm_cq();
    t.queue(Command::CreateEq.code(), |s| {
        create_eq_req(2, 2, 4).write_fields(s)
    });
    t.ring();
    assert_eq!(t.dev.ceqs(), [2]);
    assert_eq!(t.dev.cmdq_state(), Some((4, 0, true)), "no CQE written");

    // CMDQ EQ outside guest memory: the CQE is written, the EQE dropped.
    let mut t = TestDriver::new(DeviceConfig::default());
    t.program();
    t.w32(CMDQ_EQ_ADDR_H, 0x10);
    assert!(t.start());
    t.arm_cq();
    ok(&t.exec(Command::QueryDevice, |_| {}));
    assert!(t.irq.raised.is_empty());
}

// ------------------------------------------------------------------------------------------------
// CREATE_EQ / DESTROY_EQ
// ------------------------------------------------------------------------------------------------

#[test]
fn create_and_destroy_ceqs() {
    let mut t = driver();
    for eqn in [1u8, 2, 31] {
        ok(&t.create_ceq(eqn, eqn, 8));
    }
    assert_eq!(t.dev.ceqs(), [1, 2, 31]);
    let eq = t.dev.ceq(31).unwrap();
    assert_eq!(
        (eq.addr(), eq.depth(), eq.vector(), eq.armed()),
        (TestDriver::ceq_ring(31), 256, 31, true)
    );
    assert_eq!(
        t.dev.ceq_dbrec(2),
        Some(layout::CEQ_DBRECS + 16),
        "record kept"
    );
    // Duplicate.
    status(&t.create_ceq(2, 2, 8), Status::Exists);
    // Destroy, then destroy again.
    ok(&destroy_eq(&mut t, 2));
    assert_eq!(t.dev.ceqs(), [1, 31]);
    status(&destroy_eq(&mut t, 2), Status::NotFound);
    status(&destroy_eq(&mut t, 9), Status::NotFound);
    // The vector of DESTROY_EQ is not checked; EQN and type are.
    let r = DestroyEq {
        vector: 0xee,
        eqn: 31,
        ty: EQ_TYPE_CEQ,
    };
    ok(&t.exec(Command::DestroyEq, |s| r.write_fields(s)));
    for (eqn, ty) in [(0u8, 1u8), (32, 1), (255, 1), (1, 0), (1, 2)] {
        let r = DestroyEq { vector: 1, eqn, ty };
        status(
            &t.exec(Command::DestroyEq, |s| r.write_fields(s)),
            Status::InvalidParam,
        );
    }
    assert_eq!(t.dev.ceqs(), [1]);
    // The EQN can be created again after destroy.
    ok(&t.create_ceq(2, 7, 4));
    assert_eq!(t.dev.ceq(2).unwrap().vector(), 7);
}

#[test]
fn create_eq_rejects_bad_fields() {
    let mut t = driver();
    let good = create_eq_req(4, 4, 8);
    let cases: Vec<(CreateEq, Status)> = vec![
        (CreateEq { eqn: 0, ..good }, Status::InvalidParam),
        (CreateEq { eqn: 32, ..good }, Status::InvalidParam),
        (CreateEq { eqn: 200, ..good }, Status::InvalidParam),
        (CreateEq { vector: 0, ..good }, Status::InvalidParam),
        (CreateEq { vector: 32, ..good }, Status::InvalidParam),
        (
            CreateEq {
                depth_log2: 0,
                ..good
            },
            Status::InvalidParam,
        ),
        (
            CreateEq {
                depth_log2: 17,
                ..good
            },
            Status::InvalidParam,
        ),
        (CreateEq { ty: 0, ..good }, Status::InvalidParam),
        (CreateEq { ty: 2, ..good }, Status::InvalidParam),
        (CreateEq { ring: 0, ..good }, Status::InvalidParam),
        (
            CreateEq {
                ring: good.ring + 8,
                ..good
            },
            Status::InvalidParam,
        ),
        (
            CreateEq {
                ring: u64::MAX - 0xff,
                ..good
            },
            Status::InvalidParam,
        ),
        (CreateEq { dbrec: 0, ..good }, Status::InvalidParam),
        (
            CreateEq {
                dbrec: good.dbrec + 4,
                ..good
            },
            Status::InvalidParam,
        ),
        // Outside guest memory: the ring, its last entry, the doorbell record.
        (
            CreateEq {
                ring: 0x4000_0000,
                ..good
            },
            Status::DmaError,
        ),
        (
            CreateEq {
                ring: layout::MEM_BASE + layout::MEM_SIZE as u64 - 0x100,
                ..good
            },
            Status::DmaError,
        ),
        (
            CreateEq {
                dbrec: 0x4000_0000,
                ..good
            },
            Status::DmaError,
        ),
    ];
    for (req, want) in cases {
        status(&t.exec(Command::CreateEq, |s| req.write_fields(s)), want);
        assert!(t.dev.ceqs().is_empty(), "{req:?}");
    }
    ok(&t.exec(Command::CreateEq, |s| good.write_fields(s)));
    // The largest depth the model accepts.
    let big = CreateEq {
        eqn: 5,
        ring: layout::SCRATCH,
        depth_log2: 15,
        ..good
    };
    ok(&t.exec(Command::CreateEq, |s| big.write_fields(s)));
    assert_eq!(t.dev.ceq(5).unwrap().depth(), 1 << 15);
}

// ------------------------------------------------------------------------------------------------
// CONF_MTU, GET_STATS, CONF_DEVICE, ALLOC_DB/FREE_DB
// ------------------------------------------------------------------------------------------------

#[test]
fn conf_mtu_records_valid_mtus() {
    let mut t = driver();
    assert_eq!(t.dev.mtu(), 0);
    ok(&conf_mtu(&mut t, 1500));
    assert_eq!(t.dev.mtu(), 1500);
    for bad in [0, 67, 65536, u32::MAX] {
        status(&conf_mtu(&mut t, bad), Status::InvalidParam);
    }
    assert_eq!(t.dev.mtu(), 1500);
    ok(&conf_mtu(&mut t, 9000));
    assert_eq!(t.control("query mtu"), Ok("mtu=9000".into()));
}

#[test]
fn get_stats_writes_the_counters() {
    let mut t = driver();
    t.control("stats tx_reqs=1 tx_packets=2 tx_bytes=3 rx_pps_limit_drop=0xffffffffffffffff")
        .unwrap();
    let buf = layout::SCRATCH + 0x100;
    t.mem
        .write(buf, &[0xcc; 256])
        .expect("scratch in test memory");
    let r = GetStats {
        index: 5,
        addr: buf,
        len: 256,
    };
    ok(&t.exec(Command::GetStats, |s| r.write_fields(s)));
    let mut b = [0u8; 256];
    t.mem.read(buf, &mut b).unwrap();
    assert_eq!(&b[..4], &[0x66, 0x55, STATS_VERSION, 104]);
    assert_eq!(&b[4..8], &5u32.to_le_bytes(), "index echoed");
    assert_eq!(&b[8..16], &[0; 8]);
    let counter = |i: usize| u64::from_le_bytes(b[16 + 8 * i..24 + 8 * i].try_into().unwrap());
    assert_eq!(
        (counter(0), counter(1), counter(2), counter(3)),
        (1, 2, 3, 0)
    );
    assert_eq!(counter(10), u64::MAX);
    assert!(
        b[104..].iter().all(|&x| x == 0xcc),
        "nothing beyond the counters"
    );

    // Exactly the size needed is fine; less is not.
    ok(&get_stats(&mut t, buf, STATS_LEN as u32));
    status(
        &get_stats(&mut t, buf, STATS_LEN as u32 - 1),
        Status::InvalidParam,
    );
    status(&get_stats(&mut t, buf, 0), Status::InvalidParam);
    // Outside guest memory, or running off its end.
    status(&get_stats(&mut t, 0x4000_0000, 256), Status::DmaError);
    status(&get_stats(&mut t, 0, 256), Status::DmaError);
    status(&get_stats(&mut t, u64::MAX - 50, 256), Status::DmaError);
    let end = layout::MEM_BASE + layout::MEM_SIZE as u64;
    status(&get_stats(&mut t, end - 100, 256), Status::DmaError);
    ok(&get_stats(&mut t, end - 104, 256));
}

#[test]
fn conf_device_sets_the_doorbell_page_unit() {
    let mut t = driver();
    assert_eq!(t.dev.db_pages().page_shift(), 12);
    ok(&conf_device(&mut t, true, 16));
    assert_eq!(t.dev.db_pages().page_shift(), 16);
    assert_eq!(t.control("query page_shift"), Ok("page_shift=16".into()));
    for bad in [0, 11, 22, 31] {
        status(&conf_device(&mut t, true, bad), Status::InvalidParam);
    }
    assert_eq!(t.dev.db_pages().page_shift(), 16);
    // Page size not enabled: 4 KiB units, whatever the shift field says.
    ok(&conf_device(&mut t, false, 31));
    assert_eq!(t.dev.db_pages().page_shift(), 12);
    // Changing the unit while pages are out is refused.
    ok(&alloc_db(&mut t));
    status(&conf_device(&mut t, true, 16), Status::NoResources);
    ok(&conf_device(&mut t, true, 12));
}

#[test]
fn alloc_db_and_free_db() {
    let mut t = driver();
    let c = alloc_db(&mut t);
    ok(&c);
    let (sq, cdb, rdb) = (
        c.resp0 as u16,
        (c.resp0 >> 32) as u16,
        (c.resp0 >> 48) as u16,
    );
    assert_eq!((sq, cdb, rdb), (256, 257, 258));
    assert_eq!(c.resp0 >> 16 & 0xffff, 0, "bits 31:16 unused");
    assert_eq!(t.control("query dbs"), Ok("dbs=1".into()));
    // Pages are BAR0 offsets in host-page units inside the extended doorbell space.
    assert_eq!(t.dev.db_pages().offset(sq), EXTDB_BASE);
    // The drivers free with CDB and RDB swapped: accepted.
    ok(&free_db(&mut t, sq, cdb, rdb));
    assert_eq!(t.control("query dbs"), Ok("dbs=0".into()));
    status(&free_db(&mut t, sq, rdb, cdb), Status::NotFound);
    status(&free_db(&mut t, 1, 2, 3), Status::NotFound);
    let none = FreeDb {
        enable: 0,
        rq_page: 0,
        sq_page: 0,
        cq_page: 0,
    };
    status(
        &t.exec(Command::FreeDb, |s| none.write_fields(s)),
        Status::InvalidParam,
    );
    status(
        &t.exec(Command::AllocDb, |s| AllocDb { enable: 0 }.write_fields(s)),
        Status::InvalidParam,
    );
    // Exhaustion: 768 pages of 4 KiB = 256 contexts.
    for _ in 0..256 {
        ok(&alloc_db(&mut t));
    }
    status(&alloc_db(&mut t), Status::NoResources);
    assert_eq!(t.control("query dbs"), Ok("dbs=256".into()));
    ok(&free_db(&mut t, 1023, 1021, 1022));
    ok(&alloc_db(&mut t));

    // With 64 KiB pages: 48 pages, 16 contexts.
    let mut t = driver();
    ok(&conf_device(&mut t, true, 16));
    let first = alloc_db(&mut t);
    assert_eq!(first.resp0 as u16, 16);
    for _ in 1..16 {
        ok(&alloc_db(&mut t));
    }
    status(&alloc_db(&mut t), Status::NoResources);

    // Without the EXTEND_DB capability both are unsupported.
    let mut t = driver_with(DeviceConfig {
        caps: Caps {
            extend_db: false,
            ..Default::default()
        },
        ..Default::default()
    });
    status(&alloc_db(&mut t), Status::Unsupported);
    status(&free_db(&mut t, 256, 257, 258), Status::Unsupported);

    // With the test page, its page is never handed out.
    let mut t = driver_with(DeviceConfig {
        test_page: true,
        ..Default::default()
    });
    for _ in 0..255 {
        ok(&alloc_db(&mut t));
    }
    let pages: Vec<u16> = t.dev.db_pages().allocated().collect();
    assert_eq!(pages.last(), Some(&1020));
    let last = t.exec(Command::AllocDb, |s| {
        AllocDb {
            enable: DB_SQ | DB_CQ,
        }
        .write_fields(s)
    });
    ok(&last);
    assert_eq!((last.resp0 as u16, (last.resp0 >> 32) as u16), (1021, 1022));
    status(&alloc_db(&mut t), Status::NoResources);
}

// ------------------------------------------------------------------------------------------------
// SET_GID, CREATE_AH, DESTROY_AH
// ------------------------------------------------------------------------------------------------

#[test]
fn set_gid_adds_replaces_and_deletes() {
    let mut t = driver();
    ok(&add_gid(&mut t, 0, NetType::Ipv6, v6_gid(1)));
    ok(&add_gid(
        &mut t,
        3,
        NetType::Ipv4,
        ipv4_gid([192, 168, 0, 1]),
    ));
    assert_eq!(
        gids_of(&t),
        [
            (
                0,
                GidEntry {
                    net_type: NetType::Ipv6,
                    gid: v6_gid(1)
                }
            ),
            (
                3,
                GidEntry {
                    net_type: NetType::Ipv4,
                    gid: ipv4_gid([192, 168, 0, 1])
                }
            ),
        ]
    );
    assert_eq!(
        t.control("query gids"),
        Ok("gids=0:ipv6:fe800000000000000000000000000001,\
            3:ipv4:00000000000000000000ffffc0a80001"
            .into())
    );
    // Adding over a populated entry replaces it (the GID cache re-adds after changes), also
    // with the same contents.
    ok(&add_gid(&mut t, 3, NetType::Ipv4, ipv4_gid([10, 1, 2, 3])));
    ok(&add_gid(&mut t, 3, NetType::Ipv4, ipv4_gid([10, 1, 2, 3])));
    assert_eq!(
        t.dev.gid_table().get(3).unwrap().gid,
        ipv4_gid([10, 1, 2, 3])
    );
    assert_eq!(t.dev.gid_table().len(), 2);
    // The network type is recorded as given (the driver derives it from the GID).
    ok(&add_gid(&mut t, 3, NetType::Ipv6, ipv4_gid([10, 1, 2, 3])));
    assert_eq!(t.dev.gid_table().get(3).unwrap().net_type, NetType::Ipv6);
    // Delete, then the entry is empty: a second delete is "not found".
    ok(&del_gid(&mut t, 0));
    status(&del_gid(&mut t, 0), Status::NotFound);
    status(&del_gid(&mut t, 1), Status::NotFound);
    assert_eq!(
        t.dev.gid_table().iter().map(|(i, _)| i).collect::<Vec<_>>(),
        [3]
    );
    ok(&del_gid(&mut t, 3));
    assert!(t.dev.gid_table().is_empty());
    assert_eq!(t.control("query gids"), Ok("gids=".into()));
    // The index can be reused.
    ok(&add_gid(&mut t, 0, NetType::Ipv6, v6_gid(2)));
    assert_eq!(t.dev.gid_table().get(0).unwrap().gid, v6_gid(2));
}

#[test]
fn set_gid_index_bounds() {
    // Default max_gid = 4: 16 entries.
    let mut t = driver();
    assert_eq!(t.dev.gid_table().size(), 16);
    ok(&add_gid(&mut t, 15, NetType::Ipv6, v6_gid(1)));
    for index in [16, 0x100, 0xffff] {
        status(
            &add_gid(&mut t, index, NetType::Ipv6, v6_gid(1)),
            Status::InvalidParam,
        );
        status(&del_gid(&mut t, index), Status::InvalidParam);
    }
    assert_eq!(gids_of(&t).len(), 1);
    ok(&del_gid(&mut t, 15));
    // The table follows the capability: 2^0 = one entry, 2^15 = 32768.
    for (log2, last) in [(0u8, 0u16), (15, 0x7fff)] {
        let mut t = driver_with(DeviceConfig {
            caps: Caps {
                max_gid_log2: log2,
                ..Caps::default()
            },
            ..Default::default()
        });
        ok(&add_gid(
            &mut t,
            last,
            NetType::Ipv4,
            ipv4_gid([10, 0, 0, 1]),
        ));
        status(
            &add_gid(&mut t, last + 1, NetType::Ipv4, ipv4_gid([10, 0, 0, 1])),
            Status::InvalidParam,
        );
        ok(&del_gid(&mut t, last));
    }
}

#[test]
fn set_gid_delete_ignores_the_gid_bytes() {
    let mut t = driver();
    ok(&add_gid(&mut t, 2, NetType::Ipv4, ipv4_gid([10, 0, 0, 2])));
    ok(&add_gid(&mut t, 5, NetType::Ipv6, v6_gid(5)));
    // A delete as the driver sends it: cfg only, the GID bytes are whatever the stack held, and
    // so is the rest of the slot. Bit 16 (network type) means nothing for a delete either.
    let c = t.exec(Command::SetGid, |s| {
        s[8..].fill(0xa5);
        let cfg: u32 = 2 | 1 << 16 | 1 << 31;
        s[8..12].copy_from_slice(&cfg.to_le_bytes());
    });
    ok(&c);
    assert_eq!(
        gids_of(&t),
        [(
            5,
            GidEntry {
                net_type: NetType::Ipv6,
                gid: v6_gid(5)
            }
        )],
        "only entry 2 is gone; nothing of the junk was stored"
    );
    // A delete with junk GID bytes of an empty entry is still "not found".
    let c = t.exec(Command::SetGid, |s| {
        s[12..28].copy_from_slice(&v6_gid(5));
        s[8..12].copy_from_slice(&(2u32 | 1 << 31).to_le_bytes());
    });
    status(&c, Status::NotFound);
    assert_eq!(gids_of(&t).len(), 1);
    // Junk beyond the GID of an add is ignored too.
    let r = SetGid {
        index: 2,
        op: GidOp::Add {
            net_type: NetType::Ipv4,
            gid: ipv4_gid([10, 0, 0, 9]),
        },
    };
    ok(&t.exec(Command::SetGid, |s| {
        s[8..].fill(0x5a);
        r.write_fields(s);
    }));
    assert_eq!(
        t.dev.gid_table().get(2).unwrap().gid,
        ipv4_gid([10, 0, 0, 9])
    );
}

#[test]
fn roce_commands_are_unsupported_on_iwarp() {
    let mut t = driver_with(DeviceConfig {
        protocol: Protocol::Iwarp,
        ..Default::default()
    });
    status(
        &add_gid(&mut t, 0, NetType::Ipv4, ipv4_gid([10, 0, 0, 1])),
        Status::Unsupported,
    );
    status(&del_gid(&mut t, 0), Status::Unsupported);
    status(&create_ah(&mut t, 1, 0, ipv4_av(0, 1)), Status::Unsupported);
    status(&destroy_ah(&mut t, 1, 0), Status::Unsupported);
    // Even with fields that would be refused otherwise: the protocol is checked first.
    status(&del_gid(&mut t, 0xffff), Status::Unsupported);
    status(
        &create_ah(&mut t, 1, u32::MAX, ipv4_av(999, 1)),
        Status::Unsupported,
    );
    assert!(t.dev.gid_table().is_empty());
    assert!(t.dev.address_handles().is_empty());
    assert_eq!(t.control("query gids"), Ok("gids=".into()));
    assert_eq!(t.control("query ahs"), Ok("ahs=0".into()));
    // The rest of the CMDQ is unaffected.
    ok(&t.exec(Command::QueryDevice, |_| {}));
}

#[test]
fn create_and_destroy_ahs() {
    let mut t = driver();
    ok(&add_gid(
        &mut t,
        1,
        NetType::Ipv4,
        ipv4_gid([10, 0, 0, 100]),
    ));
    let av = AddressVector {
        flow_label: 0xabcde,
        net_type: NetType::Ipv6,
        traffic_class: 0x20,
        hop_limit: 255,
        sl: 5,
        udp_sport: 0xd00d,
        sgid_index: 1,
        dmac: [0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee],
        dgid: v6_gid(9),
    };
    ok(&create_ah(&mut t, 3, 0, av));
    ok(&create_ah(&mut t, 4, 7, ipv4_av(1, 2)));
    assert_eq!(
        t.dev.address_handles().get(0),
        Some(&AddressHandle { pdn: 3, av }),
        "the AV is stored as decoded"
    );
    assert_eq!(t.control("query ahs"), Ok("ahs=2".into()));
    // A live AHN cannot be created again, whatever the PD; the AH is unchanged.
    status(&create_ah(&mut t, 3, 0, ipv4_av(1, 3)), Status::Exists);
    status(&create_ah(&mut t, 9, 7, ipv4_av(1, 3)), Status::Exists);
    assert_eq!(t.dev.address_handles().get(0).unwrap().av, av);
    // DESTROY_AH: unknown AHN, wrong PD (the AH stays), then the real thing.
    status(&destroy_ah(&mut t, 3, 1), Status::NotFound);
    status(&destroy_ah(&mut t, 4, 0), Status::InvalidParam);
    assert!(t.dev.address_handles().get(0).is_some());
    ok(&destroy_ah(&mut t, 3, 0));
    status(&destroy_ah(&mut t, 3, 0), Status::NotFound);
    assert_eq!(
        t.dev
            .address_handles()
            .iter()
            .map(|(n, _)| n)
            .collect::<Vec<_>>(),
        [7]
    );
    // The AHN is free again.
    ok(&create_ah(&mut t, 5, 0, ipv4_av(1, 4)));
    assert_eq!(t.dev.address_handles().get(0).unwrap().pdn, 5);
    ok(&destroy_ah(&mut t, 5, 0));
    ok(&destroy_ah(&mut t, 4, 7));
    assert_eq!(t.control("query ahs"), Ok("ahs=0".into()));
}

#[test]
fn create_ah_bounds() {
    // Default max_ah = 16 (65536 AHNs), max_gid = 4 (16 GIDs).
    let mut t = driver();
    assert_eq!(t.dev.address_handles().size(), 65536);
    ok(&create_ah(&mut t, 1, 0xffff, ipv4_av(15, 1)));
    status(
        &create_ah(&mut t, 1, 0x1_0000, ipv4_av(0, 1)),
        Status::InvalidParam,
    );
    status(
        &create_ah(&mut t, 1, u32::MAX, ipv4_av(0, 1)),
        Status::InvalidParam,
    );
    // The source GID index must lie inside the table; the entry need not be populated.
    assert!(t.dev.gid_table().is_empty());
    status(
        &create_ah(&mut t, 1, 1, ipv4_av(16, 1)),
        Status::InvalidParam,
    );
    status(
        &create_ah(&mut t, 1, 1, ipv4_av(0xffff, 1)),
        Status::InvalidParam,
    );
    // A bad parameter wins over a duplicate AHN.
    status(
        &create_ah(&mut t, 1, 0xffff, ipv4_av(16, 1)),
        Status::InvalidParam,
    );
    assert_eq!(t.dev.address_handles().len(), 1);
    // DESTROY_AH out of range.
    status(&destroy_ah(&mut t, 1, 0x1_0000), Status::InvalidParam);
    ok(&destroy_ah(&mut t, 1, 0xffff));
    // max_ah = 0: AHN 0 only; max_gid = 0: source GID index 0 only.
    let mut t = driver_with(DeviceConfig {
        caps: Caps {
            max_ah_log2: 0,
            max_gid_log2: 0,
            ..Caps::default()
        },
        ..Default::default()
    });
    ok(&create_ah(&mut t, 1, 0, ipv4_av(0, 1)));
    status(
        &create_ah(&mut t, 1, 1, ipv4_av(0, 1)),
        Status::InvalidParam,
    );
    status(
        &create_ah(&mut t, 1, 0, ipv4_av(1, 1)),
        Status::InvalidParam,
    );
    status(&create_ah(&mut t, 1, 0, ipv4_av(0, 1)), Status::Exists);
}

#[test]
fn create_ah_with_one_wqebb_is_malformed() {
    // CREATE_AH needs 52 bytes; DESTROY_AH and SET_GID fit in one WQEBB.
    let mut t = driver();
    let one = |t: &TestDriver, c: Command| {
        Header {
            wqebb_index: t.sq_pi.wrapping_add(1),
            code: c.code(),
            cookie: 0,
            wqebbs: 1,
        }
        .encode()
    };
    let h = one(&t, Command::CreateAh);
    // The first 32 bytes of the request: the AV is cut off after its sixteenth byte.
    t.queue_raw(h, 1, |s| {
        CreateAh {
            pdn: 1,
            ahn: 1,
            av: ipv4_av(0, 1),
        }
        .write_fields(s)
    });
    t.ring();
    status(&t.poll_cqe().unwrap(), Status::Malformed);
    let h = one(&t, Command::SetGid);
    t.queue_raw(h, 1, |s| {
        SetGid {
            index: 1,
            op: GidOp::Add {
                net_type: NetType::Ipv4,
                gid: ipv4_gid([1, 2, 3, 4]),
            },
        }
        .write_fields(s)
    });
    t.ring();
    ok(&t.poll_cqe().unwrap());
    assert!(t.dev.address_handles().is_empty());
    assert_eq!(t.dev.gid_table().len(), 1);
}

// ------------------------------------------------------------------------------------------------
// Garbage in unused fields
// ------------------------------------------------------------------------------------------------

/// Writes a request's fields into a command slot.
type Fill = Box<dyn Fn(&mut [u8])>;

/// Everything a command sequence makes observable: CQEs and the state they changed.
type Observed = (
    Vec<Cqe>,
    Vec<u8>,
    Vec<u8>,
    u32,
    u8,
    usize,
    GidTable,
    AhTable,
);

fn set_gid_fill(index: u16, op: GidOp) -> Fill {
    Box::new(move |s| SetGid { index, op }.write_fields(s))
}

fn create_ah_fill(pdn: u32, ahn: u32, av: AddressVector) -> Fill {
    Box::new(move |s| CreateAh { pdn, ahn, av }.write_fields(s))
}

fn destroy_ah_fill(pdn: u32, ahn: u32) -> Fill {
    Box::new(move |s| DestroyAh { pdn, ahn }.write_fields(s))
}

fn run_sequence(garbage: Option<u64>) -> Observed {
    let mut t = driver();
    t.control("stats tx_bytes=77 rx_packets=3").unwrap();
    let mut rng = garbage.map(XorShift);
    let stats_buf = layout::SCRATCH;
    let mut cqes = Vec::new();
    let cmds: Vec<(Command, Fill)> = vec![
        (Command::QueryDevice, Box::new(|_| {})),
        (Command::QueryFwInfo, Box::new(|_| {})),
        (
            Command::CreateEq,
            Box::new(|s| create_eq_req(1, 1, 8).write_fields(s)),
        ),
        (
            Command::CreateEq,
            Box::new(|s| create_eq_req(2, 2, 6).write_fields(s)),
        ),
        (
            Command::CreateEq,
            Box::new(|s| create_eq_req(2, 2, 6).write_fields(s)),
        ),
        (
            Command::DestroyEq,
            Box::new(|s| {
                DestroyEq {
                    vector: 1,
                    eqn: 1,
                    ty: EQ_TYPE_CEQ,
                }
                .write_fields(s)
            }),
        ),
        (
            Command::ConfMtu,
            Box::new(|s| ConfMtu { mtu: 4200 }.write_fields(s)),
        ),
        (
            Command::ConfMtu,
            Box::new(|s| ConfMtu { mtu: 10 }.write_fields(s)),
        ),
        (
            Command::GetStats,
            Box::new(move |s| {
                GetStats {
                    index: 0,
                    addr: stats_buf,
                    len: 256,
                }
                .write_fields(s)
            }),
        ),
        (
            Command::ConfDevice,
            Box::new(|s| {
                ConfDevice {
                    page_size_enable: true,
                    page_shift: 13,
                }
                .write_fields(s)
            }),
        ),
        (
            Command::AllocDb,
            Box::new(|s| {
                AllocDb {
                    enable: DB_SQ | DB_RQ | DB_CQ,
                }
                .write_fields(s)
            }),
        ),
        (
            Command::AllocDb,
            Box::new(|s| {
                AllocDb {
                    enable: DB_SQ | DB_RQ | DB_CQ,
                }
                .write_fields(s)
            }),
        ),
        (
            Command::FreeDb,
            Box::new(|s| {
                FreeDb {
                    enable: DB_SQ | DB_RQ | DB_CQ,
                    rq_page: 130,
                    sq_page: 128,
                    cq_page: 129,
                }
                .write_fields(s)
            }),
        ),
        (
            Command::SetGid,
            set_gid_fill(
                1,
                GidOp::Add {
                    net_type: NetType::Ipv4,
                    gid: ipv4_gid([10, 0, 0, 1]),
                },
            ),
        ),
        (
            Command::SetGid,
            set_gid_fill(
                0,
                GidOp::Add {
                    net_type: NetType::Ipv6,
                    gid: v6_gid(1),
                },
            ),
        ),
        // Deletes: the GID bytes are garbage with a seed.
        (Command::SetGid, set_gid_fill(0, GidOp::Delete)),
        (Command::SetGid, set_gid_fill(0, GidOp::Delete)),
        (Command::CreateAh, create_ah_fill(2, 5, ipv4_av(1, 7))),
        (Command::CreateAh, create_ah_fill(2, 5, ipv4_av(1, 8))),
        (Command::CreateAh, create_ah_fill(2, 6, ipv4_av(16, 8))),
        (Command::DestroyAh, destroy_ah_fill(3, 5)),
        (Command::DestroyAh, destroy_ah_fill(2, 9)),
        (Command::CreateAh, create_ah_fill(2, 8, ipv4_av(0, 9))),
        (Command::DestroyAh, destroy_ah_fill(2, 8)),
        (Command::QueryQpc, Box::new(|_| {})),
    ];
    for (cmd, fill) in &cmds {
        if let Some(rng) = rng.as_mut() {
            // Stale bytes everywhere in the ring, and in the slot around the fields.
            let mut ring = vec![0u8; 512 * 32];
            rng.fill(&mut ring);
            t.mem.write(layout::SQ, &ring).unwrap();
        }
        cqes.push(t.exec(*cmd, |s| fill(s)));
    }
    let mut stats = vec![0u8; 104];
    t.mem.read(stats_buf, &mut stats).unwrap();
    let eqs = t.dev.ceqs();
    (
        cqes,
        stats,
        eqs,
        t.dev.mtu(),
        t.dev.db_pages().page_shift(),
        t.dev.db_pages().contexts().len(),
        t.dev.gid_table().clone(),
        t.dev.address_handles().clone(),
    )
}

#[test]
fn garbage_in_unused_fields_changes_nothing() {
    let clean = run_sequence(None);
    // Sanity: the sequence exercises successes and failures.
    let statuses: Vec<u8> = clean.0.iter().map(|c| c.status).collect();
    assert_eq!(
        statuses,
        [0, 0, 0, 0, 5, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 5, 2, 2, 4, 0, 0, 1]
    );
    assert_eq!((clean.3, clean.4, clean.5), (4200, 13, 1));
    assert_eq!(
        clean.6.iter().map(|(i, e)| (i, *e)).collect::<Vec<_>>(),
        [(
            1,
            GidEntry {
                net_type: NetType::Ipv4,
                gid: ipv4_gid([10, 0, 0, 1])
            }
        )]
    );
    assert_eq!(
        clean.7.iter().map(|(n, ah)| (n, *ah)).collect::<Vec<_>>(),
        [(
            5,
            AddressHandle {
                pdn: 2,
                av: ipv4_av(1, 7)
            }
        )]
    );
    for seed in [1, 0x1234_5678_9abc_def0, u64::MAX] {
        assert_eq!(run_sequence(Some(seed)), clean, "seed {seed:#x}");
    }
}

// ------------------------------------------------------------------------------------------------
// CQ/EQ arming
// ------------------------------------------------------------------------------------------------

#[test]
fn polling_mode_writes_cqes_but_no_eqes() {
    let mut t = driver();
    for _ in 0..5 {
        ok(&t.exec(Command::QueryDevice, |_| {}));
    }
    assert!(!t.poll_eqe());
    assert!(t.irq.raised.is_empty());
    assert_eq!(t.dev.cmdq_eq().unwrap().pi(), 0);
}

#[test]
fn armed_cq_gives_one_event_per_arm_and_the_eq_disarms() {
    let mut t = driver();
    ok(&t.exec(Command::QueryDevice, |_| {}));
    // Arm with everything consumed: nothing happens yet.
    t.arm_cq();
    assert!(t.irq.raised.is_empty());
    assert!(t.dev.cmdq_state().unwrap().2, "CQ armed");
    // Three commands in one doorbell: three CQEs, one EQE, one interrupt.
    for _ in 0..3 {
        t.queue(Command::QueryFwInfo.code(), |_| {});
    }
    t.ring();
    assert_eq!(t.take_irqs(), [0]);
    assert!(t.poll_eqe());
    assert!(!t.poll_eqe());
    for _ in 0..3 {
        ok(&t.poll_cqe().unwrap());
    }
    assert!(!t.dev.cmdq_state().unwrap().2, "CQ disarmed");
    assert!(!t.dev.cmdq_eq().unwrap().armed(), "EQ disarmed");
    // Not re-armed: the next command completes silently.
    ok(&t.exec(Command::QueryFwInfo, |_| {}));
    assert!(!t.poll_eqe());
    assert!(t.irq.raised.is_empty());
    // The driver's interrupt path: cmdsn++, arm the CQ, re-arm the EQ.
    t.cmdsn += 1;
    t.arm_cq();
    t.arm_eq();
    assert!(t.irq.raised.is_empty(), "nothing pending");
    ok(&t.exec(Command::QueryFwInfo, |_| {}));
    assert_eq!(t.take_irqs(), [0]);
    assert!(t.poll_eqe());
}

#[test]
fn arming_with_unseen_cqes_raises_the_event_at_once() {
    let mut t = driver();
    t.arm_cq();
    t.queue(Command::QueryDevice.code(), |_| {});
    t.ring();
    assert_eq!(t.take_irqs(), [0]);
    assert!(t.poll_eqe());
    // A CQE arrives between the driver's poll and its re-arm.
    t.queue(Command::QueryFwInfo.code(), |_| {});
    t.ring();
    ok(&t.poll_cqe().unwrap());
    // The arm names a CI before that CQE: the EQE is written at once; the EQ is still disarmed
    // (the driver has not re-armed it), so no interrupt yet.
    t.arm_cq();
    assert!(t.irq.raised.is_empty());
    assert_eq!(t.dev.cmdq_eq().unwrap().pi(), 2);
    assert!(!t.dev.cmdq_state().unwrap().2, "the arm was used up");
    // Re-arming the EQ with its CI before the new EQE fires at once.
    t.arm_eq();
    assert_eq!(t.take_irqs(), [0]);
    assert!(t.poll_eqe());
    assert!(!t.poll_eqe());
    // Re-arming with everything consumed does not fire.
    t.arm_eq();
    assert!(t.irq.raised.is_empty());
    assert!(t.dev.cmdq_eq().unwrap().armed());
}

#[test]
fn eqes_lap_the_cmdq_eq_with_the_owner_rule() {
    let clock = Arc::new(ManualClock::new());
    let mut t = small(clock); // CMDQ EQ of 4 entries
    for i in 0..10 {
        t.arm_cq();
        ok(&t.exec(Command::QueryFwInfo, |_| {}));
        assert!(t.poll_eqe(), "EQE {i}");
        assert!(!t.poll_eqe());
        t.cmdsn += 1;
        t.arm_eq();
    }
    assert_eq!(t.eq_ci, 10);
    // An EQ that the driver never drains overflows: further EQEs are dropped, not overwritten.
    for _ in 0..6 {
        t.arm_cq();
        ok(&t.exec(Command::QueryFwInfo, |_| {}));
    }
    assert_eq!(t.dev.cmdq_eq().unwrap().pi(), 14, "4 written, 2 dropped");
}

// ------------------------------------------------------------------------------------------------
// AEQ, CEQ
// ------------------------------------------------------------------------------------------------

#[test]
fn aeq_events() {
    let clock = Arc::new(ManualClock::new());
    let mut t = small(clock); // AEQ of 4 entries
    let ev = |d: u32| AeqEvent {
        ty: 3,
        subtype: 1,
        data0: d,
        data1: !d,
    };
    let mut io = Io::new(&mut t.mem, &mut t.irq);
    t.dev.post_aeqe(ev(1), &mut io).unwrap();
    t.dev.post_aeqe(ev(2), &mut io).unwrap();
    assert_eq!(t.take_irqs(), [0], "armed at INIT, fires once");
    assert_eq!(t.poll_aeqe(), Some(ev(1)));
    assert_eq!(t.poll_aeqe(), Some(ev(2)));
    assert_eq!(t.poll_aeqe(), None);
    t.arm_aeq();
    assert!(t.irq.raised.is_empty());
    // Through the control language, across the ring's end.
    for d in 3u32..=6 {
        t.control(&format!("aeq type=3 subtype=1 data0={d} data1={}", !d))
            .unwrap();
    }
    assert_eq!(t.take_irqs(), [0]);
    let e = t.control("aeq type=0 data0=1").unwrap_err();
    assert!(e.contains("full"), "{e}");
    for d in 3..=6 {
        assert_eq!(t.poll_aeqe(), Some(ev(d)));
    }
    t.arm_aeq();
    t.control("aeq type=4 data0=9").unwrap();
    assert_eq!(t.take_irqs(), [0]);
    assert_eq!(
        t.poll_aeqe(),
        Some(AeqEvent {
            ty: 4,
            subtype: 0,
            data0: 9,
            data1: 0
        })
    );
}

#[test]
fn ceq_events() {
    let mut t = driver();
    ok(&t.create_ceq(3, 5, 2)); // 4 entries, vector 5
    let mut io = Io::new(&mut t.mem, &mut t.irq);
    t.dev.post_ceqe(3, 0x12345, &mut io).unwrap();
    t.dev.post_ceqe(3, 7, &mut io).unwrap();
    assert_eq!(t.dev.post_ceqe(4, 1, &mut io), Err(PostError::NoSuchEq(4)));
    assert_eq!(t.dev.post_ceqe(0, 1, &mut io), Err(PostError::NoSuchEq(0)));
    assert_eq!(t.take_irqs(), [5]);
    assert_eq!(t.ceqe(3, 4, 0), (true, 0x12345));
    assert_eq!(t.ceqe(3, 4, 1), (true, 7));
    // Re-arm with CI 1: entry 1 is pending, so it fires at once.
    t.w64(eq_db(3), EqDoorbell { ci: 1, arm: true }.encode());
    assert_eq!(t.take_irqs(), [5]);
    t.w64(eq_db(3), EqDoorbell { ci: 2, arm: true }.encode());
    assert!(t.irq.raised.is_empty());
    // Lap: entries 2, 3, then 4 and 5 land in slots 0 and 1 with owner 0.
    for cqn in 2..6 {
        t.control(&format!("ceq eqn=3 cqn={cqn}")).unwrap();
    }
    assert_eq!(t.take_irqs(), [5]);
    assert_eq!(t.ceqe(3, 4, 4), (false, 4));
    assert_eq!(t.ceqe(3, 4, 5), (false, 5));
    assert_eq!(t.ceqe(3, 4, 3), (true, 3));
    let mut io = Io::new(&mut t.mem, &mut t.irq);
    assert_eq!(
        t.dev.post_ceqe(3, 6, &mut io),
        Err(PostError::Eq(EqError::Full))
    );
    let e = t.control("ceq eqn=9 cqn=1").unwrap_err();
    assert!(e.contains("no CEQ with EQN 9"), "{e}");
    // A doorbell for a CEQ that does not exist is ignored.
    t.w64(eq_db(9), EqDoorbell { ci: 0, arm: true }.encode());
    assert!(t.irq.raised.is_empty());
    // After DESTROY_EQ the CEQ gets nothing.
    ok(&destroy_eq(&mut t, 3));
    assert!(t.control("ceq eqn=3 cqn=1").is_err());
}

#[test]
fn events_need_an_initialized_device() {
    let mut t = TestDriver::new(DeviceConfig::default());
    let mut io = Io::new(&mut t.mem, &mut t.irq);
    let ev = AeqEvent {
        ty: 0,
        subtype: 0,
        data0: 0,
        data1: 0,
    };
    assert_eq!(t.dev.post_aeqe(ev, &mut io), Err(PostError::NotInitialized));
    assert_eq!(
        t.dev.post_ceqe(1, 1, &mut io),
        Err(PostError::NotInitialized)
    );
    assert!(t.control("aeq type=0 data0=0").is_err());
    // Doorbells before INIT do nothing.
    t.w64(CMDQ_SQ_DB, 4);
    t.w64(CMDQ_CQ_DB, 1 << 31);
    t.w64(AEQ_DB, 1 << 31);
    assert!(t.irq.raised.is_empty());
    assert_eq!(t.dev.commands_processed(), 0);
    assert!(!PostError::NotInitialized.to_string().is_empty());
}

// ------------------------------------------------------------------------------------------------
// Fault injection
// ------------------------------------------------------------------------------------------------

#[test]
fn fail_rules_skip_count_and_do_not_execute() {
    let mut t = driver();
    t.control("fail COMMON.QUERY_FW_INFO status=9 count=2 skip=1")
        .unwrap();
    let s: Vec<u8> = (0..4)
        .map(|_| t.exec(Command::QueryFwInfo, |_| {}).status)
        .collect();
    assert_eq!(s, [0, 9, 9, 0]);
    assert!(t.dev.fault_rules().is_empty());
    // A failed command is not executed.
    t.control("fail 1.0 status=3").unwrap();
    let c = t.create_ceq(1, 1, 4);
    status(&c, Status::NoResources);
    assert!(t.dev.ceqs().is_empty());
    ok(&t.create_ceq(1, 1, 4));
    // `any` and failing an unsupported opcode.
    t.control("fail any status=200 count=2").unwrap();
    assert_eq!(t.exec(Command::CreateQp, |_| {}).status, 200);
    assert_eq!(t.exec(Command::QueryDevice, |_| {}).status, 200);
    ok(&t.exec(Command::QueryDevice, |_| {}));
    // clear drops rules.
    t.control("fail any status=1 count=forever").unwrap();
    assert_eq!(t.exec(Command::QueryDevice, |_| {}).status, 1);
    assert_eq!(t.control("query rules"), Ok("rules=1".into()));
    t.control("clear").unwrap();
    ok(&t.exec(Command::QueryDevice, |_| {}));
    assert_eq!(t.control("query rules"), Ok("rules=0".into()));
}

#[test]
fn delayed_completions_complete_later_and_out_of_order() {
    let clock = Arc::new(ManualClock::new());
    let mut t = TestDriver::with(DeviceConfig::default(), clock.clone(), 512, 128, 4096);
    assert!(t.init());
    t.arm_cq();
    t.control("delay RDMA.QUERY_DEVICE ms=100").unwrap();
    let first = t.queue(Command::QueryDevice.code(), |_| {});
    let second = t.queue(Command::QueryFwInfo.code(), |_| {});
    t.ring();
    // Only the second command has completed.
    let c = t.poll_cqe().unwrap();
    assert_eq!((c.start, c.opcode), (second.into(), 2));
    assert_eq!(t.poll_cqe(), None);
    assert_eq!(t.take_irqs(), [0]);
    assert!(t.poll_eqe());
    assert_eq!(t.dev.next_deadline(), Some(Duration::from_millis(100)));
    assert_eq!(
        t.dev.time_until_deadline(),
        Some(Duration::from_millis(100))
    );
    clock.advance(Duration::from_millis(99));
    assert_eq!(t.run_due(), 0);
    assert_eq!(t.dev.time_until_deadline(), Some(Duration::from_millis(1)));
    t.cmdsn += 1;
    t.arm_cq();
    t.arm_eq();
    clock.advance(Duration::from_millis(1));
    assert_eq!(t.run_due(), 1);
    let c = t.poll_cqe().unwrap();
    ok(&c);
    assert_eq!(c.start, first.into());
    assert_eq!(c.resp0, t.dev.device_config().caps.query_device().0);
    assert_eq!(t.take_irqs(), [0], "the late CQE raises the event");
    assert_eq!(t.dev.next_deadline(), None);

    // Several delayed completions come out in deadline order, ties in command order.
    t.control("delay any ms=30 count=2").unwrap();
    t.control("delay any ms=10 count=2").unwrap();
    let starts: Vec<u16> = (0..4)
        .map(|_| t.queue(Command::QueryFwInfo.code(), |_| {}))
        .collect();
    // Rule order: the first two commands hit the 30 ms rule, the next two the 10 ms rule.
    t.ring();
    assert_eq!(t.poll_cqe(), None);
    assert_eq!(t.dev.delayed_completions(), 4);
    clock.advance(Duration::from_millis(50));
    assert_eq!(t.run_due(), 4);
    let order: Vec<u32> = std::iter::from_fn(|| t.poll_cqe())
        .map(|c| c.start)
        .collect();
    let want: Vec<u32> = [2, 3, 0, 1].iter().map(|&i| starts[i].into()).collect();
    assert_eq!(order, want);

    // A delayed command is executed at once; only its completion waits.
    t.control("delay COMMON.CREATE_EQ ms=5").unwrap();
    t.queue(Command::CreateEq.code(), |s| {
        create_eq_req(6, 6, 4).write_fields(s)
    });
    t.ring();
    assert_eq!(t.dev.ceqs(), [6]);
    assert_eq!(t.poll_cqe(), None);
    // RESET drops it.
    t.w32(DEV_CTRL, DEV_CTRL_RESET);
    assert_eq!(t.dev.delayed_completions(), 0);
    assert_eq!(t.dev.next_deadline(), None);
}

/// `run_due` writes at most `MAX_DUE_BATCH` delayed completions per call (bounded work under
/// the device lock); the deadline stays at zero until all are out, in command order.
#[test]
fn run_due_does_bounded_work_per_call() {
    use super::cmdq_engine::MAX_DUE_BATCH;
    let clock = Arc::new(ManualClock::new());
    let mut t = TestDriver::with(DeviceConfig::default(), clock.clone(), 512, 128, 4096);
    assert!(t.init());
    t.control("delay any ms=1 count=forever").unwrap();
    // The SQ holds 128 commands; the device fetches them at once, so three rounds make 384.
    let mut starts = Vec::new();
    for _ in 0..3 {
        for _ in 0..128 {
            starts.push(t.queue(Command::QueryFwInfo.code(), |_| {}));
        }
        t.ring();
    }
    let n = starts.len();
    assert!(n > MAX_DUE_BATCH);
    assert_eq!(t.dev.delayed_completions(), n);
    clock.advance(Duration::from_millis(1));
    assert_eq!(t.run_due(), MAX_DUE_BATCH);
    assert_eq!(
        t.dev.time_until_deadline(),
        Some(Duration::ZERO),
        "more due"
    );
    assert_eq!(t.run_due(), n - MAX_DUE_BATCH);
    assert_eq!(t.dev.next_deadline(), None);
    let got: Vec<u32> = std::iter::from_fn(|| t.poll_cqe())
        .map(|c| c.start)
        .collect();
    // The CMDQ CQ holds 512 entries: all 384 are there, in command order.
    let want: Vec<u32> = starts.iter().map(|&s| u32::from(s)).collect();
    assert_eq!(got, want);
}

#[test]
fn refuse_init() {
    let mut t = TestDriver::new(DeviceConfig::default());
    t.control("refuse-init").unwrap();
    assert!(!t.init());
    assert_eq!(t.control("query init_done"), Ok("init_done=0".into()));
    t.control("refuse-init off").unwrap();
    assert!(t.init());
    assert_eq!(t.control("query init_done"), Ok("init_done=1".into()));
    // `clear` also ends refuse-init.
    t.w32(DEV_CTRL, DEV_CTRL_RESET);
    t.control("refuse-init on").unwrap();
    assert!(!t.init());
    t.control("clear").unwrap();
    assert!(t.init());
}

#[test]
fn fatal_drops_everything_until_a_reset() {
    let mut t = driver();
    ok(&t.create_ceq(1, 1, 4));
    ok(&alloc_db(&mut t));
    t.control("fatal").unwrap();
    // DEV_STATUS says the function lost its initialisation (no RESET_DONE either).
    assert_eq!(t.r32(DEV_STATUS), 0);
    assert_eq!(t.control("query init_done"), Ok("init_done=0".into()));
    assert_eq!(t.control("query eqs"), Ok("eqs=".into()));
    // A command is neither fetched nor completed, and nothing is signalled.
    let before = t.control("query cmds").unwrap();
    t.take_irqs();
    t.queue(code(1, 4), |_| {});
    t.ring();
    assert_eq!(t.poll_cqe(), None);
    assert_eq!(t.control("query cmds").unwrap(), before);
    assert!(t.take_irqs().is_empty());
    // A reset and INIT bring the function back, empty.
    t.w32(DEV_CTRL, DEV_CTRL_RESET);
    assert!(t.init());
    ok(&t.create_ceq(1, 1, 4));
    ok(&alloc_db(&mut t));
}

#[test]
fn gone_reads_all_ones_until_power_on() {
    let mut t = driver();
    ok(&t.create_ceq(1, 1, 4));
    t.control("gone").unwrap();
    assert_eq!(t.r32(VERSION), u32::MAX);
    assert_eq!(t.r32(DEV_STATUS), u32::MAX);
    let mut msix = [0u8; 4];
    t.dev.bar2_read(0, &mut msix);
    assert_eq!(msix, [0xff; 4]);
    // Writes go nowhere: no reset, no command, no interrupt.
    t.take_irqs();
    t.w32(DEV_CTRL, DEV_CTRL_RESET);
    t.queue(code(1, 4), |_| {});
    t.ring();
    assert_eq!(t.poll_cqe(), None);
    assert!(t.take_irqs().is_empty());
    assert_eq!(t.r32(DEV_STATUS), u32::MAX);
    // A power-on reset (a new VM) brings the function back.
    t.dev.reset();
    assert_ne!(t.r32(VERSION), u32::MAX);
    assert!(t.init());
    ok(&t.create_ceq(1, 1, 4));
}

#[test]
fn die_asks_the_server_to_exit() {
    let mut t = driver();
    assert!(!t.dev.take_exit_request());
    assert_eq!(t.control("die now"), Err("die takes no arguments".into()));
    assert!(!t.dev.take_exit_request());
    t.control("die").unwrap();
    assert!(t.dev.take_exit_request());
    // Taken: asked once.
    assert!(!t.dev.take_exit_request());
}

#[test]
fn queries() {
    let mut t = driver();
    ok(&t.create_ceq(2, 2, 4));
    ok(&t.create_ceq(1, 1, 4));
    ok(&conf_mtu(&mut t, 1500));
    ok(&alloc_db(&mut t));
    ok(&add_gid(
        &mut t,
        10,
        NetType::Ipv4,
        ipv4_gid([172, 16, 0, 1]),
    ));
    ok(&add_gid(&mut t, 2, NetType::Ipv6, v6_gid(0xab)));
    ok(&create_ah(&mut t, 1, 4, ipv4_av(2, 1)));
    t.control("stats rx_bytes=42").unwrap();
    t.control("fail RDMA.CREATE_QP status=1").unwrap();
    assert_eq!(t.control("query eqs"), Ok("eqs=1,2".into()));
    assert_eq!(t.control("query cmds"), Ok("cmds=7".into()));
    assert_eq!(
        t.control("query gids"),
        Ok("gids=2:ipv6:fe8000000000000000000000000000ab,\
            10:ipv4:00000000000000000000ffffac100001"
            .into()),
        "sorted by index"
    );
    assert_eq!(t.control("query ahs"), Ok("ahs=1".into()));
    assert_eq!(
        t.control("query stats"),
        Ok(
            "tx_reqs=0 tx_packets=0 tx_bytes=0 tx_disable_drop=0 tx_bps_limit_drop=0 \
             tx_pps_limit_drop=0 rx_packets=0 rx_bytes=42 rx_disable_drop=0 \
             rx_bps_limit_drop=0 rx_pps_limit_drop=0"
                .into()
        )
    );
    assert_eq!(
        t.control("query all"),
        Ok(
            "mtu=1500 page_shift=12 eqs=1,2 cmds=7 init_done=1 dbs=1 ahs=1 rules=1 tx_reqs=0 \
            tx_packets=0 tx_bytes=0 tx_disable_drop=0 tx_bps_limit_drop=0 tx_pps_limit_drop=0 \
            rx_packets=0 rx_bytes=42 rx_disable_drop=0 rx_bps_limit_drop=0 rx_pps_limit_drop=0"
                .into()
        )
    );
    let fresh = TestDriver::new(DeviceConfig::default()).control("query eqs");
    assert_eq!(fresh, Ok("eqs=".into()));
    assert!(t
        .control("bogus")
        .unwrap_err()
        .starts_with("unknown command"));
    assert_eq!(
        control::format_reply(&t.control("query mtu")),
        "ok mtu=1500"
    );
}

#[test]
fn startup_commands_apply_at_power_on_and_after_reset_harness() {
    let startup = ["fail RDMA.QUERY_DEVICE status=4", "stats tx_reqs=9"]
        .iter()
        .map(|l| control::parse(l).unwrap())
        .collect();
    let mut t = driver_with(DeviceConfig {
        startup,
        ..Default::default()
    });
    assert_eq!(t.exec(Command::QueryDevice, |_| {}).status, 4);
    ok(&t.exec(Command::QueryDevice, |_| {}));
    assert_eq!(t.dev.stats_counters().tx_reqs, 9);
    t.control("stats tx_reqs=1").unwrap();
    t.control("fail any status=1 count=forever").unwrap();
    // A device reset keeps the control state...
    t.dev.reset();
    assert_eq!(t.dev.fault_rules().len(), 1);
    assert_eq!(t.dev.stats_counters().tx_reqs, 1);
    // ...a new client gets the start-up state again.
    t.dev.reset_harness();
    assert_eq!(t.dev.stats_counters().tx_reqs, 9);
    assert_eq!(t.dev.commands_processed(), 0);
    let rules = t.dev.fault_rules().rules();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0].to_string(),
        "fail RDMA.QUERY_DEVICE status=4 count=1 skip=0"
    );
}

// ------------------------------------------------------------------------------------------------
// Test page
// ------------------------------------------------------------------------------------------------

pub(super) fn tp_command(t: &mut TestDriver, cmd: &str) -> (u32, String) {
    let mut bytes = cmd.as_bytes().to_vec();
    bytes.push(0);
    while bytes.len() % 4 != 0 {
        bytes.push(0);
    }
    for (i, chunk) in bytes.chunks(4).enumerate() {
        let off = TEST_PAGE_BASE + test_page::MAILBOX + 4 * i as u64;
        t.write(off, chunk);
    }
    t.w32(TEST_PAGE_BASE + test_page::EXECUTE, 1);
    let status = t.r32(TEST_PAGE_BASE + test_page::STATUS);
    let reply = t.read(TEST_PAGE_BASE + test_page::REPLY, 256);
    let end = reply.iter().position(|&b| b == 0).unwrap();
    (status, String::from_utf8(reply[..end].to_vec()).unwrap())
}

#[test]
fn test_page_runs_commands() {
    let mut t = TestDriver::new(DeviceConfig {
        test_page: true,
        ..Default::default()
    });
    let base = TEST_PAGE_BASE;
    assert_eq!(t.r32(base), test_page::MAGIC_VALUE);
    assert_eq!(t.read(base, 4), b"TEST");
    assert_eq!(t.read(base + 1, 2), b"ES");
    assert_eq!(t.read(base, 1), b"T");
    assert_eq!(t.read(base, 8), [b'T', b'E', b'S', b'T', 0, 0, 0, 0]);
    assert_eq!(t.r32(base + test_page::STATUS), 0);
    assert_eq!(
        tp_command(&mut t, "query init_done"),
        (0, "ok init_done=0".into())
    );
    assert!(t.init());
    assert_eq!(
        tp_command(&mut t, "query init_done"),
        (0, "ok init_done=1".into())
    );
    let (s, r) = tp_command(&mut t, "frobnicate");
    assert_eq!(s, 1);
    assert!(r.starts_with("error: unknown command"), "{r}");
    // The mailbox reads back; the reply is cleared between commands.
    assert_eq!(t.read(base + test_page::MAILBOX, 4), b"frob");
    assert_eq!(tp_command(&mut t, "clear"), (0, "ok".into()));
    // A rule set from inside the guest applies to the CMDQ.
    assert_eq!(
        tp_command(&mut t, "fail RDMA.QUERY_DEVICE status=6"),
        (0, "ok".into())
    );
    assert_eq!(t.exec(Command::QueryDevice, |_| {}).status, 6);
    // 8-byte write of EXECUTE = 1 runs; other values do not.
    t.write(base + test_page::MAILBOX, b"query mtu\0");
    t.w64(base + test_page::EXECUTE, 1);
    assert_eq!(t.read(base + test_page::REPLY, 9), b"ok mtu=0\0");
    t.write(base + test_page::MAILBOX, b"bogus\0");
    t.w32(base + test_page::EXECUTE, 2);
    t.write(base + test_page::EXECUTE + 1, &[1]);
    assert_eq!(t.r32(base + test_page::STATUS), 0, "not run");
    t.write(base + test_page::EXECUTE, &[1]);
    assert_eq!(
        t.r32(base + test_page::STATUS),
        1,
        "a 1-byte write of 1 runs"
    );
    // A mailbox without NUL, non-ASCII.
    t.write(base + test_page::MAILBOX, &[b'x'; 256]);
    t.w32(base + test_page::EXECUTE, 1);
    assert_eq!(t.r32(base + test_page::STATUS), 1);
    t.write(base + test_page::MAILBOX, &[0xc3, 0xa9, 0]);
    t.w32(base + test_page::EXECUTE, 1);
    assert_eq!(t.r32(base + test_page::STATUS), 1);
    // Read-only parts ignore writes; EXECUTE reads 0.
    t.w32(base, 0);
    t.w32(base + test_page::STATUS, 0);
    t.write(base + test_page::REPLY, b"zz");
    assert_eq!(t.r32(base), test_page::MAGIC_VALUE);
    assert_eq!(t.r32(base + test_page::STATUS), 1);
    assert_eq!(t.r32(base + test_page::EXECUTE), 0);
    assert_eq!(t.read(base + test_page::REPLY, 5), b"error");
    assert_eq!(t.r32(base + 0x800), 0, "unused");
    // A long reply is cut to 255 bytes plus NUL.
    let (s, r) = tp_command(&mut t, "query all");
    assert_eq!(s, 0);
    assert!(r.len() <= 255 && r.starts_with("ok mtu=0"), "{r}");
    assert!(r.contains(" dbs=0 ahs=0 rules="), "{r}");
    // `query gids` holds six entries with two-digit indices.
    t.control("clear").unwrap();
    for i in 10..16 {
        ok(&add_gid(&mut t, i, NetType::Ipv6, v6_gid(i as u8)));
    }
    let full = t.control("query gids").unwrap();
    let (s, r) = tp_command(&mut t, "query gids");
    assert_eq!((s, r.len()), (0, 253));
    assert_eq!(r, format!("ok {full}"));
    assert!(
        r.ends_with(",15:ipv6:fe80000000000000000000000000000f"),
        "{r}"
    );
    // A seventh is cut.
    ok(&add_gid(&mut t, 9, NetType::Ipv6, v6_gid(9)));
    let (_, r) = tp_command(&mut t, "query gids");
    assert_eq!(r.len(), 255);
    // The harness survives RESET, a new client clears it.
    t.w32(DEV_CTRL, DEV_CTRL_RESET);
    assert_eq!(t.read(base + test_page::MAILBOX, 5), b"query");
    t.dev.reset_harness();
    assert_eq!(t.read(base + test_page::MAILBOX, 4), [0; 4]);
}

#[test]
fn test_page_is_off_by_default() {
    let mut t = TestDriver::new(DeviceConfig::default());
    assert_eq!(t.r32(TEST_PAGE_BASE), 0);
    t.write(TEST_PAGE_BASE + test_page::MAILBOX, b"clear\0");
    t.w32(TEST_PAGE_BASE + test_page::EXECUTE, 1);
    assert_eq!(t.r32(TEST_PAGE_BASE + test_page::STATUS), 0);
    let w = t.dev.last_db_space_write().unwrap();
    assert_eq!(w.area, Bar0Area::ExtDoorbells, "plain doorbell space");
    // With the page enabled, an access crossing into it from the doorbell space is ignored.
    let mut t = TestDriver::new(DeviceConfig {
        test_page: true,
        ..Default::default()
    });
    t.write(TEST_PAGE_BASE - 4, &[1; 8]);
    assert_eq!(t.dev.last_db_space_write(), None);
    t.w64(TEST_PAGE_BASE - 8, 1);
    assert_eq!(
        t.dev.last_db_space_write().unwrap().area,
        Bar0Area::ExtDoorbells
    );
}

// ------------------------------------------------------------------------------------------------
// Reset
// ------------------------------------------------------------------------------------------------

#[test]
fn reset_returns_engines_to_power_on() {
    let clock = Arc::new(ManualClock::new());
    let mut t = TestDriver::with(DeviceConfig::default(), clock, 512, 128, 4096);
    for round in 0..2 {
        assert!(t.init(), "round {round}");
        ok(&t.create_ceq(1, 1, 4));
        ok(&t.create_ceq(7, 3, 4));
        ok(&conf_mtu(&mut t, 1500));
        ok(&conf_device(&mut t, true, 13));
        ok(&alloc_db(&mut t));
        ok(&add_gid(&mut t, 0, NetType::Ipv6, v6_gid(1)));
        ok(&add_gid(&mut t, 1, NetType::Ipv4, ipv4_gid([10, 0, 0, 1])));
        ok(&create_ah(&mut t, 1, 3, ipv4_av(1, 2)));
        t.arm_cq();
        t.control("delay any ms=10").unwrap();
        t.queue(Command::QueryDevice.code(), |_| {});
        t.ring();
        t.control("fail RDMA.QUERY_QP status=1").unwrap();
        assert_eq!(t.dev.delayed_completions(), 1);
        let cancels = t.irq.cancels;
        if round == 0 {
            t.w32(DEV_CTRL, DEV_CTRL_RESET);
            assert_eq!(t.r32(DEV_STATUS), DEV_STATUS_RESET_DONE);
            assert_eq!(t.irq.cancels, cancels + 1, "pending MSI-X dropped");
        } else {
            t.dev.reset();
            assert_eq!(t.r32(DEV_STATUS), 0);
        }
        assert_eq!(t.dev.admin_queues(), None);
        assert!(t.dev.ceqs().is_empty());
        assert_eq!(t.dev.cmdq_state(), None);
        assert_eq!(t.dev.mtu(), 0);
        assert_eq!(t.dev.db_pages().page_shift(), 12);
        assert!(t.dev.db_pages().contexts().is_empty());
        assert!(t.dev.gid_table().is_empty(), "GID table cleared");
        assert!(t.dev.address_handles().is_empty(), "AHs cleared");
        assert_eq!(t.dev.delayed_completions(), 0);
        assert_eq!(t.dev.fault_rules().len(), 1, "rules are harness state");
        t.control("clear").unwrap();
        // Clear the rings as a new driver instance would allocate zeroed ones.
        t.mem.bytes_mut().fill(0);
        t.take_irqs();
        // After INIT the indices start at 0 again.
        assert!(t.init());
        let c = t.exec(Command::QueryFwInfo, |_| {});
        assert_eq!((c.start, c.owner), (0, true));
        assert_eq!(t.dev.cmdq_state(), Some((4, 1, false)));
        assert!(t.irq.raised.is_empty(), "polling mode again");
        t.w32(DEV_CTRL, DEV_CTRL_RESET);
        t.mem.bytes_mut().fill(0);
    }
}
