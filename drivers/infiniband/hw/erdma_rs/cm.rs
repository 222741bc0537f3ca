// SPDX-License-Identifier: GPL-2.0

//! The iWARP connection manager (erdma_rs_hw 7.1): MPA revision 129 over kernel TCP sockets.
//!
//! On an iWARP adapter a queue pair reaches RTS only here. The RDMA core's iWARP connection
//! manager (iw_cm) calls the device's `iw_*` operations; this module makes the TCP connection,
//! exchanges the MPA request and reply (the QP cookies, the congestion-control algorithm and
//! up to [`MPA_MAX_PRIVATE_DATA`] bytes of private data), hands the connection to the adapter
//! with MODIFY_QP to RTS (the 4-tuple and both sequence numbers; the passive side reserves the
//! sequence space of the reply it sends afterwards through its socket) and reports to iw_cm.
//!
//! # Endpoints
//!
//! An [`Endpoint`] is one side of one connection: the active side from [`connect`] on, the
//! passive side from the moment a [`Listener`] accepts its TCP connection. Its socket's events
//! and its timer set bits in `pending` and queue its work on the connection manager's ordered
//! work queue ([`Cm`]); the work does everything else, under the endpoint's lock. The state
//! machine:
//!
//! ```text
//! active:  Connecting --TCP up--> AwaitReply --reply--> Connected --> Closed
//! passive: AwaitRequest --request--> AwaitAccept --iw_accept--> Connected --> Closed
//! ```
//!
//! A listener's end ends its connections not accepted yet ([`destroy_listen`]). Every failure,
//! and every close, ends in [`Endpoint::close`]: the socket is released, the timer
//! stopped, the queue pair unlinked, the iw_cm identifier's reference dropped, and the endpoint
//! leaves the connection manager's table. What the peer sends is hostile: a wrong key, another
//! revision, markers or CRCs, more private data than allowed or than arrives, silence, or a reset
//! at any step ends the endpoint (with a reject reply where MPA has one) and nothing else.
//!
//! The device is reached through [`CmDevice`] and [`CmHw`], which the driver's device module
//! implements: work runs only while the device is registered, and one that finds it gone only
//! releases what the endpoint holds.

use core::sync::atomic::{
    AtomicBool,
    AtomicU32,
    Ordering, //
};
use kernel::{
    device, impl_has_hr_timer, impl_has_work,
    net::tcp::{
        SocketAddrV4,
        SocketEvent,
        SocketEvents,
        TcpSocket,
        TcpState, //
    },
    new_condvar, new_mutex, new_spinlock_irq, new_work,
    prelude::*,
    ratelimit::Ratelimit,
    rbtree::{
        RBTree,
        RBTreeNodeReservation, //
    },
    rdma::{
        iwcm::{
            CmEvent,
            CmEventKind,
            CmId,
            CmIdRef,
            ConnParam, //
        },
        QpState,
    },
    sync::{
        Arc,
        ArcBorrow,
        CondVar,
        CondVarTimeoutResult,
        Mutex,
        SpinLockIrq, //
    },
    time::{
        hrtimer::{
            ArcHrTimerHandle,
            HrTimer,
            HrTimerCallback,
            HrTimerCallbackContext,
            HrTimerPointer,
            HrTimerRestart,
            RelativeMode, //
        },
        msecs_to_jiffies,
        Delta,
        Monotonic, //
    },
    workqueue::{
        OwnedQueue,
        Work,
        WorkItem, //
    },
};
use zerocopy::{
    FromBytes,
    FromZeros,
    IntoBytes, //
};

use crate::{
    commands::{
        ModifyQpIwarp,
        ModifyQpIwarpCfg,
        Reflush, //
    },
    consts::{
        IwState,
        CC_COMPROMISE,
        MAX_RD_ATOM, //
    },
    formats::{
        low32,
        MpaExt,
        MpaFlags,
        MpaHeader,
        MPA_HEADER_SIZE,
        MPA_KEY_REP,
        MPA_KEY_REQ,
        MPA_MAX_PRIVATE_DATA,
        MPA_REVISION, //
    },
};

/// How long the active side waits for TCP, then for the MPA reply (erdma_rs_hw 7.1).
const CONNECT_TIMEOUT: Delta = Delta::from_secs(10);
/// How long an accepted TCP connection has to deliver its MPA request, in seconds.
const REQUEST_TIMEOUT_SECS: i64 = 20;
const REQUEST_TIMEOUT: Delta = Delta::from_secs(REQUEST_TIMEOUT_SECS);
/// The most private data iw_cm can report (its event has an 8-bit length).
const MAX_REPORTED_PRIVATE_DATA: usize = 255;
/// Connections a listener's peers may have open before sending their requests, at least.
const MIN_BACKLOG: i32 = 16;

/// The device, as the connection manager's work reaches it.
pub(crate) trait CmDevice: Send + Sync {
    /// Runs `f` on the device if it is still registered, holding off its unregistration;
    /// returns whether it ran.
    fn with(&self, f: &mut dyn FnMut(&dyn CmHw)) -> bool;
}

/// What the connection manager needs of the device.
pub(crate) trait CmHw {
    /// The device's connection manager.
    fn cm(&self) -> &Cm;
    /// The device, for messages.
    fn dev(&self) -> &device::Device;
    /// Sends an iWARP MODIFY_QP.
    fn modify_qp(&self, cmd: &ModifyQpIwarp) -> Result;
    /// Sends a REFLUSH (failures are the device's to report).
    fn reflush(&self, cmd: &Reflush);
    /// The adapter's congestion-control algorithm.
    fn cc(&self) -> u8;
}

// ---- MPA frames ------------------------------------------------------------------------------

/// A checked MPA frame.
struct Mpa {
    flags: MpaFlags,
    cookie: u32,
    cc: u8,
    pd_len: usize,
}

/// Why a frame is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bad {
    /// Not MPA: the key is wrong.
    Key,
    /// Another revision.
    Revision(u8),
    /// Markers or CRCs asked for.
    MarkersOrCrc,
    /// More private data than MPA allows.
    TooLong(usize),
}

impl Bad {
    fn errno(self) -> Error {
        match self {
            Bad::MarkersOrCrc => ECONNREFUSED,
            _ => EPROTO,
        }
    }
}

/// Decodes the header of a frame of key `key` at the start of `buf` (at least
/// [`MPA_HEADER_SIZE`] bytes).
fn parse_header(buf: &[u8], key: &[u8; 16]) -> Result<Mpa, Bad> {
    let Ok((hdr, _)) = MpaHeader::read_from_prefix(buf) else {
        return Err(Bad::Key);
    };
    if hdr.key != *key {
        return Err(Bad::Key);
    }
    if hdr.revision != MPA_REVISION {
        return Err(Bad::Revision(hdr.revision));
    }
    if hdr.flags.markers() || hdr.flags.crc() {
        return Err(Bad::MarkersOrCrc);
    }
    let pd_len = usize::from(hdr.pd_len.get());
    if pd_len > MPA_MAX_PRIVATE_DATA {
        return Err(Bad::TooLong(pd_len));
    }
    Ok(Mpa {
        flags: hdr.flags,
        cookie: hdr.cookie.get(),
        // CAST: a 4-bit field.
        cc: MpaExt::from(hdr.ext.get()).cc().get() as u8,
        pd_len,
    })
}

