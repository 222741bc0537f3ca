// SPDX-License-Identifier: GPL-2.0

//! The in-process network that connects every device of the process (erdma_rs_hw 7.2, §10.20).
//!
//! The model does not speak RoCEv2 on a wire; it exchanges RC *messages* and UD *datagrams*
//! between devices:
//!
//! * A device attaches a [`Port`] ([`Fabric::attach`]) with a [`Waker`]. It publishes the GIDs
//!   of its GID table ([`Port::set_gids`]); a request is addressed by destination GID (from the
//!   QP's address vector) and destination QPN, and is delivered to the port that owns the GID
//!   (the sender's own port first, so loopback never leaves the device; otherwise the
//!   lowest-numbered port with that GID). Responses go back to the requesting port by number.
//! * Delivery puts the [`Packet`] into the destination's inbox and calls its waker **after**
//!   the fabric's lock is released. The transport's waker makes the destination device drain
//!   its inbox with its own guest memory later ([`crate::Device::run_fabric`]): a device never
//!   touches another device's state, and nobody holds two device locks.
//! * Each inbox is a FIFO and each device handles its inbox in order, so messages between two
//!   QPs arrive in the order they were sent (RC ordering).
//! * Requests beyond [`MAX_INBOX`] queued packets or [`MAX_INBOX_BYTES`] are refused
//!   ([`SendError::Congested`], with
//!   the packet handed back in [`Refused`]: for the requester it is lost, and it retransmits
//!   it later). Responses are never refused: they are bounded by the requests.
//! * A responder that cannot take a request (no such QP, or one not able to receive) drops it,
//!   as an adapter does; on a network nothing would come back and the requester's timer would
//!   run out. The model sends the request back as [`Body::Lost`], so that the requester can
//!   retransmit it when its timer fires.
//! * iWARP (§7.1, §10.20): a QP that reaches RTS binds its connection ([`Port::bind`]): a
//!   [`Binding`] of the 4-tuple, the QP's own cookie (CREATE_QP's reply, which its MPA frame
//!   carried to the peer) and the peer's cookie (from the peer's MPA frame, handed over at
//!   RTS). Its messages ([`StreamMsg`], in [`Body::Stream`]) go only to the QP whose binding
//!   names it back ([`Binding::peer`]: the mirrored tuple, the two cookies swapped), which the
//!   fabric writes into [`Packet::dst_qpn`] ([`Port::send_stream`]). The cookies are random
//!   (30 bits each, chosen by the adapter): a QP of another guest that binds the same tuple
//!   with cookies of its choice neither receives the stream nor can inject into it, and the
//!   legitimate pair does not notice it. A tuple may carry several bindings, at most
//!   [`MAX_CLAIMS`] of one port (so another port can never use up the tuple for the QP that
//!   owns the connection); a QP holds at most one binding; bindings go with their port. A
//!   message that no binding answers (the peer is not in RTS yet, or the cookies do not
//!   match) is refused ([`SendError::Unreachable`]): for the sender it is lost, and it
//!   retransmits it. Each message carries its TCP sequence number and occupies
//!   [`StreamMsg::stream_len`] bytes of the sender's sequence space. TCP acknowledgements are
//!   not stream messages: the ACK of a Send or Write is a [`Body::Response`], as on RoCEv2.
//! * A [`Datagram`] (UD SEND) is addressed like a request but never answered: it carries what
//!   the receiver needs to build the GRH area and the UD completion (addresses, traffic class,
//!   flow label, hop limit, SL, Q_Key). Datagrams beyond [`MAX_INBOX`] are refused like requests
//!   (the sender drops them: UD is unreliable).
//!
//! Lock order: a device's lock → the fabric's lock (leaf, never held while calling out).

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, PoisonError};

use crate::cmdq::{Gid, NetType};

/// Number of a port on the fabric.
pub type PortId = u32;

/// Most packets queued in one inbox before requests are refused.
pub const MAX_INBOX: usize = 1 << 16;

/// Most bytes queued in one inbox (payload plus [`PACKET_COST`] a packet) before requests and
/// datagrams are refused (responses are not: the requests they answer were counted).
pub const MAX_INBOX_BYTES: u64 = 32 << 20;

/// What a queued packet costs besides its payload (its header and bookkeeping), for
/// [`MAX_INBOX_BYTES`].
pub const PACKET_COST: u64 = 256;

/// Largest payload one packet carries: longer RC messages travel in segments of this size
/// (the last one shorter), each answered on its own.
pub const SEGMENT: u64 = 64 << 10;

/// Most packets one [`Port::take_inbox`] hands out (the rest wait for the next call), so that
/// a device handles its inbox in bounded pieces.
pub const INBOX_BATCH: usize = 1024;

