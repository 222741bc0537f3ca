// SPDX-License-Identifier: GPL-2.0

//! Work requests and work completions of kernel consumers (`struct ib_send_wr`,
//! `struct ib_recv_wr`, `struct ib_wc`).
//!
//! Kernel users post chains of work requests to a queue pair and poll completions from a
//! completion queue without going through user space; these typed views let a driver read the
//! requests and write the completions without touching the C layout.
//!
//! # Examples
//!
//! ```
//! use kernel::{
//!     prelude::*,
//!     rdma::{
//!         self,
//!         SendFlag,
//!         SendWrs,
//!         WrOpcode, //
//!     },
//! };
//!
//! // Checks a chain of send work requests (`DeviceOps::post_send`) for a device that can only
//! // send and write; returns how many completions the chain asks for.
//! fn check_chain<T: rdma::Driver>(
//!     wrs: SendWrs<'_, T>,
//! ) -> core::result::Result<usize, (Error, usize)> {
//!     let mut signaled = 0;
//!     for (i, wr) in wrs.enumerate() {
//!         match wr.opcode() {
//!             Some(WrOpcode::Send | WrOpcode::RdmaWrite) => {}
//!             _ => return Err((EINVAL, i)),
//!         }
//!         if wr.flags().contains(SendFlag::Signaled) {
//!             signaled += 1;
//!         }
//!     }
//!     Ok(signaled)
//! }
//! ```

use super::{
    ah::Ah,
    c_enum,
    mr::{
        AccessFlags,
        Mr, //
    },
    qp::QpEvents,
    Driver, //
};
use crate::{
    bindings,
    device::Device,
    error::{
        code::{
            EFAULT,
            EINVAL, //
        },
        to_result,
        Result, //
    },
    sync::aref::ARef,
};
use core::marker::PhantomData;

