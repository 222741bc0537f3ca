// SPDX-License-Identifier: GPL-2.0

//! The RDMA object tables (QPs, CQs, MRs) and what their commands do to them (erdma_rs_hw 3.5,
//! §6). [`Rdma`] checks and changes itself with only what each command needs besides the tables
//! (the capabilities, the protocol, guest memory for queue MTTs, whether a CEQ exists); what a
//! command does beyond the tables (starting or stopping the engines, iWARP streams) is the
//! device's (`rdma_cmds`).
//!
//! * Every command works on both protocols. On an iWARP function QPs are RC only (a UD QP is
//!   [`Status::Unsupported`]), start in IDLE, and MODIFY_QP uses the iWARP layout (the `iwarp`
//!   submodule); QUERY_QP reports the iWARP state.
//! * Every field is range-checked against the capabilities; only fields meaningful for the
//!   command and its flags are looked at.
//! * DESTROY_CQ of a CQ that QPs still name succeeds: completions for it are dropped (logged),
//!   because drivers free their resources whatever the device says.
//! * Queue MTTs are read at creation; MR MTTs at use time (see [`crate::mtt`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use super::iwarp_qp::{Cookies, Iwarp};
use super::Protocol;
use crate::caps::Caps;
use crate::cmdq::{AddressVector, Status};
use crate::fabric::{AtomicOp, Packet, Request};
use crate::io::GuestMemory;
use crate::mtt::{Mtt, QueueBuf, MAX_MTT_PAGE_SHIFT};
use crate::wire::{
    self, CreateCq, CreateQp, DeregMr, MrType, QpState, QueueMttCfg, Reflush, RegMr, Sge, U32Arg,
    CQE_SIZE, QP_TYPE_RC, QP_TYPE_UD, RQE_SIZE, SQ_WQEBB_SIZE,
};

/// A command's result.
pub(super) type Outcome = Result<(u64, u64), Status>;

/// Largest page-size code of queue buffers (4 bits: up to 128 MiB "pages").
const MAX_QUEUE_PAGE_SHIFT: u8 = 12 + 15;
/// Deepest SQ in WQEBBs (8192 WRs of 4 WQEBBs).
pub const MAX_SQ_DEPTH_LOG2: u32 = 15;
/// Largest MR page size the model accepts (1 GiB, `page_size_cap`).
const MAX_MR_PAGE_SHIFT: u8 = 30;
/// Most pages of a fast-register MR (§6).
pub const MAX_FRMR_PAGES: u64 = 524_288;
/// Most queue pages (page-list entries of SQs, RQs and CQs) a function holds together: 8 MiB
/// of page lists, 4 GiB of queues in 4 KiB pages (a guest cannot pin that much for its queues
/// legitimately, but a page list may name one page many times). CREATE_CQ / CREATE_QP beyond
/// it fail with status 3 (no resources).
pub const MAX_QUEUE_PAGES: u64 = 1 << 20;

/// A work queue (SQ or RQ).
#[derive(Clone, Debug)]
pub(super) struct Wq {
    pub buf: QueueBuf,
    /// Entries (WQEBBs or RQEs), a power of two.
    pub depth: u32,
    /// The producer index of the last doorbell (16 bits).
    pub pi: u16,
    /// The device's consumer index (16 bits).
    pub ci: u16,
}

/// A request sent (or a local operation done) and not yet completed, in SQ order. A message
/// travels as one request per segment ([`crate::fabric::SEGMENT`]) with consecutive sequence
/// numbers from `seq`; it completes when every segment is answered (or one fails).
#[derive(Clone, Debug)]
pub(super) struct Pending {
    /// Sequence number of the network request, the first segment's (`None`: a local
    /// operation, or a message none of whose segments is sent yet).
    pub seq: Option<u64>,
    /// The message's length (payload, READ length, 8 for an atomic): what its segments carry.
    pub len: u64,
    /// Segments sent so far.
    pub segs: u64,
    /// Segments answered so far.
    pub answered: u64,
    /// Bytes of the QP's and the port's windows this entry holds ([`Qp::inflight`]).
    pub charge: u64,
    /// Counter of the WQE's first WQEBB.
    pub wqe_index: u16,
    /// WQE opcode.
    pub opcode: u8,
    /// CE flag.
    pub signaled: bool,
    /// The completion status once known.
    pub status: Option<u8>,
    /// Byte count for the CQE.
    pub byte_len: u32,
    /// Where a READ response or the atomic's original value goes: `(addr, len, lkey)`.
    pub sink: Option<(u64, u32, u32)>,
    /// READ_WITH_INV: the local STag to invalidate when the READ completes.
    pub inv_after: Option<u32>,
}

impl Pending {
    /// A WQE's entry, not sent yet.
    pub(super) fn new(wqe_index: u16, opcode: u8, signaled: bool) -> Self {
        Pending {
            seq: None,
            len: 0,
            segs: 0,
            answered: 0,
            charge: 0,
            wqe_index,
            opcode,
            signaled,
            status: None,
            byte_len: 0,
            sink: None,
            inv_after: None,
        }
    }

    /// Whether request `seq` is one of this entry's segments.
    pub(super) fn covers(&self, seq: u64) -> bool {
        self.seq
            .is_some_and(|first| seq >= first && seq - first < self.segs)
    }