/// Most iWARP bindings one port may hold on one 4-tuple ([`Port::bind`]). A connection needs
/// one; the bound is per port so that the bindings of other ports (other guests) on a tuple
/// never refuse the RTS of the QP that owns the connection.
pub const MAX_CLAIMS: usize = 4;

/// How the fabric tells a device that its inbox has packets.
pub trait Waker: Send + Sync {
    /// Called without any fabric lock held; must not block on the device's lock.
    fn wake(&self);
}

/// A waker that does nothing (the device is pumped by hand, as in unit tests).
#[derive(Debug, Default)]
pub struct NoWaker;

impl Waker for NoWaker {
    fn wake(&self) {}
}

/// An atomic operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    /// Compare and swap.
    Cas {
        /// Compare value.
        compare: u64,
        /// Swap value.
        swap: u64,
    },
    /// Fetch and add.
    Faa {
        /// Addend.
        add: u64,
    },
}

/// An RC request. A message longer than [`SEGMENT`] bytes travels as several requests, one
/// per segment, each answered on its own: Send segments carry their offset in the message
/// (the receive WQE is consumed by the last), Write segments their own remote address, Read
/// requests ask for at most a segment each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// SEND, SEND_WITH_IMM, SEND_WITH_INV: consumes an RQE (with its last segment).
    Send {
        /// Payload (this segment's, at most [`SEGMENT`] bytes).
        data: Vec<u8>,
        /// Offset of this segment in the message.
        offset: u64,
        /// The message's last segment (it carries the immediate, the rkey to invalidate and
        /// the SE flag, and completes the receive WQE).
        last: bool,
        /// Immediate (network order) for SEND_WITH_IMM.
        imm: Option<[u8; 4]>,
        /// rkey to invalidate (SEND_WITH_INV).
        inv: Option<u32>,
        /// SE flag.
        solicited: bool,
    },
    /// WRITE, WRITE_WITH_IMM (the latter consumes an RQE).
    Write {
        /// Remote address (of this segment).
        addr: u64,
        /// rkey.
        rkey: u32,
        /// Payload (this segment's, at most [`SEGMENT`] bytes).
        data: Vec<u8>,
        /// Offset of this segment in the message (the last segment's offset plus its length is
        /// the byte count a WRITE_WITH_IMM completes with).
        offset: u64,
        /// The message's last segment (it carries the immediate and the SE flag).
        last: bool,
        /// Immediate (network order) for WRITE_WITH_IMM.
        imm: Option<[u8; 4]>,
        /// SE flag.
        solicited: bool,
    },
    /// READ request.
    Read {
        /// Remote address.
        addr: u64,
        /// rkey.
        rkey: u32,
        /// Length.
        len: u32,
    },
    /// Atomic request on 8 bytes.
    Atomic {
        /// Remote address (8-byte aligned).
        addr: u64,
        /// rkey.
        rkey: u32,
        /// The operation.
        op: AtomicOp,
    },
}

impl Request {
    /// Payload bytes carried.
    pub fn payload_len(&self) -> usize {
        match self {
            Request::Send { data, .. } | Request::Write { data, .. } => data.len(),
            Request::Read { .. } => 0,
            Request::Atomic { .. } => 8,
        }
    }
}

/// An iWARP connection's 4-tuple as one end sees it (MODIFY_QP RTS, §3.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Conn {
    /// Local IPv4 address.
    pub src_ip: Ipv4Addr,
    /// Local TCP port.
    pub src_port: u16,
    /// Remote IPv4 address.
    pub dst_ip: Ipv4Addr,
    /// Remote TCP port.
    pub dst_port: u16,
}

impl Conn {
    /// The same connection seen from the other end.
    pub fn mirror(self) -> Self {
        Conn {
            src_ip: self.dst_ip,
            src_port: self.dst_port,
            dst_ip: self.src_ip,
            dst_port: self.src_port,
        }
    }
}

/// What an iWARP QP binds on the fabric at RTS: its connection and the two cookies of the MPA
/// exchange (§7.1). The fabric delivers a stream message only between two bindings that name
/// each other ([`Binding::peer`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Binding {
    /// The 4-tuple, this end's view.
    pub conn: Conn,
    /// This QP's own cookie (CREATE_QP's reply; its MPA frame carried it to the peer).
    pub cookie: u32,
    /// The peer's cookie (from the peer's MPA frame, handed over at RTS).
    pub peer_cookie: u32,
}

impl Binding {
    /// The binding the peer holds: the mirrored tuple, the two cookies swapped.
    pub fn peer(self) -> Self {
        Binding {
            conn: self.conn.mirror(),
            cookie: self.peer_cookie,
            peer_cookie: self.cookie,
        }
    }

    /// The lowest and highest bindings of tuple `conn` in the fabric's order.
    fn range_of(conn: Conn) -> std::ops::RangeInclusive<Self> {
        let at = |cookie| Binding {
            conn,
            cookie,
            peer_cookie: cookie,
        };
        at(0)..=at(u32::MAX)
    }
}

