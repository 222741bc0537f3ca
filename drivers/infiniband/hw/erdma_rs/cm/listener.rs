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
    endpoint::{
        Endpoint,
        EpState, //
        EV_SOCKET,
    },
    CmDevice,
    CmHw, //
    MIN_BACKLOG,
    REQUEST_TIMEOUT,
};

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
            let _ = hw.cm().queue.enqueue(l.clone());
        });
    }
}

impl Listener {
    /// Reports a connection request to the listener's identifier.
    pub(super) fn report(&self, ev: &CmEvent<'_>) -> Result {
        self.id.report(ev)
    }

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

    pub(super) fn adopt(self: &Arc<Self>, hw: &dyn CmHw, mut child: TcpSocket) -> Result {
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
    pub(super) fn stop(&self) {
        drop(self.sock.lock().take());
    }
}
