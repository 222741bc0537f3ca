// SPDX-License-Identifier: GPL-2.0

//! Network devices.
//!
//! C header: [`include/linux/netdevice.h`](srctree/include/linux/netdevice.h)
//!
//! # Examples
//!
//! ```
//! use kernel::{
//!     net::device::NetDevice,
//!     prelude::*, //
//! };
//!
//! // Finds the network device with the adapter's MAC address and checks that its link is up.
//! fn link_is_up(mac: &[u8; 6]) -> Result<bool> {
//!     let ndev = NetDevice::find_by_perm_addr(mac).ok_or(ENODEV)?;
//!     Ok(ndev.is_running() && ndev.carrier_ok())
//! }
//! ```

use crate::{
    bindings,
    error::to_result,
    prelude::*,
    sync::aref::{
        ARef,
        AlwaysRefCounted, //
    },
    types::Opaque,
};
use core::{
    marker::PhantomPinned,
    ptr::NonNull, //
};

/// A network device (`struct net_device`).
///
/// # Examples
///
/// ```
/// use kernel::{
///     net::device::NetDevice,
///     prelude::*, //
/// };
///
/// fn log_netdev(mac: &[u8; 6]) -> Result {
///     let ndev = NetDevice::find_by_perm_addr(mac).ok_or(ENODEV)?;
///     let mut name = [0u8; 16];
///     let len = ndev.name(&mut name);
///     pr_info!(
///         "{}: index {}, MTU {}, address {:02x?}\n",
///         core::str::from_utf8(&name[..len])?,
///         ndev.ifindex(),
///         ndev.mtu(),
///         ndev.perm_addr()
///     );
///     Ok(())
/// }
/// ```
///
/// # Invariants
///
/// A `&NetDevice` is only created for a `net_device` whose refcount the holder of the reference
/// keeps above zero (directly, or through a lock that keeps the device registered).
#[repr(transparent)]
pub struct NetDevice(Opaque<bindings::net_device>);

// SAFETY: `dev_hold` and `dev_put` keep the device alive; they may be called from any context.
unsafe impl AlwaysRefCounted for NetDevice {
    #[inline]
    fn inc_ref(&self) {
        // SAFETY: The type invariant guarantees the refcount is not zero.
        unsafe { bindings::dev_hold(self.as_raw()) };
    }

    #[inline]
    unsafe fn dec_ref(obj: NonNull<Self>) {
        // SAFETY: The caller owns a reference.
        unsafe { bindings::dev_put(obj.cast().as_ptr()) };
    }
}

// SAFETY: A `net_device` may be referenced and released from any thread.
unsafe impl Send for NetDevice {}

// SAFETY: The accessors below only read fields that the networking core updates under its own
// synchronisation (read with `READ_ONCE` semantics where they may change).
unsafe impl Sync for NetDevice {}

impl NetDevice {
    /// Borrows a network device from a raw pointer.
    ///
    /// # Safety
    ///
    /// `ptr` must point to a `net_device` that stays alive (referenced, or registered under a
    /// lock the caller holds) for `'a`.
    #[inline]
    pub unsafe fn from_raw<'a>(ptr: *mut bindings::net_device) -> &'a Self {
        // SAFETY: `NetDevice` is a transparent wrapper of `net_device`; validity is guaranteed
        // by the caller.
        unsafe { &*ptr.cast() }
    }

    /// Returns the raw `net_device` pointer.
    #[inline]
    pub fn as_raw(&self) -> *mut bindings::net_device {
        self.0.get()
    }

    /// Returns the MTU in bytes.
    pub fn mtu(&self) -> u32 {
        // SAFETY: The device is valid; the MTU changes under RTNL and is read like `READ_ONCE`.
        unsafe { core::ptr::read_volatile(&raw const (*self.as_raw()).mtu) }
    }

    /// Returns the permanent (burnt-in) hardware address, `addr_len` bytes long.
    pub fn perm_addr(&self) -> &[u8] {
        // SAFETY: `perm_addr` and `addr_len` are set before registration and not changed.
        let (addr, len) = unsafe {
            let dev = self.as_raw();
            (&(*dev).perm_addr, usize::from((*dev).addr_len))
        };
        &addr[..len.min(addr.len())]
    }

    /// Returns the interface's index (`ifindex`).
    pub fn ifindex(&self) -> i32 {
        // SAFETY: The device is valid; the index is set at registration and not changed.
        unsafe { (*self.as_raw()).ifindex }
    }