/// Why [`Port::bind`] refused a binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindError {
    /// The QP holds a binding already (this one): a QP holds at most one.
    QpBound(Binding),
    /// QP `qpn` of port `port` holds the same binding (the same tuple and the same two cookies:
    /// messages could not tell the two apart).
    Taken {
        /// The port that holds it.
        port: PortId,
        /// The QP that holds it.
        qpn: u32,
    },
    /// The port holds [`MAX_CLAIMS`] bindings on the tuple already.
    Full,
}

impl fmt::Display for BindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BindError::QpBound(b) => write!(f, "the QP is bound to {} already", b.conn),
            BindError::Taken { port, qpn } => write!(
                f,
                "QP {qpn} of fabric port {port} holds the tuple with the same cookies"
            ),
            BindError::Full => write!(
                f,
                "this port holds {MAX_CLAIMS} bindings on the tuple already"
            ),
        }
    }
}

impl fmt::Display for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}-{}:{}",
            self.src_ip, self.src_port, self.dst_ip, self.dst_port
        )
    }
}

/// Bytes of the MPA length field that starts every FPDU (no markers, no CRC: §7.1).
pub const MPA_HEADER: u64 = 2;
/// DDP/RDMAP header of a tagged message (RDMA Write, RDMA Read Response): control, STag, TO.
pub const TAGGED_HEADER: u64 = 14;
/// DDP/RDMAP header of an untagged message (Send, Read Request, atomics, Terminate): control,
/// queue number, MSN, MO, invalidate STag.
pub const UNTAGGED_HEADER: u64 = 18;
/// Body of an RDMA Read Request: sink STag and TO, size, source STag and TO.
pub const READ_REQUEST_BODY: u64 = 28;
/// Body of an atomic request: STag, TO, the two operands, a reserved word.
pub const ATOMIC_REQUEST_BODY: u64 = 32;
/// Body of an atomic response: the request's number and the original value.
pub const ATOMIC_RESPONSE_BODY: u64 = 12;
/// Body of a Terminate: its control word and the header of the message it is about.
pub const TERMINATE_BODY: u64 = 28;

/// An iWARP message on a connection's byte stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamMsg {
    /// Send*, RDMA Write*, RDMA Read Request or an atomic request; `id` numbers the requests
    /// of the sending QP (what the responses name).
    Request {
        /// The request's number.
        id: u64,
        /// The request.
        req: Request,
    },
    /// RDMA Read Response to request `id` (a tagged write into the requester's sink).
    ReadResponse {
        /// The request's number.
        id: u64,
        /// The data.
        data: Vec<u8>,
    },
    /// Atomic response to request `id`.
    AtomicResponse {
        /// The request's number.
        id: u64,
        /// The original value.
        value: u64,
    },
    /// The sender ended the connection (an error it detected, or a local stop): the receiver's
    /// QP goes to ERROR. `status` is the completion status (§5.7) of the receiver's oldest
    /// unanswered request (the one the error is about); `None`: everything is flushed.
    Terminate {
        /// Status for the oldest unanswered request.
        status: Option<u8>,
    },
}

impl StreamMsg {
    /// Bytes of TCP sequence space the message occupies: one FPDU, i.e. the MPA length field,
    /// the DDP/RDMAP header (tagged or untagged) and the payload (data, or the fixed body of a
    /// Read Request, atomic or Terminate), padded to a multiple of 4. Wraps like TCP sequence
    /// numbers (messages are at most 1 GiB).
    pub fn stream_len(&self) -> u32 {
        let (header, body) = match self {
            StreamMsg::Request {
                req: Request::Send { data, .. },
                ..
            } => (UNTAGGED_HEADER, data.len() as u64),
            StreamMsg::Request {
                req: Request::Write { data, .. },
                ..
            } => (TAGGED_HEADER, data.len() as u64),
            StreamMsg::Request {
                req: Request::Read { .. },
                ..
            } => (UNTAGGED_HEADER, READ_REQUEST_BODY),
            StreamMsg::Request {
                req: Request::Atomic { .. },
                ..
            } => (UNTAGGED_HEADER, ATOMIC_REQUEST_BODY),
            StreamMsg::ReadResponse { data, .. } => (TAGGED_HEADER, data.len() as u64),
            StreamMsg::AtomicResponse { .. } => (UNTAGGED_HEADER, ATOMIC_RESPONSE_BODY),
            StreamMsg::Terminate { .. } => (UNTAGGED_HEADER, TERMINATE_BODY),
        };
        let fpdu = MPA_HEADER
            .saturating_add(header)
            .saturating_add(body)
            .saturating_add(3)
            & !3;
        // TCP sequence arithmetic is modulo 2^32.
        (fpdu & u64::from(u32::MAX)) as u32
    }

