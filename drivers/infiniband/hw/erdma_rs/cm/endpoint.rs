// SPDX-License-Identifier: GPL-2.0

//! Endpoints: one side of one connection, the kernel's transport for its state machine
//! ([`super::machine`]): the TCP socket, iw_cm, the queue pair, the timer and the tables.

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
        TcpSeq,
        TcpSocket,
        TcpState, //
    },
    new_mutex, new_work,
    prelude::*,
    rdma::iwcm::{
        CmEvent,
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

use super::{
    device::{
        CmDevice,
        CmHw,
        Requests, //
    },
    machine::{
        step,
        Addrs,
        Event,
        Io,
        Link,
        Note,
        Parts,
        State,
        Stream, //
    },
};

/// A socket event arrived.
pub(super) const EV_SOCKET: u32 = 1 << 0;
/// The timer ran out.
pub(super) const EV_TIMEOUT: u32 = 1 << 1;
/// The queue pair stopped, failed or went away.
pub(super) const EV_LOCAL_CLOSE: u32 = 1 << 2;

/// A queue pair's side of its connection, as its endpoint uses it (the iWARP queue pair of
/// [`super::qp`]).
pub(super) trait QpSide: Send + Sync {
    /// The cookie the adapter gave the queue pair.
    fn cookie(&self) -> u32;
    /// Attaches `ep` as the queue pair's connection; `EBUSY` if it has one or is not IDLE.
    fn attach(&self, ep: &Arc<Endpoint>) -> Result;
    /// Detaches `ep`, if it is the queue pair's connection.
    fn detach(&self, ep: &Endpoint);
    /// Hands the connection to the adapter (MODIFY_QP to RTS).
    fn to_rts(&self, hw: &dyn CmHw, link: &Link) -> Result;
    /// The peer closed: a queue pair in RTS moves to CLOSING.
    fn peer_closed(&self, hw: &dyn CmHw);
    /// The queue pair stopped: if the adapter failed it, it is noted ERROR and flushed.
    fn note_failed(&self, hw: &dyn CmHw);
}

/// The kernel's types in an endpoint's [`State`].
pub(super) struct Kernel;

impl Parts for Kernel {
    type Sock = TcpSocket;
    type Qp = Arc<dyn QpSide>;
    type Id = CmIdRef;
    type Listener = Arc<dyn Requests>;
}

impl Stream for TcpSocket {
    fn state(&self) -> TcpState {
        TcpSocket::state(self)
    }

    fn take_error(&self) -> Option<Error> {
        TcpSocket::take_error(self)
    }

    fn recv(&self, buf: &mut [u8]) -> Result<usize> {
        TcpSocket::recv(self, buf)
    }

    fn send(&self, data: &[u8]) -> Result<usize> {
        TcpSocket::send(self, data)
    }

    fn addresses(&self) -> Result<Addrs> {
        Ok((self.local_addr()?, self.peer_addr()?))
    }

    fn seq(&self) -> TcpSeq {
        TcpSocket::seq(self)
    }
}

/// An endpoint's state, under its lock.
pub(super) struct Inner {
    pub(super) state: State<Kernel>,
    /// The token the endpoint is known by in the tables (and to iw_cm, when passive).
    pub(super) token: usize,
    timer: Option<ArcHrTimerHandle<Endpoint>>,
}

/// One side of one connection (see the [module documentation](super)).
#[pin_data]
pub(crate) struct Endpoint {
    pub(super) dev: Arc<dyn CmDevice>,
    pending: AtomicU32,
    #[pin]
    work: Work<Endpoint>,
    #[pin]
    timer: HrTimer<Endpoint>,
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

impl SocketEvents for Endpoint {
    fn event(this: ArcBorrow<'_, Self>, _event: SocketEvent) {
        Arc::from(this).kick(EV_SOCKET);
    }
}

/// One step's transport: the device, the endpoint and its timer.
struct KernelIo<'a> {
    hw: &'a dyn CmHw,
    ep: &'a Arc<Endpoint>,
    token: usize,
    timer: &'a mut Option<ArcHrTimerHandle<Endpoint>>,
}

impl Io for KernelIo<'_> {
    type P = Kernel;

    fn cc(&self) -> u8 {
        self.hw.cc()
    }

    fn token(&self) -> usize {
        self.token
    }

    fn cookie(&self, qp: &Arc<dyn QpSide>) -> u32 {
        qp.cookie()
    }

    fn attach(&mut self, qp: &Arc<dyn QpSide>) -> Result {
        qp.attach(self.ep)
    }

    fn detach(&mut self, qp: &Arc<dyn QpSide>) {
        qp.detach(self.ep);
    }

    fn to_rts(&mut self, qp: &Arc<dyn QpSide>, link: &Link) -> Result {
        qp.to_rts(self.hw, link)
    }

    fn close_qp(&mut self, qp: &Arc<dyn QpSide>) {
        qp.peer_closed(self.hw);
    }

    fn qp_stopped(&mut self, qp: &Arc<dyn QpSide>) {
        qp.note_failed(self.hw);
    }

    fn report(&mut self, id: &CmIdRef, ev: &CmEvent<'_>) -> Result {
        id.report(ev)
    }

    fn report_request(&mut self, l: &Arc<dyn Requests>, ev: &CmEvent<'_>) -> Result {
        l.report(ev)
    }

    fn arm(&mut self, after: Delta) {
        *self.timer = None;
        *self.timer = Some(self.ep.clone().start(after));
    }

    fn disarm(&mut self) {
        *self.timer = None;
    }

    fn reply_timeout(&self) -> Delta {
        self.hw.cm().timeouts().reply()
    }

    fn reported(&mut self) {
        self.hw.cm().reported(self.token);
    }

    fn accepted(&mut self) {
        self.hw.cm().accepted(self.token);
    }

    fn closed(&mut self) {
        self.hw.cm().remove(self.token);
    }

    fn note(&mut self, peer: SocketAddrV4, note: Note) {
        let (hw, cm) = (self.hw, self.hw.cm());
        match note {
            Note::BadFrame(frame, bad) => {
                cm.peer_note(hw, fmt!("bad MPA {frame} from {peer} ({bad:?}), refused\n"));
            }
            Note::RequestTimeout => cm.peer_note(
                hw,
                fmt!(
                    "no MPA request from {peer} within {} ms (or its backlog was full)\n",
                    cm.timeouts().request_ms
                ),
            ),
            Note::TooMuchPrivateData(len) => cm.peer_note(
                hw,
                fmt!("{peer} sent {len} bytes of private data; iw_cm takes at most 255\n"),
            ),
            Note::RejectNotSent => {
                cm.peer_note(hw, fmt!("could not send a reject to {peer}\n"));
            }
        }
    }

    fn unexpected(&mut self, state: &'static str, what: &'static str) {
        self.hw.cm().unexpected(self.hw, state, what);
    }
}

