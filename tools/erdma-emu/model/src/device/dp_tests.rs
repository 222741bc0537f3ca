// SPDX-License-Identifier: GPL-2.0

//! Data-path tests: objects and their commands, doorbells, the RC engine, CQs and the fabric.

use std::sync::Arc;

use crate::clock::ManualClock;
use crate::cmdq::{AddressVector, Command, ConfMtu, Gid, NetType, Status};
use crate::device::{DeviceConfig, Protocol, RETRY_COUNT, RETRY_TIMEOUT};
use crate::io::GuestMemory;
use crate::regs;
use crate::stats::Counter;
use crate::testing::dp::{self, fabric, pump, Wqe, ALL_ACCESS, PDN};
use crate::testing::{ipv4_gid, TestDriver};
use crate::wire::AeqEvent;
use crate::wire::{
    self, access, op, wc, CqeExtra, CreateQp, DataCqe, ModifyQpRoce, QpState, QueueMttCfg, RegMr,
    RqDoorbell, Sge, SqDoorbell, UdInfo, CQE_QTYPE_RQ, CQE_QTYPE_SQ, QP_TYPE_RC, QP_TYPE_UD,
};

const CQ: u32 = 1;

fn stag(index: u32, key: u8) -> u32 {
    wire::stag(index, key)
}

/// One device, host 1, CQ 1 (64 CQEs), QP 10 ↔ QP 11 looped back on itself, MR 1 over a 64 KiB
/// buffer with every right. Returns the driver and the buffer address.
fn loopback() -> (TestDriver, u64) {
    loopback_on(&Arc::new(ManualClock::new()))
}

/// A device whose delayed work (retransmission timers) runs on `clock`.
fn on(clock: &Arc<ManualClock>) -> TestDriver {
    TestDriver::with(DeviceConfig::default(), clock.clone(), 512, 128, 4096)
}

/// [`loopback`] on `clock`.
fn loopback_on(clock: &Arc<ManualClock>) -> (TestDriver, u64) {
    let mut d = on(clock);
    let f = fabric();
    d.attach(&f);
    d.dp_setup(1);
    assert_eq!(d.create_cq(CQ, 6).status, 0);
    assert_eq!(d.create_qp(10, CQ, 8, 6).status, 0);
    assert_eq!(d.create_qp(11, CQ, 8, 6).status, 0);
    d.connect(10, 1, 11);
    d.connect(11, 1, 10);
    let buf = d.alloc(0x1_0000, 0x1000);
    assert_eq!(d.reg_mr(1, 0, PDN, buf, 0x1_0000, ALL_ACCESS).status, 0);
    // Keep the fabric alive through the device's port.
    drop(f);
    (d, buf)
}

/// Two devices (hosts 1 and 2) with CQ 1, QP 10 on each connected to each other, and MR 1
/// (64 KiB, all rights) on each.
fn pair() -> (TestDriver, TestDriver, u64, u64) {
    pair_on(&Arc::new(ManualClock::new()))
}

/// [`pair`] on `clock`.
fn pair_on(clock: &Arc<ManualClock>) -> (TestDriver, TestDriver, u64, u64) {
    let f = fabric();
    let mut a = on(clock);
    let mut b = on(clock);
    a.attach(&f);
    b.attach(&f);
    a.dp_setup(1);
    b.dp_setup(2);
    let mut bufs = [0u64; 2];
    for (d, buf) in [&mut a, &mut b].into_iter().zip(bufs.iter_mut()) {
        assert_eq!(d.create_cq(CQ, 6).status, 0);
        assert_eq!(d.create_qp(10, CQ, 8, 6).status, 0);
        *buf = d.alloc(0x1_0000, 0x1000);
        assert_eq!(d.reg_mr(1, 0, PDN, *buf, 0x1_0000, ALL_ACCESS).status, 0);
    }
    a.connect(10, 2, 10);
    b.connect(10, 1, 10);
    (a, b, bufs[0], bufs[1])
}

fn pump1(d: &mut TestDriver) {
    pump(&mut [d]);
}

fn pump2(a: &mut TestDriver, b: &mut TestDriver) {
    pump(&mut [a, b]);
}

/// Moves `clock` by one retransmission timeout and runs the due work and the fabric of `ds`.
fn tick(clock: &ManualClock, ds: &mut [&mut TestDriver]) {
    clock.advance(RETRY_TIMEOUT);
    for d in ds.iter_mut() {
        d.run_due();
    }
    pump(ds);
}

/// A lost request's completion: nothing at first nor after `RETRY_COUNT` retransmissions,
/// then "retry exceeded" when the last one times out.
fn times_out(clock: &ManualClock, ds: &mut [&mut TestDriver]) {
    pump(ds);
    for _ in 0..RETRY_COUNT {
        assert!(
            ds[0].poll(CQ).is_none(),
            "completed before the retries ran out"
        );
        tick(clock, ds);
    }
    assert!(
        ds[0].poll(CQ).is_none(),
        "completed before the retries ran out"
    );
    tick(clock, ds);
    assert_eq!(ds[0].poll(CQ).unwrap().status, wc::RETRY_EXCEEDED);
}

fn sge(addr: u64, len: u32) -> Sge {
    Sge {
        addr,
        len,
        key: stag(1, 0),
    }
}

fn sq_cqe(cqes: &[DataCqe], qpn: u32) -> Vec<DataCqe> {
    cqes.iter()
        .filter(|c| c.qpn == qpn && c.qtype == CQE_QTYPE_SQ)
        .copied()
        .collect()
}

// ------------------------------------------------------------------------------------------------
// Commands
// ------------------------------------------------------------------------------------------------

#[test]
fn cq_commands_validate() {
    let mut d = TestDriver::new(DeviceConfig::default());
    d.dp_setup(1);
    assert_eq!(d.create_cq(0, 6).status, Status::InvalidParam.code());
    assert_eq!(d.create_cq(2 * 4096, 6).status, Status::InvalidParam.code());
    assert_eq!(d.create_cq(1, 23).status, Status::InvalidParam.code());
    assert_eq!(d.create_cq(1, 6).status, 0);
    assert_eq!(d.create_cq(1, 6).status, Status::Exists.code());
    // EQN that is not a CEQ.
    let mut req = crate::wire::CreateCq {
        cqn: 2,
        depth_log2: 4,
        buf: QueueMttCfg {
            page_shift: 12,
            level: 1,
            count: 2,
            offset: 0,
            addr: 0xdead_0000_0000,
            more: [0; 3],
        },
        eqn: 5,
        ext_db: false,
        dbrec: 0,
        db_page: 0,
    };
    let c = d.exec(crate::cmdq::Command::CreateCq, |s| req.write_fields(s));
    assert_eq!(c.status, Status::InvalidParam.code());
    req.eqn = 1;
    let c = d.exec(crate::cmdq::Command::CreateCq, |s| req.write_fields(s));
    assert_eq!(c.status, Status::DmaError.code(), "level-1 MTT unreadable");
    assert_eq!(d.dev.cqs(), [1]);
    let c = d.exec(crate::cmdq::Command::DestroyCq, |s| {
        wire::U32Arg(1).write_fields(s)
    });
    assert_eq!(c.status, 0);
    let c = d.exec(crate::cmdq::Command::DestroyCq, |s| {
        wire::U32Arg(1).write_fields(s)
    });
    assert_eq!(c.status, Status::NotFound.code());
}

#[test]
fn qp_commands_validate_and_state_machine() {
    let mut d = TestDriver::new(DeviceConfig::default());
    d.dp_setup(1);
    assert_eq!(
        d.create_qp(5, CQ, 8, 6).status,
        Status::NotFound.code(),
        "no CQ"
    );
    assert_eq!(d.create_cq(CQ, 6).status, 0);
    assert_eq!(d.create_qp(0, CQ, 8, 6).status, Status::InvalidParam.code());
    assert_eq!(
        d.create_qp(4096, CQ, 8, 6).status,
        Status::InvalidParam.code()
    );
    assert_eq!(
        d.create_qp(5, CQ, 16, 6).status,
        Status::InvalidParam.code()
    );
    assert_eq!(
        d.create_qp(5, CQ, 8, 14).status,
        Status::InvalidParam.code()
    );
    assert_eq!(d.create_qp(5, CQ, 8, 6).status, 0);
    assert_eq!(d.create_qp(5, CQ, 8, 6).status, Status::Exists.code());
    // The SQ buffer must hold the queue: 2^8 WQEBBs do not fit one 4 KiB page.
    let mut req = CreateQp {
        qpn: 6,
        sq_depth_log2: 8,
        rq_depth_log2: 2,
        pdn: 1,
        send_cqn: CQ,
        recv_cqn: CQ,
        ext_db: false,
        sq: QueueMttCfg {
            page_shift: 12,
            level: 0,
            count: 1,
            offset: 0,
            addr: 0x1000,
            more: [0; 3],
        },
        rq: QueueMttCfg {
            page_shift: 12,
            level: 0,
            count: 1,
            offset: 0,
            addr: 0x2000,
            more: [0; 3],
        },
        sq_dbrec: 0,
        rq_dbrec: 0,
        db_pages: (0, 0),
        qp_type: QP_TYPE_RC,
    };
    assert_eq!(d.create_qp_raw(&req).status, Status::InvalidParam.code());
    req.sq.count = 2;
    req.sq.more[0] = 0x3000;
    assert_eq!(d.create_qp_raw(&req).status, 0, "two inline pages");
    req.qpn = 7;
    req.qp_type = 3;
    assert_eq!(d.create_qp_raw(&req).status, Status::InvalidParam.code());
    req.qp_type = QP_TYPE_UD;
    assert_eq!(d.create_qp_raw(&req).status, 0, "UD is accepted");

    // State machine.
    assert_eq!(
        d.modify_state(5, QpState::Rts).status,
        Status::InvalidParam.code()
    );
    assert_eq!(d.modify_state(5, QpState::Init).status, 0);
    assert_eq!(d.modify_state(5, QpState::Init).status, 0, "same state");
    assert_eq!(d.modify_state(5, QpState::Rtr).status, 0);
    assert_eq!(d.modify_state(5, QpState::Rts).status, 0);
    assert_eq!(d.modify_state(5, QpState::Sqd).status, 0);
    assert_eq!(d.modify_state(5, QpState::Rts).status, 0);
    assert_eq!(
        d.modify_state(5, QpState::Init).status,
        Status::InvalidParam.code()
    );
    assert_eq!(
        d.modify_state(99, QpState::Init).status,
        Status::NotFound.code()
    );
    let bad = ModifyQpRoce {
        qpn: 5,
        state: 9,
        dst_qpn: 0,
        mask: wire::qp_mask::STATE,
        qkey: 0,
        rq_psn: 0,
        sq_psn: 0,
        av: crate::testing::ipv4_av(0, 1),
    };
    assert_eq!(d.modify_qp(&bad).status, Status::InvalidParam.code());
    // PSNs without a state change, then QUERY_QP.
    let psn = ModifyQpRoce {
        mask: wire::qp_mask::SQ_PSN | wire::qp_mask::RQ_PSN,
        sq_psn: 0x1ab_cdef,
        rq_psn: 0x12_3456,
        ..bad
    };
    assert_eq!(d.modify_qp(&psn).status, 0);
    let q = d.query_qp(5);
    assert_eq!(q.status, 0);
    assert_eq!(
        q.resp0,
        wire::query_qp_resp0(0xab_cdef, 0x12_3456, QpState::Rts, false)
    );
    assert_eq!(q.resp0 >> 48 & 0xff, 3);
    assert_eq!(d.query_qp(77).status, Status::NotFound.code());
    assert_eq!(d.modify_state(5, QpState::Error).status, 0);
    assert_eq!(d.modify_state(5, QpState::Reset).status, 0);
    assert_eq!(
        d.control("query qps"),
        Ok("qps=5:RESET,6:RESET,7:RESET".into())
    );
    assert_eq!(d.control("query objects"), Ok("objects=3/1/0/0".into()));
    let c = d.exec(crate::cmdq::Command::DestroyQp, |s| {
        wire::U32Arg(5).write_fields(s)
    });
    assert_eq!(c.status, 0);
    let c = d.exec(crate::cmdq::Command::DestroyQp, |s| {
        wire::U32Arg(5).write_fields(s)
    });
    assert_eq!(c.status, Status::NotFound.code());
}

