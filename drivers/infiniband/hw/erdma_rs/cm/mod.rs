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
//! The states carry exactly the data valid in them, and one function of (state, event) moves
//! them ([`machine`]), over a transport: the kernel's in [`endpoint`], a fake in KUnit. A
//! listener's end ends its connections not accepted yet ([`destroy_listen`]). Every failure,
//! and every close, ends the same way: the socket is released, the timer stopped, the queue
//! pair unlinked, the iw_cm identifier's reference dropped, and the endpoint leaves the
//! connection manager's table. What the peer sends is hostile: a wrong key, another
//! revision, markers or CRCs, more private data than allowed or than arrives, silence, or a reset
//! at any step ends the endpoint (with a reject reply where MPA has one) and nothing else.
//!
//! The device is reached through [`CmDevice`] and [`CmHw`], which the driver's device module
//! implements: work runs only while the device is registered, and one that finds it gone only
//! releases what the endpoint holds.
//!
//! The module's parts, each using only those before it: [`mpa`] (the frames, as pure
//! functions), [`machine`] (the endpoint's states and transitions), [`compat`] (compat mode's
//! made-up connection, erdma_rs_hw 7.3, as a pure function), [`device`] (the traits
//! through which the parts reach the device and the tables), [`endpoint`] (one side of one
//! connection: the machine's kernel transport), [`qp`] (a queue pair's side of its
//! connection), [`listener`] (passive TCP listeners) and [`tables`] (the connection manager of
//! a device: its work queue and its tables by token). The iw_cm operations are below.

use kernel::{
    net::tcp::{
        SocketAddrV4,
        TcpSocket, //
    },
    new_mutex,
    new_work,
    prelude::*,
    rdma::iwcm::{
        CmId,
        ConnParam, //
    },
    sync::Arc, //
};

use crate::consts::MAX_RD_ATOM;

mod compat;
mod device;
mod endpoint;
mod listener;
mod machine;
mod mpa;
mod qp;
mod tables;

use endpoint::{
    Endpoint,
    QpSide, //
};
use listener::{
    Listener,
    MIN_BACKLOG, //
};
use machine::{
    Event,
    State,
    MAX_REPORTED_PRIVATE_DATA, //
};

pub(crate) use device::{
    CmDevice,
    CmHw,
    Registry, //
};

pub(crate) use compat::{
    CompatEnd,
    ReservedPorts,
    RESERVED_PORTS, //
};
pub(crate) use machine::Timeouts;
pub(crate) use qp::{
    IwQp,
    IwStateSink, //
};
pub(crate) use tables::Cm;

/// The device as the iw_cm operations use it: [`CmHw`], and the connection manager itself.
pub(crate) trait CmOps: CmHw {
    /// The device's connection manager.
    fn tables(&self) -> &Cm;
}

/// The IPv4 addresses of `id`.
fn addresses(id: &CmId) -> Result<(SocketAddrV4, SocketAddrV4)> {
    Ok((id.local_addr()?, id.remote_addr()?))
}

/// Whether iw_cm's parameters fit the adapter (and an iw_cm event, for the private data).
fn check(param: &ConnParam<'_>) -> Result {
    if param.private_data.len() > MAX_REPORTED_PRIVATE_DATA
        || param.ord > MAX_RD_ATOM
        || param.ird > MAX_RD_ATOM
    {
        return Err(EINVAL);
    }
    Ok(())
}

/// iw_connect: starts the active side of a connection of `qp` to the remote address of `id`.
pub(crate) fn connect(
    hw: &impl CmOps,
    dev: Arc<dyn CmDevice>,
    id: &CmId,
    param: &ConnParam<'_>,
    qp: Arc<IwQp>,
) -> Result {
    let addrs = addresses(id)?;
    check(param)?;
    let ep = Endpoint::new(dev)?;
    let qp: Arc<dyn QpSide> = qp;
    qp.attach(&ep)?;
    let token = match hw.tables().insert(&ep, None) {
        Ok(t) => t,
        Err(e) => {
            qp.detach(&ep);
            return Err(e);
        }
    };
    let started = (|| -> Result<State<endpoint::Kernel>> {
        let mut pd = KVec::new();
        pd.extend_from_slice(param.private_data, GFP_KERNEL)?;
        let mut sock = TcpSocket::new()?;
        sock.set_reuse_addr();
        sock.set_nodelay();
        sock.bind(addrs.0)?;
        sock.watch(ep.clone())?;
        sock.connect(addrs.1)?;
        Ok(State::Connecting {
            sock,
            id: id.get(),
            qp: qp.clone(),
            pd,
            addrs,
        })
    })();
    match started {
        // The connection may be made already (a local peer answers within the call), its
        // state change reported before the socket was the endpoint's: `begin` looks once.
        Ok(state) => ep.begin(token, state, hw.tables().timeouts.reply()),
        Err(e) => {
            // iw_cm hears the error from the return value, not from an event.
            qp.detach(&ep);
            hw.cm().remove(token);
            return Err(e);
        }
    }
    Ok(())
}

/// iw_accept: hands the connection of the request `id` to `qp`, then sends the reply. A request
/// whose connection ended (its peer gone, its listener destroyed) is `ECONNRESET`.
pub(crate) fn accept(hw: &impl CmOps, id: &CmId, param: &ConnParam<'_>, qp: Arc<IwQp>) -> Result {
    let ep = hw.tables().endpoint(id.token()).ok_or(ECONNRESET)?;
    check(param)?;
    let qp: Arc<dyn QpSide> = qp;
    let event = Event::Accept {
        qp,
        id: id.get(),
        pd: param.private_data,
    };
    ep.handle(hw, event)
}

/// iw_reject: answers the request `id` with a reject carrying `pd`, and closes.
pub(crate) fn reject(hw: &impl CmOps, id: &CmId, pd: &[u8]) -> Result {
    let ep = hw.tables().endpoint(id.token()).ok_or(ECONNRESET)?;
    ep.handle(hw, Event::Reject { pd })
}

/// iw_create_listen: listens on the local address of `id` (the wildcard address only on the
/// device's network interface `ifindex`).
pub(crate) fn create_listen(
    hw: &impl CmOps,
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
    let l = hw.tables().insert_listener(|token| {
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
        drop(hw.tables().remove_listener(token));
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
pub(crate) fn destroy_listen(hw: &impl CmOps, id: &CmId) -> Result {
    let (l, children) = hw.tables().remove_listener(id.token()).ok_or(EINVAL)?;
    l.stop();
    // No endpoint joins the listener now: the socket that accepted them is gone.
    for ep in children {
        let _ = ep.handle(hw, Event::ListenerGone);
    }
    Ok(())
}