    /// Payload bytes carried (for the traffic counters).
    pub fn payload_len(&self) -> usize {
        match self {
            StreamMsg::Request { req, .. } => req.payload_len(),
            StreamMsg::ReadResponse { data, .. } => data.len(),
            StreamMsg::AtomicResponse { .. } => 8,
            StreamMsg::Terminate { .. } => 0,
        }
    }
}

/// A UD datagram (SEND or SEND_WITH_IMM on a UD QP, erdma_rs_hw 5.4): delivered to one QP,
/// never answered. The addressing fields come from the sender's address handle and GID table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Datagram {
    /// The Q_Key the sender put in its WQE; the receiving QP's Q_Key must equal it.
    pub qkey: u32,
    /// Payload.
    pub data: Vec<u8>,
    /// Immediate (network order) for SEND_WITH_IMM.
    pub imm: Option<[u8; 4]>,
    /// SE flag.
    pub solicited: bool,
    /// The AV's network type: which header the receiver writes into the GRH area.
    pub net_type: NetType,
    /// The AV's traffic class (IPv4 TOS).
    pub traffic_class: u8,
    /// The AV's flow label (20 bits; IPv6 only).
    pub flow_label: u32,
    /// The AV's hop limit (IPv4 TTL).
    pub hop_limit: u8,
    /// The AV's service level (reported in the receive CQE).
    pub sl: u8,
    /// Source GID: the sender's GID table entry at the AV's source GID index.
    pub sgid: Gid,
    /// Destination GID (the AV's).
    pub dgid: Gid,
}

/// Why a request failed at the responder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nak {
    /// The QP went away while the request executed: the requester gives up with "retry
    /// exceeded".
    NoQp,
    /// The responder could not hold any more messages waiting for receive WQEs.
    RnrExceeded,
    /// A remote error; the completion status (§5.7, 2..7) the requester reports.
    Remote(u8),
}

/// What a successful response carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// ACK of a SEND or WRITE.
    Ack,
    /// READ response data.
    Read(Vec<u8>),
    /// The original value of an atomic.
    Atomic(u64),
}

/// The body of a packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// A request with its sequence number (per requester QP).
    Request {
        /// Sequence number.
        seq: u64,
        /// The request.
        req: Request,
    },
    /// A response to request `seq`.
    Response {
        /// Sequence number of the request.
        seq: u64,
        /// The result.
        result: Result<Reply, Nak>,
    },
    /// A UD datagram (no response).
    Datagram(Datagram),
    /// Request `seq`, back at its requester: the responder dropped it (no such QP, or not able
    /// to receive). On a network nothing would come back; the requester keeps it for its
    /// retransmission timer.
    Lost {
        /// Sequence number.
        seq: u64,
        /// The request.
        req: Request,
    },
    /// iWARP: a message on the byte stream of connection `conn` (the sender's view), routed
    /// to the QP bound to `conn.mirror()`.
    Stream {
        /// The sender's 4-tuple.
        conn: Conn,
        /// TCP sequence number of the message's first byte (the sender's SND.NXT).
        seq: u32,
        /// The peer cookie the sender was given at RTS: the cookie of the QP it means to
        /// reach (which checks it again).
        cookie: u32,
        /// The message.
        msg: StreamMsg,
    },
}

/// A message between two QPs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    /// The sending port (filled in by the fabric).
    pub src_port: PortId,
    /// The sending QP.
    pub src_qpn: u32,
    /// The destination QP.
    pub dst_qpn: u32,
    /// What it carries.
    pub body: Body,
}

impl Packet {
    /// Payload bytes (for the traffic counters).
    pub fn payload_len(&self) -> usize {
        match &self.body {
            Body::Request { req, .. } => req.payload_len(),
            Body::Datagram(d) => d.data.len(),
            Body::Response {
                result: Ok(Reply::Read(d)),
                ..
            } => d.len(),
            Body::Response {
                result: Ok(Reply::Atomic(_)),
                ..
            } => 8,
            Body::Stream { msg, .. } => msg.payload_len(),
            Body::Response { .. } | Body::Lost { .. } => 0,
        }
    }
}

/// Why a packet was not delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// No port owns the destination GID (or the destination port is gone).
    Unreachable,
    /// The destination inbox is full.
    Congested,
}

/// A packet the fabric did not deliver, handed back to its sender.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// Why.
    pub why: SendError,
    /// The packet.
    pub packet: Box<Packet>,
}

struct PortState {
    gids: Vec<Gid>,
    inbox: VecDeque<Packet>,
    /// Bytes queued in the inbox (payload plus [`PACKET_COST`] each).
    inbox_bytes: u64,
    waker: Arc<dyn Waker>,
}

