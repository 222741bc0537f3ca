// SPDX-License-Identifier: GPL-2.0

//! Data-path helpers for [`TestDriver`]: CQs, QPs and MRs in the test memory, WQE builders,
//! doorbells the way the kernel driver rings them (the shared SQ page, RQ/CQ offset 0), CQE
//! polling, and [`pump`] to run the fabric between devices.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{layout, TestDriver};
use crate::cmdq::{AddressVector, Command, Cqe, CreateAh, DestroyAh, Gid, GidOp, NetType, SetGid};
use crate::fabric::{Fabric, NoWaker};
use crate::io::{GuestMemory, Io};
use crate::regs::{self, CqDoorbell};
use crate::wire::{
    self, access, op, AtomicSqe, CreateCq, CreateQp, DataCqe, DeregMr, FastRegSqe, IwarpConnection,
    IwarpState, LocalInvSqe, ModifyQpIwarp, ModifyQpRoce, QpState, QueueMttCfg, ReadSqe, RegMr,
    RqDoorbell, Rqe, SendSqe, Sge, SqDoorbell, SqeHeader, U32Arg, UdSendSqe, WriteSqe, CQE_SIZE,
    FAST_REG_MTT_BUFFER, FAST_REG_MTT_INLINE, QP_TYPE_RC, QP_TYPE_UD, RQE_SIZE, SQ_WQEBB_SIZE,
};

/// The CEQ the helpers create and bind CQs to.
pub const EQN: u8 = 1;
/// PD used by [`TestDriver::dp_setup`]'s QPs and MRs unless told otherwise.
pub const PDN: u32 = 1;
/// Access: everything.
pub const ALL_ACCESS: u8 = access::LOCAL_READ
    | access::LOCAL_WRITE
    | access::REMOTE_READ
    | access::REMOTE_WRITE
    | access::REMOTE_ATOMIC;

/// A CQ as the test driver sees it.
#[derive(Clone, Debug)]
pub struct TestCq {
    /// Ring address.
    pub addr: u64,
    /// Depth.
    pub depth: u32,
    /// Consumer index.
    pub ci: u32,
    /// Arms sent.
    pub arms: u8,
}

/// A QP as the test driver sees it.
#[derive(Clone, Debug)]
pub struct TestQp {
    /// SQ ring address.
    pub sq: u64,
    /// SQ depth (WQEBBs).
    pub sq_depth: u32,
    /// SQ producer index.
    pub sq_pi: u16,
    /// RQ ring address.
    pub rq: u64,
    /// RQ depth.
    pub rq_depth: u32,
    /// RQ producer index.
    pub rq_pi: u16,
}

/// Data-path state of a [`TestDriver`].
#[derive(Clone, Debug)]
pub struct DpState {
    /// Next free heap address.
    pub next: u64,
    /// CQs by CQN.
    pub cqs: BTreeMap<u32, TestCq>,
    /// QPs by QPN.
    pub qps: BTreeMap<u32, TestQp>,
}

impl Default for DpState {
    fn default() -> Self {
        DpState {
            next: layout::DP_HEAP,
            cqs: BTreeMap::new(),
            qps: BTreeMap::new(),
        }
    }
}

/// Runs the fabric of every driver until no packets are left.
pub fn pump(drivers: &mut [&mut TestDriver]) -> usize {
    let mut total = 0;
    loop {
        let mut n = 0;
        for d in drivers.iter_mut() {
            let mut io = Io::new(&mut d.mem, &mut d.irq);
            n += d.dev.run_fabric(&mut io);
        }
        if n == 0 {
            return total;
        }
        total += n;
    }
}

/// A fabric with no wakers, for tests that pump by hand.
pub fn fabric() -> Arc<Fabric> {
    Fabric::new()
}