#[test]
fn iwarp_has_cqs_mrs_and_rc_qps() {
    let mut d = TestDriver::new(DeviceConfig {
        protocol: Protocol::Iwarp,
        ..DeviceConfig::default()
    });
    assert!(d.init());
    assert_eq!(d.create_ceq(1, 1, 8).status, 0);
    assert_eq!(d.create_cq(CQ, 6).status, 0);
    // RC QPs exist on iWARP (device/iwarp_tests.rs has their data path); UD ones do not.
    assert_eq!(d.create_qp(5, CQ, 8, 6).status, 0);
    assert_eq!(
        d.create_ud_qp(6, CQ, 8, 6, 1).status,
        Status::Unsupported.code()
    );
    let buf = d.alloc(0x2000, 0x1000);
    assert_eq!(d.reg_mr(3, 7, 1, buf, 0x2000, ALL_ACCESS).status, 0);
    assert_eq!(d.dev.mrs(), [stag(3, 7)]);
    assert_eq!(d.dereg_mr(stag(3, 7)).status, 0);
    assert_eq!(d.query_qp(5).status, 0);
    assert_eq!(d.query_qp(6).status, Status::NotFound.code());
}

#[test]
fn reset_drops_objects() {
    let (mut d, _) = loopback();
    assert_eq!(d.dev.qps().len(), 2);
    d.w32(regs::DEV_CTRL, regs::DEV_CTRL_RESET);
    assert!(d.dev.qps().is_empty() && d.dev.cqs().is_empty() && d.dev.mrs().is_empty());
    let (mut d, _) = loopback();
    assert_eq!(d.create_ah(1, PDN, crate::testing::ipv4_av(0, 1)).status, 0);
    assert_eq!(d.control("query objects"), Ok("objects=2/1/1/1".into()));
    d.dev.reset();
    assert_eq!(d.control("query objects"), Ok("objects=0/0/0/0".into()));
}

#[test]
fn mr_commands_validate() {
    let mut d = TestDriver::new(DeviceConfig::default());
    d.dp_setup(1);
    let buf = d.alloc(0x8000, 0x1000);
    assert_eq!(
        d.reg_mr(8192, 0, 1, buf, 0x100, ALL_ACCESS).status,
        Status::InvalidParam.code()
    );
    assert_eq!(
        d.reg_mr(1, 0, 1, buf, 0, ALL_ACCESS).status,
        Status::InvalidParam.code()
    );
    assert_eq!(
        d.reg_mr(1, 0, 1, buf, 0x8000, ALL_ACCESS).status,
        0,
        "level 1"
    );
    assert_eq!(
        d.reg_mr(1, 0, 1, buf, 0x100, ALL_ACCESS).status,
        Status::Exists.code()
    );
    let mut r = RegMr {
        valid: true,
        version: 0,
        key: 1,
        index: 2,
        pdn: 1,
        mr_type: 0,
        access: ALL_ACCESS,
        va: u64::MAX - 0x10,
        len: 0x100,
        page_shift: 12,
        mtt_page_code: 0,
        level: 0,
        count: 1,
        entries: [buf; 4],
    };
    assert_eq!(
        d.reg_mr_raw(&r).status,
        Status::InvalidParam.code(),
        "wraps"
    );
    r.va = buf;
    r.len = 1 << 41;
    assert_eq!(
        d.reg_mr_raw(&r).status,
        Status::InvalidParam.code(),
        "> max_mr_size"
    );
    r.len = 0x5000;
    r.count = 5;
    assert_eq!(
        d.reg_mr_raw(&r).status,
        Status::InvalidParam.code(),
        "level 0, 5 pages"
    );
    r.len = 0x2000;
    r.count = 1;
    assert_eq!(
        d.reg_mr_raw(&r).status,
        Status::InvalidParam.code(),
        "too few entries"
    );
    r.mr_type = 3;
    assert_eq!(d.reg_mr_raw(&r).status, Status::InvalidParam.code());
    // A hostile count for a huge MR is not allocated: levels are walked at use time.
    r.mr_type = 0;
    r.version = 1;
    r.level = 3;
    r.len = 1 << 40;
    r.count = 1 << 28;
    r.entries[0] = buf;
    assert_eq!(
        d.reg_mr_raw(&r).status,
        Status::InvalidParam.code(),
        "3 levels of 4 KiB MTT pages name only 2^27 pages"
    );
    r.mtt_page_code = 1;
    // Every level's entry 0 points back at the page itself.
    d.mem.write_u64_le(buf, buf).unwrap();
    assert_eq!(d.reg_mr_raw(&r).status, 0, "8 KiB MTT pages: 2^30");
    r.index = 3;
    r.entries[0] = 0xdead_0000_0000;
    assert_eq!(d.reg_mr_raw(&r).status, Status::DmaError.code());
    // DMA MR: garbage VA/length/page size ignored.
    r.mr_type = 2;
    r.valid = false;
    r.page_shift = 31;
    assert_eq!(d.reg_mr_raw(&r).status, 0);
    assert!(d.dev.mr_valid(stag(3, 1)));
    assert_eq!(
        d.dereg_mr(stag(3, 9)).status,
        0,
        "key mismatch: deregistered anyway"
    );
    assert_eq!(d.dereg_mr(stag(3, 1)).status, Status::NotFound.code());
}

// ------------------------------------------------------------------------------------------------
// Traffic
// ------------------------------------------------------------------------------------------------

#[test]
fn send_recv_between_two_devices() {
    let (mut a, mut b, abuf, bbuf) = pair();
    a.poke(abuf, b"hello, world");
    let r = b.post_recv(10, bbuf + 0x100, 64, stag(1, 0));
    let s = a.send_wqe(10, &Wqe::send(&[sge(abuf, 12)]));
    pump2(&mut a, &mut b);
    assert_eq!(b.peek(bbuf + 0x100, 12), b"hello, world");
    let rc = b.poll(CQ).expect("receive CQE");
    assert_eq!(
        (
            rc.qtype,
            rc.opcode,
            rc.status,
            rc.wqe_index,
            rc.qpn,
            rc.byte_len
        ),
        (CQE_QTYPE_RQ, op::RECEIVE, 0, u32::from(r), 10, 12)
    );
    let sc = a.poll(CQ).expect("send CQE");
    assert_eq!(
        (sc.qtype, sc.opcode, sc.status, sc.wqe_index, sc.byte_len),
        (CQE_QTYPE_SQ, op::SEND, 0, u32::from(s), 12)
    );
    // PSNs advanced per message.
    assert_eq!(a.dev.qp_info(10).unwrap().0, 201);
    assert_eq!(b.dev.qp_info(10).unwrap().1, 101);
    // Traffic counters.
    let stats = a.control("query stats").unwrap();
    assert!(
        stats.starts_with("tx_reqs=1 tx_packets=1 tx_bytes=12 "),
        "{stats}"
    );
}

/// CREATE_QP `qpn` on CQ [`CQ`] the way a user QP is made: each queue a pinned 4 KiB page,
/// an extended doorbell page named.
fn create_user_qp(d: &mut TestDriver, qpn: u32) {
    let page = |d: &mut TestDriver| QueueMttCfg {
        page_shift: 12,
        level: 0,
        count: 1,
        offset: 0,
        addr: d.alloc(0x1000, 0x1000),
        more: [0; 3],
    };
    let (sq, rq) = (page(d), page(d));
    let req = CreateQp {
        qpn,
        sq_depth_log2: 6,
        rq_depth_log2: 6,
        pdn: PDN,
        send_cqn: CQ,
        recv_cqn: CQ,
        ext_db: true,
        sq,
        rq,
        sq_dbrec: crate::testing::layout::DP_HEAP - 32,
        rq_dbrec: crate::testing::layout::DP_HEAP - 40,
        db_pages: (3, 4),
        qp_type: QP_TYPE_RC,
    };
    assert_eq!(d.create_qp_raw(&req).status, 0);
}

#[test]
fn local_dma_lkey_is_a_kernel_qps_local_key_alone() {
    let lkey = crate::caps::DEFAULT_LOCAL_DMA_LKEY;
    let (mut d, buf) = loopback();
    let key = stag(1, 0);
    d.poke(buf, &[7u8; 64]);
    // A kernel QP gathers from bus addresses under the lkey...
    let phys = Sge {
        addr: buf,
        len: 64,
        key: lkey,
    };
    d.send_wqe(10, &Wqe::write(key, buf + 0x1000, &[phys]));
    pump1(&mut d);
    assert_eq!(d.peek(buf + 0x1000, 64), vec![7u8; 64]);
    assert_eq!(d.poll(CQ).map(|c| c.status), Some(wc::SUCCESS));
    // ...but no peer may name it as an rkey: nothing is written, the Write fails.
    d.send_wqe(10, &Wqe::write(lkey, buf + 0x2000, &[sge(buf, 64)]));
    pump1(&mut d);
    assert_eq!(d.peek(buf + 0x2000, 64), vec![0u8; 64]);
    let c = d.poll_all(CQ);
    assert!(
        c.iter().any(|c| c.qpn == 10 && c.status != wc::SUCCESS),
        "{c:?}"
    );
    // A user's QP cannot use it at all: its gather fails locally, before anything is sent.
    create_user_qp(&mut d, 12);
    create_user_qp(&mut d, 13);
    d.connect(12, 1, 13);
    d.connect(13, 1, 12);
    d.post_recv(13, buf + 0x3000, 64, key);
    d.send_wqe(12, &Wqe::send(&[phys]));
    pump1(&mut d);
    let c = d.poll_all(CQ);
    assert_eq!(
        sq_cqe(&c, 12).iter().map(|c| c.status).collect::<Vec<_>>(),
        [wc::SEND_STAG]
    );
    assert_eq!(d.peek(buf + 0x3000, 64), vec![0u8; 64], "nothing received");
    // Nor as a receive buffer: the message is refused at the receiving user QP.
    create_user_qp(&mut d, 14);
    create_user_qp(&mut d, 15);
    d.connect(14, 1, 15);
    d.connect(15, 1, 14);
    d.post_recv(15, buf + 0x4000, 64, lkey);
    d.send_wqe(14, &Wqe::send(&[sge(buf, 64)]));
    pump1(&mut d);
    assert_eq!(d.peek(buf + 0x4000, 64), vec![0u8; 64]);
    let c = d.poll_all(CQ);
    assert!(
        c.iter()
            .any(|c| c.qpn == 15 && c.qtype == CQE_QTYPE_RQ && c.status == wc::RECV_STAG),
        "{c:?}"
    );
}

#[test]
fn requests_are_taken_from_the_connected_peer_alone() {
    let clock = Arc::new(ManualClock::new());
    let (mut a, mut b, _abuf, bbuf) = pair_on(&clock);
    // C (host 3) knows B's QPN, address and rkey, and connects a QP of its own to them.
    let f = a.dev.port().unwrap().fabric().clone();
    let mut c = on(&clock);
    c.attach(&f);
    c.dp_setup(3);
    assert_eq!(c.create_cq(CQ, 6).status, 0);
    assert_eq!(c.create_qp(10, CQ, 8, 6).status, 0);
    let cbuf = c.alloc(0x1_0000, 0x1000);
    assert_eq!(c.reg_mr(1, 0, PDN, cbuf, 0x1_0000, ALL_ACCESS).status, 0);
    c.connect(10, 2, 10);
    c.poke(cbuf, &[0xee; 32]);
    c.send_wqe(10, &Wqe::write(stag(1, 0), bbuf, &[sge(cbuf, 32)]));
    times_out(&clock, &mut [&mut c, &mut b, &mut a]);
    assert_eq!(b.peek(bbuf, 32), vec![0u8; 32], "nothing written into B");
    assert!(b.poll(CQ).is_none());
    // A, B's peer, still gets through.
    a.send_wqe(10, &Wqe::write_inline(stag(1, 0), bbuf, b"from A"));
    pump2(&mut a, &mut b);
    assert_eq!(b.peek(bbuf, 6), b"from A");
    assert_eq!(a.poll(CQ).map(|c| c.status), Some(wc::SUCCESS));
}

/// Every statistics register of `d`, by counter name, read as two 32-bit halves (the way a
/// driver without `readq` would).
fn stats_regs(d: &mut TestDriver) -> Vec<(&'static str, u64)> {
    regs::STATS
        .iter()
        .map(|s| {
            let lo = u64::from(d.r32(s.offset));
            let hi = u64::from(d.r32(s.offset + 4));
            (s.counter.name(), hi << 32 | lo)
        })
        .collect()
}