    /// Offset and length of segment `i` of the message.
    pub(super) fn segment(&self, i: u64) -> (u64, u64) {
        let off = i.saturating_mul(crate::fabric::SEGMENT);
        (
            off,
            self.len.saturating_sub(off).min(crate::fabric::SEGMENT),
        )
    }

    /// Segments of the message (at least one, also for no payload).
    pub(super) fn segments(&self) -> u64 {
        self.len.div_ceil(crate::fabric::SEGMENT).max(1)
    }
}

/// Where a message's payload comes from: inline bytes or local SGEs (read a segment at a time).
#[derive(Clone, Debug)]
pub(super) enum Source {
    Inline(Vec<u8>),
    Sges(Vec<Sge>),
}

/// What a message is, for building its segments.
#[derive(Clone, Debug)]
pub(super) enum MsgKind {
    Send {
        src: Source,
        imm: Option<[u8; 4]>,
        inv: Option<u32>,
        solicited: bool,
    },
    Write {
        src: Source,
        addr: u64,
        rkey: u32,
        imm: Option<[u8; 4]>,
        solicited: bool,
    },
    Read {
        addr: u64,
        rkey: u32,
    },
    Atomic {
        addr: u64,
        rkey: u32,
        op: AtomicOp,
    },
}

/// The message of the last outstanding WQE while its segments are still being sent (the
/// requester sends them as the windows allow).
#[derive(Clone, Debug)]
pub(super) struct Cursor {
    pub kind: MsgKind,
    /// The next segment's index.
    pub next: u64,
}

/// Incoming requests held for receive WQEs, with their payload bytes.
#[derive(Clone, Debug, Default)]
pub(super) struct Held {
    q: VecDeque<Packet>,
    bytes: u64,
}

impl Held {
    /// What a held packet costs: payload plus [`crate::fabric::PACKET_COST`].
    pub(super) fn cost(pkt: &Packet) -> u64 {
        pkt.payload_len() as u64 + crate::fabric::PACKET_COST
    }
    pub(super) fn len(&self) -> usize {
        self.q.len()
    }
    pub(super) fn is_empty(&self) -> bool {
        self.q.is_empty()
    }
    /// Bytes held.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }
    pub(super) fn push_back(&mut self, pkt: Packet) {
        self.bytes += Self::cost(&pkt);
        self.q.push_back(pkt);
    }
    pub(super) fn push_front(&mut self, pkt: Packet) {
        self.bytes += Self::cost(&pkt);
        self.q.push_front(pkt);
    }
    pub(super) fn pop_front(&mut self) -> Option<Packet> {
        let pkt = self.q.pop_front()?;
        self.bytes = self.bytes.saturating_sub(Self::cost(&pkt));
        Some(pkt)
    }
    /// Takes everything.
    pub(super) fn take(&mut self) -> VecDeque<Packet> {
        self.bytes = 0;
        std::mem::take(&mut self.q)
    }
}

/// A queue pair.
#[derive(Clone, Debug)]
pub(super) struct Qp {
    pub qpn: u32,
    pub pdn: u32,
    pub qp_type: u8,
    pub send_cqn: u32,
    pub recv_cqn: u32,
    pub sq: Wq,
    pub rq: Wq,
    pub state: QpState,
    pub qkey: u32,
    pub av: Option<AddressVector>,
    pub dst_qpn: u32,
    pub sq_psn: u32,
    pub rq_psn: u32,
    /// Next request sequence number.
    pub next_seq: u64,
    pub outstanding: VecDeque<Pending>,
    /// Incoming requests held for receive WQEs (RNR), and everything behind them.
    pub held: Held,
    /// The message the requester is sending in segments (the last outstanding WQE's).
    pub cursor: Option<Cursor>,
    /// Bytes of the windows the outstanding entries hold (the sum of their charges).
    pub inflight: u64,
    /// The responder: the offset the next segment of an incoming Send must have (0: no Send
    /// in progress).
    pub rx_next: u64,
    /// Requests the network lost, by sequence number, waiting for the retransmission timer
    /// (`Rdma::retransmit`); no new request is sent while there are any.
    pub lost: BTreeMap<u64, Request>,
    /// Retransmissions since the last response that was not a loss.
    pub retries: u32,
    /// The iWARP state and connection (`None`: a RoCEv2 QP).
    pub iw: Option<Box<Iwarp>>,
    /// A kernel QP: CREATE_QP gave both queues the kernel's layout
    /// ([`wire::KERNEL_QUEUE_PAGE_SHIFT`]) and no extended doorbell page. Only a kernel QP's own
    /// SGEs may name the function's local DMA lkey (raw guest-physical addresses).
    pub kernel: bool,
}

/// A completion queue.
#[derive(Clone, Debug)]
pub(super) struct Cq {
    pub cqn: u32,
    pub depth: u32,
    pub buf: QueueBuf,
    pub eqn: u8,
    /// CQEs written (wrapping; slot and owner derive from it).
    pub pi: u32,
    /// Consumer index of the last CQ doorbell (24 bits).
    pub ci: u32,
    /// `Some(solicited_only)` while armed.
    pub armed: Option<bool>,
    /// The CI is current: an arm arrived and no event was delivered since (the drivers report
    /// their CI only when arming, so overflow is judged only then).
    pub ci_fresh: bool,
    /// An overflow was reported: the CQ is broken, CQEs are dropped.
    pub error: bool,
}

