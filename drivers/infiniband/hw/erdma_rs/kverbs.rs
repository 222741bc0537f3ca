// SPDX-License-Identifier: GPL-2.0

//! Queues of kernel consumers: the driver builds the work queue entries, rings the shared
//! kernel doorbells and reads the completions itself (erdma_rs_hw 4.4, 5).
//!
//! Kernel queues live in coherent DMA memory, one contiguous buffer each, described to the
//! adapter as a single "page" (erdma_rs_hw 3.5). Posting and polling run in any context, under
//! interrupt-safe spinlocks; doorbell identity is in the value, so every kernel queue shares
//! one doorbell per kind.

use core::sync::atomic::{
    AtomicBool,
    AtomicU32,
    Ordering, //
};
use kernel::{
    device,
    dma::Coherent,
    new_spinlock_irq,
    prelude::*,
    rbtree::{
        RBTree,
        RBTreeNode, //
    },
    rdma::{
        qp::QpEvent,
        NetworkType,
        QpEvents,
        QpState,
        RecvWrs,
        SendFlag,
        SendWr,
        SendWrs,
        Wc,
        WcFlag,
        WcFlags,
        WcOpcode,
        WcStatus,
        WrOpcode, //
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
    cm::{
        IwQp,
        IwStateSink, //
    },
    commands::Reflush,
    consts::{
        cqe_queue,
        frmr_mtt,
        opcode,
        KERNEL_CQ_DB,
        KERNEL_RQ_DB,
        KERNEL_SQ_DB,
        MAX_INLINE,
        MAX_SEND_SGE,
        MAX_SQE_WQEBBS,
        RQE_SIZE,
        WQEBB_SIZE, //
    },
    dispatch::{
        CqSink,
        Dispatch,
        QpSink, //
    },
    formats::{
        low32,
        low64,
        AtomicSqe,
        CqDoorbell,
        Cqe,
        CqeHeader,
        LocalInvSqe,
        MrAccess,
        ReadSqe,
        RegMrSqe,
        RegMrSqeAttrs,
        RqDoorbell,
        Rqe,
        SendSqe,
        Sge,
        SqDoorbell,
        SqeHeader,
        UdSendSqe,
        WriteSqe, //
    },
    regs::Bar0,
    ring::{
        lower,
        owner_valid,
        read32,
        read64,
        read_entry,
        upper,
        words64,
        write64,
        Doorbell, //
    },
};

/// 64-bit words of a send-queue basic block and of a receive-queue entry; 32-bit words of a
/// completion entry.
const WQEBB_WORDS: usize = WQEBB_SIZE / 8;
const RQE_WORDS: usize = RQE_SIZE / 8;
const CQE_WORDS: usize = crate::consts::CQE_SIZE / 4;
/// Bytes of the largest send-queue entry.
const MAX_SQE_SIZE: usize = MAX_SQE_WQEBBS * WQEBB_SIZE;

/// The page list of a fast-registration region: an MTT the adapter reads when a
/// fast-registration work request names the region (erdma_rs_hw 6).
pub(crate) struct Frmr {
    pages: Coherent<[u64]>,
    npages: AtomicU32,
}

impl Frmr {
    /// An empty list of up to `max_pages` pages.
    pub(crate) fn new(dev: &device::Device<device::Bound>, max_pages: u32) -> Result<Self> {
        Ok(Self {
            pages: Coherent::zeroed_slice(dev, max_pages as usize, GFP_KERNEL)?,
            npages: AtomicU32::new(0),
        })
    }

    /// DMA address of the list.
    pub(crate) fn dma_address(&self) -> u64 {
        self.pages.dma_address()
    }

    /// The number of pages mapped last.
    fn npages(&self) -> u32 {
        self.npages.load(Ordering::Relaxed)
    }

    /// Page `i` of the list.
    fn page(&self, i: usize) -> Result<u64> {
        read64(&self.pages, i)
    }

    /// Starts a new list.
    pub(crate) fn map_start(&self) {
        self.npages.store(0, Ordering::Relaxed);
    }

    /// Appends a page to the list.
    pub(crate) fn set_page(&self, addr: u64) -> Result {
        let n = self.npages.load(Ordering::Relaxed);
        write64(&self.pages, n as usize, addr).map_err(|_| ENOMEM)?;
        self.npages.store(n + 1, Ordering::Relaxed);
        Ok(())
    }
}

/// A memory region that fast-registration work requests may name.
pub(crate) trait FastReg {
    /// Its page list, if it is a fast-registration region.
    fn frmr(&self) -> Option<&Frmr>;
}

/// An address handle that datagram work requests may name.
pub(crate) trait AddressHandle {
    /// The adapter's number of the address handle.
    fn ahn(&self) -> u32;
    /// The protection domain it was created in.
    fn pdn(&self) -> u32;
}

/// A send-queue entry being built: its memory image.
struct SqeImage([u8; MAX_SQE_SIZE]);

impl SqeImage {
    /// Places `part` at byte `at`.
    fn put<P: IntoBytes + zerocopy::Immutable + ?Sized>(&mut self, at: usize, part: &P) -> Result {
        let bytes = part.as_bytes();
        self.0
            .get_mut(at..at + bytes.len())
            .ok_or(EINVAL)?
            .copy_from_slice(bytes);
        Ok(())
    }

    /// The image as the 64-bit words the ring holds.
    fn words(&self) -> [u64; MAX_SQE_SIZE / 8] {
        let mut words = [0; MAX_SQE_SIZE / 8];
        for (dst, src) in words.iter_mut().zip(words64(&self.0)) {
            *dst = src;
        }
        words
    }
}

/// What [`KernelQp::build_sqe`] made: the header fields of the body, and the entry's length.
struct SqeBody {
    opcode: u8,
    len: usize,
    hdr: SqeHeader,
}

/// The verbs status and vendor error of a completion status code (erdma_rs_hw 5.7).
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
    /// The kernel queue pairs whose completions this CQ receives, by QPN: polling looks
    /// entries up here, under this CQ's lock, not in a table of the whole device.
    qps: RBTree<u32, Arc<QpEntry>>,
    /// Completions to drop: those of queue pairs that went back to RESET.
    stale: StaleFilter,
    /// An attached queue pair the driver carries (compat mode's GSI QP): its completions are
    /// polled after the ring's.
    soft: Option<Arc<dyn SoftCompletions>>,
    /// Whether the consumer armed the CQ and no completion of a software queue pair has woken
    /// it since.
    soft_armed: bool,
}

