// SPDX-License-Identifier: GPL-2.0

//! User contexts (`struct ib_ucontext`) and the memory mappings they hand to user space.
//!
//! A user context is what a process gets when it opens the device through libibverbs. The core
//! allocates it with the driver's part embedded ([`UContext`]); the driver may give it memory
//! mappings of device memory ([`UContextSetup::insert_bar_mmap`], with the caching a
//! [`MmapCaching`] names), which user space then `mmap`s at the offsets returned. The mappings are removed, and the driver's part dropped,
//! when the context is deallocated; unregistering the device zaps any mapping still in place.
//!
//! # Examples
//!
//! ```
//! use kernel::{
//!     device::Bound,
//!     page::PAGE_SIZE,
//!     pci,
//!     prelude::*,
//!     rdma::{
//!         MmapCaching,
//!         UContextSetup,
//!         UData, //
//!     },
//! };
//!
//! // The driver's part of a user context: where user space maps the doorbell page.
//! struct MyContext {
//!     db_offset: u64,
//! }
//!
//! // Creates a user context (`DeviceOps::alloc_ucontext`): maps the first page of BAR 0 for user
//! // space and tells it where.
//! fn alloc_ucontext(
//!     pdev: &pci::Device<Bound>,
//!     setup: &UContextSetup<'_>,
//!     udata: &mut UData<'_>,
//! ) -> Result<MyContext> {
//!     let db_offset = setup.insert_bar_mmap(pdev, 0, 0, PAGE_SIZE, MmapCaching::Device)?;
//!     udata.respond(&db_offset)?;
//!     Ok(MyContext { db_offset })
//! }
//! ```

use super::driver::Driver;
use crate::{
    bindings,
    error::{
        from_result,
        to_result, //
    },
    ffi::c_int,
    new_mutex,
    page::PAGE_SIZE,
    pci,
    prelude::*,
    sync::Mutex,
    types::Opaque,
};
use core::ptr::NonNull;
use pin_init::PinInit;

/// A user context of a device of `T`, as the core allocates it.
///
/// # Examples
///
/// The operations see the driver's part of the calling context, for instance through
/// [`CqSetup::ucontext`](super::CqSetup::ucontext); the whole context is a [`UContext`]:
///
/// ```
/// use kernel::rdma::{
///     self,
///     UContext, //
/// };
///
/// // The driver's part of a user context: the process's doorbell page.
/// struct MyContext {
///     db_page: u32,
/// }
///
/// fn db_page<T: rdma::Driver<UContext = MyContext>>(ctx: &UContext<T>) -> u32 {
///     ctx.data().db_page
/// }
/// ```
///
/// # Invariants
///
/// `ib` is at offset 0; `mmaps` and `data` are initialised between a successful
/// `alloc_ucontext` and `dealloc_ucontext`.
#[repr(C)]
#[pin_data]
pub struct UContext<T: Driver> {
    #[pin]
    ib: Opaque<bindings::ib_ucontext>,
    #[pin]
    mmaps: Mutex<KVec<NonNull<IoMmapEntry>>>,
    #[pin]
    data: T::UContext,
}

impl<T: Driver> UContext<T> {
    /// The context whose core header is at `uctx`.
    ///
    /// # Safety
    ///
    /// `uctx` must be the header of a live `UContext<T>` that `init` completed, for `'a`.
    pub(crate) unsafe fn from_raw<'a>(uctx: *mut bindings::ib_ucontext) -> &'a Self {
        // SAFETY: `ib` is at offset 0 (type invariant); liveness is up to the caller.
        unsafe { &*uctx.cast::<Self>() }
    }

    /// The driver's part.
    pub fn data(&self) -> &T::UContext {
        &self.data
    }

