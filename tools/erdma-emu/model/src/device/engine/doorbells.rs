// SPDX-License-Identifier: GPL-2.0

//! Doorbells: the SQ, RQ and CQ doorbell values written into the doorbell spaces and the
//! extended doorbell pages, and the CQ events an arm raises.

use super::DataPath;
use crate::device::{Device, Oddity};
use crate::io::Io;
use crate::regs::{self, Bar0Area, CqDoorbell};
use crate::wire::{QpState, RqDoorbell, SqDoorbell};

impl Device {
    /// A 64-bit value written into a doorbell space at BAR0 `offset`.
    pub(in crate::device) fn data_doorbell(
        &mut self,
        area: Bar0Area,
        offset: u64,
        value: u64,
        io: &mut Io<'_>,
    ) {
        let slot = offset & (regs::DB_PAGE_SIZE - 1);
        match area {
            Bar0Area::SqDoorbells => self.data_path().sq_doorbell(value, io),
            Bar0Area::RqDoorbells => self.data_path().rq_or_cq_doorbell(value, slot, true, io),
            Bar0Area::CqDoorbells => self.data_path().rq_or_cq_doorbell(value, slot, false, io),
            Bar0Area::ExtDoorbells => match self.func.dbs.doorbell_at(offset) {
                Some((0, _)) => self.data_path().sq_doorbell(value, io),
                // The drivers swap CDB and RDB: no preference.
                Some((role, slot)) => {
                    self.data_path()
                        .rq_or_cq_doorbell(value, slot, role == 2, io)
                }
                None => {
                    if self.warned.first(Oddity::DataDoorbell, offset >> 12) {
                        log::warn!(
                            "doorbell {value:#x} on extended page at {offset:#x} that is not \
                             allocated, ignored"
                        );
                    }
                }
            },
            Bar0Area::Registers | Bar0Area::TestPage => {}
        }
    }
}

impl DataPath<'_> {
    fn rq_or_cq_doorbell(&mut self, value: u64, slot: u64, prefer_rq: bool, io: &mut Io<'_>) {
        let rq_db = RqDoorbell::decode(value);
        let cq_db = CqDoorbell::decode(value);
        let (qpn, cqn) = (rq_db.qpn, cq_db.cqn);
        let rq = self.rdma.qps.contains_key(&qpn);
        let cq = self.rdma.cqs.contains_key(&cqn);
        let is_rq = match (rq, cq) {
            (true, false) => true,
            (false, true) => false,
            (false, false) => {
                if self.warned.first(Oddity::DataDoorbell, value >> 32) {
                    log::warn!("doorbell {value:#x} names neither a QP nor a CQ, ignored");
                }
                return;
            }
            (true, true) => {
                let rq_slot = slot == regs::rq_db_slot(qpn);
                let cq_slot = slot == regs::cq_db_slot(cqn);
                match (rq_slot, cq_slot) {
                    (true, false) => true,
                    (false, true) => false,
                    _ => prefer_rq,
                }
            }
        };
        if is_rq {
            self.rq_doorbell(rq_db, io);
        } else {
            self.cq_doorbell(cq_db, io);
        }
    }

    /// SQ doorbell: a QPN and its new PI.
    fn sq_doorbell(&mut self, value: u64, io: &mut Io<'_>) {
        let SqDoorbell { qpn, pi } = SqDoorbell::decode(value);
        let Some(qp) = self.rdma.qps.get_mut(&qpn) else {
            if self.warned.first(Oddity::DataDoorbell, u64::from(qpn)) {
                log::warn!("SQ doorbell {value:#x} for QP {qpn} that does not exist, ignored");
            }
            return;
        };
        let ahead = pi.wrapping_sub(qp.sq.ci);
        if u32::from(ahead) > qp.sq.depth {
            if self.warned.dp_error() {
                log::warn!(
                    "QP {qpn}: SQ doorbell PI {pi:#x} is {ahead} WQEBBs ahead of the device's CI \
                     {:#x} (depth {}), ignored",
                    qp.sq.ci,
                    qp.sq.depth
                );
            }
            return;
        }
        qp.sq.pi = pi;
        match qp.state {
            QpState::Rts => self.process_sq(qpn, io),
            // In ERROR the PI is only recorded: REFLUSH flushes (§3.5, §10.13).
            QpState::Error => log::trace!("QP {qpn} in ERROR: SQ PI {pi:#x} recorded"),
            _ => {}
        }
    }

    /// RQ doorbell: the RQE's first 8 bytes.
    fn rq_doorbell(&mut self, db: RqDoorbell, io: &mut Io<'_>) {
        let RqDoorbell { qpn, pi } = db;
        let Some(qp) = self.rdma.qps.get_mut(&qpn) else {
            return;
        };
        let ahead = pi.wrapping_sub(qp.rq.ci);
        if u32::from(ahead) > qp.rq.depth {
            if self.warned.dp_error() {
                log::warn!(
                    "QP {qpn}: RQ doorbell PI {pi:#x} is {ahead} RQEs ahead of the device's CI \
                     {:#x} (depth {}), ignored",
                    qp.rq.ci,
                    qp.rq.depth
                );
            }
            return;
        }
        qp.rq.pi = pi;
        match qp.state {
            // In ERROR the PI is only recorded: REFLUSH flushes (§3.5, §10.13).
            QpState::Error => log::trace!("QP {qpn} in ERROR: RQ PI {pi:#x} recorded"),
            _ => self.drain_held(qpn, io),
        }
    }

    /// CQ doorbell (§4.4): record the CI; with ARM, arm for the next (solicited) completion.
    fn cq_doorbell(&mut self, db: CqDoorbell, io: &mut Io<'_>) {
        let Some(cq) = self.rdma.cqs.get_mut(&db.cqn) else {
            return;
        };
        if cq.doorbell(db) {
            let (eqn, cqn) = (cq.eqn, cq.cqn);
            self.cq_event(eqn, cqn, io);
        }
    }

    pub(super) fn cq_event(&mut self, eqn: u8, cqn: u32, io: &mut Io<'_>) {
        if let Err(e) = self.events.post_ceqe(eqn, cqn, io) {
            if self.warned.event_drop() {
                log::warn!("CQ {cqn}: CEQE to CEQ {eqn} dropped: {e}");
            }
        }
    }
}