/// The completions of a queue pair the driver carries, which the CQs it is attached to poll.
/// Called under the CQ's lock.
pub(crate) trait SoftCompletions: Send + Sync {
    /// Whether completions for `cq` wait.
    fn has_completions(&self, cq: &KernelCq) -> bool;
    /// Fills `wcs` with the completions that wait for `cq`; returns how many.
    fn poll_into(&self, cq: &KernelCq, wcs: &mut [Wc]) -> usize;
}

/// The completions a CQ drops (erdma_rs_hw 10.12): those of a queue pair that went back to RESET,
/// written before the ring position recorded with it. Positions wrap; a position before the
/// recorded one is less than a ring's depth (at most 2^22) before it.
struct StaleFilter {
    /// (QPN, ring position after its last completion written before RESET).
    entries: KVec<(u32, u32)>,
}

impl StaleFilter {
    const fn new() -> Self {
        Self {
            entries: KVec::new(),
        }
    }

    fn before(p: u32, end: u32) -> bool {
        // CAST: the distance of two positions of one ring, as a signed number.
        (end.wrapping_sub(p) as i32) > 0
    }

    /// Drops the completions of `qpn` at positions before `end`. Any context.
    fn add(&mut self, qpn: u32, end: u32) -> Result {
        self.entries.push((qpn, end), GFP_ATOMIC)?;
        Ok(())
    }

    /// Whether the completion of `qpn` at ring position `pos` is dropped; forgets what the
    /// consumer index, now past `pos`, has left behind.
    fn drops(&mut self, qpn: u32, pos: u32) -> bool {
        if self.entries.is_empty() {
            return false;
        }
        let stale = self
            .entries
            .iter()
            .any(|&(q, end)| q == qpn && Self::before(pos, end));
        let next = pos.wrapping_add(1);
        self.entries.retain(|e| Self::before(next, e.1));
        stale
    }
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
            state <- new_spinlock_irq!(CqState {
                ci: 0,
                arm_sn: 0,
                qps: RBTree::new(),
                stale: StaleFilter::new(),
                soft: None,
                soft_armed: false,
            }),
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

    /// The entry at `ci`, if the adapter has written it.
    fn cqe(&self, ci: u32) -> Option<Cqe> {
        let base = (ci & (self.depth - 1)) as usize * CQE_WORDS;
        let hdr = CqeHeader::from_raw(u32::from_be(read32(&self.ring, base).ok()?));
        if !owner_valid(hdr.owner().into(), ci, self.depth) {
            return None;
        }
        dma_mb(Read);
        let words: [u32; CQE_WORDS] = read_entry(&self.ring, base).ok()?;
        Cqe::read_from_bytes(words.as_bytes()).ok()
    }

    /// Arms the CQ (erdma_rs_hw 4.4); with `report_missed`, whether completions already wait.
    /// Once the adapter `failed`, work still posted counts as waiting: the driver completes it.
    pub(crate) fn arm(
        &self,
        bar: &Bar0<'_>,
        solicited: bool,
        report_missed: bool,
        failed: bool,
    ) -> bool {
        let mut st = self.state.lock();
        let value = CqDoorbell::zeroed()
            .with_seq(low64(st.arm_sn.into()))
            .with_cqn(low64(self.cqn.load(Ordering::Relaxed).into()))
            .with_arm(true)
            .with_solicited(solicited)
            .with_cmdsn(low64(self.cmdsn.load(Ordering::Relaxed).into()))
            .with_ci(low64(st.ci.into()))
            .into_raw();
        st.arm_sn = st.arm_sn.wrapping_add(1);
        self.doorbell.ring(bar, value);
        st.soft_armed = true;
        report_missed
            && (self.cqe(st.ci).is_some()
                || st.soft.as_ref().is_some_and(|s| s.has_completions(self))
                || (failed
                    && st
                        .qps
                        .values()
                        .any(|e| e.kernel.as_ref().is_some_and(|qp| qp.has_work()))))
    }

    /// Lets the queue pair of `node` complete work through this CQ.
    pub(crate) fn attach(&self, node: RBTreeNode<u32, Arc<QpEntry>>) {
        self.state.lock().qps.insert(node);
    }

    /// Lets the software queue pair `soft`, whose entry `node` is, complete work through this
    /// CQ.
    pub(crate) fn attach_soft(
        &self,
        node: RBTreeNode<u32, Arc<QpEntry>>,
        soft: Arc<dyn SoftCompletions>,
    ) {
        let mut st = self.state.lock();
        st.soft = Some(soft);
        st.qps.insert(node);
    }

    /// The queue pair `qpn` completes nothing more here. Its entry is dropped after the lock
    /// is released: the last reference may free DMA memory, which needs interrupts on.
    pub(crate) fn detach(&self, qpn: u32) {
        let mut st = self.state.lock();
        let entry = st.qps.remove(&qpn);
        let soft = if entry.as_ref().is_some_and(|e| e.soft.is_some()) {
            st.soft.take()
        } else {
            None
        };
        drop(st);
        drop(entry);
        drop(soft);
    }

    /// A software queue pair added a completion here: whether the consumer is to be woken (the
    /// CQ was armed, and is no more).
    pub(crate) fn soft_completed(&self) -> bool {
        let mut st = self.state.lock();
        core::mem::replace(&mut st.soft_armed, false)
    }

    /// Queue pair `qpn` went back to RESET: the completions of it the ring holds now are
    /// dropped, not reported (its queues start over, so they would name new work requests).
    /// The adapter writes none after the modification.
    pub(crate) fn forget_qp(&self, qpn: u32) -> Result {
        let mut st = self.state.lock();
        let mut end = st.ci;
        while self.cqe(end).is_some() {
            end = end.wrapping_add(1);
        }
        if end != st.ci {
            st.stale.add(qpn, end)?;
        }
        Ok(())
    }