/// A memory region (MPT entry).
#[derive(Clone, Debug)]
pub(super) struct Mr {
    pub key: u8,
    pub pdn: u32,
    pub mr_type: MrType,
    /// [`wire::access`] bits.
    pub access: u8,
    pub va: u64,
    pub len: u64,
    pub page_shift: u8,
    pub mtt: Mtt,
    pub valid: bool,
    /// FRMR: `(MTT buffer, capacity in pages)` from REG_MR.
    pub frmr: Option<(u64, u64)>,
}

/// The RDMA object tables of a function.
#[derive(Clone, Debug, Default)]
pub(super) struct Rdma {
    pub qps: BTreeMap<u32, Qp>,
    pub cqs: BTreeMap<u32, Cq>,
    /// By MPT index.
    pub mrs: BTreeMap<u32, Mr>,
    /// When the retransmission timer of a QP with lost requests fires (on the device's clock).
    pub retransmit: BTreeMap<u32, Duration>,
    /// The cookies of the iWARP QPs (CREATE_QP's reply).
    pub cookies: Cookies,
    /// Bytes of the port's window held by every QP's outstanding requests
    /// ([`crate::device::PORT_WINDOW`]).
    pub inflight: u64,
    /// Bytes of incoming requests every QP holds for receive WQEs
    /// ([`crate::device::MAX_HELD_BYTES`]).
    pub held_bytes: u64,
    /// QPs that stopped sending because the port's window was full, resumed as it drains.
    pub waiting: BTreeSet<u32>,
    /// Page-list entries the function's queues hold ([`MAX_QUEUE_PAGES`]).
    pub queue_pages: u64,
}

/// Reads `count` u64 entries at `addr` (a level-1 queue MTT).
fn read_entries(addr: u64, count: u32, mem: &dyn GuestMemory) -> Result<Vec<u64>, Status> {
    let n = usize::try_from(count).map_err(|_| Status::InvalidParam)?;
    let bytes = n.checked_mul(8).ok_or(Status::InvalidParam)?;
    let mut b = vec![0u8; bytes];
    mem.read(addr, &mut b).map_err(|_| Status::DmaError)?;
    Ok(b.chunks_exact(8)
        .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
        .collect())
}

/// Builds a queue buffer of `size` bytes from an MTT description. Only the pages the queue
/// covers are read and kept: a level-1 array may name up to 2^32 - 1 pages, but a queue of
/// `size` bytes at `offset` needs `ceil((offset + size) / page)` of them, and that many (or
/// fewer, then the queue is refused) is what the device holds.
fn queue_buf(m: &QueueMttCfg, size: u64, mem: &dyn GuestMemory) -> Result<QueueBuf, Status> {
    if m.page_shift > MAX_QUEUE_PAGE_SHIFT {
        return Err(Status::InvalidParam);
    }
    let need = m
        .offset
        .checked_add(size)
        .map(|end| end.div_ceil(1u64 << m.page_shift))
        .ok_or(Status::InvalidParam)?;
    let pages = match m.level {
        0 => {
            let n = usize::try_from(m.count.clamp(1, 4)).unwrap_or(1);
            let all = [m.addr, m.more[0], m.more[1], m.more[2]];
            all[..n].to_vec()
        }
        _ => {
            if m.count == 0 {
                return Err(Status::InvalidParam);
            }
            let kept = u64::from(m.count).min(need.max(1));
            read_entries(m.addr, u32::try_from(kept).unwrap_or(m.count), mem)?
        }
    };
    QueueBuf::new(pages, m.page_shift, m.offset, size).ok_or(Status::InvalidParam)
}

impl Rdma {
    /// Counts `n` more queue pages, unless the function would hold more than
    /// [`MAX_QUEUE_PAGES`].
    fn take_queue_pages(&mut self, n: usize) -> Result<(), Status> {
        let total = self.queue_pages.saturating_add(n as u64);
        if total > MAX_QUEUE_PAGES {
            log::debug!("queue page lists full ({} pages held)", self.queue_pages);
            return Err(Status::NoResources);
        }
        self.queue_pages = total;
        Ok(())
    }

    /// CQNs (and MPT indices) below this are valid: twice the QPs.
    fn max_cq(caps: &Caps) -> u32 {
        caps.max_qp().saturating_mul(2)
    }

    fn max_mr(caps: &Caps) -> u32 {
        Self::max_cq(caps)
    }

    // --------------------------------------------------------------------------------------------
    // CQs
    // --------------------------------------------------------------------------------------------