c_enum! {
    /// The operation of a send work request (`enum ib_wr_opcode`).
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{
    ///     WcOpcode,
    ///     WrOpcode, //
    /// };
    ///
    /// // The operation the completion of a send work request reports.
    /// fn completion_opcode(op: WrOpcode) -> WcOpcode {
    ///     match op {
    ///         WrOpcode::Send | WrOpcode::SendImm | WrOpcode::SendInv => WcOpcode::Send,
    ///         WrOpcode::RdmaWrite | WrOpcode::RdmaWriteImm => WcOpcode::RdmaWrite,
    ///         WrOpcode::RdmaRead | WrOpcode::RdmaReadInv => WcOpcode::RdmaRead,
    ///         WrOpcode::AtomicCmpSwp => WcOpcode::CompSwap,
    ///         WrOpcode::AtomicFetchAdd => WcOpcode::FetchAdd,
    ///         WrOpcode::LocalInv => WcOpcode::LocalInv,
    ///         WrOpcode::RegMr => WcOpcode::RegMr,
    ///     }
    /// }
    ///
    /// assert_eq!(completion_opcode(WrOpcode::SendImm), WcOpcode::Send);
    /// assert_eq!(WrOpcode::from_raw(WrOpcode::RegMr.to_raw()), Some(WrOpcode::RegMr));
    /// ```
    pub enum WrOpcode {
        /// RDMA Write.
        RdmaWrite = bindings::ib_wr_opcode_IB_WR_RDMA_WRITE,
        /// RDMA Write with immediate data.
        RdmaWriteImm = bindings::ib_wr_opcode_IB_WR_RDMA_WRITE_WITH_IMM,
        /// Send.
        Send = bindings::ib_wr_opcode_IB_WR_SEND,
        /// Send with immediate data.
        SendImm = bindings::ib_wr_opcode_IB_WR_SEND_WITH_IMM,
        /// RDMA Read.
        RdmaRead = bindings::ib_wr_opcode_IB_WR_RDMA_READ,
        /// Atomic compare and swap.
        AtomicCmpSwp = bindings::ib_wr_opcode_IB_WR_ATOMIC_CMP_AND_SWP,
        /// Atomic fetch and add.
        AtomicFetchAdd = bindings::ib_wr_opcode_IB_WR_ATOMIC_FETCH_AND_ADD,
        /// Send that invalidates a remote key.
        SendInv = bindings::ib_wr_opcode_IB_WR_SEND_WITH_INV,
        /// RDMA Read that invalidates the local sink key.
        RdmaReadInv = bindings::ib_wr_opcode_IB_WR_RDMA_READ_WITH_INV,
        /// Invalidate a local key.
        LocalInv = bindings::ib_wr_opcode_IB_WR_LOCAL_INV,
        /// Fast-register a memory region.
        RegMr = bindings::ib_wr_opcode_IB_WR_REG_MR,
    }
}

// CAST: the C enum is signed; the flags are small positive bits.
crate::impl_flags!(
    /// Flags of a send work request (`enum ib_send_flags`).
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{
    ///     SendFlag,
    ///     SendFlags, //
    /// };
    ///
    /// let flags: SendFlags = SendFlag::Signaled | SendFlag::Inline;
    /// assert!(flags.contains(SendFlag::Inline));
    /// assert!(!flags.contains_any(SendFlag::Fence | SendFlag::Solicited));
    /// ```
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct SendFlags(u32);

    /// One flag of a send work request.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{
    ///     SendFlag,
    ///     SendFlags, //
    /// };
    ///
    /// // Whether a request produces a completion on a queue pair that signals only the requests
    /// // that ask for it.
    /// fn completes(flags: SendFlags) -> bool {
    ///     flags.contains(SendFlag::Signaled)
    /// }
    ///
    /// assert!(completes(SendFlag::Signaled | SendFlag::Fence));
    /// assert!(!completes(SendFlag::Solicited.into()));
    /// ```
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum SendFlag {
        /// Wait for earlier RDMA Reads and atomics before this one.
        Fence = bindings::ib_send_flags_IB_SEND_FENCE as u32,
        /// Produce a completion.
        Signaled = bindings::ib_send_flags_IB_SEND_SIGNALED as u32,
        /// Ask for a solicited event at the receiver.
        Solicited = bindings::ib_send_flags_IB_SEND_SOLICITED as u32,
        /// Copy the payload into the work request.
        Inline = bindings::ib_send_flags_IB_SEND_INLINE as u32,
    }
);

/// A scatter/gather entry.
///
/// # Examples
///
/// ```
/// use kernel::rdma::Sge;
///
/// let sges = [
///     Sge {
///         addr: 0x1000,
///         length: 512,
///         lkey: 7,
///     },
///     Sge {
///         addr: 0x8000,
///         length: 1536,
///         lkey: 7,
///     },
/// ];
/// let total: u32 = sges.iter().map(|sge| sge.length).sum();
/// assert_eq!(total, 2048);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    /// Address (virtual in the region of `lkey`, or a bus address with the local DMA lkey).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// The local key of the memory.
    pub lkey: u32,
}

/// Reads `n` scatter/gather entries at `sg`.
///
/// # Safety
///
/// `sg` must point to `n` valid entries, or `n` must be 0 or negative.
unsafe fn sges<'a>(sg: *const bindings::ib_sge, n: i32) -> impl Iterator<Item = Sge> + 'a {
    let n = usize::try_from(n).unwrap_or(0);
    (0..n).map(move |i| {
        // SAFETY: `i < n`, in bounds by the caller's guarantee.
        let e = unsafe { &*sg.add(i) };
        Sge {
            addr: e.addr,
            length: e.length,
            lkey: e.lkey,
        }
    })
}

/// A send work request of a kernel consumer.
///
/// # Examples
///
/// ```
/// use kernel::{
///     prelude::*,
///     rdma::{
///         self,
///         SendFlag,
///         SendWr,
///         WrOpcode, //
///     },
/// };
///
/// // Logs what a send work request asks for.
/// fn log_wr<T: rdma::Driver>(wr: &SendWr<'_, T>) -> Result {
///     let op = wr.opcode().ok_or(EINVAL)?;
///     let len: u64 = wr.sges().map(|sge| u64::from(sge.length)).sum();
///     pr_debug!("WR {:#x}: {op:?} of {len} bytes in {} SGEs\n", wr.wr_id(), wr.num_sge());
///     if let Some((addr, rkey)) = wr.rdma() {
///         pr_debug!("  remote {addr:#x}, key {rkey:#x}\n");
///     }
///     if op == WrOpcode::Send && wr.flags().contains(SendFlag::Inline) {
///         let mut payload = [0u8; 64];
///         let n = wr.copy_inline(&mut payload)?;
///         pr_debug!("  inline {:02x?}\n", &payload[..n]);
///     }
///     Ok(())
/// }
/// ```
pub struct SendWr<'a, T: Driver> {
    raw: &'a bindings::ib_send_wr,
    qp: QpOf,
    _p: PhantomData<T>,
}

