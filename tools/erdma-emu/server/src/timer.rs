// SPDX-License-Identifier: GPL-2.0

//! Delayed work of a device (completions held back by `delay` fault rules) and its fabric inbox:
//! one timer thread per device that sleeps until the model's next deadline or a kick (the fabric
//! kicks it when packets arrive) and then runs the due work and the packets.
//!
//! Locking: the timer thread takes the device lock only to run due work and read the next
//! deadline, and never holds it while waiting on the [`Timer`]'s own mutex; whoever creates
//! delayed work (the vfio-user thread after a BAR0 write, the control socket) kicks the timer
//! after releasing the device lock. So the two locks are never held together.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use erdma_model::Io;

use crate::state::{lock, SharedState};

/// Longest the timer sleeps without a deadline or a kick.
const IDLE_WAIT: Duration = Duration::from_secs(3600);

/// Wakes a device's timer thread.
#[derive(Debug, Default)]
pub struct Timer {
    kicked: Mutex<bool>,
    cv: Condvar,
}

impl Timer {
    /// A timer nobody waits on yet.
    pub fn new() -> Arc<Self> {
        Arc::new(Timer::default())
    }

    /// Makes the timer thread look at the device's deadline again.
    pub fn kick(&self) {
        *self.kicked.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.cv.notify_one();
    }

    /// Waits until kicked or `timeout` has passed.
    pub fn wait(&self, timeout: Duration) {
        let mut kicked = self.kicked.lock().unwrap_or_else(PoisonError::into_inner);
        if !*kicked {
            kicked = self
                .cv
                .wait_timeout(kicked, timeout)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        *kicked = false;
    }
}

/// The fabric wakes a device by kicking its timer thread, which then drains the inbox.
impl erdma_model::fabric::Waker for Timer {
    fn wake(&self) {
        self.kick();
    }
}

/// Runs due delayed work of `state`, and the packets the fabric delivers to it, forever.
pub fn run(state: &SharedState, timer: &Timer) {
    loop {
        let wait = {
            let st = &mut *lock(state);
            let mut io = Io::new(&mut st.mem, &mut st.irqs);
            // Packets from the fabric, then delayed completions, each a bounded batch; the
            // lock is let go between batches.
            st.device.run_fabric(&mut io);
            st.device.run_due(&mut io);
            if st.device.fabric_pending() > 0 {
                Some(Duration::ZERO)
            } else {
                st.device.time_until_deadline()
            }
        };
        match wait {
            Some(d) if d.is_zero() => continue,
            Some(d) => timer.wait(d),
            None => timer.wait(IDLE_WAIT),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn kick_wakes_and_timeout_expires() {
        let t = Timer::new();
        let start = Instant::now();
        t.wait(Duration::from_millis(20));
        assert!(start.elapsed() >= Duration::from_millis(20));
        t.kick();
        let start = Instant::now();
        t.wait(Duration::from_secs(60));
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "a kick before waiting counts"
        );
        let t2 = t.clone();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            t2.kick();
        });
        let start = Instant::now();
        t.wait(Duration::from_secs(60));
        assert!(start.elapsed() < Duration::from_secs(30));
        h.join().unwrap();
    }
}