#[derive(Default)]
struct Inner {
    next: PortId,
    ports: BTreeMap<PortId, PortState>,
    /// iWARP bindings → (port, QPN) of the QP that holds each (ordered by tuple first).
    bindings: BTreeMap<Binding, (PortId, u32)>,
    /// The binding each (port, QPN) holds: one at most.
    held: BTreeMap<(PortId, u32), Binding>,
}

impl Inner {
    /// Removes the binding QP `qpn` of port `port` holds, if any.
    fn unbind(&mut self, port: PortId, qpn: u32) {
        if let Some(b) = self.held.remove(&(port, qpn)) {
            self.bindings.remove(&b);
        }
    }
}

/// The network. Create one per process and attach every device.
#[derive(Default)]
pub struct Fabric {
    inner: Mutex<Inner>,
}

impl fmt::Debug for Fabric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.lock();
        f.debug_struct("Fabric")
            .field("ports", &inner.ports.len())
            .finish()
    }
}

impl Fabric {
    /// An empty fabric.
    pub fn new() -> Arc<Self> {
        Arc::new(Fabric::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Attaches a new port; `waker` is called whenever packets are queued for it.
    pub fn attach(self: &Arc<Self>, waker: Arc<dyn Waker>) -> Arc<Port> {
        let mut inner = self.lock();
        let id = inner.next;
        inner.next = inner.next.wrapping_add(1);
        inner.ports.insert(
            id,
            PortState {
                gids: Vec::new(),
                inbox: VecDeque::new(),
                inbox_bytes: 0,
                waker,
            },
        );
        Arc::new(Port {
            fabric: self.clone(),
            id,
        })
    }

    /// Number of attached ports.
    pub fn ports(&self) -> usize {
        self.lock().ports.len()
    }

    fn deliver(&self, to: PortId, pkt: Packet, is_request: bool) -> Result<(), Refused> {
        let refused = |why, pkt| Refused {
            why,
            packet: Box::new(pkt),
        };
        let waker = {
            let mut inner = self.lock();
            let Some(port) = inner.ports.get_mut(&to) else {
                return Err(refused(SendError::Unreachable, pkt));
            };
            let bytes = pkt.payload_len() as u64 + PACKET_COST;
            if is_request
                && (port.inbox.len() >= MAX_INBOX || port.inbox_bytes + bytes > MAX_INBOX_BYTES)
            {
                return Err(refused(SendError::Congested, pkt));
            }
            port.inbox_bytes += bytes;
            port.inbox.push_back(pkt);
            port.waker.clone()
        };
        waker.wake();
        Ok(())
    }
}

/// A device's attachment to the [`Fabric`]. Dropping the last reference detaches it (queued
/// packets are dropped).
pub struct Port {
    fabric: Arc<Fabric>,
    id: PortId,
}

impl fmt::Debug for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Port").field("id", &self.id).finish()
    }
}

impl Drop for Port {
    fn drop(&mut self) {
        let mut inner = self.fabric.lock();
        inner.ports.remove(&self.id);
        let id = self.id;
        let qpns: Vec<u32> = inner
            .held
            .range((id, 0)..=(id, u32::MAX))
            .map(|(&(_, qpn), _)| qpn)
            .collect();
        for qpn in qpns {
            inner.unbind(id, qpn);
        }
    }
}

impl Port {
    /// The port number.
    pub fn id(&self) -> PortId {
        self.id
    }

    /// The fabric.
    pub fn fabric(&self) -> &Arc<Fabric> {
        &self.fabric
    }

    /// Publishes the GIDs the device owns (its GID table).
    pub fn set_gids(&self, gids: Vec<Gid>) {
        if let Some(p) = self.fabric.lock().ports.get_mut(&self.id) {
            p.gids = gids;
        }
    }

    /// The port that owns `gid`: this one first, then the lowest-numbered one.
    pub fn resolve(&self, gid: &Gid) -> Option<PortId> {
        let inner = self.fabric.lock();
        if inner
            .ports
            .get(&self.id)
            .is_some_and(|p| p.gids.contains(gid))
        {
            return Some(self.id);
        }
        inner
            .ports
            .iter()
            .find(|(_, p)| p.gids.contains(gid))
            .map(|(&id, _)| id)
    }

    /// Sends a request to port `to`.
    pub fn send_request(&self, to: PortId, mut pkt: Packet) -> Result<(), Refused> {
        pkt.src_port = self.id;
        self.fabric.deliver(to, pkt, true)
    }

    /// Sends a UD datagram to port `to` (refused like a request when the inbox is full).
    pub fn send_datagram(&self, to: PortId, mut pkt: Packet) -> Result<(), Refused> {
        pkt.src_port = self.id;
        self.fabric.deliver(to, pkt, true)
    }

