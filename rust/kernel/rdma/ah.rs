// SPDX-License-Identifier: GPL-2.0

//! Address handles (`struct ib_ah`): where the datagrams of unreliable-datagram queue pairs go,
//! and the addresses (`struct rdma_ah_attr`) that address handles and connected queue pairs
//! are given.
//!
//! The core allocates an address handle with the driver's part embedded, like the other verbs
//! objects ([`super::object`]). Kernel users create and destroy address handles where they may
//! not sleep (the connection manager does it under a spinlock): [`AhSetup::may_sleep`] and the
//! `sleepable` argument of [`DeviceOps::destroy_ah`](super::DeviceOps::destroy_ah) say whether
//! the call may.
//!
//! # Examples
//!
//! ```
//! use kernel::{
//!     prelude::*,
//!     rdma::{
//!         self,
//!         AhAttr,
//!         AhSetup, //
//!     },
//! };
//!
//! // What a driver needs of a new address handle: the peer's MAC address; and how it allocates.
//! fn ah_setup<T: rdma::Driver>(
//!     setup: &AhSetup<'_, T>,
//!     attr: &AhAttr<'_>,
//! ) -> Result<([u8; 6], kernel::alloc::Flags)> {
//!     if !attr.is_roce() || attr.grh().is_none() {
//!         return Err(EINVAL);
//!     }
//!     let flags = if setup.may_sleep() { GFP_KERNEL } else { GFP_ATOMIC };
//!     Ok((attr.dmac(), flags))
//! }
//! ```

use super::{
    cq::Pd,
    object::{
        kind,
        Object, //
    },
    Driver,
    Gid,
    GidAttr, //
};
use crate::bindings;
use core::marker::PhantomData;

/// An address handle of a device of `T`.
///
/// # Examples
///
/// ```
/// use kernel::{
///     prelude::*,
///     rdma::{
///         self,
///         Ah,
///         AhAttrOut,
///         RoceAddress, //
///     },
/// };
///
/// // The driver's part of an address handle: the address it was made for.
/// struct MyAh {
///     addr: RoceAddress,
/// }
///
/// // Reports the address of `ah` (`DeviceOps::query_ah`).
/// fn query_ah<T: rdma::Driver<Ah = MyAh>>(ah: &Ah<T>, out: &mut AhAttrOut<'_>) -> Result {
///     out.set_roce(&ah.data().addr);
///     Ok(())
/// }
/// ```
pub type Ah<T> = Object<kind::Ah, <T as Driver>::Ah>;

/// What a driver has while creating an address handle.
///
/// # Examples
///
/// ```
/// use kernel::{
///     alloc::Flags,
///     prelude::*,
///     rdma::{
///         self,
///         AhSetup, //
///     },
/// };
///
/// // The allocation flags the driver may use while creating an address handle.
/// fn alloc_flags<T: rdma::Driver>(setup: &AhSetup<'_, T>) -> Flags {
///     if setup.may_sleep() {
///         GFP_KERNEL
///     } else {
///         GFP_ATOMIC
///     }
/// }
/// ```
pub struct AhSetup<'a, T: Driver> {
    pub(crate) ah: *mut bindings::ib_ah,
    pub(crate) may_sleep: bool,
    pub(crate) _p: PhantomData<&'a T>,
}

impl<T: Driver> AhSetup<'_, T> {
    /// The protection domain of the new address handle.
    pub fn pd(&self) -> &Pd<T> {
        // SAFETY: The core set the PD, one of this device's, before calling create, and holds a
        // reference on it for the address handle's life.
        unsafe { Pd::<T>::from_raw((*self.ah).pd) }
    }

    /// Whether the caller may sleep; if not, the driver must not either (no sleeping
    /// allocation, no sleeping wait for the device).
    pub fn may_sleep(&self) -> bool {
        self.may_sleep
    }
}

/// The global routing header of an address (`struct ib_global_route`).
///
/// # Examples
///
/// ```
/// use kernel::rdma::{
///     AhAttr,
///     GlobalRoute, //
/// };
///
/// // The hop limit and traffic class of the packets to the peer, with defaults without a GRH.
/// fn ip_header_fields(attr: &AhAttr<'_>) -> (u8, u8) {
///     let grh: Option<GlobalRoute<'_>> = attr.grh();
///     grh.map_or((64, 0), |grh| (grh.hop_limit(), grh.traffic_class()))
/// }
/// ```
pub struct GlobalRoute<'a>(&'a bindings::ib_global_route);

impl GlobalRoute<'_> {
    /// The destination GID.
    pub fn dgid(&self) -> Gid {
        // SAFETY: Any byte pattern is a valid `raw` view of the union.
        Gid(unsafe { self.0.dgid.raw })
    }

    /// The flow label.
    pub fn flow_label(&self) -> u32 {
        self.0.flow_label
    }

    /// The index of the source GID.
    pub fn sgid_index(&self) -> u8 {
        self.0.sgid_index
    }

    /// The hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.0.hop_limit
    }

    /// The traffic class.
    pub fn traffic_class(&self) -> u8 {
        self.0.traffic_class
    }

    /// The source GID entry the core resolved, if any.
    pub fn sgid_attr(&self) -> Option<&GidAttr> {
        // SAFETY: The core holds a reference on the entry for the duration of the call.
        unsafe { self.0.sgid_attr.as_ref().map(|a| GidAttr::from_raw(a)) }
    }
}

