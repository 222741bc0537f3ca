// SPDX-License-Identifier: GPL-2.0

//! The model never panics on guest input:
//!
//! * ~100k pseudo-random accesses of random sizes, offsets and values at configuration space,
//!   BAR0 and BAR2, then the identity must be intact;
//! * ~100k random steps against an initialized device whose rings live in test guest memory:
//!   random and half-valid commands, doorbells with random producer/consumer indices, arms,
//!   resets, control commands and test-page accesses, guest scribbles over the rings, delayed
//!   completions; afterwards the device must still work;
//! * hostile RoCEv2 and UD data-path traffic, and hostile iWARP traffic (random MODIFY_QPs in
//!   the iWARP layout, colliding tuples, broken streams, re-created QPs, retransmission timers)
//!   between two functions; afterwards fresh QPs must still move data.

use std::sync::Arc;
use std::time::Duration;

use erdma_model::cmdq::{self, Command, Cqe, Header, OpCode};
use erdma_model::pci::{self, ConfigSpace};
use erdma_model::regs::{self, test_page};
use erdma_model::testing::{layout, RecordingIrqs, TestDriver, VecMemory, XorShift};
use erdma_model::{Caps, Device, DeviceConfig, GuestMemory, Io, ManualClock, Protocol};

/// Offsets biased towards the interesting places, with the occasional wild one.
fn offset(rng: &mut XorShift, size: u64) -> u64 {
    match rng.below(16) {
        0..=7 => rng.below(size.min(0x400)),
        8..=11 => rng.below(size),
        12 => size.saturating_sub(rng.below(16)),
        13 => u64::MAX - rng.below(16),
        14 => rng.next_u64(),
        _ => regs::CMDQ_SQ_DB & (size - 1) | rng.below(8),
    }
}

fn len(rng: &mut XorShift) -> usize {
    match rng.below(10) {
        0..=7 => [1, 2, 4, 8][rng.below(4) as usize],
        8 => rng.below(16) as usize,
        _ => rng.below(300) as usize,
    }
}

fn read32(dev: &mut Device, off: u64) -> u32 {
    let mut b = [0u8; 4];
    dev.bar0_read(off, &mut b);
    u32::from_le_bytes(b)
}

#[test]
fn random_accesses_never_panic_and_keep_identity() {
    let config = DeviceConfig {
        mac: [0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee],
        protocol: Protocol::Iwarp,
        version: 0x77,
        revision: 0x05,
        grp_num: 4,
        ..Default::default()
    };
    let mut dev = Device::new(config.clone());
    let mut mem = VecMemory::new(0x10_0000, 0x10_0000);
    let mut irq = RecordingIrqs::all_connected();
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut buf = vec![0u8; 512];

    for i in 0..100_000u32 {
        let n = len(&mut rng);
        for b in &mut buf[..n] {
            *b = rng.next_u64() as u8;
        }
        // Mostly valid-looking values for DEV_CTRL so that RESET/INIT really happen.
        if rng.below(50) == 0 {
            let v = 1 + rng.below(3) as u32;
            let mut io = Io::new(&mut mem, &mut irq);
            dev.bar0_write(regs::DEV_CTRL, &v.to_le_bytes(), &mut io);
        }
        let write = rng.below(2) == 0;
        match rng.below(8) {
            0 => {
                let off = offset(&mut rng, pci::CONFIG_SPACE_SIZE as u64);
                if write {
                    dev.pci_config_write(off, &buf[..n]);
                } else {
                    dev.pci_config_read(off, &mut buf[..n]);
                }
            }
            1 => {
                let off = offset(&mut rng, regs::BAR2_SIZE);
                if write {
                    dev.bar2_write(off, &buf[..n]);
                } else {
                    dev.bar2_read(off, &mut buf[..n]);
                }
            }
            _ => {
                let off = offset(&mut rng, regs::BAR0_SIZE);
                if write {
                    let mut io = Io::new(&mut mem, &mut irq);
                    dev.bar0_write(off, &buf[..n], &mut io);
                } else {
                    dev.bar0_read(off, &mut buf[..n]);
                }
            }
        }
        if i % 10_000 == 0 {
            dev.reset();
        }
    }

    // Identity is read-only whatever was written.
    let fresh = ConfigSpace::new(config.revision);
    let mut ids = [0u8; 0x10];
    dev.pci_config_read(0, &mut ids);
    assert_eq!(ids[..4], fresh.bytes()[..4], "vendor/device");
    assert_eq!(ids[8..12], fresh.bytes()[8..12], "revision/class");
    let mut sub = [0u8; 4];
    dev.pci_config_read(0x2c, &mut sub);
    assert_eq!(sub, [0xed, 0x1d, 0x7f, 0x10]);
    let mut cap = [0u8; 12];
    dev.pci_config_read(0x40, &mut cap);
    assert_eq!(cap[0], 0x11);
    assert_eq!(cap[4..], fresh.bytes()[0x44..0x4c]);
    assert_eq!(read32(&mut dev, regs::VERSION), 0x77);
    assert_eq!(read32(&mut dev, regs::DEV_PROTO), 0);
    assert_eq!(read32(&mut dev, regs::NETDEV_MAC_L), 0xbbcc_ddee);
    assert_eq!(read32(&mut dev, regs::NETDEV_MAC_H), 0x02aa);
    assert_eq!(read32(&mut dev, regs::GRP_NUM), 4);
    assert_eq!(dev.device_config(), &config);
}