/// A WQE: header fields (index, QPN and WQEBB count are filled in when posted) and its bytes
/// (the first [`SqeHeader::SIZE`] are the header's place).
#[derive(Clone, Debug)]
pub struct Wqe {
    /// Opcode.
    pub opcode: u8,
    /// CE.
    pub ce: bool,
    /// SE.
    pub se: bool,
    /// FENCE.
    pub fence: bool,
    /// INLINE.
    pub inline: bool,
    /// SGL length field.
    pub sgl_len: u8,
    /// The WQE (the size decides the WQEBB count).
    pub bytes: Vec<u8>,
}

impl Wqe {
    fn new(opcode: u8, fixed: usize) -> Self {
        Wqe {
            opcode,
            ce: true,
            se: false,
            fence: false,
            inline: false,
            sgl_len: 0,
            bytes: vec![0; fixed],
        }
    }

    /// Appends `sgl` at `at` and returns its total length.
    fn sgl(&mut self, at: usize, sgl: &wire::Sgl<'_>) -> u32 {
        let size = match sgl {
            wire::Sgl::Inline(d) => d.len(),
            wire::Sgl::Sges(s) => s.len() * wire::SGE_SIZE,
        };
        self.bytes.resize(self.bytes.len().max(at + size), 0);
        let (inline, n, total) = sgl.write(&mut self.bytes, at);
        self.inline = inline;
        self.sgl_len = n;
        total
    }

    fn send_sgl(sgl: wire::Sgl<'_>) -> Self {
        let mut w = Wqe::new(op::SEND, SendSqe::LEN);
        let length = w.sgl(SendSqe::SGL_OFFSET, &sgl);
        SendSqe {
            length,
            ..Default::default()
        }
        .write_fields(&mut w.bytes);
        w
    }

    fn write_sgl(rkey: u32, raddr: u64, sgl: wire::Sgl<'_>) -> Self {
        let mut w = Wqe::new(op::WRITE, WriteSqe::LEN);
        let length = w.sgl(WriteSqe::SGL_OFFSET, &sgl);
        WriteSqe {
            imm: [0; 4],
            length,
            rkey,
            raddr,
        }
        .write_fields(&mut w.bytes);
        w
    }

    /// SEND (or SEND_WITH_IMM / SEND_WITH_INV with [`Wqe::imm`] / [`Wqe::inv`]) of `sges`.
    pub fn send(sges: &[Sge]) -> Self {
        Wqe::send_sgl(wire::Sgl::Sges(sges.to_vec()))
    }

    /// SEND of inline bytes.
    pub fn send_inline(data: &[u8]) -> Self {
        Wqe::send_sgl(wire::Sgl::Inline(data))
    }

    /// SEND of inline bytes in the UD layout (Q_Key, destination QPN, AHN).
    pub fn ud_send_inline(qkey: u32, dst_qpn: u32, ahn: u32, data: &[u8]) -> Self {
        Wqe::ud_send_sgl(qkey, dst_qpn, ahn, wire::Sgl::Inline(data))
    }

    /// SEND of `sges` in the UD layout (Q_Key, destination QPN, AHN). [`Wqe::imm`] makes it a
    /// SEND_WITH_IMM (the immediate and length sit where an RC SEND has them).
    pub fn ud_send(qkey: u32, dst_qpn: u32, ahn: u32, sges: &[Sge]) -> Self {
        Wqe::ud_send_sgl(qkey, dst_qpn, ahn, wire::Sgl::Sges(sges.to_vec()))
    }

    fn ud_send_sgl(qkey: u32, dst_qpn: u32, ahn: u32, sgl: wire::Sgl<'_>) -> Self {
        let mut w = Wqe::new(op::SEND, UdSendSqe::LEN);
        let length = w.sgl(UdSendSqe::SGL_OFFSET, &sgl);
        UdSendSqe {
            imm: [0; 4],
            length,
            qkey,
            dst_qpn,
            ahn,
        }
        .write_fields(&mut w.bytes);
        w
    }

