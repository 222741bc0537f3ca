// SPDX-License-Identifier: GPL-2.0

//! The responder: incoming requests on RC QPs (SEND, WRITE, READ, atomics), held while no
//! receive WQE is posted, checked against the MR table, and answered.

use std::collections::VecDeque;

use super::mr::{read_pieces, write_pieces, AccessErr, Keys};
use super::receive::scatter;
use super::{trace_data, DataPath, MAX_HELD, MAX_HELD_BYTES};
use crate::device::objects::{Held, Qp};
use crate::fabric::{AtomicOp, Body, Nak, Packet, PortId, Reply, Request};
use crate::io::{GuestMemory, Io};
use crate::wire::{access, op, wc, CqeExtra, QpState, Rqe, UdInfo, QP_TYPE_UD};

/// AE type: access error.
const AE_ACCESS: u8 = 2;

impl DataPath<'_> {
    /// Before the function returns to power-on: requests held for receive WQEs are answered
    /// with failure (their requesters must not wait forever), and iWARP peers hear that their
    /// connections ended (the bindings go).
    pub(in crate::device) fn stop_all(&mut self) {
        let held: VecDeque<_> = self
            .rdma
            .qps
            .values_mut()
            .flat_map(|q| q.held.take())
            .collect();
        self.rdma.held_bytes = 0;
        self.nak_held(held);
        self.iw_close_all();
    }

    /// Drops held requests (their QP is going away or failed).
    pub(in crate::device) fn nak_held(&mut self, held: VecDeque<Packet>) {
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
        self.transport(to.dst_qpn).respond(self, to, seq, result);
    }

    /// Sends `body` from our QP `qpn` back to QP `requester` behind `port`.
    pub(in crate::device) fn send_back(
        &mut self,
        port: PortId,
        qpn: u32,
        requester: u32,
        body: Body,
    ) {
        let Some(own) = self.wire.port else {
            return;
        };
        let pkt = Packet {
            src_port: 0,
            src_qpn: qpn,
            dst_qpn: requester,
            body,
        };
        self.wire.stats.tx_packet(pkt.payload_len() as u64);
        own.send_response(port, pkt);
    }

    /// An incoming request.
    pub(super) fn incoming(&mut self, pkt: Packet, seq: u64, io: &mut Io<'_>) {
        let qpn = pkt.dst_qpn;
        let ok = self.rdma.qps.get(&qpn).is_some_and(|q| {
            q.qp_type != QP_TYPE_UD
                && q.iw.is_none()
                && matches!(q.state, QpState::Rtr | QpState::Rts | QpState::Sqd)
                && self.sent_by_connected_peer(q, &pkt)
        });
        if !ok {
            self.drop_request(pkt);
            return;
        }
        let Some(qp) = self.rdma.qps.get(&qpn) else {
            return;
        };
        if !qp.held.is_empty() {
            self.hold(qpn, pkt, seq);
            return;
        }
        // A segment of a Send that does not continue the one in progress (its earlier
        // segments were lost on the way): lost too, retransmitted in order after them.
        if let Body::Request {
            req: Request::Send { offset, .. },
            ..
        } = &pkt.body
        {
            if *offset != 0 && *offset != qp.rx_next {
                self.drop_request(pkt);
                return;
            }
        }
        if let Some(pkt) = self.execute_request(pkt, io) {
            self.hold(qpn, pkt, seq);
        }
    }

    /// Holds `pkt` (request `seq`) for QP `qpn`'s receive WQEs, unless the QP holds
    /// [`MAX_HELD`] requests or the function [`MAX_HELD_BYTES`] already: then it is refused
    /// (RNR retry exceeded for the requester).
    fn hold(&mut self, qpn: u32, pkt: Packet, seq: u64) {
        let cost = Held::cost(&pkt);
        let room = self.rdma.held_bytes.saturating_add(cost) <= MAX_HELD_BYTES;
        let Some(qp) = self.rdma.qps.get_mut(&qpn) else {
            return;
        };
        if qp.held.len() >= MAX_HELD || !room {
            self.respond(&pkt, seq, Err(Nak::RnrExceeded));
            return;
        }
        qp.held.push_back(pkt);
        self.rdma.held_bytes += cost;
    }

    /// Whether `pkt` comes from the QP `qp` is connected to: the QP its RTR named, behind the
    /// port that owns the GID of its address vector (the fabric fills in the sending port, so
    /// no guest can forge it). Anybody else's request is dropped as if the QP did not exist:
    /// another guest that learns a QPN and an rkey reaches nothing through them.
    fn sent_by_connected_peer(&self, qp: &Qp, pkt: &Packet) -> bool {
        let (Some(port), Some(av)) = (self.wire.port, qp.av) else {
            return false;
        };
        pkt.src_qpn == qp.dst_qpn && port.resolve(&av.dgid) == Some(pkt.src_port)
    }

    /// Retries held requests after receive WQEs were posted.
    pub(super) fn drain_held(&mut self, qpn: u32, io: &mut Io<'_>) {
        loop {
            let Some(qp) = self.rdma.qps.get_mut(&qpn) else {
                return;
            };
            if !matches!(qp.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
                return;
            }
            let Some(pkt) = qp.held.pop_front() else {
                return;
            };
            self.rdma.held_bytes = self.rdma.held_bytes.saturating_sub(Held::cost(&pkt));
            if let Some(pkt) = self.execute_request(pkt, io) {
                if let Some(qp) = self.rdma.qps.get_mut(&qpn) {
                    self.rdma.held_bytes += Held::cost(&pkt);
                    qp.held.push_front(pkt);
                }
                return;
            }
        }
    }

    /// Executes a request on an able QP. Returns the packet back if it needs a receive WQE that
    /// is not there yet.
    pub(in crate::device) fn execute_request(
        &mut self,
        pkt: Packet,
        io: &mut Io<'_>,
    ) -> Option<Packet> {
        let qpn = pkt.dst_qpn;
        let Body::Request { seq, req } = &pkt.body else {
            return None;
        };
        let seq = *seq;
        let qp = self.rdma.qps.get(&qpn)?;
        let pdn = qp.pdn;
        let needs_rqe = matches!(
            req,
            Request::Send { .. } | Request::Write { imm: Some(_), .. }
        );
        let rx_next = qp.rx_next;
        if needs_rqe && qp.rq.pi == qp.rq.ci {
            return Some(pkt);
        }
        let result = match req {
            Request::Write {
                addr,
                rkey,
                data,
                offset,
                last: _,
                imm,
                solicited,
            } => match self.remote_write(qpn, pdn, *addr, *rkey, data, io) {
                Ok(()) => match imm {
                    // The message's last segment: its byte count is the message's.
                    Some(imm) => self.consume_rqe(
                        qpn,
                        op::RECV_IMM,
                        RxSegment::WHOLE_EMPTY,
                        CqeExtra::Imm(*imm),
                        offset.saturating_add(data.len() as u64) as u32,
                        *solicited,
                        io,
                    ),
                    None => Ok(Reply::Ack),
                },
                Err(e) => Err(e),
            },
            Request::Send {
                data,
                offset,
                last,
                imm,
                inv,
                solicited,
            } if *offset == 0 || *offset == rx_next => {
                let (opcode, extra) = match (imm, inv) {
                    (Some(i), _) => (op::RSP_SEND_IMM, CqeExtra::Imm(*i)),
                    (None, Some(k)) => (op::RECV_INV, CqeExtra::InvRkey(*k)),
                    (None, None) => (op::RECEIVE, CqeExtra::None),
                };
                let inv_ok = match inv {
                    Some(k) => self
                        .rdma
                        .invalidate(*k, pdn, true)
                        .map_err(|_| wc::RECV_STAG),
                    None => Ok(()),
                };
                let seg = RxSegment {
                    data,
                    offset: *offset,
                    last: *last,
                };
                match inv_ok {
                    Ok(()) => self.consume_rqe(
                        qpn,
                        opcode,
                        seg,
                        extra,
                        offset.saturating_add(data.len() as u64) as u32,
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
            // A Send segment that does not continue the message in progress (only a broken
            // stream could deliver one): the receive WQE fails.
            Request::Send { .. } => {
                self.consume_rqe_error(qpn, wc::RECV_FORMAT, io);
                Err(Nak::Remote(wc::RECV_FORMAT))
            }
            Request::Read { addr, rkey, len } => self.remote_read(qpn, pdn, *addr, *rkey, *len, io),
            Request::Atomic { addr, rkey, op } => {
                self.remote_atomic(qpn, pdn, *addr, *rkey, *op, io)
            }
        };
        // The PSN advances per message: with its last segment.
        let last = match req {
            Request::Send { last, .. } | Request::Write { last, .. } => *last,
            Request::Read { .. } | Request::Atomic { .. } => true,
        };
        if let Some(qp) = self.rdma.qps.get_mut(&qpn).filter(|_| last) {
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
        self.qp_event(qpn, AE_ACCESS, io);
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
        write_remote(self.remote_keys(), qpn, pdn, addr, rkey, data, io.mem)
            .map_err(|e| self.remote_access_error(qpn, e, io))
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
        read_remote(self.remote_keys(), qpn, pdn, addr, rkey, len, io.mem)
            .map_err(|e| self.remote_access_error(qpn, e, io))
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
        atomic_remote(self.remote_keys(), pdn, addr, rkey, aop, io.mem)
            .map_err(|e| self.remote_access_error(qpn, e, io))
    }

    /// Reads and checks the RQE at the RQ's CI ([`Qp::rqe_at_ci`]); `None` if the QP does not
    /// exist.
    pub(super) fn fetch_rqe(&self, qpn: u32, io: &Io<'_>) -> Option<Result<Rqe, u8>> {
        Some(self.rdma.qps.get(&qpn)?.rqe_at_ci(io.mem))
    }

    /// Consumes the RQE at the CI with error status `code`, in a CQE carrying `info`; returns
    /// its index, `None` if the QP does not exist.
    pub(super) fn fail_rqe(
        &mut self,
        qpn: u32,
        code: u8,
        info: UdInfo,
        io: &mut Io<'_>,
    ) -> Option<u16> {
        let index = self.rdma.qps.get_mut(&qpn)?.rq.consume();
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
        self.transport(qpn).receive_error(self, qpn, io);
        self.enter_error_with(qpn, Some(code), io);
    }

    /// Takes a segment of an incoming message into the RQE at the CI: scatters its data at
    /// its offset in the RQE's buffer; the last segment completes the RQE (`byte_len`).
    #[allow(clippy::too_many_arguments)]
    fn consume_rqe(
        &mut self,
        qpn: u32,
        opcode: u8,
        seg: RxSegment<'_>,
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
        let pdn = self.rdma.qps.get(&qpn).map_or(0, |q| q.pdn);
        if !seg.data.is_empty() {
            let keys = self.local_keys(qpn);
            if let Err(code) = scatter(keys, pdn, &rqe.sge, seg.offset, seg.data, io.mem) {
                self.consume_rqe_error(qpn, code, io);
                return Err(Nak::Remote(code));
            }
        }
        let Some(qp) = self.rdma.qps.get_mut(&qpn) else {
            return Err(Nak::NoQp);
        };
        if !seg.last {
            // More segments follow into the same RQE.
            qp.rx_next = seg.offset.saturating_add(seg.data.len() as u64);
            return Ok(Reply::Ack);
        }
        qp.rx_next = 0;
        let index = qp.rq.consume();
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
}

/// A segment of an incoming message for a receive WQE.
#[derive(Clone, Copy)]
struct RxSegment<'a> {
    data: &'a [u8],
    offset: u64,
    last: bool,
}

impl RxSegment<'_> {
    /// A whole message without payload (a Write with Immediate's completion).
    const WHOLE_EMPTY: RxSegment<'static> = RxSegment {
        data: &[],
        offset: 0,
        last: true,
    };
}

/// An RDMA Write of `data` at `addr` under `rkey` of PD `pdn` (for QP `qpn`'s trace).
fn write_remote(
    keys: Keys<'_>,
    qpn: u32,
    pdn: u32,
    addr: u64,
    rkey: u32,
    data: &[u8],
    mem: &mut dyn GuestMemory,
) -> Result<(), AccessErr> {
    // A zero-length RDMA Write touches no memory: its key and address are not checked
    // (InfiniBand, and what rsockets' control messages rely on).
    if data.is_empty() {
        return Ok(());
    }
    let p = keys.access(
        rkey,
        pdn,
        addr,
        data.len() as u64,
        access::REMOTE_WRITE,
        mem,
    )?;
    trace_data(qpn, "WRITE in", addr, rkey, &p, data);
    write_pieces(mem, &p, data).map_err(|()| AccessErr::Bounds)
}

/// An RDMA Read of `len` bytes at `addr` under `rkey` of PD `pdn`.
fn read_remote(
    keys: Keys<'_>,
    qpn: u32,
    pdn: u32,
    addr: u64,
    rkey: u32,
    len: u32,
    mem: &dyn GuestMemory,
) -> Result<Reply, AccessErr> {
    // Nor is that of a zero-length RDMA Read.
    if len == 0 {
        return Ok(Reply::Read(Vec::new()));
    }
    let p = keys.access(rkey, pdn, addr, u64::from(len), access::REMOTE_READ, mem)?;
    let mut data = Vec::new();
    read_pieces(mem, &p, &mut data).map_err(|()| AccessErr::Bounds)?;
    trace_data(qpn, "READ out", addr, rkey, &p, &data);
    Ok(Reply::Read(data))
}

/// An atomic on the aligned u64 at `addr` under `rkey` of PD `pdn`: the original value.
fn atomic_remote(
    keys: Keys<'_>,
    pdn: u32,
    addr: u64,
    rkey: u32,
    aop: AtomicOp,
    mem: &mut dyn GuestMemory,
) -> Result<Reply, AccessErr> {
    if addr % 8 != 0 {
        return Err(AccessErr::Bounds);
    }
    let pieces = keys.access(rkey, pdn, addr, 8, access::REMOTE_ATOMIC, mem)?;
    let mut old = Vec::new();
    if read_pieces(mem, &pieces, &mut old).is_err() || old.len() != 8 {
        return Err(AccessErr::Bounds);
    }
    let old = u64::from_le_bytes([
        old[0], old[1], old[2], old[3], old[4], old[5], old[6], old[7],
    ]);
    let new = match aop {
        AtomicOp::Cas { compare, swap } => (old == compare).then_some(swap),
        AtomicOp::Faa { add } => Some(old.wrapping_add(add)),
    };
    if let Some(new) = new {
        if write_pieces(mem, &pieces, &new.to_le_bytes()).is_err() {
            return Err(AccessErr::Bounds);
        }
    }
    Ok(Reply::Atomic(old))
}

#[cfg(test)]
mod tests {
    use super::super::mr::tests::tables;
    use super::*;
    use crate::testing::VecMemory;
    use crate::wire;

    #[test]
    fn remote_operations_move_data_only_through_valid_keys() {
        let mut mem = VecMemory::new(0x1_0000, 0x1000);
        let all = access::REMOTE_READ | access::REMOTE_WRITE | access::REMOTE_ATOMIC;
        let t = tables(all, &mem);
        let keys = Keys::new(&t, None);
        let stag = wire::stag(3, 1);
        assert_eq!(
            write_remote(keys, 5, 1, 0x4008, stag, &[1, 2], &mut mem),
            Ok(())
        );
        assert_eq!(mem.bytes()[8..10], [1, 2]);
        assert_eq!(
            write_remote(keys, 5, 1, 0, 0xdead, &[], &mut mem),
            Ok(()),
            "a zero-length Write checks nothing"
        );
        let read = read_remote(keys, 5, 1, 0x4008, stag, 2, &mem);
        assert!(matches!(read, Ok(Reply::Read(d)) if d == [1, 2]));
        assert!(matches!(
            read_remote(keys, 5, 2, 0x4008, stag, 2, &mem),
            Err(AccessErr::Pd)
        ));
        let faa = AtomicOp::Faa { add: 5 };
        assert!(matches!(
            atomic_remote(keys, 1, 0x4004, stag, faa, &mut mem),
            Err(AccessErr::Bounds)
        ));
        assert!(matches!(
            atomic_remote(keys, 1, 0x4008, stag, faa, &mut mem),
            Ok(Reply::Atomic(0x201))
        ));
        let cas = |compare| AtomicOp::Cas { compare, swap: 9 };
        assert!(matches!(
            atomic_remote(keys, 1, 0x4008, stag, cas(1), &mut mem),
            Ok(Reply::Atomic(0x206))
        ));
        assert_eq!(mem.bytes()[8], 6, "no swap when the compare fails");
        assert!(matches!(
            atomic_remote(keys, 1, 0x4008, stag, cas(0x206), &mut mem),
            Ok(Reply::Atomic(0x206))
        ));
        assert_eq!(mem.bytes()[8], 9);
        let rights = tables(access::REMOTE_READ, &mem);
        let keys = Keys::new(&rights, None);
        assert_eq!(
            write_remote(keys, 5, 1, 0x4000, stag, &[1], &mut mem),
            Err(AccessErr::Rights)
        );
    }
}
