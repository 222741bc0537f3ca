// SPDX-License-Identifier: GPL-2.0

//! The data path of one RoCEv2 function over loopback: an RC QP pair connected to itself, a
//! UD QP with an address handle, MRs (normal with an MTT array, DMA, FRMR), and then arbitrary
//! SQ and RQ contents (WQE headers with every opcode and flag, SGLs, inline data, fast-register
//! page lists, RQEs), doorbells with any producer index, new MRs with arbitrary MTT levels,
//! page lists, page sizes, lengths and offsets, accesses by arbitrary keys and addresses,
//! state changes, REFLUSH, retransmission timers.

#![no_main]

use arbitrary::Arbitrary;
use erdma_fuzz::{cut, drain_cmdq, driver, exec, patch, pick, poke, tick, Addr, Known, Patch};
use erdma_model::cmdq::Command;
use erdma_model::regs;
use erdma_model::testing::dp::{self, pump, ALL_ACCESS, PDN};
use erdma_model::testing::{ipv4_av, TestDriver};
use erdma_model::wire::{
    self, qp_mask, DeregMr, ModifyQpRoce, Reflush, RegMr, RqDoorbell, Rqe, Sge, SqDoorbell,
    SqeHeader, U32Arg, QP_TYPE_UD, RQE_SIZE, SQ_WQEBB_SIZE,
};
use erdma_model::{Caps, DeviceConfig};
use libfuzzer_sys::fuzz_target;

/// QPs of the set-up: RC pair 10 ↔ 11 (loopback), UD QP 1.
const QPS: [u32; 3] = [10, 11, 1];
const QKEY: u32 = 0x1111_2222;
/// SQ and RQ depths (log2).
const SQ_LOG2: u32 = 6;
const RQ_LOG2: u32 = 5;
const LKEY: u32 = 0xf000_0000;

#[derive(Arbitrary, Debug)]
struct WqeOp {
    qp: u8,
    opcode: u8,
    flags: u8,
    sgl_len: u8,
    /// WQEBB count field (1..=8).
    wqebbs: u8,
    /// Added to the header index (0: correct).
    index_delta: i8,
    /// QPN field: 0 the QP's own, else raw.
    qpn: u32,
    body: Vec<u8>,
    patches: Vec<Patch>,
    ring: bool,
}

#[derive(Arbitrary, Debug)]
struct RqeOp {
    qp: u8,
    addr: Addr,
    len: u32,
    key: u8,
    index_delta: i8,
    qpn_ok: bool,
    ring: bool,
}

#[derive(Arbitrary, Debug)]
struct RegMrOp {
    index: u8,
    key: u8,
    valid: bool,
    version: u8,
    pdn_ok: bool,
    mr_type: u8,
    access: u8,
    va: Addr,
    len: u64,
    page_shift: u8,
    mtt_page_code: u8,
    level: u8,
    count: u32,
    count_high: u8,
    entries: [Addr; 4],
}

#[derive(Arbitrary, Debug)]
enum Op {
    Wqe(WqeOp),
    Rqe(RqeOp),
    /// SQ doorbell with the driver's PI plus a delta.
    RingSq {
        qp: u8,
        delta: i16,
        page: u8,
    },
    RingRq {
        qp: u8,
        delta: i16,
    },
    /// Arm a CQ.
    Arm {
        cq: u8,
        solicited: bool,
    },
    /// Poll every CQ (advances the driver's consumer indices).
    Poll,
    RegMr(RegMrOp),
    DeregMr {
        index: u8,
        key: u8,
    },
    /// MTT pages for the MRs: page addresses (in the test memory) at an MTT area.
    WriteMtt {
        area: u8,
        at: u8,
        pages: Vec<Addr>,
    },
    /// The guest writes a buffer.
    Poke {
        at: Addr,
        data: Vec<u8>,
    },
    Modify {
        qp: u8,
        state: u8,
        sq_psn: u32,
        rq_psn: u32,
    },
    Reflush {
        qp: u8,
        sq_pi: u16,
        rq_pi: u16,
    },
    QueryQp(u8),
    Pump,
    Tick(u16),
}

struct Qp {
    qpn: u32,
    sq: u64,
    rq: u64,
    sq_pi: u16,
    rq_pi: u16,
}

struct Fixture {
    d: TestDriver,
    clock: std::sync::Arc<erdma_model::ManualClock>,
    qps: Vec<Qp>,
    known: Known,
    /// Memory the MRs map.
    buf: u64,
    /// MTT areas (4 KiB each).
    mtt: [u64; 2],
}