    /// CREATE_CQ; `ceq_exists` says whether a CEQ has that EQN.
    pub(super) fn create_cq(
        &mut self,
        r: CreateCq,
        caps: &Caps,
        ceq_exists: impl FnOnce(u8) -> bool,
        mem: &dyn GuestMemory,
    ) -> Outcome {
        if r.cqn == 0 || r.cqn >= Self::max_cq(caps) {
            return Err(Status::InvalidParam);
        }
        if r.depth_log2 == 0 || r.depth_log2 > u32::from(caps.max_cqe_log2) {
            return Err(Status::InvalidParam);
        }
        let eqn = u8::try_from(r.eqn).map_err(|_| Status::InvalidParam)?;
        if eqn == 0 || !ceq_exists(eqn) {
            return Err(Status::InvalidParam);
        }
        if self.cqs.contains_key(&r.cqn) {
            return Err(Status::Exists);
        }
        let depth = 1u32 << r.depth_log2;
        let buf = queue_buf(&r.buf, u64::from(depth) * CQE_SIZE as u64, mem)?;
        self.take_queue_pages(buf.pages())?;
        log::debug!(
            "CQ {} created: {depth} CQEs, CEQ {eqn}, {} page(s) of {} KiB, dbrec {:#x}{}",
            r.cqn,
            r.buf.count.max(1),
            1u64 << (r.buf.page_shift - 10),
            r.dbrec,
            if r.ext_db {
                format!(", doorbell page {}", r.db_page)
            } else {
                String::new()
            }
        );
        self.cqs.insert(
            r.cqn,
            Cq {
                cqn: r.cqn,
                depth,
                buf,
                eqn,
                pi: 0,
                ci: 0,
                armed: None,
                ci_fresh: false,
                error: false,
            },
        );
        Ok((0, 0))
    }

    /// DESTROY_CQ.
    pub(super) fn destroy_cq(&mut self, r: U32Arg) -> Outcome {
        let cq = self.cqs.remove(&r.0).ok_or(Status::NotFound)?;
        self.queue_pages = self.queue_pages.saturating_sub(cq.buf.pages() as u64);
        let users = self
            .qps
            .values()
            .filter(|q| q.send_cqn == r.0 || q.recv_cqn == r.0)
            .count();
        if users > 0 {
            log::debug!("CQ {} destroyed while {users} QP(s) still use it", r.0);
        } else {
            log::debug!("CQ {} destroyed", r.0);
        }
        Ok((0, 0))
    }

    // --------------------------------------------------------------------------------------------
    // QPs
    // --------------------------------------------------------------------------------------------

    /// CREATE_QP on a function of `protocol`.
    pub(super) fn create_qp(
        &mut self,
        r: CreateQp,
        caps: &Caps,
        protocol: Protocol,
        mem: &dyn GuestMemory,
    ) -> Outcome {
        if r.qpn == 0 || r.qpn >= caps.max_qp() {
            return Err(Status::InvalidParam);
        }
        if r.qp_type != QP_TYPE_RC && r.qp_type != QP_TYPE_UD {
            return Err(Status::InvalidParam);
        }
        let iwarp = protocol == Protocol::Iwarp;
        if iwarp && r.qp_type != QP_TYPE_RC {
            // The command's failure is logged (rate-limited) by the command engine.
            log::debug!(
                "CREATE_QP {}: QP type {} on an iWARP function, which has RC QPs only",
                r.qpn,
                r.qp_type
            );
            return Err(Status::Unsupported);
        }
        if r.sq_depth_log2 > MAX_SQ_DEPTH_LOG2 || r.rq_depth_log2 > u32::from(caps.max_recv_wr_log2)
        {
            return Err(Status::InvalidParam);
        }
        if !self.cqs.contains_key(&r.send_cqn) || !self.cqs.contains_key(&r.recv_cqn) {
            return Err(Status::NotFound);
        }
        if self.qps.contains_key(&r.qpn) {
            return Err(Status::Exists);
        }
        let sq_depth = 1u32 << r.sq_depth_log2;
        let rq_depth = 1u32 << r.rq_depth_log2;
        let sq = queue_buf(&r.sq, u64::from(sq_depth) * SQ_WQEBB_SIZE as u64, mem)?;
        let rq = queue_buf(&r.rq, u64::from(rq_depth) * RQE_SIZE as u64, mem)?;
        self.take_queue_pages(sq.pages() + rq.pages())?;
        log::debug!(
            "QP {} created: {}, PD {}, SQ {sq_depth} WQEBBs (CQ {}), RQ {rq_depth} (CQ {}), \
             dbrecs {:#x}/{:#x}{}",
            r.qpn,
            if r.qp_type == QP_TYPE_RC { "RC" } else { "UD" },
            r.pdn,
            r.send_cqn,
            r.recv_cqn,
            r.sq_dbrec,
            r.rq_dbrec,
            if r.ext_db {
                format!(", doorbell pages {}/{}", r.db_pages.0, r.db_pages.1)
            } else {
                String::new()
            }
        );
        // An iWARP QP's cookie names it to its peer and authenticates its stream (§7.1):
        // random, drawn once every check passed. A RoCEv2 QP answers with its QPN.
        let cookie = if iwarp { self.cookies.draw() } else { r.qpn };
        let wq = |buf, depth| Wq {
            buf,
            depth,
            pi: 0,
            ci: 0,
        };
        self.qps.insert(
            r.qpn,
            Qp {
                qpn: r.qpn,
                pdn: r.pdn,
                qp_type: r.qp_type,
                send_cqn: r.send_cqn,
                recv_cqn: r.recv_cqn,
                sq: wq(sq, sq_depth),
                rq: wq(rq, rq_depth),
                // iWARP QPs start in IDLE, which behaves like INIT.
                state: if iwarp { QpState::Init } else { QpState::Reset },
                qkey: 0,
                av: None,
                dst_qpn: 0,
                sq_psn: 0,
                rq_psn: 0,
                next_seq: 0,
                outstanding: VecDeque::new(),
                held: Held::default(),
                cursor: None,
                inflight: 0,
                rx_next: 0,
                lost: BTreeMap::new(),
                retries: 0,
                iw: iwarp.then(|| Box::new(Iwarp::new(cookie))),
                kernel: !r.ext_db
                    && r.sq.page_shift == wire::KERNEL_QUEUE_PAGE_SHIFT
                    && r.rq.page_shift == wire::KERNEL_QUEUE_PAGE_SHIFT,
            },
        );
        Ok((u64::from(cookie), 0))
    }