/// Builds a frame: header of key `key`, then `pd`.
fn build_frame(key: &[u8; 16], reject: bool, cookie: u32, cc: u8, pd: &[u8]) -> Result<KVec<u8>> {
    let hdr = MpaHeader {
        key: *key,
        flags: MpaFlags::zeroed().with_reject(reject),
        revision: MPA_REVISION,
        // CAST: at most 256, checked by the callers.
        pd_len: (pd.len() as u16).into(),
        cookie: cookie.into(),
        ext: u32::from(MpaExt::zeroed().with_cc(low32(u32::from(cc)))).into(),
    };
    let mut frame = KVec::with_capacity(MPA_HEADER_SIZE + pd.len(), GFP_KERNEL)?;
    frame.extend_from_slice(hdr.as_bytes(), GFP_KERNEL)?;
    frame.extend_from_slice(pd, GFP_KERNEL)?;
    Ok(frame)
}

/// Sends all of `frame`: a fresh connection's send buffer takes a frame of at most 284 bytes
/// at once, so anything less is an error.
fn send_all(sock: &TcpSocket, frame: &[u8]) -> Result {
    match sock.send(frame)? {
        n if n == frame.len() => Ok(()),
        _ => Err(ENOBUFS),
    }
}

// ---- Queue pairs -------------------------------------------------------------------------------

/// The connection state of an iWARP queue pair.
struct Conn {
    /// The adapter's state of the queue pair (RTR is the driver's only: `rtr`).
    state: IwState,
    /// Whether the verbs asked for RTR (reported as such until connected).
    rtr: bool,
    /// The connection's endpoint, while one is attached.
    ep: Option<Arc<Endpoint>>,
    /// Cleared when the queue pair is destroyed: no command may name its QPN afterwards.
    alive: bool,
}

/// Who posts a kernel consumer's work to an iWARP queue pair, and must know each state the
/// connection moves it to (posting needs RTS; in a stopped state posts complete as flushed).
pub(crate) trait IwStateSink: Send + Sync {
    /// The queue pair is now in `state`, as the verbs name it.
    fn iw_state_changed(&self, state: QpState);
    /// The REFLUSH that completes, as flushed, what was posted before it: in a stopped state
    /// the adapter only notes work posted after it got there (erdma_rs_hw 10.13).
    fn reflush(&self) -> Reflush;
}

/// What an iWARP queue pair shares with its connection: its number and cookie, its state, its
/// endpoint, and iw_cm's references on it.
#[pin_data]
pub(crate) struct IwQp {
    qpn: u32,
    /// The cookie CREATE_QP returned, set once it did.
    cookie: AtomicU32,
    /// A kernel queue pair's poster, told of every state change.
    sink: Option<Arc<dyn IwStateSink>>,
    /// Set once the adapter reported the queue pair failed ([`IwQp::fatal`]).
    failed: AtomicBool,
    /// `conn.ep` as the interrupt handler reaches it (`conn` is a mutex).
    #[pin]
    irq_ep: SpinLockIrq<Option<Arc<Endpoint>>>,
    #[pin]
    conn: Mutex<Conn>,
    #[pin]
    refs: SpinLockIrq<u32>,
    #[pin]
    refs_gone: CondVar,
}

impl IwQp {
    /// The state of a new queue pair numbered `qpn`; `sink` hears of its state changes.
    pub(crate) fn new(qpn: u32, sink: Option<Arc<dyn IwStateSink>>) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            qpn,
            cookie: AtomicU32::new(0),
            sink,
            failed: AtomicBool::new(false),
            irq_ep <- new_spinlock_irq!(None),
            conn <- new_mutex!(Conn {
                state: IwState::Idle,
                rtr: false,
                ep: None,
                alive: true,
            }),
            refs <- new_spinlock_irq!(0),
            refs_gone <- new_condvar!(),
        }? Error)
    }

    /// Notes the cookie the adapter gave the queue pair.
    pub(crate) fn set_cookie(&self, cookie: u32) {
        self.cookie.store(cookie, Ordering::Relaxed);
    }

    fn cookie(&self) -> u32 {
        self.cookie.load(Ordering::Relaxed)
    }

    /// The verbs state the queue pair is in (IDLE reads as INIT, erdma_rs_hw 7.1).
    pub(crate) fn state(&self) -> QpState {
        self.verbs_state(&self.conn.lock())
    }

    fn verbs_state(&self, conn: &Conn) -> QpState {
        if self.failed.load(Ordering::Acquire) {
            return QpState::Err;
        }
        match conn.state {
            IwState::Idle if conn.rtr => QpState::Rtr,
            IwState::Idle => QpState::Init,
            IwState::Rts => QpState::Rts,
            IwState::Closing => QpState::Sqd,
            IwState::Terminate => QpState::Sqe,
            IwState::Error => QpState::Err,
        }
    }

    /// Records the adapter's new `state` and tells the sink.
    fn set_state(&self, conn: &mut Conn, state: IwState) {
        conn.state = state;
        if let Some(sink) = &self.sink {
            sink.iw_state_changed(self.verbs_state(conn));
        }
    }

    /// Sends the "stop" MODIFY_QP to `state` (CLOSING, TERMINATE or ERROR).
    fn stop(&self, hw: &dyn CmHw, conn: &mut Conn, state: IwState) -> Result {
        if !conn.alive {
            return Err(ENODEV);
        }
        let cmd = ModifyQpIwarp {
            cfg: ModifyQpIwarpCfg::zeroed()
                .with_state(low32(state.to_raw()))
                .with_qpn(low32(self.qpn)),
            ..ModifyQpIwarp::new_zeroed()
        };
        hw.modify_qp(&cmd)?;
        self.set_state(conn, state);
        self.flush_posted(hw);
        Ok(())
    }

    /// A kernel queue pair that stopped completes what was posted to it so far, as flushed.
    fn flush_posted(&self, hw: &dyn CmHw) {
        if let Some(sink) = &self.sink {
            hw.reflush(&sink.reflush());
        }
    }

    /// The verbs' modify: only the state counts (erdma_rs_hw 7.1). RESET and INIT are IDLE, RTR a
    /// note, RTS only the connection manager's; SQD closes, SQE terminates, ERR fails the queue
    /// pair, each stopping its connection.
    pub(crate) fn modify(&self, hw: &dyn CmHw, next: QpState) -> Result {
        let mut conn = self.conn.lock();
        let target = match next {
            QpState::Reset | QpState::Init | QpState::Rtr => {
                return match conn.state {
                    IwState::Idle => {
                        conn.rtr = next == QpState::Rtr;
                        Ok(())
                    }
                    _ => Err(EINVAL),
                };
            }
            // Only a connection takes a queue pair to RTS: there is no TCP stream without one.
            QpState::Rts => {
                return if conn.state == IwState::Rts {
                    Ok(())
                } else {
                    Err(EINVAL)
                };
            }
            QpState::Sqd => IwState::Closing,
            QpState::Sqe => IwState::Terminate,
            QpState::Err => IwState::Error,
        };
        let ok = match (conn.state, target) {
            (IwState::Rts, _) => true,
            (IwState::Idle, IwState::Error) => true,
            (IwState::Closing | IwState::Terminate, IwState::Error) => true,
            (a, b) => a == b,
        };
        if !ok {
            return Err(EINVAL);
        }
        if conn.state != target {
            self.stop(hw, &mut conn, target)?;
        }
        if let Some(ep) = self.take_ep(&mut conn) {
            ep.kick(EV_LOCAL_CLOSE);
        }
        Ok(())
    }

    /// The adapter reported the queue pair failed (an asynchronous event, erdma_rs_hw 4.2: on
    /// iWARP a Terminate from the peer, or a local error): posting sees ERROR at once, and the
    /// connection ends, with CLOSE to iw_cm (as a connection the peer lost would otherwise
    /// never end: rping waits for it). Any context.
    pub(crate) fn fatal(&self) {
        self.failed.store(true, Ordering::Release);
        if let Some(sink) = &self.sink {
            sink.iw_state_changed(QpState::Err);
        }
        if let Some(ep) = self.irq_ep.lock().as_ref() {
            ep.kick(EV_LOCAL_CLOSE);
        }
    }

    /// After [`IwQp::fatal`], in process context: the adapter has the queue pair in ERROR, and
    /// what was posted while it got there completes as flushed.
    fn note_failed(&self, hw: &dyn CmHw) {
        if !self.failed.load(Ordering::Acquire) {
            return;
        }
        let mut conn = self.conn.lock();
        if conn.state != IwState::Idle && conn.state != IwState::Error {
            self.set_state(&mut conn, IwState::Error);
        }
        drop(conn);
        self.flush_posted(hw);
    }

    /// Detaches the endpoint, from `conn` and from the interrupt handler's view.
    fn take_ep(&self, conn: &mut Conn) -> Option<Arc<Endpoint>> {
        // Out of the spinlock before anything drops.
        let seen = self.irq_ep.lock().take();
        drop(seen);
        conn.ep.take()
    }

    /// iw_cm takes a reference.
    pub(crate) fn add_ref(&self) {
        *self.refs.lock() += 1;
    }

    /// iw_cm drops a reference.
    pub(crate) fn rem_ref(&self) {
        let mut refs = self.refs.lock();
        *refs = refs.saturating_sub(1);
        if *refs == 0 {
            self.refs_gone.notify_all();
        }
    }

    /// Before the queue pair is destroyed: stops its connection (ERROR unless stopped already),
    /// lets no command name it afterwards, and waits until iw_cm dropped its references (it
    /// does once it heard the connection closed).
    pub(crate) fn destroy(&self, hw: &dyn CmHw) {
        {
            let mut conn = self.conn.lock();
            if conn.state != IwState::Error {
                if let Err(e) = self.stop(hw, &mut conn, IwState::Error) {
                    dev_warn!(
                        hw.dev(),
                        "QP {}: MODIFY_QP to ERROR before its destruction failed ({})\n",
                        self.qpn,
                        e.to_errno()
                    );
                }
            }
            conn.alive = false;
            if let Some(ep) = self.take_ep(&mut conn) {
                ep.kick(EV_LOCAL_CLOSE);
            }
        }
        let mut refs = self.refs.lock();
        let mut waited = 0u32;
        while *refs > 0 {
            let res = self
                .refs_gone
                .wait_timeout(&mut refs, msecs_to_jiffies(10_000));
            if matches!(res, CondVarTimeoutResult::Timeout) {
                waited += 10;
                dev_warn!(
                    hw.dev(),
                    "QP {}: the connection manager still holds {} reference(s) after {} s\n",
                    self.qpn,
                    *refs,
                    waited
                );
            }
        }
    }

    /// Attaches `ep` as the queue pair's connection; `EBUSY` if it has one or is not IDLE.
    fn attach(&self, ep: &Arc<Endpoint>) -> Result {
        let mut conn = self.conn.lock();
        if !conn.alive || conn.ep.is_some() || conn.state != IwState::Idle {
            return Err(EBUSY);
        }
        conn.ep = Some(ep.clone());
        *self.irq_ep.lock() = Some(ep.clone());
        Ok(())
    }

    /// Detaches `ep`, if it is the queue pair's connection.
    fn detach(&self, ep: &Endpoint) {
        let mut conn = self.conn.lock();
        if conn.ep.as_ref().is_some_and(|e| core::ptr::eq(&**e, ep)) {
            drop(self.take_ep(&mut conn));
        }
    }

    /// Hands the connection to the adapter (MODIFY_QP to RTS).
    fn to_rts(&self, hw: &dyn CmHw, link: &Link) -> Result {
        let mut conn = self.conn.lock();
        if !conn.alive || conn.state != IwState::Idle {
            return Err(ECONNABORTED);
        }
        let cmd = ModifyQpIwarp {
            cfg: ModifyQpIwarpCfg::zeroed()
                .with_state(low32(IwState::Rts.to_raw()))
                .with_cc(low32(link.cc.into()))
                .with_qpn(low32(self.qpn)),
            cookie: link.peer_cookie,
            daddr: link.remote.ip_u32().into(),
            saddr: link.local.ip_u32().into(),
            sport: link.local.port().into(),
            dport: link.remote.port().into(),
            snd_nxt: link.snd_nxt,
            rcv_nxt: link.rcv_nxt,
            reserved: 0,
        };
        hw.modify_qp(&cmd)?;
        self.set_state(&mut conn, IwState::Rts);
        Ok(())
    }
}

