// SPDX-License-Identifier: GPL-2.0

//! Memory regions (`struct ib_mr`).
//!
//! Unlike the other verbs objects, memory regions are allocated by the driver: the
//! abstraction boxes the core's structure with the driver's part ([`Mr`]) and frees the box
//! when the region is deregistered.
//!
//! # Examples
//!
//! ```
//! use kernel::{
//!     prelude::*,
//!     rdma::{
//!         self,
//!         NewMr,
//!         Umem,
//!         UserMrReq, //
//!     },
//! };
//!
//! // The driver's part of a user memory region: the pinned memory.
//! struct MyMr {
//!     umem: Umem,
//! }
//!
//! // Registers user memory (`DeviceOps::reg_user_mr`) under `key`.
//! fn reg_user_mr<T: rdma::Driver>(
//!     dev: &rdma::Device<T>,
//!     req: &UserMrReq,
//!     key: u32,
//! ) -> Result<NewMr<MyMr>> {
//!     let umem = Umem::get(dev, req.start, usize::try_from(req.length)?, req.access)?;
//!     Ok(NewMr {
//!         lkey: key,
//!         rkey: key,
//!         iova: req.iova,
//!         length: req.length,
//!         data: MyMr { umem },
//!     })
//! }
//! ```

use super::Driver;

use crate::{bindings, prelude::*, types::Opaque};
use core::mem::MaybeUninit;

crate::impl_flags!(
    /// Access rights of a memory region or pinned memory (`enum ib_access_flags`).
    ///
    /// Rights from the core that this abstraction does not name (optional extensions such as
    /// relaxed ordering) are kept: see [`AccessFlags::unnamed`].
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{
    ///     AccessFlag,
    ///     AccessFlags, //
    /// };
    ///
    /// let access: AccessFlags = AccessFlag::LocalWrite | AccessFlag::RemoteRead;
    /// assert!(access.contains(AccessFlag::RemoteRead));
    /// assert!(!access.contains(AccessFlag::RemoteWrite));
    /// assert_eq!(access.unnamed(), 0);
    /// ```
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct AccessFlags(u32);

    /// One access right.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{
    ///     AccessFlag,
    ///     AccessFlags, //
    /// };
    ///
    /// // Peers may write memory only if the device may write it too.
    /// fn valid(access: AccessFlags) -> bool {
    ///     !access.contains_any(AccessFlag::RemoteWrite | AccessFlag::RemoteAtomic)
    ///         || access.contains(AccessFlag::LocalWrite)
    /// }
    ///
    /// assert!(valid(AccessFlag::LocalWrite | AccessFlag::RemoteWrite));
    /// assert!(!valid(AccessFlag::RemoteWrite.into()));
    /// ```
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum AccessFlag {
        /// The device may write the memory locally.
        LocalWrite = bindings::ib_access_flags_IB_ACCESS_LOCAL_WRITE,
        /// Peers may write the memory.
        RemoteWrite = bindings::ib_access_flags_IB_ACCESS_REMOTE_WRITE,
        /// Peers may read the memory.
        RemoteRead = bindings::ib_access_flags_IB_ACCESS_REMOTE_READ,
        /// Peers may run atomic operations on the memory.
        RemoteAtomic = bindings::ib_access_flags_IB_ACCESS_REMOTE_ATOMIC,
    }
);

open_flags!(AccessFlags, u32);

/// A memory region of a device of `T`.
///
/// # Examples
///
/// ```
/// use kernel::{
///     prelude::*,
///     rdma::{
///         self,
///         Mr, //
///     },
/// };
///
/// // The driver's part of a fast-registration region: its page list.
/// struct MyMr {
///     pages: KVec<u64>,
/// }
///
/// // Where a fast registration work request maps the region (`SendWr::reg`).
/// fn log_mapping<T: rdma::Driver<Mr = MyMr>>(mr: &Mr<T>) {
///     pr_debug!(
///         "MR of {} pages of {} bytes at {:#x}, {} bytes\n",
///         mr.data().pages.len(),
///         mr.page_size(),
///         mr.iova(),
///         mr.length()
///     );
/// }
/// ```
///
/// # Invariants
///
/// `ib` is at offset 0; the allocation is a `KBox<Mr<T>>` leaked to the core.
#[repr(C)]
pub struct Mr<T: Driver> {
    ib: Opaque<bindings::ib_mr>,
    data: T::Mr,
}

/// A user memory registration request.
///
/// # Examples
///
/// ```
/// use kernel::rdma::{
///     AccessFlag,
///     UserMrReq, //
/// };
///
/// let req = UserMrReq {
///     start: 0x7f00_0000_1000,
///     length: 0x2000,
///     iova: 0x1000,
///     access: AccessFlag::LocalWrite.into(),
/// };
/// // The device sees the pages at the same offsets as the process.
/// assert_eq!(req.start % 0x1000, req.iova % 0x1000);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct UserMrReq {
    /// Start of the range in the calling process.
    pub start: u64,
    /// Length of the range in bytes.
    pub length: u64,
    /// The address the device sees the range at (the I/O virtual address).
    pub iova: u64,
    /// Access rights.
    pub access: AccessFlags,
}

