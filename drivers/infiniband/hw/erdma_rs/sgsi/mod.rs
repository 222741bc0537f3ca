// SPDX-License-Identifier: GPL-2.0

//! Compat mode's software GSI QP (erdma_rs_hw 7.3): the adapter speaks iWARP and has no datagram
//! queue pairs, so the GSI QP that the RDMA core's MAD layer makes (and through it ib_cm and
//! rdma_cm) is carried by the driver, as RoCEv2 UD packets ([`wire`]) over kernel UDP sockets.
//!
//! - A [`GsiPort`] per adapter holds one UDP socket per IPv4 entry of the GID table, bound to
//!   that address and port 4791 in the initial network namespace (the core adds and removes
//!   the entries from the network device's addresses: [`GsiPort::set_gid`]). A datagram that
//!   arrives on one is for this adapter; one sent from one has that GID's address.
//! - The [`SoftQp`] is the GSI QP: its send and receive work requests wait in rings sized at
//!   creation; a post (in any context) copies a send's payload out of the consumer's mapped
//!   buffer and queues the port's send work; the port's receive work, queued by the sockets'
//!   data-ready events, checks each datagram and copies it into the oldest posted receive.
//!   Completions wait in the queue pair until its CQs ([`crate::kverbs::KernelCq`]) poll them,
//!   and wake a CQ that was armed.
//! - Every datagram is hostile: wrong lengths, headers, ICRC, keys, an unknown destination QP,
//!   or no receive posted, each drops it and counts it in a port counter (`rdma statistic`),
//!   never in the log; the receive work takes at most [`RX_BUDGET`] datagrams a run.

pub(crate) mod wire;

use core::sync::atomic::{
    AtomicBool,
    AtomicU64,
    Ordering, //
};

use kernel::{
    impl_has_work,
    net::udp::{
        Datagram,
        SocketAddrV4,
        SocketEvent,
        SocketEvents,
        UdpSocket, //
    },
    new_mutex, new_spinlock_irq, new_work,
    prelude::*,
    rdma::{
        self,
        qp::QpEvents,
        CqEvents,
        Gid,
        MappedBuf,
        NetworkType,
        QpAttr,
        QpAttrBit,
        QpAttrMask,
        QpAttrOut,
        QpCap,
        QpState,
        QpType,
        RecvWrs,
        SendFlag,
        SendWrs,
        Wc,
        WcFlags,
        WcOpcode,
        WcStatus,
        WrOpcode, //
    },
    sync::{
        Arc,
        ArcBorrow,
        Mutex,
        SpinLockIrq, //
    },
    workqueue::{
        OwnedQueue,
        Work,
        WorkItem, //
    },
};

use crate::{
    consts::GSI_QPN,
    kverbs::{
        KernelCq,
        QpEntry,
        SoftCompletions, //
    },
    qpstate::transition,
};
use wire::{
    Refused, Ud, DEFAULT_PKEY, GSI_QKEY, HEADERS_LEN, ICRC_LEN, IPV4_LEN, MAX_PACKET, MAX_PAYLOAD,
    ROCE_PORT,
};

/// Datagrams the receive work takes in one run; it queues itself again for the rest.
pub(crate) const RX_BUDGET: u32 = 64;
/// The deepest queues a GSI QP may ask for (the MAD layer's largest, `IB_MAD_QP_MAX_SIZE`).
const MAX_DEPTH: u32 = 8192;
/// Scatter/gather entries of a receive (the MAD layer posts one).
const MAX_RECV_SGE: u32 = 2;
/// Scatter/gather entries of a send (the MAD layer posts two: header and data).
const MAX_SEND_SGE: u32 = 2;
/// The network header area a datagram receive starts with (a GRH's size; IPv4 in its last 20).
const GRH_LEN: usize = 40;