/// What MODIFY_QP to RTS hands the adapter.
struct Link {
    local: SocketAddrV4,
    remote: SocketAddrV4,
    peer_cookie: u32,
    cc: u8,
    snd_nxt: u32,
    rcv_nxt: u32,
}

// ---- Endpoints ---------------------------------------------------------------------------------

/// A socket event arrived.
const EV_SOCKET: u32 = 1 << 0;
/// The timer ran out.
const EV_TIMEOUT: u32 = 1 << 1;
/// The queue pair stopped, failed or went away.
const EV_LOCAL_CLOSE: u32 = 1 << 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EpState {
    /// Active: waiting for TCP.
    Connecting,
    /// Active: the request is sent; waiting for the reply.
    AwaitReply,
    /// Passive: waiting for the request.
    AwaitRequest,
    /// Passive: reported to iw_cm; waiting for accept or reject.
    AwaitAccept,
    /// The adapter has the connection.
    Connected,
    /// Gone.
    Closed,
}

/// An endpoint's state, under its lock.
struct Inner {
    state: EpState,
    sock: Option<TcpSocket>,
    /// The identifier events go to: the active side's, the accepted one's.
    id: Option<CmIdRef>,
    /// Passive, until reported: the listener whose identifier hears the request.
    listener: Option<Arc<Listener>>,
    qp: Option<Arc<IwQp>>,
    timer: Option<ArcHrTimerHandle<Endpoint>>,
    /// The MPA frame received so far.
    rx: KVec<u8>,
    /// Active: the private data of the request.
    pd: KVec<u8>,
    /// The peer's frame, once complete.
    peer: Option<Mpa>,
    local: SocketAddrV4,
    remote: SocketAddrV4,
    /// Passive: the token iw_cm knows the request by.
    token: usize,
}

/// One side of one connection (see the [module documentation](self)).
#[pin_data]
pub(crate) struct Endpoint {
    dev: Arc<dyn CmDevice>,
    pending: AtomicU32,
    #[pin]
    work: Work<Endpoint>,
    #[pin]
    timer: HrTimer<Endpoint>,
    #[pin]
    inner: Mutex<Inner>,
}

impl_has_work! {
    impl HasWork<Self> for Endpoint { self.work }
}

impl_has_hr_timer! {
    impl HasHrTimer<Self> for Endpoint {
        mode: RelativeMode<Monotonic>, field: self.timer
    }
}

impl WorkItem for Endpoint {
    type Pointer = Arc<Endpoint>;

    fn run(this: Arc<Endpoint>) {
        let events = this.pending.swap(0, Ordering::AcqRel);
        let ep = this.clone();
        if !this.dev.with(&mut |hw| ep.process(hw, events)) {
            // The device is unregistering: nothing to tell iw_cm, nothing to send.
            this.abandon();
        }
    }
}

impl HrTimerCallback for Endpoint {
    type Pointer<'a> = Arc<Endpoint>;

    fn run(
        this: ArcBorrow<'_, Endpoint>,
        _ctx: HrTimerCallbackContext<'_, Self>,
    ) -> HrTimerRestart {
        Arc::from(this).kick(EV_TIMEOUT);
        HrTimerRestart::NoRestart
    }
}

/// Says why the peer's MPA `frame` ("request", "reply") was refused.
fn note_bad(hw: &dyn CmHw, frame: &str, peer: SocketAddrV4, bad: Bad) {
    dev_info!(
        hw.dev(),
        "iWARP CM: bad MPA {} from {} ({:?}), refused\n",
        frame,
        peer,
        bad
    );
}

