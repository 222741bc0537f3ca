// SPDX-License-Identifier: GPL-2.0

//! RDMA devices (`struct ib_device`): [`UnregisteredDevice`] while the driver describes one,
//! [`Device`] as its callbacks see it.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h).
//!
//! # Examples
//!
//! ```
//! use kernel::rdma;
//!
//! // Logs the link of the network device of each port of `dev`.
//! fn log_ports<T: rdma::Driver>(dev: &rdma::Device<T>) {
//!     for port in 1..=dev.phys_port_cnt() {
//!         if let Some(ndev) = dev.netdev(port) {
//!             pr_info!(
//!                 "{}: port {port}: MTU {}, carrier {}\n",
//!                 dev.name(),
//!                 ndev.mtu(),
//!                 ndev.carrier_ok()
//!             );
//!         }
//!     }
//! }
//! ```

use super::{
    adapter::{
        Adapter,
        OpsAdapter, //
    },
    driver::{
        DeviceOps,
        Driver, //
    },
    Guid,
    NodeType, //
};
use crate::{
    bindings, device,
    error::to_result,
    net::device::NetDevice,
    prelude::*,
    sync::aref::{
        ARef,
        AlwaysRefCounted, //
    },
    types::Opaque,
};
use core::{
    cell::UnsafeCell,
    ptr::NonNull, //
};

/// An RDMA device (`struct ib_device`) of a driver `T`.
///
/// The callbacks of `T` receive it; a driver that needs it beyond a callback keeps an
/// [`ARef`] to it, which keeps the allocation, not the registration, alive.
///
/// # Examples
///
/// Work a driver runs outside the core's callbacks reaches the device's data only while the
/// device is registered:
///
/// ```
/// use kernel::rdma;
///
/// fn still_registered<T: rdma::Driver>(dev: &rdma::Device<T>) -> bool {
///     dev.with_registered(|_dev, _data| ()).is_some()
/// }
/// ```
///
/// # Invariants
///
/// - `ib` is at offset 0 of an allocation made by `_ib_alloc_device` with the size of this type
///   and `T`'s operations.
/// - `data` is `None` or points to the data of the live [`Registration`] of this device, and
///   is written only while no callback can run (before registration, after unregistration).
///
/// [`Registration`]: super::Registration
#[repr(C)]
pub struct Device<T: Driver> {
    ib: Opaque<bindings::ib_device>,
    data: UnsafeCell<Option<NonNull<T::Data<'static>>>>,
}

// SAFETY: The core synchronises its own state; `data` is written only while no callback can run
// (type invariant).
unsafe impl<T: Driver> Send for Device<T> {}

// SAFETY: As above.
unsafe impl<T: Driver> Sync for Device<T> {}

// SAFETY: `get_device`/`put_device` on the embedded `struct device` keep the allocation alive;
// the core frees it (`ib_device_release`) when the last reference goes.
unsafe impl<T: Driver> AlwaysRefCounted for Device<T> {
    fn inc_ref(&self) {
        // SAFETY: The device is valid, so its embedded `struct device` is.
        unsafe { bindings::get_device(&raw mut (*self.as_raw()).__bindgen_anon_1.dev) };
    }

    unsafe fn dec_ref(obj: NonNull<Self>) {
        // SAFETY: The caller owns a reference.
        unsafe { put_ib_device(obj.as_ptr().cast()) };
    }
}

/// Drops a reference on `ib` taken with [`AlwaysRefCounted::inc_ref`], for owners that do not
/// know the driver type (a [`super::Umem`]).
///
/// # Safety
///
/// The caller owns a reference on `ib`, which it does not use afterwards.
pub(crate) unsafe fn put_ib_device(ib: *mut bindings::ib_device) {
    // SAFETY: The caller owns a reference, so the device is valid.
    unsafe { bindings::put_device(&raw mut (*ib).__bindgen_anon_1.dev) };
}

impl<T: Driver> Device<T> {
    /// Returns the raw `ib_device` pointer.
    #[inline]
    pub(crate) fn as_raw(&self) -> *mut bindings::ib_device {
        self.ib.get()
    }