#[test]
fn statistics_registers_read_the_traffic_counters() {
    let (mut a, mut b, abuf, bbuf) = pair();
    let zero: Vec<_> = Counter::ALL.iter().map(|c| (c.name(), 0)).collect();
    assert_eq!(stats_regs(&mut a), zero);
    b.post_recv(10, bbuf, 64, stag(1, 0));
    a.poke(abuf, b"hello, world");
    a.send_wqe(10, &Wqe::send(&[sge(abuf, 12)]));
    pump2(&mut a, &mut b);
    assert_eq!(a.poll(CQ).map(|c| c.status), Some(wc::SUCCESS));
    // The requester sent one 12-byte request and received the acknowledgement (no payload); the
    // responder the other way round.
    let a_regs = stats_regs(&mut a);
    let b_regs = stats_regs(&mut b);
    let reg = |regs: &[(&str, u64)], c: Counter| regs.iter().find(|r| r.0 == c.name()).unwrap().1;
    assert_eq!(
        Counter::ALL.map(|c| reg(&a_regs, c))[..8],
        [1, 1, 12, 0, 0, 0, 1, 0]
    );
    assert_eq!(
        Counter::ALL.map(|c| reg(&b_regs, c))[..8],
        [0, 1, 0, 0, 0, 0, 1, 12]
    );
    // By register name: the same values as the counters GET_STATS reports.
    assert_eq!(a.r32(0x090), 12, "STATS_TSO_OUT_BYTES");
    assert_eq!(b.r32(0x0C8), 12, "STATS_RX_BYTES");
    assert_eq!(
        a_regs.iter().map(|r| r.1).collect::<Vec<_>>(),
        a.dev.stats_counters().values()
    );
    // A second, inline WRITE adds to them; the control language sets the drop counters.
    a.send_wqe(10, &Wqe::write_inline(stag(1, 0), bbuf + 0x100, b"abc"));
    pump2(&mut a, &mut b);
    a.control("stats tx_disable_drop=5 rx_pps_limit_drop=0x100000002")
        .unwrap();
    let a_regs = stats_regs(&mut a);
    assert_eq!(
        Counter::ALL.map(|c| reg(&a_regs, c)),
        [2, 2, 15, 5, 0, 0, 2, 0, 0, 0, 0x1_0000_0002]
    );
    assert_eq!(reg(&stats_regs(&mut b), Counter::RxBytes), 15);
}

#[test]
fn send_waits_for_a_receive_wqe() {
    let (mut a, mut b, abuf, bbuf) = pair();
    a.send_wqe(10, &Wqe::send_inline(b"early"));
    a.send_wqe(10, &Wqe::send_inline(b"second"));
    pump2(&mut a, &mut b);
    assert!(a.poll(CQ).is_none(), "not acknowledged yet");
    b.post_recv(10, bbuf, 16, stag(1, 0));
    pump2(&mut a, &mut b);
    assert_eq!(b.peek(bbuf, 5), b"early");
    assert_eq!(a.poll_all(CQ).len(), 1);
    b.post_recv(10, bbuf + 16, 16, stag(1, 0));
    pump2(&mut a, &mut b);
    assert_eq!(b.peek(bbuf + 16, 6), b"second");
    assert_eq!(a.poll_all(CQ).len(), 1);
    assert_eq!(b.poll_all(CQ).len(), 2);
    let _ = abuf;
}

#[test]
fn write_read_atomics_loopback() {
    let (mut d, buf) = loopback();
    let key = stag(1, 0);
    d.poke(buf, &[7u8; 256]);
    // WRITE 256 bytes buf -> buf+0x1000.
    d.send_wqe(10, &Wqe::write(key, buf + 0x1000, &[sge(buf, 256)]));
    pump1(&mut d);
    assert_eq!(d.peek(buf + 0x1000, 256), vec![7u8; 256]);
    let c = d.poll(CQ).unwrap();
    assert_eq!(
        (c.opcode, c.status, c.qpn, c.byte_len),
        (op::WRITE, 0, 10, 256)
    );
    // READ it back into buf+0x2000 across a page boundary.
    d.poke(buf + 0x3ff0, &[9u8; 32]);
    d.send_wqe(10, &Wqe::read(key, buf + 0x2ff0, 32, key, buf + 0x3ff0));
    pump1(&mut d);
    assert_eq!(d.peek(buf + 0x2ff0, 32), vec![9u8; 32]);
    let c = d.poll(CQ).unwrap();
    assert_eq!((c.opcode, c.status, c.byte_len), (op::READ, 0, 32));
    // FAA and CAS.
    d.poke(buf + 0x4000, &40u64.to_le_bytes());
    d.send_wqe(
        10,
        &Wqe::atomic(key, buf + 0x4000, None, 2, key, buf + 0x4008),
    );
    d.send_wqe(
        10,
        &Wqe::atomic(key, buf + 0x4000, Some(42), 100, key, buf + 0x4010),
    );
    d.send_wqe(
        10,
        &Wqe::atomic(key, buf + 0x4000, Some(1), 5, key, buf + 0x4018),
    );
    pump1(&mut d);
    let v = |d: &TestDriver, a| u64::from_le_bytes(d.peek(a, 8).try_into().unwrap());
    assert_eq!(v(&d, buf + 0x4000), 100);
    assert_eq!(v(&d, buf + 0x4008), 40);
    assert_eq!(v(&d, buf + 0x4010), 42);
    assert_eq!(
        v(&d, buf + 0x4018),
        100,
        "CAS that does not match returns the value"
    );
    let ops: Vec<u8> = d.poll_all(CQ).iter().map(|c| c.opcode).collect();
    assert_eq!(ops, [op::ATOMIC_FAA, op::ATOMIC_CAS, op::ATOMIC_CAS]);
}

#[test]
fn zero_length_writes_and_reads_check_no_key() {
    // rsockets sends its control messages as zero-length RDMA Writes with immediate data and
    // key 0: the responder checks no key or address for an access of no bytes.
    let (mut d, buf) = loopback();
    let key = stag(1, 0);
    d.post_recv(11, buf + 0x100, 64, key);
    d.send_wqe(10, &Wqe::write(0, 0, &[]).imm([5, 6, 7, 8]));
    d.send_wqe(10, &Wqe::read(key, buf + 0x200, 0, 0x00ff_ff00, 0));
    pump1(&mut d);
    let cqes = d.poll_all(CQ);
    let got: Vec<(u8, u8, u8, u32)> = cqes
        .iter()
        .map(|c| (c.qtype, c.opcode, c.status, c.byte_len))
        .collect();
    assert_eq!(
        got,
        [
            (CQE_QTYPE_RQ, op::RECV_IMM, 0, 0),
            (CQE_QTYPE_SQ, op::WRITE_WITH_IMM, 0, 0),
            (CQE_QTYPE_SQ, op::READ, 0, 0)
        ]
    );
    assert_eq!(cqes[0].extra, CqeExtra::Imm([5, 6, 7, 8]));
}

#[test]
fn immediates_and_invalidate() {
    let (mut d, buf) = loopback();
    let key = stag(1, 0);
    d.post_recv(11, buf + 0x100, 64, key);
    d.post_recv(11, buf + 0x200, 64, key);
    d.post_recv(11, buf + 0x300, 64, key);
    d.send_wqe(
        10,
        &Wqe::write_inline(key, buf + 0x800, b"imm-write").imm([1, 2, 3, 4]),
    );
    d.send_wqe(10, &Wqe::send_inline(b"imm-send").imm([0xa, 0xb, 0xc, 0xd]));
    // Another MR to invalidate remotely.
    let other = d.alloc(0x1000, 0x1000);
    assert_eq!(d.reg_mr(2, 5, PDN, other, 0x1000, ALL_ACCESS).status, 0);
    d.send_wqe(10, &Wqe::send_inline(b"inv").inv(stag(2, 5)));
    pump1(&mut d);
    assert_eq!(d.peek(buf + 0x800, 9), b"imm-write");
    let rq: Vec<DataCqe> = d
        .poll_all(CQ)
        .into_iter()
        .filter(|c| c.qtype == CQE_QTYPE_RQ)
        .collect();
    assert_eq!(rq.len(), 3);
    assert_eq!(
        (rq[0].opcode, rq[0].extra, rq[0].byte_len),
        (op::RECV_IMM, CqeExtra::Imm([1, 2, 3, 4]), 9)
    );
    assert_eq!(
        d.peek(buf + 0x100, 4),
        [0; 4],
        "WRITE_WITH_IMM leaves the RQE buffer alone"
    );
    assert_eq!(
        (rq[1].opcode, rq[1].extra),
        (op::RSP_SEND_IMM, CqeExtra::Imm([0xa, 0xb, 0xc, 0xd]))
    );
    assert_eq!(d.peek(buf + 0x200, 8), b"imm-send");
    assert_eq!(rq[2].opcode, op::RECV_INV);
    // The decoder shows @12 as an immediate: the BE rkey reversed.
    let k = stag(2, 5).to_be_bytes();
    assert_eq!(rq[2].extra, CqeExtra::Imm([k[3], k[2], k[1], k[0]]));
    assert!(!d.dev.mr_valid(stag(2, 5)), "invalidated");
}

#[test]
fn six_sges_inline_across_the_ring_end_and_wrap() {
    let (mut d, buf) = loopback();
    let key = stag(1, 0);
    let sges: Vec<Sge> = (0..6u64)
        .map(|i| {
            d.poke(buf + 0x100 * i, &[i as u8 + 1; 10]);
            sge(buf + 0x100 * i, 10)
        })
        .collect();
    d.post_recv(11, buf + 0x8000, 128, key);
    d.send_wqe(10, &Wqe::send(&sges));
    pump1(&mut d);
    let got = d.peek(buf + 0x8000, 60);
    for i in 0..6 {
        assert_eq!(got[i * 10..i * 10 + 10], [i as u8 + 1; 10]);
    }
    // Walk the 256-WQEBB SQ to 2 WQEBBs before its end, then post 96 inline bytes (4 WQEBBs).
    while d.dp.qps[&10].sq_pi % 256 != 254 {
        d.post_wqe(10, &Wqe::write_inline(key, buf + 0x9000, b"x").unsignaled());
    }
    d.ring_sq(10);
    pump1(&mut d);
    let data: Vec<u8> = (0..96u8).collect();
    d.post_recv(11, buf + 0xa000, 128, key);
    let start = d.send_wqe(10, &Wqe::send_inline(&data));
    assert_eq!(start % 256, 254);
    pump1(&mut d);
    assert_eq!(d.peek(buf + 0xa000, 96), data);
    let cqes = d.poll_all(CQ);
    let sq = sq_cqe(&cqes, 10);
    assert_eq!(sq.last().unwrap().wqe_index, u32::from(start));
    assert!(sq.iter().all(|c| c.status == 0));
    // Unsignaled WRITEs produced no CQEs: 2 SENDs only.
    assert_eq!(sq.len(), 2);
}

#[test]
fn cq_owner_bit_laps() {
    let (mut d, buf) = loopback();
    // 64-entry CQ, 150 signaled WRITEs polled as they come.
    for i in 0..150u32 {
        d.send_wqe(
            10,
            &Wqe::write_inline(stag(1, 0), buf + 0x100, &i.to_le_bytes()),
        );
        pump1(&mut d);
        let c = d.poll(CQ).expect("one CQE per WRITE");
        assert_eq!(c.status, 0);
        assert_eq!(c.owner, (i / 64) % 2 == 0, "CQE {i}");
    }
}

#[test]
fn arming_one_event_per_arm_and_solicited() {
    let (mut d, buf) = loopback();
    let key = stag(1, 0);
    d.take_irqs();
    d.arm(CQ, false);
    d.send_wqe(10, &Wqe::write_inline(key, buf, b"a"));
    d.send_wqe(10, &Wqe::write_inline(key, buf, b"b"));
    pump1(&mut d);
    assert_eq!(d.take_irqs(), [1], "one event for two CQEs");
    assert_eq!(d.ceqe(1, 256, 0), (true, CQ));
    d.poll_all(CQ);
    // Solicited-only arm: unsolicited receive does not fire, a solicited one does.
    d.w64(
        regs::eq_db(1),
        crate::regs::EqDoorbell { ci: 1, arm: true }.encode(),
    );
    d.arm(CQ, true);
    d.post_recv(11, buf + 0x100, 16, key);
    d.post_recv(11, buf + 0x200, 16, key);
    d.send_wqe(10, &Wqe::send_inline(b"plain").unsignaled());
    pump1(&mut d);
    assert!(d.take_irqs().is_empty());
    d.send_wqe(10, &Wqe::send_inline(b"sol").unsignaled().solicited());
    pump1(&mut d);
    assert_eq!(d.take_irqs(), [1]);
    // Arming with CQEs beyond the CI fires at once.
    d.w64(
        regs::eq_db(1),
        crate::regs::EqDoorbell { ci: 2, arm: true }.encode(),
    );
    d.arm(CQ, false);
    assert_eq!(d.take_irqs(), [1]);
}

