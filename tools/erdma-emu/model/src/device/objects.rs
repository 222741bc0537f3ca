// SPDX-License-Identifier: GPL-2.0

//! The RDMA objects (QPs, CQs, MRs) and their commands (erdma-hw.md §3.5, §6).
//!
//! * Every command works on both protocols. On an iWARP function QPs are RC only (a UD QP is
//!   [`Status::Unsupported`]), start in IDLE, and MODIFY_QP uses the iWARP layout (the `iwarp`
//!   submodule); QUERY_QP reports the iWARP state.
//! * Every field is range-checked against the capabilities; only fields meaningful for the
//!   command and its flags are looked at.
//! * DESTROY_CQ of a CQ that QPs still name succeeds: completions for it are dropped (logged),
//!   because drivers free their resources whatever the device says.
//! * Queue MTTs are read at creation; MR MTTs at use time (see [`crate::mtt`]).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use super::iwarp::Iwarp;
use super::{Device, Protocol};
use crate::cmdq::{AddressVector, Status};
use crate::fabric::{Packet, Request};
use crate::io::Io;
use crate::mtt::{Mtt, QueueBuf, MAX_MTT_PAGE_SHIFT};
use crate::wire::{
    self, qp_mask, CreateCq, CreateQp, DeregMr, ModifyQpRoce, MrType, QpState, QueueMttCfg,
    Reflush, RegMr, U32Arg, CQE_SIZE, QP_TYPE_RC, QP_TYPE_UD, RQE_SIZE, SQ_WQEBB_SIZE,
};

/// A command's result.
type Outcome = Result<(u64, u64), Status>;

/// Largest page-size code of queue buffers (4 bits: up to 128 MiB "pages").
const MAX_QUEUE_PAGE_SHIFT: u8 = 12 + 15;
/// Deepest SQ in WQEBBs (8192 WRs of 4 WQEBBs).
pub const MAX_SQ_DEPTH_LOG2: u32 = 15;
/// Largest MR page size the model accepts (1 GiB, `page_size_cap`).
const MAX_MR_PAGE_SHIFT: u8 = 30;
/// Most pages of a fast-register MR (§6).
pub const MAX_FRMR_PAGES: u64 = 524_288;

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

/// A request sent (or a local operation done) and not yet completed, in SQ order.
#[derive(Clone, Debug)]
pub(super) struct Pending {
    /// Sequence number of the network request (`None`: a local operation).
    pub seq: Option<u64>,
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
    pub held: VecDeque<Packet>,
    /// Requests the network lost, by sequence number, waiting for the retransmission timer
    /// (`Rdma::retransmit`); no new request is sent while there are any.
    pub lost: BTreeMap<u64, Request>,
    /// Retransmissions since the last response that was not a loss.
    pub retries: u32,
    /// The iWARP state and connection (`None`: a RoCEv2 QP).
    pub iw: Option<Box<Iwarp>>,
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
}

/// Reads `count` u64 entries at `addr` (a level-1 queue MTT).
fn read_entries(addr: u64, count: u32, io: &Io<'_>) -> Result<Vec<u64>, Status> {
    let n = usize::try_from(count).map_err(|_| Status::InvalidParam)?;
    let bytes = n.checked_mul(8).ok_or(Status::InvalidParam)?;
    let mut b = vec![0u8; bytes];
    io.mem.read(addr, &mut b).map_err(|_| Status::DmaError)?;
    Ok(b.chunks_exact(8)
        .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
        .collect())
}

/// Builds a queue buffer of `size` bytes from an MTT description.
fn queue_buf(m: &QueueMttCfg, size: u64, io: &Io<'_>) -> Result<QueueBuf, Status> {
    if m.page_shift > MAX_QUEUE_PAGE_SHIFT {
        return Err(Status::InvalidParam);
    }
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
            read_entries(m.addr, m.count, io)?
        }
    };
    QueueBuf::new(pages, m.page_shift, m.offset, size).ok_or(Status::InvalidParam)
}

impl Device {
    fn max_cq(&self) -> u32 {
        self.config.caps.max_qp().saturating_mul(2)
    }

    fn max_mr(&self) -> u32 {
        self.max_cq()
    }

    // --------------------------------------------------------------------------------------------
    // CQs
    // --------------------------------------------------------------------------------------------

