    /// Releases the lock and waits, uninterruptibly, for a notification or a timeout.
    ///
    /// Atomically releases the given lock (whose ownership is proven by the guard) and puts the
    /// thread to sleep. It wakes up when notified by [`CondVar::notify_one`] or
    /// [`CondVar::notify_all`], or when the timeout expires; signals do not wake it. Use it where
    /// giving up early would leave shared state inconsistent, e.g. while a device still owns a
    /// buffer. Like every condition variable wait, it may also wake up spuriously.
    pub fn wait_timeout<T: ?Sized, B: Backend>(
        &self,
        guard: &mut Guard<'_, T, B>,
        jiffies: Jiffies,
    ) -> CondVarTimeoutResult {
        let jiffies = jiffies.try_into().unwrap_or(MAX_SCHEDULE_TIMEOUT);
        let res = self.wait_internal(TASK_UNINTERRUPTIBLE, guard, jiffies);

        match res as Jiffies {
            0 => CondVarTimeoutResult::Timeout,
            jiffies => CondVarTimeoutResult::Woken { jiffies },
        }
    }

