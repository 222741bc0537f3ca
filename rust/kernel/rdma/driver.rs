// SPDX-License-Identifier: GPL-2.0

//! The operations of an RDMA driver: [`Driver`], with what every device of the driver has and
//! the operations the core requires, and [`DeviceOps`], a set of optional operations.
//!
//! The core calls each operation through `struct ib_device_ops`. A device of `T` gets the
//! table of `T` and that of `T::Ops` (the optional operations all its devices have) when it is
//! allocated ([`UnregisteredDevice::new`]), and may get more with
//! [`UnregisteredDevice::add_ops`] before it is registered (a protocol's operations, say). As
//! with `ib_set_device_ops()`, whose composition this is, a later table only fills operations
//! the earlier ones left out: a driver writes each operation once, in the one table that holds
//! it. An operation no table holds stays `NULL`: the core then reports it as unsupported (or,
//! for the kernel verbs that serve kernel users, treats the device as serving user space
//! only).
//!
//! Every callback receives the [`Device`] and the data the driver gave to
//! [`Registration::new`], except [`DeviceOps::mr_map_start`] and [`DeviceOps::mr_set_page`],
//! which act on the region alone.
//!
//! # Examples
//!
//! [`Driver`] and [`DeviceOps`] show how a driver implements them. A driver whose devices speak
//! one of two protocols gives each device the operations of its protocol:
//!
//! ```
//! use kernel::rdma::{
//!     self,
//!     UnregisteredDevice, //
//! };
//!
//! // Gives a device the operations of the protocol it speaks: those of `R` for RoCE, those of
//! // `I` for iWARP.
//! fn add_protocol_ops<T, R, I>(dev: &mut UnregisteredDevice<T>, roce: bool)
//! where
//!     T: rdma::Driver,
//!     R: rdma::DeviceOps<T>,
//!     I: rdma::DeviceOps<T>,
//! {
//!     if roce {
//!         dev.add_ops::<R>();
//!     } else {
//!         dev.add_ops::<I>();
//!     }
//! }
//! ```
//!
//! # Calling contexts
//!
//! This list states where the core calls each operation; the operations' own documentation
//! does not repeat it.
//!
//! - Process context, may sleep: [`query_device`], [`query_port`], [`get_port_immutable`],
//!   [`query_gid`], [`query_pkey`], [`alloc_ucontext`], [`dealloc_ucontext`], [`alloc_pd`],
//!   [`dealloc_pd`], [`create_cq`], [`destroy_cq`], [`create_qp`], [`modify_qp`],
//!   [`query_qp`], [`destroy_qp`], [`reg_user_mr`], [`get_dma_mr`], [`alloc_mr`],
//!   [`dereg_mr`].
//! - Process context under the GID table's mutex, may sleep: [`add_gid`], [`del_gid`].
//! - Process context (sysfs, netlink) under the counter set's mutex, may sleep:
//!   [`get_hw_stats`].
//! - Process context with RTNL held, may sleep but not take RTNL: [`netdev_event`].
//! - Any context, softirq and spinlocks held included (no sleeping, `GFP_ATOMIC`):
//!   [`post_send`], [`post_recv`], [`poll_cq`], [`req_notify_cq`].
//! - The context of the consumer's `ib_map_mr_sg()`, possibly atomic (no sleeping):
//!   [`mr_map_start`], [`mr_set_page`].
//! - Under the core's locks, possibly atomic (no sleeping): [`get_link_layer`].
//! - Process context or atomic, as [`AhSetup::may_sleep`] and the `sleepable` argument say:
//!   [`create_ah`], [`destroy_ah`] (the connection manager creates and destroys address handles
//!   under spinlocks). Any context: [`query_ah`].
//!
//! The other direction, driver to core: [`CqEvents`](super::CqEvents) and
//! [`super::QpEvents`] may be called from any context, hard interrupts included.
//!
//! [`UnregisteredDevice::new`]: super::UnregisteredDevice::new
//! [`UnregisteredDevice::add_ops`]: super::UnregisteredDevice::add_ops
//! [`Registration::new`]: super::Registration::new
//! [`query_device`]: Driver::query_device
//! [`query_port`]: Driver::query_port
//! [`get_port_immutable`]: Driver::get_port_immutable
//! [`query_gid`]: DeviceOps::query_gid
//! [`query_pkey`]: DeviceOps::query_pkey
//! [`alloc_ucontext`]: DeviceOps::alloc_ucontext
//! [`dealloc_ucontext`]: DeviceOps::dealloc_ucontext
//! [`alloc_pd`]: DeviceOps::alloc_pd
//! [`dealloc_pd`]: DeviceOps::dealloc_pd
//! [`create_cq`]: DeviceOps::create_cq
//! [`destroy_cq`]: DeviceOps::destroy_cq
//! [`create_qp`]: DeviceOps::create_qp
//! [`modify_qp`]: DeviceOps::modify_qp
//! [`query_qp`]: DeviceOps::query_qp
//! [`destroy_qp`]: DeviceOps::destroy_qp
//! [`reg_user_mr`]: DeviceOps::reg_user_mr
//! [`get_dma_mr`]: DeviceOps::get_dma_mr
//! [`alloc_mr`]: DeviceOps::alloc_mr
//! [`dereg_mr`]: Driver::dereg_mr
//! [`add_gid`]: DeviceOps::add_gid
//! [`del_gid`]: DeviceOps::del_gid
//! [`get_hw_stats`]: DeviceOps::get_hw_stats
//! [`netdev_event`]: Driver::netdev_event
//! [`post_send`]: DeviceOps::post_send
//! [`post_recv`]: DeviceOps::post_recv
//! [`poll_cq`]: DeviceOps::poll_cq
//! [`req_notify_cq`]: DeviceOps::req_notify_cq
//! [`mr_map_start`]: DeviceOps::mr_map_start
//! [`mr_set_page`]: DeviceOps::mr_set_page
//! [`get_link_layer`]: DeviceOps::get_link_layer
//! [`create_ah`]: DeviceOps::create_ah
//! [`destroy_ah`]: DeviceOps::destroy_ah
//! [`query_ah`]: DeviceOps::query_ah
//! [`AhSetup::may_sleep`]: super::AhSetup::may_sleep

