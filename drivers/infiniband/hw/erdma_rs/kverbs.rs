// SPDX-License-Identifier: GPL-2.0

//! Queues of kernel consumers: the driver builds the work queue entries, rings the shared
//! kernel doorbells and reads the completions itself (erdma-hw 4.4, 5).
//!
//! Kernel queues live in coherent DMA memory, one contiguous buffer each, described to the
//! adapter as a single "page" (erdma-hw 3.5). Posting and polling run in any context, under
//! interrupt-safe spinlocks; doorbell identity is in the value, so every kernel queue shares
//! one doorbell per kind.

use core::sync::atomic::{
    AtomicU32,
    Ordering, //
};
use kernel::{
    device,
    dma::Coherent,
    new_spinlock_irq,
    prelude::*,
    rbtree::RBTree,
    rdma::{
        wr::{
            send_flags,
            wc_flags, //
        },
        QpEvents, QpState, RecvWrs, SendWr, SendWrs, Wc, WcOpcode, WcStatus, WrOpcode,
    },
    sync::{
        barrier::{
            dma_mb,
            Read, //
        },
        Arc, SpinLockIrq,
    },
};

use crate::{
    objects::{
        mr_access,
        Mr,
        MAX_INLINE,
        MAX_SEND_SGE, //
    },
    ring::{
        owner_valid,
        read32,
        read64,
        write64,
        Doorbell, //
    },
    Bar0,
};

/// BAR0 offsets of the doorbells every kernel queue shares (erdma-hw 5.8): the SQ doorbell
/// page 95, and the first RQ and CQ doorbell slots.
const KERNEL_SQ_DB: usize = 95 * 4096;
const KERNEL_RQ_DB: usize = 0x61000;
const KERNEL_CQ_DB: usize = 0x79000;

/// Words of a send-queue basic block, of a receive-queue entry and of a completion entry.
const WQEBB_WORDS: usize = 4;
const RQE_WORDS: usize = 4;
const CQE_WORDS: usize = 8;
/// Basic blocks of the largest work queue entry.
const MAX_WQEBBS: usize = 4;
/// Pages a fast-registration WQE carries inline.
const INLINE_PAGES: usize = 4;

/// Opcodes of SQEs and CQEs (erdma-hw 5.3).
mod op {
    pub(super) const WRITE: u32 = 0;
    pub(super) const READ: u32 = 1;
    pub(super) const SEND: u32 = 2;
    pub(super) const SEND_WITH_IMM: u32 = 3;
    pub(super) const RECV_IMM: u32 = 5;
    pub(super) const RECV_INV: u32 = 6;
    pub(super) const WRITE_WITH_IMM: u32 = 9;
    pub(super) const INVALIDATE: u32 = 11;
    pub(super) const RSP_SEND_IMM: u32 = 12;
    pub(super) const SEND_WITH_INV: u32 = 13;
    pub(super) const REG_MR: u32 = 14;
    pub(super) const LOCAL_INV: u32 = 15;
    pub(super) const READ_WITH_INV: u32 = 16;
    pub(super) const ATOMIC_CAS: u32 = 17;
    pub(super) const ATOMIC_FAA: u32 = 18;
}

/// SQE header bits (erdma-hw 5.2).
const HDR_CE: u64 = 1 << 22;
const HDR_SE: u64 = 1 << 23;
const HDR_FENCE: u64 = 1 << 24;
const HDR_INLINE: u64 = 1 << 25;

/// The verbs status and vendor error of a completion status code (erdma-hw 5.7).
fn wc_status(code: u32) -> (WcStatus, u32) {
    match code {
        0 => (WcStatus::Success, 0),
        2 => (WcStatus::GeneralErr, 0x01),
        3..=7 => (WcStatus::RemAccessErr, code - 1),
        8 => (WcStatus::LocQpOpErr, 0x20),
        9 => (WcStatus::GeneralErr, 0x21),
        10..=14 => (WcStatus::LocAccessErr, 0x30 + code - 10),
        15 => (WcStatus::WrFlushErr, 0),
        16 => (WcStatus::RetryExcErr, 0),
        _ => (WcStatus::GeneralErr, 0),
    }
}

