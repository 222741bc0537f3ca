// SPDX-License-Identifier: GPL-2.0

//! The RDMA object commands (erdma_rs_hw 3.5, §6) as the command engine runs them. The object
//! tables (`objects`) check and change themselves; what a command does beyond them is here:
//! the CEQ that CREATE_CQ names, the held requests a destroyed or reset QP answers, the engines
//! that a state change starts (RTS) or stops (ERROR), the flush after REFLUSH, and the iWARP
//! stream a DESTROY_QP ends. DESTROY_QP, MODIFY_QP (both layouts; iWARP's in `iwarp`) and
//! REFLUSH reach nothing of the device beyond the data path, so they are methods of its
//! context (`engine::DataPath`).

use super::engine::DataPath;
use super::objects::Outcome;
use super::Device;
use crate::cmdq::Status;
use crate::io::Io;
use crate::wire::{
    qp_mask, CreateCq, CreateQp, DeregMr, ModifyQpRoce, QpState, Reflush, RegMr, U32Arg,
};

impl Device {
    // --------------------------------------------------------------------------------------------
    // CQs
    // --------------------------------------------------------------------------------------------

    pub(super) fn cmd_create_cq(&mut self, r: CreateCq, io: &mut Io<'_>) -> Outcome {
        let queues = &self.func.queues;
        let ceq_exists = |eqn| queues.as_ref().is_some_and(|q| q.eqs.ceq(eqn).is_some());
        self.func
            .rdma
            .create_cq(r, &self.config.caps, ceq_exists, io.mem)
    }

    pub(super) fn cmd_destroy_cq(&mut self, r: U32Arg) -> Outcome {
        self.func.rdma.destroy_cq(r)
    }

    // --------------------------------------------------------------------------------------------
    // QPs
    // --------------------------------------------------------------------------------------------

    pub(super) fn cmd_create_qp(&mut self, r: CreateQp, io: &mut Io<'_>) -> Outcome {
        let protocol = self.config.protocol;
        self.func
            .rdma
            .create_qp(r, &self.config.caps, protocol, io.mem)
    }

    pub(super) fn cmd_query_qp(&mut self, r: U32Arg) -> Outcome {
        self.func.rdma.query_qp(r)
    }

    // --------------------------------------------------------------------------------------------
    // MRs
    // --------------------------------------------------------------------------------------------

    pub(super) fn cmd_reg_mr(&mut self, r: RegMr, io: &mut Io<'_>) -> Outcome {
        self.func.rdma.reg_mr(r, &self.config.caps, io.mem)
    }

    pub(super) fn cmd_dereg_mr(&mut self, r: DeregMr) -> Outcome {
        self.func.rdma.dereg_mr(r)
    }

    // --------------------------------------------------------------------------------------------
    // Inspection
    // --------------------------------------------------------------------------------------------

    /// QPNs of the live QPs with their states, in QPN order.
    pub fn qps(&self) -> Vec<(u32, QpState)> {
        self.func.rdma.qp_states()
    }

    /// CQNs of the live CQs, in order.
    pub fn cqs(&self) -> Vec<u32> {
        self.func.rdma.cqns()
    }

    /// `(STag, MTT levels, MTT entries)` of every MR: level 0 for page lists held by the
    /// device (inline, DMA MRs).
    pub fn mr_layouts(&self) -> Vec<(u32, u8, u64)> {
        self.func.rdma.mr_layouts()
    }

    /// STags of the registered MRs (valid or not), in MPT-index order.
    pub fn mrs(&self) -> Vec<u32> {
        self.func.rdma.stags()
    }

    /// `(SQ PSN, RQ PSN, state)` of QP `qpn`.
    pub fn qp_info(&self, qpn: u32) -> Option<(u32, u32, QpState)> {
        self.func.rdma.qp_info(qpn)
    }

    /// Whether MR `stag`'s MPT entry exists and is valid with that key.
    pub fn mr_valid(&self, stag: u32) -> bool {
        self.func.rdma.mr_valid(stag)
    }
}

