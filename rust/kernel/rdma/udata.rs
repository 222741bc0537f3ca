// SPDX-License-Identifier: GPL-2.0

//! Driver-specific data of a verbs call (`struct ib_udata`).
//!
//! A verbs call from user space carries an input and an output buffer for the driver, laid out
//! by the driver's user ABI. Calls from kernel users carry none.
//!
//! # Examples
//!
//! ```
//! use kernel::{
//!     prelude::*,
//!     rdma::UData, //
//! };
//!
//! // A request of the driver's user ABI: user space names the buffer of a new queue.
//! #[derive(FromBytes, IntoBytes)]
//! #[repr(C)]
//! struct CreateReq {
//!     buf_va: u64,
//!     buf_len: u32,
//!     rsvd: u32,
//! }
//!
//! // Reads the request of a creation from user space; kernel users send none.
//! fn queue_buffer(udata: &UData<'_>) -> Result<Option<(u64, u32)>> {
//!     if !udata.is_user() {
//!         return Ok(None);
//!     }
//!     let req: CreateReq = udata.read_in(size_of::<CreateReq>())?;
//!     Ok(Some((req.buf_va, req.buf_len)))
//! }
//! ```

use crate::{bindings, error::to_result, prelude::*};
use core::{
    marker::PhantomData,
    ptr::NonNull, //
};
use zerocopy::{
    FromBytes,
    Immutable,
    IntoBytes, //
};

/// The driver-specific input and output of a verbs call.
///
/// # Examples
///
/// ```
/// use kernel::{
///     prelude::*,
///     rdma::UData, //
/// };
///
/// // The response of a creation in the driver's user ABI: the queue's number and depth.
/// #[derive(IntoBytes, zerocopy_derive::Immutable)]
/// #[repr(C)]
/// struct CreateResp {
///     qn: u32,
///     depth: u32,
/// }
///
/// fn respond(udata: &mut UData<'_>, qn: u32, depth: u32) -> Result {
///     // Older user space may leave less room: the response is truncated to it.
///     pr_debug!("{} bytes of room for the response\n", udata.out_len());
///     udata.respond(&CreateResp { qn, depth })
/// }
/// ```
///
/// # Invariants
///
/// `ptr`, if set, points to a valid `ib_udata` for `'a`.
pub struct UData<'a> {
    ptr: Option<NonNull<bindings::ib_udata>>,
    _p: PhantomData<&'a mut bindings::ib_udata>,
}

impl<'a> UData<'a> {
    /// Wraps the core's pointer, `NULL` for a call from the kernel.
    ///
    /// # Safety
    ///
    /// `ptr` must be `NULL` or valid for `'a`.
    pub(crate) unsafe fn from_raw(ptr: *mut bindings::ib_udata) -> Self {
        // INVARIANT: Guaranteed by the caller.
        Self {
            ptr: NonNull::new(ptr),
            _p: PhantomData,
        }
    }

    /// The user context the call comes from, `None` for kernel calls.
    pub(crate) fn ucontext<T: super::Driver>(&self) -> Option<&'a super::UContext<T>> {
        let udata = self.ptr?;
        // SAFETY: `udata` is valid and belongs to a uverbs call, whose bundle names the calling
        // context of this device.
        let uctx = unsafe { bindings::rdma_udata_to_ucontext(udata.as_ptr()) };
        // SAFETY: A context of a device of `T` that completed `alloc_ucontext`, live for the
        // call.
        (!uctx.is_null()).then(|| unsafe { super::UContext::<T>::from_raw(uctx) })
    }

    /// Whether the call comes from user space.
    pub fn is_user(&self) -> bool {
        self.ptr.is_some()
    }

    /// The length of the input, 0 for kernel calls.
    pub fn in_len(&self) -> usize {
        // SAFETY: By the type invariant the pointer is valid.
        self.ptr.map_or(0, |p| unsafe { (*p.as_ptr()).inlen })
    }

    /// The room for the output, 0 for kernel calls.
    pub fn out_len(&self) -> usize {
        // SAFETY: By the type invariant the pointer is valid.
        self.ptr.map_or(0, |p| unsafe { (*p.as_ptr()).outlen })
    }

    /// Reads the driver's request.
    ///
    /// The input must be at least `min_len` bytes (else `EINVAL`). A shorter input than `R`
    /// (from an older user space) is zero-extended; a longer one must be zero beyond `R` (else
    /// `EOPNOTSUPP`, since it asks for something this driver does not know). Kernel calls have no
    /// request: `EINVAL`.
    pub fn read_in<R: FromBytes + IntoBytes>(&self, min_len: usize) -> Result<R> {
        let udata = self.ptr.ok_or(EINVAL)?;
        let mut req = R::new_zeroed();
        let bytes = req.as_mut_bytes();
        // SAFETY: `udata` is valid; `bytes` is writable for its length, and every bit pattern is
        // a valid `R`.
        to_result(unsafe {
            bindings::_ib_copy_validate_udata_in(
                udata.as_ptr(),
                bytes.as_mut_ptr().cast(),
                bytes.len(),
                min_len,
            )
        })?;
        Ok(req)
    }

    /// Writes the driver's response: truncated to the room user space gave, and any room beyond
    /// it zeroed. Kernel calls take no response: nothing is written.
    pub fn respond<R: IntoBytes + Immutable>(&mut self, resp: &R) -> Result {
        let Some(udata) = self.ptr else {
            return Ok(());
        };
        let bytes = resp.as_bytes();
        // SAFETY: `udata` is valid; `bytes` is readable for its length.
        to_result(unsafe {
            bindings::_ib_respond_udata(udata.as_ptr(), bytes.as_ptr().cast(), bytes.len())
        })
    }
}