/// Whether `len` bytes of the peer's private data fit an iw_cm event; says so when not (MPA
/// allows more than iw_cm can carry).
fn reportable(hw: &dyn CmHw, peer: SocketAddrV4, len: usize) -> bool {
    if len <= MAX_REPORTED_PRIVATE_DATA {
        return true;
    }
    dev_info!(
        hw.dev(),
        "iWARP CM: {} sent {} bytes of private data; iw_cm takes at most {}\n",
        peer,
        len,
        MAX_REPORTED_PRIVATE_DATA
    );
    false
}

impl SocketEvents for Endpoint {
    fn event(this: ArcBorrow<'_, Self>, _event: SocketEvent) {
        Arc::from(this).kick(EV_SOCKET);
    }
}

impl Endpoint {
    fn new(dev: Arc<dyn CmDevice>, state: EpState) -> Result<Arc<Self>> {
        Arc::pin_init(
            try_pin_init!(Self {
                dev,
                pending: AtomicU32::new(0),
                work <- new_work!("erdma_rs::cm::Endpoint::work"),
                timer <- HrTimer::new(),
                inner <- new_mutex!(Inner {
                    state,
                    sock: None,
                    id: None,
                    listener: None,
                    qp: None,
                    timer: None,
                    rx: KVec::new(),
                    pd: KVec::new(),
                    peer: None,
                    local: SocketAddrV4::default(),
                    remote: SocketAddrV4::default(),
                    token: 0,
                }),
            }? Error),
            GFP_KERNEL,
        )
    }

    /// Notes `events` and queues the endpoint's work; any context. The caller holds a
    /// reference besides this one, so that the work's is never the last dropped here.
    fn kick(self: &Arc<Self>, events: u32) {
        self.pending.fetch_or(events, Ordering::AcqRel);
        self.dev.with(&mut |hw| {
            // Already queued: that run sees the new events.
            let _ = hw.cm().queue.enqueue(self.clone());
        });
    }

    /// Starts (or restarts) the timer.
    fn arm(self: &Arc<Self>, inner: &mut Inner, after: Delta) {
        inner.timer = None;
        inner.timer = Some(self.clone().start(after));
    }

    /// Does what `events` ask for.
    fn process(self: &Arc<Self>, hw: &dyn CmHw, events: u32) {
        let mut inner = self.inner.lock();
        if inner.state == EpState::Closed {
            return;
        }
        if events & EV_LOCAL_CLOSE != 0 {
            self.local_close(hw, &mut inner);
            return;
        }
        let state = inner.state;
        if events & EV_TIMEOUT != 0 && inner.timer.is_some() {
            inner.timer = None;
            match state {
                EpState::Connecting | EpState::AwaitReply => {
                    self.fail_connect(hw, &mut inner, ETIMEDOUT, &[]);
                }
                EpState::AwaitRequest => {
                    dev_info!(
                        hw.dev(),
                        "iWARP CM: no MPA request from {} within {} s\n",
                        inner.remote,
                        REQUEST_TIMEOUT_SECS
                    );
                    self.close(hw, &mut inner);
                }
                // Only the states above arm the timer.
                EpState::AwaitAccept | EpState::Connected | EpState::Closed => {
                    hw.cm().unexpected(hw, state, "a timeout");
                }
            }
            return;
        }
        if events & EV_SOCKET == 0 {
            return;
        }
        match state {
            EpState::Connecting => self.on_tcp(hw, &mut inner),
            EpState::AwaitReply => self.on_reply(hw, &mut inner),
            EpState::AwaitRequest => self.on_request(hw, &mut inner),
            EpState::AwaitAccept => {
                // The peer gave up before iw_cm answered: accept or reject will find it closed.
                if Self::peer_gone(&inner) {
                    self.close(hw, &mut inner);
                }
            }
            EpState::Connected => {
                if Self::peer_gone(&inner) {
                    self.peer_close(hw, &mut inner);
                }
            }
            EpState::Closed => {}
        }
    }

    /// Whether the peer closed or reset the TCP connection.
    fn peer_gone(inner: &Inner) -> bool {
        inner.sock.as_ref().is_none_or(|s| {
            matches!(
                s.state(),
                TcpState::Close | TcpState::CloseWait | TcpState::LastAck | TcpState::TimeWait
            )
        })
    }

    /// Active: the TCP connection is made (or failed): send the MPA request.
    fn on_tcp(self: &Arc<Self>, hw: &dyn CmHw, inner: &mut Inner) {
        let Some(sock) = inner.sock.as_ref() else {
            hw.cm().unexpected(hw, inner.state, "no socket");
            self.fail_connect(hw, inner, ECONNABORTED, &[]);
            return;
        };
        match sock.state() {
            TcpState::Established => {}
            TcpState::SynSent => return,
            _ => {
                let err = sock.take_error().unwrap_or(ECONNREFUSED);
                self.fail_connect(hw, inner, err, &[]);
                return;
            }
        }
        let (Ok(local), Ok(remote)) = (sock.local_addr(), sock.peer_addr()) else {
            self.fail_connect(hw, inner, ECONNRESET, &[]);
            return;
        };
        inner.local = local;
        inner.remote = remote;
        let Some(cookie) = inner.qp.as_ref().map(|q| q.cookie()) else {
            hw.cm().unexpected(hw, inner.state, "no queue pair");
            self.fail_connect(hw, inner, ECONNABORTED, &[]);
            return;
        };
        let sent = build_frame(&MPA_KEY_REQ, false, cookie, hw.cc(), &inner.pd)
            .and_then(|frame| send_all(sock, &frame));
        if let Err(e) = sent {
            self.fail_connect(hw, inner, e, &[]);
            return;
        }
        inner.state = EpState::AwaitReply;
        self.arm(inner, CONNECT_TIMEOUT);
        // The reply may be there already.
        self.on_reply(hw, inner);
    }

    /// Reads what has arrived of the peer's frame of key `key`. `Ok(true)` once the frame is
    /// complete (in `inner.peer`, its private data at `inner.rx[MPA_HEADER_SIZE..]`); `Err` if
    /// the frame is bad or the connection broke.
    fn receive(inner: &mut Inner, key: &[u8; 16]) -> Result<bool, Option<Bad>> {
        let Some(sock) = inner.sock.as_ref() else {
            return Err(None);
        };
        loop {
            if inner.peer.is_none() && inner.rx.len() >= MPA_HEADER_SIZE {
                inner.peer = Some(parse_header(&inner.rx, key).map_err(Some)?);
            }
            let total = MPA_HEADER_SIZE + inner.peer.as_ref().map_or(0, |m| m.pd_len);
            if inner.rx.len() >= total {
                return Ok(true);
            }
            let want = total - inner.rx.len();
            let mut buf = [0u8; 64];
            let n = want.min(buf.len());
            match sock.recv(&mut buf[..n]) {
                Ok(0) => return Err(None),
                Ok(got) => {
                    inner
                        .rx
                        .extend_from_slice(&buf[..got], GFP_KERNEL)
                        .map_err(|_| None)?;
                }
                Err(e) if e == EAGAIN => {
                    // Nothing more yet; a closed connection says so by its state.
                    return if Self::peer_gone(inner) {
                        Err(None)
                    } else {
                        Ok(false)
                    };
                }
                Err(_) => return Err(None),
            }
        }
    }

    /// Active: the MPA reply (or part of it) arrived.
    fn on_reply(self: &Arc<Self>, hw: &dyn CmHw, inner: &mut Inner) {
        match Self::receive(inner, &MPA_KEY_REP) {
            Ok(false) => {}
            Err(bad) => {
                if let Some(bad) = bad {
                    note_bad(hw, "reply", inner.remote, bad);
                }
                let err = bad.map_or(ECONNRESET, Bad::errno);
                self.fail_connect(hw, inner, err, &[]);
            }
            Ok(true) => self.on_reply_complete(hw, inner),
        }
    }

