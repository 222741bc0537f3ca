// SPDX-License-Identifier: GPL-2.0

//! Protection domains (`struct ib_pd`) and completion queues (`struct ib_cq`).
//!
//! # Examples
//!
//! ```
//! use kernel::{
//!     prelude::*,
//!     rdma::{
//!         self,
//!         CqEvents,
//!         CqSetup,
//!         UData, //
//!     },
//! };
//!
//! // The driver's part of a completion queue.
//! struct MyCq {
//!     depth: u32,
//!     events: CqEvents,
//! }
//!
//! # struct MyDriver;
//! # #[vtable]
//! # impl rdma::Driver for MyDriver {
//! #     type Data<'a> = ();
//! #     type UContext = ();
//! #     type Pd = ();
//! #     type Cq = MyCq;
//! #     type Qp = ();
//! #     type Mr = ();
//! #     type Ah = ();
//! #     type Ops = Self;
//! #     const DRIVER_ID: rdma::DriverId = rdma::DriverId::UNKNOWN;
//! #     fn query_device(
//! #         _dev: &rdma::Device<Self>,
//! #         _data: &(),
//! #         _attr: &mut rdma::DeviceAttr,
//! #         _udata: &mut rdma::UData<'_>,
//! #     ) -> Result {
//! #         Ok(())
//! #     }
//! #     fn query_port(
//! #         _dev: &rdma::Device<Self>,
//! #         _data: &(),
//! #         _port: u32,
//! #         _attr: &mut rdma::PortAttr,
//! #     ) -> Result {
//! #         Ok(())
//! #     }
//! #     fn get_port_immutable(
//! #         _dev: &rdma::Device<Self>,
//! #         _data: &(),
//! #         _port: u32,
//! #         _immutable: &mut rdma::PortImmutable,
//! #     ) -> Result {
//! #         Ok(())
//! #     }
//! # }
//! #[vtable]
//! impl rdma::DeviceOps<MyDriver> for MyDriver {
//!     fn create_cq(
//!         _dev: &rdma::Device<MyDriver>,
//!         _data: &<MyDriver as rdma::Driver>::Data<'_>,
//!         setup: &CqSetup<'_, MyDriver>,
//!         _udata: &mut UData<'_>,
//!     ) -> impl PinInit<MyCq, Error> {
//!         let depth = setup.attr().cqe.max(16).next_power_of_two();
//!         setup.set_cqe(depth);
//!         Ok::<_, Error>(MyCq {
//!             depth,
//!             events: setup.events(),
//!         })
//!     }
//! }
//!
//! // Called by the driver's interrupt handler when the device wrote a completion to `cq`.
//! fn on_completion(cq: &rdma::Cq<MyDriver>) {
//!     cq.data().events.completion();
//! }
//! ```

use super::{
    object::{
        kind,
        Events,
        Object, //
    },
    ucontext::UContext,
    Driver,
};
use crate::bindings;

/// A protection domain of a device of `T`.
///
/// # Examples
///
/// ```
/// use kernel::rdma::{
///     self,
///     Pd, //
/// };
///
/// // The driver's part of a protection domain: its number in the device.
/// struct MyPd {
///     pdn: u32,
/// }
///
/// fn pdn<T: rdma::Driver<Pd = MyPd>>(pd: &Pd<T>) -> u32 {
///     pd.data().pdn
/// }
/// ```
pub type Pd<T> = Object<kind::Pd, <T as Driver>::Pd>;

/// A completion queue of a device of `T`.
///
/// # Examples
///
/// ```
/// use kernel::rdma::{
///     self,
///     Cq,
///     Wc, //
/// };
///
/// // The driver's part of a completion queue: its number in the device.
/// struct MyCq {
///     cqn: u32,
/// }
///
/// // Polls a completion queue (`DeviceOps::poll_cq`) that has nothing to report.
/// fn poll_cq<T: rdma::Driver<Cq = MyCq>>(cq: &Cq<T>, wc: &mut [Wc]) -> usize {
///     pr_debug!("poll CQ {} for {} completions\n", cq.data().cqn, wc.len());
///     0
/// }
/// ```
pub type Cq<T> = Object<kind::Cq, <T as Driver>::Cq>;

/// Reports completion-queue events: see [`Events::completion`] and [`Events::error`].
///
/// # Examples
///
/// ```
/// use kernel::rdma::CqEvents;
///
/// // Called by the interrupt handler of the event queue that reports completions of `cq`.
/// fn completion_event(cq: &CqEvents, overflow: bool) {
///     if overflow {
///         cq.error();
///     } else {
///         cq.completion();
///     }
/// }
/// ```
pub type CqEvents = Events<kind::Cq>;

/// What the creator of a completion queue asks for.
///
/// # Examples
///
/// ```
/// use kernel::rdma::{
///     CqAttr,
///     CqCreateFlags, //
/// };
///
/// let attr = CqAttr {
///     cqe: 100,
///     comp_vector: 0,
///     flags: CqCreateFlags::default(),
/// };
/// assert!(attr.flags.is_empty());
/// assert_eq!(attr.cqe.next_power_of_two(), 128);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct CqAttr {
    /// Completions it must hold at least.
    pub cqe: u32,
    /// The completion vector its events go through (below the device's count).
    pub comp_vector: u32,
    /// Creation flags.
    pub flags: CqCreateFlags,
}