/// A plausible or wild value for a command field.
fn field(rng: &mut XorShift, plausible: u64) -> u64 {
    match rng.below(10) {
        0 => rng.next_u64(),
        1 => plausible ^ (1 << rng.below(64)),
        _ => plausible,
    }
}

/// A plausible value in `lo..lo + span`, or a wild one.
fn field_in(rng: &mut XorShift, lo: u64, span: u64) -> u64 {
    let p = lo + rng.below(span);
    field(rng, p)
}

/// A guest address: mostly inside the test memory, sometimes not.
fn address(rng: &mut XorShift) -> u64 {
    match rng.below(8) {
        0 => rng.next_u64(),
        1 => layout::MEM_BASE + layout::MEM_SIZE as u64 - rng.below(0x200),
        _ => layout::SCRATCH + (rng.below(0x8_0000) & !0xf),
    }
}

/// Fills a command slot with random bytes and, often, plausible fields for its opcode.
fn command_body(rng: &mut XorShift, code: OpCode, slot: &mut [u8]) {
    for b in slot[8..].iter_mut() {
        *b = rng.next_u64() as u8;
    }
    if rng.below(4) == 0 {
        return;
    }
    match Command::from_code(code) {
        Some(Command::CreateEq) => {
            let eqn = field_in(rng, 1, 31) as u8;
            cmdq::CreateEq {
                ring: field(rng, layout::CEQS + u64::from(eqn % 32) * 0x1000),
                vector: field(rng, u64::from(eqn)) as u8,
                eqn,
                depth_log2: field_in(rng, 1, 8) as u8,
                ty: field(rng, 1) as u8,
                dbrec: field(rng, layout::CEQ_DBRECS + 8 * u64::from(eqn % 32)),
            }
            .write_fields(slot)
        }
        Some(Command::DestroyEq) => cmdq::DestroyEq {
            vector: rng.next_u64() as u8,
            eqn: field_in(rng, 1, 31) as u8,
            ty: field(rng, 1) as u8,
        }
        .write_fields(slot),
        Some(Command::GetStats) => cmdq::GetStats {
            index: rng.next_u64() as u32,
            addr: address(rng),
            len: field(rng, 256) as u32,
        }
        .write_fields(slot),
        Some(Command::ConfMtu) => cmdq::ConfMtu {
            mtu: field(rng, 1500) as u32,
        }
        .write_fields(slot),
        Some(Command::ConfDevice) => cmdq::ConfDevice {
            page_size_enable: rng.below(2) == 0,
            page_shift: field_in(rng, 12, 6) as u8,
        }
        .write_fields(slot),
        Some(Command::AllocDb) => cmdq::AllocDb {
            enable: field(rng, 7) as u32,
        }
        .write_fields(slot),
        Some(Command::SetGid) => {
            let mut gid = [0u8; cmdq::GID_SIZE];
            for b in gid.iter_mut() {
                *b = rng.next_u64() as u8;
            }
            let op = if rng.below(3) == 0 {
                cmdq::GidOp::Delete
            } else {
                cmdq::GidOp::Add {
                    net_type: cmdq::NetType::from_bit(rng.below(2) == 0),
                    gid,
                }
            };
            cmdq::SetGid {
                index: field_in(rng, 0, 18) as u16,
                op,
            }
            .write_fields(slot)
        }
        Some(Command::CreateAh) => {
            let mut dgid = [0u8; cmdq::GID_SIZE];
            for b in dgid.iter_mut() {
                *b = rng.next_u64() as u8;
            }
            cmdq::CreateAh {
                pdn: field_in(rng, 0, 4) as u32,
                ahn: field_in(rng, 0, 64) as u32,
                av: cmdq::AddressVector {
                    flow_label: rng.next_u64() as u32,
                    net_type: cmdq::NetType::from_bit(rng.below(2) == 0),
                    traffic_class: rng.next_u64() as u8,
                    hop_limit: rng.next_u64() as u8,
                    sl: rng.next_u64() as u8,
                    udp_sport: rng.next_u64() as u16,
                    sgid_index: field_in(rng, 0, 18) as u16,
                    dmac: [0x52, 0x54, 0, 0, 0, rng.next_u64() as u8],
                    dgid,
                },
            }
            .write_fields(slot)
        }
        Some(Command::DestroyAh) => cmdq::DestroyAh {
            pdn: field_in(rng, 0, 4) as u32,
            ahn: field_in(rng, 0, 64) as u32,
        }
        .write_fields(slot),
        Some(Command::FreeDb) => cmdq::FreeDb {
            enable: field(rng, 7) as u32,
            rq_page: field_in(rng, 256, 768) as u16,
            sq_page: field_in(rng, 256, 768) as u16,
            cq_page: field_in(rng, 256, 768) as u16,
        }
        .write_fields(slot),
        _ => {}
    }
}