/// A kernel completion queue.
#[pin_data]
pub(crate) struct KernelCq {
    /// Set once the CQN is allocated, before the adapter hears of the queue.
    cqn: AtomicU32,
    depth: u32,
    ring: Coherent<[u32]>,
    doorbell: Doorbell,
    #[pin]
    state: SpinLockIrq<CqState>,
    /// Completion events delivered (the CEQ handler counts them), for the arm doorbell.
    cmdsn: AtomicU32,
}

struct CqState {
    ci: u32,
    /// Arm requests made so far.
    arm_sn: u32,
}

impl KernelCq {
    /// A zeroed ring of `depth` entries (a power of two).
    pub(crate) fn new(
        dev: &device::Device<device::Bound>,
        depth: u32,
    ) -> Result<impl PinInit<Self, Error>> {
        let ring = Coherent::zeroed_slice(dev, depth as usize * CQE_WORDS, GFP_KERNEL)?;
        let doorbell = Doorbell::new(dev, KERNEL_CQ_DB)?;
        Ok(try_pin_init!(Self {
            cqn: AtomicU32::new(0),
            depth,
            ring,
            doorbell,
            state <- new_spinlock_irq!(CqState { ci: 0, arm_sn: 0 }),
            cmdsn: AtomicU32::new(0),
        }? Error))
    }

    pub(crate) fn ring_addr(&self) -> u64 {
        self.ring.dma_address()
    }

    pub(crate) fn set_cqn(&self, cqn: u32) {
        self.cqn.store(cqn, Ordering::Relaxed);
    }

    pub(crate) fn dbrec_addr(&self) -> u64 {
        self.doorbell.record_addr()
    }

    /// Counts a completion event (CEQ handler).
    pub(crate) fn event(&self) {
        self.cmdsn.fetch_add(1, Ordering::Relaxed);
    }

    /// The entry at `ci` in CPU order, if the adapter has written it.
    fn cqe(&self, ci: u32) -> Option<[u32; CQE_WORDS]> {
        let base = (ci & (self.depth - 1)) as usize * CQE_WORDS;
        let w0 = u32::from_be(read32(&self.ring, base).ok()?);
        if !owner_valid(w0 >> 31, ci, self.depth) {
            return None;
        }
        dma_mb(Read);
        let mut cqe = [w0; CQE_WORDS];
        for (i, w) in cqe.iter_mut().enumerate().skip(1) {
            *w = read32(&self.ring, base + i).ok()?;
        }
        Some(cqe)
    }

    /// Arms the CQ (erdma-hw 4.4); with `report_missed`, whether completions already wait.
    pub(crate) fn arm(&self, bar: &Bar0<'_>, solicited: bool, report_missed: bool) -> bool {
        let mut st = self.state.lock();
        let value = (u64::from(st.arm_sn & 0xff) << 56)
            | (u64::from(self.cqn.load(Ordering::Relaxed)) << 32)
            | (1 << 31)
            | (u64::from(solicited) << 30)
            | (u64::from(self.cmdsn.load(Ordering::Relaxed) & 3) << 28)
            | u64::from(st.ci & 0xff_ffff);
        st.arm_sn = st.arm_sn.wrapping_add(1);
        self.doorbell.ring(bar, value);
        report_missed && self.cqe(st.ci).is_some()
    }

    /// Fills `wcs` from the ring. Each entry's QP is looked up in `qps` and used under its
    /// lock, so a QP being destroyed (removed from `qps` first) is never used here, and its
    /// memory is freed by the destroyer, in process context.
    pub(crate) fn poll(
        &self,
        wcs: &mut [Wc],
        qps: &SpinLockIrq<RBTree<u32, Arc<QpEntry>>>,
    ) -> usize {
        let mut st = self.state.lock();
        let mut n = 0;
        while n < wcs.len() {
            let Some(cqe) = self.cqe(st.ci) else {
                break;
            };
            st.ci = st.ci.wrapping_add(1);
            let qpn = u32::from_be(cqe[2]);
            let qps = qps.lock();
            // CQEs of QPs that are gone, or not the kernel's, complete nothing.
            let Some(entry) = qps.get(&qpn) else {
                continue;
            };
            let Some(qp) = entry.kernel.as_ref() else {
                continue;
            };
            if qp.complete(&entry.events, &cqe, &mut wcs[n]) {
                n += 1;
            }
        }
        n
    }
}

/// What the CEQ handler finds for a CQN.
pub(crate) struct CqEntry {
    pub(crate) events: kernel::rdma::CqEvents,
    pub(crate) kernel: Option<Arc<KernelCq>>,
}

