// SPDX-License-Identifier: GPL-2.0

//! The endpoint's state machine (erdma_rs_hw 7.1), written once as a function of (state,
//! event) over a transport: the kernel's TCP socket, iw_cm and the adapter in the driver
//! ([`super::endpoint`]), a fake in KUnit (below).
//!
//! Each [`State`] carries exactly the data valid in it: the socket in every live state, the
//! iw_cm identifier and the queue pair from `connect` (active) or `accept` (passive) on, the
//! frame received so far while one is awaited, the listener until the request is reported,
//! the peer's cookie and algorithm from its request until the accept. [`step`] takes the state
//! and an [`Event`], does what the event asks through the [`Io`] (sends, reports, MODIFY_QP,
//! the timer, the tables) and returns the next state. What the peer sends is hostile: a bad
//! frame, too much private data, silence or a reset ends the endpoint (with a reject reply
//! where MPA has one); an event no path leads to is reported ([`Io::unexpected`]) and ends the
//! endpoint too.

use kernel::{
    net::tcp::{
        SocketAddrV4,
        TcpSeq,
        TcpState, //
    },
    prelude::*,
    rdma::iwcm::{
        CmEvent,
        CmEventKind, //
    },
    time::Delta,
};

use crate::{
    consts::{
        CC_COMPROMISE,
        MAX_RD_ATOM, //
    },
    formats::{
        MPA_HEADER_SIZE,
        MPA_KEY_REP,
        MPA_KEY_REQ, //
    },
};

use super::mpa::{
    build_frame,
    parse_header, //
    Bad,
    Mpa,
};

/// How long the connection manager waits (erdma_rs_hw 7.1), in milliseconds: the module
/// parameters `mpa_reply_timeout_ms` and `mpa_request_timeout_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Timeouts {
    /// The active side's wait for TCP, then for the MPA reply.
    pub(crate) reply_ms: u32,
    /// An accepted TCP connection's time to deliver its MPA request.
    pub(crate) request_ms: u32,
}

impl Timeouts {
    /// The shortest wait a parameter can ask for.
    pub(crate) const MIN_MS: u32 = 100;
    /// The longest.
    pub(crate) const MAX_MS: u32 = 600_000;
    /// The waits asked for, each brought into [`Self::MIN_MS`]..=[`Self::MAX_MS`].
    pub(crate) fn new(reply_ms: u32, request_ms: u32) -> Self {
        Self {
            reply_ms: reply_ms.clamp(Self::MIN_MS, Self::MAX_MS),
            request_ms: request_ms.clamp(Self::MIN_MS, Self::MAX_MS),
        }
    }

    /// The active side's wait, as a delay.
    pub(super) fn reply(&self) -> Delta {
        Delta::from_millis(self.reply_ms.into())
    }

    /// The passive side's wait, as a delay.
    pub(super) fn request(&self) -> Delta {
        Delta::from_millis(self.request_ms.into())
    }
}
/// The most private data iw_cm can report (its event has an 8-bit length).
pub(super) const MAX_REPORTED_PRIVATE_DATA: usize = 255;

/// The types a [`State`] holds: the kernel's in the driver, plain values in KUnit.
pub(super) trait Parts {
    /// The TCP connection.
    type Sock: Stream;
    /// The queue pair the connection is for.
    type Qp;
    /// The iw_cm identifier that hears of the connection.
    type Id;
    /// The listener a passive connection came from.
    type Listener;
}

/// A TCP connection, as the machine uses it.
pub(super) trait Stream {
    /// Its TCP state.
    fn state(&self) -> TcpState;
    /// The error that ended it, if one did.
    fn take_error(&self) -> Option<Error>;
    /// Reads at most `buf.len()` bytes; `EAGAIN` when nothing is there.
    fn recv(&self, buf: &mut [u8]) -> Result<usize>;
    /// Sends what fits of `data`; returns how much did.
    fn send(&self, data: &[u8]) -> Result<usize>;
    /// Its local and remote addresses.
    fn addresses(&self) -> Result<(SocketAddrV4, SocketAddrV4)>;
    /// Its sequence numbers.
    fn seq(&self) -> TcpSeq;
}

/// What the machine says, each for a peer (the transport says it as it sees fit, rate-limited
/// where a peer can make it say it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Note {
    /// The peer's frame ("request", "reply") was refused.
    BadFrame(&'static str, Bad),
    /// No MPA request arrived within [`Timeouts::request_ms`].
    RequestTimeout,
    /// The peer sent more private data than iw_cm can report.
    TooMuchPrivateData(usize),
    /// A reject could not be sent.
    RejectNotSent,
}

/// Everything an endpoint does besides its state, for one step.
pub(super) trait Io {
    /// The types of the states it steps.
    type P: Parts;
    /// The adapter's congestion-control algorithm.
    fn cc(&self) -> u8;
    /// The token iw_cm knows the endpoint by (the connection request carries it).
    fn token(&self) -> usize;
    /// The queue pair's cookie.
    fn cookie(&self, qp: &<Self::P as Parts>::Qp) -> u32;
    /// Makes the endpoint the queue pair's connection.
    fn attach(&mut self, qp: &<Self::P as Parts>::Qp) -> Result;
    /// Unmakes it.
    fn detach(&mut self, qp: &<Self::P as Parts>::Qp);
    /// Hands the connection to the adapter (MODIFY_QP to RTS).
    fn to_rts(&mut self, qp: &<Self::P as Parts>::Qp, link: &Link) -> Result;
    /// The peer closed: a queue pair in RTS moves to CLOSING.
    fn close_qp(&mut self, qp: &<Self::P as Parts>::Qp);
    /// The queue pair stopped: if the adapter failed it, it is noted ERROR and flushed.
    fn qp_stopped(&mut self, qp: &<Self::P as Parts>::Qp);
    /// Tells the identifier `id` of `ev`.
    fn report(&mut self, id: &<Self::P as Parts>::Id, ev: &CmEvent<'_>) -> Result;
    /// Tells the listener's identifier of the connection request `ev`.
    fn report_request(&mut self, l: &<Self::P as Parts>::Listener, ev: &CmEvent<'_>) -> Result;
    /// Starts (or restarts) the timer: [`Event::Timeout`] after `after`.
    fn arm(&mut self, after: Delta);
    /// How long the active side waits for the MPA reply ([`Timeouts::reply`]).
    fn reply_timeout(&self) -> Delta;
    /// Stops the timer.
    fn disarm(&mut self);
    /// The request was reported: it no longer counts against the listener's backlog.
    fn reported(&mut self);
    /// The request was accepted: the endpoint outlives its listener.
    fn accepted(&mut self);
    /// The endpoint ended: it leaves the tables.
    fn closed(&mut self);
    /// Says `note` about the connection with `peer`.
    fn note(&mut self, peer: SocketAddrV4, note: Note);
    /// Reports `what` arrived in `state`, where no path leads to it (the endpoint then ends).
    fn unexpected(&mut self, state: &'static str, what: &'static str);
}

/// The local and remote address of a connection.
pub(super) type Addrs = (SocketAddrV4, SocketAddrV4);

/// The part of the peer's MPA frame received so far.
pub(super) struct Rx {
    buf: KVec<u8>,
    header: Option<Mpa>,
}

impl Rx {
    /// Nothing received yet.
    pub(super) const fn new() -> Self {
        Self {
            buf: KVec::new(),
            header: None,
        }
    }

    /// Reads what has arrived of the peer's frame of key `key`: `Ok(Some(header))` once the
    /// frame is complete ([`Rx::private_data`] has the rest), `Ok(None)` while it is not, `Err`
    /// if the frame is bad (with why) or the connection broke.
    fn receive<S: Stream>(&mut self, sock: &S, key: &[u8; 16]) -> Result<Option<Mpa>, Option<Bad>> {
        loop {
            if self.header.is_none() && self.buf.len() >= MPA_HEADER_SIZE {
                self.header = Some(parse_header(&self.buf, key).map_err(Some)?);
            }
            let total = MPA_HEADER_SIZE + self.header.map_or(0, |m| m.pd_len);
            if self.buf.len() >= total {
                return Ok(self.header);
            }
            let mut chunk = [0u8; 64];
            let n = (total - self.buf.len()).min(chunk.len());
            match sock.recv(&mut chunk[..n]) {
                Ok(0) => return Err(None),
                Ok(got) => self
                    .buf
                    .extend_from_slice(&chunk[..got.min(n)], GFP_KERNEL)
                    .map_err(|_| None)?,
                // Nothing more yet; a closed connection says so by its state.
                Err(e) if e == EAGAIN => {
                    return if peer_gone(sock) { Err(None) } else { Ok(None) };
                }
                Err(_) => return Err(None),
            }
        }
    }

    /// The private data of a complete frame.
    fn private_data(&self) -> &[u8] {
        self.buf.get(MPA_HEADER_SIZE..).unwrap_or(&[])
    }
}

/// The peer's cookie and algorithm, from its request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Peer {
    pub(super) cookie: u32,
    pub(super) cc: u8,
}

/// What MODIFY_QP to RTS hands the adapter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Link {
    pub(super) local: SocketAddrV4,
    pub(super) remote: SocketAddrV4,
    pub(super) peer_cookie: u32,
    pub(super) cc: u8,
    pub(super) snd_nxt: u32,
    pub(super) rcv_nxt: u32,
}