    fn on_reply_complete(self: &Arc<Self>, hw: &dyn CmHw, inner: &mut Inner) {
        let Some(peer) = inner.peer.as_ref() else {
            hw.cm()
                .unexpected(hw, inner.state, "a reply without its header");
            self.fail_connect(hw, inner, ECONNABORTED, &[]);
            return;
        };
        let (reject, peer_cookie, peer_cc) = (peer.flags.reject(), peer.cookie, peer.cc);
        let mut pd = KVec::new();
        if pd
            .extend_from_slice(&inner.rx[MPA_HEADER_SIZE..], GFP_KERNEL)
            .is_err()
        {
            self.fail_connect(hw, inner, ENOMEM, &[]);
            return;
        }
        if !reportable(hw, inner.remote, pd.len()) {
            self.fail_connect(hw, inner, EPROTO, &[]);
            return;
        }
        if reject {
            self.fail_connect(hw, inner, ECONNRESET, &pd);
            return;
        }
        let (Some(sock), Some(qp)) = (inner.sock.as_ref(), inner.qp.clone()) else {
            hw.cm()
                .unexpected(hw, inner.state, "no socket or queue pair");
            self.fail_connect(hw, inner, ECONNABORTED, &[]);
            return;
        };
        let seq = sock.seq();
        let own = hw.cc();
        let link = Link {
            local: inner.local,
            remote: inner.remote,
            peer_cookie,
            cc: if own == peer_cc { own } else { CC_COMPROMISE },
            snd_nxt: seq.snd_nxt,
            rcv_nxt: seq.rcv_nxt,
        };
        if let Err(e) = qp.to_rts(hw, &link) {
            self.fail_connect(hw, inner, e, &[]);
            return;
        }
        inner.timer = None;
        inner.state = EpState::Connected;
        let mut ev = CmEvent::new(CmEventKind::ConnectReply, inner.local, inner.remote);
        ev.private_data = &pd;
        // CAST: 128.
        (ev.ird, ev.ord) = (MAX_RD_ATOM as u8, MAX_RD_ATOM as u8);
        if let Some(id) = inner.id.as_ref() {
            let _ = id.report(&ev);
        }
        // The peer may have closed already.
        if Self::peer_gone(inner) {
            self.peer_close(hw, inner);
        }
    }

    /// Active: the connection failed with `err`: tell iw_cm (with the peer's private data of a
    /// reject) and close.
    fn fail_connect(self: &Arc<Self>, hw: &dyn CmHw, inner: &mut Inner, err: Error, pd: &[u8]) {
        let mut ev = CmEvent::new(CmEventKind::ConnectReply, inner.local, inner.remote);
        ev.status = Some(err);
        ev.private_data = pd;
        if let Some(id) = inner.id.as_ref() {
            let _ = id.report(&ev);
        }
        self.close(hw, inner);
    }

    /// Passive: the MPA request (or part of it) arrived.
    fn on_request(self: &Arc<Self>, hw: &dyn CmHw, inner: &mut Inner) {
        match Self::receive(inner, &MPA_KEY_REQ) {
            Ok(false) => {}
            Err(bad) => {
                if let Some(bad) = bad {
                    note_bad(hw, "request", inner.remote, bad);
                    // A peer that speaks MPA hears why; anything else is just closed.
                    if bad != Bad::Key {
                        self.send_reject(hw, inner, &[]);
                    }
                }
                self.close(hw, inner);
            }
            Ok(true) => self.on_request_complete(hw, inner),
        }
    }

    fn on_request_complete(self: &Arc<Self>, hw: &dyn CmHw, inner: &mut Inner) {
        let pd_len = inner.rx.len() - MPA_HEADER_SIZE;
        if !reportable(hw, inner.remote, pd_len) {
            self.send_reject(hw, inner, &[]);
            self.close(hw, inner);
            return;
        }
        inner.timer = None;
        let Some(listener) = inner.listener.take() else {
            self.close(hw, inner);
            return;
        };
        let mut ev = CmEvent::new(CmEventKind::ConnectRequest, inner.local, inner.remote);
        ev.private_data = &inner.rx[MPA_HEADER_SIZE..];
        ev.token = inner.token;
        // CAST: 128.
        (ev.ird, ev.ord) = (MAX_RD_ATOM as u8, MAX_RD_ATOM as u8);
        inner.state = EpState::AwaitAccept;
        // Reported: it no longer counts against the listener's backlog.
        hw.cm().reported(inner.token);
        let reported = listener.report(&ev);
        if reported.is_err() {
            self.close(hw, inner);
        }
    }

    /// Passive: sends a reply that rejects the connection, with `pd`.
    fn send_reject(&self, hw: &dyn CmHw, inner: &Inner, pd: &[u8]) {
        if let Some(sock) = inner.sock.as_ref() {
            let sent = build_frame(&MPA_KEY_REP, true, 0, hw.cc(), pd)
                .and_then(|frame| send_all(sock, &frame));
            if sent.is_err() {
                dev_info!(
                    hw.dev(),
                    "iWARP CM: could not send a reject to {}\n",
                    inner.remote
                );
            }
        }
    }

    /// Connected: the peer closed or reset the connection: DISCONNECT, then CLOSE, and the
    /// queue pair closes.
    fn peer_close(self: &Arc<Self>, hw: &dyn CmHw, inner: &mut Inner) {
        if let Some(qp) = inner.qp.as_ref() {
            let mut conn = qp.conn.lock();
            if conn.state == IwState::Rts {
                let _ = qp.stop(hw, &mut conn, IwState::Closing);
            }
        }
        if let Some(id) = inner.id.as_ref() {
            let _ = id.report(&CmEvent::new(
                CmEventKind::Disconnect,
                inner.local,
                inner.remote,
            ));
            let _ = id.report(&CmEvent::new(CmEventKind::Close, inner.local, inner.remote));
        }
        self.close(hw, inner);
    }

    /// The queue pair stopped, failed or went away.
    fn local_close(self: &Arc<Self>, hw: &dyn CmHw, inner: &mut Inner) {
        if let Some(qp) = inner.qp.as_ref() {
            qp.note_failed(hw);
        }
        match inner.state {
            EpState::Connecting | EpState::AwaitReply => {
                self.fail_connect(hw, inner, ECONNABORTED, &[]);
            }
            EpState::Connected => {
                if let Some(id) = inner.id.as_ref() {
                    let _ = id.report(&CmEvent::new(CmEventKind::Close, inner.local, inner.remote));
                }
                self.close(hw, inner);
            }
            // A passive endpoint has its queue pair only once accepted (Connected).
            EpState::AwaitRequest | EpState::AwaitAccept => {
                hw.cm()
                    .unexpected(hw, inner.state, "a local close before accept");
                self.close(hw, inner);
            }
            EpState::Closed => {}
        }
    }

    /// Ends the endpoint: everything it holds goes.
    fn close(self: &Arc<Self>, hw: &dyn CmHw, inner: &mut Inner) {
        hw.cm().remove(inner.token);
        Self::release(self, inner);
    }

    /// Releases what the endpoint holds.
    fn release(this: &Endpoint, inner: &mut Inner) {
        inner.state = EpState::Closed;
        inner.timer = None;
        // Dropping the socket stops its events and closes the connection.
        inner.sock = None;
        if let Some(qp) = inner.qp.take() {
            qp.detach(this);
        }
        inner.listener = None;
        inner.id = None;
    }

    /// The device went away under queued work: release without telling anybody.
    fn abandon(&self) {
        let mut inner = self.inner.lock();
        Self::release(self, &mut inner);
    }
}