fn setup() -> Fixture {
    let config = DeviceConfig {
        caps: Caps {
            atomic: true,
            ..Caps::default()
        },
        ..DeviceConfig::default()
    };
    let (mut d, clock) = driver(config);
    let fabric = dp::fabric();
    d.attach(&fabric);
    d.dp_setup(1);
    d.create_cq(1, 6);
    d.create_cq(2, 6);
    let mut qps = Vec::new();
    for (qpn, cq) in [(10, 1), (11, 2)] {
        let sq = d.alloc(8 << SQ_LOG2 << 2, 0x1000);
        let rq = d.alloc(1 << RQ_LOG2 << 5, 0x1000);
        d.create_qp_on(qpn, cq, [(sq, SQ_LOG2), (rq, RQ_LOG2)], 0, PDN);
        qps.push(Qp {
            qpn,
            sq,
            rq,
            sq_pi: 0,
            rq_pi: 0,
        });
    }
    d.connect(10, 1, 11);
    d.connect(11, 1, 10);
    let sq = d.alloc(8 << SQ_LOG2 << 2, 0x1000);
    let rq = d.alloc(1 << RQ_LOG2 << 5, 0x1000);
    d.create_qp_on(1, 1, [(sq, SQ_LOG2), (rq, RQ_LOG2)], QP_TYPE_UD, PDN);
    d.ud_ready(1, QKEY);
    d.create_ah(1, PDN, ipv4_av(0, 1));
    qps.push(Qp {
        qpn: 1,
        sq,
        rq,
        sq_pi: 0,
        rq_pi: 0,
    });
    // MR 1: 64 KiB through an MTT array; MR 2: DMA; MR 3: an FRMR with a 16-page buffer.
    let buf = d.alloc(0x1_0000, 0x1000);
    d.reg_mr(1, 0, PDN, buf, 0x1_0000, ALL_ACCESS);
    let mtt = [d.alloc(0x1000, 0x1000), d.alloc(0x1000, 0x1000)];
    let dma = RegMr {
        valid: true,
        version: 0,
        key: 0,
        index: 2,
        pdn: PDN,
        mr_type: 2,
        access: ALL_ACCESS,
        va: 0,
        len: 0,
        page_shift: 12,
        mtt_page_code: 0,
        level: 0,
        count: 0,
        entries: [0; 4],
    };
    d.reg_mr_raw(&dma);
    let frmr = RegMr {
        valid: false,
        index: 3,
        mr_type: 1,
        level: 1,
        count: 16,
        entries: [mtt[1], 0, 0, 0],
        ..dma
    };
    d.reg_mr_raw(&frmr);
    let known = Known {
        bases: vec![buf, buf + 0x8000, mtt[0], mtt[1], 0],
        words: vec![
            wire::stag(1, 0),
            wire::stag(2, 0),
            wire::stag(3, 0),
            wire::stag(3, 1),
            wire::stag(4, 0),
            LKEY,
            QKEY,
            1,
            10,
            11,
            0x100,
            0x1000,
            0x1_0000,
            // Message sizes at the 1 GiB limit and beyond.
            0x3fff_ffff,
            0x4000_0000,
            0x4000_0001,
            0,
        ],
    };
    Fixture {
        d,
        clock,
        qps,
        known,
        buf,
        mtt,
    }
}

impl Fixture {
    fn post_wqe(&mut self, w: &WqeOp) {
        let i = usize::from(w.qp) % self.qps.len();
        let count = u16::from(w.wqebbs % 8) + 1;
        let qp = &mut self.qps[i];
        let start = qp.sq_pi;
        let hdr = SqeHeader {
            index: start.wrapping_add(count).wrapping_add(w.index_delta as u16),
            ce: w.flags & 1 != 0,
            se: w.flags & 2 != 0,
            fence: w.flags & 4 != 0,
            inline: w.flags & 8 != 0,
            opcode: w.opcode % 32,
            qpn: if w.qpn == 0 { qp.qpn } else { w.qpn },
            wqebbs: count,
            sgl_len: w.sgl_len,
        };
        let mut bytes = vec![0u8; usize::from(count) * SQ_WQEBB_SIZE];
        let n = bytes.len();
        erdma_fuzz::put(&mut bytes, SqeHeader::SIZE, cut(&w.body, n));
        patch(&mut bytes, &w.patches, &self.known);
        hdr.write(&mut bytes);
        let ring = 1u64 << SQ_LOG2 << 5;
        for (k, chunk) in bytes.chunks(SQ_WQEBB_SIZE).enumerate() {
            let off = (u64::from(start) + k as u64) * SQ_WQEBB_SIZE as u64 % ring;
            poke(&mut self.d, qp.sq + off, chunk);
        }
        qp.sq_pi = start.wrapping_add(count);
        if w.ring {
            let db = SqDoorbell {
                qpn: qp.qpn,
                pi: qp.sq_pi,
            };
            self.d.w64(regs::SQDB_SHARED_PAGE, db.encode());
        }
    }

    fn post_rqe(&mut self, r: &RqeOp) {
        let i = usize::from(r.qp) % self.qps.len();
        let bases = self.known.bases.clone();
        let key = pick(&self.known.words, r.key);
        let qp = &mut self.qps[i];
        let pi = qp.rq_pi;
        let rqe = Rqe {
            index: pi.wrapping_add(1).wrapping_add(r.index_delta as u16),
            qpn: if r.qpn_ok { qp.qpn } else { qp.qpn ^ 1 },
            sge: Sge {
                addr: r.addr.get(&bases),
                len: r.len,
                key,
            },
        };
        let off = u64::from(u32::from(pi) & ((1 << RQ_LOG2) - 1)) * RQE_SIZE as u64;
        poke(&mut self.d, qp.rq + off, &rqe.encode());
        qp.rq_pi = pi.wrapping_add(1);
        if r.ring {
            let db = RqDoorbell {
                qpn: qp.qpn,
                pi: qp.rq_pi,
            };
            self.d.w64(regs::RQDB_BASE, db.encode());
        }
    }