/// What the requests of a chain need to know of the queue pair they are posted to.
#[derive(Clone, Copy)]
struct QpOf {
    device: *mut bindings::ib_device,
    datagram: bool,
    /// The device's DMA device, if the queue pair is a kernel consumer's (no user object) with
    /// a protection domain: then SGEs with `local_dma_lkey` name memory mapped for it.
    kernel_dma: Option<(*mut bindings::device, u32)>,
}

impl QpOf {
    /// # Safety
    ///
    /// `qp` must be a live queue pair.
    unsafe fn of(qp: *const bindings::ib_qp) -> Self {
        // SAFETY: Guaranteed by the caller; a live QP's device, PD and user object are set at
        // creation and do not change.
        unsafe {
            let device = (*qp).device;
            let qp_type = (*qp).qp_type;
            let pd = (*qp).pd;
            let kernel_dma =
                ((*qp).uobject.is_null() && !pd.is_null() && !(*device).dma_device.is_null())
                    .then(|| ((*device).dma_device, (*pd).local_dma_lkey));
            Self {
                device,
                datagram: qp_type == bindings::ib_qp_type_IB_QPT_UD
                    || qp_type == bindings::ib_qp_type_IB_QPT_GSI,
                kernel_dma,
            }
        }
    }

    /// The memory of `sge`, if it names memory mapped for the device's DMA (see [`MappedBuf`]).
    fn mapped(&self, sge: Sge) -> Result<MappedBuf> {
        let (dev, lkey) = self.kernel_dma.ok_or(EINVAL)?;
        if sge.lkey != lkey || sge.addr.checked_add(u64::from(sge.length)).is_none() {
            return Err(EINVAL);
        }
        Ok(MappedBuf {
            // SAFETY: The DMA device of a live RDMA device is a live device.
            dev: unsafe { Device::get_device(dev) },
            addr: sge.addr,
            len: sge.length,
        })
    }
}

/// Memory a kernel consumer names in a work request by the bus address it mapped it at for the
/// device's DMA (`ib_dma_map_single()` and the like, with the protection domain's local DMA
/// lkey, as the MAD layer's buffers are), for a driver that carries a queue pair in software:
/// its bytes never reach the device, and the driver copies them.
///
/// Only requests posted by kernel consumers make one ([`SendWr::mapped`], [`RecvWr::mapped`]).
/// A consumer keeps the memory mapped until the request completes, so the driver reads or
/// writes it only until it reports that completion (or the queue pair is destroyed), as a device
/// would.
///
/// # Examples
///
/// ```
/// use kernel::{
///     prelude::*,
///     rdma::{
///         MappedBuf,
///         RecvWr, //
///     },
/// };
///
/// // Fills the first buffer of a receive request with `data`, if it has room.
/// fn fill(wr: &RecvWr<'_>, data: &[u8]) -> Result {
///     let sge = wr.sges().next().ok_or(EINVAL)?;
///     let buf: MappedBuf = wr.mapped(sge)?;
///     buf.write(0, data)
/// }
/// ```
pub struct MappedBuf {
    dev: ARef<Device>,
    addr: u64,
    len: u32,
}

impl MappedBuf {
    /// The buffer's length in bytes.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn copy(&self, offset: u32, buf: *mut u8, len: usize, to_mapping: bool) -> Result {
        let end = u64::from(offset) + len as u64;
        if end > u64::from(self.len) {
            return Err(EINVAL);
        }
        // SAFETY: `addr + offset .. + len` lies in the buffer (checked), which the consumer
        // mapped for `dev` and keeps mapped while its request is outstanding (the type's
        // contract); `buf` is valid for `len` bytes in the direction asked.
        to_result(unsafe {
            bindings::ib_copy_dma_mapped(
                self.dev.as_raw(),
                self.addr + u64::from(offset),
                buf.cast(),
                len,
                to_mapping,
            )
        })
        .map_err(|e| if e == EINVAL { EFAULT } else { e })
    }

    /// Copies `out.len()` bytes of the buffer from `offset` into `out`.
    pub fn read(&self, offset: u32, out: &mut [u8]) -> Result {
        self.copy(offset, out.as_mut_ptr(), out.len(), false)
    }

    /// Copies `data` into the buffer at `offset`.
    pub fn write(&self, offset: u32, data: &[u8]) -> Result {
        self.copy(offset, data.as_ptr().cast_mut(), data.len(), true)
    }
}