    /// WRITE of `sges` to `raddr` under `rkey`.
    pub fn write(rkey: u32, raddr: u64, sges: &[Sge]) -> Self {
        Wqe::write_sgl(rkey, raddr, wire::Sgl::Sges(sges.to_vec()))
    }

    /// WRITE of inline bytes.
    pub fn write_inline(rkey: u32, raddr: u64, data: &[u8]) -> Self {
        Wqe::write_sgl(rkey, raddr, wire::Sgl::Inline(data))
    }

    /// READ of `len` bytes at `raddr` (rkey) into `laddr` (lkey).
    pub fn read(lkey: u32, laddr: u64, len: u32, rkey: u32, raddr: u64) -> Self {
        let mut w = Wqe::new(op::READ, ReadSqe::LEN);
        ReadSqe {
            inv_stag: 0,
            length: len,
            lkey,
            laddr,
            remote: Sge {
                addr: raddr,
                len,
                key: rkey,
            },
        }
        .write_fields(&mut w.bytes);
        w
    }

    /// ATOMIC_CAS (`swap` if the value equals `compare`) or, with `compare == None`,
    /// ATOMIC_FAA of `swap`.
    pub fn atomic(
        rkey: u32,
        raddr: u64,
        compare: Option<u64>,
        swap: u64,
        lkey: u32,
        laddr: u64,
    ) -> Self {
        let opcode = if compare.is_some() {
            op::ATOMIC_CAS
        } else {
            op::ATOMIC_FAA
        };
        let mut w = Wqe::new(opcode, AtomicSqe::LEN);
        AtomicSqe {
            swap_or_add: swap,
            compare: compare.unwrap_or(0),
            // The drivers leave the remote length stale.
            remote: Sge {
                addr: raddr,
                len: 0xdead_beef,
                key: rkey,
            },
            local: Sge {
                addr: laddr,
                len: 8,
                key: lkey,
            },
        }
        .write_fields(&mut w.bytes);
        w
    }

    /// Fast-register of FRMR `stag` (new key in bits 7:0) with inline `pages` (≤ 4), or with
    /// `npages` from the pre-registered buffer when `pages` is empty.
    pub fn fast_reg(stag: u32, iova: u64, len: u32, acc: u8, pages: &[u64], npages: u32) -> Self {
        let mut w = Wqe::new(op::REG_MR, FastRegSqe::LEN + 8 * pages.len());
        let (mtt_type, npages) = if pages.is_empty() {
            (FAST_REG_MTT_BUFFER, npages)
        } else {
            (FAST_REG_MTT_INLINE, pages.len() as u32)
        };
        FastRegSqe {
            iova,
            length: len,
            stag,
            access: acc,
            mtt_type,
            npages,
        }
        .write_fields(&mut w.bytes, pages);
        w
    }

    /// LOCAL_INV of `stag`.
    pub fn local_inv(stag: u32) -> Self {
        let mut w = Wqe::new(op::LOCAL_INV, LocalInvSqe::LEN);
        LocalInvSqe { stag }.write_fields(&mut w.bytes);
        w
    }

    /// Sets the opcode.
    pub fn opcode(mut self, opcode: u8) -> Self {
        self.opcode = opcode;
        self
    }

    /// Immediate (network order), switching SEND/WRITE to their _WITH_IMM opcodes.
    pub fn imm(mut self, imm: [u8; 4]) -> Self {
        if self.opcode == op::WRITE {
            self.opcode = op::WRITE_WITH_IMM;
            let mut f = WriteSqe::decode(&self.bytes).expect("a WRITE WQE");
            f.imm = imm;
            f.write_fields(&mut self.bytes);
        } else {
            self.opcode = op::SEND_WITH_IMM;
            let mut f = SendSqe::decode(&self.bytes).expect("a SEND WQE");
            f.imm = imm;
            f.write_fields(&mut self.bytes);
        }
        self
    }