/// What the AEQ handler and kernel CQs find for a QPN.
pub(crate) struct QpEntry {
    pub(crate) events: QpEvents,
    pub(crate) kernel: Option<Arc<KernelQp>>,
}

/// A kernel queue pair.
#[pin_data]
pub(crate) struct KernelQp {
    /// Datagram sends need address handles, which the driver does not offer yet.
    ud: bool,
    /// Set once the QPN is allocated, before the adapter hears of the queue pair.
    qpn: AtomicU32,
    sq_depth: u16,
    rq_depth: u16,
    sq_sig_all: bool,
    sq_ring: Coherent<[u64]>,
    rq_ring: Coherent<[u64]>,
    sq_db: Doorbell,
    rq_db: Doorbell,
    /// The verbs state, for posting (which must not sleep on the QP's mutex).
    state: AtomicU32,
    #[pin]
    sq: SpinLockIrq<WorkQueue>,
    #[pin]
    rq: SpinLockIrq<WorkQueue>,
}

struct WorkQueue {
    pi: u16,
    ci: u16,
    wr_ids: KVec<u64>,
}

impl WorkQueue {
    fn new(depth: u16) -> Result<Self> {
        let mut wr_ids = KVec::with_capacity(depth.into(), GFP_KERNEL)?;
        wr_ids.resize(depth.into(), 0, GFP_KERNEL)?;
        Ok(Self {
            pi: 0,
            ci: 0,
            wr_ids,
        })
    }
}

impl KernelQp {
    /// Zeroed queues of `sq_depth` basic blocks and `rq_depth` entries.
    pub(crate) fn new(
        dev: &device::Device<device::Bound>,
        sq_depth: u16,
        rq_depth: u16,
        sq_sig_all: bool,
        ud: bool,
    ) -> Result<impl PinInit<Self, Error>> {
        let sq_ring = Coherent::zeroed_slice(dev, usize::from(sq_depth) * WQEBB_WORDS, GFP_KERNEL)?;
        let rq_ring = Coherent::zeroed_slice(dev, usize::from(rq_depth) * RQE_WORDS, GFP_KERNEL)?;
        let sq_db = Doorbell::new(dev, KERNEL_SQ_DB)?;
        let rq_db = Doorbell::new(dev, KERNEL_RQ_DB)?;
        let sq = WorkQueue::new(sq_depth)?;
        let rq = WorkQueue::new(rq_depth)?;
        Ok(try_pin_init!(Self {
            ud,
            qpn: AtomicU32::new(0),
            sq_depth,
            rq_depth,
            sq_sig_all,
            sq_ring,
            rq_ring,
            sq_db,
            rq_db,
            state: AtomicU32::new(QpState::Reset.to_raw()),
            sq <- new_spinlock_irq!(sq),
            rq <- new_spinlock_irq!(rq),
        }? Error))
    }

    pub(crate) fn set_qpn(&self, qpn: u32) {
        self.qpn.store(qpn, Ordering::Relaxed);
    }

    fn qpn(&self) -> u32 {
        self.qpn.load(Ordering::Relaxed)
    }

    pub(crate) fn sq_addr(&self) -> u64 {
        self.sq_ring.dma_address()
    }

    pub(crate) fn rq_addr(&self) -> u64 {
        self.rq_ring.dma_address()
    }

    pub(crate) fn sq_dbrec(&self) -> u64 {
        self.sq_db.record_addr()
    }

    pub(crate) fn rq_dbrec(&self) -> u64 {
        self.rq_db.record_addr()
    }

    /// Records a state change; RESET starts both queues over (erdma-hw 10.12).
    pub(crate) fn set_state(&self, state: QpState) {
        if state == QpState::Reset {
            for q in [&self.sq, &self.rq] {
                let mut q = q.lock();
                q.pi = 0;
                q.ci = 0;
            }
        }
        self.state.store(state.to_raw(), Ordering::Relaxed);
    }

    fn can_post_send(&self) -> bool {
        let s = self.state.load(Ordering::Relaxed);
        s == QpState::Rts.to_raw() || s == QpState::Sqd.to_raw() || s == QpState::Err.to_raw()
    }

    fn can_post_recv(&self) -> bool {
        self.state.load(Ordering::Relaxed) != QpState::Reset.to_raw()
    }