use super::{
    ah::{
        Ah,
        AhAttr,
        AhAttrOut,
        AhSetup, //
    },
    attr::{
        DeviceAttr,
        GidAttr,
        PortAttr,
        PortImmutable, //
    },
    cq::{
        Cq,
        CqSetup,
        Pd,
        PdSetup, //
    },
    device::Device,
    iwcm::{
        CmId,
        ConnParam, //
    },
    mr::{
        AccessFlags,
        Mr,
        NewMr,
        UserMrReq, //
    },
    qp::{
        Qp,
        QpAttr,
        QpAttrMask,
        QpAttrOut,
        QpEvents,
        QpInitAttr,
        QpSetup, //
    },
    stats::StatDesc,
    ucontext::UContextSetup,
    udata::UData,
    wr::{
        RecvWrs,
        SendWrs,
        Wc, //
    },
    DriverId,
    Gid,
    LinkLayer, //
};
use crate::{
    error::VTABLE_DEFAULT_ERROR,
    net::device::{
        self as netdev,
        NetDevice, //
    },
    prelude::*,
};
use pin_init::PinInit;

/// An RDMA driver: the types of its objects, the operations the core requires of every device,
/// and the table of optional operations all its devices have ([`Driver::Ops`]).
///
/// # Examples
///
/// A driver whose devices only report their attributes (and so serve no one):
///
/// ```
/// use kernel::{
///     prelude::*,
///     rdma::{
///         self,
///         DeviceAttr,
///         DriverId,
///         PortAttr,
///         PortImmutable,
///         UData, //
///     },
/// };
///
/// struct MyDriver;
///
/// #[vtable]
/// impl rdma::Driver for MyDriver {
///     type Data<'a> = ();
///     type UContext = ();
///     type Pd = ();
///     type Cq = ();
///     type Qp = ();
///     type Mr = ();
///     type Ah = ();
///     type Ops = Self;
///     const DRIVER_ID: DriverId = DriverId::UNKNOWN;
///
///     fn query_device(
///         _dev: &rdma::Device<Self>,
///         _data: &(),
///         attr: &mut DeviceAttr,
///         _udata: &mut UData<'_>,
///     ) -> Result {
///         attr.set_max_qp(0);
///         Ok(())
///     }
///
///     fn query_port(
///         _dev: &rdma::Device<Self>,
///         _data: &(),
///         _port: u32,
///         _attr: &mut PortAttr,
///     ) -> Result {
///         Ok(())
///     }
///
///     fn get_port_immutable(
///         _dev: &rdma::Device<Self>,
///         _data: &(),
///         _port: u32,
///         _immutable: &mut PortImmutable,
///     ) -> Result {
///         Ok(())
///     }
/// }
///
/// #[vtable]
/// impl rdma::DeviceOps<MyDriver> for MyDriver {}
/// ```
#[vtable]
pub trait Driver: Sized + Send + Sync + 'static {
    /// The data the callbacks need, owned by the [`Registration`](super::Registration); `'a`
    /// lets it borrow from the bound parent device (BARs, the parent's bound reference).
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

    /// The driver's part of an address handle.
    type Ah: Send + Sync;

    /// The optional operations every device of the driver has; often `Self`.
    /// [`UnregisteredDevice::add_ops`](super::UnregisteredDevice::add_ops) adds more to one
    /// device.
    type Ops: DeviceOps<Self>;

    /// The identity libibverbs matches the user-space provider by.
    const DRIVER_ID: DriverId;

    /// The version of the driver's user ABI.
    const UVERBS_ABI_VERSION: u32 = 0;

    /// The port counters [`DeviceOps::get_hw_stats`] reports, in order.
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

    /// Deregisters a memory region that a [`DeviceOps`] operation of any of the device's tables
    /// made ([`DeviceOps::reg_user_mr`], [`DeviceOps::get_dma_mr`], [`DeviceOps::alloc_mr`]).
    /// Must not fail. Without it, the driver's part is dropped.
    fn dereg_mr(_dev: &Device<Self>, _data: &Self::Data<'_>, _mr: Self::Mr) {}

    /// Called for every event of every network device; `port` is the port the network device
    /// is associated with, if any. A driver detaches its port from a network
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

/// Optional operations of devices of a driver `T`: those of every device ([`Driver::Ops`]), or
/// those [`UnregisteredDevice::add_ops`](super::UnregisteredDevice::add_ops) adds to some (the
/// operations of one protocol, say).
///
/// The implementing type is often a marker. Every operation here may sit in any table, so that
/// a driver writes each once, where it belongs.
///
/// # Examples
///
/// ```
/// use kernel::{
///     prelude::*,
///     rdma::{
///         self,
///         LinkLayer, //
///     },
/// };
///
/// # struct MyDriver;
/// # #[vtable]
/// # impl rdma::Driver for MyDriver {
/// #     type Data<'a> = ();
/// #     type UContext = ();
/// #     type Pd = ();
/// #     type Cq = ();
/// #     type Qp = ();
/// #     type Mr = ();
/// #     type Ah = ();
/// #     type Ops = Self;
/// #     const DRIVER_ID: rdma::DriverId = rdma::DriverId::UNKNOWN;
/// #     fn query_device(
/// #         _dev: &rdma::Device<Self>,
/// #         _data: &(),
/// #         _attr: &mut rdma::DeviceAttr,
/// #         _udata: &mut rdma::UData<'_>,
/// #     ) -> Result {
/// #         Ok(())
/// #     }
/// #     fn query_port(
/// #         _dev: &rdma::Device<Self>,
/// #         _data: &(),
/// #         _port: u32,
/// #         _attr: &mut rdma::PortAttr,
/// #     ) -> Result {
/// #         Ok(())
/// #     }
/// #     fn get_port_immutable(
/// #         _dev: &rdma::Device<Self>,
/// #         _data: &(),
/// #         _port: u32,
/// #         _immutable: &mut rdma::PortImmutable,
/// #     ) -> Result {
/// #         Ok(())
/// #     }
/// # }
/// # #[vtable]
/// # impl rdma::DeviceOps<MyDriver> for MyDriver {}
/// /// The operations of MyDriver's Ethernet devices.
/// struct Ethernet;
///
/// #[vtable]
/// impl rdma::DeviceOps<MyDriver> for Ethernet {
///     fn get_link_layer(_dev: &rdma::Device<MyDriver>, _data: &(), _port: u32) -> LinkLayer {
///         LinkLayer::Ethernet
///     }
/// }
///
/// fn describe(dev: &mut rdma::UnregisteredDevice<MyDriver>) {
///     dev.add_ops::<Ethernet>();
/// }
/// ```
#[vtable]
pub trait DeviceOps<T: Driver>: 'static {
    /// Returns entry `index` of the GID table of `port` (devices whose GIDs the core does not
    /// manage, such as iWARP).
    fn query_gid(_dev: &Device<T>, _data: &T::Data<'_>, _port: u32, _index: u32) -> Result<Gid> {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Creates the driver's part of a user context. Implementing it gives the device a
    /// user-verbs character device, so that libibverbs sees it.
    fn alloc_ucontext(
        _dev: &Device<T>,
        _data: &T::Data<'_>,
        _ctx: &UContextSetup<'_>,
        _udata: &mut UData<'_>,
    ) -> impl PinInit<T::UContext, Error> {
        build_error!(VTABLE_DEFAULT_ERROR);
        #[allow(unreachable_code)]
        Err::<T::UContext, _>(EINVAL)
    }

    /// Releases what the user context holds in the device, before its driver part is dropped
    /// (and its memory mappings are removed). Must not fail.
    fn dealloc_ucontext(_dev: &Device<T>, _data: &T::Data<'_>, _ctx: Pin<&mut T::UContext>) {}

    /// Creates the driver's part of a protection domain.
    fn alloc_pd(
        _dev: &Device<T>,
        _data: &T::Data<'_>,
        _setup: &PdSetup<'_, T>,
        _udata: &mut UData<'_>,
    ) -> impl PinInit<T::Pd, Error> {
        build_error!(VTABLE_DEFAULT_ERROR);
        #[allow(unreachable_code)]
        Err::<T::Pd, _>(EINVAL)
    }

    /// Releases a protection domain before its driver part is dropped. Must not fail.
    fn dealloc_pd(_dev: &Device<T>, _data: &T::Data<'_>, _pd: Pin<&mut T::Pd>) {}

    /// Creates the driver's part of a completion queue.
    fn create_cq(
        _dev: &Device<T>,
        _data: &T::Data<'_>,
        _setup: &CqSetup<'_, T>,
        _udata: &mut UData<'_>,
    ) -> impl PinInit<T::Cq, Error> {
        build_error!(VTABLE_DEFAULT_ERROR);
        #[allow(unreachable_code)]
        Err::<T::Cq, _>(EINVAL)
    }

    /// Destroys a completion queue in the device before its driver part is dropped. Must not
    /// fail; no completion may be written to its memory afterwards.
    fn destroy_cq(_dev: &Device<T>, _data: &T::Data<'_>, _cq: Pin<&mut T::Cq>) {}

    /// Creates the driver's part of a queue pair.
    fn create_qp(
        _dev: &Device<T>,
        _data: &T::Data<'_>,
        _setup: &QpSetup<'_, T>,
        _attr: &QpInitAttr<'_, T>,
        _udata: &mut UData<'_>,
    ) -> impl PinInit<T::Qp, Error> {
        build_error!(VTABLE_DEFAULT_ERROR);
        #[allow(unreachable_code)]
        Err::<T::Qp, _>(EINVAL)
    }

    /// Modifies the attributes of `qp` that `mask` names.
    fn modify_qp(
        _dev: &Device<T>,
        _data: &T::Data<'_>,
        _qp: &Qp<T>,
        _attr: &QpAttr<'_>,
        _mask: QpAttrMask,
        _udata: &mut UData<'_>,
    ) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Reports the attributes of `qp`.
    fn query_qp(
        _dev: &Device<T>,
        _data: &T::Data<'_>,
        _qp: &Qp<T>,
        _out: &mut QpAttrOut<'_>,
    ) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Destroys a queue pair in the device before its driver part is dropped. Must not fail.
    fn destroy_qp(_dev: &Device<T>, _data: &T::Data<'_>, _qp: Pin<&mut T::Qp>) {}

    /// Registers user memory.
    fn reg_user_mr(
        _dev: &Device<T>,
        _data: &T::Data<'_>,
        _pd: &Pd<T>,
        _req: &UserMrReq,
        _udata: &mut UData<'_>,
    ) -> Result<NewMr<T::Mr>> {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Makes the region kernel users address bus addresses through.
    fn get_dma_mr(
        _dev: &Device<T>,
        _data: &T::Data<'_>,
        _pd: &Pd<T>,
        _access: AccessFlags,
    ) -> Result<NewMr<T::Mr>> {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Allocates a fast-registration region for up to `max_num_sg` pages; its pages come from
    /// [`DeviceOps::mr_map_start`] and [`DeviceOps::mr_set_page`], its use from a fast-registration
    /// work request.
    fn alloc_mr(
        _dev: &Device<T>,
        _data: &T::Data<'_>,
        _pd: &Pd<T>,
        _max_num_sg: u32,
    ) -> Result<NewMr<T::Mr>> {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// A consumer maps a new page list into a fast-registration region: forget the old one.
    fn mr_map_start(_mr: &Mr<T>) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Appends the page at bus address `addr` (of the region's page size) to the region's list.
    fn mr_set_page(_mr: &Mr<T>, _addr: u64) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Posts a chain of send work requests of a kernel consumer. On failure, returns the error
    /// and the index of the first request not posted.
    fn post_send(
        _dev: &Device<T>,
        _data: &T::Data<'_>,
        _qp: &Qp<T>,
        _wrs: SendWrs<'_, T>,
    ) -> core::result::Result<(), (Error, usize)> {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Posts a chain of receive work requests of a kernel consumer; as [`DeviceOps::post_send`].
    fn post_recv(
        _dev: &Device<T>,
        _data: &T::Data<'_>,
        _qp: &Qp<T>,
        _wrs: RecvWrs<'_>,
    ) -> core::result::Result<(), (Error, usize)> {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Fills in up to `wc.len()` completions of a kernel CQ; returns how many.
    fn poll_cq(_dev: &Device<T>, _data: &T::Data<'_>, _cq: &Cq<T>, _wc: &mut [Wc]) -> usize {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Asks for a completion event (only for solicited completions if `solicited`). With
    /// `report_missed`, returns whether completions may already be waiting.
    fn req_notify_cq(
        _dev: &Device<T>,
        _data: &T::Data<'_>,
        _cq: &Cq<T>,
        _solicited: bool,
        _report_missed: bool,
    ) -> Result<bool> {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Fills in `values` (one per [`Driver::HW_PORT_STATS`] entry) for `port`; returns how many
    /// it filled.
    fn get_hw_stats(
        _dev: &Device<T>,
        _data: &T::Data<'_>,
        _port: u32,
        _values: &mut [u64],
    ) -> Result<usize> {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Reports the link layer of `port`.
    fn get_link_layer(_dev: &Device<T>, _data: &T::Data<'_>, _port: u32) -> LinkLayer {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Returns entry `index` of the partition key table of `port`.
    fn query_pkey(_dev: &Device<T>, _data: &T::Data<'_>, _port: u32, _index: u16) -> Result<u16> {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Creates the driver's part of an address handle for `attr`, for a kernel user (user
    /// space has no way to create one: the operation the core would need for it is left out).
    fn create_ah(
        _dev: &Device<T>,
        _data: &T::Data<'_>,
        _setup: &AhSetup<'_, T>,
        _attr: &AhAttr<'_>,
    ) -> impl PinInit<T::Ah, Error> {
        build_error!(VTABLE_DEFAULT_ERROR);
        #[allow(unreachable_code)]
        Err::<T::Ah, _>(EINVAL)
    }

    /// Destroys an address handle in the device before its driver part is dropped. Must not
    /// fail; must not sleep unless `sleepable`.
    fn destroy_ah(_dev: &Device<T>, _data: &T::Data<'_>, _ah: Pin<&mut T::Ah>, _sleepable: bool) {}

    /// Reports the address of `ah`.
    fn query_ah(
        _dev: &Device<T>,
        _data: &T::Data<'_>,
        _ah: &Ah<T>,
        _out: &mut AhAttrOut<'_>,
    ) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// iWARP: connects queue pair `param.qpn` to the remote address of `id`. What becomes of
    /// the connection is reported later, through a reference [`CmId::get`] takes, as a
    /// [`CmEventKind::ConnectReply`](super::iwcm::CmEventKind::ConnectReply).
    fn iw_connect(
        _dev: &Device<T>,
        _data: &T::Data<'_>,
        _id: &CmId,
        _param: &ConnParam<'_>,
    ) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// iWARP: accepts the connection request whose identifier is `id` (its token is the one the
    /// request was reported with) on queue pair `param.qpn`.
    fn iw_accept(
        _dev: &Device<T>,
        _data: &T::Data<'_>,
        _id: &CmId,
        _param: &ConnParam<'_>,
    ) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// iWARP: rejects the connection request whose identifier is `id`, sending `private_data`.
    fn iw_reject(
        _dev: &Device<T>,
        _data: &T::Data<'_>,
        _id: &CmId,
        _private_data: &[u8],
    ) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// iWARP: listens on the local address of `id`, reporting connection requests to it.
    fn iw_create_listen(
        _dev: &Device<T>,
        _data: &T::Data<'_>,
        _id: &CmId,
        _backlog: i32,
    ) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// iWARP: stops the listener of `id`.
    fn iw_destroy_listen(_dev: &Device<T>, _data: &T::Data<'_>, _id: &CmId) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// iWARP: the event handle of the queue pair numbered `qpn`, through which the connection
    /// manager finds the queue pair. Called under a spinlock: must not sleep.
    fn iw_get_qp(_dev: &Device<T>, _data: &T::Data<'_>, _qpn: u32) -> Option<QpEvents> {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// iWARP: the connection manager takes a reference on `qp`; the device does not finish
    /// destroying it until the reference is dropped with [`DeviceOps::iw_rem_ref`]. Called under
    /// a spinlock: must not sleep.
    fn iw_add_ref(_qp: &Qp<T>) {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// iWARP: the connection manager drops a reference [`DeviceOps::iw_add_ref`] took. Called
    /// under a spinlock: must not sleep.
    fn iw_rem_ref(_qp: &Qp<T>) {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Programs a GID table entry the core added (RoCE: the core manages the table).
    fn add_gid(_dev: &Device<T>, _data: &T::Data<'_>, _attr: &GidAttr) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// Clears a GID table entry the core removed (RoCE: the core manages the table).
    fn del_gid(_dev: &Device<T>, _data: &T::Data<'_>, _attr: &GidAttr) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }
}