    /// Sends a response to port `to` (dropped if the port is gone).
    pub fn send_response(&self, to: PortId, mut pkt: Packet) {
        pkt.src_port = self.id;
        if self.fabric.deliver(to, pkt, false).is_err() {
            log::debug!("fabric: response to detached port {to} dropped");
        }
    }

    /// Binds `binding` to QP `qpn` of this port (an iWARP QP reaching RTS). Refused if the QP
    /// holds a binding already, if another QP holds the same one, or if this port holds
    /// [`MAX_CLAIMS`] bindings on the tuple already. Bindings of other ports on the tuple (with
    /// other cookies) do not matter.
    pub fn bind(&self, qpn: u32, binding: Binding) -> Result<(), BindError> {
        let mut inner = self.fabric.lock();
        if let Some(&b) = inner.held.get(&(self.id, qpn)) {
            return Err(BindError::QpBound(b));
        }
        if let Some(&(port, qpn)) = inner.bindings.get(&binding) {
            return Err(BindError::Taken { port, qpn });
        }
        let ours = inner
            .bindings
            .range(Binding::range_of(binding.conn))
            .filter(|(_, &(port, _))| port == self.id)
            .count();
        if ours >= MAX_CLAIMS {
            return Err(BindError::Full);
        }
        inner.bindings.insert(binding, (self.id, qpn));
        inner.held.insert((self.id, qpn), binding);
        Ok(())
    }

    /// Removes the binding QP `qpn` of this port holds, if any (only its own: the other
    /// bindings on the tuple stay).
    pub fn unbind(&self, qpn: u32) {
        self.fabric.lock().unbind(self.id, qpn);
    }

    /// The binding QP `qpn` of this port holds, if any.
    pub fn binding(&self, qpn: u32) -> Option<Binding> {
        self.fabric.lock().held.get(&(self.id, qpn)).copied()
    }

    /// The `(port, QPN)` of every binding on tuple `conn` (any port, any cookies), in the
    /// fabric's order.
    pub fn bound(&self, conn: Conn) -> Vec<(PortId, u32)> {
        self.fabric
            .lock()
            .bindings
            .range(Binding::range_of(conn))
            .map(|(_, &holder)| holder)
            .collect()
    }

    /// Sends an iWARP stream packet ([`Body::Stream`]) of connection `conn` (the sender's
    /// view) from QP [`Packet::src_qpn`], which must hold a binding on `conn`, to the QP whose
    /// binding answers it ([`Binding::peer`]), filling in its QPN as the packet's destination.
    /// Refused ([`SendError::Unreachable`]) when the sender holds no binding on `conn` or no
    /// binding answers it.
    pub fn send_stream(&self, conn: Conn, mut pkt: Packet) -> Result<(), Refused> {
        pkt.src_port = self.id;
        let to = {
            let inner = self.fabric.lock();
            inner
                .held
                .get(&(self.id, pkt.src_qpn))
                .filter(|b| b.conn == conn)
                .and_then(|b| inner.bindings.get(&b.peer()))
                .copied()
        };
        let Some((to, qpn)) = to else {
            return Err(Refused {
                why: SendError::Unreachable,
                packet: Box::new(pkt),
            });
        };
        pkt.dst_qpn = qpn;
        self.fabric.deliver(to, pkt, true)
    }

    /// Takes the queued packets, oldest first, at most [`INBOX_BATCH`] of them.
    pub fn take_inbox(&self) -> VecDeque<Packet> {
        let mut inner = self.fabric.lock();
        let Some(p) = inner.ports.get_mut(&self.id) else {
            return VecDeque::new();
        };
        let n = p.inbox.len().min(INBOX_BATCH);
        let batch: VecDeque<Packet> = p.inbox.drain(..n).collect();
        let bytes: u64 = batch
            .iter()
            .map(|pkt| pkt.payload_len() as u64 + PACKET_COST)
            .sum();
        p.inbox_bytes = p.inbox_bytes.saturating_sub(bytes);
        batch
    }