    /// Borrows the device of a raw pointer the core passed to a callback.
    ///
    /// # Safety
    ///
    /// `ptr` must point to the `ib_device` of a live `Device<T>`, valid for `'a`.
    #[inline]
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::ib_device) -> &'a Self {
        // SAFETY: By the type invariant `ib` is at offset 0; validity is up to the caller.
        unsafe { &*ptr.cast() }
    }

    /// Sets the registration data pointer.
    ///
    /// # Safety
    ///
    /// No callback may run (the device is not registered), and `data` must be `None` or point
    /// to data that stays valid until the pointer is cleared.
    pub(crate) unsafe fn set_data(&self, data: Option<NonNull<T::Data<'static>>>) {
        // INVARIANT: Guaranteed by the caller.
        // SAFETY: No callback reads `data` concurrently (guaranteed by the caller).
        unsafe { *self.data.get() = data };
    }

    /// Runs `f` on the registration's data; `None` outside registration.
    ///
    /// The higher-ranked closure keeps the erased lifetime from escaping.
    pub(crate) fn with_data<R>(
        &self,
        f: impl for<'a> FnOnce(&Self, &'a T::Data<'a>) -> R,
    ) -> Option<R> {
        // SAFETY: `data` is only written while no callback runs (type invariant).
        let data = unsafe { *self.data.get() }?;
        // SAFETY: The pointer targets the registration's pinned data, which outlives every
        // callback; lifetimes do not change layout.
        let data = unsafe { data.cast::<T::Data<'_>>().as_ref() };
        Some(f(self, data))
    }

    /// Runs `f` on the registration's data if the device is registered, holding off its
    /// unregistration until `f` returns (`ib_device_try_get`); `None` otherwise. For work a
    /// driver does outside the core's callbacks: `f` must not wait for the device to
    /// unregister.
    pub fn with_registered<R>(
        &self,
        f: impl for<'a> FnOnce(&Self, &'a T::Data<'a>) -> R,
    ) -> Option<R> {
        // SAFETY: The device is valid.
        if !unsafe { bindings::ib_device_try_get(self.as_raw()) } {
            return None;
        }
        // Registered and held so: the data pointer is set and stays valid until the put below.
        let ret = self.with_data(f);
        // SAFETY: The reference `ib_device_try_get` took.
        unsafe { bindings::ib_device_put(self.as_raw()) };
        ret
    }

    /// Returns the number of ports.
    pub fn phys_port_cnt(&self) -> u32 {
        // SAFETY: The device is valid; the count is fixed before registration.
        unsafe { (*self.as_raw()).phys_port_cnt }
    }

    /// Returns the device's name (`erdma_0`, ...).
    pub fn name(&self) -> &CStr {
        let dev: &device::Device = self.as_ref();
        dev.name()
    }

    /// Returns the network device associated with `port`.
    pub fn netdev(&self, port: u32) -> Option<ARef<NetDevice>> {
        // SAFETY: The device is valid; the result carries a reference, which the `ARef` owns.
        let ndev = unsafe { bindings::ib_device_get_netdev(self.as_raw(), port) };
        // SAFETY: `ndev` is `NULL` or a referenced device whose reference we take over.
        NonNull::new(ndev).map(|ndev| unsafe { ARef::from_raw(ndev.cast()) })
    }

    /// Tells every consumer that the device failed (`IB_EVENT_DEVICE_FATAL`): the kernel's
    /// clients through their event handlers, and each user context through its asynchronous
    /// event file. What it had posted will not complete by the device; a driver that can
    /// complete it (as flushed) should, and then unregister or recover. Any context.
    pub fn report_fatal(&self) {
        let ev = bindings::ib_event {
            device: self.as_raw(),
            element: bindings::ib_event__bindgen_ty_1 { port_num: 1 },
            event: bindings::ib_event_type_IB_EVENT_DEVICE_FATAL,
        };
        // SAFETY: The device is valid; the core copies the event into work of its own
        // (allocated atomically), so `ev` need not outlive the call.
        unsafe { bindings::ib_dispatch_event(&ev) };
    }

    /// Associates `ndev` with `port`, or detaches the port's network device (`None`). The core
    /// holds a reference to the associated device.
    pub fn set_netdev(&self, port: u32, ndev: Option<&NetDevice>) -> Result {
        let ndev = ndev.map_or(core::ptr::null_mut(), NetDevice::as_raw);
        // SAFETY: The device is valid; `ndev` is `NULL` or a valid network device.
        to_result(unsafe { bindings::ib_device_set_netdev(self.as_raw(), ndev, port) })
    }

    /// Returns the speed (`IB_SPEED_*`) and width (`IB_WIDTH_*`) matching the link speed of the
    /// network device of `port`.
    pub fn eth_speed(&self, port: u32) -> Result<(u16, u8)> {
        let (mut speed, mut width) = (0u16, 0u8);
        // SAFETY: The device is valid and the outputs are writable. May sleep (ethtool).
        to_result(unsafe {
            bindings::ib_get_eth_speed(self.as_raw(), port, &mut speed, &mut width)
        })?;
        Ok((speed, width))
    }
}

