// SPDX-License-Identifier: GPL-2.0

//! The iWARP RC engine (erdma_rs_hw 3.5 MODIFY_QP iWARP layout, §7.1, §10.14, §10.20).
//!
//! On an iWARP function (DEV_PROTO 0) the driver's own MPA connection manager sets up a TCP
//! connection over the guest's kernel sockets and hands it to the adapter with MODIFY_QP(RTS):
//! the 4-tuple, the peer's cookie (the cookie the peer's CREATE_QP returned, which its MPA
//! frame carried), the congestion-control algorithm and the TCP sequence numbers to continue
//! with. A QP's own cookie is 32 random bits the adapter chose at CREATE_QP (`iwarp_qp`'s
//! `Cookies`): unique among the function's QPs, never 0, and not something a guest can
//! predict. From then on the adapter owns the byte stream. The model does not put TCP on a
//! wire; it keeps the stream's sequence numbers and moves the RC messages through the
//! [`crate::fabric::Fabric`] by 4-tuple and cookies. Everything the
//! RoCEv2 RC engine does (`engine`) is reused: WQEs, SGE checks, the responder, CQEs, flushing
//! and REFLUSH. What differs:
//!
//! # States and MODIFY_QP
//!
//! * A new QP is IDLE. Accepted transitions (judged from the state the driver last set, because
//!   the driver learns of the adapter's own moves only through the AEQ): IDLE → RTR, IDLE/RTR →
//!   RTS (binds, below), RTS → CLOSING/TERMINATE/ERROR and IDLE/RTR → ERROR (the "stop" form)
//!   and CLOSING → ERROR. Anything else fails with [`Status::InvalidParam`] and changes nothing.
//!   Only the transition to RTS reads past word @8 ([`IwarpConnection`]).
//! * Receives may be posted in IDLE and RTR; SQ doorbells rung before RTS are kept and processed
//!   at RTS.
//! * A stop of a QP whose stream is live sends a Terminate to the peer (whose QP goes to ERROR
//!   with an AEQE), unbinds, and flushes the QP's work like an ERROR transition (status 15,
//!   REFLUSH for later WQEs); the QP reports the state the driver asked for. A stop of a QP the
//!   adapter already moved to ERROR (a Terminate from its peer, a broken stream, retry
//!   exceeded) only records the driver's view; such a QP stays in ERROR.
//!
//! # Binding
//!
//! At RTS the QP binds its 4-tuple on the fabric with its own cookie and the peer cookie it was
//! given ([`crate::fabric::Port::bind`], a [`crate::fabric::Binding`]). Messages go only to the
//! QP whose binding names the sender back: the mirrored tuple, its own cookie the sender's peer
//! cookie, its peer cookie the sender's own cookie. So a QP of another guest that binds a
//! victim's tuple first (the addresses and ports are visible or guessable) takes nothing away:
//! the victim still binds, the stream still flows between the two QPs that exchanged the
//! cookies, and the intruder, which knows neither random cookie, neither receives the stream
//! nor injects into it (its messages are lost, like those of a peer not bound yet). The RTS
//! fails with [`Status::Exists`] only if the QP holds a binding already, if another QP holds
//! the same tuple with the same two cookies, or if the function holds
//! [`crate::fabric::MAX_CLAIMS`] bindings on the tuple already. The binding lasts while the
//! stream is live: a stop, a Terminate (sent or received), a broken stream, retry exceeded,
//! DESTROY_QP, DEV_CTRL.RESET and a client's disconnect remove it, and only it (the last three
//! also send a Terminate to a live peer). A device without a fabric binds nothing: its messages
//! are lost.
//!
//! Compat mode (erdma_rs_hw 7.3): a cookie field with [`COMPAT_COOKIE`] names the peer's QPN
//! (bits 19:0), as the peer only knows that; the QP then binds with its own QPN and the same bit
//! as its own cookie, so the two ends that named each other's QPNs on mirrored tuples pair up.
//! Such a stream is as guessable as a QPN: a guest that binds the same tuple with the same two
//! "cookies" first makes the victim's RTS fail ([`Status::Exists`]) instead of joining the
//! stream unnoticed, and on a real network the addresses in the tuple are the provider's to
//! police.
//!
//! # The byte stream
//!
//! Each message occupies [`StreamMsg::stream_len`] bytes of its sender's sequence space (one
//! FPDU: the 2-byte MPA length, a 14-byte tagged or 18-byte untagged DDP/RDMAP header, the
//! payload or fixed body, padded to 4). It carries the sender's SND.NXT, which then advances
//! (wrapping, as TCP does). The receiver takes it only when its sequence number equals the
//! receiver's RCV.NXT, and advances RCV.NXT. A mismatch, or a peer cookie that is not the
//! receiving QP's cookie (the fabric routes by the cookies, so only a sender whose message
//! disagrees with its own binding could get there), breaks the stream: the receiver logs it,
//! posts AEQE type 0, sends a Terminate (the peer's oldest unanswered request completes with
//! 1, general error) and goes to ERROR. This is how the model catches a passive side that did
//! not reserve 28 + private-data bytes of sequence space for its MPA reply (§10.14). A
//! Terminate is taken whatever its sequence number (it ends the stream either way).
//!
//! TCP acknowledgements are not stream messages: a Send or Write is acknowledged with a
//! [`Body::Response`] as on RoCEv2. Read Responses and atomic responses are stream messages of
//! the responder.
//!
//! A message the fabric cannot deliver (no binding answers it: the passive side may send
//! before the active side reached RTS, or the sender was given a wrong peer cookie; or the
//! inbox is full) is lost: it waits, with every later message of the stream behind it, for
//! the QP's retransmission timer ([`RETRY_TIMEOUT`]), which sends them again in order with
//! their sequence numbers. After [`RETRY_COUNT`] retransmissions the oldest unanswered request
//! completes with 16 (retry exceeded), the QP posts AEQE type 0 and goes to ERROR.
//!
//! # Errors end the connection
//!
//! There is no RNR on iWARP: a Send (or Write with Immediate) that finds no receive WQE is
//! fatal. Every responder-side error ends the stream with a Terminate:
//!
//! | Responder finds | Responder | Requester's oldest unanswered request |
//! |---|---|---|
//! | bad rkey, bounds, rights, PD (Write, Read, atomic) | AEQE 2, ERROR | 3, 4, 5, 6 |
//! | no receive WQE posted | AEQE 1, ERROR | 2 (receive WQE error) |
//! | receive WQE malformed, too small, its SGE refused | RQE completes with 2..6, AEQE 1, ERROR | the same code |
//! | wrong peer cookie (if it gets there), out of sequence | AEQE 0, ERROR | 1 |
//!
//! The requester gets AEQE type 0 (QP fatal: the upstream driver reports every AEQE but the CQ
//! error as IB_EVENT_QP_FATAL) and goes to ERROR; its other work is flushed (15). A requester-
//! side error (a WQE completing with an error status) also ends the stream: the peer gets a
//! Terminate without a status (its work is flushed) and AEQE type 0.
//!
//! An RDMA Read Response is a tagged write into the requester's sink: the sink's MR must grant
//! remote write (besides local write for the lkey), checked when the response arrives. If it
//! does not, the Read completes with 12 (local access-rights violation: the requester's own MR
//! lacks a right) and the connection is terminated. Atomics need the ATOMIC capability at the
//! requester (else 8, like any opcode the adapter does not execute).

