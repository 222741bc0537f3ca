// SPDX-License-Identifier: GPL-2.0

//! Verbs objects the core allocates with the driver's part embedded: protection domains,
//! completion queues, queue pairs and address handles.
//!
//! The core allocates `size_ib_X` bytes, initialises the C header at offset 0 and calls the
//! driver's create operation; after a successful destroy, or a failed create, it frees the
//! allocation without running Rust destructors. [`Object`] is that allocation: the abstractions
//! initialise the driver's part in place in the create trampoline and drop it in the destroy
//! trampoline (or when creation fails).
//!
//! # Examples
//!
//! ```
//! use kernel::rdma::{
//!     self,
//!     object::{
//!         kind,
//!         Object, //
//!     },
//!     Qp, //
//! };
//!
//! // The driver's part of a queue pair.
//! struct MyQp {
//!     sq_depth: u32,
//! }
//!
//! // `Qp<T>` is the object of kind `Qp` with `T`'s queue pair part.
//! fn describe<T: rdma::Driver<Qp = MyQp>>(qp: &Qp<T>) -> (u32, u32) {
//!     let object: &Object<kind::Qp, MyQp> = qp;
//!     (object.qp_num(), object.data().sq_depth)
//! }
//! ```

use crate::{
    bindings, new_spinlock_irq,
    prelude::*,
    sync::{
        Arc,
        SpinLockIrq, //
    },
    types::Opaque,
};
use core::ptr::NonNull;

/// The kinds of core-allocated objects, each naming the core's structure it wraps.
///
/// # Examples
///
/// ```
/// use kernel::rdma::object::{
///     kind,
///     Object, //
/// };
///
/// // A function for the driver part of any kind of object.
/// fn data_of<K: kind::Kind, D>(object: &Object<K, D>) -> &D {
///     object.data()
/// }
///
/// // One for queue pairs only.
/// fn qp_num_of<D>(qp: &Object<kind::Qp, D>) -> u32 {
///     qp.qp_num()
/// }
/// ```
pub mod kind {
    use crate::bindings;

    mod private {
        /// Keeps [`Kind`](super::Kind) implemented by the kinds of this module only.
        pub trait Sealed {}
    }