/// The datagram part of a send work request on an unreliable-datagram queue pair
/// (`struct ib_ud_wr`).
///
/// # Examples
///
/// ```
/// use kernel::{
///     prelude::*,
///     rdma::{
///         self,
///         SendWr,
///         UdWr, //
///     },
/// };
///
/// // The driver's part of an address handle: the peer's MAC address.
/// struct MyAh {
///     dmac: [u8; 6],
/// }
///
/// // Where a datagram goes: the peer's MAC address and queue pair.
/// fn destination<T: rdma::Driver<Ah = MyAh>>(wr: &SendWr<'_, T>) -> Result<([u8; 6], u32)> {
///     let ud: UdWr<'_, T> = wr.ud()?;
///     Ok((ud.ah.data().dmac, ud.remote_qpn))
/// }
/// ```
pub struct UdWr<'a, T: Driver> {
    /// Where the datagram goes: an address handle of the queue pair's device.
    pub ah: &'a Ah<T>,
    /// The destination queue pair.
    pub remote_qpn: u32,
    /// The Q_Key the consumer asks for (bit 31 set: use the queue pair's own).
    pub remote_qkey: u32,
}

impl<'a, T: Driver> SendWr<'a, T> {
    /// The consumer's identifier of the request, returned in its completion.
    pub fn wr_id(&self) -> u64 {
        // SAFETY: Both union views are 64 bits of plain data; the completion gives back what
        // the consumer put.
        unsafe { self.raw.__bindgen_anon_1.wr_id }
    }

    /// The operation, `None` for one this abstraction does not name.
    pub fn opcode(&self) -> Option<WrOpcode> {
        WrOpcode::from_raw(self.raw.opcode)
    }

    /// The flags.
    pub fn flags(&self) -> SendFlags {
        // CAST: the flags are a set of bits.
        SendFlags(self.raw.send_flags as u32)
    }

    /// The number of scatter/gather entries.
    pub fn num_sge(&self) -> usize {
        usize::try_from(self.raw.num_sge).unwrap_or(0)
    }

