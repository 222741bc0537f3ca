// SPDX-License-Identifier: GPL-2.0

//! The RoCEv2 data path (erdma-hw.md §4.4, §5, §6, §7.2): doorbells, the requester (SQ WQEs),
//! the responder (incoming requests, RQEs), UD datagrams, completions and CQ events. iWARP QPs
//! use the same requester, responder and completions over their TCP streams; what differs
//! (transport, no RNR, Terminate, Read sinks) is in the `iwarp` submodule.
//!
//! # Doorbells
//!
//! The queue is named by the doorbell value (§2.1, §10.3). A write to the SQ doorbell space, or
//! to an extended page allocated as an SQ page, is an SQ doorbell (51:32 QPN, 15:0 PI). Writes to
//! the RQ or CQ doorbell spaces, or to extended "CDB"/"RDB" pages, may be RQ or CQ doorbells
//! (the drivers swap the two extended pages, §3.6): the value is an RQ doorbell if bits 63:32
//! name a QP and a CQ doorbell if bits 55:32 name a CQ; if both exist, the slot offset
//! (`(QPN & 127) * 32` vs `(CQN & 511) * 8`) decides, then the space the write landed in.
//! Writes shorter than 8 bytes are ignored.
//!
//! # Requester
//!
//! An SQ doorbell on an RTS QP processes WQEs from the device's consumer index up to the PI.
//! Local SGEs are checked against the MR table (local status codes 10..13); network operations
//! become fabric requests whose completions wait for the response; local operations (REG_MR,
//! LOCAL_INV) complete in SQ order with them. A WQE with FENCE, and every local operation, waits
//! until earlier requests have their responses.
//!
//! # UD (and the GSI QP, QPN 1, created as UD)
//!
//! * Requester: SEND and SEND_WITH_IMM only (other opcodes: 8), in the UD layout (Q_Key,
//!   destination QPN, AHN, §5.4). The AHN must name a live AH of the function (else 8) of the
//!   QP's PD (else 13); the payload is gathered like an RC SEND (10..13, inline up to 96 bytes)
//!   and may not exceed the UD MTU (else 8): the largest IB MTU within the function's CONF_MTU,
//!   4096 before any. The source GID is the GID table entry at the AV's source GID index; an
//!   empty entry does not refuse the WQE (as for RC) and the datagram carries the zero address.
//!   The datagram goes by the AV's destination GID (own port first); the WQE completes with
//!   success as soon as it is handed over, or dropped (no fabric, unknown GID, full inbox).
//! * Responder: a datagram for a QPN that does not exist, is not UD, is not in RTR/RTS/SQD,
//!   has another Q_Key or no RQE posted is dropped. Otherwise it consumes one RQE: the 40-byte
//!   GRH area ([`crate::roce::grh_area`]) then the payload at byte 40; the CQE (RECEIVE, or
//!   RSP_SEND_IMM with the immediate) counts 40 + payload bytes and carries the UD info word
//!   (network type, the sender's SL and QPN). An RQE that is malformed (2), whose SGE is
//!   refused (3..6) or too small (4) completes with that status and nothing is written; the QP
//!   keeps its state.
//! * Drops are silent for the sender (UD is unreliable), counted by cause
//!   ([`crate::stats::UdDrops`], `query ud_drops`), and logged once per cause.
//!
//! # Errors (the status mapping)
//!
//! * WQE format problems (opcode, WQEBB count, header index or QPN, SGE count, inline length):
//!   status 8 on the requester.
//! * Local SGE / sink problems: 10 invalid STag (also key mismatch, invalid MR), 11 bounds (also
//!   DMA failure), 12 rights, 13 PD mismatch.
//! * Responder-detected remote access problems on WRITE/READ/ATOMIC (rkey): the responder QP
//!   goes to ERROR and posts an AEQE of type 2 (access error, data0 = its QPN); the requester gets
//!   3 invalid STag, 4 bounds (also misaligned atomic, DMA failure), 5 rights, 6 PD mismatch.
//! * Responder receive-WQE problems on SEND / WRITE_WITH_IMM: the responder completes its RQE with
//!   2 (RQE format), 3..6 (its SGE) or 4 (message longer than the buffer) and goes to ERROR; the
//!   requester gets the same code.
//! * A request that is lost (its destination GID or QPN is unknown, the destination QP is not
//!   RTR/RTS/SQD or goes away while holding it, the destination's inbox is full, or there is no
//!   fabric or address vector) is retransmitted when the QP's timer fires, every
//!   [`RETRY_TIMEOUT`], with every other lost request of the QP, in order; the QP sends no new
//!   request meanwhile. After [`RETRY_COUNT`] retransmissions without an answer the first lost
//!   request completes with 16 (retry exceeded). As on a network, the peer's connection
//!   manager has that long to tell a QP that its peer went away (rdma_cm's DREQ) before the
//!   QP's own error does. An RNR queue overflow gives 16 at once.
//! * Any error completion moves the QP to ERROR: outstanding requests and the WQEs and RQEs
//!   posted so far (up to the last doorbells' PIs) complete with 15 (flushed).
//!
//! # Flushing after ERROR (§3.5 REFLUSH, §10.13)
//!
//! Like the adapter, a doorbell on a QP in ERROR only records the PI: WQEs and RQEs posted
//! after the transition are flushed (15) only when the driver issues REFLUSH with the producer
//! indices (the kernel driver does so after the transition and after every post). A driver that
//! never sends REFLUSH sees such WQEs never complete.
//!
//! # CQs
//!
//! CQEs are written at the device's producer index with the owner bit of the lap (1 on the first).
//! An armed CQ posts one CEQE per arm (a solicited-only arm fires for solicited or error
//! completions); an arm with unseen CQEs fires at once. The drivers report the CI only when they
//! arm, so a CQ overflow (the CQE would land `depth` entries beyond the CI) is judged only while
//! that CI is current (from an arm until the event it asked for): it posts an AEQE of type 3 and
//! the CQ drops CQEs from then on.

use std::collections::VecDeque;
use std::time::Duration;

use super::objects::Pending;
use super::{Device, Oddity};
use crate::cmdq::Gid;
use crate::fabric::{
    AtomicOp, Body, Datagram, Nak, Packet, PortId, Refused, Reply, Request, SendError, StreamMsg,
};
use crate::io::{GuestMemory, Io};
use crate::mtt::{self, Mtt, Piece, Xlate};
use crate::regs::{self, Bar0Area, CqDoorbell};
use crate::roce::{self, GRH_SIZE};
use crate::stats::UdDrop;
use crate::wire::{
    self, access, op, wc, AeqEvent, AtomicSqe, CqeExtra, DataCqe, FastRegSqe, LocalInvSqe, MrType,
    QpState, ReadSqe, RqDoorbell, Rqe, SendSqe, Sge, Sgl, SqDoorbell, SqeHeader, UdInfo, UdSendSqe,
    WriteSqe, CQE_QTYPE_RQ, CQE_QTYPE_SQ, FAST_REG_MTT_BUFFER, FAST_REG_MTT_INLINE, MAX_WQE_SIZE,
    QP_TYPE_UD, RQE_SIZE, SQ_WQEBB_SIZE,
};

/// Largest message the model moves (bytes): larger ones complete with status 1.
pub const MAX_MESSAGE: u64 = 1 << 30;
/// How long a requester waits for an answer before it retransmits its lost requests (an
/// adapter's local ACK timeout; erdma takes none from the driver, §3.5).
pub const RETRY_TIMEOUT: Duration = Duration::from_millis(250);
/// Retransmissions before a lost request completes with "retry exceeded" (the largest retry
/// count of the verbs).
pub const RETRY_COUNT: u32 = 7;
/// Most requests a responder QP holds while waiting for receive WQEs.
pub const MAX_HELD: usize = 4096;
/// Largest UD payload before any CONF_MTU (the largest IB MTU).
pub const UD_DEFAULT_MTU: u32 = 4096;
/// The IB MTUs, largest first: a UD payload may not exceed the largest one that fits the
/// function's MTU (as ib_core derives the port's MTU from the netdev's).
const IB_MTUS: [u32; 5] = [4096, 2048, 1024, 512, 256];
/// AE type: access error.
const AE_ACCESS: u8 = 2;
/// AE type: CQ error.
const AE_CQ: u8 = 3;

/// Why an MR check failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AccessErr {
    Stag,
    Bounds,
    Rights,
    Pd,
}

impl AccessErr {
    fn local(self) -> u8 {
        match self {
            AccessErr::Stag => wc::SEND_STAG,
            AccessErr::Bounds => wc::SEND_BOUNDS,
            AccessErr::Rights => wc::SEND_ACCESS,
            AccessErr::Pd => wc::SEND_PD,
        }
    }

    fn remote(self) -> u8 {
        match self {
            AccessErr::Stag => wc::RECV_STAG,
            AccessErr::Bounds => wc::RECV_BOUNDS,
            AccessErr::Rights => wc::RECV_ACCESS,
            AccessErr::Pd => wc::RECV_PD,
        }
    }
}