    /// SEND_WITH_INV, or for a READ READ_WITH_INV, of `stag`.
    pub fn inv(mut self, stag: u32) -> Self {
        if self.opcode == op::READ {
            self.opcode = op::READ_WITH_INV;
            let mut f = ReadSqe::decode(&self.bytes).expect("a READ WQE");
            f.inv_stag = stag;
            f.write_fields(&mut self.bytes);
        } else {
            self.opcode = op::SEND_WITH_INV;
            let f = SendSqe::decode(&self.bytes).expect("a SEND WQE");
            SendSqe::with_inv(stag, f.length).write_fields(&mut self.bytes);
        }
        self
    }

    /// Unsignaled.
    pub fn unsignaled(mut self) -> Self {
        self.ce = false;
        self
    }

    /// Solicited.
    pub fn solicited(mut self) -> Self {
        self.se = true;
        self
    }

    /// With FENCE.
    pub fn fenced(mut self) -> Self {
        self.fence = true;
        self
    }

    /// WQEBBs this WQE takes.
    pub fn wqebbs(&self) -> u16 {
        self.bytes.len().div_ceil(SQ_WQEBB_SIZE) as u16
    }
}

impl TestDriver {
    /// Allocates `size` bytes (aligned to `align`, a power of two) from the data-path heap.
    /// Sizes beyond the heap (for requests the device must refuse anyway) get a dummy address
    /// outside the test memory.
    pub fn alloc(&mut self, size: u64, align: u64) -> u64 {
        if size > layout::DP_HEAP_END - layout::DP_HEAP {
            return 0x4000_0000;
        }
        let a = (self.dp.next + align - 1) & !(align - 1);
        assert!(a + size <= layout::DP_HEAP_END, "test heap exhausted");
        self.dp.next = a + size;
        a
    }

    /// INIT plus CEQ [`EQN`] (256 entries) and GID 0 = 10.0.0.`host` (RoCEv2).
    pub fn dp_setup(&mut self, host: u8) {
        assert!(self.init());
        assert_eq!(self.create_ceq(EQN, 1, 8).status, 0);
        assert_eq!(self.set_gid(0, super::ipv4_gid([10, 0, 0, host])).status, 0);
    }

    /// SET_GID add (an IPv4 entry).
    pub fn set_gid(&mut self, index: u16, gid: Gid) -> Cqe {
        self.set_gid_typed(index, NetType::Ipv4, gid)
    }

    /// SET_GID add of an entry of `net_type`.
    pub fn set_gid_typed(&mut self, index: u16, net_type: NetType, gid: Gid) -> Cqe {
        let r = SetGid {
            index,
            op: GidOp::Add { net_type, gid },
        };
        self.exec(Command::SetGid, |s| r.write_fields(s))
    }

    /// CREATE_AH `ahn` in PD `pdn`.
    pub fn create_ah(&mut self, ahn: u32, pdn: u32, av: AddressVector) -> Cqe {
        let r = CreateAh { pdn, ahn, av };
        self.exec(Command::CreateAh, |s| r.write_fields(s))
    }

    /// DESTROY_AH `ahn` in PD `pdn`.
    pub fn destroy_ah(&mut self, ahn: u32, pdn: u32) -> Cqe {
        let r = DestroyAh { pdn, ahn };
        self.exec(Command::DestroyAh, |s| r.write_fields(s))
    }

    /// Attaches the device to `fabric` (pumped by hand).
    pub fn attach(&mut self, fabric: &Arc<Fabric>) {
        self.dev.attach_fabric(fabric, Arc::new(NoWaker));
    }