use std::net::Ipv4Addr;
use std::time::Duration;

use super::engine::{DataPath, Wire};
use super::iwarp_qp::{Backlog, IwConn};
use super::objects::Qp;
use super::{Device, RETRY_COUNT, RETRY_TIMEOUT};
use crate::cmdq::{Request as CmdRequest, Status};
use crate::fabric::{Binding, Body, Conn, Nak, Packet, PortId, Refused, Reply, Request, StreamMsg};
use crate::io::Io;
use crate::wire::{
    wc, IwarpConnection, IwarpState, ModifyQpIwarp, QpState, COMPAT_COOKIE, COMPAT_QPN_MASK,
};

/// AE type: QP fatal (what the requester of a terminated stream, and a broken stream, post).
pub const AE_QP_FATAL: u8 = 0;
/// AE type: QP RQ error (a responder without a usable receive WQE).
pub const AE_RQ_ERROR: u8 = 1;

/// What a test or the control language sees of an iWARP QP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IwarpQpInfo {
    /// The adapter's state.
    pub state: IwarpState,
    /// The 4-tuple handed over at RTS.
    pub conn: Option<Conn>,
    /// Whether the stream is live (bound).
    pub live: bool,
    /// SND.NXT.
    pub snd_nxt: u32,
    /// RCV.NXT.
    pub rcv_nxt: u32,
    /// The peer cookie.
    pub cookie: u32,
    /// This QP's own cookie (CREATE_QP's reply).
    pub own_cookie: u32,
    /// The congestion-control algorithm.
    pub cc: u8,
    /// Messages waiting for retransmission.
    pub backlog: usize,
}

/// The engine state an iWARP state behaves like: IDLE as INIT (receives may be posted), RTR,
/// RTS, and every stopped state as ERROR (flushing, REFLUSH).
fn engine_state(s: IwarpState) -> QpState {
    match s {
        IwarpState::Idle => QpState::Init,
        IwarpState::Rtr => QpState::Rtr,
        IwarpState::Rts => QpState::Rts,
        IwarpState::Closing | IwarpState::Terminate | IwarpState::Error => QpState::Error,
    }
}

/// Message `msg` of QP `qpn` at `seq` of the stream of connection `tuple`, for the peer QP whose
/// cookie is `cookie`.
fn stream_packet(qpn: u32, tuple: Conn, cookie: u32, seq: u32, msg: StreamMsg) -> Packet {
    Packet {
        src_port: 0,
        src_qpn: qpn,
        // Filled in by the fabric: the QP whose binding answers the sender's.
        dst_qpn: 0,
        body: Body::Stream {
            conn: tuple,
            seq,
            cookie,
            msg,
        },
    }
}

/// iWARP stream messages travel by 4-tuple.
impl Wire<'_> {
    /// Hands one stream message of QP `qpn` on connection `c` to the fabric; gives it back if
    /// nobody takes it.
    fn transmit_stream(
        &mut self,
        qpn: u32,
        c: &IwConn,
        seq: u32,
        msg: StreamMsg,
    ) -> Result<(), StreamMsg> {
        let (tuple, cookie) = (c.tuple, c.cookie);
        let Some(port) = self.port else {
            return Err(msg);
        };
        let bytes = msg.payload_len() as u64;
        match port.send_stream(tuple, stream_packet(qpn, tuple, cookie, seq, msg)) {
            Ok(()) => {
                self.stats.tx_packet(bytes);
                Ok(())
            }
            Err(Refused { packet, .. }) => match packet.body {
                Body::Stream { msg, .. } => Err(msg),
                _ => unreachable!("the fabric hands back the packet it was given"),
            },
        }
    }
}

/// The live connection of `qp`, if it is an iWARP QP with one.
fn live_conn(qp: &mut Qp) -> Option<&mut IwConn> {
    qp.iw
        .as_mut()
        .and_then(|i| i.conn.as_mut())
        .filter(|c| c.live)
}