/// The port counters of the software GSI, in the order of [`COUNTER_NAMES`].
#[derive(Clone, Copy)]
#[repr(usize)]
pub(crate) enum Counter {
    /// Datagrams sent.
    TxPackets,
    /// Sends the socket refused (no route, no room): lost, as a datagram may be.
    TxDropped,
    /// Datagrams received into a posted receive.
    RxPackets,
    /// Refused: lengths ([`Refused::Length`]), or a bad UDP checksum.
    RxLength,
    /// Refused: opcode, header version or pad ([`Refused::Header`]).
    RxHeader,
    /// Refused: the ICRC.
    RxIcrc,
    /// Refused: a P_Key or Q_Key that is not the GSI QP's.
    RxKey,
    /// Refused: a destination QP that is not the GSI QP.
    RxUnknownQp,
    /// Dropped: no GSI QP ready to receive, or no receive posted.
    RxNoRecv,
}

/// How many counters there are.
pub(crate) const COUNTERS: usize = 9;

/// The counters' names, as `rdma statistic` shows them.
pub(crate) const COUNTER_NAMES: [&CStr; COUNTERS] = [
    c"sgsi_tx_packets",
    c"sgsi_tx_dropped",
    c"sgsi_rx_packets",
    c"sgsi_rx_bad_length",
    c"sgsi_rx_bad_header",
    c"sgsi_rx_bad_icrc",
    c"sgsi_rx_bad_key",
    c"sgsi_rx_unknown_qp",
    c"sgsi_rx_no_recv",
];

/// A ring of at most the capacity it was made with; never allocates afterwards.
struct Ring<T> {
    slots: KVVec<Option<T>>,
    head: usize,
    len: usize,
}

impl<T> Ring<T> {
    fn new(cap: u32) -> Result<Self> {
        let cap = cap as usize;
        let mut slots = KVVec::with_capacity(cap, GFP_KERNEL)?;
        for _ in 0..cap {
            slots.push(None, GFP_KERNEL)?;
        }
        Ok(Self {
            slots,
            head: 0,
            len: 0,
        })
    }

    /// Adds `v` at the tail; gives it back if the ring is full.
    fn push(&mut self, v: T) -> core::result::Result<(), T> {
        let cap = self.slots.len();
        if self.len == cap {
            return Err(v);
        }
        self.slots[(self.head + self.len) % cap] = Some(v);
        self.len += 1;
        Ok(())
    }

    fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let v = self.slots[self.head].take();
        self.head = (self.head + 1) % self.slots.len();
        self.len -= 1;
        v
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A send waiting for the send work: its payload, copied at post.
struct PendingSend {
    wr_id: u64,
    signaled: bool,
    len: usize,
    payload: [u8; MAX_PAYLOAD],
    sgid_index: u8,
    dst: [u8; 4],
    ud: Ud,
}

/// A posted receive: where its bytes go.
struct PostedRecv {
    wr_id: u64,
    bufs: [Option<MappedBuf>; MAX_RECV_SGE as usize],
}

/// A completion waiting to be polled.
#[derive(Clone, Copy)]
struct Done {
    wr_id: u64,
    status: WcStatus,
    opcode: WcOpcode,
    byte_len: u32,
    /// The sender's QP, for a datagram received.
    src_qp: Option<u32>,
}

impl Done {
    /// The completion of a request flushed (ERROR).
    fn flushed(wr_id: u64, opcode: WcOpcode) -> Self {
        Self {
            wr_id,
            status: WcStatus::WrFlushErr,
            opcode,
            byte_len: 0,
            src_qp: None,
        }
    }
}

/// What a [`SoftQp`] keeps under its lock.
struct SoftState {
    state: QpState,
    qkey: u32,
    psn: u32,
    sends: Ring<PendingSend>,
    recvs: Ring<PostedRecv>,
    send_done: Ring<Done>,
    recv_done: Ring<Done>,
    /// Sends posted and not yet polled (waiting, being sent, or completed).
    send_outstanding: u32,
    /// Receives posted and not yet polled.
    recv_outstanding: u32,
    /// Counts the resets: a send or receive the port's work took before one completes nothing
    /// after it (its request is gone with the queue pair's old life).
    epoch: u32,
}

impl SoftState {
    /// Everything posted completes as flushed (ERROR); true if anything did.
    fn flush(&mut self) -> bool {
        let mut any = false;
        while let Some(s) = self.sends.pop() {
            let _ = self.send_done.push(Done::flushed(s.wr_id, WcOpcode::Send));
            any = true;
        }
        while let Some(r) = self.recvs.pop() {
            let _ = self.recv_done.push(Done::flushed(r.wr_id, WcOpcode::Recv));
            any = true;
        }
        any
    }