    /// Removes QP `qpn`, its retransmission timer and its cookie; what it held of the port's
    /// window is released (its held requests are the caller's to answer).
    pub(super) fn remove_qp(&mut self, qpn: u32) -> Option<Qp> {
        let qp = self.qps.remove(&qpn)?;
        self.retransmit.remove(&qpn);
        let pages = (qp.sq.buf.pages() + qp.rq.buf.pages()) as u64;
        self.queue_pages = self.queue_pages.saturating_sub(pages);
        self.waiting.remove(&qpn);
        self.inflight = self.inflight.saturating_sub(qp.inflight);
        self.held_bytes = self.held_bytes.saturating_sub(qp.held.bytes());
        if let Some(iw) = &qp.iw {
            self.cookies.release(iw.cookie);
        }
        Some(qp)
    }

    /// QUERY_QP: a RoCEv2 QP's PSNs and state; an iWARP QP's state (iWARP numbering),
    /// SND.NXT and RCV.NXT (low 24 bits).
    pub(super) fn query_qp(&self, r: U32Arg) -> Outcome {
        let qp = self.qps.get(&r.0).ok_or(Status::NotFound)?;
        if let Some(iw) = qp.iw.as_ref() {
            let (snd, rcv) = iw.conn.as_ref().map_or((0, 0), |c| (c.snd_nxt, c.rcv_nxt));
            return Ok((wire::query_qp_resp0_iwarp(snd, rcv, iw.state), 0));
        }
        let draining =
            qp.state == QpState::Sqd && qp.outstanding.iter().any(|p| p.status.is_none());
        Ok((
            wire::query_qp_resp0(qp.sq_psn, qp.rq_psn, qp.state, draining),
            0,
        ))
    }

    /// REFLUSH's producer indices: on a QP in ERROR, each queue takes its PI unless it is more
    /// than a queue depth ahead of the device's CI. Returns whether the QP is in ERROR (then its
    /// queues are to be flushed).
    pub(super) fn reflush_pis(&mut self, r: &Reflush) -> Result<bool, Status> {
        let qp = self.qps.get_mut(&r.qpn).ok_or(Status::NotFound)?;
        if qp.state != QpState::Error {
            log::debug!(
                "REFLUSH of QP {} in {}: nothing to flush",
                r.qpn,
                qp.state.name()
            );
            return Ok(false);
        }
        let (sq_pi, rq_pi) = (r.sq_pi as u16, r.rq_pi as u16);
        if u32::from(sq_pi.wrapping_sub(qp.sq.ci)) <= qp.sq.depth {
            qp.sq.pi = sq_pi;
        }
        if u32::from(rq_pi.wrapping_sub(qp.rq.ci)) <= qp.rq.depth {
            qp.rq.pi = rq_pi;
        }
        Ok(true)
    }

    // --------------------------------------------------------------------------------------------
    // MRs
    // --------------------------------------------------------------------------------------------

    /// REG_MR. A normal MR's MTT must be reachable in `mem` now (it is walked at use time).
    pub(super) fn reg_mr(&mut self, r: RegMr, caps: &Caps, mem: &dyn GuestMemory) -> Outcome {
        if r.index >= Self::max_mr(caps) {
            return Err(Status::InvalidParam);
        }
        let mr_type = match r.mr_type {
            0 => MrType::Normal,
            1 => MrType::Frmr,
            2 => MrType::Dma,
            _ => return Err(Status::InvalidParam),
        };
        if self.mrs.contains_key(&r.index) {
            return Err(Status::Exists);
        }
        let access = r.access | wire::access::LOCAL_READ;
        let mr = match mr_type {
            MrType::Dma => Mr {
                key: r.key,
                pdn: r.pdn,
                mr_type,
                access,
                va: 0,
                len: u64::MAX,
                page_shift: 12,
                mtt: Mtt::Direct(Vec::new()),
                // DMA MRs are sent with valid = 0 but are usable at once (§6).
                valid: true,
                frmr: None,
            },
            MrType::Frmr => {
                if !(12..=MAX_MR_PAGE_SHIFT).contains(&r.page_shift)
                    || r.count == 0
                    || r.count > MAX_FRMR_PAGES
                {
                    return Err(Status::InvalidParam);
                }
                Mr {
                    key: r.key,
                    pdn: r.pdn,
                    mr_type,
                    access,
                    va: 0,
                    len: 0,
                    page_shift: r.page_shift,
                    mtt: Mtt::Direct(Vec::new()),
                    valid: false,
                    frmr: Some((r.entries[0], r.count)),
                }
            }
            MrType::Normal => normal_mr(&r, access, caps, mem)?,
        };
        log::debug!(
            "MR {:#x} registered: {mr_type:?}, PD {}, {:#x}+{:#x}, access {:#x}",
            wire::stag(r.index, r.key),
            r.pdn,
            mr.va,
            mr.len,
            access
        );
        log::trace!(
            "MR {:#x}: page shift {}, level {}, count {}, entries {:#x?}",
            wire::stag(r.index, r.key),
            r.page_shift,
            r.level,
            r.count,
            r.entries
        );
        self.mrs.insert(r.index, mr);
        Ok((0, 0))
    }

