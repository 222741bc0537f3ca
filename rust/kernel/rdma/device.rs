// SPDX-License-Identifier: GPL-2.0

//! RDMA devices: allocation, registration and the driver's operations.

use super::{
    attr::{
        DeviceAttr,
        GidAttr,
        PortAttr,
        PortImmutable, //
    },
    cq::{
        Cq,
        CqAttr,
        CqSetup,
        Pd,
        PdSetup, //
    },
    mr::{
        Mr,
        NewMr,
        UserMrReq, //
    },
    qp::{
        self,
        Qp,
        QpAttr,
        QpAttrMask,
        QpAttrOut,
        QpInitAttr,
        QpSetup, //
    },
    stats::{
        self,
        StatDesc, //
    },
    ucontext::{
        self,
        UContext,
        UContextSetup, //
    },
    udata::UData,
    wr::{
        RecvWrs,
        SendWrs,
        Wc, //
    },
    DriverId, Gid, Guid, LinkLayer, NodeType, PortEvent,
};
use crate::{
    bindings, device,
    error::{
        from_result,
        to_result,
        VTABLE_DEFAULT_ERROR, //
    },
    net::device::{
        self as netdev,
        NetDevice, //
    },
    prelude::*,
    sync::aref::{
        ARef,
        AlwaysRefCounted, //
    },
    types::Opaque,
    ThisModule,
};
use core::{
    cell::UnsafeCell,
    marker::PhantomData,
    ptr::NonNull,
    sync::atomic::{
        AtomicBool,
        Ordering, //
    },
};
use pin_init::PinInit;