const CONTROL_WORDS: [&str; 26] = [
    "fail",
    "delay",
    "refuse-init",
    "aeq",
    "ceq",
    "stats",
    "clear",
    "query",
    "any",
    "all",
    "COMMON.CREATE_EQ",
    "RDMA.QUERY_DEVICE",
    "1.4",
    "status=3",
    "ms=5",
    "count=2",
    "skip=1",
    "type=3",
    "data0=7",
    "eqn=1",
    "cqn=5",
    "tx_reqs=9",
    "off",
    "count=forever",
    "gids",
    "ahs",
];

/// A random control line: mostly valid-looking words, sometimes garbage.
fn control_line(rng: &mut XorShift) -> String {
    if rng.below(10) == 0 {
        let n = rng.below(40) as usize;
        return (0..n).map(|_| (rng.below(95) as u8 + 32) as char).collect();
    }
    let n = 1 + rng.below(5) as usize;
    let words: Vec<&str> = (0..n)
        .map(|_| CONTROL_WORDS[rng.below(CONTROL_WORDS.len() as u64) as usize])
        .collect();
    words.join(" ")
}

#[test]
fn random_commands_and_doorbells_on_live_rings() {
    let clock = Arc::new(ManualClock::new());
    let config = DeviceConfig {
        test_page: true,
        caps: Caps::default(),
        ..Default::default()
    };
    let mut t = TestDriver::with(config, clock.clone(), 64, 8, 8);
    assert!(t.init());
    let mut rng = XorShift(0x0123_4567_89ab_cdef);
    let known: Vec<OpCode> = Command::ALL.iter().map(|c| c.code()).collect();
    let mut statuses = [0u64; 256];

    for i in 0..100_000u32 {
        match rng.below(100) {
            // A command, well-formed header, random or plausible body.
            0..=29 => {
                let code = if rng.below(4) == 0 {
                    OpCode {
                        sub: rng.below(4) as u8,
                        op: rng.next_u64() as u8,
                    }
                } else {
                    known[rng.below(known.len() as u64) as usize]
                };
                let n = 1 + rng.below(4) as u16;
                let header = Header {
                    wqebb_index: t.sq_pi.wrapping_add(n),
                    code,
                    cookie: rng.next_u64() as u16,
                    wqebbs: n,
                };
                let mut seed = XorShift(rng.next_u64() | 1);
                t.queue_raw(header.encode(), n, |s| command_body(&mut seed, code, s));
                if rng.below(3) != 0 {
                    t.ring();
                }
            }
            // A garbage header.
            30..=34 => {
                let n = 1 + rng.below(4) as u16;
                let h = rng.next_u64();
                t.queue_raw(h, n, |_| {});
                t.ring();
            }
            // A doorbell with a random producer index.
            35..=37 => {
                t.sq_pi = match rng.below(3) {
                    0 => rng.next_u64() as u16,
                    1 => t.sq_pi.wrapping_add(rng.below(130) as u16),
                    _ => t.sq_pi.wrapping_sub(rng.below(8) as u16),
                };
                t.ring();
            }
            // The driver consumes completions and events.
            38..=49 => {
                while let Some(c) = t.poll_cqe() {
                    statuses[usize::from(c.status)] += 1;
                }
                while t.poll_eqe() {}
                while t.poll_aeqe().is_some() {}
                t.cmdsn = t.cmdsn.wrapping_add(1);
                t.arm_cq();
                t.arm_eq();
                t.arm_aeq();
            }
            // Arms and EQ doorbells with random values.
            50..=57 => {
                let off = match rng.below(4) {
                    0 => regs::CMDQ_CQ_DB,
                    1 => regs::AEQ_DB,
                    _ => regs::eq_db(rng.below(32) as u8),
                };
                let v = if rng.below(2) == 0 {
                    rng.next_u64()
                } else {
                    (1 << 31) | rng.below(0x1_0000)
                };
                t.w64(off, v);
            }
            // Control commands, through the API and the test page.
            58..=63 => {
                let line = control_line(&mut rng);
                let _ = t.control(&line);
            }
            64..=65 => {
                let base = regs::TEST_PAGE_BASE;
                let line = control_line(&mut rng);
                let mut bytes = line.into_bytes();
                bytes.truncate(255);
                bytes.push(0);
                t.write(base + test_page::MAILBOX, &bytes);
                t.w32(base + test_page::EXECUTE, 1);
                let off = rng.below(regs::TEST_PAGE_SIZE);
                let n = [1, 2, 4, 8][rng.below(4) as usize];
                let v = rng.next_u64().to_le_bytes();
                t.write(base + off, &v[..n]);
                t.read(base + off, n);
            }
            // Events from the engines.
            66..=69 => {
                let mut io = Io::new(&mut t.mem, &mut t.irq);
                let _ = t
                    .dev
                    .post_ceqe(rng.below(40) as u8, rng.next_u64() as u32, &mut io);
                let ev = erdma_model::wire::AeqEvent {
                    ty: rng.next_u64() as u8,
                    subtype: rng.next_u64() as u8,
                    data0: rng.next_u64() as u32,
                    data1: rng.next_u64() as u32,
                };
                let _ = t.dev.post_aeqe(ev, &mut io);
            }
            // Time passes, delayed completions come out.
            70..=74 => {
                clock.advance(Duration::from_millis(rng.below(20)));
                t.run_due();
            }
            // The guest scribbles over its rings.
            75..=77 => {
                let off = rng.below(0x5_0000);
                let n = rng.below(64) as usize;
                let junk: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
                t.mem.write(layout::MEM_BASE + off, &junk).unwrap();
            }
            // Random register-page accesses.
            78..=89 => {
                let off = rng.below(regs::REG_PAGE_SIZE + 16);
                let n = [1, 2, 4, 8][rng.below(4) as usize];
                if rng.below(2) == 0 {
                    let v = rng.next_u64().to_le_bytes();
                    // Keep DEV_CTRL writes rare: they are the next case.
                    if off & !7 != regs::DEV_CTRL & !7 {
                        t.write(off, &v[..n]);
                    }
                } else {
                    t.read(off, n);
                }
            }
            // Reset and start over, sometimes with a reprogrammed (possibly bad) queue.
            90 if rng.below(10) == 0 => {
                t.w32(regs::DEV_CTRL, regs::DEV_CTRL_RESET);
                t.program();
                if rng.below(4) == 0 {
                    let reg = [regs::CMDQ_SQ_ADDR_H, regs::CMDQ_CQ_ADDR_H, regs::AEQ_ADDR_L];
                    t.w32(reg[rng.below(3) as usize], rng.next_u64() as u32 & !0x3f);
                }
                t.start();
            }
            _ => {
                t.read(rng.below(regs::BAR0_SIZE), 4);
            }
        }
        if i % 25_000 == 0 {
            t.dev.reset_harness();
        }
    }
    // The run exercised successes and every kind of failure the model reports.
    eprintln!("CQE statuses: {:?}", &statuses[..8]);
    assert!(statuses[..8].iter().all(|&n| n > 0), "{:?}", &statuses[..8]);
    assert!(statuses[0] > 1000);

    // The device still works.
    t.control("clear").unwrap();
    clock.advance(Duration::from_secs(3600));
    t.run_due();
    t.w32(regs::DEV_CTRL, regs::DEV_CTRL_RESET);
    t.mem.bytes_mut().fill(0);
    assert!(t.init());
    let c: Cqe = t.exec(Command::QueryDevice, |_| {});
    assert_eq!(c.status, 0);
    assert_eq!(
        (c.resp0, c.resp1),
        t.dev.device_config().caps.query_device()
    );
    assert_eq!(t.create_ceq(1, 1, 4).status, 0);
    t.control("ceq eqn=1 cqn=3").unwrap();
    assert_eq!(t.ceqe(1, 16, 0), (true, 3));
    // RESET left empty GID and AH tables behind, and they work.
    assert_eq!(t.control("query gids"), Ok("gids=".into()));
    assert_eq!(t.control("query ahs"), Ok("ahs=0".into()));
    let add = cmdq::SetGid {
        index: 0,
        op: cmdq::GidOp::Add {
            net_type: cmdq::NetType::Ipv6,
            gid: [0x11; cmdq::GID_SIZE],
        },
    };
    assert_eq!(t.exec(Command::SetGid, |s| add.write_fields(s)).status, 0);
    assert_eq!(
        t.control("query gids"),
        Ok(format!("gids=0:ipv6:{}", "11".repeat(16)))
    );
}

