// SPDX-License-Identifier: GPL-2.0

//! The adapter as the driver drives it: its registers, its command queue and its event queues,
//! whose events go to the objects they name through [`crate::dispatch`].

use core::sync::atomic::{
    AtomicBool,
    Ordering, //
};

use kernel::{
    device, fmt,
    io::Io,
    num::Bounded,
    pci,
    prelude::*,
    sync::{
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
        CmdCtx,
        Cmdq,
        Wait, //
    },
    commands::Command,
    dispatch::{
        AsyncSink,
        CompletionSink, //
    },
    eq::EqRing,
    formats::AsyncEvent,
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
    /// What the adapter did wrong.
    pub(crate) reports: DeviceReports,
    /// The memory of objects whose teardown command failed ([`Hw::strand`]).
    #[pin]
    stranded: Mutex<KVec<KBox<dyn Send + 'bound>>>,
    /// Set once the adapter is found failed ([`Hw::fail`]); never cleared (a recovery starts
    /// over with a new `Hw`).
    failed: AtomicBool,
}

/// How an adapter failed, as [`Hw::check`] finds it (erdma_rs_hw 2.5).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Failure {
    /// Its registers read all-ones: the function is gone (surprise removal, or the device
    /// model died), and nothing it had will complete.
    Gone,
    /// `DEV_STATUS.init_done` dropped while running: the adapter reports that it lost its
    /// initialisation (a fatal error of its own); a reset brings it back.
    Halted,
    /// A command got no answer within the command queue's timeout while the registers still
    /// answer: the adapter's firmware stopped.
    Hung,
}

impl Failure {
    /// What the log says.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Failure::Gone => "the adapter does not answer (its registers read all-ones)",
            Failure::Halted => "the adapter reports a fatal error (DEV_STATUS lost init_done)",
            Failure::Hung => "the adapter stopped completing commands",
        }
    }
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
        Ok(try_pin_init!(Self {
            pdev,
            bar,
            cmdq <- cmdq,
            aeq <- kernel::new_spinlock_irq!(aeq),
            reports: DeviceReports::new(),
            stranded <- kernel::new_mutex!(KVec::new()),
            failed: AtomicBool::new(false),
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

    /// Looks at the adapter's health: `None` while it works, otherwise how it failed.
    pub(crate) fn check(&self) -> Option<Failure> {
        let status = self.bar.read(regs::DEV_STATUS);
        if status.into_raw() == u32::MAX {
            Some(Failure::Gone)
        } else if !status.init_done() {
            Some(Failure::Halted)
        } else if self.cmdq.is_disabled() {
            Some(Failure::Hung)
        } else {
            None
        }
    }

    /// Marks the adapter failed: commands fail at once from now on, and kernel queue pairs'
    /// work completes as flushed, by the driver ([`Hw::failed`]). Returns whether this call
    /// marked it (the first).
    pub(crate) fn fail(&self) -> bool {
        let first = !self.failed.swap(true, Ordering::SeqCst);
        self.reports.silence();
        self.cmdq.fail();
        first
    }

    /// Whether the adapter was found failed: nothing posted to it will complete by it.
    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
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

    /// What the command queue needs of the adapter.
    fn cmd_ctx(&self) -> CmdCtx<'_> {
        CmdCtx {
            dev: self.dev(),
            reports: &self.reports,
            bar: &self.bar,
        }
    }

    /// Runs `cmd` on the command queue and returns its reply, sleeping until it completes.
    /// Process context only (checked by `might_sleep`): post, poll and completion paths hand
    /// their commands to work instead.
    pub(crate) fn exec<C: Command>(&self, cmd: &C) -> Result<C::Reply> {
        self.exec_with(cmd, Wait::Sleep)
    }

    /// [`Hw::exec`], or with [`Wait::Poll`] busy-polling for the completion in any context:
    /// only where the RDMA core gives no choice (address handles created or destroyed where
    /// sleeping is not allowed).
    pub(crate) fn exec_with<C: Command>(&self, cmd: &C, wait: Wait) -> Result<C::Reply> {
        self.cmdq.submit(self.cmd_ctx(), cmd, wait)?.wait(wait)
    }

    /// Vector 0: command completions, then asynchronous events, delivered to `objects`.
    pub(crate) fn handle_common_irq(&self, objects: &dyn AsyncSink) {
        self.cmdq
            .handle_interrupt(self.dev(), &self.reports, &self.bar);
        self.handle_aeq(objects);
    }

    /// Drains up to [`EQ_BUDGET`] asynchronous events and re-arms the AEQ.
    fn handle_aeq(&self, objects: &dyn AsyncSink) {
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
                // Every QP event is fatal to the QP (erdma_rs_hw 4.2).
                Ok(
                    event @ (AsyncEvent::QpFatal
                    | AsyncEvent::QpRqError
                    | AsyncEvent::QpAccessError
                    | AsyncEvent::QpOther),
                ) => (
                    Bounded::<u32, 8>::from(event).get(),
                    "error on QP",
                    objects.qp_fatal(object),
                ),
                Ok(event @ AsyncEvent::CqError) => (
                    Bounded::<u32, 8>::from(event).get(),
                    "error on CQ",
                    objects.cq_error(object),
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
    /// `objects` and re-arms the queue.
    pub(crate) fn handle_ceq(
        &self,
        ring: &SpinLockIrq<EqRing>,
        eqn: u16,
        objects: &dyn CompletionSink,
    ) {
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
            if !objects.cq_event(eqn.into(), cqn) {
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
