// SPDX-License-Identifier: GPL-2.0

//! Time, as the model sees it: an injectable monotonic clock.
//!
//! The model never sleeps or starts threads. Work that is due later (delayed command completions
//! injected with `delay`) is kept with a deadline on this clock; the transport asks
//! [`crate::Device::next_deadline`] when to come back and calls [`crate::Device::run_due`]. Tests
//! use a [`ManualClock`] and move time by hand.

use core::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A monotonic clock.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Time elapsed since an arbitrary fixed origin; never decreases.
    fn now(&self) -> Duration;
}

/// The host's monotonic clock ([`Instant`]), with its origin at construction.
#[derive(Debug)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    /// A clock starting at 0 now.
    pub fn new() -> Self {
        MonotonicClock {
            origin: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// A clock that only moves when told to (for tests).
#[derive(Debug, Default)]
pub struct ManualClock {
    nanos: AtomicU64,
}

impl ManualClock {
    /// A clock at 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        let n = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // A closure that always returns Some cannot fail.
        let _ = self
            .nanos
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
                Some(v.saturating_add(n))
            });
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_move_forward() {
        let m = ManualClock::new();
        assert_eq!(m.now(), Duration::ZERO);
        m.advance(Duration::from_millis(5));
        m.advance(Duration::from_micros(1));
        assert_eq!(m.now(), Duration::from_micros(5001));
        m.advance(Duration::MAX);
        assert_eq!(m.now(), Duration::from_nanos(u64::MAX));
        let c = MonotonicClock::new();
        let a = c.now();
        assert!(c.now() >= a);
    }
}
