// SPDX-License-Identifier: GPL-2.0

//! Work requests and work completions of kernel consumers (`struct ib_send_wr`,
//! `struct ib_recv_wr`, `struct ib_wc`).
//!
//! Kernel users post chains of work requests to a queue pair and poll completions from a
//! completion queue without going through user space; these typed views let a driver read the
//! requests and write the completions without touching the C layout.

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
use crate::bindings;
use core::marker::PhantomData;

c_enum! {
    /// The operation of a send work request (`enum ib_wr_opcode`).
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
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct SendFlags(u32);

    /// One flag of a send work request.
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
}

/// The datagram part of a send work request on an unreliable-datagram queue pair
/// (`struct ib_ud_wr`).
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
        // SAFETY: Guaranteed by the caller.
        let (device, qp_type) = unsafe { ((*qp).device, (*qp).qp_type) };
        Self {
            next: wr,
            qp: QpOf {
                device,
                datagram: qp_type == bindings::ib_qp_type_IB_QPT_UD
                    || qp_type == bindings::ib_qp_type_IB_QPT_GSI,
            },
            _p: PhantomData,
        }
    }
}

/// A receive work request of a kernel consumer.
pub struct RecvWr<'a> {
    raw: &'a bindings::ib_recv_wr,
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
}

/// The receive requests of a chain, in order.
pub struct RecvWrs<'a> {
    next: *const bindings::ib_recv_wr,
    _p: PhantomData<&'a bindings::ib_recv_wr>,
}

impl<'a> Iterator for RecvWrs<'a> {
    type Item = RecvWr<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        // SAFETY: The chain is valid for `'a`.
        let raw = unsafe { self.next.as_ref()? };
        self.next = raw.next;
        Some(RecvWr { raw })
    }
}

impl RecvWrs<'_> {
    /// # Safety
    ///
    /// `wr` must be `NULL` or the head of a valid chain for `'a`.
    pub(crate) unsafe fn from_raw(wr: *const bindings::ib_recv_wr) -> Self {
        Self {
            next: wr,
            _p: PhantomData,
        }
    }
}

c_enum! {
    /// The status of a work completion (`enum ib_wc_status`).
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
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct WcFlags(u32);

    /// One flag of a work completion.
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
    pub enum NetworkType {
        /// IPv4.
        Ipv4 = bindings::rdma_network_type_RDMA_NETWORK_IPV4,
        /// IPv6.
        Ipv6 = bindings::rdma_network_type_RDMA_NETWORK_IPV6,
    }
}

/// A work completion the driver fills in.
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