    /// The scatter/gather entries.
    pub fn sges(&self) -> impl Iterator<Item = Sge> + 'a {
        // SAFETY: The consumer passes `num_sge` entries at `sg_list`.
        unsafe { sges(self.raw.sg_list, self.raw.num_sge) }
    }

    /// Copies the payload of an inline request (flag [`SendFlag::Inline`]) into `buf` and
    /// returns its length; `EINVAL` if it does not fit or the request is not inline.
    pub fn copy_inline(&self, buf: &mut [u8]) -> crate::error::Result<usize> {
        if !self.flags().contains(SendFlag::Inline) {
            return Err(crate::error::code::EINVAL);
        }
        let mut len = 0usize;
        for sge in self.sges() {
            let n = usize::try_from(sge.length)?;
            let end = len.checked_add(n).ok_or(crate::error::code::EINVAL)?;
            let dst = buf.get_mut(len..end).ok_or(crate::error::code::EINVAL)?;
            // SAFETY: With `IB_SEND_INLINE`, kernel consumers pass kernel virtual addresses of
            // `length` readable bytes that stay valid for the duration of the post.
            let src = unsafe { core::slice::from_raw_parts(sge.addr as usize as *const u8, n) };
            dst.copy_from_slice(src);
            len = end;
        }
        Ok(len)
    }

    /// The immediate data, in network byte order as the consumer gave it.
    pub fn imm_data_be(&self) -> u32 {
        // SAFETY: Both union views are 32 bits of plain data.
        unsafe { self.raw.ex.imm_data }
    }

    /// The key to invalidate (send with invalidate, read with invalidate, local invalidate).
    pub fn invalidate_rkey(&self) -> u32 {
        // SAFETY: As above.
        unsafe { self.raw.ex.invalidate_rkey }
    }

    /// The memory `sge` (one of this request's) names, if the request is a kernel consumer's and
    /// the entry has the local DMA lkey; `EINVAL` otherwise.
    pub fn mapped(&self, sge: Sge) -> Result<MappedBuf> {
        self.qp.mapped(sge)
    }

    /// The datagram part of a request posted to an unreliable-datagram (or GSI) queue pair;
    /// `EINVAL` for a request posted to another queue pair, or whose address handle is missing
    /// or belongs to another device.
    pub fn ud(&self) -> crate::error::Result<UdWr<'a, T>> {
        if !self.qp.datagram {
            return Err(crate::error::code::EINVAL);
        }
        // SAFETY: Requests posted to datagram queue pairs are the `wr` of an `ib_ud_wr`.
        let u = unsafe { &*core::ptr::from_ref(self.raw).cast::<bindings::ib_ud_wr>() };
        // SAFETY: A non-NULL handle is a live address handle of some device, whose header may
        // be read, while the consumer posts it.
        let same_device = !u.ah.is_null() && unsafe { (*u.ah).device } == self.qp.device;
        if !same_device {
            return Err(crate::error::code::EINVAL);
        }
        Ok(UdWr {
            // SAFETY: An address handle of this device: one `create_ah` made (the core creates
            // them only through it), live while the consumer posts it.
            ah: unsafe { Ah::<T>::from_raw(u.ah) },
            remote_qpn: u.remote_qpn,
            remote_qkey: u.remote_qkey,
        })
    }

    /// The remote address and key of an RDMA Read or Write.
    pub fn rdma(&self) -> Option<(u64, u32)> {
        matches!(
            self.opcode()?,
            WrOpcode::RdmaWrite
                | WrOpcode::RdmaWriteImm
                | WrOpcode::RdmaRead
                | WrOpcode::RdmaReadInv
        )
        .then(|| {
            // SAFETY: Requests with these opcodes are the `wr` of an `ib_rdma_wr`.
            let r = unsafe { &*core::ptr::from_ref(self.raw).cast::<bindings::ib_rdma_wr>() };
            (r.remote_addr, r.rkey)
        })
    }

    /// The remote address, key, compare/add and swap operands of an atomic.
    pub fn atomic(&self) -> Option<(u64, u32, u64, u64)> {
        matches!(
            self.opcode()?,
            WrOpcode::AtomicCmpSwp | WrOpcode::AtomicFetchAdd
        )
        .then(|| {
            // SAFETY: Requests with these opcodes are the `wr` of an `ib_atomic_wr`.
            let a = unsafe { &*core::ptr::from_ref(self.raw).cast::<bindings::ib_atomic_wr>() };
            (a.remote_addr, a.rkey, a.compare_add, a.swap)
        })
    }

    /// The region, new key and access rights of a fast registration.
    pub fn reg(&self) -> Option<(&'a Mr<T>, u32, AccessFlags)> {
        (self.opcode()? == WrOpcode::RegMr).then(|| {
            // SAFETY: Requests with this opcode are the `wr` of an `ib_reg_wr`, whose region is
            // one of this device's (the core allocated it through `alloc_mr`) and live while
            // the consumer posts it.
            unsafe {
                let r = &*core::ptr::from_ref(self.raw).cast::<bindings::ib_reg_wr>();
                // CAST: the rights are a set of bits.
                let access = AccessFlags::from_raw(r.access as u32);
                (Mr::<T>::from_raw_ref(r.mr), r.key, access)
            }
        })
    }
}

/// The requests of a chain, in order.
///
/// # Examples
///
/// ```
/// use kernel::rdma::{
///     self,
///     SendWrs, //
/// };
///
/// // How many work requests a chain holds, to check there is room for them all.
/// fn chain_len<T: rdma::Driver>(wrs: SendWrs<'_, T>) -> usize {
///     wrs.count()
/// }
/// ```
pub struct SendWrs<'a, T: Driver> {
    next: *const bindings::ib_send_wr,
    qp: QpOf,
    _p: PhantomData<(&'a bindings::ib_send_wr, T)>,
}

impl<'a, T: Driver> Iterator for SendWrs<'a, T> {
    type Item = SendWr<'a, T>;

    fn next(&mut self) -> Option<Self::Item> {
        // SAFETY: The chain is valid for `'a` (see `SendWrs::from_raw`).
        let raw = unsafe { self.next.as_ref()? };
        self.next = raw.next;
        Some(SendWr {
            raw,
            qp: self.qp,
            _p: PhantomData,
        })
    }
}

