// SPDX-License-Identifier: GPL-2.0

//! Verbs objects in the adapter: protection domains, completion queues, queue pairs and memory
//! regions (erdma-hw 3.5, 5.1, 6, 7.2, 8).
//!
//! Everything a user passes is validated before the adapter hears of it: udata sizes and
//! reserved fields, queue depths against the adapter's limits, queue buffers against the depth
//! they must hold, address ranges against overflow. A rejected request logs nothing (user space
//! can repeat it at will) and leaves nothing behind.

use core::sync::atomic::{
    AtomicU32,
    Ordering, //
};
use kernel::{
    device,
    dma::Coherent,
    new_mutex,
    page::{
        PAGE_SHIFT,
        PAGE_SIZE, //
    },
    prelude::*,
    rbtree::RBTreeNode,
    rdma::{
        self,
        qp::{
            self as ibqp,
            udp_sport, //
        },
        umem::access,
        NewMr, QpAttr, QpAttrMask, QpAttrOut, QpCap, QpInitAttr, QpState, QpType, RecvWrs, SendWrs,
        UData, Umem, UserMrReq, Wc,
    },
    sync::{
        Arc,
        Mutex, //
    },
};

use crate::{
    cmdq::Wait,
    commands::{
        AddressVector,
        CreateCq,
        CreateQp,
        DeregMr,
        DestroyCq,
        DestroyQp,
        ModifyQpRoce,
        QueryQp,
        RegMr, //
    },
    kverbs::{
        CqEntry,
        KernelCq,
        KernelQp,
        QpEntry, //
    },
    ring::{
        lower,
        read64,
        upper,
        write64, //
    },
    verbs::{
        IbData,
        UCtx, //
    },
};

/// Bytes of a send-queue basic block and of a receive-queue entry.
const WQEBB_SIZE: u64 = 32;
/// Bytes of a completion-queue entry.
const CQE_SIZE: u64 = 32;
/// Send-queue basic blocks reserved per work request.
const WQEBBS_PER_WR: u32 = 4;
/// Work requests of a send queue at most.
pub(crate) const MAX_SEND_WR: u32 = 8192;
/// Scatter/gather entries of a send and a receive work request at most.
pub(crate) const MAX_SEND_SGE: u32 = 6;
const MAX_RECV_SGE: u32 = 1;
/// Inline bytes of a send work request at most.
pub(crate) const MAX_INLINE: u32 = 96;
/// Protection domains at most.
pub(crate) const MAX_PD: u32 = 128 * 1024;
/// Page sizes the adapter accepts for queue buffers: 4 KiB to 512 KiB for queue pairs, to
/// 32 MiB for completion queues, to 1 GiB for memory regions.
const QP_PAGE_SIZES: u64 = 0x000f_f000;
const CQ_PAGE_SIZES: u64 = 0x03ff_f000;
pub(crate) const MR_PAGE_SIZES: u64 = 0x7fff_f000;
/// Entries an MTT carries inline in CREATE_QP / REG_MR.
const INLINE_MTT: usize = 4;
/// Kernel queues: one contiguous buffer described as one "page" of 1 MiB (QPs) or 32 MiB
/// (CQs), page-size codes 8 and 13.
const KERNEL_QP_PAGE_CODE: u32 = 8;
const KERNEL_CQ_PAGE_CODE: u32 = 13;
const KERNEL_CQ_BYTES: u64 = 32 << 20;
/// QP number of the GSI QP on RoCE adapters, never handed to user QPs.
const GSI_QPN: u32 = 1;
/// QP types of CREATE_QP.
const QP_TYPE_UD: u32 = 1;
/// MR types of REG_MR.
const MR_TYPE_NORMAL: u32 = 0;
const MR_TYPE_FRMR: u32 = 1;
const MR_TYPE_DMA: u32 = 2;
/// Pages of a fast-registration region at most (the C driver allows 512 Ki; 512 is what
/// both report as `max_fast_reg_page_list_len`).
const MAX_FRMR_PAGES: u32 = 512 * 1024;
/// Access bits of REG_MR.
const MR_ACC_RA: u32 = 1 << 0;
const MR_ACC_LR: u32 = 1 << 1;
const MR_ACC_LW: u32 = 1 << 2;
const MR_ACC_RR: u32 = 1 << 3;
const MR_ACC_RW: u32 = 1 << 4;

/// The driver's request in CREATE_CQ and CREATE_QP (`struct erdma_ureq_create_cq/qp`).
#[repr(C)]
#[derive(FromBytes, IntoBytes, Default)]
struct CreateReq {
    db_va: u64,
    qbuf_va: u64,
    qbuf_len: u32,
    reserved: u32,
}

/// The response to CREATE_CQ (`struct erdma_uresp_create_cq`).
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable)]
struct CreateCqResp {
    cqn: u32,
    depth: u32,
}

/// The response to CREATE_QP (`struct erdma_uresp_create_qp`).
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable)]
struct CreateQpResp {
    qpn: u32,
    sq_depth: u32,
    rq_depth: u32,
    rq_offset: u32,
}

/// A protection domain: its number.
pub(crate) struct Pd {
    pub(crate) pdn: u32,
}