    /// Forgets everything posted and completed (RESET, destruction).
    fn clear(&mut self) {
        while self.sends.pop().is_some() {}
        while self.recvs.pop().is_some() {}
        while self.send_done.pop().is_some() {}
        while self.recv_done.pop().is_some() {}
        self.send_outstanding = 0;
        self.recv_outstanding = 0;
        self.epoch = self.epoch.wrapping_add(1);
    }
}

/// The software GSI QP.
#[pin_data]
pub(crate) struct SoftQp {
    events: QpEvents,
    port: Arc<GsiPort>,
    scq: Arc<KernelCq>,
    rcq: Arc<KernelCq>,
    scq_events: CqEvents,
    rcq_events: CqEvents,
    sq_sig_all: bool,
    cap: QpCap,
    #[pin]
    st: SpinLockIrq<SoftState>,
}

impl SoftQp {
    /// Creates the GSI QP of `port`'s adapter, attached to its kernel CQs (send, receive: each
    /// with its consumer's events); `EBUSY` if the adapter has one.
    pub(crate) fn create(
        port: &Arc<GsiPort>,
        events: QpEvents,
        cqs: [(&Arc<KernelCq>, CqEvents); 2],
        cap: QpCap,
        sq_sig_all: bool,
    ) -> Result<Arc<Self>> {
        if cap.max_send_wr == 0
            || cap.max_send_wr > MAX_DEPTH
            || cap.max_recv_wr == 0
            || cap.max_recv_wr > MAX_DEPTH
            || cap.max_send_sge > MAX_SEND_SGE
            || cap.max_recv_sge > MAX_RECV_SGE
        {
            return Err(EINVAL);
        }
        let [(skc, scq_events), (rkc, rcq_events)] = cqs;
        let st = SoftState {
            state: QpState::Reset,
            qkey: 0,
            psn: 0,
            sends: Ring::new(cap.max_send_wr)?,
            recvs: Ring::new(cap.max_recv_wr)?,
            send_done: Ring::new(cap.max_send_wr)?,
            recv_done: Ring::new(cap.max_recv_wr)?,
            send_outstanding: 0,
            recv_outstanding: 0,
            epoch: 0,
        };
        let qp = Arc::pin_init(
            try_pin_init!(Self {
                events,
                port: port.clone(),
                scq: skc.clone(),
                rcq: rkc.clone(),
                scq_events,
                rcq_events,
                sq_sig_all,
                cap: QpCap {
                    max_inline_data: 0,
                    max_send_sge: MAX_SEND_SGE,
                    max_recv_sge: MAX_RECV_SGE,
                    ..cap
                },
                st <- new_spinlock_irq!(st),
            }),
            GFP_KERNEL,
        )?;
        let entry = |qp: &Arc<SoftQp>| {
            Arc::new(
                QpEntry {
                    events: qp.events.clone(),
                    kernel: None,
                    iw: None,
                    soft: Some(qp.clone() as Arc<dyn SoftCompletions>),
                },
                GFP_KERNEL,
            )
        };
        // Both nodes first, so that attaching cannot fail half-way.
        let snode = kernel::rbtree::RBTreeNode::new(GSI_QPN, entry(&qp)?, GFP_KERNEL)?;
        let rnode = if Arc::ptr_eq(skc, rkc) {
            None
        } else {
            Some(kernel::rbtree::RBTreeNode::new(
                GSI_QPN,
                entry(&qp)?,
                GFP_KERNEL,
            )?)
        };
        port.attach(&qp)?;
        skc.attach_soft(snode, qp.clone());
        if let Some(node) = rnode {
            rkc.attach_soft(node, qp.clone());
        }
        Ok(qp)
    }

    /// Destroys the queue pair: when this returns, no datagram is being copied into its
    /// receives, and its CQs find it no more.
    pub(crate) fn destroy(self: &Arc<Self>) {
        self.port.detach(self);
        self.scq.detach(GSI_QPN);
        self.rcq.detach(GSI_QPN);
        let mut st = self.st.lock();
        st.state = QpState::Reset;
        st.clear();
    }

