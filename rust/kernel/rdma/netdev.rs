// SPDX-License-Identifier: GPL-2.0

//! Network-device events for the driver of a registered device.
//!
//! The RDMA core follows the carrier and addresses of the network devices associated with a
//! device's ports itself; a driver also needs to see other events (a network device that
//! unregisters must be let go, a new MTU programmed, a device with the adapter's address
//! attached when it appears). [`NetdevEvents`] forwards every event of every network device to
//! [`Driver::netdev_event`], with the port the network device is associated with, if any.

use super::{
    device::Device,
    driver::Driver, //
};
use crate::{
    net::device::{
        self as netdev,
        NetDevice, //
    },
    prelude::*,
    sync::aref::ARef,
};
use core::sync::atomic::{
    AtomicBool,
    Ordering, //
};

/// The notifier's handler: the device whose driver gets the events.
struct Forward<T: Driver> {
    dev: ARef<Device<T>>,
    /// Set before the notifier goes, so that the events its unregistration replays are not
    /// taken for real ones.
    closing: AtomicBool,
}

impl<T: Driver> netdev::EventHandler for Forward<T> {
    fn event(&self, event: netdev::Event, ndev: &NetDevice) {
        if self.closing.load(Ordering::Relaxed) {
            return;
        }
        let dev = &*self.dev;
        let port =
            (1..=dev.phys_port_cnt()).find(|&port| dev.netdev(port).is_some_and(|n| *n == *ndev));
        dev.with_data(|dev, data| T::netdev_event(dev, data, port, event, ndev));
    }
}

/// Forwards network-device events to the driver of a device while it lives; dropping it stops
/// the forwarding (and waits for an event being forwarded).
///
/// It holds a reference to the device, and forwards only while the device has registration
/// data; the [`Registration`](super::Registration) of a device of a driver that implements
/// [`Driver::netdev_event`] keeps one and drops it before unregistering.
pub(crate) struct NetdevEvents<T: Driver> {
    notifier: Pin<KBox<netdev::Notifier<Forward<T>>>>,
}

impl<T: Driver> NetdevEvents<T> {
    /// Starts forwarding the events to the driver of `dev`.
    pub(crate) fn new(dev: &Device<T>) -> Result<Self> {
        let forward = Forward {
            dev: dev.into(),
            closing: AtomicBool::new(false),
        };
        Ok(Self {
            notifier: KBox::pin_init(netdev::Notifier::new(forward), GFP_KERNEL)?,
        })
    }
}

impl<T: Driver> Drop for NetdevEvents<T> {
    fn drop(&mut self) {
        self.notifier
            .handler()
            .closing
            .store(true, Ordering::Relaxed);
        // The notifier itself goes after this, under RTNL: no event runs once it is gone.
    }
}