    /// DEREG_MR.
    pub(super) fn dereg_mr(&mut self, r: DeregMr) -> Outcome {
        let DeregMr { index, key } = r;
        let mr = self.mrs.remove(&index).ok_or(Status::NotFound)?;
        if mr.key != key {
            // The driver frees its STag whatever the device says: deregister anyway.
            log::debug!(
                "DEREG_MR of MPT {index}: key {key:#x} given, the MR has {:#x} (deregistered)",
                mr.key
            );
        }
        log::debug!("MR {:#x} deregistered", wire::stag(index, mr.key));
        Ok((0, 0))
    }

    // --------------------------------------------------------------------------------------------
    // Inspection
    // --------------------------------------------------------------------------------------------

    /// QPNs of the live QPs with their states, in QPN order.
    pub(super) fn qp_states(&self) -> Vec<(u32, QpState)> {
        self.qps.values().map(|q| (q.qpn, q.state)).collect()
    }

    /// CQNs of the live CQs, in order.
    pub(super) fn cqns(&self) -> Vec<u32> {
        self.cqs.keys().copied().collect()
    }

    /// `(STag, MTT levels, MTT entries)` of every MR: level 0 for page lists held by the
    /// device (inline, DMA MRs).
    pub(super) fn mr_layouts(&self) -> Vec<(u32, u8, u64)> {
        self.mrs
            .iter()
            .map(|(&i, m)| {
                let level = match &m.mtt {
                    crate::mtt::Mtt::Direct(_) => 0,
                    crate::mtt::Mtt::Indirect { levels, .. } => *levels,
                };
                (wire::stag(i, m.key), level, m.mtt.len())
            })
            .collect()
    }

    /// STags of the registered MRs (valid or not), in MPT-index order.
    pub(super) fn stags(&self) -> Vec<u32> {
        self.mrs
            .iter()
            .map(|(&i, m)| wire::stag(i, m.key))
            .collect()
    }

    /// `(SQ PSN, RQ PSN, state)` of QP `qpn`.
    pub(super) fn qp_info(&self, qpn: u32) -> Option<(u32, u32, QpState)> {
        self.qps.get(&qpn).map(|q| (q.sq_psn, q.rq_psn, q.state))
    }

    /// Whether MR `stag`'s MPT entry exists and is valid with that key.
    pub(super) fn mr_valid(&self, stag: u32) -> bool {
        self.mrs
            .get(&wire::stag_index(stag))
            .is_some_and(|m| m.valid && m.key == wire::stag_key(stag))
    }

    /// Each QP as the control language's `query qps` shows it ([`crate::control::Query::Qps`]).
    pub(super) fn qps_view(&self) -> Vec<String> {
        self.qps
            .values()
            .map(|q| match &q.iw {
                Some(iw) => format!("{}:{}", q.qpn, iw.describe()),
                None => format!("{}:{}", q.qpn, q.state.name()),
            })
            .collect()
    }

    /// Each QP, then each CQ, as the control language's `query queues` shows them
    /// ([`crate::control::Query::Queues`]).
    pub(super) fn queues_view(&self) -> Vec<String> {
        let qps = self.qps.values().map(|q| {
            let unanswered = q.outstanding.iter().filter(|p| p.status.is_none()).count();
            match &q.iw {
                Some(iw) => {
                    let backlog = iw.conn.as_ref().map_or(0, |c| c.backlog.len());
                    let (state, conn) = iw.describe().split_once(':').map_or_else(
                        || (iw.describe(), String::new()),
                        |(s, c)| (s.to_string(), format!(":{c}")),
                    );
                    format!(
                        "q{}:{state}:{}/{}:{unanswered}:{backlog}:{}{conn}",
                        q.qpn,
                        q.sq.pi,
                        q.sq.ci,
                        q.held.len()
                    )
                }
                None => format!(
                    "q{}:{}:{}/{}:{unanswered}:{}:{}",
                    q.qpn,
                    q.state.name(),
                    q.sq.pi,
                    q.sq.ci,
                    q.lost.len(),
                    q.held.len()
                ),
            }
        });
        let cqs = self.cqs.values().map(|c| {
            format!(
                "c{}:{}/{}:{}:{}",
                c.cqn,
                c.pi,
                c.ci,
                if c.armed.is_some() { "a" } else { "-" },
                if c.error { "E" } else { "-" }
            )
        });
        qps.chain(cqs).collect()
    }
}