    /// Number of queued packets.
    pub fn pending(&self) -> usize {
        self.fabric
            .lock()
            .ports
            .get(&self.id)
            .map_or(0, |p| p.inbox.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Default)]
    struct Count(AtomicUsize);
    impl Waker for Count {
        fn wake(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn routing_and_detach() {
        let f = Fabric::new();
        let wa = Arc::new(Count::default());
        let a = f.attach(wa.clone());
        let b = f.attach(Arc::new(NoWaker));
        let g = [1u8; 16];
        b.set_gids(vec![g]);
        assert_eq!(a.resolve(&g), Some(b.id()));
        a.set_gids(vec![g]);
        assert_eq!(a.resolve(&g), Some(a.id()), "own port first");
        assert_eq!(a.resolve(&[2; 16]), None);
        let pkt = Packet {
            src_port: 99,
            src_qpn: 1,
            dst_qpn: 2,
            body: Body::Response {
                seq: 0,
                result: Ok(Reply::Ack),
            },
        };
        b.send_response(a.id(), pkt.clone());
        assert_eq!(wa.0.load(Ordering::SeqCst), 1);
        let got = a.take_inbox();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].src_port, b.id());
        let bid = b.id();
        let dgram = Packet {
            src_port: 0,
            src_qpn: 1,
            dst_qpn: 1,
            body: Body::Datagram(Datagram {
                qkey: 0x8001_0000,
                data: vec![1, 2, 3],
                imm: None,
                solicited: false,
                net_type: NetType::Ipv4,
                traffic_class: 0,
                flow_label: 0,
                hop_limit: 64,
                sl: 0,
                sgid: [3; 16],
                dgid: g,
            }),
        };
        assert_eq!(a.send_datagram(bid, dgram.clone()), Ok(()));
        let got = b.take_inbox();
        assert_eq!((got[0].src_port, got[0].payload_len()), (a.id(), 3));
        drop(b);
        assert_eq!(f.ports(), 1);
        let refused = a.send_request(bid, pkt.clone()).unwrap_err();
        assert_eq!(
            (refused.why, refused.packet.body),
            (SendError::Unreachable, pkt.body)
        );
        assert_eq!(
            a.send_datagram(bid, dgram).map_err(|r| r.why),
            Err(SendError::Unreachable)
        );
    }

    fn tuple() -> Conn {
        Conn {
            src_ip: Ipv4Addr::new(10, 0, 0, 1),
            src_port: 40000,
            dst_ip: Ipv4Addr::new(10, 0, 0, 2),
            dst_port: 4791,
        }
    }

    /// A stream packet of QP `qpn` on `conn`, for the peer cookie `cookie`.
    fn stream(qpn: u32, conn: Conn, cookie: u32, seq: u32) -> Packet {
        Packet {
            src_port: 0,
            src_qpn: qpn,
            dst_qpn: 0,
            body: Body::Stream {
                conn,
                seq,
                cookie,
                msg: StreamMsg::Terminate { status: None },
            },
        }
    }

    #[test]
    fn iwarp_bindings_route_by_mirrored_tuple_and_cookies() {
        let f = Fabric::new();
        let a = f.attach(Arc::new(NoWaker));
        let b = f.attach(Arc::new(NoWaker));
        let ca = tuple();
        // QP 5 of A (cookie 0x1111) and QP 9 of B (cookie 0x2222) name each other.
        let ba = Binding {
            conn: ca,
            cookie: 0x1111,
            peer_cookie: 0x2222,
        };
        assert_eq!(
            ba.peer(),
            Binding {
                conn: ca.mirror(),
                cookie: 0x2222,
                peer_cookie: 0x1111,
            }
        );
        // A QP that holds no binding sends nothing; nobody answers yet: refused, handed back.
        let r = a.send_stream(ca, stream(5, ca, 0x2222, 1)).unwrap_err();
        assert_eq!(r.why, SendError::Unreachable);
        assert_eq!(a.bind(5, ba), Ok(()));
        assert_eq!(a.bind(5, ba.peer()), Err(BindError::QpBound(ba)));
        assert_eq!(
            b.bind(6, ba),
            Err(BindError::Taken {
                port: a.id(),
                qpn: 5
            }),
            "the same tuple and cookies: ambiguous"
        );
        let r = a.send_stream(ca, stream(5, ca, 0x2222, 1)).unwrap_err();
        assert_eq!(r.why, SendError::Unreachable, "the peer is not bound yet");
        assert_eq!(b.bind(9, ba.peer()), Ok(()));
        assert_eq!(b.binding(9), Some(ba.peer()));
        assert_eq!(a.send_stream(ca, stream(5, ca, 0x2222, 2)), Ok(()));
        let got = b.take_inbox();
        assert_eq!((got[0].src_port, got[0].dst_qpn), (a.id(), 9));
        // The sender's binding must be on the tuple it sends on.
        let r = a.send_stream(ca.mirror(), stream(5, ca.mirror(), 0x2222, 3));
        assert_eq!(r.map_err(|r| r.why), Err(SendError::Unreachable));
        // Only the holder unbinds; a port's bindings go with it.
        a.unbind(9);
        assert_eq!(a.bound(ca.mirror()), [(b.id(), 9)]);
        drop(b);
        assert!(a.bound(ca.mirror()).is_empty());
        a.unbind(5);
        assert!(a.bound(ca).is_empty());
        assert_eq!(a.binding(5), None);
        assert_eq!(ca.to_string(), "10.0.0.1:40000-10.0.0.2:4791");
    }

