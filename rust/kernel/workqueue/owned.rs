// SPDX-License-Identifier: GPL-2.0

//! Work queues a driver allocates and owns.

use super::Queue;
use crate::{
    bindings,
    prelude::*, //
};
use core::{
    ops::Deref,
    ptr::NonNull, //
};

/// A work queue of its owner's (`alloc_workqueue`), destroyed when it drops.
///
/// Dropping it runs every work item queued on it first (`destroy_workqueue` drains it): an owner
/// that stops queueing work, then drops its queue, knows that none of its work runs afterwards,
/// which is what a module needs before its code goes away.
///
/// # Examples
///
/// ```
/// use kernel::workqueue::OwnedQueue;
///
/// let wq = OwnedQueue::new_ordered(c"example_wq")?;
/// wq.try_spawn(GFP_KERNEL, || pr_info!("ran on an ordered queue\n"))?;
/// drop(wq); // The closure has run when this returns.
/// # Ok::<(), Error>(())
/// ```
///
/// # Invariants
///
/// `wq` is a work queue `alloc_workqueue` made, owned by this object.
pub struct OwnedQueue {
    wq: NonNull<bindings::workqueue_struct>,
}

// SAFETY: Work queues may be used and destroyed from any thread.
unsafe impl Send for OwnedQueue {}

// SAFETY: Queueing work is thread-safe.
unsafe impl Sync for OwnedQueue {}

impl OwnedQueue {
    /// Allocates an ordered work queue named `name`: its work items run one at a time, in the
    /// order they were queued. It may be used to free memory (`WQ_MEM_RECLAIM`).
    pub fn new_ordered(name: &CStr) -> Result<Self> {
        let flags = bindings::wq_flags_WQ_UNBOUND
            | bindings::wq_flags___WQ_ORDERED
            | bindings::wq_flags_WQ_MEM_RECLAIM;
        // SAFETY: The format takes one string, `name`, which is NUL-terminated.
        let wq = unsafe {
            bindings::alloc_workqueue_noprof(c"%s".as_char_ptr(), flags, 1, name.as_char_ptr())
        };
        // INVARIANT: A queue just allocated, owned here.
        Ok(Self {
            wq: NonNull::new(wq).ok_or(ENOMEM)?,
        })
    }
}

impl Deref for OwnedQueue {
    type Target = Queue;

    fn deref(&self) -> &Queue {
        // SAFETY: The queue lives until `self` drops, which the borrow outlives not.
        unsafe { Queue::from_raw(self.wq.as_ptr()) }
    }
}

impl Drop for OwnedQueue {
    fn drop(&mut self) {
        // SAFETY: The queue is owned; this is its last use. Work queued on it runs first.
        unsafe { bindings::destroy_workqueue(self.wq.as_ptr()) };
    }
}
