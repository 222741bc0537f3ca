// SPDX-License-Identifier: GPL-2.0

//! The adapter as the driver drives it: its registers, its command queue, its event queues and
//! the tables through which events reach the verbs objects they name.

use kernel::{
    device, fmt,
    io::Io,
    num::Bounded,
    pci,
    prelude::*,
    rbtree::RBTree,
    rdma::qp::QpEvent,
    sync::{
        Arc,
        Mutex,
        SpinLockIrq, //
    },
    time::{
        delay::fsleep,
        Delta, //
    },
};

use crate::{
    cmdq::{
        Cmdq,
        Wait, //
    },
    commands::{
        Command,
        Response, //
    },
    consts::MAX_CEQS,
    eq::EqRing,
    formats::AsyncEvent,
    kverbs::{
        CqEntry,
        QpEntry, //
    },
    regs::{
        self,
        Bar0, //
    },
    report::DeviceReports,
    ring::{
        lower,
        upper, //
    },
};

/// The completion queues of one CEQ, by CQN.
pub(crate) type CqTable = RBTree<u32, Arc<CqEntry>>;

/// Event-queue entries handled per interrupt before re-arming.
const EQ_BUDGET: usize = 16;
/// How often, and how many times, `DEV_STATUS.INIT_DONE` is polled.
const INIT_POLL_INTERVAL: Delta = Delta::from_millis(20);
const INIT_POLL_TRIES: u32 = 500;

/// The adapter's registers and control queues, shared with the interrupt handlers.
#[pin_data]
pub(crate) struct Hw<'bound> {
    pub(crate) pdev: &'bound pci::Device<device::Bound>,
    pub(crate) bar: Bar0<'bound>,
    #[pin]
    pub(crate) cmdq: Cmdq,
    #[pin]
    aeq: SpinLockIrq<EqRing>,
    /// Event handles of the completion queues, one table per CEQ (index EQN - 1) holding
    /// the CQs whose events that CEQ delivers, by CQN: CEQ handlers never share a lock.
    ceq_cqs: KVec<Pin<KBox<SpinLockIrq<CqTable>>>>,
    /// Event handles of the queue pairs, by QPN, for the AEQ handler.
    #[pin]
    pub(crate) qps: SpinLockIrq<RBTree<u32, Arc<QpEntry>>>,
    /// What the adapter did wrong.
    pub(crate) reports: DeviceReports,
    /// The memory of objects whose teardown command failed ([`Hw::strand`]).
    #[pin]
    stranded: Mutex<KVec<KBox<dyn Send + 'bound>>>,
}