impl<T: Driver> SendWrs<'_, T> {
    /// # Safety
    ///
    /// `wr` must be `NULL` or the head of a valid chain for `'a`, posted to `qp`, a live queue
    /// pair.
    pub(crate) unsafe fn from_raw(
        wr: *const bindings::ib_send_wr,
        qp: *const bindings::ib_qp,
    ) -> Self {
        Self {
            next: wr,
            // SAFETY: Guaranteed by the caller.
            qp: unsafe { QpOf::of(qp) },
            _p: PhantomData,
        }
    }
}

/// A receive work request of a kernel consumer.
///
/// # Examples
///
/// ```
/// use kernel::{
///     prelude::*,
///     rdma::RecvWr, //
/// };
///
/// // A device whose receive work requests take one scatter/gather entry.
/// fn single_buffer(wr: &RecvWr<'_>) -> Result<(u64, u64, u32)> {
///     if wr.num_sge() != 1 {
///         return Err(EINVAL);
///     }
///     let sge = wr.sges().next().ok_or(EINVAL)?;
///     Ok((wr.wr_id(), sge.addr, sge.length))
/// }
/// ```
pub struct RecvWr<'a> {
    raw: &'a bindings::ib_recv_wr,
    qp: QpOf,
}

impl<'a> RecvWr<'a> {
    /// The consumer's identifier of the request.
    pub fn wr_id(&self) -> u64 {
        // SAFETY: Both union views are 64 bits of plain data.
        unsafe { self.raw.__bindgen_anon_1.wr_id }
    }

    /// The number of scatter/gather entries.
    pub fn num_sge(&self) -> usize {
        usize::try_from(self.raw.num_sge).unwrap_or(0)
    }

    /// The scatter/gather entries.
    pub fn sges(&self) -> impl Iterator<Item = Sge> + 'a {
        // SAFETY: The consumer passes `num_sge` entries at `sg_list`.
        unsafe { sges(self.raw.sg_list, self.raw.num_sge) }
    }

    /// The memory `sge` (one of this request's) names, if the request is a kernel consumer's and
    /// the entry has the local DMA lkey; `EINVAL` otherwise.
    pub fn mapped(&self, sge: Sge) -> Result<MappedBuf> {
        self.qp.mapped(sge)
    }
}

/// The receive requests of a chain, in order.
///
/// # Examples
///
/// ```
/// use kernel::{
///     prelude::*,
///     rdma::RecvWrs, //
/// };
///
/// // Posts a chain of receive work requests (`DeviceOps::post_recv`) to a queue with `room`
/// // free entries.
/// fn post_recv(wrs: RecvWrs<'_>, room: usize) -> core::result::Result<(), (Error, usize)> {
///     for (i, wr) in wrs.enumerate() {
///         if i >= room {
///             return Err((ENOMEM, i));
///         }
///         pr_debug!("receive WR {:#x} in slot {i}\n", wr.wr_id());
///     }
///     Ok(())
/// }
/// ```
pub struct RecvWrs<'a> {
    next: *const bindings::ib_recv_wr,
    qp: QpOf,
    _p: PhantomData<&'a bindings::ib_recv_wr>,
}

impl<'a> Iterator for RecvWrs<'a> {
    type Item = RecvWr<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        // SAFETY: The chain is valid for `'a`.
        let raw = unsafe { self.next.as_ref()? };
        self.next = raw.next;
        Some(RecvWr { raw, qp: self.qp })
    }
}

impl RecvWrs<'_> {
    /// # Safety
    ///
    /// `wr` must be `NULL` or the head of a valid chain for `'a`, posted to `qp`, a live queue
    /// pair.
    pub(crate) unsafe fn from_raw(
        wr: *const bindings::ib_recv_wr,
        qp: *const bindings::ib_qp,
    ) -> Self {
        Self {
            next: wr,
            // SAFETY: Guaranteed by the caller.
            qp: unsafe { QpOf::of(qp) },
            _p: PhantomData,
        }
    }
}

