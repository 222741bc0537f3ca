// SPDX-License-Identifier: GPL-2.0

//! The tables through which the adapter's events reach the objects they name (erdma_rs_hw 4.2):
//! queue pairs by QPN for the AEQ, completion queues by CQN, one table per CEQ.
//!
//! The layer right above the hardware: the event handlers ([`crate::hw`]) deliver through
//! [`AsyncSink`] and [`CompletionSink`], which [`Dispatch`] implements, and `Dispatch` knows the
//! objects only as [`QpSink`] and [`CqSink`], which the verbs layer implements. Each table is an
//! interrupt-disabling spinlock, taken alone, so lookups are safe from any context, and CEQs
//! never contend with each other.

use kernel::{
    new_spinlock_irq,
    prelude::*,
    rbtree::RBTree,
    sync::{
        Arc,
        SpinLockIrq, //
    },
};

use crate::consts::MAX_CEQS;

/// What a queue pair's asynchronous events go to.
pub(crate) trait QpSink: Send + Sync {
    /// The adapter reported the queue pair failed. Interrupt context.
    fn fatal(&self);
}

/// What a completion queue's events go to.
pub(crate) trait CqSink: Send + Sync {
    /// A completion event. Interrupt context.
    fn completion(&self);
    /// The adapter reported an error on the queue. Interrupt context.
    fn error(&self);
}

/// What the AEQ handler delivers: each returns whether the object exists.
pub(crate) trait AsyncSink {
    /// The queue pair numbered `qpn` failed.
    fn qp_fatal(&self, qpn: u32) -> bool;
    /// The completion queue numbered `cqn` had an error.
    fn cq_error(&self, cqn: u32) -> bool;
}

/// What a CEQ handler delivers: whether the completion queue exists.
pub(crate) trait CompletionSink {
    /// A completion event of CQ `cqn`, which CEQ `eqn` delivers.
    fn cq_event(&self, eqn: u32, cqn: u32) -> bool;
}

/// The completion queues of one CEQ, by CQN.
pub(crate) type CqTable<C> = RBTree<u32, Arc<C>>;

/// The lookup tables of one adapter.
#[pin_data]
pub(crate) struct Dispatch<Q, C> {
    /// The queue pairs, by QPN, for the AEQ handler.
    #[pin]
    pub(crate) qps: SpinLockIrq<RBTree<u32, Arc<Q>>>,
    /// One table per CEQ (index EQN - 1) of the completion queues whose events it delivers.
    ceq_cqs: KVec<Pin<KBox<SpinLockIrq<CqTable<C>>>>>,
}

impl<Q: QpSink, C: CqSink> Dispatch<Q, C> {
    /// Empty tables for every CEQ an adapter can have.
    pub(crate) fn new() -> Result<impl PinInit<Self, Error>> {
        let mut ceq_cqs = KVec::with_capacity(MAX_CEQS as usize, GFP_KERNEL)?;
        for _ in 0..MAX_CEQS {
            ceq_cqs.push(
                KBox::pin_init(new_spinlock_irq!(RBTree::new()), GFP_KERNEL)?,
                GFP_KERNEL,
            )?;
        }
        Ok(try_pin_init!(Self {
            qps <- new_spinlock_irq!(RBTree::new()),
            ceq_cqs,
        }? Error))
    }

    /// The completion queues whose events CEQ `eqn` delivers.
    pub(crate) fn ceq_cqs(&self, eqn: u32) -> Result<&SpinLockIrq<CqTable<C>>> {
        let index = usize::try_from(eqn.checked_sub(1).ok_or(EINVAL)?)?;
        Ok(self.ceq_cqs.get(index).ok_or(EINVAL)?.as_ref().get_ref())
    }

    /// The adapter failed: every completion queue gets a completion event, as from its CEQ
    /// (under its table's lock), so that its consumer polls, and finds its work flushed.
    pub(crate) fn wake_all(&self) {
        for cqs in &self.ceq_cqs {
            for cq in cqs.lock().values() {
                cq.completion();
            }
        }
    }
}

impl<Q: QpSink, C: CqSink> AsyncSink for Dispatch<Q, C> {
    fn qp_fatal(&self, qpn: u32) -> bool {
        self.qps.lock().get(&qpn).map(|q| q.fatal()).is_some()
    }

    /// Rare: every CEQ's table is searched.
    fn cq_error(&self, cqn: u32) -> bool {
        self.ceq_cqs
            .iter()
            .any(|cqs| cqs.lock().get(&cqn).map(|c| c.error()).is_some())
    }
}

impl<Q: QpSink, C: CqSink> CompletionSink for Dispatch<Q, C> {
    fn cq_event(&self, eqn: u32, cqn: u32) -> bool {
        let Ok(cqs) = self.ceq_cqs(eqn) else {
            return false;
        };
        cqs.lock().get(&cqn).map(|c| c.completion()).is_some()
    }
}