    /// Moves the queue pair as the verbs allow a GSI QP to move (P_Key index 0; the Q_Key and
    /// send PSN kept). ERROR flushes what is posted; RESET forgets it.
    pub(crate) fn modify(&self, attr: &QpAttr<'_>, mask: QpAttrMask) -> Result {
        let mut st = self.st.lock();
        let next = transition(QpType::Gsi, st.state, attr, mask)?;
        if mask.contains(QpAttrBit::Qkey) {
            st.qkey = attr.qkey();
        }
        if mask.contains(QpAttrBit::SqPsn) {
            st.psn = attr.sq_psn() & 0xff_ffff;
        }
        st.state = next;
        let flushed = match next {
            QpState::Err => st.flush(),
            QpState::Reset => {
                st.clear();
                false
            }
            _ => false,
        };
        drop(st);
        if flushed {
            self.completed(true);
            self.completed(false);
        }
        Ok(())
    }

    /// Reports the state and attributes.
    pub(crate) fn query(&self, out: &mut QpAttrOut<'_>) {
        let st = self.st.lock();
        out.set_state(st.state, false)
            .set_psns(st.psn, 0)
            .set_qkey(st.qkey)
            .set_port(1)
            .set_sq_sig_all(self.sq_sig_all)
            .set_cap(self.cap);
    }

    /// Posts a kernel consumer's sends: each is a SEND of at most [`MAX_PAYLOAD`] bytes to an
    /// address handle of compat mode; its payload is copied now, and the port's send work sends
    /// it. Any context.
    pub(crate) fn post_send<T>(
        &self,
        wrs: SendWrs<'_, T>,
    ) -> core::result::Result<(), (Error, usize)>
    where
        T: rdma::Driver,
        T::Ah: SoftRoute,
    {
        let mut posted = 0;
        let mut st = self.st.lock();
        let ret = (|| {
            for (i, wr) in wrs.enumerate() {
                let fail = |e: Error| (e, i);
                match st.state {
                    QpState::Rts | QpState::Err => {}
                    _ => return Err(fail(EINVAL)),
                }
                if wr.opcode() != Some(WrOpcode::Send) || wr.num_sge() > MAX_SEND_SGE as usize {
                    return Err(fail(EINVAL));
                }
                if st.send_outstanding >= self.cap.max_send_wr {
                    return Err(fail(ENOMEM));
                }
                let ud = wr.ud().map_err(fail)?;
                let (sgid_index, dst) = ud.ah.data().soft_route().ok_or(fail(EINVAL))?;
                let mut send = PendingSend {
                    wr_id: wr.wr_id(),
                    signaled: self.sq_sig_all || wr.flags().contains(SendFlag::Signaled),
                    len: 0,
                    payload: [0; MAX_PAYLOAD],
                    sgid_index,
                    dst,
                    ud: Ud {
                        dest_qpn: ud.remote_qpn & 0xff_ffff,
                        src_qpn: GSI_QPN,
                        // Bit 31 set: the queue pair's own Q_Key.
                        qkey: if ud.remote_qkey & 0x8000_0000 != 0 {
                            st.qkey
                        } else {
                            ud.remote_qkey
                        },
                        pkey: DEFAULT_PKEY,
                        psn: 0,
                        solicited: wr.flags().contains(SendFlag::Solicited),
                    },
                };
                for sge in wr.sges() {
                    let len = sge.length as usize;
                    let dst = send
                        .payload
                        .get_mut(send.len..send.len + len)
                        .ok_or(fail(EMSGSIZE))?;
                    wr.mapped(sge).and_then(|b| b.read(0, dst)).map_err(fail)?;
                    send.len += len;
                }
                st.send_outstanding += 1;
                if st.state == QpState::Err {
                    // Posted to a queue pair in ERROR: completes as flushed.
                    let _ = st.send_done.push(Done::flushed(send.wr_id, WcOpcode::Send));
                } else {
                    // CAST: 24-bit sequence numbers.
                    send.ud.psn = st.psn;
                    st.psn = (st.psn + 1) & 0xff_ffff;
                    // The ring holds `max_send_wr`, more than are outstanding.
                    let _ = st.sends.push(send);
                }
                posted += 1;
            }
            Ok(())
        })();
        let flushed = st.state == QpState::Err;
        drop(st);
        if posted > 0 {
            if flushed {
                self.completed(true);
            } else {
                self.port.kick_tx();
            }
        }
        ret
    }

