// SPDX-License-Identifier: GPL-2.0

//! The requester: SQ WQEs turned into requests or local operations, handed to the QP's
//! transport (`device::transport`), the retransmission timers, and the responses to our
//! requests (READ and atomic sinks).

use std::time::Duration;

use super::mr::{write_pieces, AccessErr};
use super::{trace_data, DataPath, MAX_MESSAGE};
use crate::device::objects::{Pending, Rdma};
use crate::device::Oddity;
use crate::fabric::{AtomicOp, Body, Nak, Packet, Reply, Request};
use crate::io::{GuestMemory, Io};
use crate::wire::{
    access, op, wc, AtomicSqe, LocalInvSqe, QpState, ReadSqe, SendSqe, Sgl, SqeHeader, WriteSqe,
    MAX_WQE_SIZE, QP_TYPE_UD, SQ_WQEBB_SIZE,
};

impl Rdma {
    /// When the earliest retransmission timer fires.
    pub(in crate::device) fn next_retransmit(&self) -> Option<Duration> {
        self.retransmit.values().min().copied()
    }
}

/// What a WQE turned into.
enum Action {
    /// A request to send; the pending entry waits for its response.
    Request(Request, Pending),
    /// Completed locally with a status.
    Done(Pending),
}

impl DataPath<'_> {
    /// Processes the SQ of an RTS QP up to its PI.
    pub(in crate::device) fn process_sq(&mut self, qpn: u32, io: &mut Io<'_>) {
        loop {
            let Some(qp) = self.rdma.qps.get(&qpn) else {
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
            self.wire.stats.tx_request();
            let Some(qp) = self.rdma.qps.get_mut(&qpn) else {
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
                    qp.outstanding.push_back(p);
                    self.transport(qpn).send_request(self, qpn, seq, req);
                }
            }
            self.drain_completions(qpn, io);
        }
    }

    /// Fires every retransmission timer that is due; returns how many.
    pub(in crate::device) fn run_retransmits(&mut self, now: Duration, io: &mut Io<'_>) -> usize {
        let due: Vec<u32> = self
            .rdma
            .retransmit
            .iter()
            .filter(|&(_, &t)| t <= now)
            .map(|(&qpn, _)| qpn)
            .collect();
        for &qpn in &due {
            self.rdma.retransmit.remove(&qpn);
            self.transport(qpn).retransmit(self, qpn, io);
        }
        due.len()
    }

    /// The payload of a SEND/WRITE WQE: inline bytes or gathered SGEs.
    fn payload(
        &self,
        qpn: u32,
        pdn: u32,
        hdr: &SqeHeader,
        wqe: &[u8],
        sgl_off: usize,
        mem: &dyn GuestMemory,
    ) -> Result<Vec<u8>, u8> {
        match Sgl::decode(hdr, wqe, sgl_off).ok_or(wc::SEND_FORMAT)? {
            Sgl::Inline(data) => Ok(data.to_vec()),
            Sgl::Sges(sges) => self.local_keys(qpn).gather(pdn, &sges, mem),
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
        let Some(qp) = self.rdma.qps.get(&qpn) else {
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
                    let data = self.payload(qpn, pdn, hdr, wqe, SendSqe::SGL_OFFSET, io.mem)?;
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
                    let data = self.payload(qpn, pdn, hdr, wqe, WriteSqe::SGL_OFFSET, io.mem)?;
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
                    .local_keys(qpn)
                    .access(
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
                Some(a) if self.caps.atomic => self
                    .local_keys(qpn)
                    .access(
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
            op::REG_MR => self.rdma.fast_register(pdn, wqe).map(|()| None),
            op::LOCAL_INV => LocalInvSqe::decode(wqe)
                .ok_or(wc::SEND_FORMAT)
                .and_then(|l| self.rdma.invalidate(l.stag, pdn, true))
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

    /// A response to one of our requests.
    pub(in crate::device) fn response(&mut self, pkt: Packet, io: &mut Io<'_>) {
        let Body::Response { seq, result } = pkt.body else {
            return;
        };
        let qpn = pkt.dst_qpn;
        let Some(qp) = self.rdma.qps.get_mut(&qpn) else {
            return;
        };
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
            Ok(Reply::Read(data)) => {
                let need = self.transport(qpn).read_sink_access();
                let status = self.deliver_sink(qpn, pdn, &p, &data, need, io);
                if status == wc::SEND_ACCESS
                    && need & access::REMOTE_WRITE != 0
                    && self.warned.dp_error()
                {
                    log::warn!(
                        "QP {qpn}: RDMA Read sink {:#x} does not grant remote write, which an \
                         iWARP Read Response (a tagged write) needs: status {status}",
                        p.sink.map_or(0, |s| s.2)
                    );
                }
                status
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
            (wc::SUCCESS, Some(stag)) => match self.rdma.invalidate(stag, pdn, false) {
                Ok(()) => wc::SUCCESS,
                Err(s) => s,
            },
            (s, _) => s,
        };
        if let Some(qp) = self.rdma.qps.get_mut(&qpn) {
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
        match self
            .local_keys(qpn)
            .access(lkey, pdn, addr, data.len() as u64, need, io.mem)
        {
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