#[test]
fn cq_overflow_posts_an_aeqe() {
    let mut d = TestDriver::new(DeviceConfig::default());
    let f = fabric();
    d.attach(&f);
    d.dp_setup(1);
    assert_eq!(d.create_cq(CQ, 2).status, 0);
    assert_eq!(d.create_cq(2, 6).status, 0);
    assert_eq!(d.create_qp(10, 2, 8, 6).status, 0);
    assert_eq!(d.create_qp(11, CQ, 8, 6).status, 0);
    d.connect(10, 1, 11);
    d.connect(11, 1, 10);
    let buf = d.alloc(0x1000, 0x1000);
    assert_eq!(d.reg_mr(1, 0, PDN, buf, 0x1000, ALL_ACCESS).status, 0);
    // Solicited-only arm: the CI stays current while unsolicited receives pile up.
    d.arm(CQ, true);
    for _ in 0..5 {
        d.post_recv(11, buf, 16, stag(1, 0));
    }
    for _ in 0..5 {
        d.send_wqe(10, &Wqe::send_inline(b"x").unsignaled());
    }
    pump1(&mut d);
    assert_eq!(
        d.poll_aeqe(),
        Some(AeqEvent {
            ty: 3,
            subtype: 0,
            data0: CQ,
            data1: 0
        })
    );
    assert_eq!(d.poll_all(CQ).len(), 4);
}

// ------------------------------------------------------------------------------------------------
// Errors
// ------------------------------------------------------------------------------------------------

/// Posts `wqe` on QP 10 of a fresh loopback pair and returns QP 10's first SQ CQE status.
fn local_status(wqe: impl FnOnce(u64) -> Wqe) -> u8 {
    let (mut d, buf) = loopback();
    let w = wqe(buf);
    d.post_recv(11, buf, 0x100, stag(1, 0));
    d.send_wqe(10, &w);
    pump1(&mut d);
    let cqes = d.poll_all(CQ);
    sq_cqe(&cqes, 10).first().expect("an SQ CQE").status
}

#[test]
fn local_access_errors() {
    let k = stag(1, 0);
    let bad = |addr, len, key| Sge { addr, len, key };
    assert_eq!(
        local_status(|b| Wqe::send(&[bad(b, 8, stag(9, 0))])),
        wc::SEND_STAG
    );
    assert_eq!(
        local_status(|b| Wqe::send(&[bad(b, 8, stag(1, 1))])),
        wc::SEND_STAG
    );
    assert_eq!(
        local_status(|b| Wqe::send(&[bad(b + 0xfff8, 16, k)])),
        wc::SEND_BOUNDS
    );
    assert_eq!(
        local_status(|b| Wqe::send(&[bad(b - 1, 8, k)])),
        wc::SEND_BOUNDS
    );
    assert_eq!(
        local_status(|_| Wqe::send(&[bad(u64::MAX - 3, 8, k)])),
        wc::SEND_BOUNDS
    );
    // READ into an MR without local write.
    let status = {
        let (mut d, buf) = loopback();
        let ro = d.alloc(0x1000, 0x1000);
        assert_eq!(
            d.reg_mr(2, 0, PDN, ro, 0x1000, access::LOCAL_READ).status,
            0
        );
        d.send_wqe(10, &Wqe::read(stag(2, 0), ro, 8, stag(1, 0), buf));
        pump1(&mut d);
        d.poll(CQ).unwrap().status
    };
    assert_eq!(status, wc::SEND_ACCESS);
    // MR of another PD.
    let status = {
        let (mut d, buf) = loopback();
        assert_eq!(d.reg_mr(2, 0, PDN + 1, buf, 0x1000, ALL_ACCESS).status, 0);
        d.send_wqe(
            10,
            &Wqe::send(&[Sge {
                addr: buf,
                len: 8,
                key: stag(2, 0),
            }]),
        );
        pump1(&mut d);
        d.poll(CQ).unwrap().status
    };
    assert_eq!(status, wc::SEND_PD);
    // Format errors: 7 SGEs, inline too long, unknown opcode.
    let seven = |b: u64| {
        let mut w = Wqe::send(
            &[Sge {
                addr: b,
                len: 1,
                key: k,
            }; 6],
        );
        w.sgl_len = 7;
        w
    };
    assert_eq!(local_status(seven), wc::SEND_FORMAT);
    assert_eq!(
        local_status(|_| Wqe::send_inline(&[0; 97])),
        wc::SEND_FORMAT
    );
    assert_eq!(
        local_status(|b| Wqe::send(&[sge(b, 1)]).opcode(7)),
        wc::SEND_FORMAT
    );
}

#[test]
fn wqes_shorter_than_their_layout_are_format_errors() {
    // A READ (48 bytes) or an atomic (64 bytes) in one WQEBB: the header is well formed, the
    // body is cut short.
    let short = |mut w: Wqe| {
        w.bytes.truncate(wire::SQ_WQEBB_SIZE);
        w
    };
    let k = stag(1, 0);
    assert_eq!(
        local_status(|b| short(Wqe::read(k, b, 8, k, b + 0x100))),
        wc::SEND_FORMAT
    );
    assert_eq!(
        local_status(|b| short(Wqe::atomic(k, b, None, 1, k, b + 8))),
        wc::SEND_FORMAT
    );
    // The same WQEs at full length succeed.
    assert_eq!(
        local_status(|b| Wqe::read(k, b, 8, k, b + 0x100)),
        wc::SUCCESS
    );
}

#[test]
fn remote_access_errors_and_flush() {
    // rkey problems: requester 3..6, responder QP in ERROR with an AEQE (type 2).
    type Case = (fn(u64) -> Wqe, u8);
    let cases: [Case; 5] = [
        (|b| Wqe::write_inline(stag(9, 0), b, b"x"), wc::RECV_STAG),
        (|b| Wqe::write_inline(stag(1, 3), b, b"x"), wc::RECV_STAG),
        (
            |b| Wqe::write_inline(stag(1, 0), b + 0x1_0000, b"x"),
            wc::RECV_BOUNDS,
        ),
        (
            |_| Wqe::write_inline(stag(1, 0), u64::MAX - 1, b"xyz").fenced(),
            wc::RECV_BOUNDS,
        ),
        (
            |b| Wqe::atomic(stag(1, 0), b + 4, None, 1, stag(1, 0), b),
            wc::RECV_BOUNDS,
        ),
    ];
    for (make, want) in cases {
        let (mut d, buf) = loopback();
        d.post_recv(10, buf, 16, stag(1, 0));
        d.send_wqe(10, &make(buf));
        d.send_wqe(10, &Wqe::write_inline(stag(1, 0), buf, b"after"));
        pump1(&mut d);
        let cqes = d.poll_all(CQ);
        let sq = sq_cqe(&cqes, 10);
        assert_eq!(sq[0].status, want);
        assert_eq!(sq[1].status, wc::FLUSHED);
        let rq: Vec<_> = cqes.iter().filter(|c| c.qtype == CQE_QTYPE_RQ).collect();
        assert_eq!(rq.len(), 1, "QP 10's RQE flushed");
        assert_eq!(rq[0].status, wc::FLUSHED);
        assert_eq!(d.dev.qp_info(10).unwrap().2, QpState::Error);
        assert_eq!(d.dev.qp_info(11).unwrap().2, QpState::Error);
        assert_eq!(d.poll_aeqe().map(|e| (e.ty, e.data0)), Some((2, 11)));
    }
    // Rights and PD on the responder.
    let (mut d, buf) = loopback();
    assert_eq!(
        d.reg_mr(2, 0, PDN, buf, 0x100, access::LOCAL_READ).status,
        0
    );
    d.send_wqe(10, &Wqe::read(stag(1, 0), buf, 8, stag(2, 0), buf));
    pump1(&mut d);
    assert_eq!(d.poll(CQ).unwrap().status, wc::RECV_ACCESS);
    let (mut d, buf) = loopback();
    assert_eq!(d.reg_mr(2, 0, PDN + 1, buf, 0x100, ALL_ACCESS).status, 0);
    d.send_wqe(10, &Wqe::write_inline(stag(2, 0), buf, b"x"));
    pump1(&mut d);
    assert_eq!(d.poll(CQ).unwrap().status, wc::RECV_PD);
    // Receive buffer too small: both sides see 4.
    let (mut d, buf) = loopback();
    d.post_recv(11, buf, 2, stag(1, 0));
    d.send_wqe(10, &Wqe::send_inline(b"too long"));
    pump1(&mut d);
    let cqes = d.poll_all(CQ);
    assert_eq!(
        cqes.iter().find(|c| c.qpn == 11).unwrap().status,
        wc::RECV_BOUNDS
    );
    assert_eq!(
        cqes.iter().find(|c| c.qpn == 10).unwrap().status,
        wc::RECV_BOUNDS
    );
}

#[test]
fn unreachable_destinations_retry_exceeded() {
    let clock = Arc::new(ManualClock::new());
    let (mut d, buf) = loopback_on(&clock);
    // QP 10 → unknown QPN.
    let m = ModifyQpRoce {
        qpn: 10,
        state: QpState::Rts as u8,
        dst_qpn: 999,
        mask: wire::qp_mask::DST_QPN,
        qkey: 0,
        rq_psn: 0,
        sq_psn: 0,
        av: crate::testing::ipv4_av(0, 1),
    };
    assert_eq!(d.modify_qp(&m).status, 0);
    d.send_wqe(10, &Wqe::write_inline(stag(1, 0), buf, b"x"));
    times_out(&clock, &mut [&mut d]);
    // Unknown GID.
    let (mut d, buf) = loopback_on(&clock);
    let m = ModifyQpRoce {
        mask: wire::qp_mask::AV,
        av: crate::testing::ipv4_av(0, 77),
        ..m
    };
    assert_eq!(d.modify_qp(&m).status, 0);
    d.send_wqe(10, &Wqe::write_inline(stag(1, 0), buf, b"x"));
    times_out(&clock, &mut [&mut d]);
    // Destination QP not ready (RESET).
    let (mut d, buf) = loopback_on(&clock);
    assert_eq!(d.modify_state(11, QpState::Reset).status, 0);
    d.send_wqe(10, &Wqe::write_inline(stag(1, 0), buf, b"x"));
    times_out(&clock, &mut [&mut d]);
    // The QP is in ERROR (a later WQE waits for REFLUSH), and the timer has nothing left to do.
    assert_eq!(d.control("query qps"), Ok("qps=10:ERROR,11:RESET".into()));
    tick(&clock, &mut [&mut d]);
    assert!(d.poll(CQ).is_none());
    assert_eq!(d.dev.next_deadline(), None);
    // No fabric at all.
    let mut d = on(&clock);
    d.dp_setup(1);
    assert_eq!(d.create_cq(CQ, 6).status, 0);
    assert_eq!(d.create_qp(10, CQ, 8, 6).status, 0);
    d.connect(10, 1, 10);
    d.send_wqe(10, &Wqe::send_inline(b"x"));
    times_out(&clock, &mut [&mut d]);
}