/// The data path never panics on hostile input: random WQEs (with plausible and wild headers,
/// SGEs, inline lengths, wild addresses and keys), random RQEs, random doorbell values at every
/// doorbell space, random MR registrations (huge counts, every level, wild MTT addresses),
/// random QP state changes and REFLUSHes, on two devices connected by a fabric. Afterwards a
/// fresh QP pair still moves data.
#[test]
fn hostile_data_path_never_panics() {
    use erdma_model::testing::dp::{fabric, pump, Wqe, ALL_ACCESS, PDN};
    use erdma_model::wire::{self, QpState, RegMr, Sge};

    let mut rng = XorShift(0x5eed_da7a);
    let f = fabric();
    let mut a = TestDriver::new(DeviceConfig::default());
    let mut b = TestDriver::new(DeviceConfig::default());
    a.attach(&f);
    b.attach(&f);
    a.dp_setup(1);
    b.dp_setup(2);
    for d in [&mut a, &mut b] {
        assert_eq!(d.create_cq(1, 6).status, 0);
        assert_eq!(d.create_qp(10, 1, 6, 4).status, 0);
        let buf = d.alloc(0x4000, 0x1000);
        assert_eq!(d.reg_mr(1, 0, PDN, buf, 0x4000, ALL_ACCESS).status, 0);
    }
    a.connect(10, 2, 10);
    b.connect(10, 1, 10);
    let wild = |rng: &mut XorShift| match rng.below(6) {
        0 => u64::MAX - rng.below(64),
        1 => rng.next_u64(),
        2 => 0,
        _ => layout::DP_HEAP + rng.below(0x6_0000),
    };
    for step in 0..20_000u32 {
        let d = if rng.below(2) == 0 { &mut a } else { &mut b };
        match rng.below(12) {
            0..=3 => {
                // A WQE: mostly well-formed headers with random bodies.
                let opcode = rng.below(20) as u8;
                let mut w = Wqe::send(&[]).opcode(opcode);
                // The header's 8 bytes are written when posted.
                w.bytes = vec![0; 32 + 32 * rng.below(4) as usize];
                rng.fill(&mut w.bytes);
                w.inline = rng.below(2) == 0;
                w.sgl_len = rng.below(120) as u8;
                if rng.below(3) == 0 {
                    let s = Sge {
                        addr: wild(&mut rng),
                        len: rng.next_u64() as u32,
                        key: if rng.below(2) == 0 {
                            wire::stag(1, 0)
                        } else {
                            rng.next_u64() as u32
                        },
                    };
                    w.bytes[16..32].copy_from_slice(&s.encode());
                }
                d.post_wqe(10, &w);
                if rng.below(4) != 0 {
                    d.ring_sq(10);
                }
            }
            4 => {
                // Raw garbage over the SQ ring, then a doorbell.
                let qp = d.dp.qps[&10].clone();
                let mut junk = [0u8; 64];
                rng.fill(&mut junk);
                let off = rng.below(u64::from(qp.sq_depth) * 32 - 64);
                d.poke(qp.sq + off, &junk);
                let v = wire::SqDoorbell {
                    qpn: 10,
                    pi: rng.next_u64() as u16,
                }
                .encode();
                d.w64(regs::SQDB_SHARED_PAGE, v);
            }
            5 => {
                let len = rng.next_u64() as u32 >> rng.below(32);
                let key = if rng.below(2) == 0 {
                    wire::stag(1, 0)
                } else {
                    rng.next_u64() as u32
                };
                d.post_recv(10, wild(&mut rng), len, key);
            }
            6 => {
                // Doorbell values of any shape in any doorbell space.
                let off = [
                    regs::SQDB_BASE + rng.below(regs::SQDB_END - regs::SQDB_BASE - 8),
                    regs::RQDB_BASE + rng.below(0x1000),
                    regs::CQDB_BASE + rng.below(0x1000),
                    regs::EXTDB_BASE + rng.below(0x1000),
                ][rng.below(4) as usize];
                let v = match rng.below(3) {
                    0 => rng.next_u64(),
                    1 => 10u64 << 32 | rng.below(0x1_0000),
                    _ => 1u64 << 32 | rng.below(1 << 32),
                };
                d.w64(off & !7, v);
            }
            7 => {
                let r = RegMr {
                    valid: rng.below(2) == 0,
                    version: rng.below(8) as u8,
                    key: rng.next_u64() as u8,
                    index: 2 + rng.below(8) as u32,
                    pdn: PDN,
                    mr_type: rng.below(4) as u8,
                    access: rng.below(32) as u8,
                    va: wild(&mut rng),
                    len: rng.next_u64() >> rng.below(64),
                    page_shift: rng.below(32) as u8,
                    mtt_page_code: rng.below(8) as u8,
                    level: rng.below(4) as u8,
                    count: rng.next_u64() >> rng.below(64),
                    entries: [
                        wild(&mut rng),
                        wild(&mut rng),
                        rng.next_u64(),
                        rng.next_u64(),
                    ],
                };
                d.reg_mr_raw(&r);
                if rng.below(3) == 0 {
                    d.dereg_mr(rng.next_u64() as u32);
                }
            }
            8 => {
                let s = QpState::from_u8(rng.below(7) as u8).unwrap_or(QpState::Error);
                d.modify_state(10, s);
                if rng.below(4) == 0 {
                    let r = wire::Reflush {
                        qpn: 10,
                        sq_pi: rng.next_u64() as u32,
                        rq_pi: rng.next_u64() as u32,
                    };
                    d.exec(Command::Reflush, |s| r.write_fields(s));
                }
            }
            9 => {
                d.arm(1, rng.below(2) == 0);
            }
            10 => {
                // Bring the QPs back to RTS now and then.
                let host = if rng.below(2) == 0 { 1 } else { 2 };
                d.modify_state(10, QpState::Reset);
                d.connect(10, host, 10);
            }
            _ => {
                d.poll_all(1);
                while d.poll_aeqe().is_some() {}
                d.arm_aeq();
            }
        }
        if step % 7 == 0 {
            pump(&mut [&mut a, &mut b]);
        }
    }
    pump(&mut [&mut a, &mut b]);
    // Fresh QPs still work.
    for d in [&mut a, &mut b] {
        assert_eq!(d.create_cq(2, 6).status, 0);
        assert_eq!(d.create_qp(20, 2, 6, 4).status, 0);
    }
    a.connect(20, 2, 20);
    b.connect(20, 1, 20);
    let bbuf = b.alloc(0x100, 0x100);
    assert_eq!(b.reg_mr(40, 0, PDN, bbuf, 0x100, ALL_ACCESS).status, 0);
    b.post_recv(20, bbuf, 0x100, wire::stag(40, 0));
    a.send_wqe(20, &Wqe::send_inline(b"still alive"));
    pump(&mut [&mut a, &mut b]);
    assert_eq!(b.peek(bbuf, 11), b"still alive");
    assert_eq!(a.poll(2).map(|c| c.status), Some(0));
}

