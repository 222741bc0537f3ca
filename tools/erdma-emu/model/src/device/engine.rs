// SPDX-License-Identifier: GPL-2.0

//! The RoCEv2 data path (erdma_rs_hw 4.4, §5, §6, §7.2): doorbells, the requester (SQ WQEs),
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
//! A message travels in segments of [`crate::fabric::SEGMENT`] bytes, gathered from the
//! sender's memory one at a time and each answered on its own; the WQE completes when every
//! segment is answered. What a QP has in flight is bounded by [`QP_WINDOW`], what the
//! function has by [`PORT_WINDOW`]: a segment or WQE that does not fit waits for answers
//! (back-pressure), nothing is dropped.
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
//!
//! # Parts
//!
//! * `doorbells`: doorbell values, naming their queue, and CQ arms.
//! * `requester`: SQ WQEs to requests and local operations, retransmission timers, responses;
//!   requests and answers travel by the QP's transport (`device::transport`: RoCEv2 packets or
//!   the iWARP stream).
//! * `responder`: incoming RC requests, held requests, RQE consumption.
//! * `ud`: UD datagrams, out and in.
//! * `receive`: the RQE at a QP's consumer index, and scattering a message into its buffer.
//! * `mr`: MR and key checks, fast-register and invalidate, data across guest-memory pieces.
//! * `completions`: CQEs and CQ events, SQ-ordered completion, ERROR and flushing.
//! * here: the parts' context, [`DataPath`] (what of the device they may use, borrowed part by
//!   part: the object tables, the wire, the keys' settings, event posting, UD addressing, the
//!   clock), the fabric inbox ([`Device::run_fabric`]) that feeds the requester, the responder,
//!   UD and the iWARP streams, and the limits the parts share. The parts are methods of the
//!   context, not of the device; the device lends it ([`Device::data_path`]) at its entry
//!   points (doorbells, the fabric, timers, commands).

mod completions;
mod doorbells;
mod mr;
mod receive;
mod requester;
mod responder;
mod ud;

use std::sync::Arc;
use std::time::Duration;

use super::events::Events;
use super::objects::Rdma;
use super::{Device, WarnOnce};
use crate::caps::Caps;
use crate::clock::Clock;
use crate::fabric::{Body, Packet, Port};
use crate::io::Io;
use crate::mtt::Piece;
use crate::stats::{TrafficCounters, UdDrops};
use crate::wire::AeqEvent;
use ud::RoceAddressing;

/// Largest message the model moves (bytes): larger ones complete with status 1. Messages move
/// in segments of [`crate::fabric::SEGMENT`] bytes, read from the sender's memory and written
/// into the receiver's a segment at a time, never whole.
pub const MAX_MESSAGE: u64 = 1 << 30;
/// How long a requester waits for an answer before it retransmits its lost requests (an
/// adapter's local ACK timeout; erdma takes none from the driver, §3.5).
pub const RETRY_TIMEOUT: Duration = Duration::from_millis(250);
/// Retransmissions before a lost request completes with "retry exceeded" (the largest retry
/// count of the verbs).
pub const RETRY_COUNT: u32 = 7;
/// Most requests a responder QP holds while waiting for receive WQEs.
pub const MAX_HELD: usize = 4096;
/// Most bytes (payload plus [`crate::fabric::PACKET_COST`] each) all QPs of a function hold
/// for receive WQEs; beyond, requests are refused as when [`MAX_HELD`] is reached (RNR retry
/// exceeded for their requesters).
pub const MAX_HELD_BYTES: u64 = 16 << 20;
/// Bytes one QP may have in flight: the payload of its request segments sent and not answered,
/// the data its READs asked for and have not received, and [`PENDING_COST`] for every WQE not
/// yet completed. A QP whose next segment does not fit stops taking WQEs until answers come
/// (back-pressure, as an adapter's outstanding-request window).
pub const QP_WINDOW: u64 = 1 << 20;
/// Bytes all QPs of a function may have in flight together ([`QP_WINDOW`]): the bound on what
/// one adapter makes the fabric, its peers and itself buffer.
pub const PORT_WINDOW: u64 = 16 << 20;
/// What an outstanding WQE costs of the windows besides its data (its bookkeeping).
pub const PENDING_COST: u64 = 256;
/// Most bytes (payload plus [`crate::fabric::PACKET_COST`] each) an iWARP stream keeps for
/// retransmission; the windows keep legal traffic far below it (its own requests, at most
/// [`QP_WINDOW`], and the peer's answers to its requests, at most the peer's). A stream that
/// would exceed it ends (retry exceeded).
pub const MAX_BACKLOG_BYTES: u64 = 4 * QP_WINDOW;
/// Largest UD payload before any CONF_MTU (the largest IB MTU).
pub const UD_DEFAULT_MTU: u32 = 4096;

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