    /// CREATE_CQ `cqn` with 2^`depth_log2` CQEs in one contiguous buffer (level 0) on CEQ
    /// [`EQN`].
    pub fn create_cq(&mut self, cqn: u32, depth_log2: u32) -> Cqe {
        let depth = 1u32 << depth_log2;
        let addr = self.alloc(u64::from(depth) * CQE_SIZE as u64, 0x1000);
        let req = CreateCq {
            cqn,
            depth_log2,
            buf: QueueMttCfg {
                page_shift: 25,
                level: 0,
                count: 1,
                offset: 0,
                addr,
                more: [0; 3],
            },
            eqn: u32::from(EQN),
            ext_db: false,
            dbrec: layout::DP_HEAP - 8,
            db_page: 0,
        };
        let cqe = self.exec(Command::CreateCq, |s| req.write_fields(s));
        if cqe.status == 0 {
            self.dp.cqs.insert(
                cqn,
                TestCq {
                    addr,
                    depth,
                    ci: 0,
                    arms: 0,
                },
            );
        }
        cqe
    }

    /// CREATE_QP `qpn` (RC, PD [`PDN`]) with contiguous SQ/RQ buffers (level 0, 1 MiB pages).
    pub fn create_qp(&mut self, qpn: u32, cqn: u32, sq_log2: u32, rq_log2: u32) -> Cqe {
        self.create_qp_of(qpn, cqn, sq_log2, rq_log2, QP_TYPE_RC, PDN)
    }

    /// CREATE_QP `qpn` of type UD in PD `pdn` (the GSI QP is QPN 1 of this type), buffers as
    /// [`TestDriver::create_qp`].
    pub fn create_ud_qp(
        &mut self,
        qpn: u32,
        cqn: u32,
        sq_log2: u32,
        rq_log2: u32,
        pdn: u32,
    ) -> Cqe {
        self.create_qp_of(qpn, cqn, sq_log2, rq_log2, QP_TYPE_UD, pdn)
    }

    /// CREATE_QP `qpn` of `qp_type` in PD `pdn`, buffers as [`TestDriver::create_qp`].
    pub fn create_qp_of(
        &mut self,
        qpn: u32,
        cqn: u32,
        sq_log2: u32,
        rq_log2: u32,
        qp_type: u8,
        pdn: u32,
    ) -> Cqe {
        let sq = self.alloc(u64::from(1u32 << sq_log2) * 32, 0x1000);
        let rq = self.alloc(u64::from(1u32 << rq_log2) * 32, 0x1000);
        self.create_qp_on(qpn, cqn, [(sq, sq_log2), (rq, rq_log2)], qp_type, pdn)
    }

    /// CREATE_QP `qpn` of `qp_type` in PD `pdn` on CQ `cqn`, its SQ and RQ `(address, log2 of
    /// the depth)` contiguous buffers (level 0, 1 MiB pages). The model reads a queue only when
    /// it is used, so QPs may share buffers: a test that needs many QPs, or the same QP again,
    /// does not use up the test memory.
    pub fn create_qp_on(
        &mut self,
        qpn: u32,
        cqn: u32,
        [(sq, sq_log2), (rq, rq_log2)]: [(u64, u32); 2],
        qp_type: u8,
        pdn: u32,
    ) -> Cqe {
        let cfg = |addr| QueueMttCfg {
            page_shift: 20,
            level: 0,
            count: 1,
            offset: 0,
            addr,
            more: [0; 3],
        };
        let req = CreateQp {
            qpn,
            sq_depth_log2: sq_log2,
            rq_depth_log2: rq_log2,
            pdn,
            send_cqn: cqn,
            recv_cqn: cqn,
            ext_db: false,
            sq: cfg(sq),
            rq: cfg(rq),
            sq_dbrec: layout::DP_HEAP - 16,
            rq_dbrec: layout::DP_HEAP - 24,
            db_pages: (0, 0),
            qp_type,
        };
        self.create_qp_raw(&req)
    }

    /// CREATE_QP with a request built by the test; remembers the QP if it succeeded.
    pub fn create_qp_raw(&mut self, req: &CreateQp) -> Cqe {
        let cqe = self.exec(Command::CreateQp, |s| req.write_fields(s));
        if cqe.status == 0 {
            self.dp.qps.insert(
                req.qpn,
                TestQp {
                    sq: req.sq.addr + req.sq.offset,
                    sq_depth: 1 << req.sq_depth_log2,
                    sq_pi: 0,
                    rq: req.rq.addr + req.rq.offset,
                    rq_depth: 1 << req.rq_depth_log2,
                    rq_pi: 0,
                },
            );
        }
        cqe
    }