/// A normal MR from REG_MR: its length within the capabilities, its page size, and its MTT
/// (inline, or a table reachable in `mem`).
fn normal_mr(r: &RegMr, access: u8, caps: &Caps, mem: &dyn GuestMemory) -> Result<Mr, Status> {
    let max_len = 1u64
        .checked_shl(u32::from(caps.max_mr_size_log2))
        .unwrap_or(u64::MAX);
    if r.len == 0 || r.len > max_len || r.va.checked_add(r.len).is_none() {
        return Err(Status::InvalidParam);
    }
    if !(12..=MAX_MR_PAGE_SHIFT).contains(&r.page_shift) || r.level > 3 {
        return Err(Status::InvalidParam);
    }
    let s = r.page_shift;
    // `va + len` does not overflow (checked above).
    let pages = ((r.va + r.len - 1) >> s) - (r.va >> s) + 1;
    if r.count < pages {
        return Err(Status::InvalidParam);
    }
    let mtt = match r.level {
        0 => {
            if pages > 4 {
                return Err(Status::InvalidParam);
            }
            Mtt::Direct(r.entries[..pages as usize].to_vec())
        }
        levels => {
            let mtt_shift = if r.version == 1 {
                12 + r.mtt_page_code
            } else {
                12
            };
            if mtt_shift > MAX_MTT_PAGE_SHIFT {
                return Err(Status::InvalidParam);
            }
            // The upper levels must be able to name every page (the top is one page).
            let per_page = 1u64 << (mtt_shift - 3);
            let cap = (1..levels).fold(1u64, |c, _| c.saturating_mul(per_page));
            if levels > 1 && cap.saturating_mul(per_page) < pages {
                return Err(Status::InvalidParam);
            }
            let mtt = Mtt::Indirect {
                levels,
                root: r.entries[0],
                count: pages,
                page_shift: mtt_shift,
            };
            // The table must be reachable now (it is walked at use time).
            mtt.entry(0, mem).map_err(|_| Status::DmaError)?;
            mtt
        }
    };
    Ok(Mr {
        key: r.key,
        pdn: r.pdn,
        mr_type: MrType::Normal,
        access,
        va: r.va,
        len: r.len,
        page_shift: s,
        mtt,
        valid: r.valid,
        frmr: None,
    })
}

#[cfg(test)]
pub(super) mod fixtures {
    use super::*;
    use crate::testing::VecMemory;

    /// Guest memory for the fixtures' queues.
    pub(in crate::device) fn memory() -> VecMemory {
        VecMemory::new(0x1_0000, 0x1_0000)
    }

    /// One page at `addr`, level 0.
    pub(in crate::device) fn page(addr: u64) -> QueueMttCfg {
        QueueMttCfg {
            page_shift: 12,
            level: 0,
            count: 1,
            offset: 0,
            addr,
            more: [0; 3],
        }
    }

    /// CREATE_CQ of CQ `cqn` (16 CQEs, CEQ 1) in [`memory`].
    pub(in crate::device) fn cq_request(cqn: u32) -> CreateCq {
        CreateCq {
            cqn,
            depth_log2: 4,
            buf: page(0x1_0000),
            eqn: 1,
            ext_db: false,
            dbrec: 0,
            db_page: 0,
        }
    }

    /// CREATE_QP of RC QP `qpn` on CQ `cqn` (16-entry queues) in [`memory`].
    pub(in crate::device) fn qp_request(qpn: u32, cqn: u32) -> CreateQp {
        CreateQp {
            qpn,
            sq_depth_log2: 4,
            rq_depth_log2: 4,
            pdn: 1,
            send_cqn: cqn,
            recv_cqn: cqn,
            ext_db: false,
            sq: page(0x1_1000),
            rq: page(0x1_2000),
            sq_dbrec: 0,
            rq_dbrec: 0,
            db_pages: (0, 0),
            qp_type: QP_TYPE_RC,
        }
    }

    impl Pending {
        /// A signaled network request `seq` waiting for its answer.
        pub(in crate::device) fn for_test(seq: u64) -> Self {
            Pending {
                seq: Some(seq),
                segs: 1,
                ..Pending::new(0, 0, true)
            }
        }
    }