// ---- Listeners ---------------------------------------------------------------------------------

/// A listening socket of an iw_cm identifier.
#[pin_data]
pub(crate) struct Listener {
    dev: Arc<dyn CmDevice>,
    id: CmIdRef,
    token: usize,
    backlog: i32,
    #[pin]
    work: Work<Listener>,
    #[pin]
    sock: Mutex<Option<TcpSocket>>,
}

impl_has_work! {
    impl HasWork<Self> for Listener { self.work }
}

impl WorkItem for Listener {
    type Pointer = Arc<Listener>;

    fn run(this: Arc<Listener>) {
        let l = this.clone();
        this.dev.with(&mut |hw| l.accept_all(hw));
    }
}

impl SocketEvents for Listener {
    fn event(this: ArcBorrow<'_, Self>, _event: SocketEvent) {
        let l: Arc<Listener> = this.into();
        this.dev.with(&mut |hw| {
            let _ = hw.cm().queue.enqueue(l.clone());
        });
    }
}

impl Listener {
    /// Reports a connection request to the listener's identifier.
    fn report(&self, ev: &CmEvent<'_>) -> Result {
        self.id.report(ev)
    }

    /// Accepts the TCP connections waiting; each becomes an endpoint awaiting its request.
    fn accept_all(self: &Arc<Self>, hw: &dyn CmHw) {
        let sock = self.sock.lock();
        let Some(sock) = sock.as_ref() else {
            return;
        };
        loop {
            let child = match sock.accept() {
                Ok(Some(child)) => child,
                Ok(None) => return,
                Err(e) => {
                    dev_info!(hw.dev(), "iWARP CM: accept failed ({})\n", e.to_errno());
                    return;
                }
            };
            if hw.cm().pending_of(self.token) >= self.backlog.max(MIN_BACKLOG) as usize {
                dev_info!(
                    hw.dev(),
                    "iWARP CM: listener backlog full, connection dropped\n"
                );
                continue;
            }
            if let Err(e) = self.adopt(hw, child) {
                dev_info!(
                    hw.dev(),
                    "iWARP CM: no endpoint for a new connection ({})\n",
                    e.to_errno()
                );
            }
        }
    }

    fn adopt(self: &Arc<Self>, hw: &dyn CmHw, mut child: TcpSocket) -> Result {
        let ep = Endpoint::new(self.dev.clone(), EpState::AwaitRequest)?;
        let token = hw.cm().insert(&ep, Some(self.token))?;
        let mut inner = ep.inner.lock();
        inner.token = token;
        inner.listener = Some(self.clone());
        inner.local = child.local_addr().unwrap_or_default();
        inner.remote = child.peer_addr().unwrap_or_default();
        if let Err(e) = child.watch(ep.clone()) {
            drop(child);
            ep.close(hw, &mut inner);
            return Err(e);
        }
        inner.sock = Some(child);
        ep.arm(&mut inner, REQUEST_TIMEOUT);
        drop(inner);
        // The request may have arrived with the connection.
        ep.kick(EV_SOCKET);
        Ok(())
    }

    /// Stops listening.
    fn stop(&self) {
        drop(self.sock.lock().take());
    }
}

// ---- The connection manager of a device ----------------------------------------------------------

/// An endpoint in the table, and the listener it came from.
struct Entry {
    ep: Arc<Endpoint>,
    /// Passive, until accepted: the listener whose end ends it too.
    listener: Option<usize>,
    /// Passive: its request was reported to iw_cm (it no longer counts against the backlog).
    reported: bool,
}

/// A listener in the table, with the endpoints it accepted that are not accepted by iw_cm yet.
struct ListenerEntry {
    listener: Arc<Listener>,
    /// The tokens of its endpoints not accepted yet.
    children: RBTree<usize, ()>,
    /// How many of them have not had their request reported (the backlog's count).
    unreported: usize,
}

/// The tables of a [`Cm`]: endpoints and listeners by token, each listener with its children.
/// Every operation is a lookup by token, never a scan.
struct Tables {
    next_token: usize,
    /// Every live endpoint, by token.
    endpoints: RBTree<usize, Entry>,
    /// Every listener, by token.
    listeners: RBTree<usize, ListenerEntry>,
}

impl Tables {
    /// A fresh token.
    fn token(&mut self) -> usize {
        let token = self.next_token;
        self.next_token = self.next_token.wrapping_add(1).max(1);
        token
    }

    /// Endpoint `token` leaves its listener's children (accepted, or gone).
    fn unlink_child(&mut self, token: usize) {
        let Some(e) = self.endpoints.get_mut(&token) else {
            return;
        };
        let Some(l) = e.listener.take() else {
            return;
        };
        let reported = e.reported;
        if let Some(le) = self.listeners.get_mut(&l) {
            if le.children.remove(&token).is_some() && !reported {
                le.unreported -= 1;
            }
        }
    }
}

/// The connection manager of one iWARP device: its work queue and its endpoints and
/// listeners. Dropping it closes what is left, then runs what is queued.
///
/// The tables are under a mutex: only the connection manager's work and the iw_cm operations
/// (process context) use them; socket callbacks and timers only queue work.
#[pin_data(PinnedDrop)]
pub(crate) struct Cm {
    #[pin]
    tables: Mutex<Tables>,
    queue: OwnedQueue,
    /// The rate of [`Cm::unexpected`]'s reports.
    limit: Ratelimit,
}

impl Cm {
    /// A connection manager with its ordered work queue.
    pub(crate) fn new() -> Result<impl PinInit<Self, Error>> {
        let queue = OwnedQueue::new_ordered(c"erdma_rs_cm")?;
        Ok(try_pin_init!(Self {
            tables <- new_mutex!(Tables {
                next_token: 1,
                endpoints: RBTree::new(),
                listeners: RBTree::new(),
            }),
            queue,
            limit: Ratelimit::new(Ratelimit::DEFAULT_INTERVAL, Ratelimit::DEFAULT_BURST),
        }? Error))
    }

    /// Reports, rate-limited, `what` the state machine found in `state` that it never leads
    /// to (the endpoint then ends): a bug, never ignored in silence.
    fn unexpected(&self, hw: &dyn CmHw, state: EpState, what: &str) {
        if let Some(missed) = self.limit.check() {
            if missed > 0 {
                dev_warn!(hw.dev(), "iWARP CM: {missed} reports suppressed\n");
            }
            dev_warn!(
                hw.dev(),
                "iWARP CM: unexpected {what} in endpoint state {state:?}; the endpoint ends\n"
            );
        }
    }

    /// Enters `ep` (from `listener`, if passive) into the table; returns its token. `ENOENT` if
    /// the listener is gone.
    fn insert(&self, ep: &Arc<Endpoint>, listener: Option<usize>) -> Result<usize> {
        let node = RBTreeNodeReservation::new(GFP_KERNEL)?;
        let child = match listener {
            Some(_) => Some(RBTreeNodeReservation::new(GFP_KERNEL)?),
            None => None,
        };
        let mut t = self.tables.lock();
        let token = t.token();
        if let (Some(l), Some(child)) = (listener, child) {
            let le = t.listeners.get_mut(&l).ok_or(ENOENT)?;
            le.children.insert(child.into_node(token, ()));
            le.unreported += 1;
        }
        t.endpoints.insert(node.into_node(
            token,
            Entry {
                ep: ep.clone(),
                listener,
                reported: false,
            },
        ));
        Ok(token)
    }

    /// Takes endpoint `token` out of the tables.
    fn remove(&self, token: usize) {
        let removed = {
            let mut t = self.tables.lock();
            t.unlink_child(token);
            t.endpoints.remove(&token)
        };
        drop(removed);
    }

