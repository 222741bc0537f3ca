// SPDX-License-Identifier: GPL-2.0

//! The connection manager of one device: its ordered work queue, and its endpoints and
//! listeners by token.

use kernel::{
    fmt,
    net::tcp::TcpSocket,
    new_mutex,
    prelude::*,
    ratelimit::Ratelimit,
    rbtree::{
        RBTree,
        RBTreeNodeReservation, //
    },
    sync::{
        Arc,
        Mutex, //
    },
    time::Delta,
    workqueue::OwnedQueue, //
};

use super::{
    device::{
        CmDevice,
        CmHw,
        Registry,
        Requests, //
    },
    endpoint::Endpoint,
    listener::Listener,
    machine::{
        Rx,
        State,
        Timeouts, //
    },
};

/// The window of [`Cm::peer_note`]'s limit: the kernel's burst of lines per 30 s, not per 5 s,
/// as a flood from any host can last.
const PEER_NOTE_INTERVAL: Delta = Delta::from_secs(30);

/// An endpoint in the table, and the listener it came from.
pub(super) struct Entry {
    pub(super) ep: Arc<Endpoint>,
    /// Passive, until accepted: the listener whose end ends it too.
    pub(super) listener: Option<usize>,
    /// Passive: its request was reported to iw_cm (it no longer counts against the backlog).
    pub(super) reported: bool,
    /// Passive, not reported: chosen to make room in a full backlog ([`Registry::evict`]).
    pub(super) evicted: bool,
}

/// A listener in the table, with the endpoints it accepted that are not accepted by iw_cm yet.
pub(super) struct ListenerEntry {
    pub(super) listener: Arc<Listener>,
    /// The tokens of its endpoints not accepted yet.
    pub(super) children: RBTree<usize, ()>,
    /// How many of them have not had their request reported (the backlog's count).
    pub(super) unreported: usize,
}

/// The tables of a [`Cm`]: endpoints and listeners by token, each listener with its children.
/// Every operation is a lookup by token, never a scan.
pub(super) struct Tables {
    pub(super) next_token: usize,
    /// Every live endpoint, by token.
    pub(super) endpoints: RBTree<usize, Entry>,
    /// Every listener, by token.
    pub(super) listeners: RBTree<usize, ListenerEntry>,
}

impl Tables {
    /// A fresh token.
    pub(super) fn token(&mut self) -> usize {
        let token = self.next_token;
        self.next_token = self.next_token.wrapping_add(1).max(1);
        token
    }

    /// Endpoint `token` leaves its listener's children (accepted, or gone).
    pub(super) fn unlink_child(&mut self, token: usize) {
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
    pub(super) tables: Mutex<Tables>,
    pub(super) queue: OwnedQueue,
    /// The rate of [`Cm::unexpected`]'s reports.
    pub(super) limit: Ratelimit,
    /// The rate of what peers make the connection manager log ([`Registry::peer_note`]): any
    /// host that reaches a listener can make a line per connection.
    pub(super) peer_limit: Ratelimit,
    /// How long endpoints wait for the peer's MPA frame.
    pub(super) timeouts: Timeouts,
}

impl Cm {
    /// A connection manager with its ordered work queue, whose endpoints wait `timeouts`.
    pub(crate) fn new(timeouts: Timeouts) -> Result<impl PinInit<Self, Error>> {
        let queue = OwnedQueue::new_ordered(c"erdma_rs_cm")?;
        Ok(try_pin_init!(Self {
            tables <- new_mutex!(Tables {
                next_token: 1,
                endpoints: RBTree::new(),
                listeners: RBTree::new(),
            }),
            queue,
            limit: Ratelimit::new(Ratelimit::DEFAULT_INTERVAL, Ratelimit::DEFAULT_BURST),
            peer_limit: Ratelimit::new(PEER_NOTE_INTERVAL, Ratelimit::DEFAULT_BURST),
            timeouts,
        }? Error))
    }

    /// Enters `ep` (from `listener`, if passive) into the table; returns its token. `ENOENT` if
    /// the listener is gone.
    pub(super) fn insert(&self, ep: &Arc<Endpoint>, listener: Option<usize>) -> Result<usize> {
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
                evicted: false,
            },
        ));
        Ok(token)
    }

    /// Enters listener `l` under a fresh token, which it is told.
    pub(super) fn insert_listener(
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
    pub(super) fn remove_listener(
        &self,
        token: usize,
    ) -> Option<(Arc<Listener>, KVec<Arc<Endpoint>>)> {
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
    pub(super) fn endpoint(&self, token: usize) -> Option<Arc<Endpoint>> {
        self.tables
            .lock()
            .endpoints
            .get(&token)
            .map(|e| e.ep.clone())
    }
}

impl Registry for Cm {
    fn queue(&self) -> &OwnedQueue {
        &self.queue
    }

    fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// Reports, rate-limited, `what` the state machine found in `state` that it never leads
    /// to (the endpoint then ends): a bug, never ignored in silence.
    fn unexpected(&self, hw: &dyn CmHw, state: &str, what: &str) {
        if let Some(missed) = self.limit.check() {
            if missed > 0 {
                dev_warn!(hw.dev(), "iWARP CM: {missed} reports suppressed\n");
            }
            dev_warn!(
                hw.dev(),
                "iWARP CM: unexpected {what} in endpoint state {state}; the endpoint ends\n"
            );
        }
    }
    /// Logs `what` a peer made happen, rate-limited.
    fn peer_note(&self, hw: &dyn CmHw, what: fmt::Arguments<'_>) {
        if let Some(missed) = self.peer_limit.check() {
            if missed > 0 {
                dev_info!(
                    hw.dev(),
                    "iWARP CM: {missed} lines about peers suppressed\n"
                );
            }
            dev_info!(hw.dev(), "iWARP CM: {what}");
        }
    }
    /// The oldest endpoint of listener `token` that has not sent its request and is not being
    /// evicted already, now marked evicted.
    fn evict(&self, token: usize) -> Option<Arc<Endpoint>> {
        let mut t = self.tables.lock();
        let t = &mut *t;
        let children = &t.listeners.get(&token)?.children;
        // Tokens grow: the first in order is the oldest.
        let oldest = children.keys().copied().find(|c| {
            t.endpoints
                .get(c)
                .is_some_and(|e| !e.reported && !e.evicted)
        })?;
        let e = t.endpoints.get_mut(&oldest)?;
        e.evicted = true;
        Some(e.ep.clone())
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

    fn adopt(
        &self,
        dev: Arc<dyn CmDevice>,
        listener: usize,
        requests: Arc<dyn Requests>,
        mut sock: TcpSocket,
    ) -> Result {
        let ep = Endpoint::new(dev)?;
        let token = self.insert(&ep, Some(listener))?;
        if let Err(e) = sock.watch(ep.clone()) {
            self.remove(token);
            return Err(e);
        }
        let addrs = (
            sock.local_addr().unwrap_or_default(),
            sock.peer_addr().unwrap_or_default(),
        );
        let state = State::AwaitRequest {
            sock,
            listener: requests,
            rx: Rx::new(),
            addrs,
        };
        ep.begin(token, state, self.timeouts.request());
        Ok(())
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