#[test]
fn lost_requests_are_retransmitted_in_order() {
    // QP 11 is not able to receive yet: QP 10's two SENDs and a WRITE are lost, QP 10 waits.
    let clock = Arc::new(ManualClock::new());
    let (mut d, buf) = loopback_on(&clock);
    assert_eq!(d.modify_state(11, QpState::Reset).status, 0);
    d.send_wqe(10, &Wqe::send_inline(b"first"));
    d.send_wqe(10, &Wqe::send_inline(b"second"));
    d.send_wqe(10, &Wqe::write_inline(stag(1, 0), buf + 0x800, b"third"));
    pump1(&mut d);
    assert!(d.poll(CQ).is_none());
    assert!(d.dev.next_deadline().is_some());
    // All three went out before the first loss came back: three unanswered, three lost.
    assert_eq!(
        d.control("query queues"),
        Ok("queues=q10:RTS:4/4:3:3:0,q11:RESET:0/0:0:0:0,c1:0/0:-:-".into())
    );
    // Two retransmissions later QP 11 is ready, with receive WQEs.
    tick(&clock, &mut [&mut d]);
    tick(&clock, &mut [&mut d]);
    assert!(d.poll(CQ).is_none());
    d.connect(11, 1, 10);
    d.post_recv(11, buf, 16, stag(1, 0));
    d.post_recv(11, buf + 16, 16, stag(1, 0));
    pump1(&mut d);
    assert!(d.poll(CQ).is_none(), "nothing goes before the timer fires");
    tick(&clock, &mut [&mut d]);
    let cqes: Vec<DataCqe> = std::iter::from_fn(|| d.poll(CQ)).collect();
    let sq: Vec<u8> = cqes
        .iter()
        .filter(|c| c.qpn == 10)
        .map(|c| c.status)
        .collect();
    assert_eq!(sq, [wc::SUCCESS; 3]);
    let rq: Vec<u32> = cqes
        .iter()
        .filter(|c| c.qpn == 11)
        .map(|c| c.byte_len)
        .collect();
    assert_eq!(rq, [5, 6], "the SENDs arrived in order");
    assert_eq!(d.peek(buf, 5), b"first");
    assert_eq!(d.peek(buf + 16, 6), b"second");
    assert_eq!(d.peek(buf + 0x800, 5), b"third");
    assert_eq!(d.dev.next_deadline(), None);
    // The retry count starts over: a new loss again takes every retransmission.
    assert_eq!(d.modify_state(11, QpState::Reset).status, 0);
    d.send_wqe(10, &Wqe::send_inline(b"x"));
    times_out(&clock, &mut [&mut d]);
}

#[test]
fn destroyed_or_reset_requester_forgets_its_lost_requests() {
    let clock = Arc::new(ManualClock::new());
    for reset in [false, true] {
        let (mut d, buf) = loopback_on(&clock);
        assert_eq!(d.modify_state(11, QpState::Reset).status, 0);
        d.send_wqe(10, &Wqe::write_inline(stag(1, 0), buf, b"x"));
        pump1(&mut d);
        if reset {
            assert_eq!(d.modify_state(10, QpState::Reset).status, 0);
        } else {
            let c = d.exec(Command::DestroyQp, |s| wire::U32Arg(10).write_fields(s));
            assert_eq!(c.status, 0);
        }
        d.connect(11, 1, 10);
        for _ in 0..=RETRY_COUNT {
            tick(&clock, &mut [&mut d]);
        }
        assert!(d.poll(CQ).is_none(), "reset {reset}");
        assert_eq!(d.peek(buf, 1), [0], "reset {reset}: nothing was written");
        assert_eq!(d.dev.next_deadline(), None, "reset {reset}");
    }
}

#[test]
fn flush_on_error_doorbells_and_reflush() {
    let (mut d, buf) = loopback();
    d.post_recv(10, buf, 16, stag(1, 0));
    assert_eq!(d.modify_state(10, QpState::Error).status, 0);
    // The transition flushes what was posted before it.
    let c = d.poll(CQ).unwrap();
    assert_eq!((c.qtype, c.status), (CQE_QTYPE_RQ, wc::FLUSHED));
    assert!(d.poll(CQ).is_none());
    // A doorbell in ERROR only records the PI (§10.13): nothing is flushed yet.
    let i = d.send_wqe(10, &Wqe::write_inline(stag(1, 0), buf, b"x").unsignaled());
    let r = d.post_recv(10, buf, 16, stag(1, 0));
    assert!(d.poll(CQ).is_none(), "no flush without REFLUSH");
    // REFLUSH with the producer indices: one more WQE than the device saw by doorbell.
    let j = d.post_wqe(10, &Wqe::read(stag(1, 0), buf, 8, stag(1, 0), buf));
    assert_eq!(d.reflush(10).status, 0);
    let got: Vec<_> = d
        .poll_all(CQ)
        .iter()
        .map(|c| (c.qtype, c.opcode, c.status, c.wqe_index))
        .collect();
    assert_eq!(
        got,
        [
            (CQE_QTYPE_SQ, op::WRITE, wc::FLUSHED, u32::from(i)),
            (CQE_QTYPE_SQ, op::READ, wc::FLUSHED, u32::from(j)),
            (CQE_QTYPE_RQ, op::RECEIVE, wc::FLUSHED, u32::from(r)),
        ]
    );
    // Nothing is left for a second REFLUSH; a REFLUSH outside ERROR does nothing.
    assert_eq!(d.reflush(10).status, 0);
    d.post_recv(11, buf, 16, stag(1, 0));
    assert_eq!(d.reflush(11).status, 0);
    assert!(d.poll(CQ).is_none());
    let r = wire::Reflush {
        qpn: 99,
        sq_pi: 0,
        rq_pi: 0,
    };
    assert_eq!(
        d.exec(crate::cmdq::Command::Reflush, |s| r.write_fields(s))
            .status,
        Status::NotFound.code()
    );
}

#[test]
fn a_wqe_posted_after_an_error_waits_for_reflush() {
    let (mut d, buf) = loopback();
    // An error completion (bad lkey) moves QP 10 to ERROR.
    let bad = Sge {
        addr: buf,
        len: 4,
        key: stag(9, 0),
    };
    d.send_wqe(10, &Wqe::send(&[bad]));
    assert_eq!(d.poll(CQ).unwrap().status, wc::SEND_STAG);
    assert_eq!(d.dev.qp_info(10).unwrap().2, QpState::Error);
    // Posted later: however often the doorbells ring, no completion (a driver that forgets
    // REFLUSH sees its drain hang).
    let i = d.send_wqe(10, &Wqe::send_inline(b"late"));
    let r = d.post_recv(10, buf, 16, stag(1, 0));
    d.ring_sq(10);
    pump1(&mut d);
    assert!(d.poll(CQ).is_none());
    assert_eq!(d.dev.qp_info(10).unwrap().2, QpState::Error);
    // REFLUSH flushes both.
    assert_eq!(d.reflush(10).status, 0);
    let got: Vec<_> = d
        .poll_all(CQ)
        .iter()
        .map(|c| (c.qtype, c.status, c.wqe_index))
        .collect();
    assert_eq!(
        got,
        [
            (CQE_QTYPE_SQ, wc::FLUSHED, u32::from(i)),
            (CQE_QTYPE_RQ, wc::FLUSHED, u32::from(r)),
        ]
    );
}

// ------------------------------------------------------------------------------------------------
// MRs: levels, FRMR, LOCAL_INV
// ------------------------------------------------------------------------------------------------

#[test]
fn mr_levels_two_and_three() {
    for level in [2u8, 3] {
        let (mut d, buf) = loopback();
        // A 3-page MR at IOVA 0x7000_0000_0000 whose pages are scattered in reverse order.
        let data = d.alloc(0x3000, 0x1000);
        let pages = [data + 0x2000, data + 0x1000, data];
        let bottom = d.alloc(0x1000, 0x1000);
        for (i, p) in pages.iter().enumerate() {
            d.mem.write_u64_le(bottom + 8 * i as u64, *p).unwrap();
        }
        let mut root = bottom;
        for _ in 1..level {
            let up = d.alloc(0x1000, 0x1000);
            d.mem.write_u64_le(up, root).unwrap();
            root = up;
        }
        let iova = 0x7000_0000_0000u64;
        let r = RegMr {
            valid: true,
            version: 1,
            key: 0x33,
            index: 5,
            pdn: PDN,
            mr_type: 0,
            access: ALL_ACCESS,
            va: iova + 0x10,
            len: 0x2ff0,
            page_shift: 12,
            mtt_page_code: 0,
            level,
            count: 3,
            entries: [root, 0, 0, 0],
        };
        assert_eq!(d.reg_mr_raw(&r).status, 0);
        // WRITE across the page boundary between IOVA pages 0 and 1.
        d.poke(buf, &[5u8; 32]);
        d.send_wqe(
            10,
            &Wqe::write(stag(5, 0x33), iova + 0xff0, &[sge(buf, 32)]),
        );
        pump1(&mut d);
        assert_eq!(d.poll(CQ).unwrap().status, 0);
        assert_eq!(
            d.peek(data + 0x2ff0, 16),
            [5u8; 16],
            "IOVA page 0 = data page 2"
        );
        assert_eq!(
            d.peek(data + 0x1000, 16),
            [5u8; 16],
            "IOVA page 1 = data page 1"
        );
        // Outside the MR.
        d.send_wqe(10, &Wqe::write(stag(5, 0x33), iova, &[sge(buf, 8)]));
        pump1(&mut d);
        assert_eq!(d.poll(CQ).unwrap().status, wc::RECV_BOUNDS);
    }
}

#[test]
fn fast_register_and_local_invalidate() {
    let (mut d, buf) = loopback();
    // FRMR index 4 with a 4-entry MTT buffer.
    let mttbuf = d.alloc(32, 8);
    let r = RegMr {
        valid: false,
        version: 0,
        key: 0,
        index: 4,
        pdn: PDN,
        mr_type: 1,
        access: ALL_ACCESS,
        va: 0xdead,
        len: 0xbeef,
        page_shift: 12,
        mtt_page_code: 0,
        level: 1,
        count: 4,
        entries: [mttbuf, 0, 0, 0],
    };
    assert_eq!(d.reg_mr_raw(&r).status, 0);
    assert!(!d.dev.mr_valid(stag(4, 0)));
    // Not valid yet: a WRITE to it fails.
    d.send_wqe(10, &Wqe::write_inline(stag(4, 0), 0x1000, b"x"));
    pump1(&mut d);
    assert_eq!(d.poll(CQ).unwrap().status, wc::RECV_STAG);

    let (mut d, buf2) = loopback();
    let _ = buf;
    let mttbuf = d.alloc(32, 8);
    let r = RegMr {
        entries: [mttbuf, 0, 0, 0],
        ..r
    };
    assert_eq!(d.reg_mr_raw(&r).status, 0);
    // Inline pages: IOVA 0x1_0000_0000 → buf2 pages 2, 3.
    let w = Wqe::fast_reg(
        stag(4, 7),
        0x1_0000_0000,
        0x2000,
        ALL_ACCESS,
        &[buf2 + 0x2000, buf2 + 0x3000],
        0,
    );
    d.send_wqe(10, &w);
    assert!(d.dev.mr_valid(stag(4, 7)));
    d.send_wqe(10, &Wqe::write_inline(stag(4, 7), 0x1_0000_1000, b"frmr"));
    pump1(&mut d);
    assert_eq!(d.peek(buf2 + 0x3000, 4), b"frmr");
    // LOCAL_INV, then the same WRITE fails.
    d.send_wqe(10, &Wqe::local_inv(stag(4, 7)));
    assert!(!d.dev.mr_valid(stag(4, 7)));
    let ok: Vec<u8> = d.poll_all(CQ).iter().map(|c| c.status).collect();
    assert_eq!(ok, [0, 0, 0]);
    // Re-register from the pre-registered buffer (MTT type 1).
    d.mem.write_u64_le(mttbuf, buf2 + 0x5000).unwrap();
    d.send_wqe(
        10,
        &Wqe::fast_reg(stag(4, 8), 0x2000, 0x1000, ALL_ACCESS, &[], 1),
    );
    d.send_wqe(10, &Wqe::write_inline(stag(4, 8), 0x2008, b"buf"));
    pump1(&mut d);
    assert_eq!(d.peek(buf2 + 0x5008, 3), b"buf");
    // A second fast-register of a valid MR fails.
    d.send_wqe(
        10,
        &Wqe::fast_reg(stag(4, 9), 0x2000, 0x1000, ALL_ACCESS, &[], 1),
    );
    let st: Vec<u8> = d.poll_all(CQ).iter().map(|c| c.status).collect();
    assert_eq!(st, [0, 0, wc::SEND_STAG]);
}

/// A READ_WITH_INV into a sink registered as `stag(2, 1)`, naming `inv` to invalidate: the data
/// arrives and the sink's region is invalid afterwards.
fn read_with_invalidate_naming(inv: u32) {
    let (mut d, buf) = loopback();
    let sink = d.alloc(0x1000, 0x1000);
    assert_eq!(d.reg_mr(2, 1, PDN, sink, 0x1000, ALL_ACCESS).status, 0);
    d.poke(buf, b"readinv!");
    let w = Wqe::read(stag(2, 1), sink, 8, stag(1, 0), buf).inv(inv);
    d.send_wqe(10, &w);
    pump1(&mut d);
    assert_eq!(d.poll(CQ).unwrap().status, 0);
    assert_eq!(d.peek(sink, 8), b"readinv!");
    assert!(!d.dev.mr_valid(stag(2, 1)));
}