impl<T: Driver> AsRef<device::Device> for Device<T> {
    fn as_ref(&self) -> &device::Device {
        // SAFETY: The embedded `struct device` is initialised by `_ib_alloc_device` and lives
        // as long as `self`.
        unsafe { device::Device::from_raw(&raw mut (*self.as_raw()).__bindgen_anon_1.dev) }
    }
}

/// A device of `T` that is allocated but not registered: the driver describes it here, then
/// hands it to [`Registration::new`](super::Registration::new).
///
/// It has the operations of `T` and `T::Ops` from the start, and those of any [`DeviceOps`]
/// added with [`UnregisteredDevice::add_ops`]. Dropping it frees it.
///
/// # Examples
///
/// ```
/// use kernel::{
///     device::{
///         Bound,
///         Device, //
///     },
///     net::device::NetDevice,
///     prelude::*,
///     rdma::{
///         self,
///         Guid,
///         NodeType,
///         UnregisteredDevice, //
///     },
/// };
///
/// fn describe<T: rdma::Driver, P: rdma::DeviceOps<T>>(
///     parent: &Device<Bound>,
///     ndev: &NetDevice,
///     mac: [u8; 6],
/// ) -> Result<UnregisteredDevice<T>> {
///     let mut dev = UnregisteredDevice::<T>::new(parent)?;
///     dev.add_ops::<P>()
///         .set_node_type(NodeType::Rnic)
///         .set_node_guid(Guid::from_mac(mac))
///         .set_node_desc(b"my adapter")
///         .set_netdev(1, ndev)?;
///     Ok(dev)
/// }
/// ```
///
/// # Invariants
///
/// `dev` is a device allocated by `_ib_alloc_device` for `T`, not registered, whose initial
/// reference this owns.
pub struct UnregisteredDevice<T: Driver> {
    dev: NonNull<Device<T>>,
}

impl<T: Driver> UnregisteredDevice<T> {
    /// Allocates a device of `T`, child of `parent`, in the initial network namespace, with one
    /// port and one completion vector.
    pub fn new(parent: &device::Device<device::Bound>) -> Result<Self> {
        const {
            assert!(core::mem::offset_of!(Device<T>, ib) == 0);
            // `_ib_alloc_device` aligns like `kzalloc`: enough for the `ib_device` and pointers.
            assert!(core::mem::align_of::<Device<T>>() <= 8);
        };
        // SAFETY: `init_net` lives forever; the size covers `Device<T>`.
        let ib = unsafe {
            bindings::_ib_alloc_device(size_of::<Device<T>>(), &raw mut bindings::init_net)
        };
        let dev = NonNull::new(ib.cast::<Device<T>>()).ok_or(ENOMEM)?;
        // SAFETY: `ib` is a fresh, zeroed, exclusively owned allocation: writing `data` makes it
        // a `Device<T>` with no registration data.
        unsafe { (&raw mut (*dev.as_ptr()).data).write(UnsafeCell::new(None)) };
        // SAFETY: As above; the core copies the tables.
        unsafe {
            bindings::ib_set_device_ops(ib, &Adapter::<T>::OPS);
            bindings::ib_set_device_ops(ib, &OpsAdapter::<T, T::Ops>::OPS);
        }
        // SAFETY: As above.
        unsafe {
            (*ib).__bindgen_anon_1.dev.parent = parent.as_raw();
            (*ib).phys_port_cnt = 1;
            (*ib).num_comp_vectors = 1;
        }
        // INVARIANT: Allocated for `T` with `T`'s operations, not registered.
        Ok(Self { dev })
    }

    /// The raw device.
    fn raw(&self) -> *mut bindings::ib_device {
        self.dev.as_ptr().cast()
    }

