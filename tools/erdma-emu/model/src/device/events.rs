// SPDX-License-Identifier: GPL-2.0

//! The function's event entry points (erdma_rs_hw 4): EQ doorbells, and posting CEQEs and AEQEs
//! for the engines and the control language. The rings, the posting and the arming are
//! [`crate::eq::EventQueues`]; this is the device's face of them.

use super::{Device, Oddity, Queues};
use crate::eq::{EventQueue, EventQueues, PostError};
use crate::io::Io;
use crate::regs::EqDoorbell;
use crate::wire::AeqEvent;

/// Posting events, all the engines may do with the EQs: CEQEs and AEQEs, into the queues
/// `DEV_CTRL.INIT` created ([`PostError::NotInitialized`] before).
pub(super) struct Events<'a> {
    eqs: Option<&'a mut EventQueues>,
}

impl<'a> Events<'a> {
    /// The events of a function whose queues are `queues`.
    pub(super) fn of(queues: &'a mut Option<Queues>) -> Self {
        Events {
            eqs: queues.as_mut().map(|q| &mut q.eqs),
        }
    }

    /// Posts a CEQE for `cqn` (20 bits) to CEQ `eqn`; raises the CEQ's vector if it is armed.
    pub(super) fn post_ceqe(
        &mut self,
        eqn: u8,
        cqn: u32,
        io: &mut Io<'_>,
    ) -> Result<(), PostError> {
        let eqs = self.eqs.as_deref_mut().ok_or(PostError::NotInitialized)?;
        eqs.post_ceqe(eqn, cqn, io).map(drop)
    }

    /// Posts an asynchronous event to the AEQ; raises vector 0 if the AEQ is armed.
    pub(super) fn post_aeqe(&mut self, ev: AeqEvent, io: &mut Io<'_>) -> Result<(), PostError> {
        let eqs = self.eqs.as_deref_mut().ok_or(PostError::NotInitialized)?;
        eqs.post_aeqe(ev, io).map(drop)
    }
}

impl Device {
    /// An EQ doorbell: AEQ_DB (`None`) or EQ_DB\[n\] (0 = CMDQ EQ, n = CEQ n).
    pub(super) fn eq_doorbell(&mut self, n: Option<u8>, db: EqDoorbell, io: &mut Io<'_>) {
        let Some(q) = self.func.queues.as_mut() else {
            return;
        };
        if q.eqs.doorbell(n, db, io).is_none() {
            let n = n.unwrap_or(0);
            if self.warned.first(Oddity::UnknownCeqDoorbell, n.into()) {
                log::warn!("EQ_DB[{n}] for a CEQ that does not exist, ignored");
            }
        }
    }

    /// Posts a CEQE for `cqn` (20 bits) to CEQ `eqn`; raises the CEQ's vector if it is armed.
    pub fn post_ceqe(&mut self, eqn: u8, cqn: u32, io: &mut Io<'_>) -> Result<(), PostError> {
        Events::of(&mut self.func.queues).post_ceqe(eqn, cqn, io)
    }

    /// Posts an asynchronous event to the AEQ; raises vector 0 if the AEQ is armed.
    pub fn post_aeqe(&mut self, ev: AeqEvent, io: &mut Io<'_>) -> Result<(), PostError> {
        Events::of(&mut self.func.queues).post_aeqe(ev, io)
    }

    /// EQNs of the live CEQs, in increasing order.
    pub fn ceqs(&self) -> Vec<u8> {
        self.func
            .queues
            .as_ref()
            .map_or_else(Vec::new, |q| q.eqs.live_ceqs())
    }

    /// CEQ `eqn`, if it exists.
    pub fn ceq(&self, eqn: u8) -> Option<&EventQueue> {
        Some(&self.func.queues.as_ref()?.eqs.ceq(eqn)?.eq)
    }

    /// The doorbell-record address CEQ `eqn` was created with.
    pub fn ceq_dbrec(&self, eqn: u8) -> Option<u64> {
        Some(self.func.queues.as_ref()?.eqs.ceq(eqn)?.dbrec)
    }

    /// The CMDQ EQ (after INIT).
    pub fn cmdq_eq(&self) -> Option<&EventQueue> {
        self.func.queues.as_ref().map(|q| q.eqs.cmdq_eq())
    }

    /// The AEQ (after INIT).
    pub fn aeq(&self) -> Option<&EventQueue> {
        self.func.queues.as_ref().map(|q| q.eqs.aeq())
    }
}