#[test]
fn read_with_invalidate() {
    read_with_invalidate_naming(stag(2, 1));
}

/// The kernel's rdma_rw (nvmet on iWARP) registers its sink with the next key and names the
/// previous one to invalidate: the index names the region.
#[test]
fn read_with_invalidate_names_the_sink_by_index() {
    read_with_invalidate_naming(stag(2, 0));
}

// ------------------------------------------------------------------------------------------------
// Doorbells and queues
// ------------------------------------------------------------------------------------------------

#[test]
fn level1_queues_and_extended_doorbells_with_swapped_pages() {
    let mut d = TestDriver::new(DeviceConfig::default());
    let f = fabric();
    d.attach(&f);
    d.dp_setup(1);
    // A context's doorbell pages: [SQ, CDB, RDB].
    let c = d.exec(crate::cmdq::Command::AllocDb, |s| {
        crate::cmdq::AllocDb { enable: 7 }.write_fields(s)
    });
    assert_eq!(c.status, 0);
    let sq_page = c.resp0 & 0xffff;
    let cdb = c.resp0 >> 32 & 0xffff;
    let rdb = c.resp0 >> 48;
    assert_eq!(d.create_cq(CQ, 6).status, 0);
    // QP 10 with SQ and RQ on scattered 4 KiB pages (level 1), QP 11 plain.
    let pages: Vec<u64> = (0..3).map(|_| d.alloc(0x1000, 0x1000)).collect();
    let mtt = d.alloc(24, 8);
    for (i, p) in pages.iter().rev().enumerate() {
        d.mem.write_u64_le(mtt + 8 * i as u64, *p).unwrap();
    }
    let req = CreateQp {
        qpn: 10,
        sq_depth_log2: 7,
        rq_depth_log2: 7,
        pdn: PDN,
        send_cqn: CQ,
        recv_cqn: CQ,
        ext_db: true,
        sq: QueueMttCfg {
            page_shift: 12,
            level: 1,
            count: 2,
            offset: 0,
            addr: mtt,
            more: [0; 3],
        },
        rq: QueueMttCfg {
            page_shift: 12,
            level: 0,
            count: 1,
            offset: 0,
            addr: pages[0],
            more: [0xdead; 3],
        },
        sq_dbrec: 0,
        rq_dbrec: 0,
        db_pages: (sq_page as u16, rdb as u16),
        qp_type: QP_TYPE_RC,
    };
    assert_eq!(d.create_qp_raw(&req).status, 0);
    // The helper records contiguous rings; this QP's SQ is scattered: fix up by hand.
    d.dp.qps.get_mut(&10).unwrap().sq = pages[2];
    assert_eq!(d.create_qp(11, CQ, 8, 6).status, 0);
    d.connect(10, 1, 11);
    d.connect(11, 1, 10);
    let buf = d.alloc(0x1000, 0x1000);
    assert_eq!(d.reg_mr(1, 0, PDN, buf, 0x1000, ALL_ACCESS).status, 0);
    // RQ doorbell for QP 11 on the "CDB" page (the swap), slot (11 & 127) * 32.
    let qpn11_rq_pi = d.dp.qps[&11].rq_pi;
    {
        let qp = d.dp.qps[&11].clone();
        let rqe = wire::Rqe {
            index: qpn11_rq_pi + 1,
            qpn: 11,
            sge: sge(buf, 64),
        };
        d.poke(qp.rq, &rqe.encode());
        d.dp.qps.get_mut(&11).unwrap().rq_pi += 1;
        d.w64(
            (cdb << 12) + regs::rq_db_slot(11),
            RqDoorbell { qpn: 11, pi: 1 }.encode(),
        );
    }
    // 100 WQEBBs of unsignaled WRITEs so that the SQ crosses from page 2 into page 1... the
    // helper writes the ring contiguously, so post at most one page (128 WQEBBs) here.
    let start = d.post_wqe(10, &Wqe::send_inline(b"ext"));
    d.w64(
        (sq_page << 12) + (10 & 31) * 128,
        SqDoorbell {
            qpn: 10,
            pi: d.dp.qps[&10].sq_pi,
        }
        .encode(),
    );
    pump1(&mut d);
    assert_eq!(d.peek(buf, 3), b"ext");
    let cqes = d.poll_all(CQ);
    assert_eq!(sq_cqe(&cqes, 10)[0].wqe_index, u32::from(start));
    // CQ arm on the "RDB" page, slot (CQN & 511) * 8.
    d.take_irqs();
    let db = crate::regs::CqDoorbell {
        ci: d.dp.cqs[&CQ].ci,
        cmdsn: 0,
        solicited: false,
        arm: true,
        cqn: CQ,
        seq: 0,
    };
    d.w64((rdb << 12) + 8, db.encode());
    d.send_wqe(11, &Wqe::write_inline(stag(1, 0), buf, b"y"));
    pump1(&mut d);
    assert_eq!(d.take_irqs(), [1]);
}

#[test]
fn bogus_doorbells_are_ignored() {
    let (mut d, _) = loopback();
    d.w64(
        regs::SQDB_SHARED_PAGE,
        SqDoorbell { qpn: 999, pi: 4 }.encode(),
    );
    d.w64(
        regs::SQDB_SHARED_PAGE,
        SqDoorbell {
            qpn: 10,
            pi: 0x8000,
        }
        .encode(),
    );
    d.w64(regs::RQDB_BASE, u64::MAX);
    d.w64(regs::CQDB_BASE, u64::MAX);
    d.w32(regs::CQDB_BASE, 1);
    d.w64(regs::EXTDB_BASE + 0x5000, 1);
    // A WQE with a wrong header index is a format error.
    let (mut d, buf) = loopback();
    let i = d.post_wqe(10, &Wqe::write_inline(stag(1, 0), buf, b"x"));
    let a = d.dp.qps[&10].sq + u64::from(i) * 32;
    let mut h = d.peek(a, 8);
    h[0] ^= 0x40;
    d.poke(a, &h);
    d.ring_sq(10);
    assert_eq!(d.poll(CQ).unwrap().status, wc::SEND_FORMAT);
}

#[test]
fn fabric_reset_of_responder_fails_held_sends() {
    let clock = Arc::new(ManualClock::new());
    let (mut a, mut b, _, _) = pair_on(&clock);
    a.send_wqe(10, &Wqe::send_inline(b"held"));
    pump2(&mut a, &mut b);
    assert!(a.poll(CQ).is_none());
    b.dev.reset();
    times_out(&clock, &mut [&mut a, &mut b]);
    // The responder's GIDs left the fabric with the reset.
    let m = a.dev.port().unwrap().resolve(&ipv4_gid([10, 0, 0, 2]));
    assert_eq!(m, None);
    let _ = dp::EQN;
}

// ------------------------------------------------------------------------------------------------
// UD
// ------------------------------------------------------------------------------------------------

/// Q_Key of the UD QPs of [`ud_pair`].
const QKEY: u32 = 0x1111_2222;
/// Q_Key of the GSI QP (IB_QP1_QKEY).
const GSI_QKEY: u32 = 0x8001_0000;
/// The non-GSI UD QP of [`ud_pair`].
const UD_QP: u32 = 5;
/// The AH of [`ud_pair`] towards the other function.
const AH: u32 = 3;

/// The AV of [`ud_pair`]'s AHs: IPv4 to 10.0.0.`host` via GID 0, TOS 0x28, TTL 17, SL 5.
fn ud_av(host: u8) -> AddressVector {
    AddressVector {
        traffic_class: 0x28,
        hop_limit: 17,
        sl: 5,
        flow_label: 0x1_2345,
        ..crate::testing::ipv4_av(0, host)
    }
}

/// Two functions (hosts 1 and 2) on one fabric, each with CQ 1, the GSI QP 1 (Q_Key
/// [`GSI_QKEY`]) and UD QP [`UD_QP`] (Q_Key [`QKEY`]) in RTS, MR 1 (64 KiB, all rights) and AH
/// [`AH`] towards the other host, all in PD [`PDN`].
fn ud_pair() -> (TestDriver, TestDriver, u64, u64) {
    let f = fabric();
    let mut a = TestDriver::new(DeviceConfig::default());
    let mut b = TestDriver::new(DeviceConfig::default());
    a.attach(&f);
    b.attach(&f);
    a.dp_setup(1);
    b.dp_setup(2);
    let mut bufs = [0u64; 2];
    for ((d, buf), peer) in [&mut a, &mut b]
        .into_iter()
        .zip(bufs.iter_mut())
        .zip([2, 1])
    {
        assert_eq!(d.create_cq(CQ, 6).status, 0);
        assert_eq!(d.create_ud_qp(1, CQ, 6, 4, PDN).status, 0);
        assert_eq!(d.create_ud_qp(UD_QP, CQ, 6, 4, PDN).status, 0);
        d.ud_ready(1, GSI_QKEY);
        d.ud_ready(UD_QP, QKEY);
        *buf = d.alloc(0x1_0000, 0x1000);
        assert_eq!(d.reg_mr(1, 0, PDN, *buf, 0x1_0000, ALL_ACCESS).status, 0);
        assert_eq!(d.create_ah(AH, PDN, ud_av(peer)).status, 0);
    }
    (a, b, bufs[0], bufs[1])
}