    /// The device as its callbacks will see it.
    pub(crate) fn device(&self) -> &Device<T> {
        // SAFETY: The allocation is a `Device<T>` that `self` keeps alive (type invariant).
        unsafe { self.dev.as_ref() }
    }

    /// Gives up ownership without freeing: the caller takes over the initial reference.
    pub(crate) fn into_raw(self) -> NonNull<Device<T>> {
        let dev = self.dev;
        core::mem::forget(self);
        dev
    }

    /// Adds the operations of `P`: those that `T`, `T::Ops` and earlier additions left out (as
    /// `ib_set_device_ops()`, which never replaces an operation).
    pub fn add_ops<P: DeviceOps<T>>(&mut self) -> &mut Self {
        // SAFETY: The device is exclusively owned and not registered; the core copies the
        // table.
        unsafe { bindings::ib_set_device_ops(self.raw(), &OpsAdapter::<T, P>::OPS) };
        self
    }

    /// Sets the node type.
    pub fn set_node_type(&mut self, node_type: NodeType) -> &mut Self {
        // CAST: node types fit in a byte.
        let node_type = node_type.to_raw() as u8;
        // SAFETY: The device is exclusively owned and not registered.
        unsafe { (*self.raw()).node_type = node_type };
        self
    }

    /// Sets the node GUID.
    pub fn set_node_guid(&mut self, guid: Guid) -> &mut Self {
        // SAFETY: The device is exclusively owned and not registered.
        unsafe { (*self.raw()).node_guid = guid.raw() };
        self
    }

    /// Sets the node description (truncated to the core's 64 bytes).
    pub fn set_node_desc(&mut self, desc: &[u8]) -> &mut Self {
        // SAFETY: The device is exclusively owned and not registered.
        let field = unsafe { &mut (*self.raw()).node_desc };
        let n = desc.len().min(field.len() - 1);
        field.fill(0);
        field[..n].copy_from_slice(&desc[..n]);
        self
    }

    /// Sets the name of the network interface of an iWARP device, which the connection
    /// manager gives the port mapper (truncated to the core's 16 bytes).
    pub fn set_iw_ifname(&mut self, name: &[u8]) -> &mut Self {
        // SAFETY: The device is exclusively owned and not registered.
        let field = unsafe { &mut (*self.raw()).iw_ifname };
        let n = name.len().min(field.len() - 1);
        field.fill(0);
        field[..n].copy_from_slice(&name[..n]);
        self
    }

    /// Sets the number of ports (1 unless changed).
    pub fn set_phys_port_cnt(&mut self, ports: u32) -> &mut Self {
        // SAFETY: The device is exclusively owned and not registered.
        unsafe { (*self.raw()).phys_port_cnt = ports };
        self
    }

    /// Sets the key kernel users put in work requests to address bus (DMA) addresses directly,
    /// for devices that report the `LOCAL_DMA_LKEY` capability.
    pub fn set_local_dma_lkey(&mut self, lkey: u32) -> &mut Self {
        // SAFETY: The device is exclusively owned and not registered.
        unsafe { (*self.raw()).local_dma_lkey = lkey };
        self
    }

    /// Sets the number of completion vectors (1 unless changed).
    pub fn set_num_comp_vectors(&mut self, vectors: u32) -> &mut Self {
        let vectors = vectors.try_into().unwrap_or(i32::MAX);
        // SAFETY: The device is exclusively owned and not registered.
        unsafe { (*self.raw()).num_comp_vectors = vectors };
        self
    }

    /// Associates `ndev` with `port`. iWARP ports need this before registration; the core
    /// keeps its own reference.
    pub fn set_netdev(&mut self, port: u32, ndev: &NetDevice) -> Result<&mut Self> {
        // SAFETY: Both devices are valid.
        to_result(unsafe { bindings::ib_device_set_netdev(self.raw(), ndev.as_raw(), port) })?;
        Ok(self)
    }
}

impl<T: Driver> Drop for UnregisteredDevice<T> {
    fn drop(&mut self) {
        // SAFETY: The device was allocated by `_ib_alloc_device` and is not registered (type
        // invariant); this drops the allocation's initial reference.
        unsafe { bindings::ib_dealloc_device(self.raw()) };
    }
}