    /// MODIFY_QP (RoCEv2 layout).
    pub fn modify_qp(&mut self, req: &ModifyQpRoce) -> Cqe {
        self.exec(Command::ModifyQp, |s| req.write_fields(s))
    }

    /// MODIFY_QP to `state` only.
    pub fn modify_state(&mut self, qpn: u32, state: QpState) -> Cqe {
        let req = ModifyQpRoce {
            qpn,
            state: state as u8,
            dst_qpn: 0,
            mask: wire::qp_mask::STATE,
            qkey: 0,
            rq_psn: 0,
            sq_psn: 0,
            av: super::ipv4_av(0, 0),
        };
        self.modify_qp(&req)
    }

    /// MODIFY_QP in the iWARP layout: word @8 (`state`, CC 0, `qpn`), then `rest` fills the
    /// slot (the RTS words, or garbage for the stop form).
    pub fn modify_iwarp_raw(&mut self, qpn: u32, state: u8, rest: impl FnOnce(&mut [u8])) -> Cqe {
        let m = ModifyQpIwarp { qpn, state, cc: 0 };
        self.exec(Command::ModifyQp, |s| {
            rest(s);
            m.write_fields(s);
        })
    }

    /// MODIFY_QP (iWARP) to RTS with connection `conn`.
    pub fn iwarp_rts(&mut self, qpn: u32, conn: &IwarpConnection) -> Cqe {
        self.modify_iwarp_raw(qpn, IwarpState::Rts as u8, |s| conn.write_fields(s))
    }

    /// MODIFY_QP (iWARP) to `state`, the rest of the command left as the slot had it (the
    /// driver's "stop" form).
    pub fn iwarp_state(&mut self, qpn: u32, state: IwarpState) -> Cqe {
        self.modify_iwarp_raw(qpn, state as u8, |_| {})
    }

    /// INIT → RTR (AV to 10.0.0.`host`, destination `dst_qpn`, PSNs) → RTS.
    pub fn connect(&mut self, qpn: u32, host: u8, dst_qpn: u32) {
        assert_eq!(self.modify_state(qpn, QpState::Init).status, 0);
        let rtr = ModifyQpRoce {
            qpn,
            state: QpState::Rtr as u8,
            dst_qpn,
            mask: wire::qp_mask::STATE
                | wire::qp_mask::AV
                | wire::qp_mask::DST_QPN
                | wire::qp_mask::RQ_PSN,
            qkey: 0,
            rq_psn: 100,
            sq_psn: 0,
            av: super::ipv4_av(0, host),
        };
        assert_eq!(self.modify_qp(&rtr).status, 0);
        let rts = ModifyQpRoce {
            state: QpState::Rts as u8,
            mask: wire::qp_mask::STATE | wire::qp_mask::SQ_PSN,
            sq_psn: 200,
            ..rtr
        };
        assert_eq!(self.modify_qp(&rts).status, 0);
    }

    /// A UD QP to RTS the way ib_core does it: RESET → INIT with the Q_Key → RTR → RTS.
    pub fn ud_ready(&mut self, qpn: u32, qkey: u32) {
        let init = ModifyQpRoce {
            qpn,
            state: QpState::Init as u8,
            dst_qpn: 0,
            mask: wire::qp_mask::STATE | wire::qp_mask::QKEY,
            qkey,
            rq_psn: 0,
            sq_psn: 0,
            av: super::ipv4_av(0, 0),
        };
        assert_eq!(self.modify_qp(&init).status, 0);
        assert_eq!(self.modify_state(qpn, QpState::Rtr).status, 0);
        assert_eq!(self.modify_state(qpn, QpState::Rts).status, 0);
    }