/// The address of a peer (`struct rdma_ah_attr`).
///
/// # Examples
///
/// ```
/// use kernel::rdma::{
///     AhAttr,
///     QpAttr,
///     QpAttrBit,
///     QpAttrMask, //
/// };
///
/// // The peer's MAC address, if a modification of a RoCE queue pair sets its address.
/// fn peer_mac(attr: &QpAttr<'_>, mask: QpAttrMask) -> Option<[u8; 6]> {
///     let ah: AhAttr<'_> = attr.ah_attr();
///     (mask.contains(QpAttrBit::Av) && ah.is_roce()).then(|| ah.dmac())
/// }
/// ```
pub struct AhAttr<'a>(pub(crate) &'a bindings::rdma_ah_attr);

impl AhAttr<'_> {
    /// The global routing header, if the address has one.
    pub fn grh(&self) -> Option<GlobalRoute<'_>> {
        (u32::from(self.0.ah_flags) & bindings::ib_ah_flags_IB_AH_GRH != 0)
            .then_some(GlobalRoute(&self.0.grh))
    }

    /// The service level.
    pub fn sl(&self) -> u8 {
        self.0.sl
    }

    /// The port the address is reached through.
    pub fn port_num(&self) -> u32 {
        self.0.port_num
    }

    /// Whether this is a RoCE address (with a destination MAC).
    pub fn is_roce(&self) -> bool {
        self.0.type_ == bindings::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_ROCE
    }

    /// The destination MAC address (RoCE addresses).
    pub fn dmac(&self) -> [u8; 6] {
        if self.is_roce() {
            // SAFETY: The union holds the RoCE variant for RoCE addresses.
            unsafe { self.0.__bindgen_anon_1.roce.dmac }
        } else {
            [0; 6]
        }
    }
}

/// The address a query reports (`struct rdma_ah_attr`), written as a whole.
///
/// # Examples
///
/// ```
/// use kernel::rdma::{
///     AhAttrOut,
///     Gid,
///     RoceAddress, //
/// };
///
/// // Reports the address an address handle was made for.
/// fn report(out: &mut AhAttrOut<'_>, dgid: Gid, dmac: [u8; 6]) {
///     out.set_roce(&RoceAddress {
///         port: 1,
///         dgid,
///         dmac,
///         hop_limit: 64,
///         ..Default::default()
///     });
/// }
/// ```
pub struct AhAttrOut<'a>(&'a mut bindings::rdma_ah_attr);

/// A RoCE address with a global routing header: what [`AhAttrOut::set_roce`] reports.
///
/// # Examples
///
/// ```
/// use kernel::rdma::{
///     Gid,
///     RoceAddress, //
/// };
///
/// let addr = RoceAddress {
///     port: 1,
///     dgid: Gid::from_ipv4([10, 0, 0, 2]),
///     dmac: [0x02, 0x16, 0x3e, 0x00, 0x00, 0x02],
///     hop_limit: 64,
///     ..Default::default()
/// };
/// assert_eq!(addr.sl, 0);
/// assert_eq!(addr.dgid.0[12..], [10, 0, 0, 2]);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoceAddress {
    /// The port.
    pub port: u32,
    /// The service level.
    pub sl: u8,
    /// The destination GID.
    pub dgid: Gid,
    /// The flow label.
    pub flow_label: u32,
    /// The index of the source GID.
    pub sgid_index: u8,
    /// The hop limit.
    pub hop_limit: u8,
    /// The traffic class.
    pub traffic_class: u8,
    /// The destination MAC address.
    pub dmac: [u8; 6],
}

impl AhAttrOut<'_> {
    /// Reports `addr`; everything else is zero.
    pub fn set_roce(&mut self, addr: &RoceAddress) {
        let mut a: bindings::rdma_ah_attr = pin_init::zeroed();
        a.type_ = bindings::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_ROCE;
        a.sl = addr.sl;
        a.port_num = addr.port;
        // CAST: the flag is bit 0 of the `u8` field.
        a.ah_flags = bindings::ib_ah_flags_IB_AH_GRH as u8;
        a.grh.dgid.raw = addr.dgid.0;
        a.grh.flow_label = addr.flow_label;
        a.grh.sgid_index = addr.sgid_index;
        a.grh.hop_limit = addr.hop_limit;
        a.grh.traffic_class = addr.traffic_class;
        a.__bindgen_anon_1.roce = bindings::roce_ah_attr { dmac: addr.dmac };
        *self.0 = a;
    }

    /// # Safety
    ///
    /// `attr` must be valid for writes for `'a`.
    pub(crate) unsafe fn from_raw<'a>(attr: *mut bindings::rdma_ah_attr) -> AhAttrOut<'a> {
        // SAFETY: Guaranteed by the caller.
        AhAttrOut(unsafe { &mut *attr })
    }
}

/// # Safety
///
/// `attr` must be valid for `'a`.
pub(crate) unsafe fn ah_attr<'a>(attr: *const bindings::rdma_ah_attr) -> AhAttr<'a> {
    // SAFETY: Guaranteed by the caller.
    AhAttr(unsafe { &*attr })
}