    /// Initialises the Rust part of the context the core allocated: the mapping list, then the
    /// driver's part through `init_data`. On failure everything set up is undone.
    ///
    /// `init_data` receives a pointer to the driver's part, valid for writes and pinned; it
    /// must initialise it when it returns `Ok`, and leave it uninitialised otherwise.
    ///
    /// # Safety
    ///
    /// `uctx` must be the header of a zeroed `UContext<T>` allocation that the core is creating.
    pub(crate) unsafe fn init(
        uctx: *mut bindings::ib_ucontext,
        init_data: impl FnOnce(&UContextSetup<'_>, *mut T::UContext) -> Result,
    ) -> Result {
        // SAFETY: `ib` is at offset 0 (type invariant), so the context is a `UContext<T>`.
        let this = unsafe { crate::container_of!(Opaque::cast_from(uctx), Self, ib) }.cast_mut();
        // SAFETY: The field is valid for writes and pinned in the core's allocation.
        unsafe { new_mutex!(KVec::new()).__init(&raw mut (*this).mmaps) }?;
        // SAFETY: `mmaps` is initialised and lives as long as the context.
        let mmaps = unsafe { &(*this).mmaps };
        let setup = UContextSetup { uctx, mmaps };
        // SAFETY: The driver's part is valid for writes and pinned in place too.
        let data = unsafe { &raw mut (*this).data };
        // INVARIANT: On success `mmaps` and `data` are initialised.
        let ret = init_data(&setup, data);
        if ret.is_err() {
            // SAFETY: `mmaps` is initialised and no longer used.
            unsafe { Self::remove_mmaps(this) };
        }
        ret
    }

    /// Drops the driver's part after `release` and removes the context's mappings.
    ///
    /// # Safety
    ///
    /// `uctx` must belong to a `UContext<T>` that `init` completed, and this must be its last
    /// use.
    pub(crate) unsafe fn destroy(
        uctx: *mut bindings::ib_ucontext,
        release: impl FnOnce(Pin<&mut T::UContext>),
    ) {
        // SAFETY: As in `init`.
        let this = unsafe { crate::container_of!(Opaque::cast_from(uctx), Self, ib) }.cast_mut();
        // SAFETY: `data` is initialised and pinned; nobody else uses it any more.
        unsafe {
            release(Pin::new_unchecked(&mut (*this).data));
            core::ptr::drop_in_place(&raw mut (*this).data);
            Self::remove_mmaps(this);
        }
    }

    /// Removes every mapping of the context and drops the list.
    ///
    /// # Safety
    ///
    /// `mmaps` of `this` must be initialised and not used afterwards.
    unsafe fn remove_mmaps(this: *mut Self) {
        // SAFETY: Guaranteed by the caller.
        let mmaps = unsafe { &(*this).mmaps };
        for entry in mmaps.lock().drain_all() {
            // SAFETY: The entry was inserted and not removed yet; this drops the driver's
            // reference (the last one frees it through `mmap_free`).
            unsafe { bindings::rdma_user_mmap_entry_remove(IoMmapEntry::raw(entry)) };
        }
        // SAFETY: Initialised and unused from now on.
        unsafe { core::ptr::drop_in_place(&raw mut (*this).mmaps) };
    }
}

/// What a driver may do with a user context while creating it.
///
/// # Examples
///
/// ```
/// use kernel::{
///     device::Bound,
///     page::PAGE_SIZE,
///     pci,
///     prelude::*,
///     rdma::{
///         MmapCaching,
///         UContextSetup, //
///     },
/// };
///
/// // Offers user space the doorbell page `page` of BAR 2, returning the offset it maps it at.
/// fn map_doorbell(
///     pdev: &pci::Device<Bound>,
///     setup: &UContextSetup<'_>,
///     page: u64,
/// ) -> Result<u64> {
///     let offset = page * PAGE_SIZE as u64;
///     setup.insert_bar_mmap(pdev, 2, offset, PAGE_SIZE, MmapCaching::Device)
/// }
/// ```
pub struct UContextSetup<'a> {
    uctx: *mut bindings::ib_ucontext,
    mmaps: &'a Mutex<KVec<NonNull<IoMmapEntry>>>,
}

impl UContextSetup<'_> {
    /// Lets user space map `len` bytes at `offset` of memory BAR `bar` of `pdev` with the
    /// caching `caching`, and returns the offset to pass to `mmap`. Both `offset` and `len`
    /// must be multiples of the page size and lie inside the BAR.
    pub fn insert_bar_mmap(
        &self,
        pdev: &pci::Device<crate::device::Bound>,
        bar: u32,
        offset: u64,
        len: usize,
        caching: MmapCaching,
    ) -> Result<u64> {
        let page = PAGE_SIZE as u64;
        let len64 = u64::try_from(len)?;
        let end = offset.checked_add(len64).ok_or(EINVAL)?;
        if len == 0
            || !offset.is_multiple_of(page)
            || !len64.is_multiple_of(page)
            || end > pdev.resource_len(bar)?
        {
            return Err(EINVAL);
        }
        let phys = pdev.resource_start(bar)? + offset;
        let entry = KBox::new(
            IoMmapEntry {
                rdma: Opaque::zeroed(),
                pfn: (phys / page).try_into()?,
                len,
                caching,
            },
            GFP_KERNEL,
        )?;

        let mut mmaps = self.mmaps.lock();
        mmaps.reserve(1, GFP_KERNEL)?;
        let entry = NonNull::from(KBox::leak(entry));
        // SAFETY: The context is valid; the entry is zeroed and stays allocated until
        // `mmap_free`.
        let ret = unsafe {
            bindings::rdma_user_mmap_entry_insert(self.uctx, IoMmapEntry::raw(entry), len)
        };
        if let Err(e) = to_result(ret) {
            // SAFETY: Not inserted: the allocation is still ours.
            drop(unsafe { KBox::from_raw(entry.as_ptr()) });
            return Err(e);
        }
        // Cannot fail: room was reserved.
        let _ = mmaps.push(entry, GFP_KERNEL);
        // SAFETY: The entry is inserted.
        Ok(unsafe { bindings::rdma_user_mmap_get_offset(IoMmapEntry::raw(entry)) })
    }
}

