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
//!
//! The module's parts: [`mpa`] (the frames, as pure functions), [`qp`] (a queue pair's side of
//! its connection), [`endpoint`] (one side of one connection and its state machine),
//! [`listener`] (passive TCP listeners) and [`tables`] (the connection manager of a device:
//! its work queue and its tables by token). The iw_cm operations are below.

use kernel::{
    device,
    net::tcp::{
        SocketAddrV4,
        TcpSocket, //
    },
    new_mutex,
    new_work,
    prelude::*,
    rdma::iwcm::{
        CmEvent,
        CmEventKind,
        CmId,
        ConnParam, //
    },
    sync::Arc,
    time::Delta, //
};

use crate::{
    commands::{
        ModifyQpIwarp,
        Reflush, //
    },
    consts::MAX_RD_ATOM,
    formats::MPA_KEY_REP, //
};

mod endpoint;
mod listener;
mod mpa;
mod qp;
mod tables;

// The parts see each other's items through these (and `use super::*`).
use endpoint::*;
use listener::*;
use mpa::*;
use qp::*;

pub(crate) use qp::{
    IwQp,
    IwStateSink, //
};
pub(crate) use tables::Cm;

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
        // The reply goes out through the socket after the adapter took the connection over:
        // the adapter starts after it (erdma_rs_hw 7.1, 10.14).
        // CAST: at most 28 + 255 bytes.
        let link = Link::new(
            (inner.local, inner.remote),
            peer_cookie,
            (hw.cc(), peer_cc),
            sock.seq(),
            frame.len() as u32,
        );
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
