// SPDX-License-Identifier: GPL-2.0

//! The requester: SQ WQEs turned into requests or local operations, handed to the QP's
//! transport (`device::transport`), the retransmission timers, and the responses to our
//! requests (READ and atomic sinks).

use std::time::Duration;

use super::mr::{write_pieces, AccessErr};
use super::{trace_data, DataPath, MAX_MESSAGE, PENDING_COST};
use crate::device::objects::{Cursor, MsgKind, Pending, Rdma, Source};
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
    /// A message to send in segments; the pending entry waits for their answers.
    Message(MsgKind, Pending),
    /// Completed locally with a status.
    Done(Pending),
}

/// What sending the next segment of a QP's message came to.
#[derive(Debug, PartialEq, Eq)]
enum Segment {
    /// Nothing to send (no message in progress, or the QP is gone).
    Nothing,
    /// The windows have no room: the QP waits for answers.
    Full,
    /// A segment went out (or failed locally, completing the message).
    Sent,
}

impl DataPath<'_> {
    /// Processes the SQ of an RTS QP up to its PI, as far as the windows
    /// ([`super::QP_WINDOW`], [`super::PORT_WINDOW`]) allow: a message goes out in segments, the next WQE is taken only once
    /// every segment of the one before is sent.
    pub(in crate::device) fn process_sq(&mut self, qpn: u32, io: &mut Io<'_>) {
        loop {
            let Some(qp) = self.rdma.qps.get(&qpn) else {
                return;
            };
            // Nothing overtakes a lost request waiting to be retransmitted.
            if !qp.lost.is_empty() {
                break;
            }
            // A message being sent goes on in RTS, and in SQD (it was in progress).
            if qp.cursor.is_some() {
                if !matches!(qp.state, QpState::Rts | QpState::Sqd) {
                    break;
                }
                match self.send_segment(qpn, io) {
                    Segment::Sent => continue,
                    Segment::Full | Segment::Nothing => break,
                }
            }
            if qp.state != QpState::Rts || qp.sq.pi == qp.sq.ci {
                break;
            }
            // Every WQE holds PENDING_COST of the windows until it completes.
            if !self.admit(qpn, PENDING_COST) {
                break;
            }
            let Some(qp) = self.rdma.qps.get(&qpn) else {
                return;
            };
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
                self.release(qpn, PENDING_COST);
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
                self.release(qpn, PENDING_COST);
                break;
            }
            let mut pending = Pending::new(ci, hdr.opcode, hdr.ce);
            pending.charge = PENDING_COST;
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
                Action::Message(kind, p) => {
                    qp.sq_psn = (qp.sq_psn + 1) & 0xff_ffff;
                    qp.outstanding.push_back(p);
                    qp.cursor = Some(Cursor { kind, next: 0 });
                    // The first segment now (its local errors complete the WQE before
                    // anything is sent), the rest as the windows allow.
                    if self.send_segment(qpn, io) == Segment::Full {
                        break;
                    }
                }
            }
            self.drain_completions(qpn, io);
        }
    }

    /// Sends the next segment of QP `qpn`'s message in progress (the last outstanding WQE's)
    /// if the windows have room for it.
    fn send_segment(&mut self, qpn: u32, io: &mut Io<'_>) -> Segment {
        let Some(qp) = self.rdma.qps.get(&qpn) else {
            return Segment::Nothing;
        };
        let (Some(cursor), Some(p)) = (qp.cursor.as_ref(), qp.outstanding.back()) else {
            return Segment::Nothing;
        };
        let i = cursor.next;
        let (offset, n) = p.segment(i);
        let last = i + 1 >= p.segments();
        if !self.admit(qpn, n) {
            return Segment::Full;
        }
        let Some(qp) = self.rdma.qps.get(&qpn) else {
            return Segment::Nothing;
        };
        let (pdn, kind) = match qp.cursor.as_ref() {
            Some(c) => (qp.pdn, c.kind.clone()),
            None => return Segment::Nothing,
        };
        let built: Result<Request, u8> = match kind {
            MsgKind::Send {
                src,
                imm,
                inv,
                solicited,
            } => self
                .segment_data(qpn, pdn, &src, offset, n, io.mem)
                .map(|data| Request::Send {
                    data,
                    offset,
                    last,
                    imm: imm.filter(|_| last),
                    inv: inv.filter(|_| last),
                    solicited: solicited && last,
                }),
            MsgKind::Write {
                src,
                addr,
                rkey,
                imm,
                solicited,
            } => self
                .segment_data(qpn, pdn, &src, offset, n, io.mem)
                .map(|data| {
                    let addr = addr.wrapping_add(offset);
                    trace_data(qpn, "WRITE out", addr, rkey, &[], &data);
                    Request::Write {
                        addr,
                        rkey,
                        data,
                        offset,
                        last,
                        imm: imm.filter(|_| last),
                        solicited: solicited && last,
                    }
                }),
            MsgKind::Read { addr, rkey } => Ok(Request::Read {
                addr: addr.wrapping_add(offset),
                rkey,
                // A segment is at most 64 KiB.
                len: n as u32,
            }),
            MsgKind::Atomic { addr, rkey, op } => Ok(Request::Atomic { addr, rkey, op }),
        };
        let Some(qp) = self.rdma.qps.get_mut(&qpn) else {
            return Segment::Nothing;
        };
        let req = match built {
            Ok(req) => req,
            Err(status) => {
                // A local error in a segment completes the WQE; nothing more is sent.
                qp.cursor = None;
                if let Some(p) = qp.outstanding.back_mut() {
                    p.status = Some(status);
                }
                self.release(qpn, n);
                self.drain_completions(qpn, io);
                return Segment::Sent;
            }
        };
        let seq = qp.next_seq;
        qp.next_seq = qp.next_seq.wrapping_add(1);
        if let Some(p) = qp.outstanding.back_mut() {
            p.seq.get_or_insert(seq);
            p.segs += 1;
            p.charge += n;
        }
        match qp.cursor.as_mut() {
            Some(c) if !last => c.next = i + 1,
            _ => qp.cursor = None,
        }
        self.transport(qpn).send_request(self, qpn, seq, req);
        Segment::Sent
    }

    /// Bytes `[offset, offset + n)` of a message's payload.
    fn segment_data(
        &self,
        qpn: u32,
        pdn: u32,
        src: &Source,
        offset: u64,
        n: u64,
        mem: &dyn GuestMemory,
    ) -> Result<Vec<u8>, u8> {
        match src {
            Source::Inline(data) => {
                let start = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(data.len());
                let end = start
                    .saturating_add(usize::try_from(n).unwrap_or(usize::MAX))
                    .min(data.len());
                Ok(data[start..end].to_vec())
            }
            Source::Sges(sges) => self.local_keys(qpn).gather_range(pdn, sges, offset, n, mem),
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

    /// The payload source of a SEND/WRITE WQE (inline bytes or SGEs) and its length, at most
    /// [`MAX_MESSAGE`].
    fn source(hdr: &SqeHeader, wqe: &[u8], sgl_off: usize) -> Result<(Source, u64), u8> {
        match Sgl::decode(hdr, wqe, sgl_off).ok_or(wc::SEND_FORMAT)? {
            Sgl::Inline(data) => Ok((Source::Inline(data.to_vec()), data.len() as u64)),
            Sgl::Sges(sges) => {
                let total: u64 = sges.iter().map(|s| u64::from(s.len)).sum();
                if total > MAX_MESSAGE {
                    return Err(wc::GENERAL);
                }
                Ok((Source::Sges(sges), total))
            }
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
        let result: Result<Option<MsgKind>, u8> = match hdr.opcode {
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
                    let (src, len) = Self::source(hdr, wqe, SendSqe::SGL_OFFSET)?;
                    p.len = len;
                    p.byte_len = len as u32;
                    Ok(Some(MsgKind::Send {
                        src,
                        imm: (hdr.opcode == op::SEND_WITH_IMM).then_some(s.imm),
                        inv: (hdr.opcode == op::SEND_WITH_INV).then(|| s.inv_stag()),
                        solicited: hdr.se,
                    }))
                })
            }
            op::WRITE | op::WRITE_WITH_IMM => {
                WriteSqe::decode(wqe).ok_or(wc::SEND_FORMAT).and_then(|w| {
                    let (src, len) = Self::source(hdr, wqe, WriteSqe::SGL_OFFSET)?;
                    p.len = len;
                    p.byte_len = len as u32;
                    Ok(Some(MsgKind::Write {
                        src,
                        addr: w.raddr,
                        rkey: w.rkey,
                        imm: (hdr.opcode == op::WRITE_WITH_IMM).then_some(w.imm),
                        solicited: hdr.se,
                    }))
                })
            }
            op::READ | op::READ_WITH_INV => match ReadSqe::decode(wqe) {
                None => Err(wc::SEND_FORMAT),
                Some(r) if u64::from(r.length) > MAX_MESSAGE => Err(wc::GENERAL),
                // The sink is checked a segment at a time as the responses land (the check
                // of the whole range would translate every page of it at once).
                Some(r) => self
                    .local_keys(qpn)
                    .access(
                        r.lkey,
                        pdn,
                        r.laddr,
                        u64::from(r.length).min(crate::fabric::SEGMENT),
                        access::LOCAL_WRITE,
                        io.mem,
                    )
                    .map_err(AccessErr::local)
                    .map(|_| {
                        p.len = u64::from(r.length);
                        p.byte_len = r.length;
                        p.sink = Some((r.laddr, r.length, r.lkey));
                        if hdr.opcode == op::READ_WITH_INV {
                            p.inv_after = Some(r.inv_stag);
                        }
                        Some(MsgKind::Read {
                            addr: r.remote.addr,
                            rkey: r.remote.key,
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
                        p.len = 8;
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
                        Some(MsgKind::Atomic {
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
            Ok(Some(kind)) => Action::Message(kind, p),
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

    /// A response to one of our requests (one segment of a message).
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
        let Some(idx) = qp.outstanding.iter().position(|p| p.covers(seq)) else {
            // Flushed already, or the QP was reset.
            return;
        };
        let p = &mut qp.outstanding[idx];
        // The segment's data leaves the windows.
        let Some(first) = p.seq else {
            return;
        };
        let (offset, n) = p.segment(seq - first);
        p.charge = p.charge.saturating_sub(n);
        self.release(qpn, n);
        let Some(p) = self.rdma.qps.get(&qpn).map(|q| q.outstanding[idx].clone()) else {
            return;
        };
        if p.status.is_some() {
            self.resume_waiting(io);
            return;
        }
        let pdn = self.rdma.qps.get(&qpn).map_or(0, |q| q.pdn);
        let status = match result {
            Ok(Reply::Ack) => wc::SUCCESS,
            // iWARP: a Read Response is a tagged write into the sink, which must grant remote
            // write.
            Ok(Reply::Read(data)) => {
                let need = self.transport(qpn).read_sink_access();
                let status = self.deliver_sink(qpn, pdn, &p, offset, &data, need, io);
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
                self.deliver_sink(qpn, pdn, &p, 0, &v.to_le_bytes(), access::LOCAL_WRITE, io)
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
        let answered = p.answered + 1;
        let done = status != wc::SUCCESS || answered >= p.segments();
        let status = match (status, p.inv_after) {
            (wc::SUCCESS, Some(stag)) if done => match self.rdma.invalidate(stag, pdn, false) {
                Ok(()) => wc::SUCCESS,
                Err(s) => s,
            },
            (s, _) => s,
        };
        if let Some(qp) = self.rdma.qps.get_mut(&qpn) {
            let last = qp.outstanding.len() == idx + 1;
            if let Some(e) = qp.outstanding.get_mut(idx) {
                e.answered = answered;
                if done {
                    e.status = Some(status);
                }
            }
            if status != wc::SUCCESS && last {
                // A failed message sends nothing more.
                qp.cursor = None;
            }
        }
        self.drain_completions(qpn, io);
        self.process_sq(qpn, io);
        self.resume_waiting(io);
    }

    /// Writes READ data or an atomic's original value into the local sink.
    #[allow(clippy::too_many_arguments)]
    fn deliver_sink(
        &mut self,
        qpn: u32,
        pdn: u32,
        p: &Pending,
        offset: u64,
        data: &[u8],
        need: u8,
        io: &mut Io<'_>,
    ) -> u8 {
        let Some((addr, len, lkey)) = p.sink else {
            return wc::GENERAL;
        };
        if offset.saturating_add(data.len() as u64) > u64::from(len) {
            return wc::SEND_BOUNDS;
        }
        let addr = addr.wrapping_add(offset);
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