    /// Endpoint `token`'s request was reported to iw_cm: it no longer counts against its
    /// listener's backlog.
    fn reported(&self, token: usize) {
        let mut t = self.tables.lock();
        let Some(e) = t.endpoints.get_mut(&token) else {
            return;
        };
        if core::mem::replace(&mut e.reported, true) {
            return;
        }
        if let Some(l) = e.listener {
            if let Some(le) = t.listeners.get_mut(&l) {
                le.unreported -= 1;
            }
        }
    }

    /// Endpoint `token` was accepted: it outlives its listener.
    fn accepted(&self, token: usize) {
        self.tables.lock().unlink_child(token);
    }

    /// How many endpoints of listener `token` have not been reported yet.
    fn pending_of(&self, token: usize) -> usize {
        self.tables
            .lock()
            .listeners
            .get(&token)
            .map_or(0, |le| le.unreported)
    }

    /// Enters listener `l` under a fresh token, which it is told.
    fn insert_listener(
        &self,
        make: impl FnOnce(usize) -> Result<Arc<Listener>>,
    ) -> Result<Arc<Listener>> {
        let node = RBTreeNodeReservation::new(GFP_KERNEL)?;
        let mut t = self.tables.lock();
        let token = t.token();
        let l = make(token)?;
        t.listeners.insert(node.into_node(
            token,
            ListenerEntry {
                listener: l.clone(),
                children: RBTree::new(),
                unreported: 0,
            },
        ));
        Ok(l)
    }

    /// Takes listener `token` out of the tables, with its endpoints not accepted yet, which
    /// leave it.
    fn remove_listener(&self, token: usize) -> Option<(Arc<Listener>, KVec<Arc<Endpoint>>)> {
        let mut t = self.tables.lock();
        let le = t.listeners.remove(&token)?;
        let mut children = KVec::new();
        for (child, ()) in le.children.iter() {
            if let Some(e) = t.endpoints.get_mut(child) {
                e.listener = None;
                // Dropping one that did not fit only leaves it to its own timer.
                let _ = children.push(e.ep.clone(), GFP_KERNEL);
            }
        }
        Some((le.listener, children))
    }

    /// The endpoint iw_cm knows by `token`.
    fn endpoint(&self, token: usize) -> Option<Arc<Endpoint>> {
        self.tables
            .lock()
            .endpoints
            .get(&token)
            .map(|e| e.ep.clone())
    }
}

#[pinned_drop]
impl PinnedDrop for Cm {
    fn drop(self: Pin<&mut Self>) {
        // Registration is over: no callback and no work reaches the device any more. Close
        // what is left; the queue, dropped next, runs what is queued (which finds it closed).
        let (endpoints, listeners) = {
            let mut t = self.tables.lock();
            (
                core::mem::replace(&mut t.endpoints, RBTree::new()),
                core::mem::replace(&mut t.listeners, RBTree::new()),
            )
        };
        for (_, le) in listeners.iter() {
            le.listener.stop();
        }
        for (_, e) in endpoints.iter() {
            e.ep.abandon();
        }
    }
}

// ---- The iw_cm operations -----------------------------------------------------------------------

/// The IPv4 addresses of `id`.
fn addresses(id: &CmId) -> Result<(SocketAddrV4, SocketAddrV4)> {
    Ok((id.local_addr()?, id.remote_addr()?))
}

/// iw_connect: starts the active side of a connection of `qp` to the remote address of `id`.
pub(crate) fn connect(
    hw: &dyn CmHw,
    dev: Arc<dyn CmDevice>,
    id: &CmId,
    param: &ConnParam<'_>,
    qp: Arc<IwQp>,
) -> Result {
    let (local, remote) = addresses(id)?;
    if param.private_data.len() > MAX_REPORTED_PRIVATE_DATA
        || param.ord > MAX_RD_ATOM
        || param.ird > MAX_RD_ATOM
    {
        return Err(EINVAL);
    }
    let ep = Endpoint::new(dev, EpState::Connecting)?;
    qp.attach(&ep)?;
    let token = match hw.cm().insert(&ep, None) {
        Ok(t) => t,
        Err(e) => {
            qp.detach(&ep);
            return Err(e);
        }
    };
    let mut inner = ep.inner.lock();
    inner.token = token;
    inner.qp = Some(qp);
    inner.local = local;
    inner.remote = remote;
    let started = (|| -> Result {
        inner.pd.extend_from_slice(param.private_data, GFP_KERNEL)?;
        let mut sock = TcpSocket::new()?;
        sock.set_reuse_addr();
        sock.set_nodelay();
        sock.bind(local)?;
        sock.watch(ep.clone())?;
        sock.connect(remote)?;
        inner.sock = Some(sock);
        inner.id = Some(id.get());
        ep.arm(&mut inner, CONNECT_TIMEOUT);
        // The connection may be made already (a local peer answers within the call), its state
        // change reported before the socket was the endpoint's: look at it once now.
        ep.kick(EV_SOCKET);
        Ok(())
    })();
    if let Err(e) = started {
        // iw_cm hears the error from the return value, not from an event.
        inner.id = None;
        ep.close(hw, &mut inner);
        return Err(e);
    }
    Ok(())
}

/// iw_accept: hands the connection of the request `id` to `qp`, then sends the reply. A request
/// whose connection ended (its peer gone, its listener destroyed) is `ECONNRESET`.
pub(crate) fn accept(hw: &dyn CmHw, id: &CmId, param: &ConnParam<'_>, qp: Arc<IwQp>) -> Result {
    let ep = hw.cm().endpoint(id.token()).ok_or(ECONNRESET)?;
    let mut inner = ep.inner.lock();
    if inner.state != EpState::AwaitAccept || Endpoint::peer_gone(&inner) {
        ep.close(hw, &mut inner);
        return Err(ECONNRESET);
    }
    if param.private_data.len() > MAX_REPORTED_PRIVATE_DATA
        || param.ord > MAX_RD_ATOM
        || param.ird > MAX_RD_ATOM
    {
        return Err(EINVAL);
    }
    let result = (|| -> Result {
        qp.attach(&ep)?;
        inner.qp = Some(qp.clone());
        let (peer_cookie, peer_cc) = inner
            .peer
            .as_ref()
            .map(|p| (p.cookie, p.cc))
            .ok_or(EINVAL)?;
        let frame = build_frame(
            &MPA_KEY_REP,
            false,
            qp.cookie(),
            hw.cc(),
            param.private_data,
        )?;
        let sock = inner.sock.as_ref().ok_or(ECONNRESET)?;
        let seq = sock.seq();
        let own = hw.cc();
        // The reply goes out through the socket after the adapter took the connection over:
        // the adapter starts after it (erdma_rs_hw 7.1, 10.14).
        // CAST: at most 28 + 255 bytes.
        let link = Link {
            local: inner.local,
            remote: inner.remote,
            peer_cookie,
            cc: if own == peer_cc { own } else { CC_COMPROMISE },
            snd_nxt: seq.snd_nxt.wrapping_add(frame.len() as u32),
            rcv_nxt: seq.rcv_nxt,
        };
        qp.to_rts(hw, &link)?;
        send_all(sock, &frame)?;
        Ok(())
    })();
    if let Err(e) = result {
        ep.close(hw, &mut inner);
        return Err(e);
    }
    inner.state = EpState::Connected;
    // Accepted: it outlives its listener.
    hw.cm().accepted(inner.token);
    let cm_id = id.get();
    let mut ev = CmEvent::new(CmEventKind::Established, inner.local, inner.remote);
    // CAST: 128.
    (ev.ird, ev.ord) = (MAX_RD_ATOM as u8, MAX_RD_ATOM as u8);
    let _ = cm_id.report(&ev);
    inner.id = Some(cm_id);
    if Endpoint::peer_gone(&inner) {
        ep.peer_close(hw, &mut inner);
    }
    Ok(())
}