impl<'bound> Hw<'bound> {
    /// The adapter behind `bar`, with its command queue and an AEQ of `aeq_depth` entries
    /// allocated but not yet described to it.
    pub(crate) fn new(
        pdev: &'bound pci::Device<device::Bound>,
        bar: Bar0<'bound>,
        aeq_depth: u16,
    ) -> Result<impl PinInit<Self, Error> + 'bound> {
        let dev: &device::Device<device::Bound> = pdev.as_ref();
        let cmdq = Cmdq::new(dev)?;
        let aeq = EqRing::new(dev, aeq_depth, regs::AEQ_DB)?;
        let mut ceq_cqs = KVec::with_capacity(MAX_CEQS as usize, GFP_KERNEL)?;
        for _ in 0..MAX_CEQS {
            ceq_cqs.push(
                KBox::pin_init(kernel::new_spinlock_irq!(RBTree::new()), GFP_KERNEL)?,
                GFP_KERNEL,
            )?;
        }
        Ok(try_pin_init!(Self {
            pdev,
            bar,
            cmdq <- cmdq,
            aeq <- kernel::new_spinlock_irq!(aeq),
            ceq_cqs,
            qps <- kernel::new_spinlock_irq!(RBTree::new()),
            reports: DeviceReports::new(),
            stranded <- kernel::new_mutex!(KVec::new()),
        }? Error))
    }

    pub(crate) fn dev(&self) -> &device::Device {
        self.pdev.as_ref()
    }

    /// The bound device, for DMA allocations.
    pub(crate) fn bound(&self) -> &device::Device<device::Bound> {
        self.pdev.as_ref()
    }

    /// Returns the function to its power-on state. The adapter does not signal completion to
    /// the driver (`DEV_STATUS.reset_done` is informational).
    pub(crate) fn reset(&self) {
        self.bar
            .write_reg(regs::DEV_CTRL::zeroed().with_reset(true));
    }

    /// Describes the AEQ and the command queue to the adapter and lets it latch them.
    pub(crate) fn init(&self) -> Result {
        {
            let aeq = self.aeq.lock();
            let addr = aeq.dma_addr();
            self.bar.write_reg(regs::AEQ_ADDR_H::from_raw(upper(addr)));
            self.bar.write_reg(regs::AEQ_ADDR_L::from_raw(lower(addr)));
            self.bar
                .write_reg(regs::AEQ_DEPTH::from_raw(aeq.depth().into()));
            // Cannot fail: the offset lies in the register page.
            let _ = self.bar.try_write64(aeq.dbrec_addr(), regs::AEQ_DBREC_ADDR);
        }
        self.cmdq.program(&self.bar);
        self.bar.write_reg(regs::DEV_CTRL::zeroed().with_init(true));
        for _ in 0..INIT_POLL_TRIES {
            if self.bar.read(regs::DEV_STATUS).init_done() {
                return Ok(());
            }
            fsleep(INIT_POLL_INTERVAL);
        }
        dev_err!(
            self.dev(),
            "the adapter did not complete initialisation within {} ms\n",
            INIT_POLL_INTERVAL.as_millis() * i64::from(INIT_POLL_TRIES)
        );
        Err(ETIMEDOUT)
    }

    /// Keeps `memory`, which belonged to an object whose DESTROY (or DEREG_MR) failed, after
    /// logging `what` (the failed command itself was reported and counted by the command
    /// queue): the adapter may still read and write it, so it is freed only with
    /// the last reference to `Hw`, after the function reset at unbind. The object's number
    /// stays taken for the same reason. Should even that bookkeeping fail, the memory leaks.
    pub(crate) fn strand<M: Send + 'bound>(&self, what: fmt::Arguments<'_>, memory: M) {
        self.reports.note(self.dev(), what);
        let mut stranded = self.stranded.lock();
        if stranded.reserve(1, GFP_KERNEL).is_err() {
            core::mem::forget(memory);
            return;
        }
        let boxed = match KBox::<M>::new_uninit(GFP_KERNEL) {
            Ok(b) => KBox::write(b, memory),
            Err(_) => {
                core::mem::forget(memory);
                return;
            }
        };
        let boxed: KBox<dyn Send + 'bound> = boxed;
        if let Err(e) = stranded.push_within_capacity(boxed) {
            core::mem::forget(e.0);
        }
    }

    /// The completion queues whose events CEQ `eqn` delivers.
    pub(crate) fn ceq_cqs(&self, eqn: u32) -> Result<&SpinLockIrq<CqTable>> {
        let index = usize::try_from(eqn.checked_sub(1).ok_or(EINVAL)?)?;
        Ok(self.ceq_cqs.get(index).ok_or(EINVAL)?.as_ref().get_ref())
    }

    /// Runs `cmd` on the command queue.
    pub(crate) fn exec<C: Command>(&self, cmd: &C, wait: Wait) -> Result<Response> {
        self.cmdq
            .exec(self.dev(), &self.reports, &self.bar, cmd, wait)
    }

    /// Vector 0: command completions, then asynchronous events.
    pub(crate) fn handle_common_irq(&self) {
        self.cmdq
            .handle_interrupt(self.dev(), &self.reports, &self.bar);
        self.handle_aeq();
    }

    /// Drains up to [`EQ_BUDGET`] asynchronous events and re-arms the AEQ.
    fn handle_aeq(&self) {
        let mut aeq = self.aeq.lock();
        for _ in 0..EQ_BUDGET {
            let Some(eqe) = aeq.pop() else {
                break;
            };
            let Some(aeqe) = eqe.aeqe() else {
                continue;
            };
            let object = aeqe.object;
            let subtype = aeqe.hdr.subtype().get();
            let (kind, what, found) = match aeqe.hdr.event() {
                // Every QP event is fatal to the QP (erdma-hw 4.2).
                Ok(
                    event @ (AsyncEvent::QpFatal
                    | AsyncEvent::QpRqError
                    | AsyncEvent::QpAccessError
                    | AsyncEvent::QpOther),
                ) => (
                    Bounded::<u32, 8>::from(event).get(),
                    "error on QP",
                    self.qps
                        .lock()
                        .get(&object)
                        .map(|q| {
                            q.events.event(QpEvent::Fatal);
                            // An iWARP queue pair's connection ends with it.
                            if let Some(iw) = &q.iw {
                                iw.fatal();
                            }
                        })
                        .is_some(),
                ),
                // Rare: every CEQ's table is searched.
                Ok(event @ AsyncEvent::CqError) => (
                    Bounded::<u32, 8>::from(event).get(),
                    "error on CQ",
                    self.ceq_cqs
                        .iter()
                        .any(|cqs| cqs.lock().get(&object).map(|c| c.events.error()).is_some()),
                ),
                Err(kind) => (kind, "unknown event for object", false),
            };
            if !found {
                self.reports.report(
                    self.dev(),
                    fmt!("async event {kind}.{subtype}: {what} {object}, which does not exist\n"),
                );
            }
        }
        aeq.arm(&self.bar);
    }

    /// A completion event queue's interrupt: delivers up to [`EQ_BUDGET`] completion events to
    /// their CQs and re-arms the queue.
    pub(crate) fn handle_ceq(&self, ring: &SpinLockIrq<EqRing>, eqn: u16) {
        let Ok(cqs) = self.ceq_cqs(eqn.into()) else {
            return;
        };
        let mut ring = ring.lock();
        for _ in 0..EQ_BUDGET {
            let Some(eqe) = ring.pop() else {
                break;
            };
            let Some(ceqe) = eqe.ceqe() else {
                continue;
            };
            // CAST: a 20-bit field.
            let cqn = ceqe.cqn().get() as u32;
            let found = cqs.lock().get(&cqn).map(|c| {
                if let Some(k) = &c.kernel {
                    k.event();
                }
                c.events.completion();
            });
            if found.is_none() {
                // A CQ destroyed after the adapter queued its event.
                dev_dbg!(
                    self.dev(),
                    "CEQ {}: event for CQ {}, which does not exist\n",
                    eqn,
                    cqn
                );
            }
        }
        ring.arm(&self.bar);
    }
}