/// Puts `msg` on the stream of `qp`: it takes the next sequence numbers; it is sent now, or
/// kept for retransmission behind earlier undelivered messages. Dropped if the stream is not
/// live. Returns whether it was lost now (then the QP's retransmission timer must run).
fn stream_send(qp: &mut Qp, msg: StreamMsg, wire: &mut Wire<'_>) -> bool {
    let qpn = qp.qpn;
    let Some(c) = live_conn(qp) else {
        log::debug!("QP {qpn}: iWARP message on a stream that ended, dropped");
        return false;
    };
    let seq = c.snd_nxt;
    c.snd_nxt = seq.wrapping_add(msg.stream_len());
    if !c.backlog.is_empty() {
        // An overflow gives the stream up: the timer, due at once, ends it.
        return !c.backlog.push_back((seq, msg));
    }
    match wire.transmit_stream(qpn, c, seq, msg) {
        Ok(()) => false,
        Err(msg) => {
            c.backlog.push_back((seq, msg));
            true
        }
    }
}

/// What an iWARP QP's retransmission timer does.
#[derive(Debug)]
enum StreamTimer {
    /// Nothing undelivered, or the stream is not sending (not RTS, or ended: the backlog is
    /// dropped).
    Nothing,
    /// [`RETRY_COUNT`] retransmissions of the message at `first` on `tuple` went undelivered:
    /// the connection is given up; `victim`: an unanswered request completes with "retry
    /// exceeded" (else the QP goes to ERROR with everything flushed).
    Exceeded {
        first: u32,
        tuple: Conn,
        victim: bool,
    },
    /// Send the backlog again.
    Resend,
}

/// The retransmission timer of `qp` fired: decides, and counts the retransmission.
fn stream_timer(qp: &mut Qp) -> StreamTimer {
    let rts = qp.state == QpState::Rts;
    let retries = qp.retries;
    let Some(c) = qp.iw.as_mut().and_then(|i| i.conn.as_mut()) else {
        return StreamTimer::Nothing;
    };
    if !rts || !c.live {
        c.backlog.clear();
        return StreamTimer::Nothing;
    }
    let Some(&(first, _)) = c.backlog.front() else {
        return StreamTimer::Nothing;
    };
    if retries >= RETRY_COUNT || c.backlog.overflowed {
        let tuple = c.tuple;
        qp.retries = 0;
        let victim = qp
            .outstanding
            .iter_mut()
            .find(|p| p.seq.is_some() && p.status.is_none());
        let has_victim = victim.is_some();
        if let Some(p) = victim {
            p.status = Some(wc::RETRY_EXCEEDED);
        }
        return StreamTimer::Exceeded {
            first,
            tuple,
            victim: has_victim,
        };
    }
    qp.retries += 1;
    StreamTimer::Resend
}

/// Sends the backlog of `qp` again, in order, until the fabric refuses a message: returns its
/// sequence number (it stays first in the backlog), or `None` when everything was delivered
/// (the retry count starts over).
fn stream_resend(qp: &mut Qp, wire: &mut Wire<'_>) -> Option<u32> {
    let qpn = qp.qpn;
    loop {
        let Some(c) = qp.iw.as_mut().and_then(|i| i.conn.as_mut()) else {
            qp.retries = 0;
            return None;
        };
        let Some((seq, msg)) = c.backlog.pop_front() else {
            // Everything delivered.
            qp.retries = 0;
            return None;
        };
        if let Err(msg) = wire.transmit_stream(qpn, c, seq, msg) {
            c.backlog.push_front((seq, msg));
            return Some(seq);
        }
    }
}

/// Ends the live stream of `qp` from this end: the adapter's state becomes ERROR unless the
/// QP was stopped already, undelivered messages are dropped, and a Terminate carrying
/// `peer_status` takes the next sequence numbers. Returns the Terminate and its sequence
/// number (for the connection, which stays for inspection), or `None` if there was no live
/// stream.
fn stream_close(qp: &mut Qp, peer_status: Option<u8>) -> Option<(u32, StreamMsg)> {
    let iw = qp.iw.as_mut()?;
    if matches!(
        iw.state,
        IwarpState::Idle | IwarpState::Rtr | IwarpState::Rts
    ) {
        iw.state = IwarpState::Error;
    }
    let c = iw.conn.as_mut().filter(|c| c.live)?;
    c.live = false;
    c.backlog.clear();
    let seq = c.snd_nxt;
    let msg = StreamMsg::Terminate {
        status: peer_status,
    };
    c.snd_nxt = seq.wrapping_add(msg.stream_len());
    Some((seq, msg))
}

/// The peer's Terminate ends the live stream of `qp`: undelivered messages are dropped and
/// the oldest unanswered request completes with `status` (if any). Returns the connection
/// (to unbind), or `None` if there was no live stream.
fn stream_terminated(qp: &mut Qp, status: Option<u8>) -> Option<Conn> {
    let c = qp.iw.as_mut()?.conn.as_mut().filter(|c| c.live)?;
    c.live = false;
    c.backlog.clear();
    let tuple = c.tuple;
    if let Some(code) = status {
        if let Some(p) = qp
            .outstanding
            .iter_mut()
            .find(|p| p.seq.is_some() && p.status.is_none())
        {
            p.status = Some(code);
        }
    }
    Some(tuple)
}