    /// A kind of core-allocated object.
    ///
    /// # Examples
    ///
    /// ```
    /// use core::fmt::Debug;
    /// use kernel::rdma::object::{
    ///     kind::Kind,
    ///     Object, //
    /// };
    ///
    /// // Logs the driver's part of an object of any kind.
    /// fn log_object<K: Kind, D: Debug>(object: &Object<K, D>) {
    ///     pr_debug!("object {:?}\n", object.data());
    /// }
    /// ```
    pub trait Kind: private::Sealed + 'static {
        /// The core's structure.
        #[doc(hidden)]
        type Raw;
    }

    /// Protection domains (`struct ib_pd`).
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{
    ///     self,
    ///     object::{
    ///         kind,
    ///         Object, //
    ///     },
    /// };
    ///
    /// // A protection domain of a device of `T`, as `rdma::Pd<T>` names it.
    /// fn data_of<T: rdma::Driver>(object: &Object<kind::Pd, T::Pd>) -> &T::Pd {
    ///     let object: &rdma::Pd<T> = object;
    ///     object.data()
    /// }
    /// ```
    pub struct Pd;
    /// Completion queues (`struct ib_cq`).
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{
    ///     self,
    ///     object::{
    ///         kind,
    ///         Object, //
    ///     },
    /// };
    ///
    /// // A completion queue of a device of `T`, as `rdma::Cq<T>` names it.
    /// fn data_of<T: rdma::Driver>(object: &Object<kind::Cq, T::Cq>) -> &T::Cq {
    ///     let object: &rdma::Cq<T> = object;
    ///     object.data()
    /// }
    /// ```
    pub struct Cq;
    /// Queue pairs (`struct ib_qp`).
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{
    ///     self,
    ///     object::{
    ///         kind,
    ///         Object, //
    ///     },
    /// };
    ///
    /// // A queue pair of a device of `T`, as `rdma::Qp<T>` names it.
    /// fn data_of<T: rdma::Driver>(object: &Object<kind::Qp, T::Qp>) -> &T::Qp {
    ///     let object: &rdma::Qp<T> = object;
    ///     object.data()
    /// }
    /// ```
    pub struct Qp;
    /// Address handles (`struct ib_ah`).
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{
    ///     self,
    ///     object::{
    ///         kind,
    ///         Object, //
    ///     },
    /// };
    ///
    /// // A address handle of a device of `T`, as `rdma::Ah<T>` names it.
    /// fn data_of<T: rdma::Driver>(object: &Object<kind::Ah, T::Ah>) -> &T::Ah {
    ///     let object: &rdma::Ah<T> = object;
    ///     object.data()
    /// }
    /// ```
    pub struct Ah;

    impl private::Sealed for Pd {}
    impl Kind for Pd {
        type Raw = bindings::ib_pd;
    }
    impl private::Sealed for Cq {}
    impl Kind for Cq {
        type Raw = bindings::ib_cq;
    }
    impl private::Sealed for Qp {}
    impl Kind for Qp {
        type Raw = bindings::ib_qp;
    }
    impl private::Sealed for Ah {}
    impl Kind for Ah {
        type Raw = bindings::ib_ah;
    }
}

use kind::Kind;

/// A core-allocated verbs object of kind `K`: the core's structure, then the driver's part `D`.
///
/// # Examples
///
/// ```
/// use kernel::rdma::{
///     self,
///     Ah,
///     Cq,
///     Pd, //
/// };
///
/// // A driver whose objects know their numbers in the device.
/// struct Numbered {
///     number: u32,
/// }
///
/// fn numbers<T>(pd: &Pd<T>, cq: &Cq<T>, ah: &Ah<T>) -> [u32; 3]
/// where
///     T: rdma::Driver<Pd = Numbered, Cq = Numbered, Ah = Numbered>,
/// {
///     [pd.data().number, cq.data().number, ah.data().number]
/// }
/// ```
///
/// # Invariants
///
/// - `ib` is at offset 0 of an allocation the core made with the size of this type.
/// - `events` and `data` are initialised between a successful create and the destroy.
#[repr(C)]
#[pin_data]
pub struct Object<K: Kind, D> {
    #[pin]
    ib: Opaque<K::Raw>,
    events: Option<Arc<SpinLockIrq<Target<K>>>>,
    #[pin]
    data: D,
}

impl<K: Kind, D> Object<K, D> {
    /// The object whose core header is at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` must be the header of a live `Object<K, D>` (created, not yet destroyed) for `'a`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut K::Raw) -> &'a Self {
        // SAFETY: `ib` is at offset 0 (type invariant) and the caller guarantees liveness.
        unsafe { &*ptr.cast::<Self>() }
    }

    /// The core's structure.
    pub(crate) fn as_raw(&self) -> *mut K::Raw {
        self.ib.get()
    }

    /// The driver's part.
    pub fn data(&self) -> &D {
        &self.data
    }

    /// Initialises the driver's part of the object the core is creating through `init_data`,
    /// with an event handle if `with_events`. On failure nothing is left initialised.
    ///
    /// `init_data` receives the event handle and a pointer to the driver's part, valid for
    /// writes and pinned; it must initialise it when it returns `Ok`, and leave it
    /// uninitialised otherwise.
    ///
    /// # Safety
    ///
    /// `ptr` must be the header of a zeroed allocation of `size_of::<Self>()` bytes that the core
    /// is creating.
    pub(crate) unsafe fn init(
        ptr: *mut K::Raw,
        with_events: bool,
        init_data: impl FnOnce(Option<&Events<K>>, *mut D) -> Result,
    ) -> Result {
        let this = ptr.cast::<Self>();
        let events = if with_events {
            let target = Target(NonNull::new(ptr));
            Some(Arc::pin_init(new_spinlock_irq!(target), GFP_KERNEL)?)
        } else {
            None
        };
        let handle = events.clone().map(Events);
        // SAFETY: `data` is valid for writes and pinned in the core's allocation.
        let ret = init_data(handle.as_ref(), unsafe { &raw mut (*this).data });
        drop(handle);
        match ret {
            Ok(()) => {
                // INVARIANT: `init_data` initialised `data`; `events` is set here.
                // SAFETY: The field is valid for writes; the zeroed `None` needs no drop.
                unsafe { (&raw mut (*this).events).write(events) };
                Ok(())
            }
            Err(e) => {
                if let Some(events) = events {
                    events.lock().0 = None;
                }
                Err(e)
            }
        }
    }

    /// Runs `release` on the driver's part, revokes the object's event handles, and drops the
    /// driver's part.
    ///
    /// # Safety
    ///
    /// `ptr` must be the header of an object `init` completed, and this must be its last use
    /// before the core frees it.
    pub(crate) unsafe fn destroy(ptr: *mut K::Raw, release: impl FnOnce(Pin<&mut D>)) {
        let this = ptr.cast::<Self>();
        // SAFETY: `data` is initialised and pinned; the core makes no other use of the object.
        unsafe {
            release(Pin::new_unchecked(&mut (*this).data));
            Self::revoke_events(ptr);
            core::ptr::drop_in_place(&raw mut (*this).data);
        }
    }

    /// Revokes the object's event handles: from now on the events they report are dropped, and
    /// a report running on another CPU has finished when this returns (revocation takes the
    /// handles' lock).
    ///
    /// # Safety
    ///
    /// `ptr` must be the header of an object `init` completed and not yet destroyed, and no
    /// other thread may revoke or destroy it at the same time.
    pub(crate) unsafe fn revoke_events(ptr: *mut K::Raw) {
        let this = ptr.cast::<Self>();
        // SAFETY: The caller guarantees the object is live and that this is the only user of its
        // `events` field now (handlers hold clones of the `Arc`, not the field).
        if let Some(events) = unsafe { (*this).events.take() } {
            events.lock().0 = None;
        }
    }
}

/// The object an [`Events`] handle reaches, until the object is destroyed.
struct Target<K: Kind>(Option<NonNull<K::Raw>>);

// SAFETY: The pointer is only used under the lock, to call the core's handlers, which may run
// on any CPU.
unsafe impl<K: Kind> Send for Target<K> {}

/// A handle through which a driver reports events of a completion queue or queue pair to its
/// consumer, from any context including hard interrupts. It stays valid after the object is
/// destroyed: events reported then are dropped.
///
/// # Examples
///
/// ```
/// use kernel::rdma::{
///     qp::QpEvent,
///     CqEvents,
///     QpEvents, //
/// };
///
/// // What an interrupt handler reports when the device says a queue pair failed: the queue pair
/// // is in the error state, and its completion queue has completions (flushed ones) to poll.
/// fn qp_failed(qp: &QpEvents, cq: &CqEvents) {
///     qp.event(QpEvent::Fatal);
///     cq.completion();
/// }
/// ```
pub struct Events<K: Kind>(Arc<SpinLockIrq<Target<K>>>);

impl<K: Kind> Clone for Events<K> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

/// Calls the event handler of the consumer of the object at `target`, if still live.
///
/// # Safety
///
/// `handler` and `context` must be the event handler and its context of the object at `target`.
unsafe fn dispatch_event(
    device: *mut bindings::ib_device,
    element: bindings::ib_event__bindgen_ty_1,
    event: bindings::ib_event_type,
    handler: Option<unsafe extern "C" fn(*mut bindings::ib_event, *mut c_void)>,
    context: *mut c_void,
) {
    let mut ev = bindings::ib_event {
        device,
        element,
        event,
    };
    if let Some(handler) = handler {
        // SAFETY: The core's handler takes a valid event and its context; it copies what it
        // keeps.
        unsafe { handler(&mut ev, context) };
    }
}

impl Events<kind::Cq> {
    /// Tells the consumer that the completion queue has a new completion (after it asked with
    /// a request for notification).
    pub fn completion(&self) {
        let target = self.0.lock();
        if let Some(cq) = target.0 {
            let cq = cq.as_ptr();
            // SAFETY: The CQ is live while the handle is not revoked (revocation takes the
            // lock); the core set its handler and context before creating it.
            unsafe {
                if let Some(handler) = (*cq).comp_handler {
                    handler(cq, (*cq).cq_context);
                }
            }
        }
    }

    /// Tells the consumer that the completion queue failed (`IB_EVENT_CQ_ERR`).
    pub fn error(&self) {
        let target = self.0.lock();
        if let Some(cq) = target.0 {
            let cq = cq.as_ptr();
            // SAFETY: As in `completion`.
            unsafe {
                dispatch_event(
                    (*cq).device,
                    bindings::ib_event__bindgen_ty_1 { cq },
                    bindings::ib_event_type_IB_EVENT_CQ_ERR,
                    (*cq).event_handler,
                    (*cq).cq_context,
                );
            }
        }
    }
}

crate::rdma::c_enum! {
    /// An asynchronous event of a queue pair (`enum ib_event_type`).
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{
    ///     qp::QpEvent,
    ///     QpEvents, //
    /// };
    ///
    /// // The device saw the first message of a connected queue pair.
    /// fn first_message(qp: &QpEvents) {
    ///     qp.event(QpEvent::CommEst);
    /// }
    ///
    /// assert_eq!(QpEvent::from_raw(QpEvent::Fatal.to_raw()), Some(QpEvent::Fatal));
    /// ```
    pub enum QpEvent {
        /// The queue pair hit an error that moved it to the error state.
        Fatal = bindings::ib_event_type_IB_EVENT_QP_FATAL,
        /// A request for the queue pair was invalid.
        RequestError = bindings::ib_event_type_IB_EVENT_QP_REQ_ERR,
        /// A remote peer violated the queue pair's access rights.
        AccessError = bindings::ib_event_type_IB_EVENT_QP_ACCESS_ERR,
        /// The send queue drained.
        SqDrained = bindings::ib_event_type_IB_EVENT_SQ_DRAINED,
        /// The queue pair reached its last work queue entry.
        LastWqeReached = bindings::ib_event_type_IB_EVENT_QP_LAST_WQE_REACHED,
        /// A queue pair in RTR received its first message: the connection is up even if the
        /// connection manager has not heard so yet.
        CommEst = bindings::ib_event_type_IB_EVENT_COMM_EST,
    }
}

impl Events<kind::Qp> {
    /// The core's queue pair, `NULL` once destroyed; what a work completion names.
    pub(crate) fn raw_ptr(&self) -> *mut bindings::ib_qp {
        self.0
            .lock()
            .0
            .map_or(core::ptr::null_mut(), |p| p.as_ptr())
    }

    /// Tells the consumer of the queue pair about `event`.
    pub fn event(&self, event: QpEvent) {
        let target = self.0.lock();
        if let Some(qp) = target.0 {
            let qp = qp.as_ptr();
            // SAFETY: The QP is live while the handle is not revoked; the core set its handler
            // and context before creating it.
            unsafe {
                dispatch_event(
                    (*qp).device,
                    bindings::ib_event__bindgen_ty_1 { qp },
                    event.to_raw(),
                    (*qp).event_handler,
                    (*qp).qp_context,
                );
            }
        }
    }
}
