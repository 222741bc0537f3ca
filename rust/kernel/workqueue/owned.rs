// SPDX-License-Identifier: GPL-2.0

//! Work queues a driver allocates and owns, and delayed work a driver cancels.

use super::{HasDelayedWork, Queue, Work, WorkItem};
use crate::{
    bindings,
    prelude::*,
    sync::Arc, //
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

impl OwnedQueue {
    /// Waits until the queue is empty, work that queues more work on it included
    /// (`drain_workqueue`). Queueing work from elsewhere meanwhile is the caller's to stop.
    pub fn drain(&self) {
        // SAFETY: The queue is live; draining may sleep, which callers of this know.
        unsafe { bindings::drain_workqueue(self.wq.as_ptr()) };
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

/// Cancels the delayed work of `item` and waits for a run of it in progress to finish
/// (`cancel_delayed_work_sync()`); returns whether a queued run was cancelled.
///
/// A run cancelled before it started gives back the reference to `item` its queueing took (an
/// `Arc` queued as work owns one), so nothing leaks. Queueing the item while this runs fails,
/// so work that queues itself again stops too; an owner that also keeps it from being queued
/// afterwards (a flag its run checks) knows, once this returns, that none of it runs any more.
///
/// # Examples
///
/// ```
/// use kernel::{
///     impl_has_delayed_work, new_delayed_work,
///     prelude::*,
///     sync::Arc,
///     workqueue::{self, cancel_delayed_sync, DelayedWork, WorkItem},
/// };
///
/// #[pin_data]
/// struct Tick {
///     #[pin]
///     work: DelayedWork<Tick>,
/// }
///
/// impl_has_delayed_work! {
///     impl HasDelayedWork<Self> for Tick { self.work }
/// }
///
/// impl WorkItem for Tick {
///     type Pointer = Arc<Tick>;
///
///     fn run(this: Arc<Tick>) {
///         // Every second, until cancelled.
///         let _ = workqueue::system_long().enqueue_delayed(this, kernel::time::msecs_to_jiffies(1000));
///     }
/// }
///
/// let tick = Arc::pin_init(pin_init!(Tick { work <- new_delayed_work!("Tick::work") }), GFP_KERNEL)?;
/// let _ = workqueue::system_long().enqueue_delayed(tick.clone(), kernel::time::msecs_to_jiffies(1000));
/// assert!(cancel_delayed_sync(&tick));
/// # Ok::<(), Error>(())
/// ```
pub fn cancel_delayed_sync<T, const ID: u64>(item: &Arc<T>) -> bool
where
    T: HasDelayedWork<T, ID> + WorkItem<ID, Pointer = Arc<T>>,
{
    let ptr = Arc::as_ptr(item).cast_mut();
    // SAFETY: `ptr` points to a live `T`, which `item` keeps alive.
    let work = unsafe { Work::raw_get(T::raw_get_work(ptr)) };
    // SAFETY: By the safety requirements of `HasDelayedWork`, the `work_struct` is the `work`
    // field of a `delayed_work`.
    let dwork = unsafe { crate::container_of!(work, bindings::delayed_work, work) };
    // SAFETY: `dwork` is a valid delayed work item, initialised when `T` was; this function
    // may sleep, as its callers know from its name.
    let cancelled = unsafe { bindings::cancel_delayed_work_sync(dwork) };
    if cancelled {
        // SAFETY: The cancelled queueing held a reference taken by `Arc::into_raw()` (the
        // `RawWorkItem` implementation of `Arc`), which its run would have given back; it will
        // never run.
        drop(unsafe { Arc::from_raw(ptr) });
    }
    cancelled
}
