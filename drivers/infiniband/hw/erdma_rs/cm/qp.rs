// SPDX-License-Identifier: GPL-2.0

//! An iWARP queue pair's side of its connection: its state in the adapter, its endpoint, and
//! the commands that move it (MODIFY_QP to RTS and the stops, REFLUSH).

use core::sync::atomic::{
    AtomicBool,
    AtomicU32,
    Ordering, //
};
use kernel::{
    new_condvar,
    new_mutex,
    new_spinlock_irq,
    prelude::*,
    rdma::QpState,
    sync::{
        Arc,
        CondVar,
        CondVarTimeoutResult,
        Mutex,
        SpinLockIrq, //
    },
    time::msecs_to_jiffies, //
};
use zerocopy::FromZeros;

use crate::{
    commands::{
        ModifyQpIwarp,
        ModifyQpIwarpCfg,
        Reflush, //
    },
    consts::IwState,
    formats::low32, //
};

use super::{
    compat::{
        compat_link,
        CompatEnd, //
    },
    device::CmHw,
    endpoint::{
        Endpoint,
        QpSide, //
        EV_LOCAL_CLOSE,
    },
    machine::Link,
};

/// The connection state of an iWARP queue pair.
pub(super) struct Conn {
    /// The adapter's state of the queue pair (RTR is the driver's only: `rtr`).
    pub(super) state: IwState,
    /// Whether the verbs asked for RTR (reported as such until connected).
    pub(super) rtr: bool,
    /// The connection's endpoint, while one is attached.
    pub(super) ep: Option<Arc<Endpoint>>,
    /// Cleared when the queue pair is destroyed: no command may name its QPN afterwards.
    pub(super) alive: bool,
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
    pub(super) qpn: u32,
    /// The cookie CREATE_QP returned, set once it did.
    pub(super) cookie: AtomicU32,
    /// A kernel queue pair's poster, told of every state change.
    pub(super) sink: Option<Arc<dyn IwStateSink>>,
    /// Set once the adapter reported the queue pair failed ([`IwQp::fatal`]).
    pub(super) failed: AtomicBool,
    /// `conn.ep` as the interrupt handler reaches it (`conn` is a mutex).
    #[pin]
    pub(super) irq_ep: SpinLockIrq<Option<Arc<Endpoint>>>,
    #[pin]
    pub(super) conn: Mutex<Conn>,
    #[pin]
    pub(super) refs: SpinLockIrq<u32>,
    #[pin]
    pub(super) refs_gone: CondVar,
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

    /// The verbs state the queue pair is in (IDLE reads as INIT, erdma_rs_hw 7.1).
    pub(crate) fn state(&self) -> QpState {
        self.verbs_state(&self.conn.lock())
    }

    pub(super) fn verbs_state(&self, conn: &Conn) -> QpState {
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
    pub(super) fn set_state(&self, conn: &mut Conn, state: IwState) {
        conn.state = state;
        if let Some(sink) = &self.sink {
            sink.iw_state_changed(self.verbs_state(conn));
        }
    }

    /// Sends the "stop" MODIFY_QP to `state` (CLOSING, TERMINATE or ERROR).
    pub(super) fn stop(&self, hw: &dyn CmHw, conn: &mut Conn, state: IwState) -> Result {
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
    pub(super) fn flush_posted(&self, hw: &dyn CmHw) {
        if let Some(sink) = &self.sink {
            hw.reflush(&sink.reflush());
        }
    }

    /// The verbs' modify: only the state counts (erdma_rs_hw 7.1). RESET and INIT are IDLE, RTR a
    /// note, RTS only the connection manager's; SQD closes, SQE terminates, ERR fails the queue
    /// pair, each stopping its connection; a queue pair stopped at least as hard already stays
    /// as it is.
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
        // Stopped already, as hard or harder: nothing more to do. (rdma_disconnect on the side
        // whose peer closed first gets here when the peer's reset or Terminate came before
        // iw_cm saw the close; the C driver, too, takes it as done.)
        let stopped = matches!(
            (conn.state, target),
            (IwState::Error, _) | (IwState::Terminate, IwState::Closing | IwState::Terminate)
        );
        let ok = stopped
            || match (conn.state, target) {
                (IwState::Rts, _) => true,
                (IwState::Idle, IwState::Error) => true,
                (IwState::Closing | IwState::Terminate, IwState::Error) => true,
                (a, b) => a == b,
            };
        if !ok {
            return Err(EINVAL);
        }
        if conn.state != target && !stopped {
            self.stop(hw, &mut conn, target)?;
        }
        if let Some(ep) = self.take_ep(&mut conn) {
            ep.kick(EV_LOCAL_CLOSE);
        }
        Ok(())
    }

    /// Compat mode's RTS (erdma_rs_hw 7.3): the connection between this queue pair at
    /// `local_ip` and `remote`, made up from the two ends' addresses and QPNs (the TCP ports
    /// from `ports_base`), handed to the adapter with no endpoint. A queue pair in RTS already
    /// stays as it is; one stopped cannot go back.
    pub(crate) fn compat_rts(
        &self,
        hw: &dyn CmHw,
        local_ip: [u8; 4],
        remote: CompatEnd,
        ports_base: u16,
    ) -> Result {
        match self.conn.lock().state {
            IwState::Rts => return Ok(()),
            IwState::Idle => {}
            _ => return Err(EINVAL),
        }
        let local = CompatEnd {
            ip: local_ip,
            qpn: self.qpn,
        };
        self.to_rts(hw, &compat_link(local, remote, ports_base, hw.cc()))
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
    pub(super) fn note_failed(&self, hw: &dyn CmHw) {
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
    pub(super) fn take_ep(&self, conn: &mut Conn) -> Option<Arc<Endpoint>> {
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
}

impl QpSide for IwQp {
    fn cookie(&self) -> u32 {
        self.cookie.load(Ordering::Relaxed)
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

    fn peer_closed(&self, hw: &dyn CmHw) {
        let mut conn = self.conn.lock();
        if conn.state == IwState::Rts {
            let _ = self.stop(hw, &mut conn, IwState::Closing);
        }
    }

    fn note_failed(&self, hw: &dyn CmHw) {
        IwQp::note_failed(self, hw);
    }
}