    /// REFLUSH of `qpn` with the driver's current SQ and RQ producer indices (what the kernel
    /// driver sends for a QP in ERROR).
    pub fn reflush(&mut self, qpn: u32) -> Cqe {
        let (sq_pi, rq_pi) = self.dp.qps.get(&qpn).map_or((0, 0), |q| (q.sq_pi, q.rq_pi));
        let r = wire::Reflush {
            qpn,
            sq_pi: u32::from(sq_pi),
            rq_pi: u32::from(rq_pi),
        };
        self.exec(Command::Reflush, |s| r.write_fields(s))
    }

    /// QUERY_QP: `(resp0, status)`.
    pub fn query_qp(&mut self, qpn: u32) -> Cqe {
        self.exec(Command::QueryQp, |s| U32Arg(qpn).write_fields(s))
    }

    /// REG_MR of a normal MR for `[va, va + len)` mapped 1:1 onto guest memory (IOVA = guest
    /// address), 4 KiB pages, level 0 (≤ 4 pages) or 1 (an MTT array on the heap).
    pub fn reg_mr(&mut self, index: u32, key: u8, pdn: u32, va: u64, len: u64, acc: u8) -> Cqe {
        let first = va & !0xfff;
        let pages = ((va.saturating_add(len.max(1)) - 1) >> 12) - (va >> 12) + 1;
        let mut entries = [0u64; 4];
        let level = if pages <= 4 {
            for (i, e) in entries.iter_mut().enumerate().take(pages as usize) {
                *e = first + 0x1000 * i as u64;
            }
            0
        } else {
            let mtt = self.alloc(8 * pages, 8);
            for i in 0..pages {
                self.mem
                    .write_u64_le(mtt + 8 * i, first + 0x1000 * i)
                    .expect("MTT in test memory");
            }
            entries[0] = mtt;
            1
        };
        let req = RegMr {
            valid: true,
            version: 0,
            key,
            index,
            pdn,
            mr_type: 0,
            access: acc,
            va,
            len,
            page_shift: 12,
            mtt_page_code: 0,
            level,
            count: pages,
            entries,
        };
        self.reg_mr_raw(&req)
    }

    /// REG_MR with a request built by the test.
    pub fn reg_mr_raw(&mut self, req: &RegMr) -> Cqe {
        self.exec(Command::RegMr, |s| req.write_fields(s))
    }

    /// DEREG_MR of `stag`.
    pub fn dereg_mr(&mut self, stag: u32) -> Cqe {
        let req = DeregMr {
            index: wire::stag_index(stag),
            key: wire::stag_key(stag),
        };
        self.exec(Command::DeregMr, |s| req.write_fields(s))
    }

    /// Writes `wqe` at the QP's SQ producer index (wrapping at the ring end) and advances it.
    /// Returns the start index. Does not ring.
    pub fn post_wqe(&mut self, qpn: u32, wqe: &Wqe) -> u16 {
        let count = wqe.wqebbs();
        let qp = self
            .dp
            .qps
            .get(&qpn)
            .expect("QP created by the helpers")
            .clone();
        let start = qp.sq_pi;
        let hdr = SqeHeader {
            index: start.wrapping_add(count),
            ce: wqe.ce,
            se: wqe.se,
            fence: wqe.fence,
            inline: wqe.inline,
            opcode: wqe.opcode,
            qpn,
            wqebbs: count,
            sgl_len: wqe.sgl_len,
        };
        let mut bytes = wqe.bytes.clone();
        bytes.resize(usize::from(count) * SQ_WQEBB_SIZE, 0);
        hdr.write(&mut bytes);
        // Body first, header last (like the drivers).
        for (i, chunk) in bytes.chunks(8).enumerate().rev() {
            let pos = u64::from(start) * 32 + 8 * i as u64;
            let off = pos % (u64::from(qp.sq_depth) * 32);
            self.mem
                .write(qp.sq + off, chunk)
                .expect("SQ in test memory");
        }
        if let Some(q) = self.dp.qps.get_mut(&qpn) {
            q.sq_pi = start.wrapping_add(count);
        }
        start
    }

