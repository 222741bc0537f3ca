// SPDX-License-Identifier: GPL-2.0

//! Pinned user memory (`struct ib_umem`).
//!
//! C header: [`include/rdma/ib_umem.h`](srctree/include/rdma/ib_umem.h).

use super::{
    mr::AccessFlags,
    Device,
    Driver, //
};
use crate::{bindings, error::from_err_ptr, prelude::*};
use core::ptr::NonNull;

/// User memory pinned and mapped for DMA by the device. Dropping it unmaps and unpins it.
///
/// A umem may outlive the registration of its device (a driver keeps the memory of an object
/// whose teardown the device refused until it has reset the device), so it holds a reference
/// on the device: releasing it reads the device's DMA description.
///
/// # Invariants
///
/// `ptr` is a umem returned by `ib_umem_get_va` and not released yet; its `ibdev` is kept
/// allocated by a reference on the embedded `struct device` that this owns.
pub struct Umem {
    ptr: NonNull<bindings::ib_umem>,
}

// SAFETY: The umem is a description of pinned pages; it may be released from any thread.
unsafe impl Send for Umem {}

// SAFETY: Shared access only reads the description.
unsafe impl Sync for Umem {}

impl Umem {
    /// Pins `len` bytes of the calling process's memory at `addr` and maps them for DMA by
    /// `dev`, with the rights `access`. Must be called from the process's context (a verbs
    /// call) and may sleep.
    pub fn get<T: Driver>(
        dev: &Device<T>,
        addr: u64,
        len: usize,
        access: AccessFlags,
    ) -> Result<Self> {
        // CAST: the C prototype takes the bits as an `int`.
        let access = u32::from(access) as i32;
        let addr = usize::try_from(addr).map_err(|_| EFAULT)?;
        // SAFETY: The device is live; the core checks and pins the range of the current
        // process.
        let ptr =
            from_err_ptr(unsafe { bindings::ib_umem_get_va(dev.as_raw(), addr, len, access) })?;
        let Some(ptr) = NonNull::new(ptr) else {
            return Err(ENOMEM);
        };
        // SAFETY: The device is live, so its embedded `struct device` is; the reference is
        // dropped after the umem's release.
        unsafe { bindings::get_device(&raw mut (*dev.as_raw()).__bindgen_anon_1.dev) };
        // INVARIANT: `from_err_ptr` let through only a valid umem of `dev`, now referenced.
        Ok(Self { ptr })
    }

    /// The length of the pinned range in bytes.
    pub fn len(&self) -> usize {
        // SAFETY: The umem is valid (type invariant).
        unsafe { (*self.ptr.as_ptr()).length }
    }

    /// Whether the pinned range is empty (never, for a umem that was pinned).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The largest page size of `pgsz_bitmap` (a set of powers of two) in which the range can be
    /// described to a device that sees it at the virtual address `virt`, or `None`.
    pub fn find_best_pgsz(&self, pgsz_bitmap: u64, virt: u64) -> Option<u64> {
        // SAFETY: The umem is valid.
        let pgsz = unsafe {
            bindings::ib_umem_find_best_pgsz(
                self.ptr.as_ptr(),
                pgsz_bitmap as crate::ffi::c_ulong,
                virt,
            )
        };
        (pgsz != 0).then_some(pgsz as u64)
    }

    /// The number of `pgsz` blocks the range spans.
    pub fn num_dma_blocks(&self, pgsz: u64) -> usize {
        // SAFETY: The umem is valid.
        unsafe { bindings::ib_umem_num_dma_blocks(self.ptr.as_ptr(), pgsz as crate::ffi::c_ulong) }
    }

    /// The DMA addresses of the `pgsz` blocks of the range, in order; the first is aligned
    /// down to `pgsz`. `pgsz` must be one [`Umem::find_best_pgsz`] accepted.
    pub fn dma_blocks(&self, pgsz: u64) -> DmaBlocks<'_> {
        let mut iter: bindings::ib_block_iter = pin_init::zeroed();
        // SAFETY: The umem is valid; the iterator is plain data that the call initialises.
        unsafe {
            bindings::__rdma_umem_block_iter_start(
                &mut iter,
                self.ptr.as_ptr(),
                pgsz as crate::ffi::c_ulong,
            )
        };
        DmaBlocks { iter, _umem: self }
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: The umem is valid (type invariant).
        let ibdev = unsafe { (*self.ptr.as_ptr()).ibdev };
        // SAFETY: The umem is valid and this is its last use; its device is still allocated
        // (type invariant).
        unsafe { bindings::ib_umem_release(self.ptr.as_ptr()) };
        // SAFETY: The reference taken by `get`; nothing uses the device after this.
        unsafe { bindings::put_device(&raw mut (*ibdev).__bindgen_anon_1.dev) };
    }
}

/// The DMA addresses of the blocks of a [`Umem`], from [`Umem::dma_blocks`].
pub struct DmaBlocks<'a> {
    iter: bindings::ib_block_iter,
    _umem: &'a Umem,
}

impl Iterator for DmaBlocks<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        // SAFETY: The iterator was started on a umem that the borrow keeps alive.
        unsafe {
            bindings::__rdma_umem_block_iter_next(&mut self.iter)
                .then(|| bindings::rdma_block_iter_dma_address(&mut self.iter))
        }
    }
}