/// What the data-path engines (requester, responder, UD, completions, the transports and the
/// iWARP streams) work with, borrowed from the device part by part: the object tables, the
/// wire ([`Wire`]: the fabric port and the traffic counters), event posting ([`Events`]), the
/// keys' settings, RoCEv2 addressing ([`RoceAddressing`]), the clock and the log's rate
/// limits. Nothing else of the device (its registers, command queue, doorbell pages, PCI face
/// or control state) is in reach.
pub(in crate::device) struct DataPath<'a> {
    /// QPs, CQs, MRs and the retransmission timers.
    pub rdma: &'a mut Rdma,
    /// Event posting (CEQEs, AEQEs).
    pub events: Events<'a>,
    /// The fabric port and the traffic counters.
    pub wire: Wire<'a>,
    /// UD datagrams dropped, by cause.
    pub ud_drops: &'a mut UdDrops,
    /// The function's capabilities (atomics, the local DMA lkey).
    pub caps: &'a Caps,
    /// The GID table, the address handles and the MTU.
    pub roce: RoceAddressing<'a>,
    /// The clock retransmission timers run on.
    pub clock: &'a dyn Clock,
    /// Rate limits of the data path's warnings.
    pub warned: &'a mut WarnOnce,
}

/// What the data path's messages travel through: the fabric port and the traffic counters.
/// Each transport sends its own kind of message through it (`transport`, `iwarp`).
pub(in crate::device) struct Wire<'a> {
    /// The fabric attachment (`None`: nothing is delivered; requests are lost).
    pub port: Option<&'a Arc<Port>>,
    /// Traffic counters (GET_STATS).
    pub stats: &'a mut TrafficCounters,
}

impl Device {
    /// The data path's view of the device.
    pub(in crate::device) fn data_path(&mut self) -> DataPath<'_> {
        DataPath {
            rdma: &mut self.func.rdma,
            events: Events::of(&mut self.func.queues),
            wire: Wire {
                port: self.port.as_ref(),
                stats: &mut self.harness.stats,
            },
            ud_drops: &mut self.harness.ud_drops,
            caps: &self.config.caps,
            roce: RoceAddressing {
                gids: &self.func.gids,
                ahs: &self.func.ahs,
                mtu: self.func.mtu,
            },
            clock: &*self.clock,
            warned: &mut self.warned,
        }
    }

    /// Handles the packets the fabric has queued for this device, in order, at most
    /// [`crate::fabric::INBOX_BATCH`] (bounded work under the device lock: with more queued,
    /// [`Device::fabric_pending`] says so and the caller comes back). Returns how many.
    pub fn run_fabric(&mut self, io: &mut Io<'_>) -> usize {
        let Some(port) = self.port.clone() else {
            return 0;
        };
        let inbox = port.take_inbox();
        let n = inbox.len();
        let mut dp = self.data_path();
        for pkt in inbox {
            dp.receive(pkt, io);
        }
        n
    }
}

impl Device {
    /// Packets waiting in this device's fabric inbox.
    pub fn fabric_pending(&self) -> usize {
        self.port.as_ref().map_or(0, |p| p.pending())
    }

    /// Bytes of the port's window ([`PORT_WINDOW`]) the function's QPs hold now.
    pub fn inflight_bytes(&self) -> u64 {
        self.func.rdma.inflight
    }

    /// Bytes the function's QPs hold for receive WQEs now ([`MAX_HELD_BYTES`]).
    pub fn held_bytes(&self) -> u64 {
        self.func.rdma.held_bytes
    }
}