/// How the CPU caches a mapping of device memory ([`UContextSetup::insert_bar_mmap`]).
///
/// # Examples
///
/// ```
/// use kernel::rdma::MmapCaching;
///
/// // Registers are read back: no write combining; a push buffer is only written.
/// fn caching(write_only: bool) -> MmapCaching {
///     if write_only {
///         MmapCaching::WriteCombine
///     } else {
///         MmapCaching::Device
///     }
/// }
///
/// assert_eq!(caching(true), MmapCaching::WriteCombine);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmapCaching {
    /// Uncached device memory (`pgprot_device()`): registers, doorbells.
    Device,
    /// Uncached, writes combined (`pgprot_writecombine()`): write-only buffers such as
    /// on-device work queues or push doorbells.
    WriteCombine,
}

/// A mapping of device memory offered to user space.
#[repr(C)]
struct IoMmapEntry {
    rdma: Opaque<bindings::rdma_user_mmap_entry>,
    pfn: crate::ffi::c_ulong,
    len: usize,
    caching: MmapCaching,
}

impl IoMmapEntry {
    fn raw(entry: NonNull<Self>) -> *mut bindings::rdma_user_mmap_entry {
        // `rdma` is the first field of a `repr(C)` struct.
        entry.as_ptr().cast()
    }
}

/// `ops.mmap`: maps the entry the offset names, with its caching.
pub(crate) unsafe extern "C" fn mmap(
    uctx: *mut bindings::ib_ucontext,
    vma: *mut bindings::vm_area_struct,
) -> c_int {
    from_result(|| {
        // SAFETY: The core passes a live context and the VMA being set up (`mmap_lock` held).
        let entry = unsafe { bindings::rdma_user_mmap_entry_get(uctx, vma) };
        let entry = NonNull::new(entry).ok_or(EINVAL)?;
        // SAFETY: Every entry of our contexts is the `rdma` field (offset 0) of an
        // `IoMmapEntry`, and the reference taken above keeps it alive.
        let io = unsafe { entry.cast::<IoMmapEntry>().as_ref() };
        // SAFETY: The VMA being set up is valid; its protection is a plain value.
        let prot = unsafe {
            match io.caching {
                MmapCaching::Device => bindings::pgprot_device((*vma).vm_page_prot),
                MmapCaching::WriteCombine => bindings::pgprot_writecombine((*vma).vm_page_prot),
            }
        };
        // SAFETY: As above; `rdma_user_mmap_io` checks the VMA's size against `len`.
        let ret = unsafe {
            let ret = bindings::rdma_user_mmap_io(uctx, vma, io.pfn, io.len, prot, entry.as_ptr());
            bindings::rdma_user_mmap_entry_put(entry.as_ptr());
            ret
        };
        to_result(ret)?;
        Ok(0)
    })
}

/// `ops.mmap_free`: frees an entry once the last mapping and the context let go of it.
pub(crate) unsafe extern "C" fn mmap_free(entry: *mut bindings::rdma_user_mmap_entry) {
    // SAFETY: Every entry of our contexts is the first field of an `IoMmapEntry` leaked from a
    // `KBox` in `insert_bar_mmap`; this is its last reference.
    drop(unsafe { KBox::from_raw(entry.cast::<IoMmapEntry>()) });
}

/// `ops.disassociate_ucontext`: nothing to do; the core zaps the mappings, and the context is
/// deallocated as usual afterwards.
pub(crate) unsafe extern "C" fn disassociate(_uctx: *mut bindings::ib_ucontext) {}