    /// Rings the SQ doorbell of `qpn` on the kernel's shared SQ doorbell page.
    pub fn ring_sq(&mut self, qpn: u32) {
        let pi = self.dp.qps[&qpn].sq_pi;
        self.w64(regs::SQDB_SHARED_PAGE, SqDoorbell { qpn, pi }.encode());
    }

    /// Posts and rings one WQE; returns its start index.
    pub fn send_wqe(&mut self, qpn: u32, wqe: &Wqe) -> u16 {
        let i = self.post_wqe(qpn, wqe);
        self.ring_sq(qpn);
        i
    }

    /// Posts an RQE for `[addr, addr + len)` under `lkey` and rings the RQ doorbell (RQ space
    /// offset 0, like the kernel). Returns the RQE's position.
    pub fn post_recv(&mut self, qpn: u32, addr: u64, len: u32, lkey: u32) -> u16 {
        let qp = self
            .dp
            .qps
            .get(&qpn)
            .expect("QP created by the helpers")
            .clone();
        let pi = qp.rq_pi;
        let rqe = Rqe {
            index: pi.wrapping_add(1),
            qpn,
            sge: Sge {
                addr,
                len,
                key: lkey,
            },
        };
        let off = u64::from(u32::from(pi) & (qp.rq_depth - 1)) * RQE_SIZE as u64;
        self.mem
            .write(qp.rq + off, &rqe.encode())
            .expect("RQ in test memory");
        if let Some(q) = self.dp.qps.get_mut(&qpn) {
            q.rq_pi = pi.wrapping_add(1);
        }
        let db = RqDoorbell {
            qpn,
            pi: pi.wrapping_add(1),
        };
        self.w64(regs::RQDB_BASE, db.encode());
        pi
    }

    /// The next valid CQE of `cqn` (owner rule), advancing the consumer index.
    pub fn poll(&mut self, cqn: u32) -> Option<DataCqe> {
        let cq = self.dp.cqs.get(&cqn)?.clone();
        let a = cq.addr + u64::from(cq.ci & (cq.depth - 1)) * CQE_SIZE as u64;
        let mut b = [0u8; CQE_SIZE];
        self.mem.read(a, &mut b).ok()?;
        let cqe = DataCqe::decode(&b);
        if cqe.owner == (cq.ci & cq.depth != 0) {
            return None;
        }
        if let Some(c) = self.dp.cqs.get_mut(&cqn) {
            c.ci = c.ci.wrapping_add(1);
        }
        Some(cqe)
    }

    /// Every valid CQE of `cqn`.
    pub fn poll_all(&mut self, cqn: u32) -> Vec<DataCqe> {
        std::iter::from_fn(|| self.poll(cqn)).collect()
    }

    /// Arms `cqn` (solicited only with `sol`) with the consumer index, on CQ doorbell offset 0.
    pub fn arm(&mut self, cqn: u32, sol: bool) {
        let cq = self
            .dp
            .cqs
            .get_mut(&cqn)
            .expect("CQ created by the helpers");
        let db = CqDoorbell {
            ci: cq.ci & 0xff_ffff,
            cmdsn: cq.arms & 3,
            solicited: sol,
            arm: true,
            cqn,
            seq: cq.arms,
        };
        cq.arms = cq.arms.wrapping_add(1);
        self.w64(regs::CQDB_BASE, db.encode());
    }

    /// Writes bytes into guest memory.
    pub fn poke(&mut self, addr: u64, data: &[u8]) {
        self.mem.write(addr, data).expect("address in test memory");
    }

    /// Reads bytes from guest memory.
    pub fn peek(&self, addr: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0; len];
        self.mem.read(addr, &mut b).expect("address in test memory");
        b
    }
}