    /// Posts a kernel consumer's receives. Any context.
    pub(crate) fn post_recv(&self, wrs: RecvWrs<'_>) -> core::result::Result<(), (Error, usize)> {
        let mut st = self.st.lock();
        let mut flushed = false;
        let ret = (|| {
            for (i, wr) in wrs.enumerate() {
                let fail = |e: Error| (e, i);
                if st.state == QpState::Reset || wr.num_sge() > MAX_RECV_SGE as usize {
                    return Err(fail(EINVAL));
                }
                if st.recv_outstanding >= self.cap.max_recv_wr {
                    return Err(fail(ENOMEM));
                }
                let mut recv = PostedRecv {
                    wr_id: wr.wr_id(),
                    bufs: [None, None],
                };
                for (slot, sge) in recv.bufs.iter_mut().zip(wr.sges()) {
                    *slot = Some(wr.mapped(sge).map_err(fail)?);
                }
                st.recv_outstanding += 1;
                if st.state == QpState::Err {
                    let _ = st.recv_done.push(Done::flushed(recv.wr_id, WcOpcode::Recv));
                    flushed = true;
                } else {
                    let _ = st.recvs.push(recv);
                }
            }
            Ok(())
        })();
        drop(st);
        if flushed {
            self.completed(false);
        }
        ret
    }

    /// Sends what waits (the port's send work), each through the socket of its GID.
    fn transmit(&self, port: &GsiPort) {
        loop {
            let (send, epoch) = {
                let mut st = self.st.lock();
                let Some(send) = st.sends.pop() else {
                    return;
                };
                (send, st.epoch)
            };
            port.send(
                send.sgid_index,
                send.dst,
                &send.ud,
                &send.payload[..send.len],
            );
            let mut st = self.st.lock();
            if st.epoch != epoch {
                // Reset (or destroyed) while it was sent: nothing to complete.
                continue;
            }
            if send.signaled {
                let _ = st.send_done.push(Done {
                    wr_id: send.wr_id,
                    status: WcStatus::Success,
                    opcode: WcOpcode::Send,
                    // CAST: at most 256.
                    byte_len: send.len as u32,
                    src_qp: None,
                });
                drop(st);
                self.completed(true);
            } else {
                st.send_outstanding = st.send_outstanding.saturating_sub(1);
            }
        }
    }

    /// Copies a datagram from `src_qp` that arrived with IPv4 header `ip` into the oldest
    /// posted receive (the port's receive work). False if the queue pair cannot receive or
    /// has nothing posted.
    fn receive(&self, ip: &[u8; IPV4_LEN], src_qp: u32, payload: &[u8]) -> bool {
        let (recv, epoch) = {
            let mut st = self.st.lock();
            if !matches!(st.state, QpState::Rtr | QpState::Rts) {
                return false;
            }
            let Some(recv) = st.recvs.pop() else {
                return false;
            };
            (recv, st.epoch)
        };
        let mut grh = [0u8; GRH_LEN];
        grh[GRH_LEN - IPV4_LEN..].copy_from_slice(ip);
        let mut parts = [&grh[..], payload];
        let mut ok = true;
        // Scatter the network header area and the payload over the receive's buffers.
        for buf in recv.bufs.iter().flatten() {
            let mut at = 0u32;
            for part in parts.iter_mut() {
                let room = (buf.len() - at) as usize;
                let n = part.len().min(room);
                if n == 0 {
                    continue;
                }
                if buf.write(at, &part[..n]).is_err() {
                    ok = false;
                }
                // CAST: at most a buffer's length.
                at += n as u32;
                *part = &part[n..];
            }
        }
        let fits = parts.iter().all(|p| p.is_empty());
        let mut st = self.st.lock();
        if st.epoch != epoch {
            return true;
        }
        let status = match (ok, fits) {
            (true, true) => WcStatus::Success,
            (true, false) => WcStatus::LocLenErr,
            (false, _) => WcStatus::LocProtErr,
        };
        let _ = st.recv_done.push(Done {
            wr_id: recv.wr_id,
            status,
            opcode: WcOpcode::Recv,
            // CAST: at most 40 + 256.
            byte_len: (GRH_LEN + payload.len()) as u32,
            src_qp: Some(src_qp),
        });
        drop(st);
        self.completed(false);
        true
    }