    /// Copies the interface's name (`eth0`, at most 15 bytes) into `buf`; returns its length.
    /// The name may change under RTNL: the copy is of one moment.
    pub fn name(&self, buf: &mut [u8; 16]) -> usize {
        // SAFETY: The device is valid; the name is a NUL-terminated array of 16 bytes.
        let name = unsafe { &(*self.as_raw()).name };
        let mut n = 0;
        for (d, s) in buf.iter_mut().zip(name.iter()).take(15) {
            // SAFETY: `s` points into the array above; read like `READ_ONCE`.
            let c = unsafe { core::ptr::read_volatile(s) };
            if c == 0 {
                break;
            }
            // CAST: a byte of a name.
            *d = c as u8;
            n += 1;
        }
        n
    }

    /// Returns whether the interface is administratively up.
    pub fn is_running(&self) -> bool {
        // SAFETY: The device is valid.
        unsafe { bindings::netif_running(self.as_raw()) }
    }

    /// Returns whether the interface has carrier.
    pub fn carrier_ok(&self) -> bool {
        // SAFETY: The device is valid.
        unsafe { bindings::netif_carrier_ok(self.as_raw()) }
    }

    /// Finds the network device of the initial network namespace whose permanent hardware
    /// address is `addr`, and returns a reference to it.
    pub fn find_by_perm_addr(addr: &[u8]) -> Option<ARef<NetDevice>> {
        let _rtnl = Rtnl::lock();
        // SAFETY: `init_net` is a static that lives forever; under RTNL the device list is
        // stable and each listed device is registered.
        let mut cur = unsafe { bindings::first_net_device(&raw mut bindings::init_net) };
        while !cur.is_null() {
            // SAFETY: `cur` is a registered device and RTNL is held.
            let dev = unsafe { NetDevice::from_raw(cur) };
            if dev.perm_addr() == addr {
                return Some(dev.into());
            }
            // SAFETY: As above.
            cur = unsafe { bindings::next_net_device(cur) };
        }
        None
    }
}

impl PartialEq for NetDevice {
    fn eq(&self, other: &Self) -> bool {
        core::ptr::eq(self.as_raw(), other.as_raw())
    }
}

impl Eq for NetDevice {}

/// The RTNL lock, held until dropped.
struct Rtnl(());

impl Rtnl {
    fn lock() -> Self {
        // SAFETY: Process context; released by `Drop`.
        unsafe { bindings::rtnl_lock() };
        Rtnl(())
    }
}

impl Drop for Rtnl {
    fn drop(&mut self) {
        // SAFETY: Taken by `lock`.
        unsafe { bindings::rtnl_unlock() };
    }
}

/// A network-device event, as seen by a [`Notifier`].
///
/// # Examples
///
/// ```
/// use kernel::net::device::Event;
///
/// // Whether the link of a port may have come up or gone down.
/// fn link_may_have_changed(event: Event) -> bool {
///     matches!(event, Event::Up | Event::Down | Event::Change)
/// }
///
/// assert!(link_may_have_changed(Event::Change));
/// assert!(!link_may_have_changed(Event::ChangeMtu));
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The interface was brought up.
    Up,
    /// The interface was brought down.
    Down,
    /// The interface's state changed (carrier, operational state).
    Change,
    /// The MTU changed.
    ChangeMtu,
    /// The interface was registered.
    Register,
    /// The interface is being unregistered.
    Unregister,
}

impl Event {
    fn from_raw(event: crate::ffi::c_ulong) -> Option<Self> {
        // CAST: `netdev_cmd` values are small.
        let event = event as u32;
        Some(match event {
            bindings::netdev_cmd_NETDEV_UP => Self::Up,
            bindings::netdev_cmd_NETDEV_DOWN => Self::Down,
            bindings::netdev_cmd_NETDEV_CHANGE => Self::Change,
            bindings::netdev_cmd_NETDEV_CHANGEMTU => Self::ChangeMtu,
            bindings::netdev_cmd_NETDEV_REGISTER => Self::Register,
            bindings::netdev_cmd_NETDEV_UNREGISTER => Self::Unregister,
            _ => return None,
        })
    }
}