impl DataPath<'_> {
    /// Gives back `bytes` of QP `qpn`'s and the port's windows.
    pub(in crate::device) fn release(&mut self, qpn: u32, bytes: u64) {
        let Some(qp) = self.rdma.qps.get_mut(&qpn) else {
            return;
        };
        let bytes = bytes.min(qp.inflight);
        qp.inflight -= bytes;
        self.rdma.inflight = self.rdma.inflight.saturating_sub(bytes);
    }

    /// Takes `bytes` of QP `qpn`'s and the port's windows if both have room.
    pub(in crate::device) fn admit(&mut self, qpn: u32, bytes: u64) -> bool {
        let port_room = self.rdma.inflight.saturating_add(bytes) <= PORT_WINDOW;
        let Some(qp) = self.rdma.qps.get_mut(&qpn) else {
            return false;
        };
        if qp.inflight.saturating_add(bytes) > QP_WINDOW {
            return false;
        }
        if !port_room {
            self.rdma.waiting.insert(qpn);
            return false;
        }
        qp.inflight += bytes;
        self.rdma.inflight += bytes;
        true
    }

    /// Lets the QPs that waited for room in the port's window go on (each once).
    pub(in crate::device) fn resume_waiting(&mut self, io: &mut Io<'_>) {
        if self.rdma.waiting.is_empty() || self.rdma.inflight >= PORT_WINDOW {
            return;
        }
        let waiting = std::mem::take(&mut self.rdma.waiting);
        for qpn in waiting {
            if self.rdma.inflight >= PORT_WINDOW {
                self.rdma.waiting.insert(qpn);
                continue;
            }
            self.process_sq(qpn, io);
        }
    }

    /// Posts an AEQE about QP `qpn`.
    pub(in crate::device) fn qp_event(&mut self, qpn: u32, ty: u8, io: &mut Io<'_>) {
        let ev = AeqEvent {
            ty,
            subtype: 0,
            data0: qpn,
            data1: 0,
        };
        if let Err(e) = self.events.post_aeqe(ev, io) {
            if self.warned.event_drop() {
                log::warn!("QP {qpn}: AEQE type {ty} dropped: {e}");
            }
        }
    }

    /// One packet from the fabric, to the requester, the responder, UD or an iWARP stream.
    fn receive(&mut self, pkt: Packet, io: &mut Io<'_>) {
        self.wire.stats.rx_packet(pkt.payload_len() as u64);
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::device::objects::fixtures::{cq_request, memory, qp_request};
    use crate::device::Protocol;
    use crate::roce::{AhTable, GidTable};
    use crate::testing::RecordingIrqs;
    use crate::wire::{self, wc, DataCqe, QpState};

    /// The engines need nothing of a device but what the context lends them: here, a QP's
    /// move to ERROR flushes its posted receive WQEs into its CQ with no device at all.
    #[test]
    fn the_engines_run_on_the_parts_they_borrow() {
        let (caps, mut mem) = (Caps::default(), memory());
        let mut rdma = Rdma::default();
        assert!(rdma.create_cq(cq_request(1), &caps, |_| true, &mem).is_ok());
        let qp = rdma.create_qp(qp_request(5, 1), &caps, Protocol::RoceV2, &mem);
        assert!(qp.is_ok());
        if let Some(qp) = rdma.qps.get_mut(&5) {
            qp.state = QpState::Rts;
            qp.rq.pi = 2;
        }
        let (mut stats, mut drops, mut warned) = (
            TrafficCounters::default(),
            UdDrops::default(),
            WarnOnce::default(),
        );
        let (gids, ahs, clock) = (GidTable::new(4), AhTable::new(4), ManualClock::new());
        let mut no_queues = None;
        let mut dp = DataPath {
            rdma: &mut rdma,
            events: Events::of(&mut no_queues),
            wire: Wire {
                port: None,
                stats: &mut stats,
            },
            ud_drops: &mut drops,
            caps: &caps,
            roce: RoceAddressing {
                gids: &gids,
                ahs: &ahs,
                mtu: 0,
            },
            clock: &clock,
            warned: &mut warned,
        };
        let mut irqs = RecordingIrqs::default();
        let mut io = Io::new(&mut mem, &mut irqs);
        dp.enter_error(5, &mut io);
        assert_eq!(rdma.qps[&5].state, QpState::Error);
        assert_eq!(rdma.qps[&5].rq.ci, 2, "both receive WQEs flushed");
        assert_eq!(rdma.cqs[&1].pi, 2);
        for (i, cqe) in mem.bytes().chunks_exact(wire::CQE_SIZE).take(2).enumerate() {
            let cqe = DataCqe::decode(cqe.try_into().expect("one CQE"));
            assert_eq!(
                (cqe.qpn, cqe.wqe_index, cqe.status),
                (5, i as u32, wc::FLUSHED)
            );
        }
    }
}