impl Link {
    /// The connection `local`-`remote` as the socket leaves it at `seq`, with `reserved` bytes of
    /// sequence space kept for what the socket still sends (the passive side's MPA reply); the
    /// algorithm is `own_cc` if the peer's is the same, else the compromise (erdma_rs_hw 7.1).
    pub(super) fn new(
        (local, remote): Addrs,
        peer_cookie: u32,
        (own_cc, peer_cc): (u8, u8),
        seq: TcpSeq,
        reserved: u32,
    ) -> Self {
        Self {
            local,
            remote,
            peer_cookie,
            cc: if own_cc == peer_cc {
                own_cc
            } else {
                CC_COMPROMISE
            },
            snd_nxt: seq.snd_nxt.wrapping_add(reserved),
            rcv_nxt: seq.rcv_nxt,
        }
    }
}

/// One side of one connection.
///
/// ```text
/// active:  Connecting --TCP up--> AwaitReply --reply--> Connected --> Closed
/// passive: AwaitRequest --request--> AwaitAccept --accept--> Connected --> Closed
/// ```
pub(super) enum State<P: Parts> {
    /// Active: waiting for TCP; `pd` is the request's private data.
    Connecting {
        sock: P::Sock,
        id: P::Id,
        qp: P::Qp,
        pd: KVec<u8>,
        addrs: Addrs,
    },
    /// Active: the request is sent; waiting for the reply.
    AwaitReply {
        sock: P::Sock,
        id: P::Id,
        qp: P::Qp,
        rx: Rx,
        addrs: Addrs,
    },
    /// Passive: waiting for the request.
    AwaitRequest {
        sock: P::Sock,
        listener: P::Listener,
        rx: Rx,
        addrs: Addrs,
    },
    /// Passive: the request is reported to iw_cm; waiting for accept or reject.
    AwaitAccept {
        sock: P::Sock,
        peer: Peer,
        addrs: Addrs,
    },
    /// The adapter has the connection.
    Connected {
        sock: P::Sock,
        id: P::Id,
        qp: P::Qp,
        addrs: Addrs,
    },
    /// Gone.
    Closed,
}

/// What happens to an endpoint.
pub(super) enum Event<'a, P: Parts> {
    /// The socket changed state or has data.
    Socket,
    /// The timer ran out.
    Timeout,
    /// The queue pair stopped, failed or went away.
    LocalClose,
    /// iw_accept: the connection goes to `qp`, the reply carries `pd`; `id` hears the rest.
    Accept { qp: P::Qp, id: P::Id, pd: &'a [u8] },
    /// iw_reject, with `pd` for the reject reply.
    Reject { pd: &'a [u8] },
    /// The listener the connection came from was destroyed.
    ListenerGone,
}

impl<P: Parts> State<P> {
    /// The state's name, for reports.
    pub(super) fn name(&self) -> &'static str {
        match self {
            State::Connecting { .. } => "Connecting",
            State::AwaitReply { .. } => "AwaitReply",
            State::AwaitRequest { .. } => "AwaitRequest",
            State::AwaitAccept { .. } => "AwaitAccept",
            State::Connected { .. } => "Connected",
            State::Closed => "Closed",
        }
    }

    /// The socket, in a live state.
    pub(super) fn sock(&self) -> Option<&P::Sock> {
        match self {
            State::Connecting { sock, .. }
            | State::AwaitReply { sock, .. }
            | State::AwaitRequest { sock, .. }
            | State::AwaitAccept { sock, .. }
            | State::Connected { sock, .. } => Some(sock),
            State::Closed => None,
        }
    }

    /// The connection's addresses (the unspecified ones once closed).
    fn addrs(&self) -> Addrs {
        match self {
            State::Connecting { addrs, .. }
            | State::AwaitReply { addrs, .. }
            | State::AwaitRequest { addrs, .. }
            | State::AwaitAccept { addrs, .. }
            | State::Connected { addrs, .. } => *addrs,
            State::Closed => Default::default(),
        }
    }

    /// The iw_cm identifier, where there is one.
    fn id(&self) -> Option<&P::Id> {
        match self {
            State::Connecting { id, .. }
            | State::AwaitReply { id, .. }
            | State::Connected { id, .. } => Some(id),
            _ => None,
        }
    }

    /// The queue pair, where there is one.
    pub(super) fn qp(&self) -> Option<&P::Qp> {
        match self {
            State::Connecting { qp, .. }
            | State::AwaitReply { qp, .. }
            | State::Connected { qp, .. } => Some(qp),
            _ => None,
        }
    }

    /// Whether the peer closed or reset the connection (or there is none).
    pub(super) fn peer_gone(&self) -> bool {
        self.sock().is_none_or(peer_gone)
    }
}

/// Whether the peer closed or reset the TCP connection.
fn peer_gone<S: Stream>(sock: &S) -> bool {
    matches!(
        sock.state(),
        TcpState::Close | TcpState::CloseWait | TcpState::LastAck | TcpState::TimeWait
    )
}

/// Sends all of `frame`: a fresh connection's send buffer takes a frame of at most 284 bytes
/// at once, so anything less is an error.
fn send_all<S: Stream>(sock: &S, frame: &[u8]) -> Result {
    match sock.send(frame)? {
        n if n == frame.len() => Ok(()),
        _ => Err(ENOBUFS),
    }
}

/// Whether `len` bytes of the peer's private data fit an iw_cm event; says so when not (MPA
/// allows more than iw_cm can carry).
fn reportable<I: Io>(io: &mut I, peer: SocketAddrV4, len: usize) -> bool {
    if len <= MAX_REPORTED_PRIVATE_DATA {
        return true;
    }
    io.note(peer, Note::TooMuchPrivateData(len));
    false
}