/// A memory region a driver made: its keys, its extent and the driver's part.
///
/// # Examples
///
/// ```
/// use kernel::rdma::NewMr;
///
/// // The region that covers all bus addresses, with the device's reserved key (for
/// // `DeviceOps::get_dma_mr`).
/// let mr = NewMr {
///     lkey: 0x100,
///     rkey: 0x100,
///     iova: 0,
///     length: u64::MAX,
///     data: (),
/// };
/// assert_eq!(mr.lkey, mr.rkey);
/// ```
pub struct NewMr<M> {
    /// The local key.
    pub lkey: u32,
    /// The remote key.
    pub rkey: u32,
    /// The I/O virtual address of the first byte.
    pub iova: u64,
    /// Its length in bytes.
    pub length: u64,
    /// The driver's part.
    pub data: M,
}

impl<T: Driver> Mr<T> {
    /// The driver's part.
    pub fn data(&self) -> &T::Mr {
        &self.data
    }

    /// The I/O virtual address of the region's first byte (set by the last mapping, for
    /// fast-registration regions).
    pub fn iova(&self) -> u64 {
        // SAFETY: The region is live; the core writes these fields only while mapping it, which
        // its user serialises with posting it.
        unsafe { (*self.ib.get()).iova }
    }

    /// The region's length in bytes (set by the last mapping, for fast-registration regions).
    pub fn length(&self) -> u64 {
        // SAFETY: As in `iova`.
        unsafe { (*self.ib.get()).length }
    }

    /// The page size of the region's page list.
    pub fn page_size(&self) -> u32 {
        // SAFETY: As in `iova`.
        unsafe { (*self.ib.get()).page_size }
    }

    /// Room for a region, allocated before the driver makes it in the device: once it exists
    /// there, nothing may fail before the core owns it (a region dropped then would leave the
    /// device writing to memory that is freed).
    pub(crate) fn room() -> Result<KBox<MaybeUninit<Self>>> {
        Ok(KBox::new_uninit(GFP_KERNEL)?)
    }

    /// Puts a new region, `new`, in `room`; returns the pointer the core takes, or an error
    /// pointer if the driver failed (and then made nothing).
    pub(crate) fn into_raw(
        room: KBox<MaybeUninit<Self>>,
        new: Result<NewMr<T::Mr>>,
    ) -> *mut bindings::ib_mr {
        let new = match new {
            Ok(new) => new,
            Err(e) => return e.to_ptr(),
        };
        let mut ib: bindings::ib_mr = pin_init::zeroed();
        ib.lkey = new.lkey;
        ib.rkey = new.rkey;
        ib.iova = new.iova;
        ib.length = new.length;
        let this = KBox::write(
            room,
            Self {
                ib: Opaque::new(ib),
                data: new.data,
            },
        );
        // INVARIANT: `ib` is at offset 0 of the `KBox<Mr<T>>` handed to the core.
        KBox::into_raw(this).cast()
    }

    /// Takes the region back from the core.
    ///
    /// # Safety
    ///
    /// `mr` must come from [`Mr::into_raw`] for `T` and not be used by the core afterwards.
    pub(crate) unsafe fn from_raw(mr: *mut bindings::ib_mr) -> KBox<Self> {
        // SAFETY: Guaranteed by the caller; `ib` is at offset 0.
        unsafe { KBox::from_raw(mr.cast()) }
    }

    /// The region whose core structure is at `mr`.
    ///
    /// # Safety
    ///
    /// `mr` must come from [`Mr::into_raw`] for `T` and stay registered for `'a`.
    pub(crate) unsafe fn from_raw_ref<'a>(mr: *mut bindings::ib_mr) -> &'a Self {
        // SAFETY: Guaranteed by the caller; `ib` is at offset 0.
        unsafe { &*mr.cast::<Self>() }
    }

    /// Consumes the region, returning the driver's part.
    pub fn into_data(self: KBox<Self>) -> T::Mr {
        KBox::into_inner(self).data
    }
}
