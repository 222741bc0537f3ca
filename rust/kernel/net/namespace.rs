// SPDX-License-Identifier: GPL-2.0

//! Network namespaces, and state a module keeps in each of them.
//!
//! C headers: [`include/net/net_namespace.h`](srctree/include/net/net_namespace.h),
//! [`include/net/netns/generic.h`](srctree/include/net/netns/generic.h).
//!
//! A [`PernetRegistration`] registers a module's [`PernetOps`] with the networking core
//! (`register_pernet_subsys`): [`PernetOps::init`] makes the module's state for every network
//! namespace that exists when it registers and for every one made afterwards, and
//! [`PernetOps::exit`] gets it back when the namespace goes, or for all of them when the
//! registration drops. The state lives in the namespace's generic storage (`net_generic`), so
//! that nothing else needs a table of namespaces.
//!
//! # Examples
//!
//! ```
//! use kernel::{
//!     net::namespace::{
//!         Net,
//!         PernetId,
//!         PernetOps,
//!         PernetRegistration, //
//!     },
//!     prelude::*, //
//! };
//! use core::sync::atomic::{
//!     AtomicU32,
//!     Ordering, //
//! };
//!
//! /// How many namespaces hold a `Counted` state.
//! static LIVE: AtomicU32 = AtomicU32::new(0);
//! static COUNTED: PernetId = PernetId::new();
//!
//! struct Counted;
//!
//! impl PernetOps for Counted {
//!     type State = u64;
//!     fn id() -> &'static PernetId {
//!         &COUNTED
//!     }
//!
//!     fn init(_net: &Net) -> Result<u64> {
//!         LIVE.fetch_add(1, Ordering::Relaxed);
//!         Ok(42)
//!     }
//!
//!     fn exit(_net: &Net, state: u64) {
//!         assert_eq!(state, 42);
//!         LIVE.fetch_sub(1, Ordering::Relaxed);
//!     }
//! }
//!
//! // Every namespace (the initial one at least) gets its state at once, and one registration
//! // of `Counted` at a time; the registration's drop takes the states back.
//! let reg = KBox::pin_init(PernetRegistration::<Counted>::new(), GFP_KERNEL)?;
//! assert!(LIVE.load(Ordering::Relaxed) >= 1);
//! let again = KBox::pin_init(PernetRegistration::<Counted>::new(), GFP_KERNEL);
//! assert_eq!(again.err(), Some(EBUSY));
//! drop(reg);
//! assert_eq!(LIVE.load(Ordering::Relaxed), 0);
//! # Ok::<(), Error>(())
//! ```

use core::{
    marker::PhantomData,
    sync::atomic::{
        AtomicBool,
        Ordering, //
    },
};

use crate::{
    bindings,
    error::{
        from_result,
        to_result, //
    },
    prelude::*,
    types::Opaque, //
};

/// A network namespace (`struct net`).
///
/// # Invariants
///
/// A `&Net` is only handed out for a namespace that is alive for the reference's lifetime.
#[repr(transparent)]
pub struct Net(Opaque<bindings::net>);

impl Net {
    /// The initial network namespace, which lives as long as the kernel.
    pub fn initial() -> &'static Net {
        // SAFETY: `init_net` is a static that is never freed; `Net` is transparent over it.
        unsafe { &*(&raw const bindings::init_net).cast::<Net>() }
    }

    /// The namespace at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` must point to a namespace that stays alive for `'a`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::net) -> &'a Net {
        // SAFETY: The caller guarantees that the namespace lives for `'a`; `Net` is transparent.
        unsafe { &*ptr.cast::<Net>() }
    }

    /// The raw `struct net`.
    pub(crate) fn as_raw(&self) -> *mut bindings::net {
        self.0.get()
    }
}

/// The id the networking core gives a [`PernetOps`] implementation's storage in every
/// namespace: a `static` of the implementation, as C modules have theirs.
pub struct PernetId {
    id: Opaque<core::ffi::c_uint>,
    taken: AtomicBool,
}

// SAFETY: The id is written by the networking core while registering (under its lock, before
// any callback reads it) and read-only afterwards; `taken` is atomic.
unsafe impl Sync for PernetId {}

impl PernetId {
    /// An id not given yet.
    pub const fn new() -> Self {
        Self {
            id: Opaque::new(0),
            taken: AtomicBool::new(false),
        }
    }

    /// The id, once registered.
    fn get(&self) -> core::ffi::c_uint {
        // SAFETY: Written by the networking core before any callback that reads it runs.
        unsafe { *self.id.get() }
    }
}

impl Default for PernetId {
    fn default() -> Self {
        Self::new()
    }
}