/// What a stream message that arrived for `qp` comes to.
#[derive(Debug, PartialEq, Eq)]
enum Arrival {
    /// The QP's stream is not the message's (it ended after the fabric routed the message;
    /// its Terminate is on the way to the sender): dropped.
    Stale,
    /// The peer ended the stream, whatever the sequence number.
    Terminate(Option<u8>),
    /// The sender's peer cookie is not this QP's cookie: the stream is broken.
    WrongCookie,
    /// Not at RCV.NXT (`expected`): the stream is broken.
    OutOfSequence { expected: u32 },
    /// In sequence: RCV.NXT moved past it, and it goes to the engines.
    Deliver(StreamMsg),
}

/// Takes message `msg` at `seq` of the stream of connection `conn` (the sender's view), sent
/// for the peer cookie `cookie`, on `qp`.
fn stream_receive(qp: &mut Qp, conn: Conn, seq: u32, cookie: u32, msg: StreamMsg) -> Arrival {
    let Some(iw) = qp.iw.as_mut() else {
        return Arrival::Stale;
    };
    let Some(c) = iw
        .conn
        .as_mut()
        .filter(|c| c.live && c.tuple == conn.mirror())
    else {
        return Arrival::Stale;
    };
    let own = c.own;
    if let StreamMsg::Terminate { status } = msg {
        return Arrival::Terminate(status);
    }
    if cookie != own {
        return Arrival::WrongCookie;
    }
    if seq != c.rcv_nxt {
        return Arrival::OutOfSequence {
            expected: c.rcv_nxt,
        };
    }
    c.rcv_nxt = seq.wrapping_add(msg.stream_len());
    Arrival::Deliver(msg)
}