/// How the pages of a buffer reach the adapter: inline entries (level 0) or an array of page
/// addresses the adapter reads (level 1).
struct Mtt {
    page_shift: u32,
    count: u32,
    level: u32,
    /// Level 0: the entries; level 1: the array's address in entry 0.
    entries: [u64; INLINE_MTT],
    /// Byte offset of the buffer's start in its first page.
    offset: u64,
    _array: Option<Coherent<[u64]>>,
    /// Multi-level tables, bottom level first: pages of entries (erdma-hw 6).
    _levels: KVec<KVec<Coherent<[u64]>>>,
}

/// Entries of one MTT page of a multi-level table.
const MTT_PAGE_ENTRIES: usize = PAGE_SIZE / 8;
/// Levels a multi-level table has at most.
const MAX_MTT_LEVELS: u32 = 3;

/// Stores `addrs` in as many pages of entries as they need; returns the pages.
fn mtt_pages(
    dev: &device::Device<device::Bound>,
    addrs: impl Iterator<Item = u64>,
) -> Result<KVec<Coherent<[u64]>>> {
    let mut pages = KVec::new();
    let mut buf = KVec::with_capacity(MTT_PAGE_ENTRIES, GFP_KERNEL)?;
    let flush = |buf: &mut KVec<u64>, pages: &mut KVec<Coherent<[u64]>>| -> Result {
        // Unused entries of the last page stay zero.
        buf.resize(MTT_PAGE_ENTRIES, 0, GFP_KERNEL)?;
        pages.push(Coherent::from_slice(dev, buf, GFP_KERNEL)?, GFP_KERNEL)?;
        buf.clear();
        Ok(())
    };
    for addr in addrs {
        buf.push(addr, GFP_KERNEL)?;
        if buf.len() == MTT_PAGE_ENTRIES {
            flush(&mut buf, &mut pages)?;
        }
    }
    if !buf.is_empty() {
        flush(&mut buf, &mut pages)?;
    }
    Ok(pages)
}

impl Mtt {
    /// Describes `umem`, which the adapter sees at `va`, in the largest page size of
    /// `page_sizes`; inline when it has at most `inline_max` pages.
    fn new(
        dev: &device::Device<device::Bound>,
        umem: &Umem,
        va: u64,
        page_sizes: u64,
        inline_max: usize,
    ) -> Result<Self> {
        let pgsz = umem.find_best_pgsz(page_sizes, va).ok_or(EINVAL)?;
        let count = umem.num_dma_blocks(pgsz);
        let mut mtt = Self {
            page_shift: pgsz.trailing_zeros(),
            count: count.try_into()?,
            level: 0,
            entries: [0; INLINE_MTT],
            offset: va & (pgsz - 1),
            _array: None,
            _levels: KVec::new(),
        };
        if count <= inline_max {
            for (slot, addr) in mtt.entries.iter_mut().zip(umem.dma_blocks(pgsz)) {
                *slot = addr;
            }
        } else {
            let mut pages = KVec::with_capacity(count, GFP_KERNEL)?;
            for addr in umem.dma_blocks(pgsz) {
                pages.push(addr, GFP_KERNEL)?;
            }
            let array = Coherent::from_slice(dev, &pages, GFP_KERNEL)?;
            mtt.level = 1;
            mtt.entries[0] = array.dma_address();
            mtt._array = Some(array);
        }
        Ok(mtt)
    }

    /// Describes a memory region: inline up to four pages, otherwise in page-sized tables of
    /// up to three levels, each level holding the addresses of the pages of the level below,
    /// for adapters that walk them (capability MTT_VA).
    /// With `inline_ok` false, a table is used even for a few pages (the version-1 format
    /// of REG_MR overlays inline entries).
    fn new_multilevel(
        dev: &device::Device<device::Bound>,
        umem: &Umem,
        va: u64,
        page_sizes: u64,
        inline_ok: bool,
    ) -> Result<Self> {
        let pgsz = umem.find_best_pgsz(page_sizes, va).ok_or(EINVAL)?;
        let count = umem.num_dma_blocks(pgsz);
        if count == 1 || (inline_ok && count <= INLINE_MTT) {
            return Self::new(dev, umem, va, page_sizes, INLINE_MTT);
        }
        let mut levels = KVec::new();
        levels.push(mtt_pages(dev, umem.dma_blocks(pgsz))?, GFP_KERNEL)?;
        while levels.last().map_or(0, |l| l.len()) > 1 {
            if levels.len() as u32 >= MAX_MTT_LEVELS {
                return Err(EINVAL);
            }
            let below = levels.last().ok_or(EINVAL)?;
            let next = mtt_pages(dev, below.iter().map(|p| p.dma_address()))?;
            levels.push(next, GFP_KERNEL)?;
        }
        let top = levels
            .last()
            .and_then(|l| l.first())
            .map(|p| p.dma_address())
            .ok_or(EINVAL)?;
        Ok(Self {
            page_shift: pgsz.trailing_zeros(),
            count: count.try_into()?,
            // CAST: at most 3.
            level: levels.len() as u32,
            entries: [top, 0, 0, 0],
            offset: va & (pgsz - 1),
            _array: None,
            _levels: levels,
        })
    }

    /// The page-size code of CREATE_CQ / CREATE_QP: log2(page size) - 12.
    fn page_code(&self) -> u32 {
        self.page_shift - 12
    }
}