    /// Posts send work requests; on failure, the error and the index of the first not posted.
    pub(crate) fn post_send<T: kernel::rdma::Driver<Mr = Mr>>(
        &self,
        bar: &Bar0<'_>,
        wrs: SendWrs<'_, T>,
    ) -> core::result::Result<(), (Error, usize)> {
        if self.ud {
            return Err((EOPNOTSUPP, 0));
        }
        if !self.can_post_send() {
            return Err((EINVAL, 0));
        }
        let mut sq = self.sq.lock();
        for (i, wr) in wrs.enumerate() {
            let mut wqe = [0u64; MAX_WQEBBS * WQEBB_WORDS];
            let (opcode, len, flags) = self.build_sqe(&wr, &mut wqe).map_err(|e| (e, i))?;
            let blocks = len.div_ceil(32);
            if usize::from(sq.pi.wrapping_sub(sq.ci)) + blocks > usize::from(self.sq_depth) {
                return Err((ENOMEM, i));
            }
            let mask = self.sq_depth - 1;
            let pi = sq.pi;
            // CAST: at most 4 blocks.
            let next = pi.wrapping_add(blocks as u16);
            let mut hdr = u64::from(next)
                | (u64::from(opcode) << 27)
                | (u64::from(self.qpn()) << 32)
                | ((blocks as u64 - 1) << 52)
                | flags;
            if wr.flags() & send_flags::SIGNALED != 0 || self.sq_sig_all {
                hdr |= HDR_CE;
            }
            wqe[0] = hdr;
            // The body first, then the header (erdma-hw 10.7); a WQE may wrap the ring.
            for w in Iterator::chain(1..blocks * WQEBB_WORDS, core::iter::once(0)) {
                // CAST: `w / 4` is below 4.
                let block = usize::from(pi.wrapping_add((w / WQEBB_WORDS) as u16) & mask);
                let at = block * WQEBB_WORDS + w % WQEBB_WORDS;
                // Cannot fail: `block` is below the depth.
                let _ = write64(&self.sq_ring, at, wqe[w]);
            }
            sq.wr_ids[usize::from(pi & mask)] = wr.wr_id();
            sq.pi = next;
            self.sq_db
                .ring(bar, (u64::from(self.qpn()) << 32) | u64::from(next));
        }
        Ok(())
    }