c_enum! {
    /// The status of a work completion (`enum ib_wc_status`).
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::WcStatus;
    ///
    /// // Flushed completions are the normal end of a queue pair in the error state.
    /// fn is_real_error(status: WcStatus) -> bool {
    ///     !matches!(status, WcStatus::Success | WcStatus::WrFlushErr)
    /// }
    ///
    /// assert!(is_real_error(WcStatus::RemAccessErr));
    /// assert!(!is_real_error(WcStatus::WrFlushErr));
    /// assert_eq!(WcStatus::Success.to_raw(), 0);
    /// ```
    pub enum WcStatus {
        /// Success.
        Success = bindings::ib_wc_status_IB_WC_SUCCESS,
        /// Local length error.
        LocLenErr = bindings::ib_wc_status_IB_WC_LOC_LEN_ERR,
        /// Local QP operation error.
        LocQpOpErr = bindings::ib_wc_status_IB_WC_LOC_QP_OP_ERR,
        /// Local protection error.
        LocProtErr = bindings::ib_wc_status_IB_WC_LOC_PROT_ERR,
        /// Flushed.
        WrFlushErr = bindings::ib_wc_status_IB_WC_WR_FLUSH_ERR,
        /// Local access error.
        LocAccessErr = bindings::ib_wc_status_IB_WC_LOC_ACCESS_ERR,
        /// Remote invalid request.
        RemInvReqErr = bindings::ib_wc_status_IB_WC_REM_INV_REQ_ERR,
        /// Remote access error.
        RemAccessErr = bindings::ib_wc_status_IB_WC_REM_ACCESS_ERR,
        /// Remote operation error.
        RemOpErr = bindings::ib_wc_status_IB_WC_REM_OP_ERR,
        /// Transport retry counter exceeded.
        RetryExcErr = bindings::ib_wc_status_IB_WC_RETRY_EXC_ERR,
        /// RNR retry counter exceeded.
        RnrRetryExcErr = bindings::ib_wc_status_IB_WC_RNR_RETRY_EXC_ERR,
        /// General error.
        GeneralErr = bindings::ib_wc_status_IB_WC_GENERAL_ERR,
    }
}

c_enum! {
    /// The operation of a work completion (`enum ib_wc_opcode`).
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::WcOpcode;
    ///
    /// // Whether a completion is of the receive queue.
    /// fn is_receive(op: WcOpcode) -> bool {
    ///     matches!(op, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm)
    /// }
    ///
    /// assert!(is_receive(WcOpcode::RecvRdmaWithImm));
    /// assert!(!is_receive(WcOpcode::RdmaWrite));
    /// ```
    pub enum WcOpcode {
        /// Send.
        Send = bindings::ib_wc_opcode_IB_WC_SEND,
        /// RDMA Write.
        RdmaWrite = bindings::ib_wc_opcode_IB_WC_RDMA_WRITE,
        /// RDMA Read.
        RdmaRead = bindings::ib_wc_opcode_IB_WC_RDMA_READ,
        /// Compare and swap.
        CompSwap = bindings::ib_wc_opcode_IB_WC_COMP_SWAP,
        /// Fetch and add.
        FetchAdd = bindings::ib_wc_opcode_IB_WC_FETCH_ADD,
        /// Local invalidate.
        LocalInv = bindings::ib_wc_opcode_IB_WC_LOCAL_INV,
        /// Fast registration.
        RegMr = bindings::ib_wc_opcode_IB_WC_REG_MR,
        /// Receive.
        Recv = bindings::ib_wc_opcode_IB_WC_RECV,
        /// Receive of an RDMA Write with immediate data.
        RecvRdmaWithImm = bindings::ib_wc_opcode_IB_WC_RECV_RDMA_WITH_IMM,
    }
}