/// A user doorbell record: the pinned page holding it and the record's DMA address.
struct DbRecord {
    _page: Umem,
    dma: u64,
}

impl DbRecord {
    /// Pins the `len` bytes of doorbell record at `va` (8-byte aligned, inside one page).
    fn pin<T: rdma::Driver>(dev: &rdma::Device<T>, va: u64, len: u64) -> Result<Self> {
        let page_size = PAGE_SIZE as u64;
        let offset = va % page_size;
        if !va.is_multiple_of(8) || offset + len > page_size {
            return Err(EINVAL);
        }
        let page = Umem::get(dev, va - offset, PAGE_SIZE, access::LOCAL_WRITE)?;
        let base = page.dma_blocks(page_size).next().ok_or(EFAULT)?;
        Ok(Self {
            dma: base + offset,
            _page: page,
        })
    }
}

/// The user memory of a user completion queue.
struct UserQueue {
    _mtt: Mtt,
    _buf: Umem,
    _dbrec: DbRecord,
}

/// A completion queue: a user one (its ring in user memory) or a kernel one.
pub(crate) struct Cq {
    pub(crate) cqn: u32,
    pub(crate) kernel: Option<Arc<KernelCq>>,
    _user: Option<UserQueue>,
}

/// The state of a queue pair the driver keeps for modify and query.
struct QpShadow {
    state: QpState,
    dest_qpn: u32,
    qkey: u32,
}

/// The user memory of a user queue pair.
struct UserQp {
    rq_offset: u64,
    _sq_mtt: Mtt,
    _rq_mtt: Mtt,
    _sq: Umem,
    _rq: Umem,
    _dbrec: DbRecord,
}

/// What a queue pair holds in the adapter.
pub(crate) struct QpHw {
    qpn: u32,
    qp_type: QpType,
    sq_depth: u32,
    rq_depth: u32,
    sq_sig_all: bool,
    pub(crate) kernel: Option<Arc<KernelQp>>,
    _user: Option<UserQp>,
}

/// A queue pair.
#[pin_data]
pub(crate) struct Qp {
    pub(crate) hw: QpHw,
    #[pin]
    shadow: Mutex<QpShadow>,
}

impl Qp {
    /// A queue pair in RESET around what `IbData::create_qp` made.
    pub(crate) fn new(hw: Result<QpHw>) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            hw: hw?,
            shadow <- new_mutex!(QpShadow {
                state: QpState::Reset,
                dest_qpn: 0,
                qkey: 0,
            }),
        }? Error)
    }
}

/// A memory region.
pub(crate) struct Mr {
    stag: u32,
    _mtt: Option<Mtt>,
    _umem: Option<Umem>,
    /// The page list of a fast-registration region.
    pub(crate) frmr: Option<Frmr>,
}

/// The page list of a fast-registration region: an MTT the adapter reads when a
/// fast-registration work request names the region (erdma-hw 6).
pub(crate) struct Frmr {
    pages: Coherent<[u64]>,
    npages: AtomicU32,
}

impl Frmr {
    /// The number of pages mapped last.
    pub(crate) fn npages(&self) -> u32 {
        self.npages.load(Ordering::Relaxed)
    }

    /// Page `i` of the list.
    pub(crate) fn page(&self, i: usize) -> Result<u64> {
        read64(&self.pages, i)
    }
}

/// log2 of a power of two.
fn log2(v: u32) -> u32 {
    v.trailing_zeros()
}

/// `v` rounded up to a power of two, `None` beyond `u32`.
fn pow2(v: u32) -> Option<u32> {
    v.checked_next_power_of_two()
}

/// The adapter's access bits for verbs access flags; local read is always granted.
pub(crate) fn mr_access(flags: u32) -> u32 {
    let mut bits = MR_ACC_LR;
    for (verb, hw) in [
        (access::LOCAL_WRITE, MR_ACC_LW),
        (access::REMOTE_READ, MR_ACC_RR),
        (access::REMOTE_WRITE, MR_ACC_RW),
        (access::REMOTE_ATOMIC, MR_ACC_RA),
    ] {
        if flags & verb != 0 {
            bits |= hw;
        }
    }
    bits
}

/// The adapter's QP state for a verbs state (the same numbering, erdma-hw 3.5).
fn hw_state(state: QpState) -> u32 {
    state.to_raw()
}