/// The QP commands that start or stop the engines work on the data path's context: it holds
/// the QP table and everything a state change reaches (held requests, the SQ, flushing, the
/// iWARP stream).
impl DataPath<'_> {
    pub(super) fn cmd_destroy_qp(&mut self, r: U32Arg) -> Outcome {
        // A live iWARP stream ends (the peer hears of it) and its binding goes.
        self.transport(r.0).close(self, r.0, None);
        let mut qp = self.rdma.remove_qp(r.0).ok_or(Status::NotFound)?;
        self.nak_held(qp.held.take());
        log::debug!("QP {} destroyed", r.0);
        Ok((0, 0))
    }

    pub(super) fn cmd_modify_qp(&mut self, r: ModifyQpRoce, io: &mut Io<'_>) -> Outcome {
        let target = if r.mask & qp_mask::STATE != 0 {
            Some(QpState::from_u8(r.state).ok_or(Status::InvalidParam)?)
        } else {
            None
        };
        if r.mask & qp_mask::AV != 0 && !self.roce.gids.in_range(r.av.sgid_index) {
            return Err(Status::InvalidParam);
        }
        let qp = self.rdma.qps.get_mut(&r.qpn).ok_or(Status::NotFound)?;
        let cur = qp.state;
        if let Some(t) = target {
            use QpState::*;
            let ok = t == cur
                || matches!(
                    (cur, t),
                    (_, Reset)
                        | (_, Error)
                        | (Reset, Init)
                        | (Init, Rtr)
                        | (Rtr, Rts)
                        | (Rts, Sqd)
                        | (Sqd, Rts)
                        | (Sqe, Rts)
                        | (Rts, Sqe)
                );
            if !ok {
                return Err(Status::InvalidParam);
            }
        }
        if r.mask & qp_mask::QKEY != 0 {
            qp.qkey = r.qkey;
        }
        if r.mask & qp_mask::AV != 0 {
            qp.av = Some(r.av);
        }
        if r.mask & qp_mask::SQ_PSN != 0 {
            qp.sq_psn = r.sq_psn & 0xff_ffff;
        }
        if r.mask & qp_mask::RQ_PSN != 0 {
            qp.rq_psn = r.rq_psn & 0xff_ffff;
        }
        if r.mask & qp_mask::DST_QPN != 0 {
            qp.dst_qpn = r.dst_qpn;
        }
        let Some(t) = target else {
            return Ok((0, 0));
        };
        if t != cur {
            log::debug!("QP {}: {} -> {}", r.qpn, cur.name(), t.name());
        }
        match t {
            QpState::Reset => {
                qp.state = QpState::Reset;
                qp.sq.pi = 0;
                qp.sq.ci = 0;
                qp.rq.pi = 0;
                qp.rq.ci = 0;
                qp.outstanding.clear();
                qp.cursor = None;
                qp.rx_next = 0;
                qp.lost.clear();
                qp.retries = 0;
                let (inflight, held_bytes) = (qp.inflight, qp.held.bytes());
                let held = qp.held.take();
                self.release(r.qpn, inflight);
                self.rdma.held_bytes = self.rdma.held_bytes.saturating_sub(held_bytes);
                self.nak_held(held);
            }
            QpState::Error if cur != QpState::Error => self.enter_error(r.qpn, io),
            QpState::Rts => {
                qp.state = t;
                self.process_sq(r.qpn, io);
            }
            _ => qp.state = t,
        }
        Ok((0, 0))
    }

    /// REFLUSH (§3.5, §10.13): on a QP in ERROR, flushes (15) every WQE and RQE up to the
    /// producer indices it carries. Doorbells in ERROR only record PIs, so this is how WQEs
    /// posted after the transition complete. PIs more than a queue depth ahead of the device's
    /// CI are ignored (that queue keeps its PI).
    pub(super) fn cmd_reflush(&mut self, r: Reflush, io: &mut Io<'_>) -> Outcome {
        if self.rdma.reflush_pis(&r)? {
            self.flush_queues(r.qpn, io);
        }
        Ok((0, 0))
    }
}