    /// Fills `wcs` from the ring, looking at one ring's worth of entries at most (entries
    /// that complete nothing are passed over). Each entry's QP is looked up among the attached
    /// ones and used under this CQ's lock, so a QP being destroyed (detached first) is never
    /// used here, and its memory is freed by the destroyer, in process context.
    ///
    /// Once the adapter `failed`, the work still posted by the attached queue pairs follows
    /// as flushed, completed by the driver ([`KernelQp::flush_into`]).
    pub(crate) fn poll(&self, wcs: &mut [Wc], failed: bool) -> Polled {
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let mut n = 0;
        let mut stray = None;
        let mut budget = self.depth;
        while n < wcs.len() && budget > 0 {
            budget -= 1;
            let Some(cqe) = self.cqe(st.ci) else {
                break;
            };
            let pos = st.ci;
            st.ci = st.ci.wrapping_add(1);
            let qpn = cqe.qpn.get();
            if st.stale.drops(qpn, pos) {
                continue;
            }
            // CQEs of QPs that are gone, or not the kernel's, complete nothing.
            let Some(entry) = st.qps.get(&qpn) else {
                continue;
            };
            let Some(qp) = entry.kernel.as_ref() else {
                continue;
            };
            if qp.complete(&entry.events, &cqe, &mut wcs[n]) {
                n += 1;
            } else {
                // A live queue pair's completion for work it does not have posted.
                let (count, ..) = stray.unwrap_or((0, 0, 0));
                stray = Some((count + 1, qpn, cqe.wqe_index.get()));
            }
        }
        if let (Some(soft), Some(rest)) = (&st.soft, wcs.get_mut(n..)) {
            n += soft.poll_into(self, rest);
        }
        if failed {
            for entry in st.qps.values() {
                let (Some(qp), Some(rest)) = (entry.kernel.as_ref(), wcs.get_mut(n..)) else {
                    continue;
                };
                n += qp.flush_into(&entry.events, rest);
            }
        }
        Polled { n, stray }
    }
}

/// What [`KernelCq::poll`] found.
pub(crate) struct Polled {
    /// Work completions filled in.
    pub(crate) n: usize,
    /// Completions of live queue pairs that completed nothing (an index outside the posted
    /// work, or inside a request): how many, and the QPN and index of the last.
    pub(crate) stray: Option<(u32, u32, u32)>,
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
    /// The connection state of an iWARP queue pair, for the connection manager.
    pub(crate) iw: Option<Arc<IwQp>>,
    /// A queue pair the driver carries (compat mode's GSI QP).
    pub(crate) soft: Option<Arc<dyn SoftCompletions>>,
}

/// The adapter's lookup tables, holding the verbs objects' entries.
pub(crate) type Objects = Dispatch<QpEntry, CqEntry>;

impl CqSink for CqEntry {
    fn completion(&self) {
        if let Some(k) = &self.kernel {
            k.event();
        }
        self.events.completion();
    }

    fn error(&self) {
        self.events.error();
    }
}

impl QpSink for QpEntry {
    /// Every QP event is fatal to the QP (erdma_rs_hw 4.2); an iWARP queue pair's connection ends
    /// with it.
    fn fatal(&self) {
        self.events.event(QpEvent::Fatal);
        if let Some(iw) = &self.iw {
            iw.fatal();
        }
    }
}

/// A kernel queue pair.
#[pin_data]
pub(crate) struct KernelQp {
    /// An unreliable-datagram queue pair (the GSI QP included).
    ud: bool,
    /// Compat mode (erdma_rs_hw 7.3): fast-registered regions that are locally writable are
    /// also remotely writable, as the sink of an iWARP RDMA Read must be.
    read_sink: bool,
    /// Its protection domain: datagrams go through address handles of the same.
    pdn: u32,
    /// Its Q_Key, for datagrams sent with a "controlled" Q_Key (bit 31 set).
    qkey: AtomicU32,
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
    /// Whether "communication established" was reported since the last state change.
    comm_est: AtomicBool,
    #[pin]
    sq: SpinLockIrq<WorkQueue>,
    #[pin]
    rq: SpinLockIrq<WorkQueue>,
}

/// The driver's side of a send or receive queue: its producer and consumer indices (in
/// entries, basic blocks for a send queue) and, by ring position, the work request that starts
/// there. Completions are taken only for requests posted and not yet completed, so the consumer
/// index never passes the producer and no request completes twice, whatever the adapter reports.
struct WorkQueue {
    pi: u16,
    ci: u16,
    /// Entries, a power of two.
    depth: u16,
    wr_ids: KVec<u64>,
    /// The length in entries of the request that starts at each position; 0 where none does.
    lens: KVec<u8>,
    /// A receive queue's: the bytes each receive can take, by position (empty for a send
    /// queue).
    bytes: KVec<u32>,
}

impl WorkQueue {
    fn new(depth: u16) -> Result<Self> {
        let mut wr_ids = KVec::with_capacity(depth.into(), GFP_KERNEL)?;
        wr_ids.resize(depth.into(), 0, GFP_KERNEL)?;
        let mut lens = KVec::with_capacity(depth.into(), GFP_KERNEL)?;
        lens.resize(depth.into(), 0, GFP_KERNEL)?;
        Ok(Self {
            pi: 0,
            ci: 0,
            depth,
            wr_ids,
            lens,
            bytes: KVec::new(),
        })
    }

    /// A receive queue of `depth` entries, which keeps the size of each receive.
    fn new_recv(depth: u16) -> Result<Self> {
        let mut q = Self::new(depth)?;
        q.bytes.resize(depth.into(), 0, GFP_KERNEL)?;
        Ok(q)
    }

    fn pos(&self, index: u16) -> usize {
        usize::from(index & (self.depth - 1))
    }

    /// Entries posted and not completed.
    fn used(&self) -> u16 {
        self.pi.wrapping_sub(self.ci)
    }

    /// Whether a request of `len` entries fits.
    fn has_room(&self, len: u16) -> bool {
        u32::from(self.used()) + u32::from(len) <= u32::from(self.depth)
    }

