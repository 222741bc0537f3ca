// SPDX-License-Identifier: GPL-2.0

//! Endpoints: one side of one connection, and its state machine (see the [module
//! documentation](super)).

use core::sync::atomic::{
    AtomicU32,
    Ordering, //
};
use kernel::{
    impl_has_hr_timer, impl_has_work,
    net::tcp::{
        SocketAddrV4,
        SocketEvent,
        SocketEvents,
        TcpSocket,
        TcpState, //
    },
    new_mutex, new_work,
    prelude::*,
    rdma::iwcm::{
        CmEvent,
        CmEventKind,
        CmIdRef, //
    },
    sync::{
        Arc,
        ArcBorrow,
        Mutex, //
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
        Delta, Monotonic,
    },
    workqueue::{
        Work,
        WorkItem, //
    },
};

use crate::{
    consts::{
        IwState,
        MAX_RD_ATOM, //
    },
    formats::{
        MPA_HEADER_SIZE,
        MPA_KEY_REP,
        MPA_KEY_REQ, //
    },
};

use super::{
    listener::Listener,
    mpa::{
        build_frame,
        parse_header,
        send_all, //
        Bad,
        Mpa,
    },
    qp::{
        IwQp,
        Link, //
    },
    CmDevice,
    CmHw, //
    CONNECT_TIMEOUT,
    MAX_REPORTED_PRIVATE_DATA,
    REQUEST_TIMEOUT_SECS,
};

/// A socket event arrived.
pub(super) const EV_SOCKET: u32 = 1 << 0;
/// The timer ran out.
pub(super) const EV_TIMEOUT: u32 = 1 << 1;
/// The queue pair stopped, failed or went away.
pub(super) const EV_LOCAL_CLOSE: u32 = 1 << 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum EpState {
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
pub(super) struct Inner {
    pub(super) state: EpState,
    pub(super) sock: Option<TcpSocket>,
    /// The identifier events go to: the active side's, the accepted one's.
    pub(super) id: Option<CmIdRef>,
    /// Passive, until reported: the listener whose identifier hears the request.
    pub(super) listener: Option<Arc<Listener>>,
    pub(super) qp: Option<Arc<IwQp>>,
    pub(super) timer: Option<ArcHrTimerHandle<Endpoint>>,
    /// The MPA frame received so far.
    pub(super) rx: KVec<u8>,
    /// Active: the private data of the request.
    pub(super) pd: KVec<u8>,
    /// The peer's frame, once complete.
    pub(super) peer: Option<Mpa>,
    pub(super) local: SocketAddrV4,
    pub(super) remote: SocketAddrV4,
    /// Passive: the token iw_cm knows the request by.
    pub(super) token: usize,
}

/// One side of one connection (see the [module documentation](self)).
#[pin_data]
pub(crate) struct Endpoint {
    pub(super) dev: Arc<dyn CmDevice>,
    pub(super) pending: AtomicU32,
    #[pin]
    pub(super) work: Work<Endpoint>,
    #[pin]
    pub(super) timer: HrTimer<Endpoint>,
    #[pin]
    pub(super) inner: Mutex<Inner>,
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
pub(super) fn note_bad(hw: &dyn CmHw, frame: &str, peer: SocketAddrV4, bad: Bad) {
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
pub(super) fn reportable(hw: &dyn CmHw, peer: SocketAddrV4, len: usize) -> bool {
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
    pub(super) fn new(dev: Arc<dyn CmDevice>, state: EpState) -> Result<Arc<Self>> {
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
    pub(super) fn kick(self: &Arc<Self>, events: u32) {
        self.pending.fetch_or(events, Ordering::AcqRel);
        self.dev.with(&mut |hw| {
            // Already queued: that run sees the new events.
            let _ = hw.cm().queue.enqueue(self.clone());
        });
    }

    /// Starts (or restarts) the timer.
    pub(super) fn arm(self: &Arc<Self>, inner: &mut Inner, after: Delta) {
        inner.timer = None;
        inner.timer = Some(self.clone().start(after));
    }

    /// Does what `events` ask for.
    pub(super) fn process(self: &Arc<Self>, hw: &dyn CmHw, events: u32) {
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
    pub(super) fn peer_gone(inner: &Inner) -> bool {
        inner.sock.as_ref().is_none_or(|s| {
            matches!(
                s.state(),
                TcpState::Close | TcpState::CloseWait | TcpState::LastAck | TcpState::TimeWait
            )
        })
    }

    /// Active: the TCP connection is made (or failed): send the MPA request.
    pub(super) fn on_tcp(self: &Arc<Self>, hw: &dyn CmHw, inner: &mut Inner) {
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
    pub(super) fn receive(inner: &mut Inner, key: &[u8; 16]) -> Result<bool, Option<Bad>> {
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
    pub(super) fn on_reply(self: &Arc<Self>, hw: &dyn CmHw, inner: &mut Inner) {
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

    pub(super) fn on_reply_complete(self: &Arc<Self>, hw: &dyn CmHw, inner: &mut Inner) {
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
        let link = Link::new(
            (inner.local, inner.remote),
            peer_cookie,
            (hw.cc(), peer_cc),
            sock.seq(),
            0,
        );
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
    pub(super) fn fail_connect(
        self: &Arc<Self>,
        hw: &dyn CmHw,
        inner: &mut Inner,
        err: Error,
        pd: &[u8],
    ) {
        let mut ev = CmEvent::new(CmEventKind::ConnectReply, inner.local, inner.remote);
        ev.status = Some(err);
        ev.private_data = pd;
        if let Some(id) = inner.id.as_ref() {
            let _ = id.report(&ev);
        }
        self.close(hw, inner);
    }

    /// Passive: the MPA request (or part of it) arrived.
    pub(super) fn on_request(self: &Arc<Self>, hw: &dyn CmHw, inner: &mut Inner) {
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

    pub(super) fn on_request_complete(self: &Arc<Self>, hw: &dyn CmHw, inner: &mut Inner) {
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
    pub(super) fn send_reject(&self, hw: &dyn CmHw, inner: &Inner, pd: &[u8]) {
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
    pub(super) fn peer_close(self: &Arc<Self>, hw: &dyn CmHw, inner: &mut Inner) {
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
    pub(super) fn local_close(self: &Arc<Self>, hw: &dyn CmHw, inner: &mut Inner) {
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
    pub(super) fn close(self: &Arc<Self>, hw: &dyn CmHw, inner: &mut Inner) {
        hw.cm().remove(inner.token);
        Self::release(self, inner);
    }

    /// Releases what the endpoint holds.
    pub(super) fn release(this: &Endpoint, inner: &mut Inner) {
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
    pub(super) fn abandon(&self) {
        let mut inner = self.inner.lock();
        Self::release(self, &mut inner);
    }
}
