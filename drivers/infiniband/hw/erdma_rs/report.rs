// SPDX-License-Identifier: GPL-2.0

//! Reports of what the adapter did wrong: completions for commands not in flight or not matching
//! their command, events for objects that do not exist, commands that failed, a statistics
//! buffer it did not fill in. A misbehaving (or hostile) adapter can make them at any rate, so
//! they are rate-limited in the log and counted; the count is the device's hardware counter
//! `adapter_errors_cnt`. Consequences of a report already counted (a teardown command that
//! failed, so memory is kept) are logged under the same limit with [`DeviceReports::note`].
//! Once the adapter failed as a whole ([`crate::health`]), which is logged once, what follows
//! from it (every teardown command failing) is counted but not logged.

use core::sync::atomic::{
    AtomicBool,
    AtomicU64,
    Ordering, //
};
use kernel::{
    device,
    fmt,
    prelude::*,
    ratelimit::Ratelimit, //
};

/// The adapter's misbehaviour, as logged and counted.
pub(crate) struct DeviceReports {
    limit: Ratelimit,
    count: AtomicU64,
    /// The adapter failed: nothing more is logged.
    quiet: AtomicBool,
}

impl DeviceReports {
    /// No reports yet; the log takes the kernel's default rate.
    pub(crate) fn new() -> Self {
        Self {
            limit: Ratelimit::new(Ratelimit::DEFAULT_INTERVAL, Ratelimit::DEFAULT_BURST),
            count: AtomicU64::new(0),
            quiet: AtomicBool::new(false),
        }
    }

    /// The adapter failed, which was logged: what follows is counted only.
    pub(crate) fn silence(&self) {
        self.quiet.store(true, Ordering::Relaxed);
    }

    /// Counts a report and logs `what` unless the adapter reported too much lately.
    pub(crate) fn report(&self, dev: &device::Device, what: fmt::Arguments<'_>) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.note(dev, what);
    }

    /// Logs `what`, a consequence of a report already counted, under the same rate limit.
    pub(crate) fn note(&self, dev: &device::Device, what: fmt::Arguments<'_>) {
        if self.quiet.load(Ordering::Relaxed) {
            return;
        }
        if let Some(missed) = self.limit.check() {
            if missed > 0 {
                dev_warn!(dev, "{missed} reports of adapter errors suppressed\n");
            }
            dev_warn!(dev, "{what}");
        }
    }

    /// The reports made so far.
    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}