/// iw_reject: answers the request `id` with a reject carrying `pd`, and closes.
pub(crate) fn reject(hw: &dyn CmHw, id: &CmId, pd: &[u8]) -> Result {
    let ep = hw.cm().endpoint(id.token()).ok_or(ECONNRESET)?;
    let mut inner = ep.inner.lock();
    if inner.state == EpState::AwaitAccept && pd.len() <= MAX_REPORTED_PRIVATE_DATA {
        ep.send_reject(hw, &inner, pd);
    }
    ep.close(hw, &mut inner);
    Ok(())
}

/// iw_create_listen: listens on the local address of `id` (the wildcard address only on the
/// device's network interface `ifindex`).
pub(crate) fn create_listen(
    hw: &dyn CmHw,
    dev: Arc<dyn CmDevice>,
    id: &CmId,
    backlog: i32,
    ifindex: i32,
) -> Result {
    let local = id.local_addr()?;
    let mut sock = TcpSocket::new()?;
    sock.set_reuse_addr();
    if local.is_unspecified() {
        sock.bind_to_device(ifindex)?;
    }
    sock.bind(local)?;
    let l = hw.cm().insert_listener(|token| {
        Arc::pin_init(
            try_pin_init!(Listener {
                dev,
                id: id.get(),
                token,
                backlog,
                work <- new_work!("erdma_rs::cm::Listener::work"),
                sock <- new_mutex!(None),
            }? Error),
            GFP_KERNEL,
        )
    })?;
    let token = l.token;
    let started = (|| -> Result {
        sock.watch(l.clone())?;
        sock.listen(backlog.max(MIN_BACKLOG))?;
        *l.sock.lock() = Some(sock);
        Ok(())
    })();
    if let Err(e) = started {
        drop(hw.cm().remove_listener(token));
        return Err(e);
    }
    id.set_token(token);
    Ok(())
}

/// iw_destroy_listen: stops the listener of `id`. Its connections not accepted yet end with it:
/// those still waiting for their request are closed, those whose request was reported get a
/// reject reply first. iw_cm drops the connection requests still queued for an identifier it
/// destroys, so a reported request may never be answered; and, as with a TCP listener's queue,
/// a request nobody accepted does not outlive its listener.
pub(crate) fn destroy_listen(hw: &dyn CmHw, id: &CmId) -> Result {
    let (l, children) = hw.cm().remove_listener(id.token()).ok_or(EINVAL)?;
    l.stop();
    // No endpoint joins the listener now: the socket that accepted them is gone.
    for ep in children {
        let mut inner = ep.inner.lock();
        match inner.state {
            EpState::AwaitRequest => ep.close(hw, &mut inner),
            EpState::AwaitAccept => {
                ep.send_reject(hw, &inner, &[]);
                ep.close(hw, &mut inner);
            }
            // Accepted (or closed) since the listener was removed.
            _ => {}
        }
    }
    Ok(())
}

#[kunit_tests(erdma_rs_cm)]
mod tests {
    use super::*;

    /// A frame as erdma_rs_hw 7.1 lays it out, written by hand.
    fn frame(key: &[u8; 16], flags: u8, rev: u8, pd_len: u16, cookie: u32, ext: u32) -> KVec<u8> {
        let mut f = KVec::new();
        f.extend_from_slice(key, GFP_KERNEL).unwrap();
        f.extend_from_slice(&[flags, rev], GFP_KERNEL).unwrap();
        f.extend_from_slice(&pd_len.to_be_bytes(), GFP_KERNEL)
            .unwrap();
        f.extend_from_slice(&cookie.to_be_bytes(), GFP_KERNEL)
            .unwrap();
        f.extend_from_slice(&ext.to_be_bytes(), GFP_KERNEL).unwrap();
        f
    }

    #[test]
    fn request_image() {
        let built = build_frame(&MPA_KEY_REQ, false, 0x0102_0304, 1, b"hello").unwrap();
        let mut want = frame(b"MPA ID Req Frame", 0, 129, 5, 0x0102_0304, 1);
        want.extend_from_slice(b"hello", GFP_KERNEL).unwrap();
        assert_eq!(&built[..], &want[..]);
    }

    #[test]
    fn reject_image() {
        let built = build_frame(&MPA_KEY_REP, true, 7, 3, &[]).unwrap();
        assert_eq!(
            &built[..],
            &frame(b"MPA ID Rep Frame", 0x20, 129, 0, 7, 3)[..]
        );
    }

    #[test]
    fn good_reply_decodes() {
        let f = frame(
            b"MPA ID Rep Frame",
            0x20,
            129,
            256,
            0xdead_beef,
            0xffff_fff2,
        );
        let m = parse_header(&f, &MPA_KEY_REP).unwrap();
        assert!(m.flags.reject());
        assert_eq!((m.cookie, m.cc, m.pd_len), (0xdead_beef, 2, 256));
    }

    #[test]
    fn hostile_headers_are_refused() {
        let req = &MPA_KEY_REQ;
        let cases: [(KVec<u8>, Bad); 6] = [
            (frame(b"MPA ID Rep Frame", 0, 129, 0, 1, 0), Bad::Key),
            (frame(b"GET / HTTP/1.1\r\n", 0, 129, 0, 1, 0), Bad::Key),
            (frame(b"MPA ID Req Frame", 0, 1, 0, 1, 0), Bad::Revision(1)),
            (
                frame(b"MPA ID Req Frame", 0x80, 129, 0, 1, 0),
                Bad::MarkersOrCrc,
            ),
            (
                frame(b"MPA ID Req Frame", 0x40, 129, 0, 1, 0),
                Bad::MarkersOrCrc,
            ),
            (
                frame(b"MPA ID Req Frame", 0, 129, 257, 1, 0),
                Bad::TooLong(257),
            ),
        ];
        for (f, bad) in cases.iter() {
            assert_eq!(parse_header(f, req).err(), Some(*bad));
        }
        // Too short to be a header at all.
        assert_eq!(parse_header(&[0u8; 27], req).err(), Some(Bad::Key));
        assert_eq!(Bad::MarkersOrCrc.errno(), ECONNREFUSED);
        assert_eq!(Bad::Revision(1).errno(), EPROTO);
    }

    #[test]
    fn modify_qp_rts_image() {
        // erdma_rs_hw 3.5: @8 state 31:24, CC 23:20, QPN 19:0; @12 cookie; @16 BE daddr;
        // @20 BE saddr; @24 BE sport; @26 BE dport; @28 SND.NXT; @32 RCV.NXT.
        let cmd = ModifyQpIwarp {
            cfg: ModifyQpIwarpCfg::zeroed()
                .with_state(low32(IwState::Rts.to_raw()))
                .with_cc(low32(1))
                .with_qpn(low32(0x12345)),
            cookie: 0xaabb_ccdd,
            daddr: 0xa9fe_3801u32.into(),
            saddr: 0xa9fe_3802u32.into(),
            sport: 0x1234u16.into(),
            dport: 0x4567u16.into(),
            snd_nxt: 0x0102_0304,
            rcv_nxt: 0x0506_0708,
            reserved: 0,
        };
        let b = cmd.as_bytes();
        assert_eq!(&b[0..4], &0x0211_2345u32.to_le_bytes());
        assert_eq!(&b[4..8], &0xaabb_ccddu32.to_le_bytes());
        assert_eq!(&b[8..16], &[169, 254, 56, 1, 169, 254, 56, 2]);
        assert_eq!(&b[16..20], &[0x12, 0x34, 0x45, 0x67]);
        assert_eq!(&b[20..28], &[4, 3, 2, 1, 8, 7, 6, 5]);
    }
}
