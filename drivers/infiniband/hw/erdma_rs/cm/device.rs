// SPDX-License-Identifier: GPL-2.0

//! The device and the connection manager's tables, as endpoints, listeners and queue pairs
//! reach them: traits, which the driver's device module and [`super::Cm`] implement.

use kernel::{
    device,
    fmt,
    net::tcp::TcpSocket,
    prelude::*,
    rdma::iwcm::CmEvent,
    sync::Arc,
    workqueue::OwnedQueue, //
};

use crate::commands::{
    ModifyQpIwarp,
    Reflush, //
};

use super::{
    endpoint::Endpoint,
    machine::Timeouts, //
};

/// The device, as the connection manager's work reaches it.
pub(crate) trait CmDevice: Send + Sync {
    /// Runs `f` on the device if it is still registered, holding off its unregistration;
    /// returns whether it ran.
    fn with(&self, f: &mut dyn FnMut(&dyn CmHw)) -> bool;
}

/// What the connection manager needs of the device.
pub(crate) trait CmHw {
    /// The device's connection manager.
    fn cm(&self) -> &dyn Registry;
    /// The device, for messages.
    fn dev(&self) -> &device::Device;
    /// Sends an iWARP MODIFY_QP.
    fn modify_qp(&self, cmd: &ModifyQpIwarp) -> Result;
    /// Sends a REFLUSH (failures are the device's to report).
    fn reflush(&self, cmd: &Reflush);
    /// The adapter's congestion-control algorithm.
    fn cc(&self) -> u8;
}

/// What endpoints and listeners ask of the connection manager: its work queue, and its tables
/// by token.
pub(crate) trait Registry {
    /// The ordered work queue endpoints and listeners run on.
    fn queue(&self) -> &OwnedQueue;
    /// How long endpoints wait for the peer's MPA frame.
    fn timeouts(&self) -> Timeouts;
    /// Endpoint `token` ended: it leaves the tables.
    fn remove(&self, token: usize);
    /// Endpoint `token`'s request was reported to iw_cm: it no longer counts against its
    /// listener's backlog.
    fn reported(&self, token: usize);
    /// Endpoint `token` was accepted: it outlives its listener.
    fn accepted(&self, token: usize);
    /// How many endpoints of listener `token` have not had their request reported yet.
    fn pending_of(&self, listener: usize) -> usize;
    /// Makes the connection `sock`, accepted by listener `listener`, an endpoint awaiting its
    /// request, which `requests` hears of.
    fn adopt(
        &self,
        dev: Arc<dyn CmDevice>,
        listener: usize,
        requests: Arc<dyn Requests>,
        sock: TcpSocket,
    ) -> Result;
    /// Reports, rate-limited, `what` the state machine found in `state`, where no path leads
    /// to it (the endpoint then ends): a bug, never ignored in silence.
    fn unexpected(&self, hw: &dyn CmHw, state: &str, what: &str);
    /// Logs `what` a peer made happen (a bad frame, a silent connection, a full backlog),
    /// rate-limited: every host that reaches a listener can make one per connection.
    fn peer_note(&self, hw: &dyn CmHw, what: fmt::Arguments<'_>);
    /// Chooses the oldest connection of listener `listener` that has not sent its request
    /// and is not chosen already, to make room in its full backlog; `None` if there is none.
    fn evict(&self, listener: usize) -> Option<Arc<Endpoint>>;
}

/// Who hears a listener's connection requests (its iw_cm identifier).
pub(crate) trait Requests: Send + Sync {
    /// Reports the connection request `ev`.
    fn report(&self, ev: &CmEvent<'_>) -> Result;
}