/// FNV-1a over `data`: a digest for the data path's trace lines.
fn digest(data: &[u8]) -> u32 {
    data.iter().fold(0x811c_9dc5, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// At trace level, a line for data that QP `qpn` moved (`what`: "WRITE in", "READ out", ...):
/// its length, its address, key and guest-physical pieces, and its digest.
fn trace_data(qpn: u32, what: &str, addr: u64, key: u32, pieces: &[Piece], data: &[u8]) {
    if log::log_enabled!(log::Level::Trace) {
        let pieces: Vec<String> = pieces
            .iter()
            .map(|p| format!("{:#x}+{:#x}", p.gpa, p.len))
            .collect();
        log::trace!(
            "QP {qpn}: {what} {} B at {addr:#x} (key {key:#x}; {}), digest {:08x}",
            data.len(),
            pieces.join(" "),
            digest(data)
        );
    }
}

/// Reads the pieces into one buffer.
fn read_pieces(mem: &dyn GuestMemory, pieces: &[Piece], out: &mut Vec<u8>) -> Result<(), ()> {
    for p in pieces {
        let n = usize::try_from(p.len).map_err(|_| ())?;
        let start = out.len();
        out.resize(start.checked_add(n).ok_or(())?, 0);
        mem.read(p.gpa, &mut out[start..]).map_err(|_| ())?;
    }
    Ok(())
}

/// Writes `data` across the pieces (which cover at least its length).
fn write_pieces(mem: &mut dyn GuestMemory, pieces: &[Piece], data: &[u8]) -> Result<(), ()> {
    let mut done = 0usize;
    for p in pieces {
        if done >= data.len() {
            break;
        }
        let n = usize::try_from(p.len)
            .unwrap_or(usize::MAX)
            .min(data.len() - done);
        mem.write(p.gpa, &data[done..done + n]).map_err(|_| ())?;
        done += n;
    }
    if done < data.len() {
        return Err(());
    }
    Ok(())
}

/// What a WQE turned into.
enum Action {
    /// A request to send; the pending entry waits for its response.
    Request(Request, Pending),
    /// Completed locally with a status.
    Done(Pending),
}

impl Device {
    // --------------------------------------------------------------------------------------------
    // Doorbells
    // --------------------------------------------------------------------------------------------

    /// A 64-bit value written into a doorbell space at BAR0 `offset`.
    pub(super) fn data_doorbell(
        &mut self,
        area: Bar0Area,
        offset: u64,
        value: u64,
        io: &mut Io<'_>,
    ) {
        let slot = offset & (regs::DB_PAGE_SIZE - 1);
        match area {
            Bar0Area::SqDoorbells => self.sq_doorbell(value, io),
            Bar0Area::RqDoorbells => self.rq_or_cq_doorbell(value, slot, true, io),
            Bar0Area::CqDoorbells => self.rq_or_cq_doorbell(value, slot, false, io),
            Bar0Area::ExtDoorbells => {
                let shift = self.func.dbs.page_shift();
                let page = u16::try_from(offset >> shift).ok();
                let slot = (offset & ((1u64 << shift) - 1)) & (regs::DB_PAGE_SIZE - 1);
                match page.and_then(|p| self.func.dbs.role_of(p)) {
                    Some(0) => self.sq_doorbell(value, io),
                    // The drivers swap CDB and RDB: no preference.
                    Some(role) => self.rq_or_cq_doorbell(value, slot, role == 2, io),
                    None => {
                        if self.warned.first(Oddity::DataDoorbell, offset >> 12) {
                            log::warn!(
                                "doorbell {value:#x} on extended page at {offset:#x} that is not \
                                 allocated, ignored"
                            );
                        }
                    }
                }
            }
            Bar0Area::Registers | Bar0Area::TestPage => {}
        }
    }

    fn rq_or_cq_doorbell(&mut self, value: u64, slot: u64, prefer_rq: bool, io: &mut Io<'_>) {
        let rq_db = RqDoorbell::decode(value);
        let cq_db = CqDoorbell::decode(value);
        let (qpn, cqn) = (rq_db.qpn, cq_db.cqn);
        let rq = self.func.rdma.qps.contains_key(&qpn);
        let cq = self.func.rdma.cqs.contains_key(&cqn);
        let is_rq = match (rq, cq) {
            (true, false) => true,
            (false, true) => false,
            (false, false) => {
                if self.warned.first(Oddity::DataDoorbell, value >> 32) {
                    log::warn!("doorbell {value:#x} names neither a QP nor a CQ, ignored");
                }
                return;
            }
            (true, true) => {
                let rq_slot = slot == regs::rq_db_slot(qpn);
                let cq_slot = slot == regs::cq_db_slot(cqn);
                match (rq_slot, cq_slot) {
                    (true, false) => true,
                    (false, true) => false,
                    _ => prefer_rq,
                }
            }
        };
        if is_rq {
            self.rq_doorbell(rq_db, io);
        } else {
            self.cq_doorbell(cq_db, io);
        }
    }

    /// SQ doorbell: a QPN and its new PI.
    fn sq_doorbell(&mut self, value: u64, io: &mut Io<'_>) {
        let SqDoorbell { qpn, pi } = SqDoorbell::decode(value);
        let Some(qp) = self.func.rdma.qps.get_mut(&qpn) else {
            if self.warned.first(Oddity::DataDoorbell, u64::from(qpn)) {
                log::warn!("SQ doorbell {value:#x} for QP {qpn} that does not exist, ignored");
            }
            return;
        };
        let ahead = pi.wrapping_sub(qp.sq.ci);
        if u32::from(ahead) > qp.sq.depth {
            if self.warned.dp_error() {
                log::warn!(
                    "QP {qpn}: SQ doorbell PI {pi:#x} is {ahead} WQEBBs ahead of the device's CI \
                     {:#x} (depth {}), ignored",
                    qp.sq.ci,
                    qp.sq.depth
                );
            }
            return;
        }
        qp.sq.pi = pi;
        match qp.state {
            QpState::Rts => self.process_sq(qpn, io),
            // In ERROR the PI is only recorded: REFLUSH flushes (§3.5, §10.13).
            QpState::Error => log::trace!("QP {qpn} in ERROR: SQ PI {pi:#x} recorded"),
            _ => {}
        }
    }

    /// RQ doorbell: the RQE's first 8 bytes.
    fn rq_doorbell(&mut self, db: RqDoorbell, io: &mut Io<'_>) {
        let RqDoorbell { qpn, pi } = db;
        let Some(qp) = self.func.rdma.qps.get_mut(&qpn) else {
            return;
        };
        let ahead = pi.wrapping_sub(qp.rq.ci);
        if u32::from(ahead) > qp.rq.depth {
            if self.warned.dp_error() {
                log::warn!(
                    "QP {qpn}: RQ doorbell PI {pi:#x} is {ahead} RQEs ahead of the device's CI \
                     {:#x} (depth {}), ignored",
                    qp.rq.ci,
                    qp.rq.depth
                );
            }
            return;
        }
        qp.rq.pi = pi;
        match qp.state {
            // In ERROR the PI is only recorded: REFLUSH flushes (§3.5, §10.13).
            QpState::Error => log::trace!("QP {qpn} in ERROR: RQ PI {pi:#x} recorded"),
            _ => self.drain_held(qpn, io),
        }
    }

    /// CQ doorbell (§4.4): record the CI; with ARM, arm for the next (solicited) completion.
    fn cq_doorbell(&mut self, db: CqDoorbell, io: &mut Io<'_>) {
        let Some(cq) = self.func.rdma.cqs.get_mut(&db.cqn) else {
            return;
        };
        cq.ci = db.ci;
        if !db.arm {
            return;
        }
        cq.ci_fresh = true;
        let pending = cq.pi.wrapping_sub(db.ci) & 0xff_ffff;
        if !db.solicited && pending != 0 && pending <= cq.depth {
            // Completions the consumer has not seen: the event is due now.
            cq.armed = None;
            cq.ci_fresh = false;
            let (eqn, cqn) = (cq.eqn, cq.cqn);
            self.cq_event(eqn, cqn, io);
        } else {
            cq.armed = Some(db.solicited);
        }
    }

    fn cq_event(&mut self, eqn: u8, cqn: u32, io: &mut Io<'_>) {
        if let Err(e) = self.post_ceqe(eqn, cqn, io) {
            if self.warned.dp_error() {
                log::warn!("CQ {cqn}: CEQE to CEQ {eqn} dropped: {e}");
            }
        }
    }

    // --------------------------------------------------------------------------------------------
    // CQEs
    // --------------------------------------------------------------------------------------------

    /// Writes a CQE into CQ `cqn` and raises its event if armed for it.
    fn post_cqe(&mut self, cqn: u32, mut cqe: DataCqe, solicited: bool, io: &mut Io<'_>) {
        let Some(cq) = self.func.rdma.cqs.get_mut(&cqn) else {
            if self.warned.first(Oddity::MissingCq, u64::from(cqn)) {
                log::warn!(
                    "completion for QP {} dropped: CQ {cqn} does not exist",
                    cqe.qpn
                );
            }
            return;
        };
        if cq.error {
            return;
        }
        if cq.ci_fresh && cq.pi.wrapping_sub(cq.ci) & 0xff_ffff >= cq.depth {
            cq.error = true;
            log::warn!(
                "CQ {cqn} overflow: {} CQEs beyond the consumer index {:#x}; CQ error",
                cq.depth,
                cq.ci
            );
            let ev = AeqEvent {
                ty: AE_CQ,
                subtype: 0,
                data0: cqn,
                data1: 0,
            };
            if let Err(e) = self.post_aeqe(ev, io) {
                log::warn!("CQ {cqn}: AEQE dropped: {e}");
            }
            return;
        }
        let slot = cq.pi & (cq.depth - 1);
        cqe.owner = cq.pi & cq.depth == 0;
        let bytes = cqe.encode();
        let off = u64::from(slot) * wire::CQE_SIZE as u64;
        let written = wire::write_owner_last(&bytes, |at, b| cq.buf.write(off + at, b, io.mem));
        if let Err(e) = written {
            if self
                .warned
                .first(Oddity::CqeWrite, u64::from(cqn) | 1 << 32)
            {
                log::warn!("CQ {cqn}: CQE not writable ({e:?}), dropped");
            }
            return;
        }
        cq.pi = cq.pi.wrapping_add(1);
        let fire = match cq.armed {
            Some(sol_only) => !sol_only || solicited || cqe.status != wc::SUCCESS,
            None => false,
        };
        if fire {
            cq.armed = None;
            cq.ci_fresh = false;
            let eqn = cq.eqn;
            self.cq_event(eqn, cqn, io);
        }
    }

    fn sq_cqe(&mut self, qpn: u32, p: &Pending, status: u8, io: &mut Io<'_>) {
        let Some(qp) = self.func.rdma.qps.get(&qpn) else {
            return;
        };
        let cqn = qp.send_cqn;
        let cqe = DataCqe {
            owner: false,
            opcode: p.opcode,
            qtype: CQE_QTYPE_SQ,
            status,
            wqe_index: u32::from(p.wqe_index),
            qpn,
            extra: CqeExtra::None,
            byte_len: if status == wc::SUCCESS { p.byte_len } else { 0 },
            ud: UdInfo::NONE,
        };
        self.post_cqe(cqn, cqe, false, io);
    }

    #[allow(clippy::too_many_arguments)]
    fn rq_cqe(
        &mut self,
        qpn: u32,
        index: u16,
        opcode: u8,
        status: u8,
        extra: CqeExtra,
        byte_len: u32,
        solicited: bool,
        ud: UdInfo,
        io: &mut Io<'_>,
    ) {
        let Some(qp) = self.func.rdma.qps.get(&qpn) else {
            return;
        };
        let cqn = qp.recv_cqn;
        let cqe = DataCqe {
            owner: false,
            opcode,
            qtype: CQE_QTYPE_RQ,
            status,
            wqe_index: u32::from(index),
            qpn,
            extra,
            byte_len,
            ud,
        };
        self.post_cqe(cqn, cqe, solicited, io);
    }

    // --------------------------------------------------------------------------------------------
    // MR checks
    // --------------------------------------------------------------------------------------------

    /// Checks `[addr, addr + len)` under `key` for PD `pdn` with `need` access bits, and
    /// translates it.
    fn mr_access(
        &self,
        key: u32,
        pdn: u32,
        addr: u64,
        len: u64,
        need: u8,
        mem: &dyn GuestMemory,
    ) -> Result<Vec<Piece>, AccessErr> {
        let end = addr.checked_add(len).ok_or(AccessErr::Bounds)?;
        if key == self.config.caps.local_dma_lkey {
            return Ok(if len == 0 {
                Vec::new()
            } else {
                vec![Piece { gpa: addr, len }]
            });
        }
        let mr = self
            .func
            .rdma
            .mrs
            .get(&wire::stag_index(key))
            .ok_or(AccessErr::Stag)?;
        if mr.key != wire::stag_key(key) || !mr.valid {
            return Err(AccessErr::Stag);
        }
        if mr.pdn != pdn {
            return Err(AccessErr::Pd);
        }
        if need & !mr.access & !access::LOCAL_READ != 0 {
            return Err(AccessErr::Rights);
        }
        if mr.mr_type == MrType::Dma {
            return Ok(if len == 0 {
                Vec::new()
            } else {
                vec![Piece { gpa: addr, len }]
            });
        }
        let mr_end = mr.va.checked_add(mr.len).ok_or(AccessErr::Bounds)?;
        if addr < mr.va || end > mr_end {
            return Err(AccessErr::Bounds);
        }
        if len == 0 {
            return Ok(Vec::new());
        }
        mtt::mr_pieces(&mr.mtt, mr.va, mr.page_shift, addr, len, mem).map_err(|e| match e {
            Xlate::Bounds | Xlate::Dma(_) => AccessErr::Bounds,
        })
    }

    /// Gathers the payload of local SGEs (status on failure).
    fn gather(&self, pdn: u32, sges: &[Sge], mem: &dyn GuestMemory) -> Result<Vec<u8>, u8> {
        let total: u64 = sges.iter().map(|s| u64::from(s.len)).sum();
        if total > MAX_MESSAGE {
            return Err(wc::GENERAL);
        }
        let mut data = Vec::with_capacity(usize::try_from(total).unwrap_or(0).min(1 << 20));
        for s in sges.iter().filter(|s| s.len > 0) {
            let pieces = self
                .mr_access(s.key, pdn, s.addr, u64::from(s.len), 0, mem)
                .map_err(AccessErr::local)?;
            read_pieces(mem, &pieces, &mut data).map_err(|()| wc::SEND_BOUNDS)?;
        }
        Ok(data)
    }

    // --------------------------------------------------------------------------------------------
    // Requester
    // --------------------------------------------------------------------------------------------

    /// Processes the SQ of an RTS QP up to its PI.
    pub(super) fn process_sq(&mut self, qpn: u32, io: &mut Io<'_>) {
        loop {
            let Some(qp) = self.func.rdma.qps.get(&qpn) else {
                return;
            };
            // Nothing overtakes a lost request waiting to be retransmitted.
            if qp.state != QpState::Rts || qp.sq.pi == qp.sq.ci || !qp.lost.is_empty() {
                break;
            }
            let ci = qp.sq.ci;
            let avail = qp.sq.pi.wrapping_sub(ci);
            let mut wqe = [0u8; MAX_WQE_SIZE];
            let off = u64::from(u32::from(ci) & (qp.sq.depth - 1)) * SQ_WQEBB_SIZE as u64;
            if qp
                .sq
                .buf
                .read(off, &mut wqe[..SqeHeader::SIZE], io.mem)
                .is_err()
            {
                if self.warned.first(Oddity::DataPath, u64::from(qpn)) {
                    log::warn!("QP {qpn}: SQ not readable at {ci:#x}; QP to ERROR");
                }
                self.enter_error(qpn, io);
                return;
            }
            let hdr = SqeHeader::read(&wqe);
            let count = hdr.wqebbs;
            let stalled = qp.outstanding.iter().any(|p| p.status.is_none())
                && (hdr.fence || matches!(hdr.opcode, op::REG_MR | op::LOCAL_INV));
            if stalled {
                break;
            }
            let mut pending = Pending {
                seq: None,
                wqe_index: ci,
                opcode: hdr.opcode,
                signaled: hdr.ce,
                status: None,
                byte_len: 0,
                sink: None,
                inv_after: None,
            };
            let bad = if count > 4 || count > avail {
                Some(format!("{count} WQEBBs, {avail} posted"))
            } else if hdr.index != ci.wrapping_add(count) {
                Some(format!(
                    "header index {:#x}, expected {:#x}",
                    hdr.index,
                    ci.wrapping_add(count)
                ))
            } else if hdr.qpn != qpn {
                Some(format!("header QPN {}", hdr.qpn))
            } else {
                None
            };
            let extent = count.min(avail);
            let action = match bad {
                Some(why) => {
                    if self.warned.dp_error() {
                        log::warn!("QP {qpn}: WQE at {ci:#x} malformed: {why}");
                    }
                    pending.status = Some(wc::SEND_FORMAT);
                    Action::Done(pending)
                }
                None => {
                    let len = usize::from(count) * SQ_WQEBB_SIZE;
                    if qp.sq.buf.read(off, &mut wqe[..len], io.mem).is_err() {
                        pending.status = Some(wc::SEND_FORMAT);
                        Action::Done(pending)
                    } else {
                        self.build(qpn, &hdr, &wqe[..len], pending, io)
                    }
                }
            };
            self.harness.stats.tx_request();
            let Some(qp) = self.func.rdma.qps.get_mut(&qpn) else {
                return;
            };
            qp.sq.ci = ci.wrapping_add(extent);
            match action {
                Action::Done(p) => qp.outstanding.push_back(p),
                Action::Request(req, mut p) => {
                    let seq = qp.next_seq;
                    qp.next_seq = qp.next_seq.wrapping_add(1);
                    qp.sq_psn = (qp.sq_psn + 1) & 0xff_ffff;
                    p.seq = Some(seq);
                    let iwarp = qp.iw.is_some();
                    qp.outstanding.push_back(p);
                    if iwarp {
                        self.iw_send(qpn, StreamMsg::Request { id: seq, req });
                    } else if let Err(req) = self.transmit(qpn, seq, req) {
                        self.lose(qpn, seq, req);
                    }
                }
            }
            self.drain_completions(qpn, io);
        }
    }

    /// Sends request `seq` of QP `qpn` to the QP's destination; gives it back if it cannot be
    /// delivered (then it is lost).
    fn transmit(&mut self, qpn: u32, seq: u64, req: Request) -> Result<(), Request> {
        let Some(qp) = self.func.rdma.qps.get(&qpn) else {
            return Err(req);
        };
        let (dst_qpn, dgid) = (qp.dst_qpn, qp.av.map(|a| a.dgid));
        let (Some(port), Some(dgid)) = (self.port.clone(), dgid) else {
            return Err(req);
        };
        let Some(to) = port.resolve(&dgid) else {
            log::debug!(
                "QP {qpn}: destination GID {} unknown on the fabric: request {seq} lost",
                std::net::Ipv6Addr::from(dgid)
            );
            return Err(req);
        };
        let bytes = req.payload_len() as u64;
        let pkt = Packet {
            src_port: 0,
            src_qpn: qpn,
            dst_qpn,
            body: Body::Request { seq, req },
        };
        match port.send_request(to, pkt) {
            Ok(()) => {
                self.harness.stats.tx_packet(bytes);
                Ok(())
            }
            Err(Refused { why, packet }) => {
                log::debug!("QP {qpn}: request {seq} not delivered ({why:?}): lost");
                match packet.body {
                    Body::Request { req, .. } => Err(req),
                    _ => unreachable!("the fabric hands back the packet it was given"),
                }
            }
        }
    }

    /// Request `seq` of QP `qpn`, still waiting for its answer, was lost: it waits for the
    /// QP's retransmission timer, which starts now unless it runs already.
    fn lose(&mut self, qpn: u32, seq: u64, req: Request) {
        let due = self.clock.now() + RETRY_TIMEOUT;
        let Some(qp) = self.func.rdma.qps.get_mut(&qpn) else {
            return;
        };
        let waiting = qp
            .outstanding
            .iter()
            .any(|p| p.seq == Some(seq) && p.status.is_none());
        if waiting {
            log::info!(
                "QP {qpn}: request {seq} lost (retransmission {} of {RETRY_COUNT} next)",
                qp.retries + 1
            );
            qp.lost.insert(seq, req);
            self.func.rdma.retransmit.entry(qpn).or_insert(due);
        }
    }

    /// When the earliest retransmission timer fires.
    pub(super) fn next_retransmit(&self) -> Option<Duration> {
        self.func.rdma.retransmit.values().min().copied()
    }

    /// Fires every retransmission timer that is due; returns how many.
    pub(super) fn run_retransmits(&mut self, now: Duration, io: &mut Io<'_>) -> usize {
        let due: Vec<u32> = self
            .func
            .rdma
            .retransmit
            .iter()
            .filter(|&(_, &t)| t <= now)
            .map(|(&qpn, _)| qpn)
            .collect();
        for &qpn in &due {
            self.func.rdma.retransmit.remove(&qpn);
            self.retransmit(qpn, io);
        }
        due.len()
    }

    /// The retransmission timer of QP `qpn` fired: its lost requests go out again, in order,
    /// or, after [`RETRY_COUNT`] retransmissions without an answer, the first of them
    /// completes with "retry exceeded" (and the QP's move to ERROR flushes the rest).
    fn retransmit(&mut self, qpn: u32, io: &mut Io<'_>) {
        if self.is_iwarp_qp(qpn) {
            self.iw_retransmit(qpn, io);
            return;
        }
        let Some(qp) = self.func.rdma.qps.get_mut(&qpn) else {
            return;
        };
        let lost = std::mem::take(&mut qp.lost);
        let Some(&first) = lost.keys().next() else {
            return;
        };
        if !matches!(qp.state, QpState::Rts | QpState::Sqd) {
            // Flushed already (ERROR), or starting over (RESET).
            return;
        }
        if qp.retries >= RETRY_COUNT {
            qp.retries = 0;
            if let Some(p) = qp.outstanding.iter_mut().find(|p| p.seq == Some(first)) {
                p.status = Some(wc::RETRY_EXCEEDED);
            }
            if self.warned.dp_error() {
                log::warn!(
                    "QP {qpn}: request {first} unanswered after {RETRY_COUNT} retransmissions \
                     (no QP able to receive at the destination): retry exceeded"
                );
            }
            self.drain_completions(qpn, io);
            return;
        }
        qp.retries += 1;
        for (seq, req) in lost {
            if let Err(req) = self.transmit(qpn, seq, req) {
                self.lose(qpn, seq, req);
            }
        }
        self.process_sq(qpn, io);
    }

    /// The payload of a SEND/WRITE WQE: inline bytes or gathered SGEs.
    fn payload(
        &self,
        pdn: u32,
        hdr: &SqeHeader,
        wqe: &[u8],
        sgl_off: usize,
        mem: &dyn GuestMemory,
    ) -> Result<Vec<u8>, u8> {
        match Sgl::decode(hdr, wqe, sgl_off).ok_or(wc::SEND_FORMAT)? {
            Sgl::Inline(data) => Ok(data.to_vec()),
            Sgl::Sges(sges) => self.gather(pdn, &sges, mem),
        }
    }

    /// Turns one well-formed WQE into an action.
    fn build(
        &mut self,
        qpn: u32,
        hdr: &SqeHeader,
        wqe: &[u8],
        mut p: Pending,
        io: &mut Io<'_>,
    ) -> Action {
        let Some(qp) = self.func.rdma.qps.get(&qpn) else {
            p.status = Some(wc::GENERAL);
            return Action::Done(p);
        };
        let pdn = qp.pdn;
        let ud = qp.qp_type == QP_TYPE_UD;
        let result: Result<Option<Request>, u8> = match hdr.opcode {
            // UD: a datagram handed to the fabric completes at once (no response).
            op::SEND | op::SEND_WITH_IMM if ud => {
                self.ud_datagram(qpn, pdn, hdr, wqe, io.mem)
                    .map(|(dst_qpn, d)| {
                        p.byte_len = d.data.len() as u32;
                        self.send_datagram(qpn, dst_qpn, d);
                        None
                    })
            }
            _ if ud => {
                if self.warned.dp_error() {
                    log::warn!("QP {qpn}: opcode {} on a UD QP", hdr.opcode);
                }
                Err(wc::SEND_FORMAT)
            }
            op::SEND | op::SEND_WITH_IMM | op::SEND_WITH_INV => {
                SendSqe::decode(wqe).ok_or(wc::SEND_FORMAT).and_then(|s| {
                    let data = self.payload(pdn, hdr, wqe, SendSqe::SGL_OFFSET, io.mem)?;
                    p.byte_len = data.len() as u32;
                    Ok(Some(Request::Send {
                        data,
                        imm: (hdr.opcode == op::SEND_WITH_IMM).then_some(s.imm),
                        inv: (hdr.opcode == op::SEND_WITH_INV).then(|| s.inv_stag()),
                        solicited: hdr.se,
                    }))
                })
            }
            op::WRITE | op::WRITE_WITH_IMM => {
                WriteSqe::decode(wqe).ok_or(wc::SEND_FORMAT).and_then(|w| {
                    let data = self.payload(pdn, hdr, wqe, WriteSqe::SGL_OFFSET, io.mem)?;
                    p.byte_len = data.len() as u32;
                    trace_data(qpn, "WRITE out", w.raddr, w.rkey, &[], &data);
                    Ok(Some(Request::Write {
                        addr: w.raddr,
                        rkey: w.rkey,
                        data,
                        imm: (hdr.opcode == op::WRITE_WITH_IMM).then_some(w.imm),
                        solicited: hdr.se,
                    }))
                })
            }
            op::READ | op::READ_WITH_INV => match ReadSqe::decode(wqe) {
                None => Err(wc::SEND_FORMAT),
                Some(r) if u64::from(r.length) > MAX_MESSAGE => Err(wc::GENERAL),
                Some(r) => self
                    .mr_access(
                        r.lkey,
                        pdn,
                        r.laddr,
                        u64::from(r.length),
                        access::LOCAL_WRITE,
                        io.mem,
                    )
                    .map_err(AccessErr::local)
                    .map(|_| {
                        p.byte_len = r.length;
                        p.sink = Some((r.laddr, r.length, r.lkey));
                        if hdr.opcode == op::READ_WITH_INV {
                            p.inv_after = Some(r.inv_stag);
                        }
                        Some(Request::Read {
                            addr: r.remote.addr,
                            rkey: r.remote.key,
                            len: r.length,
                        })
                    }),
            },
            op::ATOMIC_CAS | op::ATOMIC_FAA => match AtomicSqe::decode(wqe) {
                Some(a) if self.config.caps.atomic => self
                    .mr_access(
                        a.local.key,
                        pdn,
                        a.local.addr,
                        8,
                        access::LOCAL_WRITE,
                        io.mem,
                    )
                    .map_err(AccessErr::local)
                    .map(|_| {
                        p.byte_len = 8;
                        p.sink = Some((a.local.addr, 8, a.local.key));
                        let op = if hdr.opcode == op::ATOMIC_CAS {
                            AtomicOp::Cas {
                                compare: a.compare,
                                swap: a.swap_or_add,
                            }
                        } else {
                            AtomicOp::Faa { add: a.swap_or_add }
                        };
                        Some(Request::Atomic {
                            addr: a.remote.addr,
                            rkey: a.remote.key,
                            op,
                        })
                    }),
                _ => Err(wc::SEND_FORMAT),
            },
            op::REG_MR => self.fast_register(pdn, wqe).map(|()| None),
            op::LOCAL_INV => LocalInvSqe::decode(wqe)
                .ok_or(wc::SEND_FORMAT)
                .and_then(|l| self.invalidate(l.stag, pdn, true))
                .map(|()| None),
            other => {
                if self.warned.dp_error() {
                    log::warn!("QP {qpn}: WQE opcode {other} unknown");
                }
                Err(wc::SEND_FORMAT)
            }
        };
        match result {
            Ok(Some(req)) => Action::Request(req, p),
            Ok(None) => {
                p.status = Some(wc::SUCCESS);
                Action::Done(p)
            }
            Err(s) => {
                p.status = Some(s);
                Action::Done(p)
            }
        }
    }

    // --------------------------------------------------------------------------------------------
    // UD
    // --------------------------------------------------------------------------------------------

    /// The largest UD payload: the largest IB MTU within the function's MTU (CONF_MTU, the
    /// netdev's MTU; 256 below 512), [`UD_DEFAULT_MTU`] before any CONF_MTU.
    pub(super) fn ud_mtu(&self) -> u32 {
        match self.func.mtu {
            0 => UD_DEFAULT_MTU,
            m => IB_MTUS.into_iter().find(|&x| m >= x).unwrap_or(256),
        }
    }

    /// Builds the datagram of a UD SEND / SEND_WITH_IMM WQE: `(destination QPN, datagram)`, or
    /// the requester's status: 8 for a short WQE, an AHN that is not live or a payload beyond
    /// [`Device::ud_mtu`], 13 for an AH of another PD, the local SGE codes.
    fn ud_datagram(
        &mut self,
        qpn: u32,
        pdn: u32,
        hdr: &SqeHeader,
        wqe: &[u8],
        mem: &dyn GuestMemory,
    ) -> Result<(u32, Datagram), u8> {
        let s = UdSendSqe::decode(wqe).ok_or(wc::SEND_FORMAT)?;
        let Some(ah) = self.func.ahs.get(s.ahn).copied() else {
            if self.warned.dp_error() {
                log::warn!("QP {qpn}: UD WQE names AH {} that does not exist", s.ahn);
            }
            return Err(wc::SEND_FORMAT);
        };
        if ah.pdn != pdn {
            if self.warned.dp_error() {
                log::warn!(
                    "QP {qpn} (PD {pdn}): UD WQE names AH {} of PD {}",
                    s.ahn,
                    ah.pdn
                );
            }
            return Err(wc::SEND_PD);
        }
        let sgl = Sgl::decode(hdr, wqe, UdSendSqe::SGL_OFFSET).ok_or(wc::SEND_FORMAT)?;
        let len: u64 = match &sgl {
            Sgl::Inline(d) => d.len() as u64,
            Sgl::Sges(sges) => sges.iter().map(|g| u64::from(g.len)).sum(),
        };
        let mtu = self.ud_mtu();
        if len > u64::from(mtu) {
            if self.warned.dp_error() {
                log::warn!("QP {qpn}: UD payload of {len} bytes beyond the MTU ({mtu})");
            }
            return Err(wc::SEND_FORMAT);
        }
        let data = match sgl {
            Sgl::Inline(d) => d.to_vec(),
            Sgl::Sges(sges) => self.gather(pdn, &sges, mem)?,
        };
        let av = ah.av;
        let sgid: Gid = match self.func.gids.get(av.sgid_index) {
            Some(e) => e.gid,
            None => {
                // Like an RC send, the WQE is not refused; the adapter has no address for the
                // index, so the datagram leaves with the unspecified address (all zero).
                if self
                    .warned
                    .first(Oddity::UdSourceGid, u64::from(av.sgid_index))
                {
                    log::warn!(
                        "QP {qpn}: AH {} names source GID {} that is not populated; datagrams \
                         carry the zero address",
                        s.ahn,
                        av.sgid_index
                    );
                }
                [0; 16]
            }
        };
        let datagram = Datagram {
            qkey: s.qkey,
            data,
            imm: (hdr.opcode == op::SEND_WITH_IMM).then_some(s.imm),
            solicited: hdr.se,
            net_type: av.net_type,
            traffic_class: av.traffic_class,
            flow_label: av.flow_label,
            hop_limit: av.hop_limit,
            sl: av.sl,
            sgid,
            dgid: av.dgid,
        };
        Ok((s.dst_qpn, datagram))
    }

    /// Hands a datagram to the fabric; one that cannot go anywhere is dropped (counted).
    fn send_datagram(&mut self, qpn: u32, dst_qpn: u32, d: Datagram) {
        if let Some(qp) = self.func.rdma.qps.get_mut(&qpn) {
            qp.sq_psn = (qp.sq_psn + 1) & 0xff_ffff;
        }
        let Some(port) = self.port.clone() else {
            self.ud_drop(UdDrop::NoFabric, || {
                format!("QP {qpn} -> QP {dst_qpn}: no fabric")
            });
            return;
        };
        let dgid = d.dgid;
        let unknown = move || {
            format!(
                "QP {qpn} -> QP {dst_qpn}: destination GID {} unknown on the fabric",
                std::net::Ipv6Addr::from(dgid)
            )
        };
        let Some(to) = port.resolve(&dgid) else {
            self.ud_drop(UdDrop::UnknownGid, unknown);
            return;
        };
        let bytes = d.data.len() as u64;
        let pkt = Packet {
            src_port: 0,
            src_qpn: qpn,
            dst_qpn,
            body: Body::Datagram(d),
        };
        match port.send_datagram(to, pkt) {
            Ok(()) => self.harness.stats.tx_packet(bytes),
            Err(Refused {
                why: SendError::Unreachable,
                ..
            }) => self.ud_drop(UdDrop::UnknownGid, unknown),
            Err(Refused {
                why: SendError::Congested,
                ..
            }) => self.ud_drop(UdDrop::Congested, || {
                format!("QP {qpn} -> QP {dst_qpn}: destination inbox full")
            }),
        }
    }

    /// Counts a dropped datagram; the first drop of each cause is logged as a warning.
    fn ud_drop(&mut self, cause: UdDrop, what: impl FnOnce() -> String) {
        self.harness.ud_drops.count(cause);
        if self.warned.first(Oddity::UdDrop, cause.index() as u64) {
            log::warn!(
                "UD datagram dropped ({}): {}; further drops for this cause are logged at debug \
                 level",
                cause.name(),
                what()
            );
        } else {
            log::debug!("UD datagram dropped ({}): {}", cause.name(), what());
        }
    }

    /// A datagram for QP `dst_qpn` from QP `src_qpn` of another (or this) function.
    fn incoming_datagram(&mut self, src_qpn: u32, dst_qpn: u32, d: Datagram, io: &mut Io<'_>) {
        let cause = match self.func.rdma.qps.get(&dst_qpn) {
            None => Some(UdDrop::NoQp),
            Some(q) if q.qp_type != QP_TYPE_UD => Some(UdDrop::NotUd),
            Some(q) if !matches!(q.state, QpState::Rtr | QpState::Rts | QpState::Sqd) => {
                Some(UdDrop::NotReady)
            }
            Some(q) if q.qkey != d.qkey => Some(UdDrop::Qkey),
            Some(q) if q.rq.pi == q.rq.ci => Some(UdDrop::NoRqe),
            Some(_) => None,
        };
        if let Some(cause) = cause {
            let (state, qkey) = self
                .func
                .rdma
                .qps
                .get(&dst_qpn)
                .map_or(("none", 0), |q| (q.state.name(), q.qkey));
            self.ud_drop(cause, || {
                format!(
                    "QP {src_qpn} -> QP {dst_qpn} (state {state}, Q_Key {qkey:#x}), Q_Key {:#x}",
                    d.qkey
                )
            });
            return;
        }
        let info = UdInfo {
            net_type: d.net_type,
            sl: d.sl,
            src_qpn,
        };
        let rqe = match self.fetch_rqe(dst_qpn, io) {
            Some(Ok(r)) => r,
            Some(Err(code)) => {
                self.ud_receive_error(dst_qpn, code, info, io);
                return;
            }
            None => return,
        };
        let pdn = self.func.rdma.qps.get(&dst_qpn).map_or(0, |q| q.pdn);
        let total = GRH_SIZE + d.data.len();
        let written = if total as u64 > u64::from(rqe.sge.len) {
            Err(wc::RECV_BOUNDS)
        } else {
            let pieces = self.mr_access(
                rqe.sge.key,
                pdn,
                rqe.sge.addr,
                total as u64,
                access::LOCAL_WRITE,
                io.mem,
            );
            match pieces {
                Ok(p) => {
                    let mut bytes = Vec::with_capacity(total);
                    bytes.extend_from_slice(&roce::grh_area(&d));
                    bytes.extend_from_slice(&d.data);
                    write_pieces(io.mem, &p, &bytes).map_err(|()| wc::RECV_BOUNDS)
                }
                Err(e) => Err(e.remote()),
            }
        };
        if let Err(code) = written {
            self.ud_receive_error(dst_qpn, code, info, io);
            return;
        }
        let (opcode, extra) = match d.imm {
            Some(i) => (op::RSP_SEND_IMM, CqeExtra::Imm(i)),
            None => (op::RECEIVE, CqeExtra::None),
        };
        let Some(qp) = self.func.rdma.qps.get_mut(&dst_qpn) else {
            return;
        };
        let index = qp.rq.ci;
        qp.rq.ci = index.wrapping_add(1);
        qp.rq_psn = (qp.rq_psn + 1) & 0xff_ffff;
        self.rq_cqe(
            dst_qpn,
            index,
            opcode,
            wc::SUCCESS,
            extra,
            total as u32,
            d.solicited,
            info,
            io,
        );
    }
    /// A UD receive WQE that cannot take a datagram (malformed, its SGE refused, too small):
    /// it completes with `code` and nothing is written; unlike RC the QP keeps its state (a
    /// datagram service survives one bad datagram).
    fn ud_receive_error(&mut self, qpn: u32, code: u8, info: UdInfo, io: &mut Io<'_>) {
        let Some(index) = self.fail_rqe(qpn, code, info, io) else {
            return;
        };
        if self.warned.dp_error() {
            log::warn!(
                "QP {qpn}: UD receive WQE at {index:#x} failed with status {code} (datagram from \
                 QP {}); the QP stays usable",
                info.src_qpn
            );
        }
    }

    /// A fast-register WQE (§5.4): makes an FRMR valid with a new key, IOVA, length, rights.
    fn fast_register(&mut self, pdn: u32, wqe: &[u8]) -> Result<(), u8> {
        let f = FastRegSqe::decode(wqe).ok_or(wc::SEND_FORMAT)?;
        let iova = f.iova;
        let len = u64::from(f.length);
        let npages = u64::from(f.npages);
        let mr = self
            .func
            .rdma
            .mrs
            .get_mut(&wire::stag_index(f.stag))
            .ok_or(wc::SEND_STAG)?;
        let Some((buf, capacity)) = mr.frmr else {
            return Err(wc::SEND_STAG);
        };
        if mr.valid {
            return Err(wc::SEND_STAG);
        }
        if mr.pdn != pdn {
            return Err(wc::SEND_PD);
        }
        if npages > capacity || iova.checked_add(len).is_none() {
            return Err(wc::SEND_FORMAT);
        }
        let s = mr.page_shift;
        let need = if len == 0 {
            0
        } else {
            ((iova + len - 1) >> s) - (iova >> s) + 1
        };
        if need > npages {
            return Err(wc::SEND_FORMAT);
        }
        mr.mtt = match f.mtt_type {
            FAST_REG_MTT_INLINE => Mtt::Direct(f.inline_pages(wqe).ok_or(wc::SEND_FORMAT)?),
            FAST_REG_MTT_BUFFER => Mtt::Indirect {
                levels: 1,
                root: buf,
                count: npages,
                page_shift: 12,
            },
            _ => return Err(wc::SEND_FORMAT),
        };
        mr.key = wire::stag_key(f.stag);
        mr.va = iova;
        mr.len = len;
        mr.access = f.access | access::LOCAL_READ;
        mr.valid = true;
        Ok(())
    }

    /// Invalidates MR `stag` (LOCAL_INV, READ_WITH_INV, SEND_WITH_INV at the responder). Only
    /// if `key_checked` must the STag's key be the region's: a READ_WITH_INV names its sink by
    /// the index alone, as the kernel's rdma_rw posts it (on iWARP, with the key the region
    /// had before the REG_MR that precedes the READ gave it the next one).
    fn invalidate(&mut self, stag: u32, pdn: u32, key_checked: bool) -> Result<(), u8> {
        let mr = self
            .func
            .rdma
            .mrs
            .get_mut(&wire::stag_index(stag))
            .ok_or(wc::SEND_STAG)?;
        if (key_checked && mr.key != wire::stag_key(stag)) || mr.mr_type == MrType::Dma {
            return Err(wc::SEND_STAG);
        }
        if mr.pdn != pdn {
            return Err(wc::SEND_PD);
        }
        mr.valid = false;
        Ok(())
    }

    /// Completes finished requests from the front of the SQ, in order. An error moves the QP to
    /// ERROR.
    pub(super) fn drain_completions(&mut self, qpn: u32, io: &mut Io<'_>) {
        loop {
            let Some(qp) = self.func.rdma.qps.get_mut(&qpn) else {
                return;
            };
            let Some(status) = qp.outstanding.front().and_then(|p| p.status) else {
                return;
            };
            let Some(p) = qp.outstanding.pop_front() else {
                return;
            };
            let in_error = qp.state == QpState::Error;
            if p.signaled || status != wc::SUCCESS {
                self.sq_cqe(qpn, &p, status, io);
            }
            if status != wc::SUCCESS && !in_error {
                log::debug!(
                    "QP {qpn}: WQE at {:#x} (opcode {}) completed with status {status}; QP to ERROR",
                    p.wqe_index,
                    p.opcode
                );
                self.enter_error(qpn, io);
            }
        }
    }

    /// Moves a QP to ERROR and flushes everything.
    pub(super) fn enter_error(&mut self, qpn: u32, io: &mut Io<'_>) {
        self.enter_error_with(qpn, None, io);
    }

    /// [`Device::enter_error`]; an iWARP QP's live stream ends with a Terminate that gives the
    /// peer's oldest unanswered request `peer_status` (`None`: flushed).
    pub(super) fn enter_error_with(&mut self, qpn: u32, peer_status: Option<u8>, io: &mut Io<'_>) {
        self.iw_close(qpn, peer_status);
        let Some(qp) = self.func.rdma.qps.get_mut(&qpn) else {
            return;
        };
        qp.state = QpState::Error;
        for p in qp.outstanding.iter_mut().filter(|p| p.status.is_none()) {
            p.status = Some(wc::FLUSHED);
        }
        let held = std::mem::take(&mut qp.held);
        self.nak_held(held);
        self.drain_completions(qpn, io);
        self.flush_queues(qpn, io);
    }

    /// Flushes every posted SQ WQE and RQE of a QP in ERROR (status 15).
    pub(super) fn flush_queues(&mut self, qpn: u32, io: &mut Io<'_>) {
        // SQ: one CQE per WQE, in order, after any outstanding completions.
        for p in self
            .func
            .rdma
            .qps
            .get_mut(&qpn)
            .map(|q| std::mem::take(&mut q.outstanding))
            .unwrap_or_default()
        {
            let status = p.status.unwrap_or(wc::FLUSHED);
            if p.signaled || status != wc::SUCCESS {
                self.sq_cqe(qpn, &p, status, io);
            }
        }
        loop {
            let Some(qp) = self.func.rdma.qps.get_mut(&qpn) else {
                return;
            };
            let ci = qp.sq.ci;
            let avail = qp.sq.pi.wrapping_sub(ci);
            if avail == 0 {
                break;
            }
            let off = u64::from(u32::from(ci) & (qp.sq.depth - 1)) * SQ_WQEBB_SIZE as u64;
            let mut h = [0u8; SqeHeader::SIZE];
            let hdr = qp
                .sq
                .buf
                .read(off, &mut h, io.mem)
                .ok()
                .map(|()| SqeHeader::read(&h));
            let (opcode, count) = hdr.map_or((op::SEND, avail), |h| (h.opcode, h.wqebbs));
            qp.sq.ci = ci.wrapping_add(count.clamp(1, avail));
            let p = Pending {
                seq: None,
                wqe_index: ci,
                opcode,
                signaled: true,
                status: None,
                byte_len: 0,
                sink: None,
                inv_after: None,
            };
            self.sq_cqe(qpn, &p, wc::FLUSHED, io);
        }
        loop {
            let Some(qp) = self.func.rdma.qps.get_mut(&qpn) else {
                return;
            };
            if qp.rq.pi == qp.rq.ci {
                break;
            }
            let index = qp.rq.ci;
            qp.rq.ci = index.wrapping_add(1);
            self.rq_cqe(
                qpn,
                index,
                op::RECEIVE,
                wc::FLUSHED,
                CqeExtra::None,
                0,
                false,
                UdInfo::NONE,
                io,
            );
        }
    }

    /// Drops held requests (their QP is going away or failed).
    pub(super) fn nak_held(&mut self, held: VecDeque<Packet>) {
        for pkt in held {
            self.drop_request(pkt);
        }
    }

    /// Drops a request this device cannot take: it goes back to its requester as lost.
    fn drop_request(&mut self, pkt: Packet) {
        if let Body::Request { seq, req } = pkt.body {
            let body = Body::Lost { seq, req };
            self.send_back(pkt.src_port, pkt.dst_qpn, pkt.src_qpn, body);
        }
    }

    /// Answers request `seq` of `to`.
    fn respond(&mut self, to: &Packet, seq: u64, result: Result<Reply, Nak>) {
        if self.is_iwarp_qp(to.dst_qpn) {
            self.iw_respond(to, seq, result);
            return;
        }
        let body = Body::Response { seq, result };
        self.send_back(to.src_port, to.dst_qpn, to.src_qpn, body);
    }

    /// Sends `body` from our QP `qpn` back to QP `requester` behind `port`.
    pub(super) fn send_back(&mut self, port: PortId, qpn: u32, requester: u32, body: Body) {
        let Some(own) = self.port.clone() else {
            return;
        };
        let pkt = Packet {
            src_port: 0,
            src_qpn: qpn,
            dst_qpn: requester,
            body,
        };
        self.harness.stats.tx_packet(pkt.payload_len() as u64);
        own.send_response(port, pkt);
    }

    // --------------------------------------------------------------------------------------------
    // Fabric
    // --------------------------------------------------------------------------------------------

    /// Handles every packet the fabric has queued for this device, in order. Returns how many.
    pub fn run_fabric(&mut self, io: &mut Io<'_>) -> usize {
        let Some(port) = self.port.clone() else {
            return 0;
        };
        let inbox = port.take_inbox();
        let n = inbox.len();
        for pkt in inbox {
            self.harness.stats.rx_packet(pkt.payload_len() as u64);
            match pkt.body {
                Body::Request { seq, .. } => self.incoming(pkt, seq, io),
                Body::Response { .. } => self.response(pkt, io),
                Body::Lost { seq, req } => self.lose(pkt.dst_qpn, seq, req),
                Body::Datagram(d) => self.incoming_datagram(pkt.src_qpn, pkt.dst_qpn, d, io),
                Body::Stream {
                    conn,
                    seq,
                    cookie,
                    msg,
                } => self.iw_incoming(
                    pkt.src_port,
                    pkt.src_qpn,
                    pkt.dst_qpn,
                    conn,
                    seq,
                    cookie,
                    msg,
                    io,
                ),
            }
        }
        n
    }

    /// An incoming request.
    fn incoming(&mut self, pkt: Packet, seq: u64, io: &mut Io<'_>) {
        let qpn = pkt.dst_qpn;
        let ok = self.func.rdma.qps.get(&qpn).is_some_and(|q| {
            q.qp_type != QP_TYPE_UD
                && q.iw.is_none()
                && matches!(q.state, QpState::Rtr | QpState::Rts | QpState::Sqd)
        });
        if !ok {
            self.drop_request(pkt);
            return;
        }
        let Some(qp) = self.func.rdma.qps.get_mut(&qpn) else {
            return;
        };
        if !qp.held.is_empty() {
            if qp.held.len() >= MAX_HELD {
                self.respond(&pkt, seq, Err(Nak::RnrExceeded));
            } else {
                qp.held.push_back(pkt);
            }
            return;
        }
        if let Some(pkt) = self.execute_request(pkt, io) {
            if let Some(qp) = self.func.rdma.qps.get_mut(&qpn) {
                qp.held.push_back(pkt);
            }
        }
    }

    /// Retries held requests after receive WQEs were posted.
    fn drain_held(&mut self, qpn: u32, io: &mut Io<'_>) {
        loop {
            let Some(qp) = self.func.rdma.qps.get_mut(&qpn) else {
                return;
            };
            if !matches!(qp.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
                return;
            }
            let Some(pkt) = qp.held.pop_front() else {
                return;
            };
            if let Some(pkt) = self.execute_request(pkt, io) {
                if let Some(qp) = self.func.rdma.qps.get_mut(&qpn) {
                    qp.held.push_front(pkt);
                }
                return;
            }
        }
    }

    /// Executes a request on an able QP. Returns the packet back if it needs a receive WQE that
    /// is not there yet.
    pub(super) fn execute_request(&mut self, pkt: Packet, io: &mut Io<'_>) -> Option<Packet> {
        let qpn = pkt.dst_qpn;
        let Body::Request { seq, req } = &pkt.body else {
            return None;
        };
        let seq = *seq;
        let qp = self.func.rdma.qps.get(&qpn)?;
        let pdn = qp.pdn;
        let needs_rqe = matches!(
            req,
            Request::Send { .. } | Request::Write { imm: Some(_), .. }
        );
        if needs_rqe && qp.rq.pi == qp.rq.ci {
            return Some(pkt);
        }
        let result = match req {
            Request::Write {
                addr,
                rkey,
                data,
                imm,
                solicited,
            } => match self.remote_write(qpn, pdn, *addr, *rkey, data, io) {
                Ok(()) => match imm {
                    Some(imm) => self.consume_rqe(
                        qpn,
                        op::RECV_IMM,
                        &[],
                        CqeExtra::Imm(*imm),
                        data.len() as u32,
                        *solicited,
                        io,
                    ),
                    None => Ok(Reply::Ack),
                },
                Err(e) => Err(e),
            },
            Request::Send {
                data,
                imm,
                inv,
                solicited,
            } => {
                let (opcode, extra) = match (imm, inv) {
                    (Some(i), _) => (op::RSP_SEND_IMM, CqeExtra::Imm(*i)),
                    (None, Some(k)) => (op::RECV_INV, CqeExtra::InvRkey(*k)),
                    (None, None) => (op::RECEIVE, CqeExtra::None),
                };
                let inv_ok = match inv {
                    Some(k) => self.invalidate(*k, pdn, true).map_err(|_| wc::RECV_STAG),
                    None => Ok(()),
                };
                match inv_ok {
                    Ok(()) => self.consume_rqe(
                        qpn,
                        opcode,
                        data,
                        extra,
                        data.len() as u32,
                        *solicited,
                        io,
                    ),
                    Err(code) => {
                        // The RQE is consumed with the error.
                        self.consume_rqe_error(qpn, code, io);
                        Err(Nak::Remote(code))
                    }
                }
            }
            Request::Read { addr, rkey, len } => self.remote_read(qpn, pdn, *addr, *rkey, *len, io),
            Request::Atomic { addr, rkey, op } => {
                self.remote_atomic(qpn, pdn, *addr, *rkey, *op, io)
            }
        };
        if let Some(qp) = self.func.rdma.qps.get_mut(&qpn) {
            qp.rq_psn = (qp.rq_psn + 1) & 0xff_ffff;
        }
        self.respond(&pkt, seq, result);
        None
    }

    /// A remote access error detected by the responder: AEQE type 2 and QP to ERROR.
    fn remote_access_error(&mut self, qpn: u32, e: AccessErr, io: &mut Io<'_>) -> Nak {
        if self.warned.dp_error() {
            log::warn!("QP {qpn}: remote access refused ({e:?}); QP to ERROR");
        }
        let ev = AeqEvent {
            ty: AE_ACCESS,
            subtype: 0,
            data0: qpn,
            data1: 0,
        };
        if let Err(err) = self.post_aeqe(ev, io) {
            log::warn!("QP {qpn}: AEQE dropped: {err}");
        }
        self.enter_error_with(qpn, Some(e.remote()), io);
        Nak::Remote(e.remote())
    }

    fn remote_write(
        &mut self,
        qpn: u32,
        pdn: u32,
        addr: u64,
        rkey: u32,
        data: &[u8],
        io: &mut Io<'_>,
    ) -> Result<(), Nak> {
        // A zero-length RDMA Write touches no memory: its key and address are not checked
        // (InfiniBand, and what rsockets' control messages rely on).
        if data.is_empty() {
            return Ok(());
        }
        let pieces = self.mr_access(
            rkey,
            pdn,
            addr,
            data.len() as u64,
            access::REMOTE_WRITE,
            io.mem,
        );
        match pieces {
            Ok(p) => {
                trace_data(qpn, "WRITE in", addr, rkey, &p, data);
                write_pieces(io.mem, &p, data)
                    .map_err(|()| self.remote_access_error(qpn, AccessErr::Bounds, io))
            }
            Err(e) => Err(self.remote_access_error(qpn, e, io)),
        }
    }

    fn remote_read(
        &mut self,
        qpn: u32,
        pdn: u32,
        addr: u64,
        rkey: u32,
        len: u32,
        io: &mut Io<'_>,
    ) -> Result<Reply, Nak> {
        // Nor is that of a zero-length RDMA Read.
        if len == 0 {
            return Ok(Reply::Read(Vec::new()));
        }
        let pieces = self.mr_access(rkey, pdn, addr, u64::from(len), access::REMOTE_READ, io.mem);
        match pieces {
            Ok(p) => {
                let mut data = Vec::new();
                match read_pieces(io.mem, &p, &mut data) {
                    Ok(()) => {
                        trace_data(qpn, "READ out", addr, rkey, &p, &data);
                        Ok(Reply::Read(data))
                    }
                    Err(()) => Err(self.remote_access_error(qpn, AccessErr::Bounds, io)),
                }
            }
            Err(e) => Err(self.remote_access_error(qpn, e, io)),
        }
    }

    fn remote_atomic(
        &mut self,
        qpn: u32,
        pdn: u32,
        addr: u64,
        rkey: u32,
        aop: AtomicOp,
        io: &mut Io<'_>,
    ) -> Result<Reply, Nak> {
        if addr % 8 != 0 {
            return Err(self.remote_access_error(qpn, AccessErr::Bounds, io));
        }
        let pieces = match self.mr_access(rkey, pdn, addr, 8, access::REMOTE_ATOMIC, io.mem) {
            Ok(p) => p,
            Err(e) => return Err(self.remote_access_error(qpn, e, io)),
        };
        let mut old = Vec::new();
        if read_pieces(io.mem, &pieces, &mut old).is_err() || old.len() != 8 {
            return Err(self.remote_access_error(qpn, AccessErr::Bounds, io));
        }
        let old = u64::from_le_bytes([
            old[0], old[1], old[2], old[3], old[4], old[5], old[6], old[7],
        ]);
        let new = match aop {
            AtomicOp::Cas { compare, swap } => (old == compare).then_some(swap),
            AtomicOp::Faa { add } => Some(old.wrapping_add(add)),
        };
        if let Some(new) = new {
            if write_pieces(io.mem, &pieces, &new.to_le_bytes()).is_err() {
                return Err(self.remote_access_error(qpn, AccessErr::Bounds, io));
            }
        }
        Ok(Reply::Atomic(old))
    }

    /// Reads and checks the RQE at the RQ's CI. `Err(code)` for a format error.
    fn fetch_rqe(&self, qpn: u32, io: &Io<'_>) -> Option<Result<Rqe, u8>> {
        let qp = self.func.rdma.qps.get(&qpn)?;
        let ci = qp.rq.ci;
        let off = u64::from(u32::from(ci) & (qp.rq.depth - 1)) * RQE_SIZE as u64;
        let mut b = [0u8; RQE_SIZE];
        if qp.rq.buf.read(off, &mut b, io.mem).is_err() {
            return Some(Err(wc::RECV_FORMAT));
        }
        let rqe = Rqe::decode(&b);
        if rqe.index != ci.wrapping_add(1) || rqe.qpn != qpn {
            return Some(Err(wc::RECV_FORMAT));
        }
        Some(Ok(rqe))
    }

    /// Consumes the RQE at the CI with error status `code`, in a CQE carrying `info`; returns
    /// its index, `None` if the QP does not exist.
    fn fail_rqe(&mut self, qpn: u32, code: u8, info: UdInfo, io: &mut Io<'_>) -> Option<u16> {
        let qp = self.func.rdma.qps.get_mut(&qpn)?;
        let index = qp.rq.ci;
        qp.rq.ci = index.wrapping_add(1);
        self.rq_cqe(
            qpn,
            index,
            op::RECEIVE,
            code,
            CqeExtra::None,
            0,
            false,
            info,
            io,
        );
        Some(index)
    }

    /// Consumes the RQE at the CI with an error status and moves the QP to ERROR.
    fn consume_rqe_error(&mut self, qpn: u32, code: u8, io: &mut Io<'_>) {
        let Some(index) = self.fail_rqe(qpn, code, UdInfo::NONE, io) else {
            return;
        };
        if self.warned.dp_error() {
            log::warn!(
                "QP {qpn}: receive WQE at {index:#x} failed with status {code}; QP to ERROR"
            );
        }
        if self.is_iwarp_qp(qpn) {
            self.qp_event(qpn, super::AE_RQ_ERROR, io);
        }
        self.enter_error_with(qpn, Some(code), io);
    }

    /// Consumes the RQE at the CI for an incoming message: scatters `data` into its buffer and
    /// completes it.
    #[allow(clippy::too_many_arguments)]
    fn consume_rqe(
        &mut self,
        qpn: u32,
        opcode: u8,
        data: &[u8],
        extra: CqeExtra,
        byte_len: u32,
        solicited: bool,
        io: &mut Io<'_>,
    ) -> Result<Reply, Nak> {
        let rqe = match self.fetch_rqe(qpn, io) {
            Some(Ok(r)) => r,
            Some(Err(code)) => {
                self.consume_rqe_error(qpn, code, io);
                return Err(Nak::Remote(code));
            }
            None => return Err(Nak::NoQp),
        };
        let pdn = self.func.rdma.qps.get(&qpn).map_or(0, |q| q.pdn);
        if !data.is_empty() {
            if data.len() as u64 > u64::from(rqe.sge.len) {
                self.consume_rqe_error(qpn, wc::RECV_BOUNDS, io);
                return Err(Nak::Remote(wc::RECV_BOUNDS));
            }
            let pieces = self.mr_access(
                rqe.sge.key,
                pdn,
                rqe.sge.addr,
                data.len() as u64,
                access::LOCAL_WRITE,
                io.mem,
            );
            let written = match pieces {
                Ok(p) => write_pieces(io.mem, &p, data).map_err(|()| wc::RECV_BOUNDS),
                Err(e) => Err(e.remote()),
            };
            if let Err(code) = written {
                self.consume_rqe_error(qpn, code, io);
                return Err(Nak::Remote(code));
            }
        }
        let Some(qp) = self.func.rdma.qps.get_mut(&qpn) else {
            return Err(Nak::NoQp);
        };
        let index = qp.rq.ci;
        qp.rq.ci = index.wrapping_add(1);
        self.rq_cqe(
            qpn,
            index,
            opcode,
            wc::SUCCESS,
            extra,
            byte_len,
            solicited,
            UdInfo::NONE,
            io,
        );
        Ok(Reply::Ack)
    }

    /// A response to one of our requests.
    pub(super) fn response(&mut self, pkt: Packet, io: &mut Io<'_>) {
        let Body::Response { seq, result } = pkt.body else {
            return;
        };
        let qpn = pkt.dst_qpn;
        let Some(qp) = self.func.rdma.qps.get_mut(&qpn) else {
            return;
        };
        let iwarp = qp.iw.is_some();
        let backlog = qp
            .iw
            .as_ref()
            .and_then(|i| i.conn.as_ref())
            .is_some_and(|c| !c.backlog.is_empty());
        if qp.lost.is_empty() && !backlog {
            qp.retries = 0;
        }
        let Some(idx) = qp.outstanding.iter().position(|p| p.seq == Some(seq)) else {
            // Flushed already, or the QP was reset.
            return;
        };
        if qp.outstanding[idx].status.is_some() {
            return;
        }
        let p = qp.outstanding[idx].clone();
        let pdn = qp.pdn;
        let status = match result {
            Ok(Reply::Ack) => wc::SUCCESS,
            // iWARP: a Read Response is a tagged write into the sink, which must grant remote
            // write.
            Ok(Reply::Read(data)) if iwarp => {
                let need = access::LOCAL_WRITE | access::REMOTE_WRITE;
                let status = self.deliver_sink(qpn, pdn, &p, &data, need, io);
                if status == wc::SEND_ACCESS && self.warned.dp_error() {
                    log::warn!(
                        "QP {qpn}: RDMA Read sink {:#x} does not grant remote write, which an \
                         iWARP Read Response (a tagged write) needs: status {status}",
                        p.sink.map_or(0, |s| s.2)
                    );
                }
                status
            }
            Ok(Reply::Read(data)) => {
                self.deliver_sink(qpn, pdn, &p, &data, access::LOCAL_WRITE, io)
            }
            Ok(Reply::Atomic(v)) => {
                self.deliver_sink(qpn, pdn, &p, &v.to_le_bytes(), access::LOCAL_WRITE, io)
            }
            Err(Nak::NoQp) | Err(Nak::RnrExceeded) => {
                if self.warned.dp_error() {
                    log::warn!(
                        "QP {qpn}: request {seq} refused by the destination (its QP went away, \
                         or RNR queue full): retry exceeded"
                    );
                }
                wc::RETRY_EXCEEDED
            }
            Err(Nak::Remote(code)) => code,
        };
        let status = match (status, p.inv_after) {
            (wc::SUCCESS, Some(stag)) => match self.invalidate(stag, pdn, false) {
                Ok(()) => wc::SUCCESS,
                Err(s) => s,
            },
            (s, _) => s,
        };
        if let Some(qp) = self.func.rdma.qps.get_mut(&qpn) {
            if let Some(e) = qp.outstanding.get_mut(idx) {
                e.status = Some(status);
            }
        }
        self.drain_completions(qpn, io);
        self.process_sq(qpn, io);
    }

    /// Writes READ data or an atomic's original value into the local sink.
    fn deliver_sink(
        &mut self,
        qpn: u32,
        pdn: u32,
        p: &Pending,
        data: &[u8],
        need: u8,
        io: &mut Io<'_>,
    ) -> u8 {
        let Some((addr, len, lkey)) = p.sink else {
            return wc::GENERAL;
        };
        if data.len() as u64 > u64::from(len) {
            return wc::SEND_BOUNDS;
        }
        match self.mr_access(lkey, pdn, addr, data.len() as u64, need, io.mem) {
            Ok(pieces) => {
                trace_data(qpn, "sink in", addr, lkey, &pieces, data);
                match write_pieces(io.mem, &pieces, data) {
                    Ok(()) => wc::SUCCESS,
                    Err(()) => wc::SEND_BOUNDS,
                }
            }
            Err(e) => e.local(),
        }
    }
}