    pub(super) fn cmd_create_cq(&mut self, r: CreateCq, io: &mut Io<'_>) -> Outcome {
        if r.cqn == 0 || r.cqn >= self.max_cq() {
            return Err(Status::InvalidParam);
        }
        if r.depth_log2 == 0 || r.depth_log2 > u32::from(self.config.caps.max_cqe_log2) {
            return Err(Status::InvalidParam);
        }
        let eqn = u8::try_from(r.eqn).map_err(|_| Status::InvalidParam)?;
        if eqn == 0 || self.ceq(eqn).is_none() {
            return Err(Status::InvalidParam);
        }
        if self.func.rdma.cqs.contains_key(&r.cqn) {
            return Err(Status::Exists);
        }
        let depth = 1u32 << r.depth_log2;
        let buf = queue_buf(&r.buf, u64::from(depth) * CQE_SIZE as u64, io)?;
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
        self.func.rdma.cqs.insert(
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

    pub(super) fn cmd_destroy_cq(&mut self, r: U32Arg) -> Outcome {
        self.func.rdma.cqs.remove(&r.0).ok_or(Status::NotFound)?;
        let users = self
            .func
            .rdma
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

    pub(super) fn cmd_create_qp(&mut self, r: CreateQp, io: &mut Io<'_>) -> Outcome {
        if r.qpn == 0 || r.qpn >= self.config.caps.max_qp() {
            return Err(Status::InvalidParam);
        }
        if r.qp_type != QP_TYPE_RC && r.qp_type != QP_TYPE_UD {
            return Err(Status::InvalidParam);
        }
        let iwarp = self.config.protocol == Protocol::Iwarp;
        if iwarp && r.qp_type != QP_TYPE_RC {
            log::warn!(
                "CREATE_QP {}: QP type {} on an iWARP function, which has RC QPs only",
                r.qpn,
                r.qp_type
            );
            return Err(Status::Unsupported);
        }
        if r.sq_depth_log2 > MAX_SQ_DEPTH_LOG2
            || r.rq_depth_log2 > u32::from(self.config.caps.max_recv_wr_log2)
        {
            return Err(Status::InvalidParam);
        }
        if !self.func.rdma.cqs.contains_key(&r.send_cqn)
            || !self.func.rdma.cqs.contains_key(&r.recv_cqn)
        {
            return Err(Status::NotFound);
        }
        if self.func.rdma.qps.contains_key(&r.qpn) {
            return Err(Status::Exists);
        }
        let sq_depth = 1u32 << r.sq_depth_log2;
        let rq_depth = 1u32 << r.rq_depth_log2;
        let sq = queue_buf(&r.sq, u64::from(sq_depth) * SQ_WQEBB_SIZE as u64, io)?;
        let rq = queue_buf(&r.rq, u64::from(rq_depth) * RQE_SIZE as u64, io)?;
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
        let wq = |buf, depth| Wq {
            buf,
            depth,
            pi: 0,
            ci: 0,
        };
        self.func.rdma.qps.insert(
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
                held: VecDeque::new(),
                lost: BTreeMap::new(),
                retries: 0,
                iw: iwarp.then(|| Box::new(Iwarp::new())),
            },
        );
        // The cookie (iWARP MPA exchange) is the QPN.
        Ok((u64::from(r.qpn), 0))
    }

    pub(super) fn cmd_destroy_qp(&mut self, r: U32Arg) -> Outcome {
        // A live iWARP stream ends (the peer hears of it) and its binding goes.
        self.iw_close(r.0, None);
        let qp = self.func.rdma.qps.remove(&r.0).ok_or(Status::NotFound)?;
        self.func.rdma.retransmit.remove(&r.0);
        self.nak_held(qp.held);
        log::debug!("QP {} destroyed", r.0);
        Ok((0, 0))
    }

    pub(super) fn cmd_modify_qp(&mut self, r: ModifyQpRoce, io: &mut Io<'_>) -> Outcome {
        let target = if r.mask & qp_mask::STATE != 0 {
            Some(QpState::from_u8(r.state).ok_or(Status::InvalidParam)?)
        } else {
            None
        };
        if r.mask & qp_mask::AV != 0 && !self.func.gids.in_range(r.av.sgid_index) {
            return Err(Status::InvalidParam);
        }
        let qp = self.func.rdma.qps.get_mut(&r.qpn).ok_or(Status::NotFound)?;
        let cur = qp.state;
        if let Some(t) = target {
            use QpState::*;
            let ok = t == cur
                || matches!(
                    (cur, t),
                    (_, Reset)
                        | (_, Error)
                        | (Reset, Init)
                        | (Init, Rtr)
                        | (Rtr, Rts)
                        | (Rts, Sqd)
                        | (Sqd, Rts)
                        | (Sqe, Rts)
                        | (Rts, Sqe)
                );
            if !ok {
                return Err(Status::InvalidParam);
            }
        }
        if r.mask & qp_mask::QKEY != 0 {
            qp.qkey = r.qkey;
        }
        if r.mask & qp_mask::AV != 0 {
            qp.av = Some(r.av);
        }
        if r.mask & qp_mask::SQ_PSN != 0 {
            qp.sq_psn = r.sq_psn & 0xff_ffff;
        }
        if r.mask & qp_mask::RQ_PSN != 0 {
            qp.rq_psn = r.rq_psn & 0xff_ffff;
        }
        if r.mask & qp_mask::DST_QPN != 0 {
            qp.dst_qpn = r.dst_qpn;
        }
        let Some(t) = target else {
            return Ok((0, 0));
        };
        if t != cur {
            log::debug!("QP {}: {} -> {}", r.qpn, cur.name(), t.name());
        }
        match t {
            QpState::Reset => {
                qp.state = QpState::Reset;
                qp.sq.pi = 0;
                qp.sq.ci = 0;
                qp.rq.pi = 0;
                qp.rq.ci = 0;
                qp.outstanding.clear();
                qp.lost.clear();
                qp.retries = 0;
                let held = std::mem::take(&mut qp.held);
                self.nak_held(held);
            }
            QpState::Error if cur != QpState::Error => self.enter_error(r.qpn, io),
            QpState::Rts => {
                qp.state = t;
                self.process_sq(r.qpn, io);
            }
            _ => qp.state = t,
        }
        Ok((0, 0))
    }

    pub(super) fn cmd_query_qp(&mut self, r: U32Arg) -> Outcome {
        if let Some(resp0) = self.iw_query(r.0) {
            return Ok((resp0, 0));
        }
        let qp = self.func.rdma.qps.get(&r.0).ok_or(Status::NotFound)?;
        let draining =
            qp.state == QpState::Sqd && qp.outstanding.iter().any(|p| p.status.is_none());
        Ok((
            wire::query_qp_resp0(qp.sq_psn, qp.rq_psn, qp.state, draining),
            0,
        ))
    }

    /// REFLUSH (§3.5, §10.13): on a QP in ERROR, flushes (15) every WQE and RQE up to the
    /// producer indices it carries. Doorbells in ERROR only record PIs, so this is how WQEs
    /// posted after the transition complete. PIs more than a queue depth ahead of the device's
    /// CI are ignored (that queue keeps its PI).
    pub(super) fn cmd_reflush(&mut self, r: Reflush, io: &mut Io<'_>) -> Outcome {
        let qp = self.func.rdma.qps.get_mut(&r.qpn).ok_or(Status::NotFound)?;
        if qp.state != QpState::Error {
            log::debug!(
                "REFLUSH of QP {} in {}: nothing to flush",
                r.qpn,
                qp.state.name()
            );
            return Ok((0, 0));
        }
        let (sq_pi, rq_pi) = (r.sq_pi as u16, r.rq_pi as u16);
        if u32::from(sq_pi.wrapping_sub(qp.sq.ci)) <= qp.sq.depth {
            qp.sq.pi = sq_pi;
        }
        if u32::from(rq_pi.wrapping_sub(qp.rq.ci)) <= qp.rq.depth {
            qp.rq.pi = rq_pi;
        }
        self.flush_queues(r.qpn, io);
        Ok((0, 0))
    }

    // --------------------------------------------------------------------------------------------
    // MRs
    // --------------------------------------------------------------------------------------------

    pub(super) fn cmd_reg_mr(&mut self, r: RegMr, io: &mut Io<'_>) -> Outcome {
        if r.index >= self.max_mr() {
            return Err(Status::InvalidParam);
        }
        let mr_type = match r.mr_type {
            0 => MrType::Normal,
            1 => MrType::Frmr,
            2 => MrType::Dma,
            _ => return Err(Status::InvalidParam),
        };
        if self.func.rdma.mrs.contains_key(&r.index) {
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
            MrType::Normal => self.normal_mr(&r, access, io)?,
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
        self.func.rdma.mrs.insert(r.index, mr);
        Ok((0, 0))
    }

    fn normal_mr(&self, r: &RegMr, access: u8, io: &Io<'_>) -> Result<Mr, Status> {
        let max_len = 1u64
            .checked_shl(u32::from(self.config.caps.max_mr_size_log2))
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
                mtt.entry(0, io.mem).map_err(|_| Status::DmaError)?;
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

    pub(super) fn cmd_dereg_mr(&mut self, r: DeregMr) -> Outcome {
        let DeregMr { index, key } = r;
        let mr = self.func.rdma.mrs.remove(&index).ok_or(Status::NotFound)?;
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
    pub fn qps(&self) -> Vec<(u32, QpState)> {
        self.func
            .rdma
            .qps
            .values()
            .map(|q| (q.qpn, q.state))
            .collect()
    }

    /// CQNs of the live CQs, in order.
    pub fn cqs(&self) -> Vec<u32> {
        self.func.rdma.cqs.keys().copied().collect()
    }

    /// `(STag, MTT levels, MTT entries)` of every MR: level 0 for page lists held by the
    /// device (inline, DMA MRs).
    pub fn mr_layouts(&self) -> Vec<(u32, u8, u64)> {
        self.func
            .rdma
            .mrs
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
    pub fn mrs(&self) -> Vec<u32> {
        self.func
            .rdma
            .mrs
            .iter()
            .map(|(&i, m)| wire::stag(i, m.key))
            .collect()
    }

    /// `(SQ PSN, RQ PSN, state)` of QP `qpn`.
    pub fn qp_info(&self, qpn: u32) -> Option<(u32, u32, QpState)> {
        self.func
            .rdma
            .qps
            .get(&qpn)
            .map(|q| (q.sq_psn, q.rq_psn, q.state))
    }

    /// Whether MR `stag`'s MPT entry exists and is valid with that key.
    pub fn mr_valid(&self, stag: u32) -> bool {
        self.func
            .rdma
            .mrs
            .get(&wire::stag_index(stag))
            .is_some_and(|m| m.valid && m.key == wire::stag_key(stag))
    }
}