impl Endpoint {
    /// A closed endpoint of `dev`, to be given its first state.
    pub(super) fn new(dev: Arc<dyn CmDevice>) -> Result<Arc<Self>> {
        Arc::pin_init(
            try_pin_init!(Self {
                dev,
                pending: AtomicU32::new(0),
                work <- new_work!("erdma_rs::cm::Endpoint::work"),
                timer <- HrTimer::new(),
                inner <- new_mutex!(Inner {
                    state: State::Closed,
                    token: 0,
                    timer: None,
                }),
            }? Error),
            GFP_KERNEL,
        )
    }

    /// Gives the endpoint `token` its first `state`, with the timer running out `after`, and
    /// looks at its socket once (the connection may have been made, or the request arrived,
    /// before the socket's events were the endpoint's).
    pub(super) fn begin(self: &Arc<Self>, token: usize, state: State<Kernel>, after: Delta) {
        {
            let mut inner = self.inner.lock();
            inner.token = token;
            inner.state = state;
            inner.timer = Some(self.clone().start(after));
        }
        self.kick(EV_SOCKET);
    }

    /// Notes `events` and queues the endpoint's work; any context. The caller holds a
    /// reference besides this one, so that the work's is never the last dropped here.
    pub(super) fn kick(self: &Arc<Self>, events: u32) {
        self.pending.fetch_or(events, Ordering::AcqRel);
        self.dev.with(&mut |hw| {
            // Already queued: that run sees the new events.
            let _ = hw.cm().queue().enqueue(self.clone());
        });
    }

    /// Takes the endpoint's state through `event` (see [`step`]).
    pub(super) fn step(
        self: &Arc<Self>,
        hw: &dyn CmHw,
        inner: &mut Inner,
        event: Event<'_, Kernel>,
    ) -> Result {
        let state = core::mem::replace(&mut inner.state, State::Closed);
        let mut io = KernelIo {
            hw,
            ep: self,
            token: inner.token,
            timer: &mut inner.timer,
        };
        let (next, result) = step(&mut io, state, event);
        inner.state = next;
        result
    }

    /// Takes the endpoint through `event`, under its lock.
    pub(super) fn handle(self: &Arc<Self>, hw: &dyn CmHw, event: Event<'_, Kernel>) -> Result {
        let mut inner = self.inner.lock();
        self.step(hw, &mut inner, event)
    }

    /// Does what `events` ask for: a local close first; a timeout only if the timer still
    /// runs (a timer stopped after it ran out has queued a stale one).
    fn process(self: &Arc<Self>, hw: &dyn CmHw, events: u32) {
        let mut inner = self.inner.lock();
        if events & EV_LOCAL_CLOSE != 0 {
            let _ = self.step(hw, &mut inner, Event::LocalClose);
        } else if events & EV_TIMEOUT != 0 && inner.timer.take().is_some() {
            let _ = self.step(hw, &mut inner, Event::Timeout);
        } else if events & EV_SOCKET != 0 {
            let _ = self.step(hw, &mut inner, Event::Socket);
        }
    }

    /// The device went away under queued work: releases what the endpoint holds without
    /// telling anybody.
    pub(super) fn abandon(&self) {
        let mut inner = self.inner.lock();
        inner.timer = None;
        let state = core::mem::replace(&mut inner.state, State::Closed);
        if let Some(qp) = state.qp() {
            qp.detach(self);
        }
    }
}
