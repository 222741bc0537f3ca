// SPDX-License-Identifier: GPL-2.0

//! The operations tables the core calls, and the `extern "C"` functions in them that turn the
//! core's pointers into the typed views of [`Driver`] and [`DeviceOps`] callbacks.
//!
//! Each operation has one trampoline, in the adapter of the trait it belongs to: [`Adapter`]
//! for [`Driver`], [`OpsAdapter`] for [`DeviceOps`]. The `unsafe` blocks hold the pointer
//! conversions and FFI calls; the driver's callbacks are called outside them.

use super::{
    ah::{
        self,
        Ah,
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
        CqAttr,
        CqCreateFlags,
        CqEvents,
        CqSetup,
        Pd,
        PdSetup, //
    },
    device::Device,
    driver::{
        DeviceOps,
        Driver, //
    },
    iwcm::{
        CmId,
        ConnParam, //
    },
    mr::{
        AccessFlags,
        Mr,
        UserMrReq, //
    },
    object::{
        kind,
        Events, //
    },
    qp::{
        self,
        Qp,
        QpAttrMask,
        QpEvents,
        QpSetup, //
    },
    stats,
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
    LinkLayer,
};
use crate::{bindings, error::from_result, module::this_module, prelude::*};
use core::marker::PhantomData;
use pin_init::PinInit;

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