    /// Writes the body of the WQE for `wr` into `wqe`; returns its opcode, its length in bytes
    /// and the header flags it needs.
    fn build_sqe<T: kernel::rdma::Driver<Mr = Mr>>(
        &self,
        wr: &SendWr<'_, T>,
        wqe: &mut [u64; MAX_WQEBBS * WQEBB_WORDS],
    ) -> Result<(u32, usize, u64)> {
        let opcode = wr.opcode().ok_or(EINVAL)?;
        let mut flags = 0;
        if wr.flags() & send_flags::SOLICITED != 0 {
            flags |= HDR_SE;
        }
        if wr.flags() & send_flags::FENCE != 0 {
            flags |= HDR_FENCE;
        }
        let word = |lo: u32, hi: u32| u64::from(lo) | (u64::from(hi) << 32);
        let (code, sgl_at) = match opcode {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteImm => {
                let (raddr, rkey) = wr.rdma().ok_or(EINVAL)?;
                // CAST: the halves of the remote address.
                wqe[2] = word(rkey, raddr as u32);
                wqe[3] = (raddr >> 32) & 0xffff_ffff;
                let code = if opcode == WrOpcode::RdmaWrite {
                    op::WRITE
                } else {
                    op::WRITE_WITH_IMM
                };
                (code, 32)
            }
            WrOpcode::Send | WrOpcode::SendImm | WrOpcode::SendInv => {
                let code = match opcode {
                    WrOpcode::Send => op::SEND,
                    WrOpcode::SendImm => op::SEND_WITH_IMM,
                    _ => op::SEND_WITH_INV,
                };
                (code, 16)
            }
            WrOpcode::RdmaRead | WrOpcode::RdmaReadInv => {
                let (raddr, rkey) = wr.rdma().ok_or(EINVAL)?;
                let mut sges = wr.sges();
                let sink = sges.next().ok_or(EINVAL)?;
                if sges.next().is_some() {
                    return Err(EINVAL);
                }
                let inv = if opcode == WrOpcode::RdmaReadInv {
                    wr.invalidate_rkey()
                } else {
                    0
                };
                wqe[1] = word(inv, sink.length);
                // CAST: the halves of the sink address.
                wqe[2] = word(sink.lkey, sink.addr as u32);
                wqe[3] = sink.addr >> 32;
                wqe[4] = raddr;
                wqe[5] = word(sink.length, rkey);
                let code = if opcode == WrOpcode::RdmaRead {
                    op::READ
                } else {
                    op::READ_WITH_INV
                };
                return Ok((code, 48, flags));
            }
            WrOpcode::AtomicCmpSwp | WrOpcode::AtomicFetchAdd => {
                let (raddr, rkey, compare_add, swap) = wr.atomic().ok_or(EINVAL)?;
                let mut sges = wr.sges();
                let local = sges.next().ok_or(EINVAL)?;
                if sges.next().is_some() {
                    return Err(EINVAL);
                }
                let code = if opcode == WrOpcode::AtomicCmpSwp {
                    wqe[2] = swap;
                    wqe[3] = compare_add;
                    op::ATOMIC_CAS
                } else {
                    wqe[2] = compare_add;
                    op::ATOMIC_FAA
                };
                wqe[4] = raddr;
                wqe[5] = word(8, rkey);
                wqe[6] = local.addr;
                wqe[7] = word(local.length, local.lkey);
                return Ok((code, 64, flags));
            }
            WrOpcode::LocalInv => {
                wqe[2] = word(0, wr.invalidate_rkey());
                return Ok((op::LOCAL_INV, 32, flags));
            }
            WrOpcode::RegMr => {
                let (mr, key, access) = wr.reg().ok_or(EINVAL)?;
                let frmr = mr.data().frmr.as_ref().ok_or(EINVAL)?;
                let npages = frmr.npages();
                wqe[1] = mr.iova();
                // CAST: the low half of the length (erdma-hw 5.4).
                wqe[2] = word(mr.length() as u32, key);
                let mut attrs = (mr_access(access) << 1) | (npages << 12);
                let mut size = 32;
                if npages as usize <= INLINE_PAGES {
                    for k in 0..npages as usize {
                        wqe[4 + k] = frmr.page(k)?;
                    }
                    size += 8 * npages as usize;
                } else {
                    attrs |= 1 << 6;
                }
                wqe[3] = u64::from(attrs);
                return Ok((op::REG_MR, size, flags));
            }
        };

        // Sends and writes: the immediate or the key to invalidate, then the payload.
        let ex = match opcode {
            WrOpcode::RdmaWriteImm | WrOpcode::SendImm => wr.imm_data_be(),
            WrOpcode::SendInv => wr.invalidate_rkey(),
            _ => 0,
        };
        let (len, n) = if wr.flags() & send_flags::INLINE != 0 {
            let mut buf = [0u8; MAX_INLINE as usize];
            let n = wr.copy_inline(&mut buf)?;
            // The payload follows the fixed part byte for byte (little-endian words).
            for (j, b) in buf[..n].iter().enumerate() {
                let at = sgl_at + j;
                wqe[at / 8] |= u64::from(*b) << (8 * (at % 8));
            }
            flags |= HDR_INLINE;
            (n as u32, n)
        } else {
            if wr.num_sge() > MAX_SEND_SGE as usize {
                return Err(EINVAL);
            }
            let mut total = 0u32;
            for (k, sge) in wr.sges().enumerate() {
                let at = sgl_at / 8 + 2 * k;
                wqe[at] = sge.addr;
                wqe[at + 1] = word(sge.length, sge.lkey);
                total = total.wrapping_add(sge.length);
            }
            (total, wr.num_sge())
        };
        wqe[1] = word(ex, len);
        // CAST: at most 96 bytes or 6 entries.
        flags |= (n as u64) << 56;
        let size = if flags & HDR_INLINE != 0 {
            sgl_at + n
        } else {
            sgl_at + 16 * n
        };
        Ok((code, size.max(32), flags))
    }