#[test]
fn hostile_ud_traffic_never_panics() {
    use erdma_model::cmdq::{AddressVector, NetType};
    use erdma_model::testing::dp::{fabric, pump, Wqe, ALL_ACCESS, PDN};
    use erdma_model::testing::ipv4_gid;
    use erdma_model::wire::{self, QpState, Sge};

    const QKEY: u32 = 0x8001_0000;
    let mut rng = XorShift(0x0d47_a6a3);
    let f = fabric();
    let mut a = TestDriver::new(DeviceConfig::default());
    let mut b = TestDriver::new(DeviceConfig::default());
    a.attach(&f);
    b.attach(&f);
    a.dp_setup(1);
    b.dp_setup(2);
    for d in [&mut a, &mut b] {
        assert_eq!(d.create_cq(1, 6).status, 0);
        for qpn in [1, 2] {
            assert_eq!(d.create_ud_qp(qpn, 1, 6, 4, PDN).status, 0);
            d.ud_ready(qpn, QKEY);
        }
        let buf = d.alloc(0x4000, 0x1000);
        assert_eq!(d.reg_mr(1, 0, PDN, buf, 0x4000, ALL_ACCESS).status, 0);
    }
    let wild = |rng: &mut XorShift| match rng.below(6) {
        0 => u64::MAX - rng.below(64),
        1 => rng.next_u64(),
        2 => 0,
        _ => layout::DP_HEAP + rng.below(0x6_0000),
    };
    for step in 0..20_000u32 {
        let d = if rng.below(2) == 0 { &mut a } else { &mut b };
        let qpn = 1 + rng.below(2) as u32;
        match rng.below(10) {
            0..=3 => {
                // A UD SEND: random Q_Key, destination, AHN, SGL.
                let qkey = if rng.below(3) == 0 {
                    rng.next_u64() as u32
                } else {
                    QKEY
                };
                let dst = if rng.below(4) == 0 {
                    rng.next_u64() as u32
                } else {
                    1 + rng.below(2) as u32
                };
                let ahn = rng.below(8) as u32;
                let mut w = if rng.below(2) == 0 {
                    let mut data = vec![0u8; rng.below(97) as usize];
                    rng.fill(&mut data);
                    Wqe::ud_send_inline(qkey, dst, ahn, &data)
                } else {
                    let s = Sge {
                        addr: wild(&mut rng),
                        len: rng.next_u64() as u32 >> rng.below(32),
                        key: if rng.below(2) == 0 {
                            wire::stag(1, 0)
                        } else {
                            rng.next_u64() as u32
                        },
                    };
                    Wqe::ud_send(qkey, dst, ahn, &[s])
                };
                if rng.below(3) == 0 {
                    w = w.imm(rng.next_u64().to_le_bytes()[..4].try_into().unwrap());
                }
                if rng.below(8) == 0 {
                    w = w.opcode(rng.below(20) as u8);
                }
                if rng.below(8) == 0 {
                    w.sgl_len = rng.below(255) as u8;
                }
                d.send_wqe(qpn, &w);
            }
            4 => {
                let len = rng.next_u64() as u32 >> rng.below(32);
                let key = if rng.below(2) == 0 {
                    wire::stag(1, 0)
                } else {
                    rng.next_u64() as u32
                };
                d.post_recv(qpn, wild(&mut rng), len, key);
            }
            5 => {
                // AHs with random address vectors (GIDs that exist or not, empty GID entries).
                let host = [1u8, 2, 77][rng.below(3) as usize];
                let mut dgid = ipv4_gid([10, 0, 0, host]);
                if rng.below(4) == 0 {
                    rng.fill(&mut dgid);
                }
                let av = AddressVector {
                    flow_label: rng.next_u64() as u32,
                    net_type: if rng.below(2) == 0 {
                        NetType::Ipv4
                    } else {
                        NetType::Ipv6
                    },
                    traffic_class: rng.next_u64() as u8,
                    hop_limit: rng.next_u64() as u8,
                    sl: rng.next_u64() as u8,
                    udp_sport: rng.next_u64() as u16,
                    sgid_index: rng.below(20) as u16,
                    dmac: [0; 6],
                    dgid,
                };
                let ahn = rng.below(8) as u32;
                let pdn = PDN + rng.below(2) as u32;
                d.destroy_ah(ahn, pdn);
                d.create_ah(ahn, pdn, av);
            }
            6 => {
                let s = QpState::from_u8(rng.below(7) as u8).unwrap_or(QpState::Error);
                d.modify_state(qpn, s);
                if rng.below(2) == 0 {
                    d.reflush(qpn);
                }
            }
            7 => {
                d.modify_state(qpn, QpState::Reset);
                if let Some(q) = d.dp.qps.get_mut(&qpn) {
                    q.sq_pi = 0;
                    q.rq_pi = 0;
                }
                d.ud_ready(qpn, QKEY);
            }
            8 => {
                d.arm(1, rng.below(2) == 0);
            }
            _ => {
                d.poll_all(1);
                while d.poll_aeqe().is_some() {}
                d.arm_aeq();
            }
        }
        if step % 5 == 0 {
            pump(&mut [&mut a, &mut b]);
        }
    }
    pump(&mut [&mut a, &mut b]);
    // A fresh pair of UD QPs still talks.
    for d in [&mut a, &mut b] {
        assert_eq!(d.create_cq(2, 6).status, 0);
        assert_eq!(d.create_ud_qp(20, 2, 6, 4, PDN).status, 0);
        d.ud_ready(20, QKEY);
        d.destroy_ah(100, PDN);
    }
    assert_eq!(
        a.create_ah(100, PDN, erdma_model::testing::ipv4_av(0, 2))
            .status,
        0
    );
    let bbuf = b.alloc(0x100, 0x100);
    assert_eq!(b.reg_mr(40, 0, PDN, bbuf, 0x100, ALL_ACCESS).status, 0);
    b.post_recv(20, bbuf, 0x100, wire::stag(40, 0));
    a.send_wqe(20, &Wqe::ud_send_inline(QKEY, 20, 100, b"still alive"));
    pump(&mut [&mut a, &mut b]);
    assert_eq!(b.peek(bbuf + 40, 11), b"still alive");
    assert_eq!(a.poll(2).map(|c| c.status), Some(0));
    assert_eq!(b.poll(2).map(|c| (c.status, c.byte_len)), Some((0, 51)));
}