impl IbData<'_> {
    fn bound(&self) -> &device::Device<device::Bound> {
        self.hw.pdev.as_ref()
    }

    pub(crate) fn alloc_pd(&self) -> Result<Pd> {
        let pdn = self.ids.lock().pd.alloc()?;
        Ok(Pd { pdn })
    }

    pub(crate) fn dealloc_pd(&self, pd: &Pd) {
        self.ids.lock().pd.free(pd.pdn);
    }

    pub(crate) fn create_cq<T: rdma::Driver<UContext = UCtx>>(
        &self,
        dev: &rdma::Device<T>,
        setup: &rdma::CqSetup<'_, T>,
        udata: &mut UData<'_>,
    ) -> Result<Cq> {
        let attr = setup.attr();
        if attr.cqe == 0 || attr.cqe > (1 << self.caps.max_cqe_log2) || attr.flags != 0 {
            return Err(EINVAL);
        }
        if attr.comp_vector >= self.ceqs {
            return Err(EINVAL);
        }
        let depth = pow2(attr.cqe).ok_or(EINVAL)?;
        let mut cmd = CreateCq {
            cfg1: attr.comp_vector + 1,
            ..Default::default()
        };
        let (kernel, user) = if udata.is_user() {
            let ctx = setup.ucontext().ok_or(EINVAL)?;
            let req: CreateReq = udata.read_in(size_of::<CreateReq>())?;
            // The buffer must hold every entry (the C driver does not check this).
            let need = u64::from(depth) * CQE_SIZE;
            if !req.qbuf_va.is_multiple_of(CQE_SIZE)
                || u64::from(req.qbuf_len) < need
                || req.qbuf_va.checked_add(need).is_none()
            {
                return Err(EINVAL);
            }
            let buf = Umem::get(dev, req.qbuf_va, need as usize, access::LOCAL_WRITE)?;
            let mtt = Mtt::new(self.bound(), &buf, req.qbuf_va, CQ_PAGE_SIZES, 1)?;
            let dbrec = DbRecord::pin(dev, req.db_va, 8)?;
            cmd.cfg0 = mtt.page_code() << 20;
            cmd.addr_lo = lower(mtt.entries[0]);
            cmd.addr_hi = upper(mtt.entries[0]);
            cmd.cfg1 |= (mtt.count << 16) | (mtt.level << 15);
            cmd.dbrec = dbrec.dma;
            // CAST: an offset inside a page of at most 32 MiB.
            cmd.first_offset = mtt.offset as u32;
            if let Some(db) = ctx.db {
                cmd.cfg1 |= 1 << 11;
                cmd.cfg2 = db.cdb.into();
            }
            (
                None,
                Some(UserQueue {
                    _mtt: mtt,
                    _buf: buf,
                    _dbrec: dbrec,
                }),
            )
        } else {
            // One contiguous ring, described as one "page" of 32 MiB.
            if u64::from(depth) * CQE_SIZE > KERNEL_CQ_BYTES {
                return Err(EINVAL);
            }
            (
                Some(Arc::pin_init(
                    KernelCq::new(self.bound(), depth)?,
                    GFP_KERNEL,
                )?),
                None,
            )
        };
        if let Some(k) = &kernel {
            cmd.cfg0 = KERNEL_CQ_PAGE_CODE << 20;
            cmd.addr_lo = lower(k.ring_addr());
            cmd.addr_hi = upper(k.ring_addr());
            cmd.cfg1 |= 1 << 16;
            cmd.dbrec = k.dbrec_addr();
        }

        let entry = Arc::new(
            CqEntry {
                events: setup.events(),
                kernel: kernel.clone(),
            },
            GFP_KERNEL,
        )?;
        let cqn = self.ids.lock().cq.alloc()?;
        if let Some(k) = &kernel {
            k.set_cqn(cqn);
        }
        let node = match RBTreeNode::new(cqn, entry, GFP_KERNEL) {
            Ok(node) => node,
            Err(e) => {
                self.ids.lock().cq.free(cqn);
                return Err(e);
            }
        };
        cmd.cfg0 |= (log2(depth) << 24) | cqn;
        if let Err(e) = self.hw.exec(&cmd, Wait::Sleep) {
            self.ids.lock().cq.free(cqn);
            return Err(e);
        }
        self.hw.cqs.lock().insert(node);
        let cq = Cq {
            cqn,
            kernel,
            _user: user,
        };
        setup.set_cqe(depth);
        if let Err(e) = udata.respond(&CreateCqResp { cqn, depth }) {
            self.destroy_cq(&cq);
            return Err(e);
        }
        Ok(cq)
    }

    pub(crate) fn destroy_cq(&self, cq: &Cq) {
        if let Err(e) = self.hw.exec(&DestroyCq { cqn: cq.cqn }, Wait::Sleep) {
            dev_warn!(
                self.dev(),
                "DESTROY_CQ {} failed: {}\n",
                cq.cqn,
                e.to_errno()
            );
        }
        // After this, the CEQ handler no longer finds the queue.
        drop(self.hw.cqs.lock().remove(&cq.cqn));
        self.ids.lock().cq.free(cq.cqn);
    }

    /// Checks the sizes a queue pair asks for against the adapter's limits (erdma-hw 9.1).
    fn check_qp_cap(&self, cap: &QpCap) -> Result {
        let max_recv = 1u32 << self.caps.max_recv_wr_log2;
        if cap.max_send_wr == 0
            || cap.max_send_wr > MAX_SEND_WR
            || cap.max_recv_wr == 0
            || cap.max_recv_wr > max_recv
            || cap.max_send_sge > MAX_SEND_SGE
            || cap.max_recv_sge > MAX_RECV_SGE
            || cap.max_inline_data > MAX_INLINE
        {
            return Err(EINVAL);
        }
        Ok(())
    }

    pub(crate) fn create_qp<T: rdma::Driver<UContext = UCtx, Pd = Pd, Cq = Cq>>(
        &self,
        dev: &rdma::Device<T>,
        setup: &rdma::QpSetup<'_, T>,
        attr: &QpInitAttr<'_, T>,
        udata: &mut UData<'_>,
    ) -> Result<QpHw> {
        let qp_type = attr.qp_type().ok_or(EOPNOTSUPP)?;
        match qp_type {
            QpType::Rc => {}
            // The RoCE GSI QP of the core's MAD layer: a kernel UD QP with number 1
            // (erdma-hw 7.2). Other UD QPs need address handles from user space, which the
            // provider does not offer.
            QpType::Gsi if self.roce() && !udata.is_user() => {}
            _ => return Err(EOPNOTSUPP),
        }
        if attr.has_srq() || attr.create_flags() != 0 {
            return Err(EOPNOTSUPP);
        }
        let cap = attr.cap();
        self.check_qp_cap(&cap)?;
        let (Some(scq), Some(rcq)) = (attr.send_cq(), attr.recv_cq()) else {
            return Err(EINVAL);
        };
        let sq_depth = pow2(cap.max_send_wr * WQEBBS_PER_WR).ok_or(EINVAL)?;
        let rq_depth = pow2(cap.max_recv_wr).ok_or(EINVAL)?;
        let sq_bytes = u64::from(sq_depth) * WQEBB_SIZE;
        let rq_bytes = u64::from(rq_depth) * WQEBB_SIZE;
        let mut cmd = CreateQp {
            cfg1: (log2(rq_depth) << 20) | setup.pd().data().pdn,
            sq_cfg: scq.data().cqn,
            rq_cfg: rcq.data().cqn,
            ..Default::default()
        };
        let mtt_cfg = |m: &Mtt| (m.offset as u32 & !0xfff) | (m.count << 1) | m.level;

        let (kernel, user) = if udata.is_user() {
            let ctx = setup.ucontext().ok_or(EINVAL)?;
            let req: CreateReq = udata.read_in(size_of::<CreateReq>())?;
            let rq_offset = sq_bytes.next_multiple_of(4096);
            // The buffer must hold both queues (the C driver does not check the receive
            // queue), and queue offsets reach the adapter in 4 KiB units.
            let need = rq_offset + rq_bytes;
            if !req.qbuf_va.is_multiple_of(4096)
                || u64::from(req.qbuf_len) < need
                || req.qbuf_va.checked_add(need).is_none()
            {
                return Err(EINVAL);
            }
            let rq_va = req.qbuf_va + rq_offset;
            let sq = Umem::get(dev, req.qbuf_va, sq_bytes as usize, access::LOCAL_WRITE)?;
            let rq = Umem::get(dev, rq_va, rq_bytes as usize, access::LOCAL_WRITE)?;
            let sq_mtt = Mtt::new(self.bound(), &sq, req.qbuf_va, QP_PAGE_SIZES, INLINE_MTT)?;
            let rq_mtt = Mtt::new(self.bound(), &rq, rq_va, QP_PAGE_SIZES, INLINE_MTT)?;
            let dbrec = DbRecord::pin(dev, req.db_va, 16)?;
            cmd.sq_cfg |= sq_mtt.page_code() << 28;
            cmd.rq_cfg |= rq_mtt.page_code() << 28;
            cmd.sq_addr = sq_mtt.entries[0];
            cmd.rq_addr = rq_mtt.entries[0];
            cmd.sq_mtt_cfg = mtt_cfg(&sq_mtt);
            cmd.rq_mtt_cfg = mtt_cfg(&rq_mtt);
            cmd.sq_dbrec = dbrec.dma;
            cmd.rq_dbrec = dbrec.dma + 8;
            cmd.sq_mtt = [sq_mtt.entries[1], sq_mtt.entries[2], sq_mtt.entries[3]];
            cmd.rq_mtt = [rq_mtt.entries[1], rq_mtt.entries[2], rq_mtt.entries[3]];
            if let Some(db) = ctx.db {
                // CREATE_QP names the "RDB" page for the receive queue (erdma-hw 3.6).
                cmd.sq_cfg |= 1 << 25;
                cmd.db_cfg = (u32::from(db.sq) << 16) | u32::from(db.rdb);
            }
            let user = UserQp {
                rq_offset,
                _sq_mtt: sq_mtt,
                _rq_mtt: rq_mtt,
                _sq: sq,
                _rq: rq,
                _dbrec: dbrec,
            };
            (None, Some(user))
        } else {
            // One contiguous buffer per queue, described as one "page" of 1 MiB.
            // CAST: depths of at most 32768 and 8192 (checked above).
            let k = KernelQp::new(
                self.bound(),
                sq_depth as u16,
                rq_depth as u16,
                attr.sq_sig_all(),
                qp_type == QpType::Gsi,
            )?;
            let k = Arc::pin_init(k, GFP_KERNEL)?;
            cmd.sq_cfg |= KERNEL_QP_PAGE_CODE << 28;
            cmd.rq_cfg |= KERNEL_QP_PAGE_CODE << 28;
            cmd.sq_addr = k.sq_addr();
            cmd.rq_addr = k.rq_addr();
            cmd.sq_mtt_cfg = 1 << 1;
            cmd.rq_mtt_cfg = 1 << 1;
            cmd.sq_dbrec = k.sq_dbrec();
            cmd.rq_dbrec = k.rq_dbrec();
            (Some(k), None)
        };

        let entry = Arc::new(
            QpEntry {
                events: setup.events(),
                kernel: kernel.clone(),
            },
            GFP_KERNEL,
        )?;
        let qpn = if qp_type == QpType::Gsi {
            cmd.cfg2 = QP_TYPE_UD;
            GSI_QPN
        } else {
            let mut ids = self.ids.lock();
            loop {
                let qpn = ids.qp.alloc()?;
                if !(self.roce() && qpn == GSI_QPN) {
                    break qpn;
                }
            }
        };
        let free_qpn = |this: &Self| {
            if qpn != GSI_QPN {
                this.ids.lock().qp.free(qpn);
            }
        };
        if let Some(k) = &kernel {
            k.set_qpn(qpn);
        }
        let node = match RBTreeNode::new(qpn, entry, GFP_KERNEL) {
            Ok(node) => node,
            Err(e) => {
                free_qpn(self);
                return Err(e);
            }
        };
        cmd.cfg0 = (log2(sq_depth) << 20) | qpn;
        if let Err(e) = self.hw.exec(&cmd, Wait::Sleep) {
            free_qpn(self);
            return Err(e);
        }
        self.hw.qps.lock().insert(node);
        setup.set_qp_num(qpn);
        if let Some(u) = &user {
            let resp = CreateQpResp {
                qpn,
                sq_depth,
                rq_depth,
                // CAST: at most 1 MiB.
                rq_offset: u.rq_offset as u32,
            };
            if let Err(e) = udata.respond(&resp) {
                let _ = self.hw.exec(&DestroyQp { qpn }, Wait::Sleep);
                drop(self.hw.qps.lock().remove(&qpn));
                free_qpn(self);
                return Err(e);
            }
        }
        Ok(QpHw {
            qpn,
            qp_type,
            sq_depth,
            rq_depth,
            sq_sig_all: attr.sq_sig_all(),
            kernel,
            _user: user,
        })
    }

    pub(crate) fn destroy_qp(&self, qp: &Qp) {
        let state = qp.shadow.lock().state;
        let qp_hw = &qp.hw;
        if state != QpState::Err && state != QpState::Reset {
            // Stop the queue pair before it goes (erdma-hw 10.11).
            let cmd = ModifyQpRoce {
                cfg: (hw_state(QpState::Err) << 24) | qp_hw.qpn,
                mask: ModifyQpRoce::STATE,
                ..Default::default()
            };
            let _ = self.hw.exec(&cmd, Wait::Sleep);
        }
        if let Err(e) = self.hw.exec(&DestroyQp { qpn: qp_hw.qpn }, Wait::Sleep) {
            dev_warn!(
                self.dev(),
                "DESTROY_QP {} failed: {}\n",
                qp_hw.qpn,
                e.to_errno()
            );
        }
        drop(self.hw.qps.lock().remove(&qp_hw.qpn));
        if qp_hw.qpn != GSI_QPN {
            self.ids.lock().qp.free(qp_hw.qpn);
        }
    }

    /// Modifies a RoCEv2 queue pair (erdma-hw 7.2): checks the transition against the verbs
    /// state machine, then sends the state, Q_Key, address vector, PSNs and destination QPN.
    pub(crate) fn modify_qp(&self, qp: &Qp, attr: &QpAttr<'_>, mask: QpAttrMask) -> Result {
        let mut shadow = qp.shadow.lock();
        let cur = if mask.has(QpAttrMask::CUR_STATE) {
            attr.cur_state().ok_or(EINVAL)?
        } else {
            shadow.state
        };
        let next = if mask.has(QpAttrMask::STATE) {
            attr.state().ok_or(EINVAL)?
        } else {
            cur
        };
        if !ibqp::modify_is_ok(cur, next, qp.hw.qp_type, mask) {
            return Err(EINVAL);
        }
        if mask.has(QpAttrMask::PKEY_INDEX) && attr.pkey_index() != 0 {
            return Err(EINVAL);
        }
        let dest_qpn = if mask.has(QpAttrMask::DEST_QPN) {
            attr.dest_qp_num()
        } else {
            shadow.dest_qpn
        };
        let mut cmd = ModifyQpRoce {
            cfg: (hw_state(next) << 24) | qp.hw.qpn,
            mask: ModifyQpRoce::STATE,
            ..Default::default()
        };
        if mask.has(QpAttrMask::QKEY) {
            cmd.mask |= ModifyQpRoce::QKEY;
            cmd.qkey = attr.qkey();
        }
        if mask.has(QpAttrMask::RQ_PSN) {
            cmd.mask |= ModifyQpRoce::RQ_PSN;
            cmd.rq_psn = attr.rq_psn() & 0xff_ffff;
        }
        if mask.has(QpAttrMask::SQ_PSN) {
            cmd.mask |= ModifyQpRoce::SQ_PSN;
            cmd.sq_psn = attr.sq_psn() & 0xff_ffff;
        }
        if mask.has(QpAttrMask::DEST_QPN) {
            cmd.mask |= ModifyQpRoce::DST_QPN;
            cmd.dst_qpn = dest_qpn & 0xff_ffff;
        }
        if mask.has(QpAttrMask::AV) {
            cmd.mask |= ModifyQpRoce::AV;
            cmd.av = self.address_vector(attr, qp.hw.qpn, dest_qpn)?;
        }
        self.hw.exec(&cmd, Wait::Sleep)?;
        if let Some(k) = &qp.hw.kernel {
            k.set_state(next);
        }
        shadow.state = next;
        shadow.dest_qpn = dest_qpn;
        if mask.has(QpAttrMask::QKEY) {
            shadow.qkey = attr.qkey();
        }
        Ok(())
    }

    /// The address vector of a RoCEv2 path: a GRH whose source GID is a RoCEv2 one.
    fn address_vector(&self, attr: &QpAttr<'_>, qpn: u32, dest_qpn: u32) -> Result<AddressVector> {
        let ah = attr.ah_attr();
        let grh = ah.grh().ok_or(EINVAL)?;
        let sgid = grh.sgid_attr().ok_or(EINVAL)?;
        if sgid.gid_type() != Some(rdma::GidType::RoceV2) {
            return Err(EINVAL);
        }
        let g = sgid.gid().0;
        let ipv4 = g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff;
        let flow_label = grh.flow_label() & 0xf_ffff;
        Ok(AddressVector {
            flow: flow_label | if ipv4 { 0 } else { 1 << 20 },
            tclass: grh.traffic_class(),
            hop_limit: grh.hop_limit(),
            sl: ah.sl(),
            reserved: 0,
            udp_sport: udp_sport(flow_label, qpn, dest_qpn),
            sgid_index: grh.sgid_index().into(),
            dmac: ah.dmac(),
            pad: [0; 2],
            dgid: grh.dgid().0,
        })
    }

    pub(crate) fn query_qp(&self, qp: &Qp, out: &mut QpAttrOut<'_>) -> Result {
        let resp = self.hw.exec(&QueryQp { qpn: qp.hw.qpn }, Wait::Sleep)?.0[0];
        // CAST: fields of at most 24 bits.
        let sq_psn = (resp & 0xff_ffff) as u32;
        let rq_psn = ((resp >> 24) & 0xff_ffff) as u32;
        let state = QpState::from_raw(((resp >> 48) & 0xff) as u32).ok_or(EIO)?;
        let shadow = qp.shadow.lock();
        out.set_state(state, resp & (1 << 56) != 0)
            .set_psns(sq_psn, rq_psn)
            .set_dest_qp_num(shadow.dest_qpn)
            .set_qkey(shadow.qkey)
            .set_port(1)
            .set_rd_atomic(128, 128)
            .set_sq_sig_all(qp.hw.sq_sig_all)
            .set_cap(QpCap {
                // The send queue's depth in basic blocks, as the C driver reports it.
                max_send_wr: qp.hw.sq_depth,
                max_recv_wr: qp.hw.rq_depth,
                max_send_sge: MAX_SEND_SGE,
                max_recv_sge: MAX_RECV_SGE,
                max_inline_data: MAX_INLINE,
            });
        Ok(())
    }

    pub(crate) fn reg_user_mr<T: rdma::Driver<Pd = Pd>>(
        &self,
        dev: &rdma::Device<T>,
        pd: &rdma::Pd<T>,
        req: &UserMrReq,
    ) -> Result<NewMr<Mr>> {
        let max = 1u64 << self.caps.max_mr_size_log2;
        if req.length == 0
            || req.length > max
            || req.iova.checked_add(req.length).is_none()
            || req.start.checked_add(req.length).is_none()
        {
            return Err(EINVAL);
        }
        let umem = Umem::get(dev, req.start, req.length.try_into()?, req.access)?;
        let long = req.length > u64::from(u32::MAX);
        let mtt = if self.caps.mtt_va {
            Mtt::new_multilevel(self.bound(), &umem, req.iova, MR_PAGE_SIZES, !long)?
        } else {
            Mtt::new(self.bound(), &umem, req.iova, MR_PAGE_SIZES, INLINE_MTT)?
        };
        // Format version 1 carries the high bits of the length and of the entry count, and
        // the page size of the tables; multi-level tables need it (erdma-hw 3.5).
        let v1 = mtt.level > 1 || long;
        if (!v1 && mtt.count >= 1 << 20) || (long && !self.caps.mtt_va) {
            // Without the version-1 format the entry count and the length are 20 and 32 bits.
            return Err(EINVAL);
        }
        let mut cmd = RegMr {
            cfg0: 1 << 31,
            cfg1: (pd.data().pdn << 12) | (MR_TYPE_NORMAL << 6) | (mr_access(req.access) << 1),
            start_va: req.iova,
            // CAST: the low half; version 1 carries the rest.
            size: req.length as u32,
            cfg2: (mtt.page_shift << 27) | (mtt.level << 20) | (mtt.count & 0xf_ffff),
            mtt: mtt.entries,
        };
        if v1 {
            cmd.cfg0 |= 1 << 28;
            // CAST: PAGE_SHIFT - 12 is small.
            cmd.cfg2 |= ((PAGE_SHIFT - 12) as u32) << 24;
            cmd.mtt[1] = (req.length >> 32) | (u64::from(mtt.count >> 20) << 32);
        }
        self.register_mr(cmd, req.iova, req.length, |stag| Mr {
            stag,
            _mtt: Some(mtt),
            _umem: Some(umem),
            frmr: None,
        })
    }

    /// Registers the region `cmd` describes under a new MPT index (key 0), which is given
    /// back if the adapter refuses; `data` makes the driver's part for the new STag.
    fn register_mr(
        &self,
        mut cmd: RegMr,
        iova: u64,
        length: u64,
        data: impl FnOnce(u32) -> Mr,
    ) -> Result<NewMr<Mr>> {
        let index = self.ids.lock().mr.alloc()?;
        cmd.cfg0 |= index;
        if let Err(e) = self.hw.exec(&cmd, Wait::Sleep) {
            self.ids.lock().mr.free(index);
            return Err(e);
        }
        let stag = index << 8;
        Ok(NewMr {
            lkey: stag,
            rkey: stag,
            iova,
            length,
            data: data(stag),
        })
    }

    pub(crate) fn dereg_mr(&self, mr: Mr) {
        let cmd = DeregMr {
            stag: ((mr.stag & 0xff) << 20) | (mr.stag >> 8),
        };
        if let Err(e) = self.hw.exec(&cmd, Wait::Sleep) {
            dev_warn!(
                self.dev(),
                "DEREG_MR {:#x} failed: {}\n",
                mr.stag,
                e.to_errno()
            );
        }
        self.ids.lock().mr.free(mr.stag >> 8);
        // The pages are unpinned only now that the adapter no longer uses them.
        drop(mr);
    }

    /// Registers the region through which kernel users address bus addresses (erdma-hw 6: no
    /// MTT; the adapter ignores the extent fields).
    pub(crate) fn get_dma_mr<T: rdma::Driver<Pd = Pd>>(
        &self,
        pd: &rdma::Pd<T>,
        access: u32,
    ) -> Result<NewMr<Mr>> {
        let cmd = RegMr {
            cfg1: (pd.data().pdn << 12) | (MR_TYPE_DMA << 6) | (mr_access(access) << 1),
            ..Default::default()
        };
        self.register_mr(cmd, 0, u64::MAX, |stag| Mr {
            stag,
            _mtt: None,
            _umem: None,
            frmr: None,
        })
    }

    /// Allocates a fast-registration region for up to `max_pages` pages of `PAGE_SIZE`
    /// (erdma-hw 6): invalid until a fast-registration work request names it.
    pub(crate) fn alloc_mr<T: rdma::Driver<Pd = Pd>>(
        &self,
        pd: &rdma::Pd<T>,
        max_pages: u32,
    ) -> Result<NewMr<Mr>> {
        if max_pages == 0 || max_pages > MAX_FRMR_PAGES {
            return Err(EINVAL);
        }
        let pages = Coherent::zeroed_slice(self.bound(), max_pages as usize, GFP_KERNEL)?;
        let all = access::LOCAL_WRITE | access::REMOTE_READ | access::REMOTE_WRITE;
        let cmd = RegMr {
            cfg1: (pd.data().pdn << 12) | (MR_TYPE_FRMR << 6) | (mr_access(all) << 1),
            // CAST: PAGE_SHIFT is small.
            cfg2: ((PAGE_SHIFT as u32) << 27) | (1 << 20) | max_pages,
            mtt: [pages.dma_address(), 0, 0, 0],
            ..Default::default()
        };
        self.register_mr(cmd, 0, 0, |stag| Mr {
            stag,
            _mtt: None,
            _umem: None,
            frmr: Some(Frmr {
                pages,
                npages: AtomicU32::new(0),
            }),
        })
    }

    /// Posts a kernel consumer's send work requests.
    pub(crate) fn post_send<T: rdma::Driver<Mr = Mr>>(
        &self,
        qp: &Qp,
        wrs: SendWrs<'_, T>,
    ) -> core::result::Result<(), (Error, usize)> {
        let k = qp.hw.kernel.as_ref().ok_or((EINVAL, 0))?;
        k.post_send(&self.hw.bar, wrs)
    }

    /// Posts a kernel consumer's receive work requests.
    pub(crate) fn post_recv(
        &self,
        qp: &Qp,
        wrs: RecvWrs<'_>,
    ) -> core::result::Result<(), (Error, usize)> {
        let k = qp.hw.kernel.as_ref().ok_or((EINVAL, 0))?;
        k.post_recv(&self.hw.bar, wrs)
    }

    /// Polls a kernel CQ.
    pub(crate) fn poll_cq(&self, cq: &Cq, wcs: &mut [Wc]) -> usize {
        cq.kernel.as_ref().map_or(0, |k| k.poll(wcs, &self.hw.qps))
    }

    /// Arms a kernel CQ.
    pub(crate) fn req_notify_cq(
        &self,
        cq: &Cq,
        solicited: bool,
        report_missed: bool,
    ) -> Result<bool> {
        let k = cq.kernel.as_ref().ok_or(EINVAL)?;
        Ok(k.arm(&self.hw.bar, solicited, report_missed))
    }
}

impl Mr {
    /// Starts a new page list (fast-registration regions only).
    pub(crate) fn map_start(&self) -> Result {
        let f = self.frmr.as_ref().ok_or(EINVAL)?;
        f.npages.store(0, Ordering::Relaxed);
        Ok(())
    }

    /// Appends a page to the list.
    pub(crate) fn set_page(&self, addr: u64) -> Result {
        let f = self.frmr.as_ref().ok_or(EINVAL)?;
        let n = f.npages.load(Ordering::Relaxed);
        write64(&f.pages, n as usize, addr).map_err(|_| ENOMEM)?;
        f.npages.store(n + 1, Ordering::Relaxed);
        Ok(())
    }
}
