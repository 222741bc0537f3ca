// SPDX-License-Identifier: GPL-2.0

//! How a QP's RC messages travel, once the requester has built a request or the responder has
//! executed one: the [`Transport`] trait, implemented once for RoCEv2 ([`RoceTransport`]:
//! packets by GID and QPN, lost requests retransmitted by the QP's timer, RNR) and once for
//! iWARP ([`IwarpTransport`]: the QP's byte stream, with the `iwarp` submodule's sequence
//! numbers, backlog and Terminate). The engines ask [`Device::transport`] once per operation
//! instead of testing what kind of QP they have.
//!
//! The implementations still work on the whole [`Device`]; giving each only what it needs
//! (the QP, the fabric port, the clock, the counters) is the next step.

use super::{Device, RETRY_COUNT, RETRY_TIMEOUT};
use crate::fabric::{Body, Nak, Packet, Refused, Reply, Request, StreamMsg};
use crate::io::Io;
use crate::wire::{access, wc, QpState};

/// What differs between the protocols in moving RC messages.
pub(super) trait Transport {
    /// Sends request `seq` of QP `qpn`, already pending in its SQ order.
    fn send_request(&self, dev: &mut Device, qpn: u32, seq: u64, req: Request);

    /// Answers request `seq` of the requester that sent `to`.
    fn respond(&self, dev: &mut Device, to: &Packet, seq: u64, result: Result<Reply, Nak>);

    /// The retransmission timer of QP `qpn` fired.
    fn retransmit(&self, dev: &mut Device, qpn: u32, io: &mut Io<'_>);

    /// The access a READ's local sink must grant for the response to land in it.
    fn read_sink_access(&self) -> u8;

    /// A receive WQE of QP `qpn` failed at the responder (the QP goes to ERROR after this).
    fn receive_error(&self, dev: &mut Device, qpn: u32, io: &mut Io<'_>);

    /// QP `qpn` goes to ERROR or away: its connection, if the protocol has one, ends
    /// (`peer_status`: what the peer's oldest unanswered request completes with; `None`:
    /// flushed).
    fn close(&self, dev: &mut Device, qpn: u32, peer_status: Option<u8>);
}

/// RoCEv2: packets to the QP's destination GID and QPN through the fabric.
pub(super) struct RoceTransport;

/// iWARP: messages on the QP's TCP byte stream, routed by 4-tuple.
pub(super) struct IwarpTransport;

impl Transport for RoceTransport {
    fn send_request(&self, dev: &mut Device, qpn: u32, seq: u64, req: Request) {
        if let Err(req) = dev.roce_transmit(qpn, seq, req) {
            dev.lose(qpn, seq, req);
        }
    }

    fn respond(&self, dev: &mut Device, to: &Packet, seq: u64, result: Result<Reply, Nak>) {
        let body = Body::Response { seq, result };
        dev.send_back(to.src_port, to.dst_qpn, to.src_qpn, body);
    }

    fn retransmit(&self, dev: &mut Device, qpn: u32, io: &mut Io<'_>) {
        dev.roce_retransmit(qpn, io);
    }

    fn read_sink_access(&self) -> u8 {
        access::LOCAL_WRITE
    }

    fn receive_error(&self, _dev: &mut Device, _qpn: u32, _io: &mut Io<'_>) {}

    /// RoCEv2 RC has no connection in the adapter (the peer's connection manager tells it).
    fn close(&self, _dev: &mut Device, _qpn: u32, _peer_status: Option<u8>) {}
}

impl Transport for IwarpTransport {
    fn send_request(&self, dev: &mut Device, qpn: u32, seq: u64, req: Request) {
        dev.iw_send(qpn, StreamMsg::Request { id: seq, req });
    }

    fn respond(&self, dev: &mut Device, to: &Packet, seq: u64, result: Result<Reply, Nak>) {
        dev.iw_respond(to, seq, result);
    }

    fn retransmit(&self, dev: &mut Device, qpn: u32, io: &mut Io<'_>) {
        dev.iw_retransmit(qpn, io);
    }

    /// A Read Response is a tagged write into the sink, which must grant remote write.
    fn read_sink_access(&self) -> u8 {
        access::LOCAL_WRITE | access::REMOTE_WRITE
    }

    /// No RNR on iWARP: AEQE type 1 (RQ error).
    fn receive_error(&self, dev: &mut Device, qpn: u32, io: &mut Io<'_>) {
        dev.qp_event(qpn, super::AE_RQ_ERROR, io);
    }

    /// The stream ends with a Terminate to the peer; the binding goes.
    fn close(&self, dev: &mut Device, qpn: u32, peer_status: Option<u8>) {
        dev.iw_close(qpn, peer_status);
    }
}

impl Device {
    /// The transport of QP `qpn` (RoCEv2 for a QP that does not exist).
    pub(super) fn transport(&self, qpn: u32) -> &'static dyn Transport {
        if self.is_iwarp_qp(qpn) {
            &IwarpTransport
        } else {
            &RoceTransport
        }
    }

    /// Sends request `seq` of QP `qpn` to the QP's destination; gives it back if it cannot be
    /// delivered (then it is lost).
    fn roce_transmit(&mut self, qpn: u32, seq: u64, req: Request) -> Result<(), Request> {
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
    pub(super) fn lose(&mut self, qpn: u32, seq: u64, req: Request) {
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

    /// The retransmission timer of RoCEv2 QP `qpn` fired: its lost requests go out again, in
    /// order, or, after [`RETRY_COUNT`] retransmissions without an answer, the first of them
    /// completes with "retry exceeded" (and the QP's move to ERROR flushes the rest).
    fn roce_retransmit(&mut self, qpn: u32, io: &mut Io<'_>) {
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
            if let Err(req) = self.roce_transmit(qpn, seq, req) {
                self.lose(qpn, seq, req);
            }
        }
        self.process_sq(qpn, io);
    }
}
