// SPDX-License-Identifier: GPL-2.0

//! Rate limits for log lines a guest can trigger.
//!
//! One process serves every adapter of every guest on the machine, and everything a guest does
//! (a refused command, a bad doorbell, a dropped event, a malformed packet) can be repeated as
//! fast as it likes. Each such line goes through a [`RateLimit`]: at most `burst` lines per
//! `interval` on the model's [`crate::Clock`] (so tests drive it), the rest suppressed and
//! counted; the first line allowed after a suppression reports how many were suppressed.

use std::time::Duration;

/// What [`RateLimit::check`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Log the line; `suppressed` lines were dropped since the last one logged (report them
    /// first when non-zero).
    Log {
        /// Lines suppressed since the last one logged.
        suppressed: u64,
    },
    /// Do not log it (counted).
    Quiet,
}

/// At most `burst` lines per `interval`.
#[derive(Clone, Debug)]
pub struct RateLimit {
    burst: u32,
    interval: Duration,
    /// Start of the current interval (`None`: nothing logged yet).
    window: Option<Duration>,
    /// Lines logged in the current interval.
    used: u32,
    /// Lines suppressed since the last one logged.
    suppressed: u64,
}

impl RateLimit {
    /// A limit of `burst` lines per `interval`.
    pub const fn new(burst: u32, interval: Duration) -> Self {
        RateLimit {
            burst,
            interval,
            window: None,
            used: 0,
            suppressed: 0,
        }
    }

    /// Whether a line may be logged at `now` (counts it either way).
    pub fn check(&mut self, now: Duration) -> Verdict {
        let expired = self
            .window
            .is_none_or(|start| now.saturating_sub(start) >= self.interval);
        if expired {
            self.window = Some(now);
            self.used = 0;
        }
        if self.used < self.burst {
            self.used += 1;
            Verdict::Log {
                suppressed: std::mem::take(&mut self.suppressed),
            }
        } else {
            self.suppressed = self.suppressed.saturating_add(1);
            Verdict::Quiet
        }
    }

    /// Lines suppressed since the last one logged.
    pub fn suppressed(&self) -> u64 {
        self.suppressed
    }

    /// The most lines per interval.
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// The interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_then_quiet_then_reports_what_it_suppressed() {
        let s = Duration::from_secs;
        let mut r = RateLimit::new(3, s(10));
        let at = |r: &mut RateLimit, t| r.check(s(t));
        for _ in 0..3 {
            assert_eq!(at(&mut r, 1), Verdict::Log { suppressed: 0 });
        }
        for _ in 0..1000 {
            assert_eq!(at(&mut r, 5), Verdict::Quiet);
        }
        assert_eq!(r.suppressed(), 1000);
        // Still inside the interval that started at 1 s.
        assert_eq!(at(&mut r, 10), Verdict::Quiet);
        // A new interval: the first line carries the count.
        assert_eq!(at(&mut r, 11), Verdict::Log { suppressed: 1001 });
        assert_eq!(at(&mut r, 11), Verdict::Log { suppressed: 0 });
        assert_eq!(at(&mut r, 12), Verdict::Log { suppressed: 0 });
        assert_eq!(at(&mut r, 12), Verdict::Quiet);
        assert_eq!((r.burst(), r.interval()), (3, s(10)));
    }
}
