// SPDX-License-Identifier: GPL-2.0

//! Completion generation: data CQEs (with the owner bit of the lap, CQ events, CQ overflow),
//! completing requests in SQ order, and moving a QP to ERROR with everything posted flushed.

use super::DataPath;
use crate::device::objects::{Cq, Pending};
use crate::device::Oddity;
use crate::io::{GuestMemory, Io};
use crate::mtt::Xlate;
use crate::regs::CqDoorbell;
use crate::wire::{
    self, op, wc, AeqEvent, CqeExtra, DataCqe, QpState, SqeHeader, UdInfo, CQE_QTYPE_RQ,
    CQE_QTYPE_SQ, SQ_WQEBB_SIZE,
};

/// AE type: CQ error.
const AE_CQ: u8 = 3;

/// What writing a CQE into a CQ came to.
#[derive(Debug, PartialEq, Eq)]
enum CqPost {
    /// The CQ is broken (an overflow was reported): CQEs are dropped.
    Broken,
    /// The CQE would land `depth` entries beyond the consumer index (judged only while that CI
    /// is current): the CQ is broken from now on, and an AEQE of type 3 is due.
    Overflow,
    /// The CQ's ring is not writable: the CQE is dropped.
    Unwritable(Xlate),
    /// Written; `event`: the CQ was armed for it, and no longer is: its CEQE is due.
    Written { event: bool },
}

impl Cq {
    /// Writes `cqe` at the producer index with the owner bit of the lap (1 on the first), the
    /// owner bit last. A `solicited` completion, or an error, fires a solicited-only arm.
    fn post(&mut self, mut cqe: DataCqe, solicited: bool, mem: &mut dyn GuestMemory) -> CqPost {
        if self.error {
            return CqPost::Broken;
        }
        if self.ci_fresh && self.pi.wrapping_sub(self.ci) & 0xff_ffff >= self.depth {
            self.error = true;
            return CqPost::Overflow;
        }
        let slot = self.pi & (self.depth - 1);
        cqe.owner = self.pi & self.depth == 0;
        let bytes = cqe.encode();
        let off = u64::from(slot) * wire::CQE_SIZE as u64;
        let written = wire::write_owner_last(&bytes, |at, b| self.buf.write(off + at, b, mem));
        if let Err(e) = written {
            return CqPost::Unwritable(e);
        }
        self.pi = self.pi.wrapping_add(1);
        let fire = match self.armed {
            Some(sol_only) => !sol_only || solicited || cqe.status != wc::SUCCESS,
            None => false,
        };
        if fire {
            self.armed = None;
            self.ci_fresh = false;
        }
        CqPost::Written { event: fire }
    }

    /// A CQ doorbell (§4.4): records the CI; with ARM, arms for the next (solicited)
    /// completion, unless completions the consumer has not seen are there already: then the
    /// event is due now (the return value).
    pub(super) fn doorbell(&mut self, db: CqDoorbell) -> bool {
        self.ci = db.ci;
        if !db.arm {
            return false;
        }
        self.ci_fresh = true;
        let pending = self.pi.wrapping_sub(db.ci) & 0xff_ffff;
        if !db.solicited && pending != 0 && pending <= self.depth {
            // Completions the consumer has not seen: the event is due now.
            self.armed = None;
            self.ci_fresh = false;
            true
        } else {
            self.armed = Some(db.solicited);
            false
        }
    }
}