crate::impl_flags!(
    /// Creation flags of a completion queue (`enum ib_uverbs_ex_create_cq_flags`). Flags
    /// this abstraction does not name are kept: see [`CqCreateFlags::unnamed`].
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{
    ///     CqCreateFlag,
    ///     CqCreateFlags, //
    /// };
    ///
    /// let flags: CqCreateFlags = CqCreateFlag::IgnoreOverrun.into();
    /// assert!(flags.contains(CqCreateFlag::IgnoreOverrun));
    /// assert!(!flags.contains(CqCreateFlag::TimestampCompletion));
    /// assert_eq!(flags.unnamed(), 0);
    /// assert!(!flags.is_empty());
    /// ```
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct CqCreateFlags(u32);

    /// One creation flag.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::{
    ///     prelude::*,
    ///     rdma::{
    ///         CqAttr,
    ///         CqCreateFlag, //
    ///     },
    /// };
    ///
    /// // A device that supports no creation flag but `IgnoreOverrun`, named or not.
    /// fn check_flags(attr: &CqAttr) -> Result {
    ///     if attr.flags.unnamed() != 0 || attr.flags.contains_any(!CqCreateFlag::IgnoreOverrun) {
    ///         return Err(EOPNOTSUPP);
    ///     }
    ///     Ok(())
    /// }
    ///
    /// let attr = CqAttr {
    ///     cqe: 16,
    ///     comp_vector: 0,
    ///     flags: CqCreateFlag::IgnoreOverrun.into(),
    /// };
    /// assert!(check_flags(&attr).is_ok());
    /// let attr = CqAttr {
    ///     flags: CqCreateFlag::TimestampCompletion.into(),
    ///     ..attr
    /// };
    /// assert!(check_flags(&attr).is_err());
    /// ```
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum CqCreateFlag {
        /// Completions carry a timestamp.
        TimestampCompletion =
            bindings::ib_uverbs_ex_create_cq_flags_IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION,
        /// The queue may overrun without an error.
        IgnoreOverrun = bindings::ib_uverbs_ex_create_cq_flags_IB_UVERBS_CQ_FLAGS_IGNORE_OVERRUN,
    }
);

open_flags!(CqCreateFlags, u32);

/// What a driver has while creating a completion queue.
///
/// # Examples
///
/// ```
/// use kernel::{
///     prelude::*,
///     rdma::{
///         self,
///         CqSetup, //
///     },
/// };
///
/// // The depth of a new completion queue: what was asked for, rounded up to a power of two.
/// fn cq_depth<T: rdma::Driver>(setup: &CqSetup<'_, T>, max: u32) -> Result<u32> {
///     let attr = setup.attr();
///     if attr.comp_vector != 0 || attr.cqe > max {
///         return Err(EINVAL);
///     }
///     let depth = attr.cqe.max(1).next_power_of_two();
///     setup.set_cqe(depth);
///     Ok(depth)
/// }
/// ```
pub struct CqSetup<'a, T: Driver> {
    pub(crate) cq: *mut bindings::ib_cq,
    pub(crate) attr: CqAttr,
    pub(crate) events: &'a CqEvents,
    pub(crate) ucontext: Option<&'a UContext<T>>,
}

impl<T: Driver> CqSetup<'_, T> {
    /// The requested attributes.
    pub fn attr(&self) -> &CqAttr {
        &self.attr
    }

    /// A handle to report events of the new queue; it stays usable (and does nothing) after the
    /// queue is destroyed.
    pub fn events(&self) -> CqEvents {
        self.events.clone()
    }

    /// The driver's part of the calling user context, for a user queue.
    pub fn ucontext(&self) -> Option<&T::UContext> {
        self.ucontext.map(|c| c.data())
    }

    /// Tells the consumer how many completions the queue really holds.
    pub fn set_cqe(&self, cqe: u32) {
        // SAFETY: The core is creating the CQ and does not read `cqe` until creation returns.
        unsafe { (*self.cq).cqe = cqe.try_into().unwrap_or(i32::MAX) };
    }
}

/// What a driver has while creating a protection domain.
///
/// # Examples
///
/// ```
/// use kernel::rdma::{
///     self,
///     PdSetup, //
/// };
///
/// // Whether a protection domain is being made for user space.
/// fn is_user_pd<T: rdma::Driver>(setup: &PdSetup<'_, T>) -> bool {
///     setup.ucontext().is_some()
/// }
/// ```
pub struct PdSetup<'a, T: Driver> {
    pub(crate) ucontext: Option<&'a UContext<T>>,
}

impl<T: Driver> PdSetup<'_, T> {
    /// The driver's part of the calling user context, for a user PD.
    pub fn ucontext(&self) -> Option<&T::UContext> {
        self.ucontext.map(|c| c.data())
    }
}