    /// A completion was added for the send (`send`) or receive CQ: wakes it if it is armed.
    fn completed(&self, send: bool) {
        let (cq, events) = if send {
            (&self.scq, &self.scq_events)
        } else {
            (&self.rcq, &self.rcq_events)
        };
        if cq.soft_completed() {
            events.completion();
        }
    }
}

impl SoftCompletions for SoftQp {
    fn has_completions(&self, cq: &KernelCq) -> bool {
        let st = self.st.lock();
        (core::ptr::eq(cq, &*self.scq) && !st.send_done.is_empty())
            || (core::ptr::eq(cq, &*self.rcq) && !st.recv_done.is_empty())
    }

    fn poll_into(&self, cq: &KernelCq, wcs: &mut [Wc]) -> usize {
        let mut st = self.st.lock();
        let st = &mut *st;
        let mut n = 0;
        for (is_cq, send) in [
            (core::ptr::eq(cq, &*self.scq), true),
            (core::ptr::eq(cq, &*self.rcq), false),
        ] {
            if !is_cq {
                continue;
            }
            while n < wcs.len() {
                let (ring, outstanding) = if send {
                    (&mut st.send_done, &mut st.send_outstanding)
                } else {
                    (&mut st.recv_done, &mut st.recv_outstanding)
                };
                let Some(d) = ring.pop() else {
                    break;
                };
                *outstanding = outstanding.saturating_sub(1);
                let wc = &mut wcs[n];
                wc.set(
                    &self.events,
                    d.wr_id,
                    d.status,
                    d.opcode,
                    0,
                    d.byte_len,
                    WcFlags::empty(),
                    0,
                );
                if let (Some(src), WcStatus::Success) = (d.src_qp, d.status) {
                    wc.set_datagram(src, 0, NetworkType::Ipv4);
                }
                n += 1;
            }
        }
        n
    }
}

/// A UDP socket of a GID table entry.
struct GidSock {
    index: u16,
    ip: [u8; 4],
    sock: UdpSocket,
}

/// The software GSI of one adapter (see the [module documentation](self)).
#[pin_data]
pub(crate) struct GsiPort {
    /// The sockets, by GID index (at most one per entry).
    #[pin]
    socks: Mutex<KVec<GidSock>>,
    /// The GSI QP; held by the receive work while it copies into the QP's receives.
    #[pin]
    qp: Mutex<Option<Arc<SoftQp>>>,
    counters: [AtomicU64; COUNTERS],
    /// Set when the port goes: no work is queued afterwards.
    closed: AtomicBool,
    #[pin]
    rx: Work<GsiPort, 0>,
    #[pin]
    tx: Work<GsiPort, 1>,
    wq: OwnedQueue,
}

impl_has_work! {
    impl HasWork<Self, 0> for GsiPort { self.rx }
    impl HasWork<Self, 1> for GsiPort { self.tx }
}

impl GsiPort {
    /// A port with no sockets yet.
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            try_pin_init!(Self {
                socks <- new_mutex!(KVec::new()),
                qp <- new_mutex!(None),
                counters: [const { AtomicU64::new(0) }; COUNTERS],
                closed: AtomicBool::new(false),
                rx <- new_work!("erdma_rs::sgsi::GsiPort::rx"),
                tx <- new_work!("erdma_rs::sgsi::GsiPort::tx"),
                wq: OwnedQueue::new_ordered(c"erdma_rs_sgsi")?,
            }),
            GFP_KERNEL,
        )
    }

    fn count(&self, c: Counter) {
        self.counters[c as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The counters, in the order of [`COUNTER_NAMES`].
    pub(crate) fn counters(&self) -> [u64; COUNTERS] {
        core::array::from_fn(|i| self.counters[i].load(Ordering::Relaxed))
    }

    /// Entry `index` of the GID table, `gid`, was added (or removed): an IPv4 one gets (or
    /// loses) its socket. `EADDRINUSE` if another socket holds the address's port 4791 (the
    /// kernel's software RoCE, for one).
    pub(crate) fn set_gid(self: &Arc<Self>, index: u16, gid: Gid, add: bool) -> Result {
        let mut socks = self.socks.lock();
        if let Some(i) = socks.iter().position(|s| s.index == index) {
            let mut old = socks.remove(i)?;
            old.sock.unwatch();
        }
        if !add || self.closed.load(Ordering::Relaxed) {
            return Ok(());
        }
        let Some(ip) = gid.to_ipv4() else {
            // IPv6 entries: the software GSI speaks IPv4 only (erdma_rs_hw 7.3).
            return Ok(());
        };
        let mut sock = UdpSocket::new()?;
        sock.set_dont_fragment()?;
        sock.bind(SocketAddrV4::new(ip, ROCE_PORT))?;
        sock.watch(self.clone())?;
        socks.push(GidSock { index, ip, sock }, GFP_KERNEL)?;
        drop(socks);
        // Datagrams may have arrived before the watch.
        self.kick_rx();
        Ok(())
    }

    /// Stops the port: its sockets close, and its work has finished when this returns.
    pub(crate) fn shutdown(&self) {
        self.closed.store(true, Ordering::Relaxed);
        let mut socks = self.socks.lock();
        for s in socks.iter_mut() {
            s.sock.unwatch();
        }
        socks.clear();
        drop(socks);
        self.wq.drain();
    }

    fn attach(&self, qp: &Arc<SoftQp>) -> Result {
        let mut cur = self.qp.lock();
        if cur.is_some() {
            return Err(EBUSY);
        }
        *cur = Some(qp.clone());
        Ok(())
    }

    fn detach(&self, qp: &Arc<SoftQp>) {
        let mut cur = self.qp.lock();
        if cur.as_ref().is_some_and(|c| Arc::ptr_eq(c, qp)) {
            *cur = None;
        }
    }

    fn kick_rx(self: &Arc<Self>) {
        if !self.closed.load(Ordering::Relaxed) {
            let _ = self.wq.enqueue::<Arc<Self>, 0>(self.clone());
        }
    }

    fn kick_tx(self: &Arc<Self>) {
        if !self.closed.load(Ordering::Relaxed) {
            let _ = self.wq.enqueue::<Arc<Self>, 1>(self.clone());
        }
    }

    /// Sends `ud` with `payload` from the socket of GID `index` to `dst`.
    fn send(&self, index: u8, dst: [u8; 4], ud: &Ud, payload: &[u8]) {
        let socks = self.socks.lock();
        let Some(s) = socks.iter().find(|s| s.index == u16::from(index)) else {
            self.count(Counter::TxDropped);
            return;
        };
        let mut pkt = [0u8; MAX_PACKET];
        let ip = wire::sent_ipv4_header(s.ip, dst, HEADERS_LEN + payload.len() + ICRC_LEN);
        let sent = wire::build(ud, payload, &ip, ROCE_PORT, ROCE_PORT, &mut pkt)
            .and_then(|n| s.sock.send_to(&pkt[..n], SocketAddrV4::new(dst, ROCE_PORT)));
        self.count(if sent.is_ok() {
            Counter::TxPackets
        } else {
            Counter::TxDropped
        });
    }

    /// Checks one datagram and hands it to the GSI QP, counting what is refused.
    fn deliver(&self, qp: Option<&Arc<SoftQp>>, got: &Datagram, buf: &[u8]) {
        // A truncated datagram was longer than any packet: its length is refused.
        let wire_len = if got.truncated { usize::MAX } else { got.len };
        let parsed = wire::parse(
            &got.ip_header,
            got.from.port(),
            got.to.port(),
            &buf[..got.len],
            wire_len,
        );
        let (ud, range) = match parsed {
            Ok(p) => p,
            Err(Refused::Length) => return self.count(Counter::RxLength),
            Err(Refused::Header) => return self.count(Counter::RxHeader),
            Err(Refused::Icrc) => return self.count(Counter::RxIcrc),
        };
        if ud.dest_qpn != GSI_QPN {
            return self.count(Counter::RxUnknownQp);
        }
        if ud.pkey & 0x7fff != DEFAULT_PKEY & 0x7fff || ud.qkey != GSI_QKEY {
            return self.count(Counter::RxKey);
        }
        let received = qp.is_some_and(|qp| qp.receive(&got.ip_header, ud.src_qpn, &buf[range]));
        self.count(if received {
            Counter::RxPackets
        } else {
            Counter::RxNoRecv
        });
    }
}

impl SocketEvents for GsiPort {
    fn event(this: ArcBorrow<'_, Self>, event: SocketEvent) {
        if event == SocketEvent::DataReady {
            let this: Arc<Self> = this.into();
            this.kick_rx();
        }
    }
}

impl WorkItem<0> for GsiPort {
    type Pointer = Arc<GsiPort>;

    /// Takes the datagrams that arrived, at most [`RX_BUDGET`], then queues itself for the
    /// rest.
    fn run(this: Arc<GsiPort>) {
        let socks = this.socks.lock();
        let qp = this.qp.lock();
        let mut budget = RX_BUDGET;
        let mut buf = [0u8; MAX_PACKET];
        for s in socks.iter() {
            while budget > 0 {
                match s.sock.recv_datagram(&mut buf) {
                    Ok(got) => this.deliver(qp.as_ref(), &got, &buf),
                    Err(e) if e == EBADMSG => this.count(Counter::RxLength),
                    Err(_) => break,
                }
                budget -= 1;
            }
        }
        drop(qp);
        drop(socks);
        if budget == 0 {
            this.kick_rx();
        }
    }
}

impl WorkItem<1> for GsiPort {
    type Pointer = Arc<GsiPort>;

    fn run(this: Arc<GsiPort>) {
        let qp = this.qp.lock().clone();
        if let Some(qp) = qp {
            qp.transmit(&this);
        }
    }
}

/// Owns an adapter's [`GsiPort`]: dropping it stops the port (its sockets hold references to
/// it, which shutting it down releases).
pub(crate) struct GsiOwner(Arc<GsiPort>);

impl GsiOwner {
    pub(crate) fn new() -> Result<Self> {
        Ok(Self(GsiPort::new()?))
    }

    pub(crate) fn port(&self) -> &Arc<GsiPort> {
        &self.0
    }
}

impl Drop for GsiOwner {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}

/// An address handle the software GSI sends to.
pub(crate) trait SoftRoute {
    /// The source GID's index and the destination's IPv4 address, if the handle is compat
    /// mode's.
    fn soft_route(&self) -> Option<(u8, [u8; 4])>;
}

#[kunit_tests(erdma_rs_sgsi)]
mod tests {
    use super::*;

    /// A ring gives its entries back in order across the wrap, holds exactly its capacity and
    /// gives back what does not fit.
    #[test]
    fn a_ring_keeps_order_and_capacity() -> Result {
        let mut r = Ring::new(3)?;
        for round in 0..5u32 {
            assert!(r.push(round * 10).is_ok());
            assert!(r.push(round * 10 + 1).is_ok());
            assert_eq!(r.pop(), Some(round * 10));
            assert_eq!(r.pop(), Some(round * 10 + 1));
            assert!(r.is_empty());
        }
        for i in 0..3 {
            assert!(r.push(i).is_ok());
        }
        assert_eq!(r.push(9), Err(9));
        assert_eq!(r.pop(), Some(0));
        assert!(r.push(9).is_ok());
        assert_eq!(
            [r.pop(), r.pop(), r.pop(), r.pop()],
            [Some(1), Some(2), Some(9), None]
        );
        Ok(())
    }

    /// Flushed completions carry their request and nothing received.
    #[test]
    fn a_flushed_completion_has_no_bytes_and_no_sender() {
        let d = Done::flushed(7, WcOpcode::Recv);
        assert_eq!(d.wr_id, 7);
        assert!(d.status == WcStatus::WrFlushErr && d.byte_len == 0 && d.src_qp.is_none());
    }
}
