// SPDX-License-Identifier: GPL-2.0

//! How a QP's RC messages travel, once the requester has built a request or the responder has
//! executed one: the [`Transport`] trait, implemented once for RoCEv2 ([`RoceTransport`]:
//! packets by GID and QPN, lost requests retransmitted by the QP's timer, RNR) and once for
//! iWARP ([`IwarpTransport`]: the QP's byte stream, with the `iwarp` submodule's sequence
//! numbers, backlog and Terminate). The engines ask [`DataPath::transport`] once per operation
//! instead of testing what kind of QP they have.
//!
//! Sending and retransmitting take only what they need on both protocols: the message goes
//! through the data path's [`Wire`] (the fabric port and the traffic counters: requests by
//! GID and QPN here, stream messages by 4-tuple in `iwarp`) for one QP, and what a lost
//! message and the retransmission timer do to the QP are functions of the QP alone. The
//! trait's methods get the data path ([`DataPath`]: the object tables, the wire, event
//! posting), not the device, for what they hand back to the engines (completions, the SQ,
//! events) and for the rest of the iWARP stream (receiving, Terminate).

use std::collections::BTreeMap;

use super::engine::{DataPath, Wire};
use super::objects::Qp;
use super::{RETRY_COUNT, RETRY_TIMEOUT};
use crate::fabric::{Body, Nak, Packet, Refused, Reply, Request, StreamMsg};
use crate::io::Io;
use crate::wire::{access, wc, QpState};