impl DataPath<'_> {
    /// Writes a CQE into CQ `cqn` (see [`Cq::post`]) and posts what it asks for: the CEQE of
    /// an armed CQ, the AEQE of an overflow.
    pub(in crate::device) fn post_cqe(
        &mut self,
        cqn: u32,
        cqe: DataCqe,
        solicited: bool,
        io: &mut Io<'_>,
    ) {
        let Some(cq) = self.rdma.cqs.get_mut(&cqn) else {
            if self.warned.first(Oddity::MissingCq, u64::from(cqn)) {
                log::warn!(
                    "completion for QP {} dropped: CQ {cqn} does not exist",
                    cqe.qpn
                );
            }
            return;
        };
        match cq.post(cqe, solicited, io.mem) {
            CqPost::Broken => {}
            CqPost::Overflow => {
                let (depth, ci) = (cq.depth, cq.ci);
                if self.warned.dp_error() {
                    log::warn!(
                        "CQ {cqn} overflow: {depth} CQEs beyond the consumer index {ci:#x}; CQ error"
                    );
                }
                let ev = AeqEvent {
                    ty: AE_CQ,
                    subtype: 0,
                    data0: cqn,
                    data1: 0,
                };
                if let Err(e) = self.events.post_aeqe(ev, io) {
                    if self.warned.event_drop() {
                        log::warn!("CQ {cqn}: AEQE dropped: {e}");
                    }
                }
            }
            CqPost::Unwritable(e) => {
                if self
                    .warned
                    .first(Oddity::CqeWrite, u64::from(cqn) | 1 << 32)
                {
                    log::warn!("CQ {cqn}: CQE not writable ({e:?}), dropped");
                }
            }
            CqPost::Written { event: false } => {}
            CqPost::Written { event: true } => {
                let eqn = cq.eqn;
                self.cq_event(eqn, cqn, io);
            }
        }
    }

    fn sq_cqe(&mut self, qpn: u32, p: &Pending, status: u8, io: &mut Io<'_>) {
        let Some(qp) = self.rdma.qps.get(&qpn) else {
            return;
        };
        let cqn = qp.send_cqn;
        let cqe = DataCqe {
            owner: false,
            opcode: p.opcode,
            qtype: CQE_QTYPE_SQ,
            status,
            wqe_index: u32::from(p.wqe_index),
            qpn,
            extra: CqeExtra::None,
            byte_len: if status == wc::SUCCESS { p.byte_len } else { 0 },
            ud: UdInfo::NONE,
        };
        self.post_cqe(cqn, cqe, false, io);
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn rq_cqe(
        &mut self,
        qpn: u32,
        index: u16,
        opcode: u8,
        status: u8,
        extra: CqeExtra,
        byte_len: u32,
        solicited: bool,
        ud: UdInfo,
        io: &mut Io<'_>,
    ) {
        let Some(qp) = self.rdma.qps.get(&qpn) else {
            return;
        };
        let cqn = qp.recv_cqn;
        let cqe = DataCqe {
            owner: false,
            opcode,
            qtype: CQE_QTYPE_RQ,
            status,
            wqe_index: u32::from(index),
            qpn,
            extra,
            byte_len,
            ud,
        };
        self.post_cqe(cqn, cqe, solicited, io);
    }

    /// Completes finished requests from the front of the SQ, in order. An error moves the QP to
    /// ERROR.
    pub(in crate::device) fn drain_completions(&mut self, qpn: u32, io: &mut Io<'_>) {
        loop {
            let Some(qp) = self.rdma.qps.get_mut(&qpn) else {
                return;
            };
            let Some(status) = qp.outstanding.front().and_then(|p| p.status) else {
                return;
            };
            let Some(p) = qp.outstanding.pop_front() else {
                return;
            };
            let in_error = qp.state == QpState::Error;
            self.release(qpn, p.charge);
            if p.signaled || status != wc::SUCCESS {
                self.sq_cqe(qpn, &p, status, io);
            }
            if status != wc::SUCCESS && !in_error {
                log::debug!(
                    "QP {qpn}: WQE at {:#x} (opcode {}) completed with status {status}; QP to ERROR",
                    p.wqe_index,
                    p.opcode
                );
                self.enter_error(qpn, io);
            }
        }
    }

    /// Moves a QP to ERROR and flushes everything.
    pub(in crate::device) fn enter_error(&mut self, qpn: u32, io: &mut Io<'_>) {
        self.enter_error_with(qpn, None, io);
    }

    /// [`DataPath::enter_error`]; an iWARP QP's live stream ends with a Terminate that gives the
    /// peer's oldest unanswered request `peer_status` (`None`: flushed).
    pub(in crate::device) fn enter_error_with(
        &mut self,
        qpn: u32,
        peer_status: Option<u8>,
        io: &mut Io<'_>,
    ) {
        self.transport(qpn).close(self, qpn, peer_status);
        let Some(qp) = self.rdma.qps.get_mut(&qpn) else {
            return;
        };
        qp.state = QpState::Error;
        qp.cursor = None;
        qp.rx_next = 0;
        for p in qp.outstanding.iter_mut().filter(|p| p.status.is_none()) {
            p.status = Some(wc::FLUSHED);
        }
        let held_bytes = qp.held.bytes();
        let held = qp.held.take();
        self.rdma.held_bytes = self.rdma.held_bytes.saturating_sub(held_bytes);
        self.nak_held(held);
        self.drain_completions(qpn, io);
        self.flush_queues(qpn, io);
    }

    /// Flushes every posted SQ WQE and RQE of a QP in ERROR (status 15).
    pub(in crate::device) fn flush_queues(&mut self, qpn: u32, io: &mut Io<'_>) {
        // SQ: one CQE per WQE, in order, after any outstanding completions.
        for p in self
            .rdma
            .qps
            .get_mut(&qpn)
            .map(|q| std::mem::take(&mut q.outstanding))
            .unwrap_or_default()
        {
            self.release(qpn, p.charge);
            let status = p.status.unwrap_or(wc::FLUSHED);
            if p.signaled || status != wc::SUCCESS {
                self.sq_cqe(qpn, &p, status, io);
            }
        }
        loop {
            let Some(qp) = self.rdma.qps.get_mut(&qpn) else {
                return;
            };
            let ci = qp.sq.ci;
            let avail = qp.sq.pi.wrapping_sub(ci);
            if avail == 0 {
                break;
            }
            let off = u64::from(u32::from(ci) & (qp.sq.depth - 1)) * SQ_WQEBB_SIZE as u64;
            let mut h = [0u8; SqeHeader::SIZE];
            let hdr = qp
                .sq
                .buf
                .read(off, &mut h, io.mem)
                .ok()
                .map(|()| SqeHeader::read(&h));
            let (opcode, count) = hdr.map_or((op::SEND, avail), |h| (h.opcode, h.wqebbs));
            qp.sq.ci = ci.wrapping_add(count.clamp(1, avail));
            let p = Pending::new(ci, opcode, true);
            self.sq_cqe(qpn, &p, wc::FLUSHED, io);
        }
        loop {
            let Some(qp) = self.rdma.qps.get_mut(&qpn) else {
                return;
            };
            if qp.rq.pi == qp.rq.ci {
                break;
            }
            let index = qp.rq.consume();
            self.rq_cqe(
                qpn,
                index,
                op::RECEIVE,
                wc::FLUSHED,
                CqeExtra::None,
                0,
                false,
                UdInfo::NONE,
                io,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::Caps;
    use crate::device::objects::fixtures::{cq_request, memory};
    use crate::device::objects::Rdma;
    use crate::testing::VecMemory;

    /// CQ 1 (16 CQEs at guest-physical 0x1_0000) and its memory.
    fn new_cq() -> (Cq, VecMemory) {
        let mem = memory();
        let mut t = Rdma::default();
        let created = t.create_cq(cq_request(1), &Caps::default(), |_| true, &mem);
        assert_eq!(created, Ok((0, 0)));
        (t.cqs.remove(&1).expect("created"), mem)
    }

    fn cqe(status: u8) -> DataCqe {
        DataCqe {
            owner: false,
            opcode: op::RECEIVE,
            qtype: CQE_QTYPE_RQ,
            status,
            wqe_index: 0,
            qpn: 5,
            extra: CqeExtra::None,
            byte_len: 0,
            ud: UdInfo::NONE,
        }
    }

    fn arm(ci: u32, solicited: bool) -> CqDoorbell {
        CqDoorbell {
            ci,
            cmdsn: 0,
            solicited,
            arm: true,
            cqn: 1,
            seq: 0,
        }
    }

    #[test]
    fn cq_arms_fire_once_and_overflow_breaks_it() {
        let (mut cq, mut mem) = new_cq();
        let ok = wc::SUCCESS;
        assert!(!cq.doorbell(arm(0, true)), "nothing unseen: armed");
        let quiet = CqPost::Written { event: false };
        let event = CqPost::Written { event: true };
        assert_eq!(cq.post(cqe(ok), false, &mut mem), quiet, "not solicited");
        assert_eq!(cq.post(cqe(ok), true, &mut mem), event);
        assert_eq!(cq.post(cqe(ok), true, &mut mem), quiet, "one event per arm");
        assert!(cq.doorbell(arm(0, false)), "three unseen: due now");
        assert!(!cq.doorbell(arm(3, true)));
        assert_eq!(
            cq.post(cqe(wc::FLUSHED), false, &mut mem),
            event,
            "errors fire"
        );
        let first: [u8; wire::CQE_SIZE] = mem.bytes()[..wire::CQE_SIZE].try_into().unwrap();
        assert!(DataCqe::decode(&first).owner, "first lap");
        // The CI of the last arm is 3: 16 CQEs beyond it overflow the CQ.
        assert!(!cq.doorbell(arm(3, true)));
        for _ in 4..19 {
            assert_eq!(cq.post(cqe(ok), false, &mut mem), quiet);
        }
        assert_eq!(cq.post(cqe(ok), false, &mut mem), CqPost::Overflow);
        assert_eq!(cq.post(cqe(ok), false, &mut mem), CqPost::Broken);
        let (mut cq, _) = new_cq();
        let mut nowhere = VecMemory::new(0, 0);
        assert!(matches!(
            cq.post(cqe(ok), false, &mut nowhere),
            CqPost::Unwritable(_)
        ));
        assert_eq!(cq.pi, 0, "a CQE not written is not produced");
    }
}