impl DataPath<'_> {
    /// Whether QP `qpn` is an iWARP QP.
    pub(super) fn is_iwarp_qp(&self, qpn: u32) -> bool {
        self.rdma.qps.get(&qpn).is_some_and(|q| q.iw.is_some())
    }

    // --------------------------------------------------------------------------------------------
    // MODIFY_QP
    // --------------------------------------------------------------------------------------------

    /// MODIFY_QP in the iWARP layout. `req` is read past word @8 only for RTS.
    pub(super) fn cmd_modify_qp_iwarp(
        &mut self,
        r: ModifyQpIwarp,
        req: &CmdRequest<'_>,
        io: &mut Io<'_>,
    ) -> Result<(u64, u64), Status> {
        let Some(target) = IwarpState::from_u8(r.state) else {
            if self.warned.cmd_error() {
                log::warn!(
                    "MODIFY_QP of QP {}: iWARP state {} does not exist",
                    r.qpn,
                    r.state
                );
            }
            return Err(Status::InvalidParam);
        };
        let qp = self.rdma.qps.get(&r.qpn).ok_or(Status::NotFound)?;
        let Some(iw) = qp.iw.as_ref() else {
            return Err(Status::InvalidParam);
        };
        let from = iw.driver_state;
        use IwarpState::*;
        let ok = matches!(
            (from, target),
            (Idle, Rtr)
                | (Idle | Rtr, Rts)
                | (Rts, Closing | Terminate | Error)
                | (Idle | Rtr, Error)
                | (Closing, Error)
        );
        if !ok {
            if self.warned.cmd_error() {
                log::warn!(
                    "MODIFY_QP of QP {}: iWARP transition {} -> {} refused",
                    r.qpn,
                    from.name(),
                    target.name()
                );
            }
            return Err(Status::InvalidParam);
        }
        match target {
            Rts => {
                let c = IwarpConnection::decode(req)?;
                self.iw_bind(r.qpn, r.cc, c, io)?;
            }
            Rtr => {
                if let Some(qp) = self.rdma.qps.get_mut(&r.qpn) {
                    qp.state = engine_state(Rtr);
                    if let Some(iw) = qp.iw.as_mut() {
                        iw.state = Rtr;
                        iw.driver_state = Rtr;
                    }
                }
                log::debug!("QP {}: {} -> RTR", r.qpn, from.name());
            }
            Idle => return Err(Status::InvalidParam),
            Closing | Terminate | Error => self.iw_stop(r.qpn, target, io),
        }
        Ok((0, 0))
    }

    /// The transition to RTS: bind the 4-tuple with the QP's own cookie and the peer cookie,
    /// take over the sequence numbers, and process the WQEs posted so far.
    fn iw_bind(
        &mut self,
        qpn: u32,
        cc: u8,
        c: IwarpConnection,
        io: &mut Io<'_>,
    ) -> Result<(), Status> {
        let tuple = Conn {
            src_ip: Ipv4Addr::from(c.src_ip),
            src_port: c.src_port,
            dst_ip: Ipv4Addr::from(c.dst_ip),
            dst_port: c.dst_port,
        };
        let Some(qp) = self.rdma.qps.get_mut(&qpn) else {
            return Err(Status::NotFound);
        };
        let Some(iw) = qp.iw.as_mut() else {
            return Err(Status::InvalidParam);
        };
        // Compat mode (erdma_rs_hw 7.3): the cookie field names the peer's QPN, so the peer's
        // messages name this QP's.
        let own = if c.cookie & COMPAT_COOKIE != 0 {
            (qpn & COMPAT_QPN_MASK) | COMPAT_COOKIE
        } else {
            iw.cookie
        };
        let binding = Binding {
            conn: tuple,
            cookie: own,
            peer_cookie: c.cookie,
        };
        if let Some(port) = self.wire.port {
            if let Err(e) = port.bind(qpn, binding) {
                if self.warned.cmd_error() {
                    log::warn!("QP {qpn}: RTS on {tuple} refused: {e}");
                }
                return Err(Status::Exists);
            }
        } else if self.warned.cmd_error() {
            log::warn!("QP {qpn}: RTS on {tuple} without a fabric: its messages will be lost");
        }
        let from = iw.driver_state;
        iw.state = IwarpState::Rts;
        iw.driver_state = IwarpState::Rts;
        iw.conn = Some(IwConn {
            tuple,
            cookie: c.cookie,
            own,
            cc,
            snd_nxt: c.snd_nxt,
            rcv_nxt: c.rcv_nxt,
            live: true,
            backlog: Backlog::default(),
        });
        qp.state = QpState::Rts;
        qp.retries = 0;
        if self.warned.note() {
            log::info!(
                "QP {qpn}: {} -> RTS on {tuple}, peer cookie {}, SND.NXT {}, RCV.NXT {}, CC {cc}",
                from.name(),
                c.cookie,
                c.snd_nxt,
                c.rcv_nxt
            );
        }
        self.process_sq(qpn, io);
        Ok(())
    }

    /// A stop (CLOSING, TERMINATE, ERROR) the driver asked for.
    fn iw_stop(&mut self, qpn: u32, target: IwarpState, io: &mut Io<'_>) {
        let Some(qp) = self.rdma.qps.get_mut(&qpn) else {
            return;
        };
        let Some(iw) = qp.iw.as_mut() else {
            return;
        };
        let from = iw.driver_state;
        iw.driver_state = target;
        if qp.state != QpState::Error {
            log::debug!(
                "QP {qpn}: {} -> {} (local stop)",
                from.name(),
                target.name()
            );
            // Terminates a live stream (the peer hears of it), flushes.
            self.enter_error(qpn, io);
            if let Some(iw) = self.rdma.qps.get_mut(&qpn).and_then(|q| q.iw.as_mut()) {
                iw.state = target;
            }
        } else {
            if target == IwarpState::Error {
                iw.state = IwarpState::Error;
            }
            log::debug!(
                "QP {qpn}: {} -> {} (stopped already: {})",
                from.name(),
                target.name(),
                iw.state.name()
            );
        }
    }

    // --------------------------------------------------------------------------------------------
    // Ending a stream
    // --------------------------------------------------------------------------------------------

    /// Ends QP `qpn`'s live stream, if it has one: a Terminate (carrying `peer_status` for the
    /// peer's oldest unanswered request) goes to the peer, the binding is removed, undelivered
    /// messages are dropped. The adapter's state becomes ERROR unless the QP was stopped
    /// already. Called whenever an iWARP QP goes to ERROR.
    ///
    /// A compat-mode stream (erdma_rs_hw 7.3) that ends without an error for the peer (a stop,
    /// DESTROY_QP) ends silently, as a RoCEv2 QP's does: its applications expect the peer's
    /// work to go on until it sends to a QP that is gone (ibv_rc_pingpong's last completions
    /// would otherwise meet their receives flushed by the Terminate of a peer that finished).
    pub(super) fn iw_close(&mut self, qpn: u32, peer_status: Option<u8>) {
        let Some((seq, msg)) = self
            .rdma
            .qps
            .get_mut(&qpn)
            .and_then(|qp| stream_close(qp, peer_status))
        else {
            return;
        };
        self.rdma.retransmit.remove(&qpn);
        let Some(port) = self.wire.port else {
            return;
        };
        let Some(c) = self
            .rdma
            .qps
            .get(&qpn)
            .and_then(|q| q.iw.as_ref()?.conn.as_ref())
        else {
            return;
        };
        let tuple = c.tuple;
        if peer_status.is_none() && c.own & COMPAT_COOKIE != 0 {
            if self.warned.note() {
                log::info!("QP {qpn}: compat connection {tuple} ended");
            }
            port.unbind(qpn);
            return;
        }
        let sent = self.wire.transmit_stream(qpn, c, seq, msg).is_ok();
        if self.warned.note() {
            if sent {
                log::info!("QP {qpn}: connection {tuple} terminated");
            } else {
                log::info!(
                    "QP {qpn}: connection {tuple} terminated; the peer is not bound, it does not \
                     hear of it"
                );
            }
        }
        port.unbind(qpn);
    }

    /// The peer ended the stream (Terminate received): AEQE type 0, the oldest unanswered
    /// request completes with `status` (if any), the rest is flushed.
    fn iw_terminated(&mut self, qpn: u32, status: Option<u8>, io: &mut Io<'_>) {
        let Some(tuple) = self
            .rdma
            .qps
            .get_mut(&qpn)
            .and_then(|qp| stream_terminated(qp, status))
        else {
            return;
        };
        if let Some(port) = self.wire.port {
            port.unbind(qpn);
        }
        self.rdma.retransmit.remove(&qpn);
        if self.warned.dp_error() {
            log::warn!(
                "QP {qpn}: connection {tuple} terminated by the peer{}; QP to ERROR",
                status.map_or(String::new(), |s| format!(" (status {s})"))
            );
        }
        self.qp_event(qpn, AE_QP_FATAL, io);
        self.enter_error(qpn, io);
    }

    /// The stream of QP `qpn` is broken (out of sequence, wrong cookie): AEQE type 0, Terminate
    /// (the peer's oldest unanswered request completes with 1), ERROR.
    fn iw_stream_error(&mut self, qpn: u32, io: &mut Io<'_>) {
        self.qp_event(qpn, AE_QP_FATAL, io);
        self.enter_error_with(qpn, Some(wc::GENERAL), io);
    }

    // --------------------------------------------------------------------------------------------
    // Sending
    // --------------------------------------------------------------------------------------------

    /// Puts `msg` on QP `qpn`'s stream (see [`stream_send`]); a message lost now starts the
    /// QP's retransmission timer unless it runs already.
    pub(super) fn iw_send(&mut self, qpn: u32, msg: StreamMsg) {
        let Some(qp) = self.rdma.qps.get_mut(&qpn) else {
            log::debug!("QP {qpn}: iWARP message on a stream that ended, dropped");
            return;
        };
        if stream_send(qp, msg, &mut self.wire) {
            let overflowed = live_conn(qp).is_some_and(|c| c.backlog.overflowed);
            let due = self.clock.now()
                + if overflowed {
                    Duration::ZERO
                } else {
                    RETRY_TIMEOUT
                };
            let timer = self.rdma.retransmit.entry(qpn).or_insert(due);
            *timer = (*timer).min(due);
            let retries = qp.retries;
            let lost = qp
                .iw
                .as_ref()
                .and_then(|i| i.conn.as_ref())
                .and_then(|c| Some((c.tuple, c.backlog.back()?.0)));
            if let Some((tuple, seq)) = lost.filter(|_| self.warned.note()) {
                log::info!(
                    "QP {qpn}: iWARP message at sequence {seq} on {tuple} lost: no QP bound to \
                     {} with the cookies it names (retransmission {} of {RETRY_COUNT} next)",
                    tuple.mirror(),
                    retries + 1
                );
            }
        }
    }

    /// The retransmission timer of iWARP QP `qpn` fired: its undelivered messages go out
    /// again in order, or after [`RETRY_COUNT`] retransmissions the connection is given up.
    pub(super) fn iw_retransmit(&mut self, qpn: u32, io: &mut Io<'_>) {
        let Some(qp) = self.rdma.qps.get_mut(&qpn) else {
            return;
        };
        match stream_timer(qp) {
            StreamTimer::Nothing => {}
            StreamTimer::Exceeded {
                first,
                tuple,
                victim,
            } => {
                if self.warned.dp_error() {
                    log::warn!(
                        "QP {qpn}: iWARP message at sequence {first} undelivered after \
                         {RETRY_COUNT} retransmissions (no QP bound to {}): retry exceeded, QP to \
                         ERROR",
                        tuple.mirror()
                    );
                }
                self.qp_event(qpn, AE_QP_FATAL, io);
                if victim {
                    self.drain_completions(qpn, io);
                } else {
                    self.enter_error(qpn, io);
                }
            }
            StreamTimer::Resend => {
                let Some(qp) = self.rdma.qps.get_mut(&qpn) else {
                    return;
                };
                if let Some(seq) = stream_resend(qp, &mut self.wire) {
                    let due = self.clock.now() + RETRY_TIMEOUT;
                    self.rdma.retransmit.insert(qpn, due);
                    if self.warned.note() {
                        log::info!("QP {qpn}: iWARP message at sequence {seq} lost again");
                    }
                }
            }
        }
    }

    // --------------------------------------------------------------------------------------------
    // Receiving
    // --------------------------------------------------------------------------------------------

    /// A stream message for QP `qpn` (the QP the fabric found bound to the mirror of `conn`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn iw_incoming(
        &mut self,
        src_port: PortId,
        src_qpn: u32,
        qpn: u32,
        conn: Conn,
        seq: u32,
        cookie: u32,
        msg: StreamMsg,
        io: &mut Io<'_>,
    ) {
        let arrival = match self.rdma.qps.get_mut(&qpn) {
            Some(qp) => stream_receive(qp, conn, seq, cookie, msg),
            None => Arrival::Stale,
        };
        let msg = match arrival {
            Arrival::Deliver(msg) => msg,
            Arrival::Stale => {
                log::debug!(
                    "iWARP message from {conn} for QP {qpn}, not bound to it any more: dropped"
                );
                return;
            }
            Arrival::Terminate(status) => {
                self.iw_terminated(qpn, status, io);
                return;
            }
            Arrival::WrongCookie => {
                if self.warned.dp_error() {
                    log::warn!(
                        "QP {qpn}: iWARP message on {} for peer cookie {cookie} refused: the \
                     sender's peer cookie must be this QP's cookie; connection terminated",
                        conn.mirror()
                    );
                }
                self.iw_stream_error(qpn, io);
                return;
            }
            Arrival::OutOfSequence { expected } => {
                if self.warned.dp_error() {
                    log::warn!(
                        "iWARP stream out of sequence on QP {qpn}: expected {expected}, got {seq} \
                         (connection {}); connection terminated",
                        conn.mirror()
                    );
                }
                self.iw_stream_error(qpn, io);
                return;
            }
        };
        let reply = |seq, result| Packet {
            src_port,
            src_qpn,
            dst_qpn: qpn,
            body: Body::Response { seq, result },
        };
        match msg {
            StreamMsg::Request { id, req } => self.iw_request(src_port, src_qpn, qpn, id, req, io),
            StreamMsg::ReadResponse { id, data } => {
                self.response(reply(id, Ok(Reply::Read(data))), io)
            }
            StreamMsg::AtomicResponse { id, value } => {
                self.response(reply(id, Ok(Reply::Atomic(value))), io)
            }
            StreamMsg::Terminate { .. } => {}
        }
    }

    /// An incoming request on a live stream. No RNR: a message that needs a receive WQE and
    /// finds none ends the connection.
    fn iw_request(
        &mut self,
        src_port: PortId,
        src_qpn: u32,
        qpn: u32,
        id: u64,
        req: Request,
        io: &mut Io<'_>,
    ) {
        let what = match &req {
            Request::Send { .. } => "Send",
            _ => "Write with Immediate",
        };
        let pkt = Packet {
            src_port,
            src_qpn,
            dst_qpn: qpn,
            body: Body::Request { seq: id, req },
        };
        // The RoCEv2 responder hands back a message that needs a receive WQE it has not got.
        if self.execute_request(pkt, io).is_some() {
            if self.warned.dp_error() {
                log::warn!(
                    "QP {qpn}: incoming {what} finds no receive WQE posted (iWARP has no RNR): \
                     connection terminated"
                );
            }
            self.qp_event(qpn, AE_RQ_ERROR, io);
            self.enter_error_with(qpn, Some(wc::RECV_FORMAT), io);
        }
    }

    /// The responder's answer to request `id` of the peer: an ACK as on RoCEv2, a Read or
    /// atomic response on the stream. An error ended the stream already (the Terminate carried
    /// its status); if not, it ends it now.
    pub(super) fn iw_respond(&mut self, to: &Packet, id: u64, result: Result<Reply, Nak>) {
        let qpn = to.dst_qpn;
        match result {
            Ok(Reply::Ack) => {
                let body = Body::Response {
                    seq: id,
                    result: Ok(Reply::Ack),
                };
                self.send_back(to.src_port, qpn, to.src_qpn, body);
            }
            Ok(Reply::Read(data)) => self.iw_send(qpn, StreamMsg::ReadResponse { id, data }),
            Ok(Reply::Atomic(value)) => self.iw_send(qpn, StreamMsg::AtomicResponse { id, value }),
            Err(nak) => {
                let status = match nak {
                    Nak::Remote(code) => code,
                    Nak::NoQp | Nak::RnrExceeded => wc::GENERAL,
                };
                self.iw_close(qpn, Some(status));
            }
        }
    }

    /// Ends the live streams of every iWARP QP (DESTROY_QP of all: a function reset).
    pub(super) fn iw_close_all(&mut self) {
        let qpns: Vec<u32> = self
            .rdma
            .qps
            .values()
            .filter(|q| q.iw.is_some())
            .map(|q| q.qpn)
            .collect();
        for qpn in qpns {
            self.iw_close(qpn, None);
        }
    }
}