    #[test]
    fn a_binding_that_does_not_name_the_sender_back_gets_nothing() {
        let f = Fabric::new();
        let (a, b, x) = (
            f.attach(Arc::new(NoWaker)),
            f.attach(Arc::new(NoWaker)),
            f.attach(Arc::new(NoWaker)),
        );
        let ca = tuple();
        let ba = Binding {
            conn: ca,
            cookie: 0xa5a5_0001,
            peer_cookie: 0x5a5a_0002,
        };
        // Port X binds B's tuple first, with cookies of its own and each half of the pair.
        for (qpn, cookie, peer_cookie) in [(1, 7, 8), (2, 7, ba.cookie), (3, ba.peer_cookie, 8)] {
            let claim = Binding {
                conn: ca.mirror(),
                cookie,
                peer_cookie,
            };
            assert_eq!(x.bind(qpn, claim), Ok(()));
        }
        // B binds its tuple all the same, and only B receives A's messages.
        assert_eq!(b.bind(9, ba.peer()), Ok(()));
        assert_eq!(a.bind(5, ba), Ok(()));
        assert_eq!(a.send_stream(ca, stream(5, ca, ba.peer_cookie, 0)), Ok(()));
        assert_eq!(b.take_inbox().len(), 1);
        assert_eq!(x.pending(), 0);
        // X's messages on the mirrored tuple reach nobody, whatever cookie they name.
        for qpn in 1..=3 {
            let r = x.send_stream(ca.mirror(), stream(qpn, ca.mirror(), ba.cookie, 0));
            assert_eq!(r.map_err(|r| r.why), Err(SendError::Unreachable));
        }
        assert_eq!(a.pending(), 0);
        assert_eq!(a.bound(ca.mirror()).len(), 4);
        // Unbinding or dropping X takes only its own bindings.
        x.unbind(1);
        assert_eq!(a.bound(ca.mirror()).len(), 3);
        drop(x);
        assert_eq!(a.bound(ca.mirror()), [(b.id(), 9)]);
        assert_eq!(a.send_stream(ca, stream(5, ca, ba.peer_cookie, 0)), Ok(()));
        assert_eq!(b.take_inbox().len(), 1);
    }

    #[test]
    fn claims_per_tuple_are_bounded() {
        let f = Fabric::new();
        let (a, x) = (f.attach(Arc::new(NoWaker)), f.attach(Arc::new(NoWaker)));
        let claim = |cookie| Binding {
            conn: tuple(),
            cookie,
            peer_cookie: 1,
        };
        for qpn in 0..MAX_CLAIMS as u32 {
            assert_eq!(x.bind(qpn, claim(100 + qpn)), Ok(()));
        }
        assert_eq!(
            x.bind(99, claim(99)),
            Err(BindError::Full),
            "one port holds at most MAX_CLAIMS on a tuple"
        );
        assert_eq!(x.binding(99), None, "nothing changed");
        assert_eq!(x.bound(tuple()).len(), MAX_CLAIMS);
        // Other tuples, and other ports on this one, are not affected.
        let other = Binding {
            conn: tuple().mirror(),
            ..claim(99)
        };
        assert_eq!(x.bind(99, other), Ok(()));
        assert_eq!(a.bind(1, claim(1)), Ok(()), "the owner still binds");
        assert_eq!(x.bound(tuple()).len(), MAX_CLAIMS + 1);
        // A binding released makes room again.
        x.unbind(0);
        assert_eq!(x.bind(100, claim(99)), Ok(()));
        assert_eq!(x.bind(101, claim(98)), Err(BindError::Full));
        assert!(BindError::Full.to_string().contains("4 bindings"));
    }

    #[test]
    fn stream_lengths() {
        let send = |n: usize| StreamMsg::Request {
            id: 0,
            req: Request::Send {
                data: vec![0; n],
                offset: 0,
                last: true,
                imm: None,
                inv: None,
                solicited: false,
            },
        };
        // MPA length 2 + untagged header 18 + payload, padded to 4.
        assert_eq!(send(0).stream_len(), 20);
        assert_eq!(send(1).stream_len(), 24);
        assert_eq!(send(4).stream_len(), 24);
        let write = StreamMsg::Request {
            id: 0,
            req: Request::Write {
                addr: 0,
                rkey: 0,
                data: vec![0; 5],
                offset: 0,
                last: true,
                imm: None,
                solicited: false,
            },
        };
        assert_eq!(write.stream_len(), 24, "2 + 14 + 5 = 21, padded");
        let read = StreamMsg::Request {
            id: 0,
            req: Request::Read {
                addr: 0,
                rkey: 0,
                len: 1 << 20,
            },
        };
        assert_eq!(read.stream_len(), 48);
        let resp = StreamMsg::ReadResponse {
            id: 0,
            data: vec![0; 100],
        };
        assert_eq!(resp.stream_len(), 116);
        assert_eq!(
            StreamMsg::AtomicResponse { id: 0, value: 1 }.stream_len(),
            32
        );
        assert_eq!(StreamMsg::Terminate { status: None }.stream_len(), 48);
    }
}