/// Whether an IPv4 header's checksum is right: its 16-bit words add up (ones' complement) to
/// 0xffff. Written here independently of the model's checksum.
fn ipv4_checksum_ok(h: &[u8]) -> bool {
    let mut sum: u32 = h
        .chunks_exact(2)
        .map(|w| (u32::from(w[0]) << 8) | u32::from(w[1]))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

#[test]
fn ud_datagrams_between_two_functions() {
    let (mut a, mut b, abuf, bbuf) = ud_pair();
    let payload = b"a management datagram";
    let n = payload.len();
    a.poke(abuf, payload);
    b.poke(bbuf + 0x100, &[0xee; 0x100]);
    let r = b.post_recv(UD_QP, bbuf + 0x100, 0x100, stag(1, 0));
    let s = a.send_wqe(
        UD_QP,
        &Wqe::ud_send(QKEY, UD_QP, AH, &[sge(abuf, n as u32)]),
    );
    // Complete as soon as the datagram is on the fabric.
    let sc = a.poll(CQ).expect("send CQE");
    assert_eq!(
        (
            sc.qtype,
            sc.opcode,
            sc.status,
            sc.wqe_index,
            sc.qpn,
            sc.byte_len,
            sc.ud
        ),
        (
            CQE_QTYPE_SQ,
            op::SEND,
            0,
            u32::from(s),
            UD_QP,
            n as u32,
            UdInfo::NONE
        )
    );
    assert!(b.poll(CQ).is_none());
    pump2(&mut a, &mut b);
    let rc = b.poll(CQ).expect("receive CQE");
    assert_eq!(
        (
            rc.qtype,
            rc.opcode,
            rc.status,
            rc.wqe_index,
            rc.qpn,
            rc.byte_len
        ),
        (
            CQE_QTYPE_RQ,
            op::RECEIVE,
            0,
            u32::from(r),
            UD_QP,
            40 + n as u32
        ),
        "the GRH area is counted"
    );
    assert_eq!(
        rc.ud,
        UdInfo {
            net_type: NetType::Ipv4,
            sl: 5,
            src_qpn: UD_QP
        }
    );
    // The GRH area: 20 zero bytes, then the IPv4 header.
    let area = b.peek(bbuf + 0x100, 40 + n + 1);
    assert_eq!(&area[..20], &[0; 20]);
    let ip = &area[20..40];
    assert_eq!(ip[0], 0x45, "version 4, IHL 5");
    assert_eq!(ip[1], 0x28, "TOS = traffic class");
    assert_eq!(
        be16(&ip[2..]),
        (20 + 8 + 12 + 8 + n + 4) as u16,
        "IP + UDP + BTH + DETH + payload + ICRC"
    );
    assert_eq!(be16(&ip[4..]), 0, "identification");
    assert_eq!(be16(&ip[6..]), 0x4000, "DF");
    assert_eq!((ip[8], ip[9]), (17, 17), "TTL = hop limit, UDP");
    assert!(
        ipv4_checksum_ok(ip),
        "header checksum {:#06x}",
        be16(&ip[10..])
    );
    assert_eq!(&ip[12..16], &[10, 0, 0, 1]);
    assert_eq!(&ip[16..20], &[10, 0, 0, 2]);
    assert_eq!(&area[40..40 + n], payload);
    assert_eq!(area[40 + n], 0xee, "nothing beyond the payload");
    assert_eq!(b.dev.qp_info(UD_QP).unwrap().1, 1, "RQ PSN");
    assert_eq!(a.dev.qp_info(UD_QP).unwrap().0, 1, "SQ PSN");
    // The answer through the GSI QPs, SEND_WITH_IMM and solicited: it wakes a solicited-only
    // arm that an unsolicited datagram does not.
    a.post_recv(1, abuf + 0x1000, 0x100, stag(1, 0));
    a.post_recv(1, abuf + 0x1100, 0x100, stag(1, 0));
    a.take_irqs();
    a.arm(CQ, true);
    b.send_wqe(1, &Wqe::ud_send_inline(GSI_QKEY, 1, AH, b"plain"));
    pump2(&mut a, &mut b);
    assert!(a.take_irqs().is_empty());
    let w = Wqe::ud_send_inline(GSI_QKEY, 1, AH, b"reply")
        .imm([1, 2, 3, 4])
        .solicited();
    b.send_wqe(1, &w);
    pump2(&mut a, &mut b);
    assert_eq!(a.take_irqs(), [1]);
    let cqes = a.poll_all(CQ);
    assert_eq!(cqes.len(), 2);
    let rc = cqes[1];
    assert_eq!(
        (rc.opcode, rc.status, rc.qpn, rc.byte_len, rc.extra, rc.ud),
        (
            op::RSP_SEND_IMM,
            0,
            1,
            45,
            CqeExtra::Imm([1, 2, 3, 4]),
            UdInfo {
                net_type: NetType::Ipv4,
                sl: 5,
                src_qpn: 1
            }
        )
    );
    let ip = a.peek(abuf + 0x1100 + 20, 20);
    assert_eq!(be16(&ip[2..]), 20 + 8 + 12 + 8 + 4 + 5 + 4, "with ImmDt");
    assert!(ipv4_checksum_ok(&ip));
    assert_eq!(
        (&ip[12..16], &ip[16..20]),
        (&[10, 0, 0, 2][..], &[10, 0, 0, 1][..])
    );
    assert_eq!(a.peek(abuf + 0x1100 + 40, 5), b"reply");
    let sq: Vec<_> = sq_cqe(&b.poll_all(CQ), 1)
        .iter()
        .map(|c| (c.opcode, c.status))
        .collect();
    assert_eq!(sq, [(op::SEND, 0), (op::SEND_WITH_IMM, 0)]);
    for d in [&mut a, &mut b] {
        let drops = d.control("query ud_drops").unwrap();
        assert!(drops.starts_with("ud_drops=0 "), "{drops}");
    }
    // Traffic counters: one packet per datagram.
    let stats = b.control("query stats").unwrap();
    assert!(
        stats.starts_with("tx_reqs=2 tx_packets=2 tx_bytes=10 "),
        "{stats}"
    );
    assert!(stats.contains(" rx_packets=1 rx_bytes=21 "), "{stats}");
}

#[test]
fn ud_loopback_over_ipv6() {
    let mut d = TestDriver::new(DeviceConfig::default());
    let f = fabric();
    d.attach(&f);
    d.dp_setup(1);
    let gid: Gid = [
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x12, 0x34, 0x56,
    ];
    assert_eq!(d.set_gid_typed(1, NetType::Ipv6, gid).status, 0);
    assert_eq!(d.create_cq(CQ, 6).status, 0);
    for qpn in [1, 6] {
        assert_eq!(d.create_ud_qp(qpn, CQ, 6, 4, PDN).status, 0);
        d.ud_ready(qpn, QKEY);
    }
    let buf = d.alloc(0x1000, 0x1000);
    assert_eq!(d.reg_mr(1, 0, PDN, buf, 0x1000, ALL_ACCESS).status, 0);
    let av = AddressVector {
        flow_label: 0xa_bcde,
        net_type: NetType::Ipv6,
        traffic_class: 0xb8,
        hop_limit: 255,
        sl: 7,
        udp_sport: 0xc123,
        sgid_index: 1,
        dmac: [0x52, 0x54, 0, 0x12, 0x34, 0x56],
        dgid: gid,
    };
    assert_eq!(d.create_ah(9, PDN, av).status, 0);
    let r = d.post_recv(6, buf + 0x200, 0x100, stag(1, 0));
    d.send_wqe(1, &Wqe::ud_send_inline(QKEY, 6, 9, b"over v6"));
    pump1(&mut d);
    let cqes = d.poll_all(CQ);
    assert_eq!(sq_cqe(&cqes, 1)[0].status, 0);
    let rc = cqes
        .iter()
        .find(|c| c.qtype == CQE_QTYPE_RQ)
        .expect("loopback receive");
    assert_eq!(
        (rc.qpn, rc.wqe_index, rc.opcode, rc.byte_len, rc.ud),
        (
            6,
            u32::from(r),
            op::RECEIVE,
            47,
            UdInfo {
                net_type: NetType::Ipv6,
                sl: 7,
                src_qpn: 1
            }
        )
    );
    let h = d.peek(buf + 0x200, 47);
    assert_eq!(
        u32::from_be_bytes([h[0], h[1], h[2], h[3]]),
        6 << 28 | 0xb8 << 20 | 0xa_bcde,
        "version, traffic class, flow label"
    );
    assert_eq!(be16(&h[4..]), 8 + 12 + 8 + 7 + 4, "payload length");
    assert_eq!((h[6], h[7]), (17, 255), "next header UDP, hop limit");
    assert_eq!(&h[8..24], &gid);
    assert_eq!(&h[24..40], &gid);
    assert_eq!(&h[40..], b"over v6");
    // The AH shows up in the object queries.
    assert_eq!(d.control("query ahs"), Ok("ahs=1".into()));
    assert_eq!(d.control("query ahns"), Ok(format!("ahns=9:{PDN}")));
    assert_eq!(d.control("query objects"), Ok("objects=2/1/1/1".into()));
    assert_eq!(d.destroy_ah(9, PDN).status, 0);
    assert_eq!(d.control("query ahns"), Ok("ahns=".into()));
    assert_eq!(d.control("query objects"), Ok("objects=2/1/1/0".into()));
}

#[test]
fn ud_datagrams_nobody_can_take_are_dropped() {
    let (mut a, mut b, _, bbuf) = ud_pair();
    // On b: an RC QP 10 in RTS and a UD QP 7 left in INIT, each with a receive WQE; the GSI QP
    // has none.
    assert_eq!(b.create_qp(10, CQ, 6, 4).status, 0);
    b.connect(10, 1, 10);
    assert_eq!(b.create_ud_qp(7, CQ, 6, 4, PDN).status, 0);
    assert_eq!(b.modify_state(7, QpState::Init).status, 0);
    for qpn in [UD_QP, 10, 7] {
        b.post_recv(qpn, bbuf, 0x100, stag(1, 0));
    }
    // A third function with no QP at all (its driver has no GSI QP yet), and an AH to nowhere.
    let fabric = a.dev.port().unwrap().fabric().clone();
    let mut c = TestDriver::new(DeviceConfig::default());
    c.attach(&fabric);
    c.dp_setup(3);
    assert_eq!(a.create_ah(4, PDN, ud_av(77)).status, 0);
    assert_eq!(a.create_ah(5, PDN, ud_av(3)).status, 0);
    let cases = [
        (QKEY ^ 1, UD_QP, AH),
        (QKEY, 99, AH),
        (QKEY, 10, AH),
        (QKEY, 7, AH),
        (GSI_QKEY, 1, AH),
        (QKEY, UD_QP, 4),
        (GSI_QKEY, 1, 5),
    ];
    for (qkey, dst, ahn) in cases {
        a.send_wqe(UD_QP, &Wqe::ud_send_inline(qkey, dst, ahn, b"lost"));
        let sc = a.poll(CQ).expect("the sender completes");
        assert_eq!(sc.status, 0, "to QP {dst} by AH {ahn}: UD is unreliable");
        pump(&mut [&mut a, &mut b, &mut c]);
        assert!(b.poll(CQ).is_none(), "to QP {dst}");
    }
    assert_eq!(
        b.control("query ud_drops"),
        Ok(
            "ud_drops=5 no_fabric=0 unknown_gid=0 congested=0 no_qp=1 not_ud=1 not_ready=1 \
            qkey=1 no_rqe=1"
                .into()
        )
    );
    let drops = a.control("query ud_drops").unwrap();
    assert!(
        drops.starts_with("ud_drops=1 no_fabric=0 unknown_gid=1 "),
        "{drops}"
    );
    let drops = c.control("query ud_drops").unwrap();
    assert!(drops.starts_with("ud_drops=1 "), "{drops}");
    assert!(drops.contains(" no_qp=1 "), "{drops}");
    // Nobody changed state; the RQEs are still there for a datagram that fits.
    assert_eq!(a.dev.qp_info(UD_QP).unwrap().2, QpState::Rts);
    assert_eq!(b.dev.qp_info(UD_QP).unwrap().2, QpState::Rts);
    assert_eq!(b.dev.qp_info(7).unwrap().2, QpState::Init);
    assert_eq!(b.dev.qp_info(10).unwrap().2, QpState::Rts);
    a.send_wqe(UD_QP, &Wqe::ud_send_inline(QKEY, UD_QP, AH, b"found"));
    pump2(&mut a, &mut b);
    let rc = b.poll(CQ).expect("delivered");
    assert_eq!((rc.qpn, rc.wqe_index, rc.status), (UD_QP, 0, 0));
    // Without a fabric the datagram is dropped too, and the sender still succeeds.
    let mut d = TestDriver::new(DeviceConfig::default());
    d.dp_setup(1);
    assert_eq!(d.create_cq(CQ, 6).status, 0);
    assert_eq!(d.create_ud_qp(1, CQ, 6, 4, PDN).status, 0);
    d.ud_ready(1, GSI_QKEY);
    assert_eq!(d.create_ah(0, PDN, ud_av(1)).status, 0);
    d.send_wqe(1, &Wqe::ud_send_inline(GSI_QKEY, 1, 0, b"mad"));
    assert_eq!(d.poll(CQ).unwrap().status, 0);
    let drops = d.control("query ud_drops").unwrap();
    assert!(drops.starts_with("ud_drops=1 no_fabric=1 "), "{drops}");
}

#[test]
fn ud_receive_errors_keep_the_qp() {
    let (mut a, mut b, _, bbuf) = ud_pair();
    b.poke(bbuf, &[0xee; 0x100]);
    assert_eq!(b.reg_mr(2, 0, PDN + 1, bbuf, 0x1000, ALL_ACCESS).status, 0);
    assert_eq!(
        b.reg_mr(3, 0, PDN, bbuf, 0x1000, access::LOCAL_READ).status,
        0
    );
    let rqes = [
        b.post_recv(UD_QP, bbuf, 40 + 4, stag(1, 0)), // one byte short
        b.post_recv(UD_QP, 0, 0, 0),                  // no SGE
        b.post_recv(UD_QP, bbuf, 0x100, stag(9, 0)),  // no such MR
        b.post_recv(UD_QP, bbuf, 0x100, stag(2, 0)),  // another PD
        b.post_recv(UD_QP, bbuf, 0x100, stag(3, 0)),  // no local write
        b.post_recv(UD_QP, bbuf + 0x800, 0x100, stag(1, 0)),
    ];
    for _ in rqes {
        a.send_wqe(UD_QP, &Wqe::ud_send_inline(QKEY, UD_QP, AH, b"12345"));
    }
    pump2(&mut a, &mut b);
    let got: Vec<_> = b
        .poll_all(CQ)
        .iter()
        .map(|c| (c.qtype, c.wqe_index, c.status, c.ud.src_qpn))
        .collect();
    let want: Vec<_> = rqes
        .iter()
        .zip([
            wc::RECV_BOUNDS,
            wc::RECV_BOUNDS,
            wc::RECV_STAG,
            wc::RECV_PD,
            wc::RECV_ACCESS,
            wc::SUCCESS,
        ])
        .map(|(&r, st)| (CQE_QTYPE_RQ, u32::from(r), st, UD_QP))
        .collect();
    assert_eq!(got, want);
    assert_eq!(b.peek(bbuf, 0x100), [0xee; 0x100], "nothing written");
    assert_eq!(b.peek(bbuf + 0x800 + 40, 5), b"12345");
    assert_eq!(b.dev.qp_info(UD_QP).unwrap().2, QpState::Rts);
    let sent = a.poll_all(CQ);
    assert_eq!(sent.len(), 6);
    assert!(sent.iter().all(|c| c.status == 0));
    // A malformed RQE (wrong index) completes with 2, and the QP still works after it.
    let bad = b.post_recv(UD_QP, bbuf, 0x100, stag(1, 0));
    let at = b.dp.qps[&UD_QP].rq + u64::from(bad) * 32;
    b.poke(at, &[0xff, 0xff]);
    b.post_recv(UD_QP, bbuf + 0x800, 0x100, stag(1, 0));
    for _ in 0..2 {
        a.send_wqe(UD_QP, &Wqe::ud_send_inline(QKEY, UD_QP, AH, b"again"));
    }
    pump2(&mut a, &mut b);
    let st: Vec<_> = b.poll_all(CQ).iter().map(|c| c.status).collect();
    assert_eq!(st, [wc::RECV_FORMAT, wc::SUCCESS]);
    assert_eq!(b.dev.qp_info(UD_QP).unwrap().2, QpState::Rts);
}

#[test]
fn ud_requester_errors() {
    // An AHN that is not live: 8, QP to ERROR (its RQE flushed).
    let (mut a, _b, abuf, _) = ud_pair();
    a.post_recv(UD_QP, abuf, 0x100, stag(1, 0));
    a.send_wqe(UD_QP, &Wqe::ud_send_inline(QKEY, UD_QP, 7, b"x"));
    let st: Vec<_> = a.poll_all(CQ).iter().map(|c| (c.qtype, c.status)).collect();
    assert_eq!(
        st,
        [(CQE_QTYPE_SQ, wc::SEND_FORMAT), (CQE_QTYPE_RQ, wc::FLUSHED)]
    );
    assert_eq!(a.dev.qp_info(UD_QP).unwrap().2, QpState::Error);
    // A destroyed AH is not live any more: 8.
    let (mut a, _b, _, _) = ud_pair();
    assert_eq!(a.destroy_ah(AH, PDN).status, 0);
    a.send_wqe(1, &Wqe::ud_send_inline(GSI_QKEY, 1, AH, b"x"));
    assert_eq!(a.poll(CQ).unwrap().status, wc::SEND_FORMAT);
    assert_eq!(a.dev.qp_info(1).unwrap().2, QpState::Error);
    // An AH of another PD: 13.
    let (mut a, _b, _, _) = ud_pair();
    assert_eq!(a.create_ah(7, PDN + 1, ud_av(2)).status, 0);
    a.send_wqe(UD_QP, &Wqe::ud_send_inline(QKEY, UD_QP, 7, b"x"));
    assert_eq!(a.poll(CQ).unwrap().status, wc::SEND_PD);
    assert_eq!(a.dev.qp_info(UD_QP).unwrap().2, QpState::Error);
    // Opcodes other than SEND / SEND_WITH_IMM: 8.
    for w in [
        Wqe::write_inline(stag(1, 0), 0, b"x"),
        Wqe::ud_send_inline(QKEY, UD_QP, AH, b"x").opcode(op::SEND_WITH_INV),
    ] {
        let (mut a, _b, _, _) = ud_pair();
        a.send_wqe(1, &w);
        assert_eq!(a.poll(CQ).unwrap().status, wc::SEND_FORMAT);
        assert_eq!(a.dev.qp_info(1).unwrap().2, QpState::Error);
    }
    // A local SGE problem: the RC codes.
    let (mut a, _b, abuf, _) = ud_pair();
    let bad = Sge {
        addr: abuf,
        len: 8,
        key: stag(9, 0),
    };
    a.send_wqe(UD_QP, &Wqe::ud_send(QKEY, UD_QP, AH, &[bad]));
    assert_eq!(a.poll(CQ).unwrap().status, wc::SEND_STAG);
    // The MTU: 4096 before any CONF_MTU, then the largest IB MTU within it.
    let (mut a, mut b, abuf, bbuf) = ud_pair();
    b.post_recv(UD_QP, bbuf, 40 + 4096, stag(1, 0));
    a.send_wqe(UD_QP, &Wqe::ud_send(QKEY, UD_QP, AH, &[sge(abuf, 4096)]));
    pump2(&mut a, &mut b);
    assert_eq!(a.poll(CQ).unwrap().status, 0);
    assert_eq!(b.poll(CQ).unwrap().byte_len, 40 + 4096);
    a.send_wqe(UD_QP, &Wqe::ud_send(QKEY, UD_QP, AH, &[sge(abuf, 4097)]));
    assert_eq!(a.poll(CQ).unwrap().status, wc::SEND_FORMAT);
    for (mtu, ok) in [(1500, 1024), (9000, 4096), (2048, 2048), (300, 256)] {
        let (mut a, _b, abuf, _) = ud_pair();
        let cqe = a.exec(Command::ConfMtu, |s| ConfMtu { mtu }.write_fields(s));
        assert_eq!(cqe.status, 0);
        a.send_wqe(UD_QP, &Wqe::ud_send(QKEY, UD_QP, AH, &[sge(abuf, ok)]));
        assert_eq!(a.poll(CQ).unwrap().status, 0, "MTU {mtu}: {ok} bytes");
        a.send_wqe(UD_QP, &Wqe::ud_send(QKEY, UD_QP, AH, &[sge(abuf, ok + 1)]));
        assert_eq!(a.poll(CQ).unwrap().status, wc::SEND_FORMAT, "MTU {mtu}");
    }
}

#[test]
fn ud_source_gid_not_populated_sends_the_zero_address() {
    let (mut a, mut b, _, bbuf) = ud_pair();
    // GID index 2 is inside the table but empty.
    let av = AddressVector {
        sgid_index: 2,
        ..ud_av(2)
    };
    assert_eq!(a.create_ah(6, PDN, av).status, 0);
    b.post_recv(UD_QP, bbuf, 0x100, stag(1, 0));
    a.send_wqe(UD_QP, &Wqe::ud_send_inline(QKEY, UD_QP, 6, b"anon"));
    assert_eq!(a.poll(CQ).unwrap().status, 0);
    pump2(&mut a, &mut b);
    assert_eq!(b.poll(CQ).unwrap().status, 0);
    let ip = b.peek(bbuf + 20, 20);
    assert_eq!(&ip[12..16], &[0, 0, 0, 0]);
    assert_eq!(&ip[16..20], &[10, 0, 0, 2]);
    assert!(ipv4_checksum_ok(&ip));
}

// ------------------------------------------------------------------------------------------------
// Bounds: segments and windows
// ------------------------------------------------------------------------------------------------

/// [`pair`] plus MR 2 of `len` bytes on each side (every right), A's filled with a pattern.
fn pair_with_big_mrs(len: u64) -> (TestDriver, TestDriver, u64, u64) {
    let (mut a, mut b, _, _) = pair();
    let abig = a.alloc(len, 0x1000);
    let bbig = b.alloc(len, 0x1000);
    assert_eq!(a.reg_mr(2, 0, PDN, abig, len, ALL_ACCESS).status, 0);
    assert_eq!(b.reg_mr(2, 0, PDN, bbig, len, ALL_ACCESS).status, 0);
    let pattern: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4099) as u8).collect();
    a.poke(abig, &pattern);
    (a, b, abig, bbig)
}