    impl Qp {
        /// A RoCEv2 RC QP in RTS with empty queues and nothing pending, for the unit tests of
        /// the parts that work on one QP.
        pub(in crate::device) fn for_test(qpn: u32) -> Self {
            let (caps, mem) = (Caps::default(), memory());
            let mut t = Rdma::default();
            let cq = t.create_cq(cq_request(1), &caps, |_| true, &mem);
            let qp = t.create_qp(qp_request(qpn, 1), &caps, Protocol::RoceV2, &mem);
            assert_eq!((cq, qp.map(|r| r.0)), (Ok((0, 0)), Ok(u64::from(qpn))));
            let mut qp = t.qps.remove(&qpn).expect("created");
            qp.state = QpState::Rts;
            qp
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{cq_request, memory, qp_request};
    use super::*;

    #[test]
    fn tables_check_and_change_themselves() {
        let caps = Caps::default();
        let mem = memory();
        let mut t = Rdma::default();
        let cq = cq_request(3);
        assert_eq!(
            t.create_cq(cq, &caps, |_| false, &mem),
            Err(Status::InvalidParam),
            "no such CEQ"
        );
        assert_eq!(t.create_cq(cq, &caps, |e| e == 1, &mem), Ok((0, 0)));
        assert_eq!(t.create_cq(cq, &caps, |_| true, &mem), Err(Status::Exists));
        let qp = CreateQp {
            recv_cqn: 4,
            qp_type: QP_TYPE_UD,
            ..qp_request(5, 3)
        };
        assert_eq!(
            t.create_qp(qp, &caps, Protocol::RoceV2, &mem),
            Err(Status::NotFound),
            "CQ 4 does not exist"
        );
        let qp = CreateQp { recv_cqn: 3, ..qp };
        assert_eq!(
            t.create_qp(qp, &caps, Protocol::Iwarp, &mem),
            Err(Status::Unsupported),
            "iWARP has RC QPs only"
        );
        assert_eq!(
            t.create_qp(qp, &caps, Protocol::RoceV2, &mem),
            Ok((5, 0)),
            "the cookie is the QPN"
        );
        assert_eq!(t.qp_states(), [(5, QpState::Reset)]);
        assert_eq!(t.query_qp(U32Arg(5)).map(|r| r.0 >> 48 & 0xff), Ok(0));
        t.retransmit.insert(5, Duration::from_secs(1));
        assert!(t.remove_qp(5).is_some());
        assert!(t.retransmit.is_empty(), "the QP's timer goes with it");
        let dma = RegMr {
            valid: false,
            version: 1,
            key: 7,
            index: 2,
            pdn: 1,
            mr_type: 2,
            access: 0,
            va: 0,
            len: 0,
            page_shift: 12,
            mtt_page_code: 0,
            level: 0,
            count: 0,
            entries: [0; 4],
        };
        assert_eq!(t.reg_mr(dma, &caps, &mem), Ok((0, 0)));
        let stag = wire::stag(2, 7);
        assert!(t.mr_valid(stag), "DMA MRs are valid at once");
        assert_eq!(t.stags(), [stag]);
        assert_eq!(t.dereg_mr(DeregMr { index: 2, key: 9 }), Ok((0, 0)));
        assert!(t.stags().is_empty(), "deregistered whatever the key");
        assert_eq!(t.destroy_cq(U32Arg(3)), Ok((0, 0)));
        assert_eq!(t.destroy_cq(U32Arg(3)), Err(Status::NotFound));
    }

    /// A level-1 page table of 65,535 entries for a CQ of 16 CQEs (one page) or an SQ/RQ of
    /// two pages: the device keeps only the pages the queue covers, and reads no more.
    #[test]
    fn queue_page_lists_keep_what_the_queue_needs() {
        let caps = Caps::default();
        // The array starts in the last page of guest memory: only its first entries exist.
        let mem = memory();
        let table = 0x1_f000;
        let huge = |at| QueueMttCfg {
            page_shift: 12,
            level: 1,
            count: 65_535,
            offset: 0,
            addr: at,
            more: [0; 3],
        };
        let mut t = Rdma::default();
        let cq = CreateCq {
            buf: huge(table),
            ..cq_request(3)
        };
        assert_eq!(t.create_cq(cq, &caps, |_| true, &mem), Ok((0, 0)));
        assert_eq!(t.cqs[&3].buf.pages(), 1, "16 CQEs of 32 bytes: one page");
        // A queue that needs more pages than the table has is still refused.
        let big = CreateCq {
            depth_log2: 8,
            buf: QueueMttCfg {
                count: 1,
                ..huge(table)
            },
            ..cq_request(4)
        };
        let refused = t.create_cq(big, &caps, |_| true, &mem);
        assert_eq!(refused, Err(Status::InvalidParam), "256 CQEs need 2 pages");
        let qp = CreateQp {
            sq_depth_log2: 8,
            sq: huge(table),
            rq: huge(table),
            ..qp_request(5, 3)
        };
        assert!(t.create_qp(qp, &caps, Protocol::RoceV2, &mem).is_ok());
        // 256 WQEBBs of 32 bytes: 2 pages; 16 RQEs of 32 bytes: 1.
        assert_eq!((t.qps[&5].sq.buf.pages(), t.qps[&5].rq.buf.pages()), (2, 1));
        assert_eq!(t.queue_pages, 4);
        // The function's page lists are bounded: a table naming one page many times cannot
        // make the device hold more than MAX_QUEUE_PAGES entries.
        t.queue_pages = MAX_QUEUE_PAGES - 1;
        let full = t.create_cq(cq_request(6), &caps, |_| true, &mem);
        assert_eq!(full, Ok((0, 0)), "the last page");
        let over = t.create_cq(cq_request(7), &caps, |_| true, &mem);
        assert_eq!(over, Err(Status::NoResources));
        assert_eq!(t.destroy_cq(U32Arg(6)), Ok((0, 0)));
        assert!(t.remove_qp(5).is_some());
        assert_eq!(t.queue_pages, MAX_QUEUE_PAGES - 1 - 3, "given back");
    }
}