/// What a module keeps in each network namespace, and how it is made and taken back.
pub trait PernetOps: 'static {
    /// The module's state in one namespace.
    type State: Send + Sync;

    /// The storage id of these operations: a `static` [`PernetId`] of the implementation.
    ///
    /// (A function, not an associated `const`: a constant that refers to a `static` with
    /// interior mutability needs Rust 1.86, and the kernel crate also builds with the rustc of
    /// Debian's kernels, 1.85.)
    fn id() -> &'static PernetId;

    /// Makes the state for `net`, a namespace being made (or existing when the operations
    /// register). An error fails the namespace's creation (or the registration). Process
    /// context; may sleep.
    fn init(net: &Net) -> Result<Self::State>;

    /// Takes back the state of `net`, a namespace going away (or every namespace, when the
    /// registration drops). Process context; may sleep. Dropping the state by default.
    fn exit(_net: &Net, state: Self::State) {
        drop(state);
    }
}

/// A registration of [`PernetOps`] `T`: every network namespace has `T`'s state while it lives.
/// One at a time per `T` (its [`PernetOps::id`]): a second fails with `EBUSY`.
///
/// # Invariants
///
/// Once `registered`, `ops` is registered with the networking core until drop, with `T::id()` as
/// its id (taken by this registration) and
/// `size_of::<T::State>()` bytes of generic storage per namespace, which hold an initialised
/// `T::State` between `T`'s init and exit callbacks for that namespace.
#[pin_data(PinnedDrop)]
pub struct PernetRegistration<T: PernetOps> {
    #[pin]
    ops: Opaque<bindings::pernet_operations>,
    /// Set once `ops` is registered (a registration whose initialisation failed is dropped
    /// without it).
    registered: bool,
    _t: PhantomData<T>,
}

// SAFETY: The registration is only registered and unregistered; the networking core serialises
// its callbacks under its own lock.
unsafe impl<T: PernetOps> Send for PernetRegistration<T> {}

// SAFETY: No method takes `&self`.
unsafe impl<T: PernetOps> Sync for PernetRegistration<T> {}

impl<T: PernetOps> PernetRegistration<T> {
    /// Registers `T`'s operations: every namespace has its state before this returns.
    pub fn new() -> impl PinInit<Self, Error> {
        const {
            // `net_generic` storage is `kzalloc`ed: aligned to at least 8 bytes.
            assert!(core::mem::align_of::<T::State>() <= 8);
        }
        try_pin_init!(Self {
            ops <- Opaque::ffi_init(|_| {}),
            registered: false,
            _t: PhantomData,
        }? Error)
        .pin_chain(|mut this| {
            if T::id().taken.swap(true, Ordering::AcqRel) {
                return Err(EBUSY);
            }
            let ops = this.ops.get();
            // SAFETY: `ops` is pinned memory of this registration, not registered yet; a zeroed
            // `pernet_operations` is a valid start (no callbacks, no list links).
            unsafe {
                ops.write(core::mem::zeroed());
                (*ops).init = Some(Self::init_callback);
                (*ops).exit = Some(Self::exit_callback);
                (*ops).id = T::id().id.get();
                (*ops).size = core::mem::size_of::<T::State>();
            }
            // SAFETY: `ops` is fully set up and pinned; it stays registered until drop.
            if let Err(e) = to_result(unsafe { bindings::register_pernet_subsys(ops) }) {
                T::id().taken.store(false, Ordering::Release);
                return Err(e);
            }
            *this.as_mut().project().registered = true;
            Ok(())
        })
    }

    /// The state of `T` in `net`.
    ///
    /// # Safety
    ///
    /// `net` must be a live namespace, from a callback of the registration of `T`.
    unsafe fn slot(net: *mut bindings::net) -> *mut T::State {
        // SAFETY: As the caller guarantees, the storage of `T::id()` in `net` exists and is
        // `size_of::<T::State>()` bytes, suitably aligned.
        unsafe { bindings::net_generic(net, T::id().get()).cast::<T::State>() }
    }

    extern "C" fn init_callback(net: *mut bindings::net) -> core::ffi::c_int {
        from_result(|| {
            // SAFETY: The networking core calls back with a namespace being made, alive for
            // the call.
            let state = T::init(unsafe { Net::from_raw(net) })?;
            // SAFETY: `net` is alive and this is the registration's callback; the slot is
            // zeroed storage of the right size and alignment, not holding a state yet.
            unsafe { Self::slot(net).write(state) };
            Ok(0)
        })
    }

    extern "C" fn exit_callback(net: *mut bindings::net) {
        // SAFETY: The networking core calls exit only after a successful init for `net`, which
        // wrote the state; it is read once, here.
        let state = unsafe { Self::slot(net).read() };
        // SAFETY: The namespace is alive for the call.
        T::exit(unsafe { Net::from_raw(net) }, state);
    }
}

#[pinned_drop]
impl<T: PernetOps> PinnedDrop for PernetRegistration<T> {
    fn drop(self: Pin<&mut Self>) {
        if !self.registered {
            return;
        }
        // SAFETY: `ops` is registered (`registered`); unregistering calls exit for every
        // namespace.
        unsafe { bindings::unregister_pernet_subsys(self.ops.get()) };
        T::id().taken.store(false, Ordering::Release);
    }
}
