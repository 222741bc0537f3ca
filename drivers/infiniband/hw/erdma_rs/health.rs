// SPDX-License-Identifier: GPL-2.0

//! The adapter's health (erdma_rs_hw 2.5): a watchdog that looks at the adapter every
//! `health_check_ms` and notices when it stops answering (its registers read all-ones), reports
//! a fatal error of its own (`DEV_STATUS.init_done` dropped) or stops completing commands.
//!
//! A failed adapter is then handled in this order: commands fail at once instead of timing out;
//! every consumer hears `IB_EVENT_DEVICE_FATAL`; every completion queue gets a completion
//! event, and kernel consumers poll their posted work back as flushed (the driver completes it,
//! as the adapter never will); then the driver core unbinds the driver and probes again
//! ([`pci::Device::reprobe_later`]). The unbind unregisters the RDMA device, which disassociates
//! every user context, and tears the adapter down without waiting for it; the probe resets the
//! function and, if it answers, registers it again, so new users find a working device. An
//! adapter that is gone fails that probe and stays unbound.

use core::sync::atomic::{
    AtomicBool,
    Ordering, //
};

use kernel::{
    impl_has_delayed_work, new_delayed_work,
    prelude::*,
    rdma,
    sync::{
        aref::ARef,
        Arc, //
    },
    time::{
        msecs_to_jiffies,
        Jiffies, //
    },
    workqueue::{
        self,
        cancel_delayed_sync,
        DelayedWork,
        WorkItem, //
    },
};

use crate::{
    hw::Failure,
    ibdev::IbData,
    verbs::Erdma, //
};

/// The shortest and longest period a module parameter may set.
const MIN_PERIOD_MS: u32 = 100;
const MAX_PERIOD_MS: u32 = 60_000;

/// The period of a `health_check_ms` value: `None` for 0 (no watchdog), otherwise brought into
/// range.
pub(crate) fn period_ms(param: u32) -> Option<u32> {
    (param != 0).then(|| param.clamp(MIN_PERIOD_MS, MAX_PERIOD_MS))
}

/// Looks at one registered adapter every period, from the system's long work queue (the plain
/// one is deprecated in 7.3 and says so once), until stopped or
/// until it finds the adapter failed.
#[pin_data]
pub(crate) struct Watchdog {
    dev: ARef<rdma::Device<Erdma>>,
    period: Jiffies,
    /// Set before the work is cancelled: a run that sees it does nothing.
    stopped: AtomicBool,
    #[pin]
    work: DelayedWork<Watchdog>,
}

impl_has_delayed_work! {
    impl HasDelayedWork<Self> for Watchdog { self.work }
}

impl WorkItem for Watchdog {
    type Pointer = Arc<Watchdog>;

    fn run(this: Arc<Watchdog>) {
        if this.stopped.load(Ordering::Acquire) {
            return;
        }
        let healthy = this.dev.with_registered(|dev, data| match data.hw.check() {
            None => true,
            Some(failure) => {
                failed(dev, data, failure);
                false
            }
        });
        // Unregistering, or failed (the reprobe is queued): no more looks.
        if healthy == Some(true) {
            let period = this.period;
            let _ = workqueue::system_long().enqueue_delayed(this, period);
        }
    }
}

impl Watchdog {
    /// Starts looking at the adapter registered as `dev` every `period_ms`.
    pub(crate) fn start(dev: &rdma::Device<Erdma>, period_ms: u32) -> Result<Arc<Self>> {
        let period = msecs_to_jiffies(period_ms);
        let this = Arc::pin_init(
            try_pin_init!(Self {
                dev: ARef::from(dev),
                period,
                stopped: AtomicBool::new(false),
                work <- new_delayed_work!("erdma_rs::health::Watchdog::work"),
            }),
            GFP_KERNEL,
        )?;
        let _ = workqueue::system_long().enqueue_delayed(this.clone(), period);
        Ok(this)
    }

    /// Stops looking; a look in progress is waited for. Not from the watchdog's own run.
    pub(crate) fn stop(this: &Arc<Self>) {
        this.stopped.store(true, Ordering::Release);
        cancel_delayed_sync(this);
    }
}

/// The adapter of `dev` failed as `failure` says: see the module's description. Process
/// context; the first caller acts, later ones return.
pub(crate) fn failed(dev: &rdma::Device<Erdma>, data: &IbData<'_>, failure: Failure) {
    if !data.hw.fail() {
        return;
    }
    dev_err!(
        data.dev(),
        "{}: {} is failed; consumers are told, posted work completes as flushed, and the \
         driver starts over with the function\n",
        failure.describe(),
        dev.name()
    );
    dev.report_fatal();
    data.objects.wake_all();
    if let Err(e) = data.hw.pdev.reprobe_later() {
        dev_err!(
            data.dev(),
            "cannot start over ({:?}): unbind and bind the driver by hand\n",
            e
        );
    }
}

#[kunit_tests(erdma_rs_health)]
mod tests {
    use super::*;

    #[test]
    fn periods_stay_in_range() {
        assert_eq!(period_ms(0), None);
        assert_eq!(period_ms(1), Some(MIN_PERIOD_MS));
        assert_eq!(period_ms(1000), Some(1000));
        assert_eq!(period_ms(u32::MAX), Some(MAX_PERIOD_MS));
    }
}