/// An RDMA driver: the operations of its devices.
///
/// Every callback receives the [`Device`] and the data the driver gave to
/// [`Registration::new`]. Operations left unimplemented are `NULL` in the core's table: the
/// core then reports them as unsupported (or, for the kernel verbs a device needs to serve
/// kernel users, treats the device as serving user space only).
///
/// Calling contexts: every operation here runs in process context and may sleep, except
/// [`Driver::get_link_layer`], which the core calls under its locks.
#[vtable]
pub trait Driver: Sized + Send + Sync + 'static {
    /// The data the callbacks need, owned by the [`Registration`]; `'a` lets it borrow from the
    /// bound parent device (BARs, the parent's bound reference).
    type Data<'a>: Send + Sync + 'a
    where
        Self: 'a;

    /// The driver's part of a user context.
    type UContext: Send + Sync;

    /// The driver's part of a protection domain.
    type Pd: Send + Sync;

    /// The driver's part of a completion queue.
    type Cq: Send + Sync;

    /// The driver's part of a queue pair.
    type Qp: Send + Sync;

    /// The driver's part of a memory region.
    type Mr: Send + Sync;

    /// The identity libibverbs matches the user-space provider by.
    const DRIVER_ID: DriverId;

    /// The version of the driver's user ABI.
    const UVERBS_ABI_VERSION: u32 = 0;

    /// The port counters [`Driver::get_hw_stats`] reports, in order.
    const HW_PORT_STATS: &'static [StatDesc] = &[];

    /// Reports the device's attributes. `udata` carries the extended-query buffers of user
    /// space, if any.
    fn query_device(
        dev: &Device<Self>,
        data: &Self::Data<'_>,
        attr: &mut DeviceAttr,
        udata: &mut UData<'_>,
    ) -> Result;

    /// Reports the attributes of `port` (counted from 1). For iWARP ports the core has filled
    /// in the state and MTU from the network device already.
    fn query_port(
        dev: &Device<Self>,
        data: &Self::Data<'_>,
        port: u32,
        attr: &mut PortAttr,
    ) -> Result;

    /// Reports the attributes of `port` that never change.
    fn get_port_immutable(
        dev: &Device<Self>,
        data: &Self::Data<'_>,
        port: u32,
        immutable: &mut PortImmutable,
    ) -> Result;

    /// Reports the link layer of `port`. Called under the core's locks: must not sleep.
    fn get_link_layer(_dev: &Device<Self>, _data: &Self::Data<'_>, _port: u32) -> LinkLayer {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Returns entry `index` of the GID table of `port` (devices whose GIDs the core does not
    /// manage, such as iWARP).
    fn query_gid(
        _dev: &Device<Self>,
        _data: &Self::Data<'_>,
        _port: u32,
        _index: u32,
    ) -> Result<Gid> {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Returns entry `index` of the partition key table of `port`.
    fn query_pkey(
        _dev: &Device<Self>,
        _data: &Self::Data<'_>,
        _port: u32,
        _index: u16,
    ) -> Result<u16> {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Programs a GID table entry the core added (RoCE).
    fn add_gid(_dev: &Device<Self>, _data: &Self::Data<'_>, _attr: &GidAttr) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Clears a GID table entry the core removed (RoCE).
    fn del_gid(_dev: &Device<Self>, _data: &Self::Data<'_>, _attr: &GidAttr) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Creates the driver's part of a user context. Implementing it gives the device a
    /// user-verbs character device, so that libibverbs sees it.
    fn alloc_ucontext(
        _dev: &Device<Self>,
        _data: &Self::Data<'_>,
        _ctx: &UContextSetup<'_>,
        _udata: &mut UData<'_>,
    ) -> impl PinInit<Self::UContext, Error> {
        build_error!(VTABLE_DEFAULT_ERROR);
        #[allow(unreachable_code)]
        Err::<Self::UContext, _>(EINVAL)
    }

    /// Releases what the user context holds in the device, before its driver part is dropped
    /// (and its memory mappings are removed). Must not fail.
    fn dealloc_ucontext(
        _dev: &Device<Self>,
        _data: &Self::Data<'_>,
        _ctx: Pin<&mut Self::UContext>,
    ) {
    }

    /// Creates the driver's part of a protection domain.
    fn alloc_pd(
        _dev: &Device<Self>,
        _data: &Self::Data<'_>,
        _setup: &PdSetup<'_, Self>,
        _udata: &mut UData<'_>,
    ) -> impl PinInit<Self::Pd, Error> {
        build_error!(VTABLE_DEFAULT_ERROR);
        #[allow(unreachable_code)]
        Err::<Self::Pd, _>(EINVAL)
    }

    /// Releases a protection domain before its driver part is dropped. Must not fail.
    fn dealloc_pd(_dev: &Device<Self>, _data: &Self::Data<'_>, _pd: Pin<&mut Self::Pd>) {}

    /// Creates the driver's part of a completion queue.
    fn create_cq(
        _dev: &Device<Self>,
        _data: &Self::Data<'_>,
        _setup: &CqSetup<'_, Self>,
        _udata: &mut UData<'_>,
    ) -> impl PinInit<Self::Cq, Error> {
        build_error!(VTABLE_DEFAULT_ERROR);
        #[allow(unreachable_code)]
        Err::<Self::Cq, _>(EINVAL)
    }

    /// Destroys a completion queue in the device before its driver part is dropped. Must not
    /// fail; no completion may be written to its memory afterwards.
    fn destroy_cq(_dev: &Device<Self>, _data: &Self::Data<'_>, _cq: Pin<&mut Self::Cq>) {}

    /// Creates the driver's part of a queue pair.
    fn create_qp(
        _dev: &Device<Self>,
        _data: &Self::Data<'_>,
        _setup: &QpSetup<'_, Self>,
        _attr: &QpInitAttr<'_, Self>,
        _udata: &mut UData<'_>,
    ) -> impl PinInit<Self::Qp, Error> {
        build_error!(VTABLE_DEFAULT_ERROR);
        #[allow(unreachable_code)]
        Err::<Self::Qp, _>(EINVAL)
    }

    /// Modifies the attributes of `qp` that `mask` names.
    fn modify_qp(
        _dev: &Device<Self>,
        _data: &Self::Data<'_>,
        _qp: &Qp<Self>,
        _attr: &QpAttr<'_>,
        _mask: QpAttrMask,
        _udata: &mut UData<'_>,
    ) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Reports the attributes of `qp`.
    fn query_qp(
        _dev: &Device<Self>,
        _data: &Self::Data<'_>,
        _qp: &Qp<Self>,
        _out: &mut QpAttrOut<'_>,
    ) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Destroys a queue pair in the device before its driver part is dropped. Must not fail.
    fn destroy_qp(_dev: &Device<Self>, _data: &Self::Data<'_>, _qp: Pin<&mut Self::Qp>) {}

    /// Registers user memory.
    fn reg_user_mr(
        _dev: &Device<Self>,
        _data: &Self::Data<'_>,
        _pd: &Pd<Self>,
        _req: &UserMrReq,
        _udata: &mut UData<'_>,
    ) -> Result<NewMr<Self::Mr>> {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Makes the region kernel users address bus addresses through.
    fn get_dma_mr(
        _dev: &Device<Self>,
        _data: &Self::Data<'_>,
        _pd: &Pd<Self>,
        _access: u32,
    ) -> Result<NewMr<Self::Mr>> {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Allocates a fast-registration region for up to `max_num_sg` pages; its pages come from
    /// [`Driver::mr_map_start`] and [`Driver::mr_set_page`], its use from a fast-registration
    /// work request.
    fn alloc_mr(
        _dev: &Device<Self>,
        _data: &Self::Data<'_>,
        _pd: &Pd<Self>,
        _max_num_sg: u32,
    ) -> Result<NewMr<Self::Mr>> {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// A consumer maps a new page list into a fast-registration region: forget the old one.
    fn mr_map_start(_mr: &Mr<Self>) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Appends the page at bus address `addr` (of the region's page size) to the region's list.
    /// Any context.
    fn mr_set_page(_mr: &Mr<Self>, _addr: u64) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Deregisters a memory region. Must not fail.
    fn dereg_mr(_dev: &Device<Self>, _data: &Self::Data<'_>, _mr: Self::Mr) {}

    /// Posts a chain of send work requests of a kernel consumer. Called in any context (no
    /// sleeping). On failure, returns the error and the index of the first request not posted.
    fn post_send(
        _dev: &Device<Self>,
        _data: &Self::Data<'_>,
        _qp: &Qp<Self>,
        _wrs: SendWrs<'_, Self>,
    ) -> core::result::Result<(), (Error, usize)> {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Posts a chain of receive work requests of a kernel consumer; as [`Driver::post_send`].
    fn post_recv(
        _dev: &Device<Self>,
        _data: &Self::Data<'_>,
        _qp: &Qp<Self>,
        _wrs: RecvWrs<'_>,
    ) -> core::result::Result<(), (Error, usize)> {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Fills in up to `wc.len()` completions of a kernel CQ; returns how many. Any context.
    fn poll_cq(
        _dev: &Device<Self>,
        _data: &Self::Data<'_>,
        _cq: &Cq<Self>,
        _wc: &mut [Wc],
    ) -> usize {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Asks for a completion event (only for solicited completions if `solicited`). With
    /// `report_missed`, returns whether completions may already be waiting. Any context.
    fn req_notify_cq(
        _dev: &Device<Self>,
        _data: &Self::Data<'_>,
        _cq: &Cq<Self>,
        _solicited: bool,
        _report_missed: bool,
    ) -> Result<bool> {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Fills in `values` (one per [`Driver::HW_PORT_STATS`] entry) for `port`; returns how many
    /// it filled.
    fn get_hw_stats(
        _dev: &Device<Self>,
        _data: &Self::Data<'_>,
        _port: u32,
        _values: &mut [u64],
    ) -> Result<usize> {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Called, with RTNL held, for every event of every network device; `port` is the port the
    /// network device is associated with, if any. A driver detaches its port from a network
    /// device that unregisters ([`Device::set_netdev`]), or the network device cannot go.
    fn netdev_event(
        _dev: &Device<Self>,
        _data: &Self::Data<'_>,
        _port: Option<u32>,
        _event: netdev::Event,
        _ndev: &NetDevice,
    ) {
    }
}

/// An RDMA device (`struct ib_device`) of a driver `T`.
///
/// # Invariants
///
/// - `ib` is at offset 0 of an allocation made by `_ib_alloc_device` with `T`'s operations.
/// - `data` is `None` or points to the data of the live [`Registration`] of this device.
#[repr(C)]
pub struct Device<T: Driver> {
    ib: Opaque<bindings::ib_device>,
    data: UnsafeCell<Option<NonNull<T::Data<'static>>>>,
}

// SAFETY: The core synchronises its own state; `data` is written only while no callback can run
// (before registration, after unregistration).
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
        unsafe {
            bindings::put_device(
                &raw mut (*obj.as_ptr().cast::<bindings::ib_device>())
                    .__bindgen_anon_1
                    .dev,
            )
        };
    }
}

impl<T: Driver> Device<T> {
    /// Returns the raw `ib_device` pointer.
    #[inline]
    pub fn as_raw(&self) -> *mut bindings::ib_device {
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

    /// Tells the core and its clients about an event of `port`. Callable from any context.
    pub fn dispatch_port_event(&self, port: u32, event: PortEvent) {
        let mut ev: bindings::ib_event = pin_init::zeroed();
        ev.device = self.as_raw();
        ev.element.port_num = port;
        ev.event = event.to_raw();
        // SAFETY: `ev` is a valid event for this device; the core copies what it needs.
        unsafe { bindings::ib_dispatch_event(&ev) };
    }
}

impl<T: Driver> AsRef<device::Device> for Device<T> {
    fn as_ref(&self) -> &device::Device {
        // SAFETY: The embedded `struct device` is initialised by `_ib_alloc_device` and lives
        // as long as `self`.
        unsafe { device::Device::from_raw(&raw mut (*self.as_raw()).__bindgen_anon_1.dev) }
    }
}

/// A device that is allocated but not registered: the driver describes it here.
///
/// Dropping it frees it.
pub struct UniqueDevice<T: Driver> {
    dev: NonNull<Device<T>>,
}

impl<T: Driver> UniqueDevice<T> {
    /// Allocates a device of `T`, child of `parent`, in the initial network namespace.
    pub fn new(
        parent: &device::Device<device::Bound>,
        module: &'static ThisModule,
    ) -> Result<Self> {
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
        let this = Self { dev };
        let ib = this.raw();
        // SAFETY: `ib` is a fresh, zeroed, exclusively owned allocation; `data` is written
        // before any callback can run.
        unsafe {
            (&raw mut (*dev.as_ptr()).data).write(UnsafeCell::new(None));
            bindings::ib_set_device_ops(ib, &Adapter::<T>::OPS);
            // Not constant: the module comes from the caller.
            (*ib).ops.owner = module.as_ptr();
            (*ib).__bindgen_anon_1.dev.parent = parent.as_raw();
            (*ib).phys_port_cnt = 1;
            (*ib).num_comp_vectors = 1;
        }
        Ok(this)
    }

    fn raw(&self) -> *mut bindings::ib_device {
        self.dev.as_ptr().cast()
    }

    /// Sets the node type.
    pub fn set_node_type(&mut self, node_type: NodeType) -> &mut Self {
        // SAFETY: The device is exclusively owned and not registered.
        // CAST: node types fit in a byte.
        unsafe { (*self.raw()).node_type = node_type.to_raw() as u8 };
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
        // SAFETY: The device is exclusively owned and not registered.
        unsafe { (*self.raw()).num_comp_vectors = vectors.try_into().unwrap_or(i32::MAX) };
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

impl<T: Driver> Drop for UniqueDevice<T> {
    fn drop(&mut self) {
        // SAFETY: The device was allocated by `_ib_alloc_device` and never registered (or
        // unregistered already); this drops the allocation's initial reference.
        unsafe { bindings::ib_dealloc_device(self.raw()) };
    }
}

/// Forwards network-device events of a registered device's ports to its driver.
struct NetdevForward<T: Driver> {
    dev: NonNull<Device<T>>,
    /// Set before the notifier goes, so that the events its unregistration replays are not
    /// taken for real ones.
    closing: AtomicBool,
}

// SAFETY: `Device<T>` is `Send + Sync`; the pointer is only dereferenced while the registration
// (which owns the notifier) keeps the device alive.
unsafe impl<T: Driver> Send for NetdevForward<T> {}

// SAFETY: As above.
unsafe impl<T: Driver> Sync for NetdevForward<T> {}

impl<T: Driver> netdev::EventHandler for NetdevForward<T> {
    fn event(&self, event: netdev::Event, ndev: &NetDevice) {
        if self.closing.load(Ordering::Relaxed) {
            return;
        }
        // SAFETY: The notifier is unregistered before the device is unregistered and freed.
        let dev = unsafe { self.dev.as_ref() };
        // SAFETY: The device is valid.
        let ports = unsafe { (*dev.as_raw()).phys_port_cnt };
        let port = (1..=ports).find(|&port| dev.netdev(port).is_some_and(|n| *n == *ndev));
        dev.with_data(|dev, data| T::netdev_event(dev, data, port, event, ndev));
    }
}

/// A registered device. Dropping it unregisters the device (closing every user context) and
/// then drops the registration's data.
pub struct Registration<'a, T: Driver> {
    notifier: Option<Pin<KBox<netdev::Notifier<NetdevForward<T>>>>>,
    dev: UniqueDevice<T>,
    _data: Pin<KBox<T::Data<'a>>>,
    _p: PhantomData<&'a ()>,
}

// SAFETY: All fields are `Send`; `Data` is `Send` by the trait bound.
unsafe impl<T: Driver> Send for Registration<'_, T> {}

// SAFETY: Shared access only reads the device pointer.
unsafe impl<T: Driver> Sync for Registration<'_, T> {}

impl<'a, T: Driver> Registration<'a, T> {
    /// Registers `dev` as `name` (a pattern such as `c"mydev_%d"`), with `data` available to
    /// its callbacks, DMA going through `dma_device`; then forwards the network-device events of
    /// its ports to [`Driver::netdev_event`].
    ///
    /// # Safety
    ///
    /// The registration must be dropped (not leaked) before `'a` ends: its callbacks use the
    /// data, which may borrow from the bound parent device.
    pub unsafe fn new(
        dev: UniqueDevice<T>,
        name: &CStr,
        dma_device: &'a device::Device<device::Bound>,
        data: impl PinInit<T::Data<'a>, Error>,
    ) -> Result<Self> {
        let data = KBox::pin_init(data, GFP_KERNEL)?;
        let ptr: NonNull<T::Data<'static>> = NonNull::from(&*data).cast();
        // SAFETY: Not registered yet: no callback can read `data`.
        unsafe { *(*dev.dev.as_ptr()).data.get() = Some(ptr) };

        // SAFETY: The device is allocated with our operations; `name` and `dma_device` are
        // valid (the core copies the name).
        let ret = unsafe {
            bindings::ib_register_device(dev.raw(), name.as_ptr().cast(), dma_device.as_raw())
        };
        if let Err(e) = to_result(ret) {
            // SAFETY: Registration failed: no callback runs any more.
            unsafe { *(*dev.dev.as_ptr()).data.get() = None };
            return Err(e);
        }

        let mut this = Self {
            notifier: None,
            dev,
            _data: data,
            _p: PhantomData,
        };
        let forward = NetdevForward {
            dev: this.dev.dev,
            closing: AtomicBool::new(false),
        };
        this.notifier = Some(KBox::pin_init(netdev::Notifier::new(forward), GFP_KERNEL)?);
        Ok(this)
    }

    /// The registered device.
    pub fn device(&self) -> &Device<T> {
        // SAFETY: The registration keeps the device allocated.
        unsafe { self.dev.dev.as_ref() }
    }
}

impl<T: Driver> Drop for Registration<'_, T> {
    fn drop(&mut self) {
        if let Some(notifier) = &self.notifier {
            notifier.handler().closing.store(true, Ordering::Relaxed);
        }
        self.notifier = None;
        // SAFETY: The device is registered. Unregistration closes every user context and waits
        // for running callbacks.
        unsafe { bindings::ib_unregister_device(self.dev.raw()) };
        // SAFETY: Unregistered: no callback runs any more.
        unsafe { *(*self.dev.dev.as_ptr()).data.get() = None };
        // `dev` then drops the initial reference, and `data` is dropped.
    }
}

/// Turns the result of posting a chain of work requests into the core's: 0, or the error with
/// `*bad_wr` set to the first request not posted.
///
/// # Safety
///
/// `wr` must head a valid chain whose `index`-th element exists for an error at `index`, `next`
/// must read a request's successor, and `bad_wr` must be `NULL` or writable.
unsafe fn post_result<W>(
    ret: core::result::Result<(), (Error, usize)>,
    wr: *const W,
    bad_wr: *mut *const W,
    next: impl Fn(*const W) -> *const W,
) -> c_int {
    match ret {
        Ok(()) => 0,
        Err((e, index)) => {
            let mut bad = wr;
            for _ in 0..index {
                bad = next(bad);
            }
            if !bad_wr.is_null() {
                // SAFETY: Guaranteed by the caller.
                unsafe { *bad_wr = bad };
            }
            e.to_errno()
        }
    }
}

/// Builds the core's operations table for `T` and bridges each operation to it.
struct Adapter<T: Driver>(PhantomData<T>);

impl<T: Driver> Adapter<T> {
    const OPS: bindings::ib_device_ops = {
        let mut ops: bindings::ib_device_ops = pin_init::zeroed();
        ops.driver_id = T::DRIVER_ID.to_raw();
        ops.uverbs_abi_ver = T::UVERBS_ABI_VERSION;
        ops.query_device = Some(Self::query_device);
        ops.query_port = Some(Self::query_port);
        ops.get_port_immutable = Some(Self::get_port_immutable);
        if T::HAS_GET_LINK_LAYER {
            ops.get_link_layer = Some(Self::get_link_layer);
        }
        if T::HAS_QUERY_GID {
            ops.query_gid = Some(Self::query_gid);
        }
        if T::HAS_QUERY_PKEY {
            ops.query_pkey = Some(Self::query_pkey);
        }
        if T::HAS_ADD_GID {
            ops.add_gid = Some(Self::add_gid);
        }
        if T::HAS_DEL_GID {
            ops.del_gid = Some(Self::del_gid);
        }
        if T::HAS_ALLOC_UCONTEXT {
            ops.alloc_ucontext = Some(Self::alloc_ucontext);
            ops.dealloc_ucontext = Some(Self::dealloc_ucontext);
            ops.disassociate_ucontext = Some(ucontext::disassociate);
            ops.mmap = Some(ucontext::mmap);
            ops.mmap_free = Some(ucontext::mmap_free);
            ops.size_ib_ucontext = size_of::<UContext<T>>();
        }
        if T::HAS_ALLOC_PD {
            ops.alloc_pd = Some(Self::alloc_pd);
            ops.dealloc_pd = Some(Self::dealloc_pd);
            ops.size_ib_pd = size_of::<Pd<T>>();
        }
        if T::HAS_CREATE_CQ {
            ops.create_cq = Some(Self::create_cq);
            ops.destroy_cq = Some(Self::destroy_cq);
            ops.size_ib_cq = size_of::<Cq<T>>();
        }
        if T::HAS_CREATE_QP {
            ops.create_qp = Some(Self::create_qp);
            ops.destroy_qp = Some(Self::destroy_qp);
            ops.size_ib_qp = size_of::<Qp<T>>();
        }
        if T::HAS_MODIFY_QP {
            ops.modify_qp = Some(Self::modify_qp);
        }
        if T::HAS_QUERY_QP {
            ops.query_qp = Some(Self::query_qp);
        }
        if T::HAS_REG_USER_MR {
            ops.reg_user_mr = Some(Self::reg_user_mr);
        }
        if T::HAS_GET_DMA_MR {
            ops.get_dma_mr = Some(Self::get_dma_mr);
        }
        if T::HAS_ALLOC_MR && T::HAS_MR_MAP_START && T::HAS_MR_SET_PAGE {
            ops.alloc_mr = Some(Self::alloc_mr);
            ops.map_mr_sg = Some(Self::map_mr_sg);
        }
        if T::HAS_REG_USER_MR || T::HAS_GET_DMA_MR || T::HAS_ALLOC_MR {
            ops.dereg_mr = Some(Self::dereg_mr);
        }
        if T::HAS_POST_SEND {
            ops.post_send = Some(Self::post_send);
        }
        if T::HAS_POST_RECV {
            ops.post_recv = Some(Self::post_recv);
        }
        if T::HAS_POLL_CQ {
            ops.poll_cq = Some(Self::poll_cq);
        }
        if T::HAS_REQ_NOTIFY_CQ {
            ops.req_notify_cq = Some(Self::req_notify_cq);
        }
        if T::HAS_GET_HW_STATS && !T::HW_PORT_STATS.is_empty() {
            ops.alloc_hw_port_stats = Some(Self::alloc_hw_port_stats);
            ops.get_hw_stats = Some(Self::get_hw_stats);
        }
        ops
    };

    /// # Safety
    ///
    /// `ib` must be a live device of `T` for the duration of the call.
    unsafe fn dev<'b>(ib: *mut bindings::ib_device) -> &'b Device<T> {
        // SAFETY: Guaranteed by the caller.
        unsafe { Device::from_raw(ib) }
    }

    unsafe extern "C" fn query_device(
        ib: *mut bindings::ib_device,
        attr: *mut bindings::ib_device_attr,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: The core passes its live device, its attribute structure and a valid or
        // `NULL` udata for the duration of the call.
        let (dev, attr, mut udata) = unsafe {
            (
                Self::dev(ib),
                DeviceAttr::from_raw(attr),
                UData::from_raw(udata),
            )
        };
        from_result(|| {
            dev.with_data(|dev, data| T::query_device(dev, data, attr, &mut udata))
                .ok_or(ENODEV)??;
            Ok(0)
        })
    }

    unsafe extern "C" fn query_port(
        ib: *mut bindings::ib_device,
        port: u32,
        attr: *mut bindings::ib_port_attr,
    ) -> c_int {
        // SAFETY: The core passes its live device and its attribute structure.
        let (dev, attr) = unsafe { (Self::dev(ib), PortAttr::from_raw(attr)) };
        from_result(|| {
            dev.with_data(|dev, data| T::query_port(dev, data, port, attr))
                .ok_or(ENODEV)??;
            Ok(0)
        })
    }

    unsafe extern "C" fn get_port_immutable(
        ib: *mut bindings::ib_device,
        port: u32,
        immutable: *mut bindings::ib_port_immutable,
    ) -> c_int {
        // SAFETY: The core passes its live device and its structure.
        let (dev, immutable) = unsafe { (Self::dev(ib), PortImmutable::from_raw(immutable)) };
        from_result(|| {
            dev.with_data(|dev, data| T::get_port_immutable(dev, data, port, immutable))
                .ok_or(ENODEV)??;
            Ok(0)
        })
    }

    unsafe extern "C" fn get_link_layer(
        ib: *mut bindings::ib_device,
        port: u32,
    ) -> bindings::rdma_link_layer {
        // SAFETY: The core passes its live device.
        let dev = unsafe { Self::dev(ib) };
        dev.with_data(|dev, data| T::get_link_layer(dev, data, port))
            .unwrap_or(LinkLayer::Unspecified)
            .to_raw()
    }

    unsafe extern "C" fn query_gid(
        ib: *mut bindings::ib_device,
        port: u32,
        index: c_int,
        gid: *mut bindings::ib_gid,
    ) -> c_int {
        // SAFETY: The core passes its live device.
        let dev = unsafe { Self::dev(ib) };
        from_result(|| {
            let index = u32::try_from(index).map_err(|_| EINVAL)?;
            let value = dev
                .with_data(|dev, data| T::query_gid(dev, data, port, index))
                .ok_or(ENODEV)??;
            // SAFETY: `gid` is writable; any byte pattern is valid for the union.
            unsafe { (*gid).raw = value.0 };
            Ok(0)
        })
    }

    unsafe extern "C" fn query_pkey(
        ib: *mut bindings::ib_device,
        port: u32,
        index: u16,
        pkey: *mut u16,
    ) -> c_int {
        // SAFETY: The core passes its live device.
        let dev = unsafe { Self::dev(ib) };
        from_result(|| {
            let value = dev
                .with_data(|dev, data| T::query_pkey(dev, data, port, index))
                .ok_or(ENODEV)??;
            // SAFETY: `pkey` is writable.
            unsafe { *pkey = value };
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// `attr` must be a valid GID attribute of a live device of `T`.
    unsafe fn gid_op(
        attr: *const bindings::ib_gid_attr,
        op: impl for<'b> FnOnce(&Device<T>, &'b T::Data<'b>, &GidAttr) -> Result,
    ) -> c_int {
        // SAFETY: Guaranteed by the caller.
        let (dev, attr) = unsafe { (Self::dev((*attr).device), GidAttr::from_raw(attr)) };
        from_result(|| {
            dev.with_data(|dev, data| op(dev, data, attr))
                .ok_or(ENODEV)??;
            Ok(0)
        })
    }

    unsafe extern "C" fn add_gid(
        attr: *const bindings::ib_gid_attr,
        _context: *mut *mut c_void,
    ) -> c_int {
        // SAFETY: The core passes a valid attribute of its live device.
        unsafe { Self::gid_op(attr, |dev, data, attr| T::add_gid(dev, data, attr)) }
    }

    unsafe extern "C" fn del_gid(
        attr: *const bindings::ib_gid_attr,
        _context: *mut *mut c_void,
    ) -> c_int {
        // SAFETY: The core passes a valid attribute of its live device.
        unsafe { Self::gid_op(attr, |dev, data, attr| T::del_gid(dev, data, attr)) }
    }

    unsafe extern "C" fn alloc_ucontext(
        uctx: *mut bindings::ib_ucontext,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: The core passes a zeroed context of `size_ib_ucontext` bytes whose header it
        // initialised, for a live device, and the call's udata.
        unsafe {
            let dev = Self::dev((*uctx).device);
            let mut udata = UData::from_raw(udata);
            from_result(|| {
                dev.with_data(|dev, data| {
                    UContext::<T>::init(uctx, |setup, slot| {
                        T::alloc_ucontext(dev, data, setup, &mut udata).__init(slot)
                    })
                })
                .ok_or(ENODEV)??;
                Ok(0)
            })
        }
    }

    unsafe extern "C" fn dealloc_ucontext(uctx: *mut bindings::ib_ucontext) {
        // SAFETY: The core passes a context `alloc_ucontext` initialised; this is its last use.
        unsafe {
            let dev = Self::dev((*uctx).device);
            UContext::<T>::destroy(uctx, |ctx| {
                dev.with_data(|dev, data| T::dealloc_ucontext(dev, data, ctx));
            });
        }
    }

    unsafe extern "C" fn alloc_hw_port_stats(
        _ib: *mut bindings::ib_device,
        _port: u32,
    ) -> *mut bindings::rdma_hw_stats {
        stats::alloc(T::HW_PORT_STATS)
    }

    unsafe extern "C" fn get_hw_stats(
        ib: *mut bindings::ib_device,
        stats: *mut bindings::rdma_hw_stats,
        port: u32,
        _index: c_int,
    ) -> c_int {
        // SAFETY: The core passes its live device and a counter set `alloc_hw_port_stats` made,
        // whose `value` array holds `num_counters` entries; it holds the set's lock.
        unsafe {
            let dev = Self::dev(ib);
            let n = usize::try_from((*stats).num_counters).unwrap_or(0);
            let values = core::slice::from_raw_parts_mut((*stats).value.as_mut_ptr(), n);
            from_result(|| {
                let filled = dev
                    .with_data(|dev, data| T::get_hw_stats(dev, data, port, values))
                    .ok_or(ENODEV)??;
                Ok(filled.min(n).try_into()?)
            })
        }
    }

    unsafe extern "C" fn alloc_pd(
        pd: *mut bindings::ib_pd,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: The core passes a zeroed PD of `size_ib_pd` bytes whose header it initialised,
        // for a live device, and the call's udata.
        unsafe {
            let dev = Self::dev((*pd).device);
            let mut udata = UData::from_raw(udata);
            let setup = PdSetup {
                ucontext: udata.ucontext::<T>(),
            };
            from_result(|| {
                dev.with_data(|dev, data| {
                    Pd::<T>::init(pd, false, |_, slot| {
                        T::alloc_pd(dev, data, &setup, &mut udata).__init(slot)
                    })
                })
                .ok_or(ENODEV)??;
                Ok(0)
            })
        }
    }

    unsafe extern "C" fn dealloc_pd(
        pd: *mut bindings::ib_pd,
        _udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: The core passes a PD `alloc_pd` initialised; this is its last use.
        unsafe {
            let dev = Self::dev((*pd).device);
            Pd::<T>::destroy(pd, |p| {
                dev.with_data(|dev, data| T::dealloc_pd(dev, data, p));
            });
        }
        0
    }

    unsafe extern "C" fn create_cq(
        cq: *mut bindings::ib_cq,
        attr: *const bindings::ib_cq_init_attr,
        attrs: *mut bindings::uverbs_attr_bundle,
    ) -> c_int {
        // SAFETY: The core passes a zeroed CQ of `size_ib_cq` bytes whose header it initialised,
        // for a live device, valid attributes and the call's attribute bundle (`NULL` for
        // kernel users); the union view holding `driver_udata` is the one uverbs fills.
        unsafe {
            let dev = Self::dev((*cq).device);
            let udata = if attrs.is_null() {
                core::ptr::null_mut()
            } else {
                &raw mut (*attrs).__bindgen_anon_1.__bindgen_anon_1.driver_udata
            };
            let mut udata = UData::from_raw(udata);
            let attr = CqAttr {
                cqe: (*attr).cqe,
                comp_vector: (*attr).comp_vector,
                flags: (*attr).flags,
            };
            let ucontext = udata.ucontext::<T>();
            from_result(|| {
                dev.with_data(|dev, data| {
                    Cq::<T>::init(cq, true, |events, slot| {
                        let setup = CqSetup {
                            cq,
                            attr,
                            events: events.ok_or(EINVAL)?,
                            ucontext,
                        };
                        T::create_cq(dev, data, &setup, &mut udata).__init(slot)
                    })
                })
                .ok_or(ENODEV)??;
                Ok(0)
            })
        }
    }

    unsafe extern "C" fn destroy_cq(
        cq: *mut bindings::ib_cq,
        _udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: The core passes a CQ `create_cq` initialised; this is its last use.
        unsafe {
            let dev = Self::dev((*cq).device);
            Cq::<T>::destroy(cq, |c| {
                dev.with_data(|dev, data| T::destroy_cq(dev, data, c));
            });
        }
        0
    }

    unsafe extern "C" fn create_qp(
        qp: *mut bindings::ib_qp,
        attr: *mut bindings::ib_qp_init_attr,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: The core passes a zeroed QP of `size_ib_qp` bytes whose header it initialised
        // (device, PD, CQs, handlers), valid attributes and the call's udata.
        unsafe {
            let dev = Self::dev((*qp).device);
            let mut udata = UData::from_raw(udata);
            let attr = qp::raw::init_attr::<T>(attr);
            let ucontext = udata.ucontext::<T>();
            from_result(|| {
                dev.with_data(|dev, data| {
                    Qp::<T>::init(qp, true, |events, slot| {
                        let setup = QpSetup {
                            qp,
                            events: events.ok_or(EINVAL)?,
                            ucontext,
                        };
                        T::create_qp(dev, data, &setup, &attr, &mut udata).__init(slot)
                    })
                })
                .ok_or(ENODEV)??;
                Ok(0)
            })
        }
    }

    unsafe extern "C" fn modify_qp(
        qp: *mut bindings::ib_qp,
        attr: *mut bindings::ib_qp_attr,
        mask: c_int,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: The core passes a live QP of this device, valid attributes and the call's
        // udata.
        unsafe {
            let dev = Self::dev((*qp).device);
            let qp = Qp::<T>::from_raw(qp);
            let attr = qp::raw::attr(attr);
            let mut udata = UData::from_raw(udata);
            from_result(|| {
                dev.with_data(|dev, data| {
                    T::modify_qp(dev, data, qp, &attr, QpAttrMask(mask as u32), &mut udata)
                })
                .ok_or(ENODEV)??;
                Ok(0)
            })
        }
    }

    unsafe extern "C" fn query_qp(
        qp: *mut bindings::ib_qp,
        attr: *mut bindings::ib_qp_attr,
        _mask: c_int,
        init: *mut bindings::ib_qp_init_attr,
    ) -> c_int {
        // SAFETY: The core passes a live QP of this device and zeroed structures to fill.
        unsafe {
            let dev = Self::dev((*qp).device);
            let qp = Qp::<T>::from_raw(qp);
            let mut out = qp::raw::attr_out(attr, init);
            from_result(|| {
                dev.with_data(|dev, data| T::query_qp(dev, data, qp, &mut out))
                    .ok_or(ENODEV)??;
                Ok(0)
            })
        }
    }

    unsafe extern "C" fn destroy_qp(
        qp: *mut bindings::ib_qp,
        _udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: The core passes a QP `create_qp` initialised; this is its last use.
        unsafe {
            let dev = Self::dev((*qp).device);
            Qp::<T>::destroy(qp, |q| {
                dev.with_data(|dev, data| T::destroy_qp(dev, data, q));
            });
        }
        0
    }

    unsafe extern "C" fn reg_user_mr(
        pd: *mut bindings::ib_pd,
        start: u64,
        length: u64,
        iova: u64,
        access: c_int,
        dmah: *mut bindings::ib_dmah,
        udata: *mut bindings::ib_udata,
    ) -> *mut bindings::ib_mr {
        // SAFETY: The core passes a live PD of this device and the call's udata.
        let (dev, pd, mut udata) = unsafe {
            (
                Self::dev((*pd).device),
                Pd::<T>::from_raw(pd),
                UData::from_raw(udata),
            )
        };
        let req = UserMrReq {
            start,
            length,
            iova,
            access: access as u32,
        };
        let new = if dmah.is_null() {
            dev.with_data(|dev, data| T::reg_user_mr(dev, data, pd, &req, &mut udata))
                .unwrap_or(Err(ENODEV))
        } else {
            Err(EOPNOTSUPP)
        };
        Mr::<T>::into_raw(new).unwrap_or_else(|e| e.to_ptr())
    }

    unsafe extern "C" fn get_dma_mr(
        pd: *mut bindings::ib_pd,
        access: c_int,
    ) -> *mut bindings::ib_mr {
        // SAFETY: The core passes a live PD of this device.
        let (dev, pd) = unsafe { (Self::dev((*pd).device), Pd::<T>::from_raw(pd)) };
        let new = dev
            .with_data(|dev, data| T::get_dma_mr(dev, data, pd, access as u32))
            .unwrap_or(Err(ENODEV));
        Mr::<T>::into_raw(new).unwrap_or_else(|e| e.to_ptr())
    }

    unsafe extern "C" fn dereg_mr(
        mr: *mut bindings::ib_mr,
        _udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: The core passes a region `reg_user_mr` or `get_dma_mr` made; this is its last
        // use.
        unsafe {
            let dev = Self::dev((*mr).device);
            let data = Mr::<T>::from_raw(mr).into_data();
            dev.with_data(|dev, d| T::dereg_mr(dev, d, data));
        }
        0
    }

    unsafe extern "C" fn post_send(
        qp: *mut bindings::ib_qp,
        wr: *const bindings::ib_send_wr,
        bad_wr: *mut *const bindings::ib_send_wr,
    ) -> c_int {
        // SAFETY: The core passes a live QP of this device and a valid chain.
        let (dev, q, wrs) = unsafe {
            (
                Self::dev((*qp).device),
                Qp::<T>::from_raw(qp),
                SendWrs::<T>::from_raw(wr),
            )
        };
        let ret = dev
            .with_data(|dev, data| T::post_send(dev, data, q, wrs))
            .unwrap_or(Err((ENODEV, 0)));
        // SAFETY: The chain is valid; `bad_wr` is `NULL` or writable.
        unsafe { post_result(ret, wr, bad_wr, |w| (*w).next) }
    }

    unsafe extern "C" fn post_recv(
        qp: *mut bindings::ib_qp,
        wr: *const bindings::ib_recv_wr,
        bad_wr: *mut *const bindings::ib_recv_wr,
    ) -> c_int {
        // SAFETY: The core passes a live QP of this device and a valid chain.
        let (dev, q, wrs) = unsafe {
            (
                Self::dev((*qp).device),
                Qp::<T>::from_raw(qp),
                RecvWrs::from_raw(wr),
            )
        };
        let ret = dev
            .with_data(|dev, data| T::post_recv(dev, data, q, wrs))
            .unwrap_or(Err((ENODEV, 0)));
        // SAFETY: The chain is valid; `bad_wr` is `NULL` or writable.
        unsafe { post_result(ret, wr, bad_wr, |w| (*w).next) }
    }

    unsafe extern "C" fn poll_cq(
        cq: *mut bindings::ib_cq,
        num: c_int,
        wc: *mut bindings::ib_wc,
    ) -> c_int {
        let n = usize::try_from(num).unwrap_or(0);
        // SAFETY: The core passes a live CQ of this device and room for `num` completions.
        let (dev, c, wcs) = unsafe {
            (
                Self::dev((*cq).device),
                Cq::<T>::from_raw(cq),
                Wc::slice(wc, n),
            )
        };
        let got = dev
            .with_data(|dev, data| T::poll_cq(dev, data, c, wcs))
            .unwrap_or(0);
        got.min(n).try_into().unwrap_or(0)
    }

    unsafe extern "C" fn req_notify_cq(
        cq: *mut bindings::ib_cq,
        flags: bindings::ib_cq_notify_flags,
    ) -> c_int {
        // SAFETY: The core passes a live CQ of this device.
        let (dev, c) = unsafe { (Self::dev((*cq).device), Cq::<T>::from_raw(cq)) };
        let solicited = flags & bindings::ib_cq_notify_flags_IB_CQ_SOLICITED_MASK
            == bindings::ib_cq_notify_flags_IB_CQ_SOLICITED;
        let missed = flags & bindings::ib_cq_notify_flags_IB_CQ_REPORT_MISSED_EVENTS != 0;
        let ret = dev
            .with_data(|dev, data| T::req_notify_cq(dev, data, c, solicited, missed))
            .unwrap_or(Err(ENODEV));
        match ret {
            Ok(pending) => pending.into(),
            Err(e) => e.to_errno(),
        }
    }

    unsafe extern "C" fn alloc_mr(
        pd: *mut bindings::ib_pd,
        mr_type: bindings::ib_mr_type,
        max_num_sg: u32,
    ) -> *mut bindings::ib_mr {
        // SAFETY: The core passes a live PD of this device.
        let (dev, pd) = unsafe { (Self::dev((*pd).device), Pd::<T>::from_raw(pd)) };
        let new = if mr_type == bindings::ib_mr_type_IB_MR_TYPE_MEM_REG {
            dev.with_data(|dev, data| T::alloc_mr(dev, data, pd, max_num_sg))
                .unwrap_or(Err(ENODEV))
        } else {
            Err(EINVAL)
        };
        Mr::<T>::into_raw(new).unwrap_or_else(|e| e.to_ptr())
    }

    unsafe extern "C" fn map_mr_sg(
        mr: *mut bindings::ib_mr,
        sg: *mut bindings::scatterlist,
        sg_nents: c_int,
        sg_offset: *mut crate::ffi::c_uint,
    ) -> c_int {
        // SAFETY: The core passes a region `alloc_mr` made, live for the call.
        let m = unsafe { Mr::<T>::from_raw_ref(mr) };
        if let Err(e) = T::mr_map_start(m) {
            return e.to_errno();
        }
        // SAFETY: The core passes a DMA-mapped list of `sg_nents` entries; `set_page` only
        // touches the region.
        unsafe { bindings::ib_sg_to_pages(mr, sg, sg_nents, sg_offset, Some(Self::set_page)) }
    }

    unsafe extern "C" fn set_page(mr: *mut bindings::ib_mr, addr: u64) -> c_int {
        // SAFETY: Called by `ib_sg_to_pages` for the region `map_mr_sg` passed it.
        let m = unsafe { Mr::<T>::from_raw_ref(mr) };
        match T::mr_set_page(m, addr) {
            Ok(()) => 0,
            Err(e) => e.to_errno(),
        }
    }
}