/// An event carrying the read depths the adapter has.
fn with_depths(mut ev: CmEvent<'_>) -> CmEvent<'_> {
    // CAST: 128.
    (ev.ird, ev.ord) = (MAX_RD_ATOM as u8, MAX_RD_ATOM as u8);
    ev
}

/// Takes `state` through `event`: returns the next state, and the outcome the caller of an
/// [`Event::Accept`] hears (`ECONNRESET` for a request whose connection ended).
pub(super) fn step<I: Io>(
    io: &mut I,
    state: State<I::P>,
    event: Event<'_, I::P>,
) -> (State<I::P>, Result) {
    match (state, event) {
        (State::Closed, Event::Accept { .. }) => (State::Closed, Err(ECONNRESET)),
        (State::Closed, _) => (State::Closed, Ok(())),
        (s, Event::LocalClose) => (local_close(io, s), Ok(())),
        (s, Event::Timeout) => (timeout(io, s), Ok(())),
        (s, Event::Socket) => (socket(io, s), Ok(())),
        (State::AwaitAccept { sock, peer, addrs }, Event::Accept { qp, id, pd }) => {
            accept(io, sock, peer, addrs, qp, id, pd)
        }
        // The peer gave up, or the listener was destroyed, before iw_cm answered.
        (s, Event::Accept { .. }) => (close(io, s), Err(ECONNRESET)),
        (State::AwaitAccept { sock, peer, addrs }, Event::Reject { pd }) => {
            if pd.len() <= MAX_REPORTED_PRIVATE_DATA {
                send_reject(io, &sock, addrs.1, pd);
            }
            (close(io, State::AwaitAccept { sock, peer, addrs }), Ok(()))
        }
        (s, Event::Reject { .. }) => (close(io, s), Ok(())),
        (s @ State::AwaitRequest { .. }, Event::ListenerGone) => (close(io, s), Ok(())),
        (s @ State::AwaitAccept { .. }, Event::ListenerGone) => {
            if let Some(sock) = s.sock() {
                send_reject(io, sock, s.addrs().1, &[]);
            }
            (close(io, s), Ok(()))
        }
        // Accepted since the listener was removed.
        (s, Event::ListenerGone) => (s, Ok(())),
    }
}

/// Ends the endpoint: the timer stops, the queue pair is unlinked, the endpoint leaves the
/// tables, and what the state held (the socket, which closes the connection) is dropped.
fn close<I: Io>(io: &mut I, s: State<I::P>) -> State<I::P> {
    io.disarm();
    if let Some(qp) = s.qp() {
        io.detach(qp);
    }
    io.closed();
    State::Closed
}

/// Active: the connection failed with `err`: iw_cm hears it (with the peer's private data of a
/// reject), and the endpoint ends.
fn fail_connect<I: Io>(io: &mut I, s: State<I::P>, err: Error) -> State<I::P> {
    report_failure(io, &s, err, &[]);
    close(io, s)
}

/// Tells the active side's identifier that its connection failed with `err`.
fn report_failure<I: Io>(io: &mut I, s: &State<I::P>, err: Error, pd: &[u8]) {
    let (local, remote) = s.addrs();
    let mut ev = CmEvent::new(CmEventKind::ConnectReply, local, remote);
    ev.status = Some(err);
    ev.private_data = pd;
    if let Some(id) = s.id() {
        let _ = io.report(id, &ev);
    }
}

/// Passive: sends a reply that rejects the connection, with `pd`.
fn send_reject<I: Io>(io: &mut I, sock: &<I::P as Parts>::Sock, peer: SocketAddrV4, pd: &[u8]) {
    let sent = build_frame(&MPA_KEY_REP, true, 0, io.cc(), pd).and_then(|f| send_all(sock, &f));
    if sent.is_err() {
        io.note(peer, Note::RejectNotSent);
    }
}

/// Ends an endpoint in whatever state, telling iw_cm what it waits for: a failed connect on
/// the active side before the reply, CLOSE once connected.
fn abort<I: Io>(io: &mut I, s: State<I::P>) -> State<I::P> {
    match s {
        State::Connecting { .. } | State::AwaitReply { .. } => fail_connect(io, s, ECONNABORTED),
        State::Connected { .. } => {
            let (local, remote) = s.addrs();
            if let Some(id) = s.id() {
                let _ = io.report(id, &CmEvent::new(CmEventKind::Close, local, remote));
            }
            close(io, s)
        }
        _ => close(io, s),
    }
}

/// The queue pair stopped, failed or went away.
fn local_close<I: Io>(io: &mut I, s: State<I::P>) -> State<I::P> {
    if let Some(qp) = s.qp() {
        io.qp_stopped(qp);
    }
    if matches!(s, State::AwaitRequest { .. } | State::AwaitAccept { .. }) {
        // A passive endpoint has its queue pair only once accepted (Connected).
        io.unexpected(s.name(), "a local close before accept");
    }
    abort(io, s)
}

/// The timer ran out.
fn timeout<I: Io>(io: &mut I, s: State<I::P>) -> State<I::P> {
    match s {
        State::Connecting { .. } | State::AwaitReply { .. } => fail_connect(io, s, ETIMEDOUT),
        State::AwaitRequest { .. } => {
            io.note(s.addrs().1, Note::RequestTimeout);
            close(io, s)
        }
        // Only the states above arm the timer.
        _ => {
            io.unexpected(s.name(), "a timeout");
            abort(io, s)
        }
    }
}

/// The socket changed state or has data.
fn socket<I: Io>(io: &mut I, s: State<I::P>) -> State<I::P> {
    match s {
        State::Connecting {
            sock,
            id,
            qp,
            pd,
            addrs,
        } => on_tcp(io, sock, id, qp, pd, addrs),
        State::AwaitReply {
            sock,
            id,
            qp,
            rx,
            addrs,
        } => on_reply(io, sock, id, qp, rx, addrs),
        State::AwaitRequest {
            sock,
            listener,
            rx,
            addrs,
        } => on_request(io, sock, listener, rx, addrs),
        // The peer gave up before iw_cm answered: accept or reject will find it closed.
        State::AwaitAccept { .. } if s.peer_gone() => close(io, s),
        State::Connected { .. } if s.peer_gone() => peer_close(io, s),
        s => s,
    }
}

/// Active: the TCP connection is made (or failed): sends the MPA request.
fn on_tcp<I: Io>(
    io: &mut I,
    sock: <I::P as Parts>::Sock,
    id: <I::P as Parts>::Id,
    qp: <I::P as Parts>::Qp,
    pd: KVec<u8>,
    addrs: Addrs,
) -> State<I::P> {
    let now = match sock.state() {
        TcpState::Established => sock.addresses().map_err(|_| ECONNRESET),
        TcpState::SynSent => {
            return State::Connecting {
                sock,
                id,
                qp,
                pd,
                addrs,
            }
        }
        _ => Err(sock.take_error().unwrap_or(ECONNREFUSED)),
    };
    let s = State::Connecting {
        sock,
        id,
        qp,
        pd,
        addrs,
    };
    let addrs = match now {
        Ok(addrs) => addrs,
        Err(err) => return fail_connect(io, s, err),
    };
    let State::Connecting {
        sock, id, qp, pd, ..
    } = s
    else {
        return s;
    };
    let sent = build_frame(&MPA_KEY_REQ, false, io.cookie(&qp), io.cc(), &pd)
        .and_then(|frame| send_all(&sock, &frame));
    let s = State::AwaitReply {
        sock,
        id,
        qp,
        rx: Rx::new(),
        addrs,
    };
    if let Err(e) = sent {
        return fail_connect(io, s, e);
    }
    io.arm(io.reply_timeout());
    // The reply may be there already.
    socket(io, s)
}

/// Active: the MPA reply (or part of it) arrived.
fn on_reply<I: Io>(
    io: &mut I,
    sock: <I::P as Parts>::Sock,
    id: <I::P as Parts>::Id,
    qp: <I::P as Parts>::Qp,
    mut rx: Rx,
    addrs: Addrs,
) -> State<I::P> {
    let got = rx.receive(&sock, &MPA_KEY_REP);
    let s = State::AwaitReply {
        sock,
        id,
        qp,
        rx,
        addrs,
    };
    let peer = match got {
        Ok(None) => return s,
        Ok(Some(peer)) => peer,
        Err(bad) => {
            if let Some(bad) = bad {
                io.note(addrs.1, Note::BadFrame("reply", bad));
            }
            return fail_connect(io, s, bad.map_or(ECONNRESET, Bad::errno));
        }
    };
    let State::AwaitReply {
        sock, id, qp, rx, ..
    } = &s
    else {
        return s;
    };
    let pd = rx.private_data();
    if !reportable(io, addrs.1, pd.len()) {
        return fail_connect(io, s, EPROTO);
    }
    if peer.reject {
        report_failure(io, &s, ECONNRESET, pd);
        return close(io, s);
    }
    let link = Link::new(addrs, peer.cookie, (io.cc(), peer.cc), sock.seq(), 0);
    if let Err(e) = io.to_rts(qp, &link) {
        return fail_connect(io, s, e);
    }
    io.disarm();
    let mut ev = with_depths(CmEvent::new(CmEventKind::ConnectReply, addrs.0, addrs.1));
    ev.private_data = pd;
    let _ = io.report(id, &ev);
    let State::AwaitReply {
        sock,
        id,
        qp,
        addrs,
        ..
    } = s
    else {
        return s;
    };
    // The peer may have closed already.
    socket(
        io,
        State::Connected {
            sock,
            id,
            qp,
            addrs,
        },
    )
}

/// Passive: the MPA request (or part of it) arrived.
fn on_request<I: Io>(
    io: &mut I,
    sock: <I::P as Parts>::Sock,
    listener: <I::P as Parts>::Listener,
    mut rx: Rx,
    addrs: Addrs,
) -> State<I::P> {
    // Err(true): refused with a reject reply; Err(false): only closed.
    let got = match rx.receive(&sock, &MPA_KEY_REQ) {
        Ok(None) => {
            return State::AwaitRequest {
                sock,
                listener,
                rx,
                addrs,
            }
        }
        Ok(Some(peer)) if reportable(io, addrs.1, rx.private_data().len()) => Ok(peer),
        // More private data than iw_cm takes: the peer speaks MPA and hears why.
        Ok(Some(_)) => Err(true),
        Err(bad) => {
            if let Some(bad) = bad {
                io.note(addrs.1, Note::BadFrame("request", bad));
            }
            // A peer that speaks MPA hears why; anything else is just closed.
            Err(bad.is_some_and(|b| b != Bad::Key))
        }
    };
    let peer = match got {
        Ok(peer) => peer,
        Err(reject) => {
            if reject {
                send_reject(io, &sock, addrs.1, &[]);
            }
            let s = State::AwaitRequest {
                sock,
                listener,
                rx,
                addrs,
            };
            return close(io, s);
        }
    };
    let pd = rx.private_data();
    io.disarm();
    let mut ev = with_depths(CmEvent::new(CmEventKind::ConnectRequest, addrs.0, addrs.1));
    ev.private_data = pd;
    ev.token = io.token();
    // Reported: it no longer counts against the listener's backlog.
    io.reported();
    let reported = io.report_request(&listener, &ev);
    let s = State::AwaitAccept {
        sock,
        peer: Peer {
            cookie: peer.cookie,
            cc: peer.cc,
        },
        addrs,
    };
    match reported {
        Ok(()) => s,
        Err(_) => close(io, s),
    }
}

/// Passive: iw_accept: hands the connection to `qp`, then sends the reply (the adapter starts
/// after it, erdma_rs_hw 7.1, 10.14).
fn accept<I: Io>(
    io: &mut I,
    sock: <I::P as Parts>::Sock,
    peer: Peer,
    addrs: Addrs,
    qp: <I::P as Parts>::Qp,
    id: <I::P as Parts>::Id,
    pd: &[u8],
) -> (State<I::P>, Result) {
    let waiting = State::AwaitAccept { sock, peer, addrs };
    if waiting.peer_gone() {
        return (close(io, waiting), Err(ECONNRESET));
    }
    if let Err(e) = io.attach(&qp) {
        return (close(io, waiting), Err(e));
    }
    let State::AwaitAccept { sock, .. } = waiting else {
        return (waiting, Err(ECONNRESET));
    };
    let s = State::Connected {
        sock,
        id,
        qp,
        addrs,
    };
    let State::Connected { sock, qp, .. } = &s else {
        return (s, Err(ECONNRESET));
    };
    let handed = build_frame(&MPA_KEY_REP, false, io.cookie(qp), io.cc(), pd).and_then(|frame| {
        // CAST: at most 28 + 255 bytes.
        let link = Link::new(
            addrs,
            peer.cookie,
            (io.cc(), peer.cc),
            sock.seq(),
            frame.len() as u32,
        );
        io.to_rts(qp, &link)?;
        send_all(sock, &frame)
    });
    if let Err(e) = handed {
        return (close(io, s), Err(e));
    }
    // Accepted: it outlives its listener.
    io.accepted();
    if let Some(id) = s.id() {
        let _ = io.report(
            id,
            &with_depths(CmEvent::new(CmEventKind::Established, addrs.0, addrs.1)),
        );
    }
    // The peer may have closed already.
    (socket(io, s), Ok(()))
}

/// Connected: the peer closed or reset the connection: the queue pair closes, and iw_cm hears
/// DISCONNECT, then CLOSE.
fn peer_close<I: Io>(io: &mut I, s: State<I::P>) -> State<I::P> {
    if let Some(qp) = s.qp() {
        io.close_qp(qp);
    }
    let (local, remote) = s.addrs();
    if let Some(id) = s.id() {
        let _ = io.report(id, &CmEvent::new(CmEventKind::Disconnect, local, remote));
        let _ = io.report(id, &CmEvent::new(CmEventKind::Close, local, remote));
    }
    close(io, s)
}

#[kunit_tests(erdma_rs_cm_machine)]
mod tests {
    //! The state machine through a fake transport: every path of both sides, and the peer's
    //! hostile frames, resets and silences.

    use super::*;
    use core::{
        cell::{
            Cell,
            RefCell, //
        },
        marker::PhantomData,
    };

    const LOCAL: SocketAddrV4 = SocketAddrV4::new([169, 254, 56, 1], 4420);
    const REMOTE: SocketAddrV4 = SocketAddrV4::new([169, 254, 56, 2], 40000);
    const SEQ: TcpSeq = TcpSeq {
        snd_nxt: 1000,
        rcv_nxt: 5000,
    };
    const OWN_CC: u8 = 0;

    /// The peer's end of a TCP connection: what it sent (read in order) and what it got.
    struct Wire {
        state: Cell<TcpState>,
        error: Cell<Option<Error>>,
        inbox: RefCell<KVec<u8>>,
        read: Cell<usize>,
        sent: RefCell<KVec<u8>>,
    }

    impl Wire {
        fn new(state: TcpState) -> Self {
            Self {
                state: Cell::new(state),
                error: Cell::new(None),
                inbox: RefCell::new(KVec::new()),
                read: Cell::new(0),
                sent: RefCell::new(KVec::new()),
            }
        }

        /// The peer sends `bytes`.
        fn push(&self, bytes: &[u8]) {
            self.inbox
                .borrow_mut()
                .extend_from_slice(bytes, GFP_KERNEL)
                .unwrap();
        }
    }

    struct Sock<'a>(&'a Wire);

    impl Stream for Sock<'_> {
        fn state(&self) -> TcpState {
            self.0.state.get()
        }

        fn take_error(&self) -> Option<Error> {
            self.0.error.take()
        }

        fn recv(&self, buf: &mut [u8]) -> Result<usize> {
            let inbox = self.0.inbox.borrow();
            let at = self.0.read.get();
            if at == inbox.len() {
                return Err(EAGAIN);
            }
            let n = buf.len().min(inbox.len() - at);
            buf[..n].copy_from_slice(&inbox[at..at + n]);
            self.0.read.set(at + n);
            Ok(n)
        }

        fn send(&self, data: &[u8]) -> Result<usize> {
            self.0
                .sent
                .borrow_mut()
                .extend_from_slice(data, GFP_KERNEL)?;
            Ok(data.len())
        }

        fn addresses(&self) -> Result<Addrs> {
            Ok((LOCAL, REMOTE))
        }

        fn seq(&self) -> TcpSeq {
            SEQ
        }
    }

    /// The fake's types: a queue pair is its cookie, an identifier a number.
    struct Fake<'a>(PhantomData<&'a ()>);

    impl<'a> Parts for Fake<'a> {
        type Sock = Sock<'a>;
        type Qp = u32;
        type Id = u8;
        type Listener = ();
    }

    /// An event as iw_cm heard it.
    struct Seen {
        kind: CmEventKind,
        status: Option<Error>,
        pd: KVec<u8>,
        token: usize,
        to_listener: bool,
        depth: u8,
    }

    /// Everything the machine did through the fake.
    struct FakeIo<'a> {
        seen: KVec<Seen>,
        links: KVec<Link>,
        notes: KVec<Note>,
        armed: bool,
        arms: u32,
        attached: u32,
        detached: u32,
        closed: u32,
        reported: u32,
        accepted: u32,
        unexpected: u32,
        qp_closed: u32,
        qp_stopped: u32,
        attach_error: Option<Error>,
        rts_error: Option<Error>,
        _parts: PhantomData<&'a ()>,
    }

    impl FakeIo<'_> {
        fn new() -> Self {
            Self {
                seen: KVec::new(),
                links: KVec::new(),
                notes: KVec::new(),
                armed: false,
                arms: 0,
                attached: 0,
                detached: 0,
                closed: 0,
                reported: 0,
                accepted: 0,
                unexpected: 0,
                qp_closed: 0,
                qp_stopped: 0,
                attach_error: None,
                rts_error: None,
                _parts: PhantomData,
            }
        }

        fn hear(&mut self, ev: &CmEvent<'_>, to_listener: bool) {
            let mut pd = KVec::new();
            pd.extend_from_slice(ev.private_data, GFP_KERNEL).unwrap();
            let seen = Seen {
                kind: ev.kind,
                status: ev.status,
                pd,
                token: ev.token,
                to_listener,
                depth: ev.ird,
            };
            self.seen.push(seen, GFP_KERNEL).unwrap();
        }

        /// The kinds and statuses iw_cm heard, in order.
        fn heard(&self) -> KVec<(CmEventKind, Option<Error>)> {
            let mut v = KVec::new();
            for s in self.seen.iter() {
                v.push((s.kind, s.status), GFP_KERNEL).unwrap();
            }
            v
        }
    }

    impl<'a> Io for FakeIo<'a> {
        type P = Fake<'a>;

        fn cc(&self) -> u8 {
            OWN_CC
        }

        fn token(&self) -> usize {
            77
        }

        fn cookie(&self, qp: &u32) -> u32 {
            *qp
        }

        fn attach(&mut self, _qp: &u32) -> Result {
            if let Some(e) = self.attach_error {
                return Err(e);
            }
            self.attached += 1;
            Ok(())
        }

        fn detach(&mut self, _qp: &u32) {
            self.detached += 1;
        }

        fn to_rts(&mut self, _qp: &u32, link: &Link) -> Result {
            if let Some(e) = self.rts_error {
                return Err(e);
            }
            self.links.push(*link, GFP_KERNEL)?;
            Ok(())
        }

        fn close_qp(&mut self, _qp: &u32) {
            self.qp_closed += 1;
        }

        fn qp_stopped(&mut self, _qp: &u32) {
            self.qp_stopped += 1;
        }

        fn report(&mut self, _id: &u8, ev: &CmEvent<'_>) -> Result {
            self.hear(ev, false);
            Ok(())
        }

        fn report_request(&mut self, _l: &(), ev: &CmEvent<'_>) -> Result {
            self.hear(ev, true);
            Ok(())
        }

        fn arm(&mut self, _after: Delta) {
            self.armed = true;
            self.arms += 1;
        }

        fn reply_timeout(&self) -> Delta {
            // The module parameters' defaults, the upstream C driver's waits.
            Timeouts::new(10_000, 20_000).reply()
        }

        fn disarm(&mut self) {
            self.armed = false;
        }

        fn reported(&mut self) {
            self.reported += 1;
        }

        fn accepted(&mut self) {
            self.accepted += 1;
        }

        fn closed(&mut self) {
            self.closed += 1;
        }

        fn note(&mut self, peer: SocketAddrV4, note: Note) {
            assert_eq!(peer, REMOTE);
            self.notes.push(note, GFP_KERNEL).unwrap();
        }

        fn unexpected(&mut self, _state: &'static str, _what: &'static str) {
            self.unexpected += 1;
        }
    }

    /// An MPA frame as erdma_rs_hw 7.1 lays it out, written by hand (the header as the MPA
    /// tests write it, the algorithm in the low bits of its last word), then `pd`.
    fn frame(
        key: &[u8; 16],
        flags: u8,
        rev: u8,
        pd_len: u16,
        cookie: u32,
        cc: u8,
        pd: &[u8],
    ) -> KVec<u8> {
        let mut f = crate::cm::mpa::tests::frame(key, flags, rev, pd_len, cookie, u32::from(cc));
        f.extend_from_slice(pd, GFP_KERNEL).unwrap();
        f
    }

    fn reply(cookie: u32, cc: u8, pd: &[u8]) -> KVec<u8> {
        // CAST: test data, short.
        frame(b"MPA ID Rep Frame", 0, 129, pd.len() as u16, cookie, cc, pd)
    }

    fn request(cookie: u32, cc: u8, pd: &[u8]) -> KVec<u8> {
        // CAST: test data, short.
        frame(b"MPA ID Req Frame", 0, 129, pd.len() as u16, cookie, cc, pd)
    }

    fn kvec(b: &[u8]) -> KVec<u8> {
        let mut v = KVec::new();
        v.extend_from_slice(b, GFP_KERNEL).unwrap();
        v
    }

    fn connecting(wire: &Wire) -> State<Fake<'_>> {
        State::Connecting {
            sock: Sock(wire),
            id: 1,
            qp: 0x11,
            pd: kvec(b"hi"),
            addrs: (LOCAL, REMOTE),
        }
    }

    fn awaiting_request(wire: &Wire) -> State<Fake<'_>> {
        State::AwaitRequest {
            sock: Sock(wire),
            listener: (),
            rx: Rx::new(),
            addrs: (LOCAL, REMOTE),
        }
    }

    fn awaiting_accept(wire: &Wire) -> State<Fake<'_>> {
        State::AwaitAccept {
            sock: Sock(wire),
            peer: Peer {
                cookie: 0x22,
                cc: 2,
            },
            addrs: (LOCAL, REMOTE),
        }
    }

    fn connected(wire: &Wire) -> State<Fake<'_>> {
        State::Connected {
            sock: Sock(wire),
            id: 1,
            qp: 0x11,
            addrs: (LOCAL, REMOTE),
        }
    }

    /// iw_accept to queue pair 3, for identifier 2, without private data.
    fn accept3<'a>() -> Event<'static, Fake<'a>> {
        Event::Accept {
            qp: 3,
            id: 2,
            pd: b"",
        }
    }

    fn is_closed<P: Parts>(s: &State<P>) -> bool {
        matches!(s, State::Closed)
    }

    /// The active side connected: the request as sent, the reply in pieces, RTS, then the
    /// peer's close.
    #[test]
    fn timeouts_stay_in_range() {
        let t = Timeouts::new(0, 5_000_000);
        assert_eq!(
            (t.reply_ms, t.request_ms),
            (Timeouts::MIN_MS, Timeouts::MAX_MS)
        );
    }

    #[test]
    fn active_connects_then_the_peer_closes() {
        let wire = Wire::new(TcpState::SynSent);
        let mut io = FakeIo::new();
        let (s, r) = step(&mut io, connecting(&wire), Event::Socket);
        assert!(r.is_ok() && matches!(s, State::Connecting { .. }));
        assert!(wire.sent.borrow().is_empty());
        wire.state.set(TcpState::Established);
        let (s, _) = step(&mut io, s, Event::Socket);
        assert!(matches!(s, State::AwaitReply { .. }));
        assert_eq!(&wire.sent.borrow()[..], &request(0x11, OWN_CC, b"hi")[..]);
        assert!(io.armed && io.arms == 1);
        let rep = reply(0x22, OWN_CC, b"ok");
        wire.push(&rep[..10]);
        let (s, _) = step(&mut io, s, Event::Socket);
        assert!(matches!(s, State::AwaitReply { .. }) && io.seen.is_empty());
        wire.push(&rep[10..]);
        let (s, _) = step(&mut io, s, Event::Socket);
        assert!(matches!(s, State::Connected { .. }) && !io.armed);
        assert_eq!(
            &io.links[..],
            &[Link {
                local: LOCAL,
                remote: REMOTE,
                peer_cookie: 0x22,
                cc: OWN_CC,
                snd_nxt: 1000,
                rcv_nxt: 5000,
            }]
        );
        assert_eq!(&io.heard()[..], &[(CmEventKind::ConnectReply, None)]);
        assert_eq!(&io.seen[0].pd[..], b"ok");
        // CAST: 128.
        assert_eq!(io.seen[0].depth, MAX_RD_ATOM as u8);
        wire.state.set(TcpState::CloseWait);
        let (s, _) = step(&mut io, s, Event::Socket);
        assert!(is_closed(&s));
        assert_eq!(
            &io.heard()[1..],
            &[(CmEventKind::Disconnect, None), (CmEventKind::Close, None)]
        );
        assert_eq!((io.qp_closed, io.detached, io.closed), (1, 1, 1));
        // Nothing moves a closed endpoint.
        let (s, r) = step(&mut io, s, Event::Socket);
        assert!(is_closed(&s) && r.is_ok() && io.closed == 1);
    }

    /// TCP refused, a reject reply, the timer, a failed RTS, a local close: each is one
    /// failed ConnectReply, and the endpoint ends once.
    #[test]
    fn active_failures_report_once() {
        // Refused.
        let wire = Wire::new(TcpState::Close);
        wire.error.set(Some(ECONNREFUSED));
        let mut io = FakeIo::new();
        let (s, _) = step(&mut io, connecting(&wire), Event::Socket);
        assert!(is_closed(&s));
        assert_eq!(
            &io.heard()[..],
            &[(CmEventKind::ConnectReply, Some(ECONNREFUSED))]
        );
        assert_eq!((io.detached, io.closed), (1, 1));

        // Rejected, with the peer's private data.
        let wire = Wire::new(TcpState::Established);
        wire.push(&frame(b"MPA ID Rep Frame", 0x20, 129, 3, 0, 0, b"no!"));
        let mut io = FakeIo::new();
        let (s, _) = step(&mut io, connecting(&wire), Event::Socket);
        assert!(is_closed(&s) && io.links.is_empty());
        assert_eq!(
            &io.heard()[..],
            &[(CmEventKind::ConnectReply, Some(ECONNRESET))]
        );
        assert_eq!(&io.seen[0].pd[..], b"no!");

        // The timer, before TCP and before the reply.
        for established in [false, true] {
            let wire = Wire::new(if established {
                TcpState::Established
            } else {
                TcpState::SynSent
            });
            let mut io = FakeIo::new();
            let (s, _) = step(&mut io, connecting(&wire), Event::Socket);
            let (s, _) = step(&mut io, s, Event::Timeout);
            assert!(is_closed(&s) && io.closed == 1);
            assert_eq!(
                &io.heard()[..],
                &[(CmEventKind::ConnectReply, Some(ETIMEDOUT))]
            );
        }

        // The adapter refuses RTS.
        let wire = Wire::new(TcpState::Established);
        wire.push(&reply(0x22, OWN_CC, b""));
        let mut io = FakeIo::new();
        io.rts_error = Some(EIO);
        let (s, _) = step(&mut io, connecting(&wire), Event::Socket);
        assert!(is_closed(&s));
        assert_eq!(&io.heard()[..], &[(CmEventKind::ConnectReply, Some(EIO))]);

        // The queue pair stops while the reply is awaited.
        let wire = Wire::new(TcpState::Established);
        let mut io = FakeIo::new();
        let (s, _) = step(&mut io, connecting(&wire), Event::Socket);
        let (s, _) = step(&mut io, s, Event::LocalClose);
        assert!(is_closed(&s) && io.qp_stopped == 1 && io.unexpected == 0);
        assert_eq!(
            &io.heard()[..],
            &[(CmEventKind::ConnectReply, Some(ECONNABORTED))]
        );
    }

    /// Hostile replies: each fails the connection with its errno and a note, and nothing
    /// reaches the adapter.
    #[test]
    fn active_refuses_hostile_replies() {
        let big = [7u8; 256];
        let cases: [(KVec<u8>, Error, Option<Note>); 6] = [
            (
                frame(b"MPA ID Req Frame", 0, 129, 0, 1, 0, b""),
                EPROTO,
                Some(Note::BadFrame("reply", Bad::Key)),
            ),
            (
                frame(b"MPA ID Rep Frame", 0, 1, 0, 1, 0, b""),
                EPROTO,
                Some(Note::BadFrame("reply", Bad::Revision(1))),
            ),
            (
                frame(b"MPA ID Rep Frame", 0x80, 129, 0, 1, 0, b""),
                ECONNREFUSED,
                Some(Note::BadFrame("reply", Bad::MarkersOrCrc)),
            ),
            (
                frame(b"MPA ID Rep Frame", 0, 129, 300, 1, 0, b""),
                EPROTO,
                Some(Note::BadFrame("reply", Bad::TooLong(300))),
            ),
            (
                reply(1, 0, &big),
                EPROTO,
                Some(Note::TooMuchPrivateData(256)),
            ),
            // Half a header, then the peer resets.
            (
                kvec(&frame(b"MPA ID Rep Frame", 0, 129, 0, 1, 0, b"")[..14]),
                ECONNRESET,
                None,
            ),
        ];
        for (bytes, errno, note) in cases.iter() {
            let wire = Wire::new(TcpState::Established);
            wire.push(bytes);
            let mut io = FakeIo::new();
            let (s, _) = step(&mut io, connecting(&wire), Event::Socket);
            let s = if matches!(s, State::AwaitReply { .. }) {
                wire.state.set(TcpState::Close);
                step(&mut io, s, Event::Socket).0
            } else {
                s
            };
            assert!(is_closed(&s) && io.links.is_empty() && io.closed == 1);
            assert_eq!(
                &io.heard()[..],
                &[(CmEventKind::ConnectReply, Some(*errno))]
            );
            assert_eq!(io.notes.first().copied(), *note);
        }
    }

    /// The passive side: a request in pieces, reported with its private data and token; the
    /// accept hands the connection over, then sends the reply.
    #[test]
    fn passive_request_then_accept() {
        let wire = Wire::new(TcpState::Established);
        let mut io = FakeIo::new();
        let req = request(0x22, 2, b"pd!");
        wire.push(&req[..1]);
        let (s, _) = step(&mut io, awaiting_request(&wire), Event::Socket);
        assert!(matches!(s, State::AwaitRequest { .. }));
        wire.push(&req[1..28]);
        let (s, _) = step(&mut io, s, Event::Socket);
        assert!(matches!(s, State::AwaitRequest { .. }) && io.seen.is_empty());
        wire.push(&req[28..]);
        let (s, _) = step(&mut io, s, Event::Socket);
        assert!(matches!(s, State::AwaitAccept { .. }));
        assert_eq!(io.reported, 1);
        assert!(io.seen[0].to_listener && io.seen[0].token == 77);
        assert_eq!(&io.heard()[..], &[(CmEventKind::ConnectRequest, None)]);
        assert_eq!(&io.seen[0].pd[..], b"pd!");
        assert!(wire.sent.borrow().is_empty());

        let (s, r) = step(
            &mut io,
            s,
            Event::Accept {
                qp: 0x33,
                id: 2,
                pd: b"yes",
            },
        );
        assert!(r.is_ok() && matches!(s, State::Connected { .. }));
        let rep = reply(0x33, OWN_CC, b"yes");
        assert_eq!(&wire.sent.borrow()[..], &rep[..]);
        // The reply's sequence space is reserved; another algorithm than ours: the compromise.
        // CAST: a short frame.
        let snd_nxt = 1000 + rep.len() as u32;
        assert_eq!(
            &io.links[..],
            &[Link {
                local: LOCAL,
                remote: REMOTE,
                peer_cookie: 0x22,
                cc: CC_COMPROMISE,
                snd_nxt,
                rcv_nxt: 5000,
            }]
        );
        assert_eq!((io.attached, io.accepted, io.closed), (1, 1, 0));
        assert_eq!(io.heard()[1], (CmEventKind::Established, None));
    }

    /// Hostile requests and silence end the passive endpoint; a peer that speaks MPA gets a
    /// reject reply, anything else only the close. iw_cm hears nothing.
    #[test]
    fn passive_refuses_hostile_requests() {
        let big = [1u8; 256];
        let cases: [(KVec<u8>, Note, bool); 5] = [
            (
                frame(b"GET / HTTP/1.1\r\n", 0, 129, 0, 1, 0, b""),
                Note::BadFrame("request", Bad::Key),
                false,
            ),
            (
                frame(b"MPA ID Req Frame", 0, 128, 0, 1, 0, b""),
                Note::BadFrame("request", Bad::Revision(128)),
                true,
            ),
            (
                frame(b"MPA ID Req Frame", 0x40, 129, 0, 1, 0, b""),
                Note::BadFrame("request", Bad::MarkersOrCrc),
                true,
            ),
            (
                frame(b"MPA ID Req Frame", 0, 129, 257, 1, 0, b""),
                Note::BadFrame("request", Bad::TooLong(257)),
                true,
            ),
            (request(1, 0, &big), Note::TooMuchPrivateData(256), true),
        ];
        for (bytes, note, rejected) in cases.iter() {
            let wire = Wire::new(TcpState::Established);
            wire.push(bytes);
            let mut io = FakeIo::new();
            let (s, _) = step(&mut io, awaiting_request(&wire), Event::Socket);
            assert!(is_closed(&s) && io.closed == 1 && io.seen.is_empty());
            assert_eq!(&io.notes[..], &[*note]);
            let sent = wire.sent.borrow();
            if *rejected {
                assert_eq!(
                    &sent[..],
                    &frame(b"MPA ID Rep Frame", 0x20, 129, 0, 0, OWN_CC, b"")[..]
                );
            } else {
                assert!(sent.is_empty());
            }
        }
        // Silence.
        let wire = Wire::new(TcpState::Established);
        let mut io = FakeIo::new();
        let (s, _) = step(&mut io, awaiting_request(&wire), Event::Timeout);
        assert!(is_closed(&s) && io.seen.is_empty());
        assert_eq!(&io.notes[..], &[Note::RequestTimeout]);
        // A reset in the middle of the request.
        let wire = Wire::new(TcpState::Established);
        wire.push(&request(1, 0, b"")[..20]);
        let mut io = FakeIo::new();
        let (s, _) = step(&mut io, awaiting_request(&wire), Event::Socket);
        wire.state.set(TcpState::Close);
        let (s, _) = step(&mut io, s, Event::Socket);
        assert!(is_closed(&s) && io.seen.is_empty() && io.closed == 1);
    }

    /// Accept and reject of a request whose connection ended, or in the wrong state; the
    /// listener's end; the reject reply.
    #[test]
    fn passive_answers() {
        // The peer left before the accept.
        let wire = Wire::new(TcpState::CloseWait);
        let mut io = FakeIo::new();
        let (s, r) = step(&mut io, awaiting_accept(&wire), accept3());
        assert!(is_closed(&s) && r == Err(ECONNRESET) && io.attached == 0);
        // The queue pair has a connection already.
        let wire = Wire::new(TcpState::Established);
        let mut io = FakeIo::new();
        io.attach_error = Some(EBUSY);
        let (s, r) = step(&mut io, awaiting_accept(&wire), accept3());
        assert!(is_closed(&s) && r == Err(EBUSY) && io.detached == 0);
        // The adapter refuses RTS: the queue pair is let go, no reply is sent.
        let wire = Wire::new(TcpState::Established);
        let mut io = FakeIo::new();
        io.rts_error = Some(EIO);
        let (s, r) = step(&mut io, awaiting_accept(&wire), accept3());
        assert!(is_closed(&s) && r == Err(EIO) && io.detached == 1);
        assert!(wire.sent.borrow().is_empty() && io.seen.is_empty());
        // Accept before the request, and after the end.
        let wire = Wire::new(TcpState::Established);
        let mut io = FakeIo::new();
        let (s, r) = step(&mut io, awaiting_request(&wire), accept3());
        assert!(is_closed(&s) && r == Err(ECONNRESET));
        let (s, r) = step(&mut io, s, accept3());
        assert!(is_closed(&s) && r == Err(ECONNRESET) && io.closed == 1);
        // Reject: the reply carries the private data, unless iw_cm could not have sent it.
        let wire = Wire::new(TcpState::Established);
        let mut io = FakeIo::new();
        let (s, _) = step(
            &mut io,
            awaiting_accept(&wire),
            Event::Reject { pd: b"why" },
        );
        assert!(is_closed(&s));
        let want = frame(b"MPA ID Rep Frame", 0x20, 129, 3, 0, OWN_CC, b"why");
        assert_eq!(&wire.sent.borrow()[..], &want[..]);
        let wire = Wire::new(TcpState::Established);
        let mut io = FakeIo::new();
        let (s, _) = step(
            &mut io,
            awaiting_accept(&wire),
            Event::Reject { pd: &[0; 256] },
        );
        assert!(is_closed(&s) && wire.sent.borrow().is_empty());
        // The listener's end: waiting for the request, closed; reported, rejected.
        let wire = Wire::new(TcpState::Established);
        let mut io = FakeIo::new();
        let (s, _) = step(&mut io, awaiting_request(&wire), Event::ListenerGone);
        assert!(is_closed(&s) && wire.sent.borrow().is_empty());
        let wire = Wire::new(TcpState::Established);
        let mut io = FakeIo::new();
        let (s, _) = step(&mut io, awaiting_accept(&wire), Event::ListenerGone);
        assert!(is_closed(&s));
        let want = frame(b"MPA ID Rep Frame", 0x20, 129, 0, 0, OWN_CC, b"");
        assert_eq!(&wire.sent.borrow()[..], &want[..]);
    }

    /// Events no path leads to are reported and end the endpoint, telling iw_cm what it
    /// waits for; a connected endpoint ignores its listener's end.
    #[test]
    fn unexpected_events_end_the_endpoint() {
        let wire = Wire::new(TcpState::Established);
        let mut io = FakeIo::new();
        let (s, _) = step(&mut io, connected(&wire), Event::ListenerGone);
        assert!(matches!(s, State::Connected { .. }) && io.closed == 0);
        let (s, _) = step(&mut io, s, Event::Timeout);
        assert!(is_closed(&s) && io.unexpected == 1);
        assert_eq!(&io.heard()[..], &[(CmEventKind::Close, None)]);
        // A local close: the queue pair is looked at, CLOSE goes to iw_cm.
        let wire = Wire::new(TcpState::Established);
        let mut io = FakeIo::new();
        let (s, _) = step(&mut io, connected(&wire), Event::LocalClose);
        assert!(is_closed(&s) && io.unexpected == 0 && io.qp_stopped == 1);
        assert_eq!(&io.heard()[..], &[(CmEventKind::Close, None)]);
        // Before the accept there is no queue pair to stop.
        for s in [awaiting_request(&wire), awaiting_accept(&wire)] {
            let mut io = FakeIo::new();
            let (s, _) = step(&mut io, s, Event::LocalClose);
            assert!(is_closed(&s) && io.unexpected == 1 && io.seen.is_empty());
        }
        let mut io = FakeIo::new();
        let (s, _) = step(&mut io, awaiting_accept(&wire), Event::Timeout);
        assert!(is_closed(&s) && io.unexpected == 1 && io.closed == 1);
    }

    /// A valid frame in random pieces, on both sides.
    #[test]
    fn frames_split_anywhere_read_the_same() {
        // Property: however TCP splits a peer's valid frame (private data of any length the
        // core can report, any bytes), the machine reads exactly that frame: nothing before
        // its last byte, then one event with the private data as sent, on either side.
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..200 {
            let active = round % 2 == 0;
            // CAST: at most 255.
            let len = (next() % (MAX_REPORTED_PRIVATE_DATA as u64 + 1)) as usize;
            let mut pd = KVec::new();
            for _ in 0..len {
                // CAST: a byte.
                pd.push(next() as u8, GFP_KERNEL).unwrap();
            }
            let wire = Wire::new(TcpState::Established);
            let mut io = FakeIo::new();
            let (frame, mut s) = if active {
                let s = step(&mut io, connecting(&wire), Event::Socket).0;
                assert!(matches!(s, State::AwaitReply { .. }));
                (reply(0x22, OWN_CC, &pd), s)
            } else {
                (request(0x22, OWN_CC, &pd), awaiting_request(&wire))
            };
            let mut at = 0;
            while at < frame.len() {
                // CAST: a frame is at most 20 + 255 bytes.
                let n = 1 + (next() % (frame.len() - at) as u64) as usize;
                // Nothing is reported before the frame's last byte.
                assert!(io.seen.is_empty());
                wire.push(&frame[at..at + n]);
                at += n;
                s = step(&mut io, s, Event::Socket).0;
            }
            if active {
                assert!(matches!(s, State::Connected { .. }));
                assert_eq!(&io.heard()[..], &[(CmEventKind::ConnectReply, None)]);
            } else {
                assert!(matches!(s, State::AwaitAccept { .. }));
                assert_eq!(&io.heard()[..], &[(CmEventKind::ConnectRequest, None)]);
            }
            assert_eq!(&io.seen[0].pd[..], &pd[..]);
            assert_eq!((io.closed, io.unexpected), (0, 0));
        }
    }

    /// Random bytes in random pieces, on both sides: the machine never panics, reports at
    /// most once, and ends (or waits) cleanly.
    #[test]
    fn random_bytes_from_the_peer() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..300 {
            let wire = Wire::new(TcpState::Established);
            let mut io = FakeIo::new();
            let active = round % 2 == 0;
            // Half the rounds start with a good header's first bytes.
            let good = if active {
                reply(5, 0, b"")
            } else {
                request(5, 0, b"")
            };
            if round % 4 < 2 {
                // CAST: at most 28.
                wire.push(&good[..(next() % 29) as usize]);
            }
            let mut s = if active {
                connecting(&wire)
            } else {
                awaiting_request(&wire)
            };
            for _ in 0..(next() % 6) {
                let mut chunk = [0u8; 64];
                // CAST: at most 64.
                let n = (next() % 65) as usize;
                for b in chunk[..n].iter_mut() {
                    // CAST: a byte.
                    *b = next() as u8;
                }
                wire.push(&chunk[..n]);
                s = step(&mut io, s, Event::Socket).0;
            }
            if next() % 3 == 0 {
                wire.state.set(TcpState::Close);
                s = step(&mut io, s, Event::Socket).0;
            }
            assert!(io.closed <= 1 && io.unexpected == 0);
            assert_eq!(io.closed, u32::from(is_closed(&s)));
            if active {
                // The active side hears how its connect ended (then, if it connected, of the
                // close) and always hears of a failure.
                if let Some(first) = io.seen.first() {
                    assert_eq!(first.kind, CmEventKind::ConnectReply);
                }
                assert!(!is_closed(&s) || !io.seen.is_empty());
            } else {
                // The passive side reports a request at most once, and nothing else.
                assert!(io.seen.len() <= 1 && io.seen.iter().all(|e| e.to_listener));
            }
        }
    }
}