/// iWARP: random WQEs and receives, MODIFY_QPs in the iWARP layout with random states and
/// random connections (a small pool of tuples, so that bindings collide; random cookies and
/// sequence numbers, so that streams break), destroys and re-creates, REFLUSHes and
/// retransmission timers, on two iWARP functions sharing a fabric. Afterwards a freshly
/// connected QP pair still moves data.
#[test]
fn hostile_iwarp_traffic_never_panics() {
    use erdma_model::testing::dp::{fabric, pump, Wqe, ALL_ACCESS, EQN, PDN};
    use erdma_model::wire::{self, IwarpConnection, IwarpState, Sge};

    let clock = Arc::new(ManualClock::new());
    let mut rng = XorShift(0x1ea7_5eed);
    let f = fabric();
    let config = DeviceConfig {
        protocol: Protocol::Iwarp,
        ..Default::default()
    };
    let mut devs: Vec<TestDriver> = (0..2)
        .map(|_| TestDriver::with(config.clone(), clock.clone(), 512, 128, 4096))
        .collect();
    let mut bufs = [0u64; 2];
    // QP 10's cookie on each device (CREATE_QP's reply: what its MPA frame would carry).
    let mut cookies = [0u32; 2];
    for ((d, buf), cookie) in devs.iter_mut().zip(bufs.iter_mut()).zip(cookies.iter_mut()) {
        d.attach(&f);
        assert!(d.init());
        assert_eq!(d.create_ceq(EQN, 1, 8).status, 0);
        assert_eq!(d.create_cq(1, 6).status, 0);
        let c = d.create_qp(10, 1, 6, 4);
        assert_eq!(c.status, 0);
        *cookie = c.resp0 as u32;
        *buf = d.alloc(0x4000, 0x1000);
        assert_eq!(d.reg_mr(1, 0, PDN, *buf, 0x4000, ALL_ACCESS).status, 0);
    }
    let ips = [[10, 0, 0, 1], [10, 0, 0, 2]];
    let ports = [4791u16, 40000];
    for step in 0..20_000u32 {
        let which = rng.below(2) as usize;
        let d = &mut devs[which];
        match rng.below(14) {
            0..=3 => {
                // Well-formed traffic into the peer's MR (offsets and lengths at random).
                let peer = bufs[1 - which] + rng.below(0x3000);
                let local = bufs[which] + rng.below(0x3000);
                let key = wire::stag(1, 0);
                let len = rng.below(0x1000) as u32;
                let w = match rng.below(5) {
                    0 => Wqe::send_inline(b"hello"),
                    1 => Wqe::write_inline(key, peer, b"data").imm([1, 2, 3, 4]),
                    2 => Wqe::write(
                        key,
                        peer,
                        &[Sge {
                            addr: local,
                            len,
                            key,
                        }],
                    ),
                    3 => Wqe::read(key, local, len, key, peer),
                    _ => Wqe::atomic(key, peer & !7, None, 1, key, local & !7),
                };
                d.send_wqe(10, &w);
            }
            4 => {
                let opcode = rng.below(20) as u8;
                let mut w = Wqe::send(&[]).opcode(opcode);
                w.bytes = vec![0; 32 + 32 * rng.below(4) as usize];
                rng.fill(&mut w.bytes);
                w.inline = rng.below(2) == 0;
                w.sgl_len = rng.below(120) as u8;
                if rng.below(2) == 0 {
                    let s = Sge {
                        addr: layout::DP_HEAP + rng.below(0x6_0000),
                        len: rng.below(0x2000) as u32,
                        key: wire::stag(1, 0),
                    };
                    w.bytes[16..32].copy_from_slice(&s.encode());
                }
                d.post_wqe(10, &w);
                if rng.below(4) != 0 {
                    d.ring_sq(10);
                }
            }
            5 | 6 => {
                let len = rng.next_u64() as u32 >> rng.below(32);
                let addr = if rng.below(2) == 0 {
                    bufs[which] + rng.below(0x3000)
                } else {
                    layout::DP_HEAP + rng.below(0x6_0000)
                };
                d.post_recv(10, addr, len, wire::stag(1, 0));
            }
            7..=9 => {
                // The proper connection most of the time, with a random twist now and then.
                let other = 1 - which;
                let mut c = IwarpConnection {
                    cookie: cookies[other],
                    dst_ip: ips[other],
                    src_ip: ips[which],
                    src_port: ports[which],
                    dst_port: ports[other],
                    snd_nxt: 1000 * (which as u32 + 1),
                    rcv_nxt: 1000 * (other as u32 + 1),
                };
                match rng.below(6) {
                    0 => c.cookie = rng.next_u64() as u32,
                    1 => c.snd_nxt = rng.next_u64() as u32,
                    2 => c.src_port = ports[other],
                    _ => {}
                }
                let state = match rng.below(8) {
                    0 => rng.next_u64() as u8,
                    1..=3 => IwarpState::Rts as u8,
                    n => (n - 3) as u8,
                };
                d.modify_iwarp_raw(10, state, |s| {
                    if state == IwarpState::Rts as u8 {
                        c.write_fields(s);
                    } else {
                        s[12..].iter_mut().for_each(|b| *b = 0xa5);
                    }
                });
            }
            10 => {
                // Start over: destroy and re-create the QP, or REFLUSH it.
                if rng.below(3) != 0 {
                    d.exec(Command::DestroyQp, |s| wire::U32Arg(10).write_fields(s));
                    // The same buffers again (create_qp would allocate new ones).
                    let q = d.dp.qps[&10].clone();
                    let queues = [(q.sq, 6), (q.rq, 4)];
                    let c = d.create_qp_on(10, 1, queues, wire::QP_TYPE_RC, PDN);
                    assert_eq!(c.status, 0);
                    cookies[which] = c.resp0 as u32;
                } else {
                    d.reflush(10);
                }
            }
            11 => {
                clock.advance(Duration::from_millis(rng.below(300)));
                for d in devs.iter_mut() {
                    d.run_due();
                }
            }
            _ => {
                d.poll_all(1);
                while d.poll_aeqe().is_some() {}
                d.arm_aeq();
            }
        }
        if step % 5 == 0 {
            let (a, b) = devs.split_at_mut(1);
            pump(&mut [&mut a[0], &mut b[0]]);
        }
    }
    // A fresh pair of QPs, properly connected (each told the other's cookie), still works.
    for (d, cookie) in devs.iter_mut().zip(cookies.iter_mut()) {
        assert_eq!(d.create_cq(2, 6).status, 0);
        let c = d.create_qp(20, 2, 6, 4);
        assert_eq!(c.status, 0);
        *cookie = c.resp0 as u32;
    }
    let conn = |me: usize| IwarpConnection {
        cookie: cookies[1 - me],
        dst_ip: ips[1 - me],
        src_ip: ips[me],
        src_port: 5000 + me as u16,
        dst_port: 5000 + (1 - me) as u16,
        snd_nxt: 7,
        rcv_nxt: 7,
    };
    for (i, d) in devs.iter_mut().enumerate() {
        assert_eq!(d.iwarp_rts(20, &conn(i)).status, 0);
    }
    let bbuf = devs[1].alloc(0x100, 0x100);
    assert_eq!(
        devs[1].reg_mr(40, 0, PDN, bbuf, 0x100, ALL_ACCESS).status,
        0
    );
    devs[1].post_recv(20, bbuf, 0x100, wire::stag(40, 0));
    devs[0].send_wqe(20, &Wqe::send_inline(b"still alive"));
    let (a, b) = devs.split_at_mut(1);
    pump(&mut [&mut a[0], &mut b[0]]);
    assert_eq!(devs[1].peek(bbuf, 11), b"still alive");
    assert_eq!(devs[0].poll(2).map(|c| c.status), Some(0));
}