    /// Posts receive work requests.
    pub(crate) fn post_recv(
        &self,
        bar: &Bar0<'_>,
        wrs: RecvWrs<'_>,
    ) -> core::result::Result<(), (Error, usize)> {
        if !self.can_post_recv() {
            return Err((EINVAL, 0));
        }
        let mut rq = self.rq.lock();
        for (i, wr) in wrs.enumerate() {
            if rq.pi.wrapping_sub(rq.ci) >= self.rq_depth {
                return Err((ENOMEM, i));
            }
            let mut sges = wr.sges();
            let sge = sges.next();
            if sges.next().is_some() {
                return Err((EINVAL, i));
            }
            let pi = rq.pi;
            let next = pi.wrapping_add(1);
            let first = u64::from(next) | (u64::from(self.qpn()) << 32);
            let base = usize::from(pi & (self.rq_depth - 1)) * RQE_WORDS;
            let (addr, len, lkey) = sge.map_or((0, 0, 0), |s| (s.addr, s.length, s.lkey));
            // Cannot fail: `base` is below the depth. The first word goes last.
            let _ = write64(&self.rq_ring, base + 2, addr);
            let _ = write64(
                &self.rq_ring,
                base + 3,
                u64::from(len) | (u64::from(lkey) << 32),
            );
            let _ = write64(&self.rq_ring, base + 1, 0);
            let _ = write64(&self.rq_ring, base, first);
            rq.wr_ids[usize::from(pi & (self.rq_depth - 1))] = wr.wr_id();
            rq.pi = next;
            self.rq_db.ring(bar, first);
        }
        Ok(())
    }

    /// Turns a CQE of this QP into a work completion; false for one that completes nothing
    /// (an index the queue does not hold).
    fn complete(&self, events: &QpEvents, cqe: &[u32; CQE_WORDS], wc: &mut Wc) -> bool {
        let hdr = cqe[0];
        let opcode = (hdr >> 16) & 0xff;
        let is_rq = (hdr >> 8) & 0xff == 1;
        let (status, vendor) = wc_status(hdr & 0xff);
        // CAST: queue counters are 16 bits wide.
        let idx = u32::from_be(cqe[1]) as u16;
        let byte_len = u32::from_be(cqe[4]);
        let raw_imm = u32::from_le(cqe[3]);
        if is_rq {
            let mut rq = self.rq.lock();
            if idx.wrapping_sub(rq.ci) >= rq.pi.wrapping_sub(rq.ci) {
                return false;
            }
            let wr_id = rq.wr_ids[usize::from(idx & (self.rq_depth - 1))];
            rq.ci = idx.wrapping_add(1);
            let (opcode, flags, ex) = match opcode {
                op::RECV_IMM => (
                    WcOpcode::RecvRdmaWithImm,
                    wc_flags::WITH_IMM,
                    u32::from_ne_bytes(raw_imm.to_be_bytes()),
                ),
                op::RSP_SEND_IMM => (
                    WcOpcode::Recv,
                    wc_flags::WITH_IMM,
                    u32::from_ne_bytes(raw_imm.to_be_bytes()),
                ),
                op::RECV_INV => (
                    WcOpcode::Recv,
                    wc_flags::WITH_INVALIDATE,
                    u32::from_be(cqe[3]),
                ),
                _ => (WcOpcode::Recv, 0, 0),
            };
            let flags = if status == WcStatus::Success {
                flags
            } else {
                0
            };
            wc.set(events, wr_id, status, opcode, vendor, byte_len, flags, ex);
        } else {
            let mut sq = self.sq.lock();
            if idx.wrapping_sub(sq.ci) >= sq.pi.wrapping_sub(sq.ci) {
                return false;
            }
            let mask = self.sq_depth - 1;
            let hdr_word =
                read64(&self.sq_ring, usize::from(idx & mask) * WQEBB_WORDS).unwrap_or(0);
            // CAST: a 3-bit field.
            let blocks = ((hdr_word >> 52) & 7) as u16 + 1;
            let wr_id = sq.wr_ids[usize::from(idx & mask)];
            sq.ci = idx.wrapping_add(blocks);
            let opcode = match opcode {
                op::WRITE | op::WRITE_WITH_IMM => WcOpcode::RdmaWrite,
                op::READ | op::READ_WITH_INV => WcOpcode::RdmaRead,
                op::ATOMIC_CAS => WcOpcode::CompSwap,
                op::ATOMIC_FAA => WcOpcode::FetchAdd,
                op::LOCAL_INV | op::INVALIDATE => WcOpcode::LocalInv,
                op::REG_MR => WcOpcode::RegMr,
                _ => WcOpcode::Send,
            };
            wc.set(events, wr_id, status, opcode, vendor, byte_len, 0, 0);
        }
        true
    }
}
