// SPDX-License-Identifier: GPL-2.0

//! Listeners: a passive side's TCP listener, whose accepted connections become endpoints.

use kernel::{
    impl_has_work,
    net::tcp::{
        SocketEvent,
        SocketEvents,
        TcpSocket, //
    },
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
    endpoint::EV_TIMEOUT,
};

/// Connections a listener's peers may have open before sending their requests, at least.
pub(super) const MIN_BACKLOG: i32 = 16;

/// A listening socket of an iw_cm identifier.
#[pin_data]
pub(crate) struct Listener {
    pub(super) dev: Arc<dyn CmDevice>,
    pub(super) id: CmIdRef,
    pub(super) token: usize,
    pub(super) backlog: i32,
    #[pin]
    pub(super) work: Work<Listener>,
    #[pin]
    pub(super) sock: Mutex<Option<TcpSocket>>,
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
            let _ = hw.cm().queue().enqueue(l.clone());
        });
    }
}

impl Requests for Listener {
    fn report(&self, ev: &CmEvent<'_>) -> Result {
        self.id.report(ev)
    }
}

impl Listener {
    /// Accepts the TCP connections waiting; each becomes an endpoint awaiting its request.
    pub(super) fn accept_all(self: &Arc<Self>, hw: &dyn CmHw) {
        let sock = self.sock.lock();
        let Some(sock) = sock.as_ref() else {
            return;
        };
        loop {
            let child = match sock.accept() {
                Ok(Some(child)) => child,
                Ok(None) => return,
                Err(e) => {
                    let e = e.to_errno();
                    hw.cm().peer_note(hw, fmt!("accept failed ({e})\n"));
                    return;
                }
            };
            if hw.cm().pending_of(self.token) >= self.backlog.max(MIN_BACKLOG) as usize {
                // Room is made by the oldest connection that has not sent its request: its
                // time for it is cut short (it ends as if it ran out). A client sends its
                // request at once, so connections that stay silent cannot keep a listener
                // from its users; the evicted ones still count until they end, so the backlog
                // holds at most twice its size.
                match hw.cm().evict(self.token) {
                    Some(old) => old.kick(EV_TIMEOUT),
                    None => {
                        hw.cm()
                            .peer_note(hw, fmt!("listener backlog full, connection dropped\n"));
                        continue;
                    }
                }
            }
            let requests: Arc<dyn Requests> = self.clone();
            if let Err(e) = hw.cm().adopt(self.dev.clone(), self.token, requests, child) {
                let e = e.to_errno();
                hw.cm()
                    .peer_note(hw, fmt!("no endpoint for a new connection ({e})\n"));
            }
        }
    }

    /// Stops listening.
    pub(super) fn stop(&self) {
        drop(self.sock.lock().take());
    }
}