/// Receives network-device events.
///
/// # Examples
///
/// ```
/// use core::sync::atomic::{
///     AtomicU32,
///     Ordering, //
/// };
/// use kernel::net::device::{
///     Event,
///     EventHandler,
///     NetDevice, //
/// };
///
/// // Follows the MTU of the network device with index `ifindex`.
/// struct MtuWatch {
///     ifindex: i32,
///     mtu: AtomicU32,
/// }
///
/// impl EventHandler for MtuWatch {
///     fn event(&self, event: Event, dev: &NetDevice) {
///         let mtu_event = matches!(event, Event::Register | Event::ChangeMtu);
///         if mtu_event && dev.ifindex() == self.ifindex {
///             self.mtu.store(dev.mtu(), Ordering::Relaxed);
///         }
///     }
/// }
/// ```
pub trait EventHandler: Send + Sync {
    /// Called, with RTNL held and in process context, for each [`Event`] of any network device.
    fn event(&self, event: Event, dev: &NetDevice);
}

/// A registered network-device notifier; dropping it unregisters it.
///
/// Registration replays [`Event::Register`] for every device and [`Event::Up`] for the devices
/// that are up; unregistration replays [`Event::Down`] and [`Event::Unregister`].
///
/// # Examples
///
/// ```
/// use kernel::{
///     net::device::{
///         Event,
///         EventHandler,
///         NetDevice,
///         Notifier, //
///     },
///     prelude::*, //
/// };
///
/// struct LogUp;
///
/// impl EventHandler for LogUp {
///     fn event(&self, event: Event, dev: &NetDevice) {
///         if event == Event::Up {
///             pr_info!("network device {} is up\n", dev.ifindex());
///         }
///     }
/// }
///
/// // Logs every network device that comes up until the returned notifier is dropped.
/// fn log_up() -> Result<Pin<KBox<Notifier<LogUp>>>> {
///     KBox::pin_init(Notifier::new(LogUp), GFP_KERNEL)
/// }
/// ```
#[pin_data(PinnedDrop)]
pub struct Notifier<H: EventHandler + 'static> {
    #[pin]
    nb: Opaque<bindings::notifier_block>,
    handler: H,
    #[pin]
    _pin: PhantomPinned,
}

impl<H: EventHandler + 'static> Notifier<H> {
    /// Registers `handler` for the events of every network device.
    pub fn new(handler: H) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            handler,
            _pin: PhantomPinned,
            // `nb` comes last: once registered, events may arrive and read `handler`.
            nb <- Opaque::try_ffi_init(|nb: *mut bindings::notifier_block| {
                // SAFETY: `nb` is valid for writes and pinned; the callback stays valid until
                // `PinnedDrop` unregisters it.
                unsafe {
                    nb.write(pin_init::zeroed());
                    (*nb).notifier_call = Some(Self::notifier_call);
                    to_result(bindings::register_netdevice_notifier(nb))
                }
            }),
        })
    }

    /// The handler.
    pub fn handler(&self) -> &H {
        &self.handler
    }

    /// # Safety
    ///
    /// Called by the notifier chain with `nb` embedded in a registered `Notifier<H>` and `ptr` a
    /// `netdev_notifier_info`.
    unsafe extern "C" fn notifier_call(
        nb: *mut bindings::notifier_block,
        event: crate::ffi::c_ulong,
        ptr: *mut crate::ffi::c_void,
    ) -> crate::ffi::c_int {
        let Some(event) = Event::from_raw(event) else {
            return bindings::NOTIFY_DONE as crate::ffi::c_int;
        };
        // SAFETY: `nb` is the `nb` field of a live `Notifier<H>` (it is unregistered before it
        // is dropped).
        let this = unsafe { &*crate::container_of!(Opaque::cast_from(nb), Self, nb) };
        // SAFETY: Network-device notifiers receive a `netdev_notifier_info`.
        let dev = unsafe { bindings::netdev_notifier_info_to_dev(ptr.cast()) };
        if !dev.is_null() {
            // SAFETY: The device is valid for the duration of the notification.
            this.handler
                .event(event, unsafe { NetDevice::from_raw(dev) });
        }
        bindings::NOTIFY_DONE as crate::ffi::c_int
    }
}

#[pinned_drop]
impl<H: EventHandler + 'static> PinnedDrop for Notifier<H> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: `nb` was registered in `new`; unregistration waits for running callbacks.
        unsafe { bindings::unregister_netdevice_notifier(self.nb.get()) };
    }
}