    /// Records request `wr_id` of `len` entries (1 to 255, room checked), written at the
    /// producer index; returns the producer index after it.
    fn push(&mut self, wr_id: u64, len: u8) -> u16 {
        let pos = self.pos(self.pi);
        self.wr_ids[pos] = wr_id;
        self.lens[pos] = len;
        self.pi = self.pi.wrapping_add(len.into());
        self.pi
    }

    /// Empty again (RESET).
    fn clear(&mut self) {
        self.pi = 0;
        self.ci = 0;
        self.lens.fill(0);
    }

    /// A send completion at `index`: the request that starts there, if it is posted and not
    /// completed, completes, and the unsignaled ones before it with it; its ID. An index inside
    /// a request, or outside what is posted, completes nothing.
    fn complete_at(&mut self, index: u16) -> Option<u64> {
        if index.wrapping_sub(self.ci) >= self.used() {
            return None;
        }
        let pos = self.pos(index);
        let len = self.lens[pos];
        if len == 0 {
            return None;
        }
        let end = index.wrapping_add(len.into());
        while self.ci != end {
            let at = self.pos(self.ci);
            self.lens[at] = 0;
            self.ci = self.ci.wrapping_add(1);
        }
        Some(self.wr_ids[pos])
    }

    /// The oldest request posted and not completed, completed as flushed by the driver (the
    /// adapter failed, so none will complete by it); its ID.
    fn flush_next(&mut self) -> Option<u64> {
        while self.used() > 0 {
            let pos = self.pos(self.ci);
            let len = self.lens[pos];
            if len == 0 {
                // Not the start of a request (the consumer index always is): step over it.
                self.ci = self.ci.wrapping_add(1);
                continue;
            }
            self.lens[pos] = 0;
            self.ci = self.ci.wrapping_add(len.into());
            return Some(self.wr_ids[pos]);
        }
        None
    }

    /// Records receive `wr_id` (room checked) that can take `bytes`; returns the producer
    /// index after it.
    fn push_recv(&mut self, wr_id: u64, bytes: u32) -> u16 {
        let pos = self.pos(self.pi);
        if let Some(b) = self.bytes.get_mut(pos) {
            *b = bytes;
        }
        self.push(wr_id, 1)
    }

    /// A receive completion at `index`: receives complete in the order they were posted, so
    /// only the oldest one may; its ID and the bytes it could take. Any other index completes
    /// nothing, and no receive is ever skipped.
    fn complete_next(&mut self, index: u16) -> Option<(u64, u32)> {
        if self.used() == 0 || index != self.ci {
            return None;
        }
        let pos = self.pos(index);
        self.lens[pos] = 0;
        self.ci = self.ci.wrapping_add(1);
        Some((self.wr_ids[pos], self.bytes.get(pos).copied().unwrap_or(0)))
    }
}

/// On an iWARP adapter the connection manager, not modify, takes a queue pair to RTS and
/// stops it: posting follows. Every stopped state (CLOSING, TERMINATE, ERROR) flushes, so
/// posting treats each as ERROR.
impl IwStateSink for KernelQp {
    fn iw_state_changed(&self, state: QpState) {
        self.set_state(match state {
            QpState::Sqd | QpState::Sqe => QpState::Err,
            s => s,
        });
    }

    fn reflush(&self) -> Reflush {
        KernelQp::reflush(self)
    }
}