impl Device {
    // --------------------------------------------------------------------------------------------
    // Inspection
    // --------------------------------------------------------------------------------------------

    /// The iWARP view of QP `qpn` (`None`: no such QP, or not iWARP).
    pub fn iwarp_qp(&self, qpn: u32) -> Option<IwarpQpInfo> {
        let iw = self.func.rdma.qps.get(&qpn)?.iw.as_ref()?;
        let c = iw.conn.as_ref();
        Some(IwarpQpInfo {
            own_cookie: iw.cookie,
            state: iw.state,
            conn: c.map(|c| c.tuple),
            live: c.is_some_and(|c| c.live),
            snd_nxt: c.map_or(0, |c| c.snd_nxt),
            rcv_nxt: c.map_or(0, |c| c.rcv_nxt),
            cookie: c.map_or(0, |c| c.cookie),
            cc: c.map_or(0, |c| c.cc),
            backlog: c.map_or(0, |c| c.backlog.len()),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::device::iwarp_qp::Iwarp;
    use crate::device::objects::Pending;
    use crate::fabric::{Fabric, NoWaker};
    use crate::stats::TrafficCounters;

    fn tuple() -> Conn {
        Conn {
            src_ip: Ipv4Addr::new(10, 0, 0, 1),
            src_port: 4791,
            dst_ip: Ipv4Addr::new(10, 0, 0, 2),
            dst_port: 5000,
        }
    }

    /// QP 5's own cookie.
    const OWN: u32 = 0x5eed_0005;
    /// The cookie of QP 5's peer.
    const PEER: u32 = 0x5eed_0006;

    /// An RTS iWARP QP 5 (cookie [`OWN`]) whose live stream continues at sequence 100, peer
    /// cookie [`PEER`].
    fn iwarp_qp() -> Qp {
        let mut qp = Qp::for_test(5);
        qp.iw = Some(Box::new(Iwarp {
            cookie: OWN,
            state: IwarpState::Rts,
            driver_state: IwarpState::Rts,
            conn: Some(IwConn {
                tuple: tuple(),
                cookie: PEER,
                own: OWN,
                cc: 0,
                snd_nxt: 100,
                rcv_nxt: 0,
                live: true,
                backlog: Backlog::default(),
            }),
        }));
        qp
    }

    fn read_response(id: u64) -> StreamMsg {
        StreamMsg::ReadResponse {
            id,
            data: vec![7; 10],
        }
    }

    fn conn(qp: &mut Qp) -> &mut IwConn {
        qp.iw.as_mut().and_then(|i| i.conn.as_mut()).unwrap()
    }

    #[test]
    fn stream_messages_wait_in_order_for_the_peer() {
        let fabric = Fabric::new();
        let (ours, peer) = (
            fabric.attach(Arc::new(NoWaker)),
            fabric.attach(Arc::new(NoWaker)),
        );
        let mut stats = TrafficCounters::default();
        let mut wire = Wire {
            port: Some(&ours),
            stats: &mut stats,
        };
        let mut qp = iwarp_qp();
        let ours_binding = Binding {
            conn: tuple(),
            cookie: OWN,
            peer_cookie: PEER,
        };
        ours.bind(5, ours_binding).unwrap();
        let len = read_response(0).stream_len();
        assert!(
            stream_send(&mut qp, read_response(1), &mut wire),
            "nobody bound: lost"
        );
        assert!(
            !stream_send(&mut qp, read_response(2), &mut wire),
            "behind the first: kept, the timer runs already"
        );
        let seqs: Vec<u32> = conn(&mut qp).backlog.iter().map(|m| m.0).collect();
        assert_eq!(seqs, [100, 100 + len]);
        assert_eq!(conn(&mut qp).snd_nxt, 100 + 2 * len);
        assert!(matches!(stream_timer(&mut qp), StreamTimer::Resend));
        assert_eq!(stream_resend(&mut qp, &mut wire), Some(100), "still nobody");
        assert_eq!(conn(&mut qp).backlog.len(), 2);
        // The mirrored tuple with other cookies answers nothing.
        let wrong = Binding {
            cookie: 6,
            ..ours_binding.peer()
        };
        peer.bind(7, wrong).unwrap();
        assert!(matches!(stream_timer(&mut qp), StreamTimer::Resend));
        assert_eq!(stream_resend(&mut qp, &mut wire), Some(100), "not the peer");
        peer.bind(6, ours_binding.peer()).unwrap();
        assert!(matches!(stream_timer(&mut qp), StreamTimer::Resend));
        assert_eq!(qp.retries, 3);
        assert_eq!(stream_resend(&mut qp, &mut wire), None);
        assert!(conn(&mut qp).backlog.is_empty());
        assert_eq!(qp.retries, 0, "everything delivered: the count starts over");
        let inbox = peer.take_inbox();
        assert_eq!(inbox.len(), 2);
        assert!(inbox.iter().all(|p| p.dst_qpn == 6));
        assert!(
            !stream_send(&mut qp, read_response(3), &mut wire),
            "sent at once"
        );
        assert_eq!(peer.take_inbox().len(), 1);
    }

    #[test]
    fn stream_receive_takes_messages_in_sequence_only() {
        let mut qp = iwarp_qp();
        let from = tuple().mirror();
        let len = read_response(1).stream_len();
        assert_eq!(
            stream_receive(&mut qp, from, 0, OWN, read_response(1)),
            Arrival::Deliver(read_response(1))
        );
        assert_eq!(conn(&mut qp).rcv_nxt, len);
        assert_eq!(
            stream_receive(&mut qp, from, 0, OWN, read_response(2)),
            Arrival::OutOfSequence { expected: len }
        );
        assert_eq!(
            stream_receive(&mut qp, from, len, PEER, read_response(2)),
            Arrival::WrongCookie
        );
        assert_eq!(conn(&mut qp).rcv_nxt, len, "nothing taken");
        assert_eq!(
            stream_receive(&mut qp, tuple(), len, OWN, read_response(2)),
            Arrival::Stale,
            "another connection's"
        );
        let term = StreamMsg::Terminate { status: Some(3) };
        assert_eq!(
            stream_receive(&mut qp, from, 999, PEER, term),
            Arrival::Terminate(Some(3)),
            "whatever its sequence number and cookie"
        );
        conn(&mut qp).live = false;
        assert_eq!(
            stream_receive(&mut qp, from, len, OWN, read_response(2)),
            Arrival::Stale,
            "ended"
        );
    }

    #[test]
    fn streams_end_once_from_either_side() {
        let mut qp = iwarp_qp();
        qp.outstanding.push_back(Pending::for_test(1));
        conn(&mut qp).backlog.push_back((100, read_response(1)));
        let (seq, msg) = stream_close(&mut qp, Some(4)).unwrap();
        assert_eq!(seq, 100);
        assert_eq!(msg, StreamMsg::Terminate { status: Some(4) });
        assert_eq!(conn(&mut qp).snd_nxt, 100 + msg.stream_len());
        assert!(!conn(&mut qp).live);
        assert!(conn(&mut qp).backlog.is_empty(), "undelivered messages go");
        assert_eq!(qp.iw.as_ref().unwrap().state, IwarpState::Error);
        assert_eq!(stream_close(&mut qp, None), None, "ended already");
        assert_eq!(stream_terminated(&mut qp, Some(3)), None);
        assert_eq!(
            qp.outstanding[0].status, None,
            "not by a Terminate after the end"
        );
        let mut qp = iwarp_qp();
        qp.outstanding.push_back(Pending::for_test(1));
        assert_eq!(stream_terminated(&mut qp, Some(3)), Some(tuple()));
        assert_eq!(qp.outstanding[0].status, Some(3));
        assert!(!conn(&mut qp).live);
        let mut qp = iwarp_qp();
        qp.iw.as_mut().unwrap().state = IwarpState::Closing;
        assert!(stream_close(&mut qp, None).is_some());
        assert_eq!(
            qp.iw.as_ref().unwrap().state,
            IwarpState::Closing,
            "a stopped QP keeps its state"
        );
    }

    #[test]
    fn stream_timer_gives_up_or_drops() {
        let mut qp = iwarp_qp();
        assert!(
            matches!(stream_timer(&mut qp), StreamTimer::Nothing),
            "no backlog"
        );
        conn(&mut qp).backlog.push_back((100, read_response(1)));
        qp.outstanding.push_back(Pending::for_test(1));
        qp.retries = RETRY_COUNT;
        match stream_timer(&mut qp) {
            StreamTimer::Exceeded {
                first: 100,
                tuple: t,
                victim: true,
            } => assert_eq!(t, tuple()),
            other => panic!("{other:?}"),
        }
        assert_eq!(qp.outstanding[0].status, Some(wc::RETRY_EXCEEDED));
        assert_eq!(qp.retries, 0);
        conn(&mut qp).live = false;
        assert!(matches!(stream_timer(&mut qp), StreamTimer::Nothing));
        assert!(
            conn(&mut qp).backlog.is_empty(),
            "an ended stream's backlog goes"
        );
        let mut stats = TrafficCounters::default();
        let mut wire = Wire {
            port: None,
            stats: &mut stats,
        };
        assert!(
            !stream_send(&mut qp, read_response(4), &mut wire),
            "ended: dropped"
        );
        assert!(conn(&mut qp).backlog.is_empty());
    }
}