/// What differs between the protocols in moving RC messages.
pub(super) trait Transport {
    /// Sends request `seq` of QP `qpn`, already pending in its SQ order.
    fn send_request(&self, dp: &mut DataPath<'_>, qpn: u32, seq: u64, req: Request);

    /// Answers request `seq` of the requester that sent `to`.
    fn respond(&self, dp: &mut DataPath<'_>, to: &Packet, seq: u64, result: Result<Reply, Nak>);

    /// The retransmission timer of QP `qpn` fired.
    fn retransmit(&self, dp: &mut DataPath<'_>, qpn: u32, io: &mut Io<'_>);

    /// The access a READ's local sink must grant for the response to land in it.
    fn read_sink_access(&self) -> u8;

    /// A receive WQE of QP `qpn` failed at the responder (the QP goes to ERROR after this).
    fn receive_error(&self, dp: &mut DataPath<'_>, qpn: u32, io: &mut Io<'_>);

    /// QP `qpn` goes to ERROR or away: its connection, if the protocol has one, ends
    /// (`peer_status`: what the peer's oldest unanswered request completes with; `None`:
    /// flushed).
    fn close(&self, dp: &mut DataPath<'_>, qpn: u32, peer_status: Option<u8>);
}

/// RoCEv2: packets to the QP's destination GID and QPN through the fabric.
pub(super) struct RoceTransport;

/// iWARP: messages on the QP's TCP byte stream, routed by 4-tuple.
pub(super) struct IwarpTransport;

impl Transport for RoceTransport {
    fn send_request(&self, dp: &mut DataPath<'_>, qpn: u32, seq: u64, req: Request) {
        let sent = match dp.rdma.qps.get(&qpn) {
            Some(qp) => dp.wire.transmit_request(qp, seq, req),
            None => Err(req),
        };
        if let Err(req) = sent {
            dp.lose(qpn, seq, req);
        }
    }

    fn respond(&self, dp: &mut DataPath<'_>, to: &Packet, seq: u64, result: Result<Reply, Nak>) {
        let body = Body::Response { seq, result };
        dp.send_back(to.src_port, to.dst_qpn, to.src_qpn, body);
    }

    fn retransmit(&self, dp: &mut DataPath<'_>, qpn: u32, io: &mut Io<'_>) {
        dp.roce_retransmit(qpn, io);
    }

    fn read_sink_access(&self) -> u8 {
        access::LOCAL_WRITE
    }

    fn receive_error(&self, _dp: &mut DataPath<'_>, _qpn: u32, _io: &mut Io<'_>) {}

    /// RoCEv2 RC has no connection in the adapter (the peer's connection manager tells it).
    fn close(&self, _dp: &mut DataPath<'_>, _qpn: u32, _peer_status: Option<u8>) {}
}

impl Transport for IwarpTransport {
    fn send_request(&self, dp: &mut DataPath<'_>, qpn: u32, seq: u64, req: Request) {
        dp.iw_send(qpn, StreamMsg::Request { id: seq, req });
    }

    fn respond(&self, dp: &mut DataPath<'_>, to: &Packet, seq: u64, result: Result<Reply, Nak>) {
        dp.iw_respond(to, seq, result);
    }

    fn retransmit(&self, dp: &mut DataPath<'_>, qpn: u32, io: &mut Io<'_>) {
        dp.iw_retransmit(qpn, io);
    }

    /// A Read Response is a tagged write into the sink, which must grant remote write.
    fn read_sink_access(&self) -> u8 {
        access::LOCAL_WRITE | access::REMOTE_WRITE
    }

    /// No RNR on iWARP: AEQE type 1 (RQ error).
    fn receive_error(&self, dp: &mut DataPath<'_>, qpn: u32, io: &mut Io<'_>) {
        dp.qp_event(qpn, super::AE_RQ_ERROR, io);
    }

    /// The stream ends with a Terminate to the peer; the binding goes.
    fn close(&self, dp: &mut DataPath<'_>, qpn: u32, peer_status: Option<u8>) {
        dp.iw_close(qpn, peer_status);
    }
}

impl DataPath<'_> {
    /// The transport of QP `qpn` (RoCEv2 for a QP that does not exist).
    pub(super) fn transport(&self, qpn: u32) -> &'static dyn Transport {
        if self.is_iwarp_qp(qpn) {
            &IwarpTransport
        } else {
            &RoceTransport
        }
    }

    /// Request `seq` of QP `qpn` was lost: if it still waits for its answer, it waits for the
    /// QP's retransmission timer, which starts now unless it runs already.
    pub(super) fn lose(&mut self, qpn: u32, seq: u64, req: Request) {
        let due = self.clock.now() + RETRY_TIMEOUT;
        let Some(qp) = self.rdma.qps.get_mut(&qpn) else {
            return;
        };
        let retries = qp.retries;
        if record_lost(qp, seq, req) {
            self.rdma.retransmit.entry(qpn).or_insert(due);
            if self.warned.note() {
                log::info!(
                    "QP {qpn}: request {seq} lost (retransmission {} of {RETRY_COUNT} next)",
                    retries + 1
                );
            }
        }
    }

    /// The retransmission timer of RoCEv2 QP `qpn` fired: see [`on_timer`]; resent requests
    /// that are lost again wait for the next round, and the SQ goes on.
    fn roce_retransmit(&mut self, qpn: u32, io: &mut Io<'_>) {
        let Some(qp) = self.rdma.qps.get_mut(&qpn) else {
            return;
        };
        match on_timer(qp) {
            Retransmit::Nothing => {}
            Retransmit::Exceeded(first) => {
                if self.warned.dp_error() {
                    log::warn!(
                        "QP {qpn}: request {first} unanswered after {RETRY_COUNT} retransmissions \
                         (no QP able to receive at the destination): retry exceeded"
                    );
                }
                self.drain_completions(qpn, io);
            }
            Retransmit::Resend(lost) => {
                for (seq, req) in lost {
                    RoceTransport.send_request(self, qpn, seq, req);
                }
                self.process_sq(qpn, io);
            }
        }
    }
}

/// RoCEv2 requests travel by GID and QPN.
impl Wire<'_> {
    /// Sends request `seq` of `qp` to the QP's destination; gives it back if it cannot be
    /// delivered (then it is lost).
    fn transmit_request(&mut self, qp: &Qp, seq: u64, req: Request) -> Result<(), Request> {
        let qpn = qp.qpn;
        let (dst_qpn, dgid) = (qp.dst_qpn, qp.av.map(|a| a.dgid));
        let (Some(port), Some(dgid)) = (self.port, dgid) else {
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
                self.stats.tx_packet(bytes);
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
}

/// Keeps lost request `seq` of `qp` for retransmission if it still waits for its answer;
/// returns whether it does (then the QP's timer must run).
fn record_lost(qp: &mut Qp, seq: u64, req: Request) -> bool {
    let waiting = qp
        .outstanding
        .iter()
        .any(|p| p.covers(seq) && p.status.is_none());
    if waiting {
        qp.lost.insert(seq, req);
    }
    waiting
}

/// What a RoCEv2 QP's retransmission timer does.
#[derive(Debug)]
enum Retransmit {
    /// Nothing lost, or the QP is not sending (flushed already in ERROR, or starting over
    /// after RESET): the lost requests are dropped.
    Nothing,
    /// [`RETRY_COUNT`] retransmissions went unanswered: the first lost request (this
    /// sequence number) completes with "retry exceeded" (and the QP's move to ERROR flushes
    /// the rest).
    Exceeded(u64),
    /// Send these again, in order.
    Resend(BTreeMap<u64, Request>),
}

/// The retransmission timer of `qp` fired: takes its lost requests and decides.
fn on_timer(qp: &mut Qp) -> Retransmit {
    let lost = std::mem::take(&mut qp.lost);
    let Some(&first) = lost.keys().next() else {
        return Retransmit::Nothing;
    };
    if !matches!(qp.state, QpState::Rts | QpState::Sqd) {
        // Flushed already (ERROR), or starting over (RESET).
        return Retransmit::Nothing;
    }
    if qp.retries >= RETRY_COUNT {
        qp.retries = 0;
        if let Some(p) = qp.outstanding.iter_mut().find(|p| p.covers(first)) {
            p.status = Some(wc::RETRY_EXCEEDED);
        }
        return Retransmit::Exceeded(first);
    }
    qp.retries += 1;
    Retransmit::Resend(lost)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::device::objects::Pending;
    use crate::stats::TrafficCounters;

    fn send() -> Request {
        Request::Send {
            data: vec![1, 2, 3],
            offset: 0,
            last: true,
            imm: None,
            inv: None,
            solicited: false,
        }
    }

    #[test]
    fn roce_keeps_lost_requests_and_gives_up_after_the_retries() {
        let mut qp = Qp::for_test(7);
        assert!(!record_lost(&mut qp, 0, send()), "not pending: dropped");
        qp.outstanding.push_back(Pending::for_test(0));
        qp.outstanding.push_back(Pending::for_test(1));
        assert!(record_lost(&mut qp, 1, send()));
        assert!(record_lost(&mut qp, 0, send()));
        for round in 1..=RETRY_COUNT {
            match on_timer(&mut qp) {
                Retransmit::Resend(lost) => {
                    assert_eq!(lost.keys().copied().collect::<Vec<_>>(), [0, 1], "in order");
                    qp.lost = lost;
                }
                other => panic!("round {round}: {other:?}"),
            }
            assert_eq!(qp.retries, round);
        }
        assert!(matches!(on_timer(&mut qp), Retransmit::Exceeded(0)));
        assert_eq!(qp.outstanding[0].status, Some(wc::RETRY_EXCEEDED));
        assert_eq!(
            qp.outstanding[1].status, None,
            "flushed by the move to ERROR"
        );
        assert!(qp.lost.is_empty());
        assert!(matches!(on_timer(&mut qp), Retransmit::Nothing));
        qp.state = QpState::Error;
        assert!(record_lost(&mut qp, 1, send()));
        assert!(
            matches!(on_timer(&mut qp), Retransmit::Nothing),
            "not sending"
        );
        assert!(qp.lost.is_empty(), "dropped");
    }

    #[test]
    fn roce_wire_without_fabric_or_destination_gives_the_request_back() {
        let mut stats = TrafficCounters::default();
        let mut qp = Qp::for_test(7);
        let mut wire = Wire {
            port: None,
            stats: &mut stats,
        };
        assert!(wire.transmit_request(&qp, 0, send()).is_err(), "no fabric");
        let fabric = crate::fabric::Fabric::new();
        let port = fabric.attach(Arc::new(crate::fabric::NoWaker));
        let mut wire = Wire {
            port: Some(&port),
            stats: &mut stats,
        };
        assert!(
            wire.transmit_request(&qp, 0, send()).is_err(),
            "no address vector"
        );
        qp.av = Some(crate::testing::ipv4_av(0, 9));
        assert!(
            wire.transmit_request(&qp, 0, send()).is_err(),
            "GID unknown"
        );
    }
}