    fn reg_mr(&mut self, m: &RegMrOp) {
        let bases = &self.known.bases;
        let req = RegMr {
            valid: m.valid,
            version: m.version % 2,
            key: m.key,
            index: u32::from(m.index % 8),
            pdn: if m.pdn_ok { PDN } else { 2 },
            mr_type: m.mr_type % 4,
            access: m.access & 0x1f,
            va: m.va.get(bases),
            len: m.len,
            page_shift: m.page_shift % 32,
            mtt_page_code: m.mtt_page_code % 8,
            level: m.level % 4,
            count: u64::from(m.count) | u64::from(m.count_high) << 32,
            entries: m.entries.map(|a| a.get(bases)),
        };
        exec(&mut self.d, Command::RegMr.code(), |s| req.write_fields(s));
    }

    fn poll(&mut self) {
        for cq in [1, 2] {
            for _ in 0..64 {
                if self.d.poll(cq).is_none() {
                    break;
                }
            }
        }
        drain_cmdq(&mut self.d);
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let mut f = setup();
    for op in ops.iter().take(64) {
        match op {
            Op::Wqe(w) => f.post_wqe(w),
            Op::Rqe(r) => f.post_rqe(r),
            Op::RingSq { qp, delta, page } => {
                let qp = &f.qps[usize::from(*qp) % f.qps.len()];
                let db = SqDoorbell {
                    qpn: qp.qpn,
                    pi: qp.sq_pi.wrapping_add(*delta as u16),
                };
                let at = regs::SQDB_BASE + u64::from(*page % 96) * regs::DB_PAGE_SIZE;
                f.d.w64(at, db.encode());
            }
            Op::RingRq { qp, delta } => {
                let qp = &f.qps[usize::from(*qp) % f.qps.len()];
                let db = RqDoorbell {
                    qpn: qp.qpn,
                    pi: qp.rq_pi.wrapping_add(*delta as u16),
                };
                f.d.w64(regs::rq_db_slot(qp.qpn), db.encode());
            }
            Op::Arm { cq, solicited } => f.d.arm(1 + u32::from(*cq % 2), *solicited),
            Op::Poll => f.poll(),
            Op::RegMr(m) => f.reg_mr(m),
            Op::DeregMr { index, key } => {
                let req = DeregMr {
                    index: u32::from(*index % 8),
                    key: *key,
                };
                exec(&mut f.d, Command::DeregMr.code(), |s| req.write_fields(s));
            }
            Op::WriteMtt { area, at, pages } => {
                let base = f.mtt[usize::from(*area) % 2] + 8 * u64::from(*at);
                let bases = [f.buf, f.buf + 0x8000, f.mtt[0], f.mtt[1]];
                for (k, p) in pages.iter().take(64).enumerate() {
                    let v = p.get(&bases);
                    poke(&mut f.d, base + 8 * k as u64, &v.to_le_bytes());
                }
            }
            Op::Poke { at, data } => {
                let a = at.get(&f.known.bases);
                poke(&mut f.d, a, cut(data, 512));
            }
            Op::Modify {
                qp,
                state,
                sq_psn,
                rq_psn,
            } => {
                let qpn = QPS[usize::from(*qp) % QPS.len()];
                let req = ModifyQpRoce {
                    qpn,
                    state: *state % 8,
                    dst_qpn: qpn ^ 1,
                    mask: qp_mask::STATE | qp_mask::SQ_PSN | qp_mask::RQ_PSN,
                    qkey: QKEY,
                    rq_psn: rq_psn & 0xff_ffff,
                    sq_psn: sq_psn & 0xff_ffff,
                    av: ipv4_av(0, 1),
                };
                exec(&mut f.d, Command::ModifyQp.code(), |s| req.write_fields(s));
            }
            Op::Reflush { qp, sq_pi, rq_pi } => {
                let qp = &f.qps[usize::from(*qp) % f.qps.len()];
                let req = Reflush {
                    qpn: qp.qpn,
                    sq_pi: u32::from(qp.sq_pi.wrapping_add(*sq_pi)),
                    rq_pi: u32::from(qp.rq_pi.wrapping_add(*rq_pi)),
                };
                exec(&mut f.d, Command::Reflush.code(), |s| req.write_fields(s));
            }
            Op::QueryQp(qp) => {
                let qpn = QPS[usize::from(*qp) % QPS.len()];
                exec(&mut f.d, Command::QueryQp.code(), |s| {
                    U32Arg(qpn).write_fields(s)
                });
            }
            Op::Pump => {
                pump(&mut [&mut f.d]);
            }
            Op::Tick(ms) => {
                tick(&mut f.d, &f.clock, *ms);
                pump(&mut [&mut f.d]);
            }
        }
    }
    pump(&mut [&mut f.d]);
});
