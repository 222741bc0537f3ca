// SPDX-License-Identifier: GPL-2.0

//! Rate limiting of messages, for reports whose source (a device, a peer) could repeat them
//! without bound.
//!
//! C header: [`include/linux/ratelimit_types.h`](srctree/include/linux/ratelimit_types.h)
//!
//! The policy is the one of `printk_ratelimited()`: at most `burst` messages in each window of
//! `interval`; the ones refused are counted, and the next message allowed can say how many were
//! left out.
//!
//! # Examples
//!
//! ```
//! use kernel::ratelimit::Ratelimit;
//!
//! struct Queue {
//!     // Completions with an unknown status, reported at most ten times in five seconds.
//!     bad_status: Ratelimit,
//! }
//!
//! impl Queue {
//!     fn report_bad_status(&self, status: u32) {
//!         if let Some(missed) = self.bad_status.check() {
//!             pr_warn!("unknown completion status {status:#x} ({missed} more not reported)\n");
//!         }
//!     }
//! }
//!
//! let queue = Queue {
//!     bad_status: Ratelimit::new(Ratelimit::DEFAULT_INTERVAL, Ratelimit::DEFAULT_BURST),
//! };
//! assert_eq!(queue.bad_status.missed(), 0);
//! ```

use core::sync::atomic::{
    AtomicI64,
    AtomicU32,
    Ordering, //
};

use crate::time::{
    Delta,
    Instant,
    Monotonic, //
};

/// Allows at most `burst` events per `interval` and counts the events it refuses.
///
/// It takes no lock, so it can be used in any context, interrupt handlers included. Under
/// contention it may allow a few more than `burst` events in a window.
///
/// # Examples
///
/// ```
/// use kernel::{
///     ratelimit::Ratelimit,
///     time::Delta, //
/// };
///
/// let limit = Ratelimit::new(Delta::from_secs(5), 2);
/// let mut printed = 0;
/// for i in 0..10 {
///     if let Some(missed) = limit.check() {
///         if missed > 0 {
///             pr_warn!("{missed} messages suppressed\n");
///         }
///         pr_warn!("event {i}\n");
///         printed += 1;
///     }
/// }
/// assert_eq!(printed, 2);
/// assert_eq!(limit.missed(), 8);
/// ```
pub struct Ratelimit {
    epoch: Instant<Monotonic>,
    interval: Delta,
    burst: u32,
    /// Start of the current window, in nanoseconds after `epoch`.
    window: AtomicI64,
    /// Events allowed in the current window.
    allowed: AtomicU32,
    /// Events refused since the last allowed one.
    missed: AtomicU32,
}

impl Ratelimit {
    /// The kernel's default window (`DEFAULT_RATELIMIT_INTERVAL`).
    pub const DEFAULT_INTERVAL: Delta = Delta::from_secs(5);
    /// The kernel's default burst (`DEFAULT_RATELIMIT_BURST`).
    pub const DEFAULT_BURST: u32 = 10;

    /// A limit of `burst` events per `interval`, whose first window starts now.
    pub fn new(interval: Delta, burst: u32) -> Self {
        Self {
            epoch: Instant::now(),
            interval,
            burst,
            window: AtomicI64::new(0),
            allowed: AtomicU32::new(0),
            missed: AtomicU32::new(0),
        }
    }

    /// Whether one more event may be reported now: `Some(n)` if so, where `n` events were
    /// refused since the last one allowed (so that the caller can say so); `None` if not.
    pub fn check(&self) -> Option<u32> {
        let now = self.epoch.elapsed().as_nanos();
        let start = self.window.load(Ordering::Relaxed);
        if now - start >= self.interval.as_nanos()
            && self
                .window
                .compare_exchange(start, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.allowed.store(0, Ordering::Relaxed);
        }
        if self.allowed.load(Ordering::Relaxed) >= self.burst {
            // Saturates rather than wraps after 2^32 refusals.
            let _ = self
                .missed
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |m| m.checked_add(1));
            return None;
        }
        self.allowed.fetch_add(1, Ordering::Relaxed);
        Some(self.missed.swap(0, Ordering::Relaxed))
    }

    /// Events refused since the last one allowed.
    pub fn missed(&self) -> u32 {
        self.missed.load(Ordering::Relaxed)
    }
}