crate::impl_flags!(
    /// Flags of a work completion (`enum ib_wc_flags`).
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{
    ///     WcFlag,
    ///     WcFlags, //
    /// };
    ///
    /// let flags: WcFlags = WcFlag::WithImm.into();
    /// assert!(flags.contains(WcFlag::WithImm));
    /// assert!(!flags.contains(WcFlag::WithInvalidate));
    /// assert_eq!(u32::from(WcFlags::empty()), 0);
    /// ```
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct WcFlags(u32);

    /// One flag of a work completion.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{
    ///     QpEvents,
    ///     Wc,
    ///     WcFlag,
    ///     WcOpcode,
    ///     WcStatus, //
    /// };
    ///
    /// // Completes a received send with immediate data (`DeviceOps::poll_cq`).
    /// fn recv_with_imm(wc: &mut Wc, qp: &QpEvents, wr_id: u64, len: u32, imm_be: u32) {
    ///     let flags = WcFlag::WithImm.into();
    ///     wc.set(qp, wr_id, WcStatus::Success, WcOpcode::Recv, 0, len, flags, imm_be);
    /// }
    /// ```
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum WcFlag {
        /// The immediate data is valid.
        WithImm = bindings::ib_wc_flags_IB_WC_WITH_IMM,
        /// The invalidated key is valid.
        WithInvalidate = bindings::ib_wc_flags_IB_WC_WITH_INVALIDATE,
    }
);

c_enum! {
    /// The network header of a RoCEv2 datagram (`enum rdma_network_type`).
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{
    ///     NetworkType,
    ///     Wc, //
    /// };
    ///
    /// // Adds the datagram part of a receive completion, from the IP version of the packet.
    /// fn datagram(wc: &mut Wc, src_qp: u32, ipv6: bool) {
    ///     let net = if ipv6 {
    ///         NetworkType::Ipv6
    ///     } else {
    ///         NetworkType::Ipv4
    ///     };
    ///     wc.set_datagram(src_qp, 0, net);
    /// }
    /// ```
    pub enum NetworkType {
        /// IPv4.
        Ipv4 = bindings::rdma_network_type_RDMA_NETWORK_IPV4,
        /// IPv6.
        Ipv6 = bindings::rdma_network_type_RDMA_NETWORK_IPV6,
    }
}

/// A work completion the driver fills in.
///
/// # Examples
///
/// ```
/// use kernel::rdma::{
///     self,
///     Cq,
///     QpEvents,
///     Wc,
///     WcFlags,
///     WcOpcode,
///     WcStatus, //
/// };
///
/// // The driver's part of a completion queue: the completions of a queue pair, known in advance.
/// struct MyCq {
///     qp: QpEvents,
///     done: [(u64, u32); 2],
/// }
///
/// // Polls a completion queue (`DeviceOps::poll_cq`).
/// fn poll_cq<T: rdma::Driver<Cq = MyCq>>(cq: &Cq<T>, wc: &mut [Wc]) -> usize {
///     let cq = cq.data();
///     let n = wc.len().min(cq.done.len());
///     for (wc, &(wr_id, len)) in wc.iter_mut().zip(cq.done.iter()).take(n) {
///         let flags = WcFlags::default();
///         wc.set(&cq.qp, wr_id, WcStatus::Success, WcOpcode::Send, 0, len, flags, 0);
///     }
///     n
/// }
/// ```
#[repr(transparent)]
pub struct Wc(bindings::ib_wc);

impl Wc {
    /// Writes the whole completion: everything not given is zero.
    #[allow(clippy::too_many_arguments)]
    pub fn set(
        &mut self,
        qp: &QpEvents,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        vendor_err: u32,
        byte_len: u32,
        flags: WcFlags,
        ex: u32,
    ) {
        let mut wc: bindings::ib_wc = pin_init::zeroed();
        wc.__bindgen_anon_1.wr_id = wr_id;
        wc.status = status.to_raw();
        wc.opcode = opcode.to_raw();
        wc.vendor_err = vendor_err;
        wc.byte_len = byte_len;
        wc.qp = qp.raw_ptr();
        // CAST: the flags are a set of small bits.
        wc.wc_flags = u32::from(flags) as i32;
        wc.ex.imm_data = ex;
        self.0 = wc;
    }

    /// Adds what a receive completion of a RoCEv2 datagram queue pair reports: the sender's
    /// queue pair and service level, and the network header the receive buffer starts with
    /// (40 bytes, the global routing header area: an IPv6 header, or an IPv4 header in its last
    /// 20 bytes). Call after [`Wc::set`].
    pub fn set_datagram(&mut self, src_qp: u32, sl: u8, net: NetworkType) {
        self.0.src_qp = src_qp;
        self.0.sl = sl;
        self.0.pkey_index = 0;
        // CAST: both fit the `u8` field.
        self.0.network_hdr_type = net.to_raw() as u8;
        // CAST: the flags are small bits.
        self.0.wc_flags |= (bindings::ib_wc_flags_IB_WC_GRH
            | bindings::ib_wc_flags_IB_WC_WITH_NETWORK_HDR_TYPE) as i32;
    }

    /// # Safety
    ///
    /// `wc` must point to `n` writable completions, valid for `'a`.
    pub(crate) unsafe fn slice<'a>(wc: *mut bindings::ib_wc, n: usize) -> &'a mut [Wc] {
        // SAFETY: `Wc` is transparent over `ib_wc`; the caller guarantees the rest.
        unsafe { core::slice::from_raw_parts_mut(wc.cast(), n) }
    }
}
