// SPDX-License-Identifier: GPL-2.0

//! The in-process network that connects every device of the process (erdma-hw.md §7.2, §10.20).
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
//! * Requests beyond [`MAX_INBOX`] queued packets are refused ([`SendError::Congested`], with
//!   the packet handed back in [`Refused`]: for the requester it is lost, and it retransmits
//!   it later). Responses are never refused: they are bounded by the requests.
//! * A responder that cannot take a request (no such QP, or one not able to receive) drops it,
//!   as an adapter does; on a network nothing would come back and the requester's timer would
//!   run out. The model sends the request back as [`Body::Lost`], so that the requester can
//!   retransmit it when its timer fires.
//! * A [`Datagram`] (UD SEND) is addressed like a request but never answered: it carries what
//!   the receiver needs to build the GRH area and the UD completion (addresses, traffic class,
//!   flow label, hop limit, SL, Q_Key). Datagrams beyond [`MAX_INBOX`] are refused like requests
//!   (the sender drops them: UD is unreliable).
//!
//! Lock order: a device's lock → the fabric's lock (leaf, never held while calling out).

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use crate::cmdq::{Gid, NetType};

/// Number of a port on the fabric.
pub type PortId = u32;

/// Most packets queued in one inbox before requests are refused.
pub const MAX_INBOX: usize = 1 << 16;

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

/// An RC request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// SEND, SEND_WITH_IMM, SEND_WITH_INV: consumes an RQE.
    Send {
        /// Payload.
        data: Vec<u8>,
        /// Immediate (network order) for SEND_WITH_IMM.
        imm: Option<[u8; 4]>,
        /// rkey to invalidate (SEND_WITH_INV).
        inv: Option<u32>,
        /// SE flag.
        solicited: bool,
    },
    /// WRITE, WRITE_WITH_IMM (the latter consumes an RQE).
    Write {
        /// Remote address.
        addr: u64,
        /// rkey.
        rkey: u32,
        /// Payload.
        data: Vec<u8>,
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

/// A UD datagram (SEND or SEND_WITH_IMM on a UD QP, erdma-hw.md §5.4): delivered to one QP,
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
    waker: Arc<dyn Waker>,
}

#[derive(Default)]
struct Inner {
    next: PortId,
    ports: BTreeMap<PortId, PortState>,
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
            if is_request && port.inbox.len() >= MAX_INBOX {
                return Err(refused(SendError::Congested, pkt));
            }
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
        self.fabric.lock().ports.remove(&self.id);
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

    /// Takes every queued packet, oldest first.
    pub fn take_inbox(&self) -> VecDeque<Packet> {
        self.fabric
            .lock()
            .ports
            .get_mut(&self.id)
            .map(|p| std::mem::take(&mut p.inbox))
            .unwrap_or_default()
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
}