impl KernelQp {
    /// Zeroed queues of `sq_depth` basic blocks and `rq_depth` entries; `read_sink` in compat
    /// mode.
    pub(crate) fn new(
        dev: &device::Device<device::Bound>,
        sq_depth: u16,
        rq_depth: u16,
        sq_sig_all: bool,
        ud: bool,
        read_sink: bool,
        pdn: u32,
    ) -> Result<impl PinInit<Self, Error>> {
        let sq_ring = Coherent::zeroed_slice(dev, usize::from(sq_depth) * WQEBB_WORDS, GFP_KERNEL)?;
        let rq_ring = Coherent::zeroed_slice(dev, usize::from(rq_depth) * RQE_WORDS, GFP_KERNEL)?;
        let sq_db = Doorbell::new(dev, KERNEL_SQ_DB)?;
        let rq_db = Doorbell::new(dev, KERNEL_RQ_DB)?;
        let sq = WorkQueue::new(sq_depth)?;
        let rq = WorkQueue::new_recv(rq_depth)?;
        Ok(try_pin_init!(Self {
            ud,
            read_sink,
            pdn,
            qkey: AtomicU32::new(0),
            qpn: AtomicU32::new(0),
            sq_depth,
            rq_depth,
            sq_sig_all,
            sq_ring,
            rq_ring,
            sq_db,
            rq_db,
            state: AtomicU32::new(QpState::Reset.to_raw()),
            comm_est: AtomicBool::new(false),
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

    /// Records a state change; RESET starts both queues over (erdma_rs_hw 10.12).
    ///
    /// The state is read after every post ([`KernelQp::in_error`]) and written before the
    /// producer indices are read for a REFLUSH ([`KernelQp::reflush`]), both sequentially
    /// consistent: a post either sees ERROR and asks for its own REFLUSH, or is seen by the
    /// REFLUSH that follows the move to ERROR.
    pub(crate) fn set_state(&self, state: QpState) {
        if state == QpState::Reset {
            for q in [&self.sq, &self.rq] {
                q.lock().clear();
            }
        }
        self.state.store(state.to_raw(), Ordering::SeqCst);
        self.comm_est.store(false, Ordering::Relaxed);
    }

    /// Records the Q_Key a modification set.
    pub(crate) fn set_qkey(&self, qkey: u32) {
        self.qkey.store(qkey, Ordering::Relaxed);
    }

    fn can_post_send(&self) -> bool {
        let s = self.state.load(Ordering::Relaxed);
        s == QpState::Rts.to_raw() || s == QpState::Sqd.to_raw() || s == QpState::Err.to_raw()
    }

    fn can_post_recv(&self) -> bool {
        self.state.load(Ordering::Relaxed) != QpState::Reset.to_raw()
    }

    /// Whether the queue pair is in ERROR, where work posted needs a REFLUSH to complete.
    pub(crate) fn in_error(&self) -> bool {
        self.state.load(Ordering::SeqCst) == QpState::Err.to_raw()
    }

    /// The REFLUSH that makes the adapter flush everything posted so far (erdma_rs_hw 10.13).
    pub(crate) fn reflush(&self) -> Reflush {
        Reflush {
            qpn: self.qpn(),
            sq_pi: self.sq.lock().pi.into(),
            rq_pi: self.rq.lock().pi.into(),
        }
    }

    /// Posts send work requests; on failure, the error and the index of the first not posted.
    pub(crate) fn post_send<T>(
        &self,
        bar: &Bar0<'_>,
        wrs: SendWrs<'_, T>,
    ) -> core::result::Result<(), (Error, usize)>
    where
        T: kernel::rdma::Driver,
        T::Mr: FastReg,
        T::Ah: AddressHandle,
    {
        if !self.can_post_send() {
            return Err((EINVAL, 0));
        }
        let mut sq = self.sq.lock();
        for (i, wr) in wrs.enumerate() {
            let mut wqe = SqeImage([0; MAX_SQE_SIZE]);
            let body = self.build_sqe(&wr, &mut wqe).map_err(|e| (e, i))?;
            let blocks = body.len.div_ceil(WQEBB_SIZE);
            // CAST: at most 4 blocks.
            if !sq.has_room(blocks as u16) {
                return Err((ENOMEM, i));
            }
            let mask = self.sq_depth - 1;
            let pi = sq.pi;
            // CAST: at most 4 blocks.
            let next = pi.wrapping_add(blocks as u16);
            let hdr = body
                .hdr
                .with_wqebb_index(next)
                .with_opcode(low64(body.opcode.into()))
                .with_qpn(low64(self.qpn().into()))
                .with_wqebbs_minus_one(low64(blocks as u64 - 1))
                .with_signaled(wr.flags().contains(SendFlag::Signaled) || self.sq_sig_all)
                .with_solicited(wr.flags().contains(SendFlag::Solicited))
                .with_fence(wr.flags().contains(SendFlag::Fence));
            wqe.put(0, &hdr).map_err(|e| (e, i))?;
            let words = wqe.words();
            // The body first, then the header (erdma_rs_hw 10.7); an entry may wrap the ring.
            let order = Iterator::chain(1..blocks * WQEBB_WORDS, core::iter::once(0));
            for (w, word) in order.filter_map(|w| Some((w, *words.get(w)?))) {
                // CAST: `w / 4` is below 4.
                let block = usize::from(pi.wrapping_add((w / WQEBB_WORDS) as u16) & mask);
                // Cannot fail: `block` is below the depth.
                let _ = write64(&self.sq_ring, block * WQEBB_WORDS + w % WQEBB_WORDS, word);
            }
            // CAST: at most 4 blocks.
            sq.push(wr.wr_id(), blocks as u8);
            let db = SqDoorbell::zeroed()
                .with_qpn(low64(self.qpn().into()))
                .with_pi(next);
            self.sq_db.ring(bar, db.into_raw());
        }
        Ok(())
    }

    /// Builds the body of the entry for `wr` in `wqe`; the caller completes the header.
    fn build_sqe<T>(&self, wr: &SendWr<'_, T>, wqe: &mut SqeImage) -> Result<SqeBody>
    where
        T: kernel::rdma::Driver,
        T::Mr: FastReg,
        T::Ah: AddressHandle,
    {
        let hdr = SqeHeader::zeroed();
        let op = wr.opcode().ok_or(EINVAL)?;
        // Datagram queue pairs send and nothing else (erdma_rs_hw 5.3), through an address
        // handle of their protection domain.
        let datagram = if self.ud {
            if !matches!(op, WrOpcode::Send | WrOpcode::SendImm) {
                return Err(EINVAL);
            }
            let ud = wr.ud()?;
            let ah = ud.ah.data();
            if ah.pdn() != self.pdn {
                return Err(EINVAL);
            }
            let qkey = if ud.remote_qkey & (1 << 31) != 0 {
                self.qkey.load(Ordering::Relaxed)
            } else {
                ud.remote_qkey
            };
            Some((ah.ahn(), ud.remote_qpn & 0xff_ffff, qkey))
        } else {
            None
        };
        let (code, sgl_at) = match op {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteImm => {
                wr.rdma().ok_or(EINVAL)?;
                let code = if op == WrOpcode::RdmaWrite {
                    opcode::WRITE
                } else {
                    opcode::WRITE_WITH_IMM
                };
                (code, size_of::<WriteSqe>())
            }
            WrOpcode::Send | WrOpcode::SendImm | WrOpcode::SendInv => {
                let code = match op {
                    WrOpcode::Send => opcode::SEND,
                    WrOpcode::SendImm => opcode::SEND_WITH_IMM,
                    _ => opcode::SEND_WITH_INV,
                };
                let fixed = if datagram.is_some() {
                    size_of::<UdSendSqe>()
                } else {
                    size_of::<SendSqe>()
                };
                (code, fixed)
            }
            WrOpcode::RdmaRead | WrOpcode::RdmaReadInv => {
                let (raddr, rkey) = wr.rdma().ok_or(EINVAL)?;
                let mut sges = wr.sges();
                let sink = sges.next().ok_or(EINVAL)?;
                if sges.next().is_some() {
                    return Err(EINVAL);
                }
                let (code, inv_key) = if op == WrOpcode::RdmaRead {
                    (opcode::READ, 0)
                } else {
                    (opcode::READ_WITH_INV, wr.invalidate_rkey())
                };
                wqe.put(
                    0,
                    &ReadSqe {
                        hdr,
                        inv_key,
                        length: sink.length,
                        sink_lkey: sink.lkey,
                        sink_addr_lo: lower(sink.addr),
                        sink_addr_hi: upper(sink.addr),
                        reserved: 0,
                        remote: Sge {
                            addr: raddr,
                            length: sink.length,
                            key: rkey,
                        },
                    },
                )?;
                return Ok(SqeBody {
                    opcode: code,
                    len: size_of::<ReadSqe>(),
                    hdr,
                });
            }
            WrOpcode::AtomicCmpSwp | WrOpcode::AtomicFetchAdd => {
                let (raddr, rkey, compare_add, swap) = wr.atomic().ok_or(EINVAL)?;
                let mut sges = wr.sges();
                let local = sges.next().ok_or(EINVAL)?;
                if sges.next().is_some() {
                    return Err(EINVAL);
                }
                let (code, swap_or_add, compare) = if op == WrOpcode::AtomicCmpSwp {
                    (opcode::ATOMIC_CAS, swap, compare_add)
                } else {
                    (opcode::ATOMIC_FAA, compare_add, 0)
                };
                wqe.put(
                    0,
                    &AtomicSqe {
                        hdr,
                        reserved: 0,
                        swap_or_add,
                        compare,
                        remote: Sge {
                            addr: raddr,
                            length: 8,
                            key: rkey,
                        },
                        local: Sge {
                            addr: local.addr,
                            length: local.length,
                            key: local.lkey,
                        },
                    },
                )?;
                return Ok(SqeBody {
                    opcode: code,
                    len: size_of::<AtomicSqe>(),
                    hdr,
                });
            }
            WrOpcode::LocalInv => {
                wqe.put(
                    0,
                    &LocalInvSqe {
                        hdr,
                        reserved0: [0; 3],
                        key: wr.invalidate_rkey(),
                        reserved1: [0; 2],
                    },
                )?;
                return Ok(SqeBody {
                    opcode: opcode::LOCAL_INV,
                    len: size_of::<LocalInvSqe>(),
                    hdr,
                });
            }
            WrOpcode::RegMr => {
                let (mr, key, access) = wr.reg().ok_or(EINVAL)?;
                let frmr = mr.data().frmr().ok_or(EINVAL)?;
                let npages = frmr.npages();
                let mut sqe = RegMrSqe {
                    hdr,
                    iova: mr.iova(),
                    // CAST: the low half of the length (erdma_rs_hw 5.4).
                    length: mr.length() as u32,
                    stag: key,
                    attrs: RegMrSqeAttrs::zeroed()
                        .with_access(if self.read_sink {
                            MrAccess::from_verbs(access).read_sink()
                        } else {
                            MrAccess::from_verbs(access)
                        })
                        .with_npages(low32(npages)),
                    reserved: 0,
                    pages: [0; 4],
                };
                // The fixed part, then the inline pages if they fit.
                let mut len = size_of::<RegMrSqe>() - size_of_val(&sqe.pages);
                if npages as usize <= sqe.pages.len() {
                    for (k, page) in sqe.pages.iter_mut().take(npages as usize).enumerate() {
                        *page = frmr.page(k)?;
                    }
                    len += 8 * npages as usize;
                } else {
                    sqe.attrs = sqe.attrs.with_mtt_type(low32(frmr_mtt::REGISTERED.into()));
                }
                wqe.put(0, &sqe)?;
                return Ok(SqeBody {
                    opcode: opcode::REG_MR,
                    len,
                    hdr,
                });
            }
        };

        // Sends and writes: the immediate or the key to invalidate, then the payload.
        let ex = match op {
            WrOpcode::RdmaWriteImm | WrOpcode::SendImm => wr.imm_data_be(),
            WrOpcode::SendInv => wr.invalidate_rkey(),
            _ => 0,
        };
        let mut hdr = hdr;
        let (length, n) = if wr.flags().contains(SendFlag::Inline) {
            let mut buf = [0u8; MAX_INLINE as usize];
            let n = wr.copy_inline(&mut buf)?;
            // The payload follows the fixed part byte for byte.
            wqe.put(sgl_at, &buf[..n])?;
            hdr = hdr.with_inline(true);
            (n as u32, n)
        } else {
            if wr.num_sge() > MAX_SEND_SGE as usize {
                return Err(EINVAL);
            }
            let mut total = 0u32;
            for (k, sge) in wr.sges().enumerate() {
                let entry = Sge {
                    addr: sge.addr,
                    length: sge.length,
                    key: sge.lkey,
                };
                wqe.put(sgl_at + k * size_of::<Sge>(), &entry)?;
                total = total.wrapping_add(sge.length);
            }
            (total, wr.num_sge())
        };
        if let Some((ahn, dst_qpn, qkey)) = datagram {
            wqe.put(
                0,
                &UdSendSqe {
                    hdr,
                    imm: ex,
                    length,
                    qkey,
                    dst_qpn,
                    ahn,
                    reserved: 0,
                },
            )?;
        } else if let Some((raddr, rkey)) = wr.rdma() {
            wqe.put(
                0,
                &WriteSqe {
                    hdr,
                    imm: ex,
                    length,
                    rkey,
                    raddr_lo: lower(raddr),
                    raddr_hi: upper(raddr),
                    reserved: 0,
                },
            )?;
        } else {
            wqe.put(
                0,
                &SendSqe {
                    hdr,
                    imm_or_inv: ex,
                    length,
                },
            )?;
        }
        // CAST: at most 96 bytes or 6 entries.
        let hdr = hdr.with_sgl_len(low64(n as u64));
        let len = if hdr.inline() {
            sgl_at + n
        } else {
            sgl_at + size_of::<Sge>() * n
        };
        Ok(SqeBody {
            opcode: code,
            len: len.max(WQEBB_SIZE),
            hdr,
        })
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
            if !rq.has_room(1) {
                return Err((ENOMEM, i));
            }
            let mut sges = wr.sges();
            let sge = sges.next();
            if sges.next().is_some() {
                return Err((EINVAL, i));
            }
            let pi = rq.pi;
            let next = pi.wrapping_add(1);
            let head = RqDoorbell::zeroed().with_pi(next).with_qpn(self.qpn());
            let rqe = Rqe {
                head,
                reserved: 0,
                sge: sge.map_or(
                    Sge {
                        addr: 0,
                        length: 0,
                        key: 0,
                    },
                    |s| Sge {
                        addr: s.addr,
                        length: s.length,
                        key: s.lkey,
                    },
                ),
            };
            let base = usize::from(pi & (self.rq_depth - 1)) * RQE_WORDS;
            let mut words = [0; RQE_WORDS];
            for (dst, src) in words.iter_mut().zip(words64(rqe.as_bytes())) {
                *dst = src;
            }
            // Cannot fail: `base` is below the depth. The first word goes last.
            for (k, word) in words.iter().enumerate().rev() {
                let _ = write64(&self.rq_ring, base + k, *word);
            }
            rq.push_recv(wr.wr_id(), sge.map_or(0, |s| s.length));
            self.rq_db.ring(bar, head.into_raw());
        }
        Ok(())
    }

    /// Fills `wcs` with flushed completions of what is posted and not completed, the send
    /// queue's first: the adapter failed, and the driver completes the work in its place, so
    /// that consumers waiting for it (a drain, a ULP's teardown) get it back. Returns how many.
    fn flush_into(&self, events: &QpEvents, wcs: &mut [Wc]) -> usize {
        let mut n = 0;
        for (q, opcode) in [(&self.sq, WcOpcode::Send), (&self.rq, WcOpcode::Recv)] {
            let mut q = q.lock();
            while let Some(wc) = wcs.get_mut(n) {
                let Some(wr_id) = q.flush_next() else {
                    break;
                };
                wc.set(
                    events,
                    wr_id,
                    WcStatus::WrFlushErr,
                    opcode,
                    0,
                    0,
                    WcFlags::empty(),
                    0,
                );
                n += 1;
            }
        }
        n
    }

    /// Whether work is posted and not completed.
    fn has_work(&self) -> bool {
        self.sq.lock().used() > 0 || self.rq.lock().used() > 0
    }

    /// Turns a CQE of this QP into a work completion; false for one that completes nothing
    /// (an index the queue does not hold).
    fn complete(&self, events: &QpEvents, cqe: &Cqe, wc: &mut Wc) -> bool {
        let hdr = cqe.header();
        // CAST: an 8-bit field.
        let op = hdr.opcode().get() as u8;
        let (status, vendor) = wc_status(hdr.status().get());
        // CAST: queue counters are 16 bits wide.
        let idx = cqe.wqe_index.get() as u16;
        let byte_len = cqe.byte_len.get();
        if hdr.queue().get() == u32::from(cqe_queue::RQ) {
            let Some((wr_id, posted)) = self.rq.lock().complete_next(idx) else {
                return false;
            };
            // The adapter may not claim more than the receive could take: consumers read
            // `byte_len` bytes of their buffer.
            let byte_len = byte_len.min(posted);
            let (opcode, flags, ex) = match op {
                opcode::RECV_IMM => (WcOpcode::RecvRdmaWithImm, WcFlag::WithImm.into(), cqe.imm()),
                opcode::RSP_SEND_IMM => (WcOpcode::Recv, WcFlag::WithImm.into(), cqe.imm()),
                opcode::RECV_INV => (
                    WcOpcode::Recv,
                    WcFlag::WithInvalidate.into(),
                    cqe.invalidated_key(),
                ),
                _ => (WcOpcode::Recv, WcFlags::empty(), 0),
            };
            let flags = if status == WcStatus::Success {
                flags
            } else {
                WcFlags::empty()
            };
            wc.set(events, wr_id, status, opcode, vendor, byte_len, flags, ex);
            // A connected QP that receives while in RTR is connected: the connection manager
            // may not know yet (its RTU is late or lost). The adapter has no event for this;
            // the driver tells the consumer once, as the verbs specify.
            if !self.ud
                && status == WcStatus::Success
                && self.state.load(Ordering::Relaxed) == QpState::Rtr.to_raw()
                && !self.comm_est.swap(true, Ordering::Relaxed)
            {
                events.event(QpEvent::CommEst);
            }
            if self.ud {
                // The receive buffer starts with the 40-byte network header area.
                let info = cqe.ud_info();
                let net = if info.ipv6() {
                    NetworkType::Ipv6
                } else {
                    NetworkType::Ipv4
                };
                // CAST: an 8-bit field.
                wc.set_datagram(info.src_qpn().get(), info.sl().get() as u8, net);
            }
        } else {
            let Some(wr_id) = self.sq.lock().complete_at(idx) else {
                return false;
            };
            let opcode = match op {
                opcode::WRITE | opcode::WRITE_WITH_IMM => WcOpcode::RdmaWrite,
                opcode::READ | opcode::READ_WITH_INV => WcOpcode::RdmaRead,
                opcode::ATOMIC_CAS => WcOpcode::CompSwap,
                opcode::ATOMIC_FAA => WcOpcode::FetchAdd,
                opcode::LOCAL_INV | opcode::INVALIDATE => WcOpcode::LocalInv,
                opcode::REG_MR => WcOpcode::RegMr,
                _ => WcOpcode::Send,
            };
            wc.set(
                events,
                wr_id,
                status,
                opcode,
                vendor,
                byte_len,
                WcFlags::empty(),
                0,
            );
        }
        true
    }
}

#[kunit_tests(erdma_rs_kverbs)]
mod tests {
    use super::*;

    /// A small deterministic generator (xorshift64*): the sequences are random-looking and
    /// the same every run.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
        }
    }

    /// What was posted and not completed, oldest first: (start index, entries, ID).
    struct Posted {
        reqs: KVec<(u16, u8, u64)>,
        head: usize,
    }

    impl Posted {
        fn pending(&self) -> &[(u16, u8, u64)] {
            &self.reqs[self.head..]
        }

        /// The queue's indices agree with what is pending.
        fn check(&self, q: &WorkQueue) {
            let used: u32 = self.pending().iter().map(|r| u32::from(r.1)).sum();
            assert_eq!(u32::from(q.used()), used);
            assert!(q.used() <= q.depth);
            assert_eq!(self.pending().first().map_or(q.pi, |r| r.0), q.ci);
        }
    }

    /// Random posts of 1 to 4 entries, completions of posted requests (each completing the
    /// unsignaled ones before it, as the adapter does) and completions at hostile indices:
    /// the consumer index never passes the producer, no request completes twice or out of
    /// turn, an index inside a request completes nothing.
    #[test]
    fn send_completions_never_overrun_or_repeat() -> Result {
        for seed in 1..=6u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let mut q = WorkQueue::new(32)?;
            let mut p = Posted {
                reqs: KVec::new(),
                head: 0,
            };
            let mut next_id = 0u64;
            for _ in 0..3000 {
                match rng.below(3) {
                    0 => {
                        // CAST: 1 to 4.
                        let len = (1 + rng.below(4)) as u8;
                        if q.has_room(len.into()) {
                            let start = q.pi;
                            assert_eq!(q.push(next_id, len), start.wrapping_add(len.into()));
                            p.reqs.push((start, len, next_id), GFP_KERNEL)?;
                            next_id += 1;
                        }
                    }
                    1 if !p.pending().is_empty() => {
                        // CAST: fewer than 32 pending.
                        let k = rng.below(p.pending().len() as u64) as usize;
                        let (start, _, id) = p.pending()[k];
                        assert_eq!(q.complete_at(start), Some(id));
                        p.head += k + 1;
                    }
                    _ => {
                        // CAST: any index around the ring, masked to 16 bits.
                        let index = q.ci.wrapping_add(rng.below(96) as u16).wrapping_sub(32);
                        let at = p.pending().iter().position(|r| r.0 == index);
                        match q.complete_at(index) {
                            Some(id) => {
                                let k = at.ok_or(EINVAL)?;
                                assert_eq!(p.pending()[k].2, id);
                                p.head += k + 1;
                            }
                            None => assert!(at.is_none()),
                        }
                    }
                }
                p.check(&q);
            }
            // Everything completed again completes nothing.
            for r in 0..p.head {
                assert_eq!(q.complete_at(p.reqs[r].0), None);
            }
        }
        Ok(())
    }

    /// Once the adapter failed, the driver flushes what is left: after random posts and
    /// random completions (at good and hostile indices), `flush_next` gives back exactly the
    /// requests still pending, oldest first, each once, and leaves the queue empty.
    #[test]
    fn a_failed_adapters_work_flushes_exactly_what_is_pending() -> Result {
        for seed in 1..=6u64 {
            let mut rng = Rng(seed.wrapping_mul(0x94d0_49bb_1331_11eb));
            let mut q = WorkQueue::new(32)?;
            let mut p = Posted {
                reqs: KVec::new(),
                head: 0,
            };
            let mut next_id = 0u64;
            for _ in 0..rng.below(200) {
                // CAST: 1 to 4.
                let len = (1 + rng.below(4)) as u8;
                if rng.below(3) > 0 && q.has_room(len.into()) {
                    let start = q.pi;
                    q.push(next_id, len);
                    p.reqs.push((start, len, next_id), GFP_KERNEL)?;
                    next_id += 1;
                } else {
                    // CAST: any index around the ring, masked to 16 bits.
                    let index = q.ci.wrapping_add(rng.below(40) as u16).wrapping_sub(4);
                    if let Some(id) = q.complete_at(index) {
                        let k = p.pending().iter().position(|r| r.2 == id).ok_or(EINVAL)?;
                        p.head += k + 1;
                    }
                }
                p.check(&q);
            }
            for &(_, _, id) in p.pending() {
                assert_eq!(q.flush_next(), Some(id));
            }
            assert_eq!(q.flush_next(), None);
            assert_eq!(q.used(), 0);
            // And a flushed request never completes again.
            for r in &p.reqs {
                assert_eq!(q.complete_at(r.0), None);
            }
        }
        Ok(())
    }

    /// Receives complete in the order they were posted, one at a time: a completion at any
    /// other index (ahead, behind, repeated) completes nothing and skips nothing.
    #[test]
    fn receives_are_never_skipped() -> Result {
        for seed in 1..=6u64 {
            let mut rng = Rng(seed.wrapping_mul(0xd1b5_4a32_d192_ed03));
            let mut q = WorkQueue::new_recv(16)?;
            let mut p = Posted {
                reqs: KVec::new(),
                head: 0,
            };
            let mut next_id = 0u64;
            for _ in 0..3000 {
                if rng.below(2) == 0 {
                    if q.has_room(1) {
                        let start = q.pi;
                        // CAST: a small test value.
                        q.push_recv(next_id, next_id as u32);
                        p.reqs.push((start, 1, next_id), GFP_KERNEL)?;
                        next_id += 1;
                    }
                } else {
                    // CAST: any index around the ring, masked to 16 bits.
                    let index = q.ci.wrapping_add(rng.below(4) as u16).wrapping_sub(1);
                    match q.complete_next(index) {
                        Some((id, bytes)) => {
                            assert_eq!(u64::from(bytes), id);
                            assert_eq!(p.pending().first().map(|r| (r.0, r.2)), Some((index, id)));
                            p.head += 1;
                        }
                        None => assert!(p.pending().first().is_none_or(|r| r.0 != index)),
                    }
                }
                p.check(&q);
            }
        }
        Ok(())
    }

    #[test]
    fn stale_completions_are_dropped_until_the_consumer_passes_them() -> Result {
        let mut f = StaleFilter::new();
        assert!(!f.drops(7, 0));
        // QP 7 went back to RESET with completions at positions 10..12 in the ring.
        f.add(7, 13)?;
        assert!(!f.drops(8, 10));
        assert!(f.drops(7, 11));
        assert!(f.drops(7, 12));
        // Past the recorded position: QP 7's new completions count, the entry is gone.
        assert!(!f.drops(7, 13));
        assert!(f.entries.is_empty());
        // Across the wrap of ring positions.
        f.add(3, 2)?;
        assert!(f.drops(3, u32::MAX));
        assert!(f.drops(3, 1));
        assert!(!f.drops(3, 2));
        // Two queue pairs at once; each entry leaves when the consumer passes it.
        f.add(1, 105)?;
        f.add(2, 110)?;
        assert!(f.drops(1, 100));
        assert!(f.drops(2, 104));
        assert_eq!(f.entries.len(), 1);
        assert!(!f.drops(1, 106));
        assert!(f.drops(2, 109));
        assert!(f.entries.is_empty());
        Ok(())
    }

    /// RESET empties the queue: old indices complete nothing, new posts start at 0.
    #[test]
    fn a_cleared_queue_forgets_its_requests() -> Result {
        let mut q = WorkQueue::new(8)?;
        q.push(1, 2);
        q.push(2, 1);
        q.clear();
        assert_eq!(q.complete_at(0), None);
        assert_eq!(q.complete_at(2), None);
        assert_eq!(q.push(3, 1), 1);
        assert_eq!(q.complete_at(0), Some(3));
        assert_eq!(q.used(), 0);
        Ok(())
    }
}