/// A message longer than a segment travels as several requests of at most
/// [`crate::fabric::SEGMENT`] bytes (the fabric never holds it whole) and arrives intact:
/// SEND into one receive WQE (one CQE with the whole byte count), WRITE with immediate, and
/// READ (its sink filled a segment at a time).
#[test]
fn large_messages_move_in_segments() {
    use crate::fabric::SEGMENT;
    let len: u64 = 2 * SEGMENT + 12_345;
    let (mut a, mut b, abig, bbig) = pair_with_big_mrs(len);
    let want = a.peek(abig, len as usize);
    let big = |addr| Sge {
        addr,
        len: len as u32,
        key: stag(2, 0),
    };
    let r = b.post_recv(10, bbig, len as u32, stag(2, 0));
    a.send_wqe(10, &Wqe::send(&[big(abig)]));
    assert_eq!(b.dev.fabric_pending(), 3, "three segments, not one message");
    pump2(&mut a, &mut b);
    assert!(b.peek(bbig, len as usize) == want, "sent");
    let rc = b.poll(CQ).expect("one receive CQE");
    assert_eq!(
        (rc.status, rc.wqe_index, rc.byte_len),
        (0, u32::from(r), len as u32)
    );
    assert!(b.poll(CQ).is_none(), "one CQE for the message");
    let sc = a.poll(CQ).expect("send CQE");
    assert_eq!((sc.status, sc.byte_len), (0, len as u32));
    // PSNs advance per message, not per segment.
    assert_eq!(a.dev.qp_info(10).unwrap().0, 201);
    assert_eq!(b.dev.qp_info(10).unwrap().1, 101);

    // WRITE with immediate: B's buffer rewritten from A's (zero it first).
    b.poke(bbig, &vec![0; len as usize]);
    b.post_recv(10, bbig, 0, stag(2, 0));
    let w = Wqe::write(stag(2, 0), bbig, &[big(abig)]).imm([1, 2, 3, 4]);
    a.send_wqe(10, &w);
    pump2(&mut a, &mut b);
    let sc = a.poll(CQ).expect("write CQE");
    assert_eq!((sc.status, sc.byte_len), (0, len as u32));
    assert!(b.peek(bbig, len as usize) == want, "written");
    let rc = b.poll(CQ).expect("the immediate's CQE");
    assert_eq!(
        (rc.status, rc.opcode, rc.byte_len),
        (0, op::RECV_IMM, len as u32)
    );

    // READ back into A's buffer, zeroed.
    a.poke(abig, &vec![0; len as usize]);
    a.send_wqe(
        10,
        &Wqe::read(stag(2, 0), abig, len as u32, stag(2, 0), bbig),
    );
    pump2(&mut a, &mut b);
    let rc = a.poll(CQ).expect("read CQE");
    assert_eq!((rc.status, rc.byte_len), (0, len as u32));
    assert!(a.peek(abig, len as usize) == want, "read");
    assert_eq!((a.dev.inflight_bytes(), b.dev.inflight_bytes()), (0, 0));
}

/// A deep SQ of large SENDs to a QP without receives: the requester stops taking WQEs once
/// its window is full (nothing is lost, nothing fails, the held bytes stay bounded), and goes
/// on as receives are posted, until every message has arrived in order.
#[test]
fn a_full_window_holds_the_sq_back_without_losing_anything() {
    use crate::device::{PENDING_COST, QP_WINDOW};
    use crate::fabric::SEGMENT;
    let len: u64 = 3 * SEGMENT;
    let (mut a, mut b, abig, bbig) = pair_with_big_mrs(len);
    let n = 16;
    for i in 0..n {
        // Each message starts with its number.
        a.poke(abig, &[i as u8]);
        let sge = Sge {
            addr: abig,
            len: len as u32,
            key: stag(2, 0),
        };
        a.post_wqe(10, &Wqe::send(&[sge]));
    }
    a.ring_sq(10);
    pump2(&mut a, &mut b);
    let inflight = a.dev.inflight_bytes();
    assert!(
        inflight <= QP_WINDOW && inflight > QP_WINDOW - SEGMENT - PENDING_COST,
        "{inflight} bytes in flight"
    );
    assert!(
        b.dev.held_bytes() <= QP_WINDOW,
        "held {}",
        b.dev.held_bytes()
    );
    let queues = a.control("query queues").unwrap();
    assert!(queues.starts_with("queues=q10:RTS:"), "{queues}");
    assert!(a.poll(CQ).is_none(), "nothing completes, nothing fails");
    // One receive at a time: each lets one message in and the SQ go on.
    let mut got = 0;
    for _ in 0..n {
        b.post_recv(10, bbig, len as u32, stag(2, 0));
        pump2(&mut a, &mut b);
        let rc = b.poll(CQ).expect("a message per receive");
        assert_eq!((rc.status, rc.byte_len), (0, len as u32));
        assert!(a.dev.inflight_bytes() <= QP_WINDOW);
        got += 1;
    }
    assert_eq!(got, n);
    let sends = a.poll_all(CQ);
    assert_eq!(sends.len(), n);
    assert!(sends.iter().all(|c| c.status == 0));
    assert_eq!((a.dev.inflight_bytes(), b.dev.held_bytes()), (0, 0));
}