/// Returns 0 for a callback that succeeded on a registered device, the error otherwise
/// (`ENODEV` outside registration).
fn status(ret: Option<Result>) -> c_int {
    match ret.unwrap_or(Err(ENODEV)) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// The device of a raw pointer the core passed to a callback.
///
/// # Safety
///
/// `ib` must be a live device of `T` for `'a`.
unsafe fn device<'a, T: Driver>(ib: *mut bindings::ib_device) -> &'a Device<T> {
    // SAFETY: Guaranteed by the caller.
    unsafe { Device::from_raw(ib) }
}

/// Builds the core's operations table for the [`Driver`] `T`: the operations it requires.
pub(crate) struct Adapter<T: Driver>(PhantomData<T>);

impl<T: Driver> Adapter<T> {
    /// The table [`UnregisteredDevice::new`](super::UnregisteredDevice::new) installs first.
    pub(crate) const OPS: bindings::ib_device_ops = {
        let mut ops: bindings::ib_device_ops = pin_init::zeroed();
        ops.owner = this_module::<T::OwnerModule>().as_ptr();
        ops.driver_id = T::DRIVER_ID.to_raw();
        ops.uverbs_abi_ver = T::UVERBS_ABI_VERSION;
        ops.query_device = Some(Self::query_device);
        ops.query_port = Some(Self::query_port);
        ops.get_port_immutable = Some(Self::get_port_immutable);
        ops
    };

    unsafe extern "C" fn query_device(
        ib: *mut bindings::ib_device,
        attr: *mut bindings::ib_device_attr,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: The core passes its live device, its attribute structure and a valid or
        // `NULL` udata for the duration of the call.
        let (dev, attr, mut udata) = unsafe {
            (
                device::<T>(ib),
                DeviceAttr::from_raw(attr),
                UData::from_raw(udata),
            )
        };
        status(dev.with_data(|dev, data| T::query_device(dev, data, attr, &mut udata)))
    }

    unsafe extern "C" fn query_port(
        ib: *mut bindings::ib_device,
        port: u32,
        attr: *mut bindings::ib_port_attr,
    ) -> c_int {
        // SAFETY: The core passes its live device and its attribute structure.
        let (dev, attr) = unsafe { (device::<T>(ib), PortAttr::from_raw(attr)) };
        status(dev.with_data(|dev, data| T::query_port(dev, data, port, attr)))
    }

    unsafe extern "C" fn get_port_immutable(
        ib: *mut bindings::ib_device,
        port: u32,
        immutable: *mut bindings::ib_port_immutable,
    ) -> c_int {
        // SAFETY: The core passes its live device and its structure.
        let (dev, immutable) = unsafe { (device::<T>(ib), PortImmutable::from_raw(immutable)) };
        status(dev.with_data(|dev, data| T::get_port_immutable(dev, data, port, immutable)))
    }
}

/// `ops.dereg_mr`, installed by every table with an operation that makes memory regions: they
/// all make regions of `T`, which [`Driver::dereg_mr`] releases.
///
/// # Safety
///
/// `mr` must be a region such an operation made for a device of `T`, not used afterwards.
unsafe extern "C" fn dereg_mr<T: Driver>(
    mr: *mut bindings::ib_mr,
    _udata: *mut bindings::ib_udata,
) -> c_int {
    // SAFETY: The core passes a region `reg_user_mr`, `get_dma_mr` or `alloc_mr` made, of a
    // live device; this is its last use.
    let (dev, mr) = unsafe { (device::<T>((*mr).device), Mr::<T>::from_raw(mr)) };
    let data = mr.into_data();
    dev.with_data(|dev, d| T::dereg_mr(dev, d, data));
    0
}

/// Stops the completion upcalls of a kernel CQ that `ib_free_cq` is about to free.
///
/// The core calls it before it cancels the CQ's polling (work or softirq) and then destroys the
/// CQ. Without it, a completion event the adapter raised before the CQ was destroyed in the
/// device, but whose interrupt arrives after the cancellation, would queue the polling work
/// again, and the work would run on the freed CQ.
unsafe extern "C" fn pre_destroy_cq<T: Driver>(cq: *mut bindings::ib_cq) -> c_int {
    // SAFETY: The core passes a kernel CQ that `create_cq` initialised and destroys it next;
    // `ib_free_cq` is its only user now.
    unsafe { Cq::<T>::revoke_events(cq) };
    0
}

/// Builds the core's operations table for the [`DeviceOps`] `P` of devices of `T` and bridges
/// each operation to it.
///
/// Its first instance on a device is `OpsAdapter<T, T::Ops>`, installed at allocation.
pub(crate) struct OpsAdapter<T: Driver, P: DeviceOps<T>>(PhantomData<(T, P)>);

impl<T: Driver, P: DeviceOps<T>> OpsAdapter<T, P> {
    /// The table [`UnregisteredDevice::new`](super::UnregisteredDevice::new) and
    /// [`UnregisteredDevice::add_ops`](super::UnregisteredDevice::add_ops) add.
    pub(crate) const OPS: bindings::ib_device_ops = {
        let mut ops: bindings::ib_device_ops = pin_init::zeroed();
        if P::HAS_GET_LINK_LAYER {
            ops.get_link_layer = Some(Self::get_link_layer);
        }
        if P::HAS_QUERY_PKEY {
            ops.query_pkey = Some(Self::query_pkey);
        }
        if P::HAS_ADD_GID {
            ops.add_gid = Some(Self::add_gid);
        }
        if P::HAS_DEL_GID {
            ops.del_gid = Some(Self::del_gid);
        }
        if P::HAS_QUERY_GID {
            ops.query_gid = Some(Self::query_gid);
        }
        if P::HAS_ALLOC_UCONTEXT {
            ops.alloc_ucontext = Some(Self::alloc_ucontext);
            ops.dealloc_ucontext = Some(Self::dealloc_ucontext);
            ops.disassociate_ucontext = Some(ucontext::disassociate);
            ops.mmap = Some(ucontext::mmap);
            ops.mmap_free = Some(ucontext::mmap_free);
            ops.size_ib_ucontext = size_of::<UContext<T>>();
        }
        if P::HAS_ALLOC_PD {
            ops.alloc_pd = Some(Self::alloc_pd);
            ops.dealloc_pd = Some(Self::dealloc_pd);
            ops.size_ib_pd = size_of::<Pd<T>>();
        }
        if P::HAS_CREATE_CQ {
            ops.create_cq = Some(Self::create_cq);
            ops.pre_destroy_cq = Some(pre_destroy_cq::<T>);
            ops.destroy_cq = Some(Self::destroy_cq);
            ops.size_ib_cq = size_of::<Cq<T>>();
        }
        if P::HAS_CREATE_QP {
            ops.create_qp = Some(Self::create_qp);
            ops.destroy_qp = Some(Self::destroy_qp);
            ops.size_ib_qp = size_of::<Qp<T>>();
        }
        if P::HAS_MODIFY_QP {
            ops.modify_qp = Some(Self::modify_qp);
        }
        if P::HAS_QUERY_QP {
            ops.query_qp = Some(Self::query_qp);
        }
        if P::HAS_REG_USER_MR {
            ops.reg_user_mr = Some(Self::reg_user_mr);
        }
        if P::HAS_GET_DMA_MR {
            ops.get_dma_mr = Some(Self::get_dma_mr);
        }
        if P::HAS_ALLOC_MR && P::HAS_MR_MAP_START && P::HAS_MR_SET_PAGE {
            ops.alloc_mr = Some(Self::alloc_mr);
            ops.map_mr_sg = Some(Self::map_mr_sg);
        }
        if P::HAS_REG_USER_MR || P::HAS_GET_DMA_MR || P::HAS_ALLOC_MR {
            ops.dereg_mr = Some(dereg_mr::<T>);
        }
        if P::HAS_POST_SEND {
            ops.post_send = Some(Self::post_send);
        }
        if P::HAS_POST_RECV {
            ops.post_recv = Some(Self::post_recv);
        }
        if P::HAS_POLL_CQ {
            ops.poll_cq = Some(Self::poll_cq);
        }
        if P::HAS_REQ_NOTIFY_CQ {
            ops.req_notify_cq = Some(Self::req_notify_cq);
        }
        if P::HAS_CREATE_AH {
            // Not `create_user_ah`: user space gets no address handles (see
            // `DeviceOps::create_ah`).
            ops.create_ah = Some(Self::create_ah);
            ops.destroy_ah = Some(Self::destroy_ah);
            ops.size_ib_ah = size_of::<Ah<T>>();
        }
        if P::HAS_QUERY_AH {
            ops.query_ah = Some(Self::query_ah);
        }
        if P::HAS_IW_CONNECT {
            // The connection manager calls all of them once one is there.
            assert!(
                P::HAS_IW_ACCEPT
                    && P::HAS_IW_REJECT
                    && P::HAS_IW_CREATE_LISTEN
                    && P::HAS_IW_DESTROY_LISTEN
                    && P::HAS_IW_GET_QP
                    && P::HAS_IW_ADD_REF
                    && P::HAS_IW_REM_REF
            );
            ops.iw_connect = Some(Self::iw_connect);
            ops.iw_accept = Some(Self::iw_accept);
            ops.iw_reject = Some(Self::iw_reject);
            ops.iw_create_listen = Some(Self::iw_create_listen);
            ops.iw_destroy_listen = Some(Self::iw_destroy_listen);
            ops.iw_get_qp = Some(Self::iw_get_qp);
            ops.iw_add_ref = Some(Self::iw_add_ref);
            ops.iw_rem_ref = Some(Self::iw_rem_ref);
        }
        if P::HAS_GET_HW_STATS && !T::HW_PORT_STATS.is_empty() {
            ops.alloc_hw_port_stats = Some(Self::alloc_hw_port_stats);
            ops.get_hw_stats = Some(Self::get_hw_stats);
        }
        ops
    };

    unsafe extern "C" fn query_gid(
        ib: *mut bindings::ib_device,
        port: u32,
        index: c_int,
        gid: *mut bindings::ib_gid,
    ) -> c_int {
        // SAFETY: The core passes its live device.
        let dev = unsafe { device::<T>(ib) };
        let Ok(index) = u32::try_from(index) else {
            return EINVAL.to_errno();
        };
        match dev
            .with_data(|dev, data| P::query_gid(dev, data, port, index))
            .unwrap_or(Err(ENODEV))
        {
            Ok(value) => {
                // SAFETY: `gid` is writable; any byte pattern is valid for the union.
                unsafe { (*gid).raw = value.0 };
                0
            }
            Err(e) => e.to_errno(),
        }
    }

    unsafe extern "C" fn alloc_ucontext(
        uctx: *mut bindings::ib_ucontext,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: The core passes a context of a live device and the call's udata.
        let (dev, mut udata) = unsafe { (device::<T>((*uctx).device), UData::from_raw(udata)) };
        status(dev.with_data(|dev, data| {
            let init_data = |setup: &UContextSetup<'_>, slot: *mut T::UContext| {
                let init = P::alloc_ucontext(dev, data, setup, &mut udata);
                // SAFETY: `UContext::init` passes a slot valid for writes and pinned.
                unsafe { init.__init(slot) }
            };
            // SAFETY: The core passes a zeroed context of `size_ib_ucontext` bytes whose header
            // it initialised.
            unsafe { UContext::<T>::init(uctx, init_data) }
        }))
    }

    unsafe extern "C" fn dealloc_ucontext(uctx: *mut bindings::ib_ucontext) {
        // SAFETY: The core passes a context of a live device.
        let dev = unsafe { device::<T>((*uctx).device) };
        let release = |ctx: Pin<&mut T::UContext>| {
            dev.with_data(|dev, data| P::dealloc_ucontext(dev, data, ctx));
        };
        // SAFETY: The context is one `alloc_ucontext` initialised; this is its last use.
        unsafe { UContext::<T>::destroy(uctx, release) };
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
        let (dev, values) = unsafe {
            let n = usize::try_from((*stats).num_counters).unwrap_or(0);
            (
                device::<T>(ib),
                core::slice::from_raw_parts_mut((*stats).value.as_mut_ptr(), n),
            )
        };
        let n = values.len();
        let ret = dev
            .with_data(|dev, data| P::get_hw_stats(dev, data, port, values))
            .unwrap_or(Err(ENODEV));
        from_result(|| Ok(ret?.min(n).try_into()?))
    }

    unsafe extern "C" fn alloc_pd(
        pd: *mut bindings::ib_pd,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: The core passes a PD of a live device and the call's udata.
        let (dev, mut udata) = unsafe { (device::<T>((*pd).device), UData::from_raw(udata)) };
        let setup = PdSetup {
            ucontext: udata.ucontext::<T>(),
        };
        status(dev.with_data(|dev, data| {
            let init_data = |_: Option<&Events<kind::Pd>>, slot: *mut T::Pd| {
                let init = P::alloc_pd(dev, data, &setup, &mut udata);
                // SAFETY: `Object::init` passes a slot valid for writes and pinned.
                unsafe { init.__init(slot) }
            };
            // SAFETY: The core passes a zeroed PD of `size_ib_pd` bytes whose header it
            // initialised.
            unsafe { Pd::<T>::init(pd, false, init_data) }
        }))
    }

    unsafe extern "C" fn dealloc_pd(
        pd: *mut bindings::ib_pd,
        _udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: The core passes a PD of a live device.
        let dev = unsafe { device::<T>((*pd).device) };
        let release = |p: Pin<&mut T::Pd>| {
            dev.with_data(|dev, data| P::dealloc_pd(dev, data, p));
        };
        // SAFETY: The PD is one `alloc_pd` initialised; this is its last use.
        unsafe { Pd::<T>::destroy(pd, release) };
        0
    }

    unsafe extern "C" fn create_cq(
        cq: *mut bindings::ib_cq,
        attr: *const bindings::ib_cq_init_attr,
        attrs: *mut bindings::uverbs_attr_bundle,
    ) -> c_int {
        // SAFETY: The core passes a CQ of a live device, valid attributes and the call's
        // attribute bundle (`NULL` for kernel users); the union view holding `driver_udata` is
        // the one uverbs fills.
        let (dev, attr, mut udata) = unsafe {
            let udata = if attrs.is_null() {
                core::ptr::null_mut()
            } else {
                &raw mut (*attrs).__bindgen_anon_1.__bindgen_anon_1.driver_udata
            };
            (
                device::<T>((*cq).device),
                CqAttr {
                    cqe: (*attr).cqe,
                    comp_vector: (*attr).comp_vector,
                    flags: CqCreateFlags::from_raw((*attr).flags),
                },
                UData::from_raw(udata),
            )
        };
        let ucontext = udata.ucontext::<T>();
        status(dev.with_data(|dev, data| {
            let init_data = |events: Option<&CqEvents>, slot: *mut T::Cq| {
                let setup = CqSetup {
                    cq,
                    attr,
                    events: events.ok_or(EINVAL)?,
                    ucontext,
                };
                let init = P::create_cq(dev, data, &setup, &mut udata);
                // SAFETY: `Object::init` passes a slot valid for writes and pinned.
                unsafe { init.__init(slot) }
            };
            // SAFETY: The core passes a zeroed CQ of `size_ib_cq` bytes whose header it
            // initialised.
            unsafe { Cq::<T>::init(cq, true, init_data) }
        }))
    }

    unsafe extern "C" fn destroy_cq(
        cq: *mut bindings::ib_cq,
        _udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: The core passes a CQ of a live device.
        let dev = unsafe { device::<T>((*cq).device) };
        let release = |c: Pin<&mut T::Cq>| {
            dev.with_data(|dev, data| P::destroy_cq(dev, data, c));
        };
        // SAFETY: The CQ is one `create_cq` initialised; this is its last use.
        unsafe { Cq::<T>::destroy(cq, release) };
        0
    }

    unsafe extern "C" fn create_qp(
        qp: *mut bindings::ib_qp,
        attr: *mut bindings::ib_qp_init_attr,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: The core passes a QP of a live device, its header initialised (device, PD,
        // CQs, handlers), valid attributes and the call's udata.
        let (dev, attr, mut udata) = unsafe {
            (
                device::<T>((*qp).device),
                qp::raw::init_attr::<T>(attr),
                UData::from_raw(udata),
            )
        };
        let ucontext = udata.ucontext::<T>();
        status(dev.with_data(|dev, data| {
            let init_data = |events: Option<&QpEvents>, slot: *mut T::Qp| {
                let setup = QpSetup {
                    qp,
                    events: events.ok_or(EINVAL)?,
                    ucontext,
                };
                let init = P::create_qp(dev, data, &setup, &attr, &mut udata);
                // SAFETY: `Object::init` passes a slot valid for writes and pinned.
                unsafe { init.__init(slot) }
            };
            // SAFETY: The core passes a zeroed QP of `size_ib_qp` bytes whose header it
            // initialised.
            unsafe { Qp::<T>::init(qp, true, init_data) }
        }))
    }

    unsafe extern "C" fn modify_qp(
        qp: *mut bindings::ib_qp,
        attr: *mut bindings::ib_qp_attr,
        mask: c_int,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: The core passes a live QP of this device, valid attributes and the call's
        // udata.
        let (dev, qp, attr, mut udata) = unsafe {
            (
                device::<T>((*qp).device),
                Qp::<T>::from_raw(qp),
                qp::raw::attr(attr),
                UData::from_raw(udata),
            )
        };
        // CAST: the mask is a set of bits.
        let mask = QpAttrMask::from_raw(mask as u32);
        status(dev.with_data(|dev, data| P::modify_qp(dev, data, qp, &attr, mask, &mut udata)))
    }

    unsafe extern "C" fn query_qp(
        qp: *mut bindings::ib_qp,
        attr: *mut bindings::ib_qp_attr,
        _mask: c_int,
        init: *mut bindings::ib_qp_init_attr,
    ) -> c_int {
        // SAFETY: The core passes a live QP of this device and zeroed structures to fill.
        let (dev, qp, mut out) = unsafe {
            (
                device::<T>((*qp).device),
                Qp::<T>::from_raw(qp),
                qp::raw::attr_out(attr, init),
            )
        };
        status(dev.with_data(|dev, data| P::query_qp(dev, data, qp, &mut out)))
    }

    unsafe extern "C" fn destroy_qp(
        qp: *mut bindings::ib_qp,
        _udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: The core passes a QP of a live device.
        let dev = unsafe { device::<T>((*qp).device) };
        let release = |q: Pin<&mut T::Qp>| {
            dev.with_data(|dev, data| P::destroy_qp(dev, data, q));
        };
        // SAFETY: The QP is one `create_qp` initialised; this is its last use.
        unsafe { Qp::<T>::destroy(qp, release) };
        0
    }

    unsafe extern "C" fn create_ah(
        ah: *mut bindings::ib_ah,
        init: *mut bindings::rdma_ah_init_attr,
        _udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: The core passes an address handle of a live device, its header initialised
        // (device, PD, source GID), and valid attributes.
        let (dev, attr, may_sleep) = unsafe {
            (
                device::<T>((*ah).device),
                ah::ah_attr((*init).ah_attr),
                (*init).flags & bindings::rdma_create_ah_flags_RDMA_CREATE_AH_SLEEPABLE != 0,
            )
        };
        let setup = AhSetup {
            ah,
            may_sleep,
            _p: PhantomData,
        };
        status(dev.with_data(|dev, data| {
            let init_data = |_: Option<&Events<kind::Ah>>, slot: *mut T::Ah| {
                let init = P::create_ah(dev, data, &setup, &attr);
                // SAFETY: `Object::init` passes a slot valid for writes and pinned.
                unsafe { init.__init(slot) }
            };
            // SAFETY: The core passes a zeroed address handle of `size_ib_ah` bytes whose
            // header it initialised. Without events, `init` allocates nothing, so it does not
            // sleep.
            unsafe { Ah::<T>::init(ah, false, init_data) }
        }))
    }

    unsafe extern "C" fn destroy_ah(ah: *mut bindings::ib_ah, flags: u32) -> c_int {
        // SAFETY: The core passes an address handle of a live device.
        let dev = unsafe { device::<T>((*ah).device) };
        let sleepable = flags & bindings::rdma_destroy_ah_flags_RDMA_DESTROY_AH_SLEEPABLE != 0;
        let release = |a: Pin<&mut T::Ah>| {
            dev.with_data(|dev, data| P::destroy_ah(dev, data, a, sleepable));
        };
        // SAFETY: The address handle is one `create_ah` initialised; this is its last use.
        unsafe { Ah::<T>::destroy(ah, release) };
        0
    }

    unsafe extern "C" fn query_ah(
        ah: *mut bindings::ib_ah,
        attr: *mut bindings::rdma_ah_attr,
    ) -> c_int {
        // SAFETY: The core passes a live address handle of this device and a structure to fill.
        let (dev, a, mut out) = unsafe {
            (
                device::<T>((*ah).device),
                Ah::<T>::from_raw(ah),
                ah::AhAttrOut::from_raw(attr),
            )
        };
        status(dev.with_data(|dev, data| P::query_ah(dev, data, a, &mut out)))
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
                device::<T>((*pd).device),
                Pd::<T>::from_raw(pd),
                UData::from_raw(udata),
            )
        };
        let req = UserMrReq {
            start,
            length,
            iova,
            // CAST: the rights are a set of bits.
            access: AccessFlags::from_raw(access as u32),
        };
        let room = match Mr::<T>::room() {
            Ok(room) => room,
            Err(e) => return e.to_ptr(),
        };
        let new = if dmah.is_null() {
            dev.with_data(|dev, data| P::reg_user_mr(dev, data, pd, &req, &mut udata))
                .unwrap_or(Err(ENODEV))
        } else {
            Err(EOPNOTSUPP)
        };
        Mr::<T>::into_raw(room, new)
    }

    unsafe extern "C" fn get_dma_mr(
        pd: *mut bindings::ib_pd,
        access: c_int,
    ) -> *mut bindings::ib_mr {
        // SAFETY: The core passes a live PD of this device.
        let (dev, pd) = unsafe { (device::<T>((*pd).device), Pd::<T>::from_raw(pd)) };
        // CAST: the rights are a set of bits.
        let access = AccessFlags::from_raw(access as u32);
        let room = match Mr::<T>::room() {
            Ok(room) => room,
            Err(e) => return e.to_ptr(),
        };
        let new = dev
            .with_data(|dev, data| P::get_dma_mr(dev, data, pd, access))
            .unwrap_or(Err(ENODEV));
        Mr::<T>::into_raw(room, new)
    }

    unsafe extern "C" fn post_send(
        qp: *mut bindings::ib_qp,
        wr: *const bindings::ib_send_wr,
        bad_wr: *mut *const bindings::ib_send_wr,
    ) -> c_int {
        // SAFETY: The core passes a live QP of this device and a valid chain posted to it.
        let (dev, q, wrs) = unsafe {
            (
                device::<T>((*qp).device),
                Qp::<T>::from_raw(qp),
                SendWrs::<T>::from_raw(wr, qp),
            )
        };
        let ret = dev
            .with_data(|dev, data| P::post_send(dev, data, q, wrs))
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
                device::<T>((*qp).device),
                Qp::<T>::from_raw(qp),
                RecvWrs::from_raw(wr, qp),
            )
        };
        let ret = dev
            .with_data(|dev, data| P::post_recv(dev, data, q, wrs))
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
                device::<T>((*cq).device),
                Cq::<T>::from_raw(cq),
                Wc::slice(wc, n),
            )
        };
        let got = dev
            .with_data(|dev, data| P::poll_cq(dev, data, c, wcs))
            .unwrap_or(0);
        got.min(n).try_into().unwrap_or(0)
    }

    unsafe extern "C" fn req_notify_cq(
        cq: *mut bindings::ib_cq,
        flags: bindings::ib_cq_notify_flags,
    ) -> c_int {
        // SAFETY: The core passes a live CQ of this device.
        let (dev, c) = unsafe { (device::<T>((*cq).device), Cq::<T>::from_raw(cq)) };
        let solicited = flags & bindings::ib_cq_notify_flags_IB_CQ_SOLICITED_MASK
            == bindings::ib_cq_notify_flags_IB_CQ_SOLICITED;
        let missed = flags & bindings::ib_cq_notify_flags_IB_CQ_REPORT_MISSED_EVENTS != 0;
        let ret = dev
            .with_data(|dev, data| P::req_notify_cq(dev, data, c, solicited, missed))
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
        let (dev, pd) = unsafe { (device::<T>((*pd).device), Pd::<T>::from_raw(pd)) };
        let room = match Mr::<T>::room() {
            Ok(room) => room,
            Err(e) => return e.to_ptr(),
        };
        let new = if mr_type == bindings::ib_mr_type_IB_MR_TYPE_MEM_REG {
            dev.with_data(|dev, data| P::alloc_mr(dev, data, pd, max_num_sg))
                .unwrap_or(Err(ENODEV))
        } else {
            Err(EINVAL)
        };
        Mr::<T>::into_raw(room, new)
    }

    unsafe extern "C" fn map_mr_sg(
        mr: *mut bindings::ib_mr,
        sg: *mut bindings::scatterlist,
        sg_nents: c_int,
        sg_offset: *mut crate::ffi::c_uint,
    ) -> c_int {
        // SAFETY: The core passes a region `alloc_mr` made, live for the call.
        let m = unsafe { Mr::<T>::from_raw_ref(mr) };
        if let Err(e) = P::mr_map_start(m) {
            return e.to_errno();
        }
        // SAFETY: The core passes a DMA-mapped list of `sg_nents` entries; `set_page` only
        // touches the region.
        unsafe { bindings::ib_sg_to_pages(mr, sg, sg_nents, sg_offset, Some(Self::set_page)) }
    }

    unsafe extern "C" fn set_page(mr: *mut bindings::ib_mr, addr: u64) -> c_int {
        // SAFETY: Called by `ib_sg_to_pages` for the region `map_mr_sg` passed it.
        let m = unsafe { Mr::<T>::from_raw_ref(mr) };
        status(Some(P::mr_set_page(m, addr)))
    }

    unsafe extern "C" fn get_link_layer(
        ib: *mut bindings::ib_device,
        port: u32,
    ) -> bindings::rdma_link_layer {
        // SAFETY: The core passes its live device.
        let dev = unsafe { device::<T>(ib) };
        dev.with_data(|dev, data| P::get_link_layer(dev, data, port))
            .unwrap_or(LinkLayer::Unspecified)
            .to_raw()
    }

    unsafe extern "C" fn query_pkey(
        ib: *mut bindings::ib_device,
        port: u32,
        index: u16,
        pkey: *mut u16,
    ) -> c_int {
        // SAFETY: The core passes its live device.
        let dev = unsafe { device::<T>(ib) };
        match dev
            .with_data(|dev, data| P::query_pkey(dev, data, port, index))
            .unwrap_or(Err(ENODEV))
        {
            Ok(value) => {
                // SAFETY: `pkey` is writable.
                unsafe { *pkey = value };
                0
            }
            Err(e) => e.to_errno(),
        }
    }

    unsafe extern "C" fn add_gid(
        attr: *const bindings::ib_gid_attr,
        _context: *mut *mut c_void,
    ) -> c_int {
        // SAFETY: The core passes a valid attribute of its live device.
        let (dev, attr) = unsafe { (device::<T>((*attr).device), GidAttr::from_raw(attr)) };
        status(dev.with_data(|dev, data| P::add_gid(dev, data, attr)))
    }

    unsafe extern "C" fn del_gid(
        attr: *const bindings::ib_gid_attr,
        _context: *mut *mut c_void,
    ) -> c_int {
        // SAFETY: The core passes a valid attribute of its live device.
        let (dev, attr) = unsafe { (device::<T>((*attr).device), GidAttr::from_raw(attr)) };
        status(dev.with_data(|dev, data| P::del_gid(dev, data, attr)))
    }
    /// Runs `op`, [`DeviceOps::iw_connect`] or [`DeviceOps::iw_accept`], for the connection
    /// manager's call.
    ///
    /// # Safety
    ///
    /// `id` must be a live identifier of a device of `T` and `param` valid parameters, both for
    /// the call.
    unsafe fn conn_op(
        id: *mut bindings::iw_cm_id,
        param: *mut bindings::iw_cm_conn_param,
        op: impl for<'a> FnOnce(&Device<T>, &'a T::Data<'a>, &CmId, &ConnParam<'_>) -> Result,
    ) -> c_int {
        // SAFETY: Guaranteed by the caller.
        let (dev, id, param) = unsafe {
            (
                device::<T>((*id).device),
                CmId::from_raw(id),
                ConnParam::from_raw(param),
            )
        };
        status(dev.with_data(|dev, data| op(dev, data, id, &param)))
    }

    unsafe extern "C" fn iw_connect(
        id: *mut bindings::iw_cm_id,
        param: *mut bindings::iw_cm_conn_param,
    ) -> c_int {
        // SAFETY: The connection manager passes a live identifier of this device and valid
        // parameters for the call.
        unsafe { Self::conn_op(id, param, |d, data, id, p| P::iw_connect(d, data, id, p)) }
    }

    unsafe extern "C" fn iw_accept(
        id: *mut bindings::iw_cm_id,
        param: *mut bindings::iw_cm_conn_param,
    ) -> c_int {
        // SAFETY: As in `iw_connect`.
        unsafe { Self::conn_op(id, param, |d, data, id, p| P::iw_accept(d, data, id, p)) }
    }

    unsafe extern "C" fn iw_reject(
        id: *mut bindings::iw_cm_id,
        pdata: *const c_void,
        len: u8,
    ) -> c_int {
        let pdata = if pdata.is_null() || len == 0 {
            &[][..]
        } else {
            // SAFETY: The consumer's private data of `len` bytes, valid for the call.
            unsafe { core::slice::from_raw_parts(pdata.cast::<u8>(), usize::from(len)) }
        };
        // SAFETY: As in `iw_connect`.
        let (dev, id) = unsafe { (device::<T>((*id).device), CmId::from_raw(id)) };
        status(dev.with_data(|dev, data| P::iw_reject(dev, data, id, pdata)))
    }

    unsafe extern "C" fn iw_create_listen(id: *mut bindings::iw_cm_id, backlog: c_int) -> c_int {
        // SAFETY: As in `iw_connect`.
        let (dev, id) = unsafe { (device::<T>((*id).device), CmId::from_raw(id)) };
        status(dev.with_data(|dev, data| P::iw_create_listen(dev, data, id, backlog)))
    }

    unsafe extern "C" fn iw_destroy_listen(id: *mut bindings::iw_cm_id) -> c_int {
        // SAFETY: As in `iw_connect`.
        let (dev, id) = unsafe { (device::<T>((*id).device), CmId::from_raw(id)) };
        status(dev.with_data(|dev, data| P::iw_destroy_listen(dev, data, id)))
    }

    unsafe extern "C" fn iw_get_qp(
        ib: *mut bindings::ib_device,
        qpn: c_int,
    ) -> *mut bindings::ib_qp {
        // SAFETY: The connection manager passes a live device.
        let dev = unsafe { device::<T>(ib) };
        let Ok(qpn) = u32::try_from(qpn) else {
            return core::ptr::null_mut();
        };
        dev.with_data(|dev, data| P::iw_get_qp(dev, data, qpn))
            .flatten()
            .map_or(core::ptr::null_mut(), |events| events.raw_ptr())
    }

    unsafe extern "C" fn iw_add_ref(qp: *mut bindings::ib_qp) {
        // SAFETY: The connection manager passes a live QP of this device (it got it from
        // `iw_get_qp` and holds a reference or the QP's identifier lock).
        P::iw_add_ref(unsafe { Qp::<T>::from_raw(qp) });
    }

    unsafe extern "C" fn iw_rem_ref(qp: *mut bindings::ib_qp) {
        // SAFETY: The connection manager passes a QP it holds a reference on.
        P::iw_rem_ref(unsafe { Qp::<T>::from_raw(qp) });
    }
}
