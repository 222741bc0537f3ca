// SPDX-License-Identifier: GPL-2.0

//! RDMA devices (InfiniBand, RoCE, iWARP) and their verbs objects.
//!
//! C headers: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h),
//! [`include/rdma/uverbs_ioctl.h`](srctree/include/rdma/uverbs_ioctl.h).
//!
//! A driver implements [`Driver`] (the operations common to its devices) and, for operations
//! that differ between its devices, [`DeviceOps`] on marker types. It allocates an
//! [`UnregisteredDevice`], adds the [`DeviceOps`] that device needs, describes it (node type,
//! GUID, ports, network devices) and hands it to [`Registration::new`] together with the data
//! its callbacks need. The RDMA core then calls the driver through the operations tables built
//! from the traits: an operation the driver does not implement stays `NULL`, so the core sees
//! exactly what the driver provides. The [`driver`] module states where each operation is
//! called from.
//!
//! Verbs objects (user contexts, protection domains, completion queues, queue pairs, address
//! handles) are allocated by the core with the driver's data embedded after the core's header,
//! so every object type here is `#[repr(C)]` with the C object at offset 0. The core frees these
//! allocations itself without running Rust destructors: the abstractions drop the driver's part
//! in the destroy callbacks and on failed creation.
//!
//! # Examples
//!
//! ```
//! use kernel::{
//!     device::{
//!         Bound,
//!         Device, //
//!     },
//!     net::device::NetDevice,
//!     prelude::*,
//!     rdma::{
//!         self,
//!         Guid,
//!         NodeType,
//!         Registration,
//!         UnregisteredDevice, //
//!     },
//! };
//!
//! // Describes an iWARP device of `T` on `ndev` and registers it with `data`.
//! fn register<'a, T: rdma::Driver>(
//!     parent: &'a Device<Bound>,
//!     ndev: &NetDevice,
//!     mac: [u8; 6],
//!     data: T::Data<'a>,
//! ) -> Result<Registration<'a, T>> {
//!     let mut dev = UnregisteredDevice::<T>::new(parent)?;
//!     dev.set_node_type(NodeType::Rnic)
//!         .set_node_guid(Guid::from_mac(mac))
//!         .set_netdev(1, ndev)?;
//!     // SAFETY: The caller keeps the registration in its bound data, dropped at unbind.
//!     unsafe { Registration::new(dev, c"mydev_%d", parent, Ok::<_, Error>(data)) }
//! }
//! ```

/// The methods of a flag set (declared with `impl_flags!`) that keeps the bits it does not
/// name, as the core passes them: `from_raw`, `unnamed` and `is_empty`.
macro_rules! open_flags {
    ($flags:ident, $ty:ty) => {
        impl $flags {
            /// The flags of the C value `raw`, unnamed ones included.
            pub(crate) const fn from_raw(raw: $ty) -> Self {
                Self(raw)
            }

            /// The bits that are none of the named flags.
            pub const fn unnamed(self) -> $ty {
                self.0 & !Self::all_bits()
            }

            /// Whether no flag at all is set, named or not.
            pub const fn is_empty(self) -> bool {
                self.0 == 0
            }
        }
    };
}

mod adapter;
pub mod ah;
pub mod attr;
pub mod cq;
pub mod device;
pub mod driver;
pub mod iwcm;
pub mod mr;
mod netdev;
pub mod object;
pub mod qp;
pub mod registration;
pub mod stats;
pub mod ucontext;
pub mod udata;
pub mod umem;
pub mod wr;

pub use self::ah::{
    Ah,
    AhAttr,
    AhAttrOut,
    AhSetup,
    GlobalRoute,
    RoceAddress, //
};
pub use self::attr::{
    DeviceAttr,
    GidAttr,
    PortAttr,
    PortImmutable, //
};
pub use self::cq::{
    Cq,
    CqAttr,
    CqCreateFlag,
    CqCreateFlags,
    CqEvents,
    CqSetup,
    Pd,
    PdSetup, //
};
pub use self::device::{
    Device,
    UnregisteredDevice, //
};
pub use self::driver::{
    DeviceOps,
    Driver, //
};
pub use self::mr::{
    AccessFlag,
    AccessFlags,
    Mr,
    NewMr,
    UserMrReq, //
};
pub use self::qp::{
    Qp,
    QpAttr,
    QpAttrBit,
    QpAttrMask,
    QpAttrOut,
    QpCap,
    QpCreateFlag,
    QpCreateFlags,
    QpEvents,
    QpInitAttr,
    QpSetup,
    QpState,
    QpType, //
};
pub use self::registration::Registration;
pub use self::stats::StatDesc;
pub use self::ucontext::{
    MmapCaching,
    UContext,
    UContextSetup, //
};
pub use self::udata::UData;
pub use self::umem::Umem;
pub use self::wr::{
    MappedBuf,
    NetworkType,
    RecvWr,
    RecvWrs,
    SendFlag,
    SendFlags,
    SendWr,
    SendWrs,
    Sge,
    UdWr,
    Wc,
    WcFlag,
    WcFlags,
    WcOpcode,
    WcStatus,
    WrOpcode, //
};

use crate::bindings;

/// A 128-bit global identifier (GID), in network byte order.
///
/// # Examples
///
/// ```
/// use kernel::rdma::Gid;
///
/// let gid = Gid::from_ipv4([192, 168, 0, 1]);
/// assert_eq!(gid.0[10..], [0xff, 0xff, 192, 168, 0, 1]);
/// assert_eq!(gid.to_ipv4(), Some([192, 168, 0, 1]));
///
/// let gid = Gid::from_mac([0x02, 0x16, 0x3e, 0x01, 0x02, 0x03]);
/// assert_eq!(gid.0[..6], [0x02, 0x16, 0x3e, 0x01, 0x02, 0x03]);
/// assert_eq!(gid.0[6..], [0; 10]);
/// assert_eq!(gid.to_ipv4(), None);
/// ```
#[repr(transparent)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The IPv4-mapped IPv6 GID of an IPv4 address (`::ffff:a.b.c.d`).
    pub const fn from_ipv4(addr: [u8; 4]) -> Self {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12] = addr[0];
        gid[13] = addr[1];
        gid[14] = addr[2];
        gid[15] = addr[3];
        Self(gid)
    }

    /// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`); `None` for any other GID.
    pub fn to_ipv4(&self) -> Option<[u8; 4]> {
        let (prefix, v4) = self.0.split_at(12);
        if prefix[..10].iter().any(|&b| b != 0) || prefix[10..] != [0xff, 0xff] {
            return None;
        }
        v4.try_into().ok()
    }

    /// The GID whose first eight bytes are zero and last eight hold `mac` as an EUI-64 (the
    /// form iWARP devices report).
    pub fn from_mac(mac: [u8; 6]) -> Self {
        let mut gid = [0u8; 16];
        gid[..6].copy_from_slice(&mac);
        Self(gid)
    }
}

/// A 64-bit GUID, kept in network byte order as the RDMA core stores it.
///
/// # Examples
///
/// ```
/// use kernel::rdma::Guid;
///
/// let guid = Guid::from_mac([0x00, 0x16, 0x3e, 0x01, 0x02, 0x03]);
/// assert_eq!(guid.to_bytes(), [0x02, 0x16, 0x3e, 0xff, 0xfe, 0x01, 0x02, 0x03]);
/// assert_eq!(Guid::from_bytes(guid.to_bytes()), guid);
/// ```
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Guid(u64);

impl Guid {
    /// A GUID from its eight bytes, most significant first.
    pub const fn from_bytes(bytes: [u8; 8]) -> Self {
        Self(u64::from_ne_bytes(bytes))
    }

    /// The modified EUI-64 of a MAC address (universal/local bit inverted, `ff:fe` inserted),
    /// the usual GUID of an Ethernet-based RDMA device.
    pub const fn from_mac(mac: [u8; 6]) -> Self {
        Self::from_bytes([
            mac[0] ^ 2,
            mac[1],
            mac[2],
            0xff,
            0xfe,
            mac[3],
            mac[4],
            mac[5],
        ])
    }

    /// The GUID's eight bytes, most significant first.
    pub const fn to_bytes(self) -> [u8; 8] {
        self.0.to_ne_bytes()
    }

    fn raw(self) -> bindings::__be64 {
        self.0
    }
}

/// Defines a `#[repr(u32)]` enum whose variants are C constants.
macro_rules! c_enum {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($(#[$vmeta:meta])* $variant:ident = $value:expr,)* }) => {
        $(#[$meta])*
        #[repr(u32)]
        #[derive(Copy, Clone, Debug, PartialEq, Eq)]
        $vis enum $name {
            $($(#[$vmeta])* $variant = $value,)*
        }

        impl $name {
            /// The C value.
            pub const fn to_raw(self) -> u32 {
                self as u32
            }

            /// The variant with the C value `raw`, if there is one.
            #[allow(dead_code)]
            pub fn from_raw(raw: u32) -> Option<Self> {
                [$(Self::$variant),*].into_iter().find(|v| v.to_raw() == raw)
            }
        }
    };
}
pub(crate) use c_enum;

c_enum! {
    /// The kind of node a device is (`RDMA_NODE_*`).
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{
    ///     self,
    ///     NodeType,
    ///     UnregisteredDevice, //
    /// };
    ///
    /// fn describe_rnic<T: rdma::Driver>(dev: &mut UnregisteredDevice<T>) {
    ///     dev.set_node_type(NodeType::Rnic);
    /// }
    ///
    /// assert_eq!(NodeType::from_raw(NodeType::Rnic.to_raw()), Some(NodeType::Rnic));
    /// ```
    pub enum NodeType {
        /// An InfiniBand channel adapter; also RoCE devices.
        IbCa = bindings::RDMA_NODE_IB_CA,
        /// An RDMA-enabled NIC (iWARP).
        Rnic = bindings::RDMA_NODE_RNIC,
    }
}

c_enum! {
    /// The link layer of a port.
    ///
    /// # Examples
    ///
    /// [`DeviceOps::get_link_layer`] returns one; the [`DeviceOps`] example shows it. The C values
    /// convert both ways:
    ///
    /// ```
    /// use kernel::rdma::LinkLayer;
    ///
    /// assert_eq!(LinkLayer::from_raw(LinkLayer::Ethernet.to_raw()), Some(LinkLayer::Ethernet));
    /// assert_eq!(LinkLayer::Unspecified.to_raw(), 0);
    /// ```
    pub enum LinkLayer {
        /// Not specified (derived from the node type).
        Unspecified = bindings::rdma_link_layer_IB_LINK_LAYER_UNSPECIFIED,
        /// InfiniBand.
        InfiniBand = bindings::rdma_link_layer_IB_LINK_LAYER_INFINIBAND,
        /// Ethernet (RoCE, iWARP).
        Ethernet = bindings::rdma_link_layer_IB_LINK_LAYER_ETHERNET,
    }
}

c_enum! {
    /// How a GID is used on the wire.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{
    ///     GidAttr,
    ///     GidType, //
    /// };
    ///
    /// // Whether the GID table entry being added is one the device routes over UDP.
    /// fn is_roce_v2(attr: &GidAttr) -> bool {
    ///     attr.gid_type() == Some(GidType::RoceV2)
    /// }
    /// ```
    pub enum GidType {
        /// InfiniBand.
        Ib = bindings::ib_gid_type_IB_GID_TYPE_IB,
        /// RoCE v1 (Ethernet link layer).
        RoceV1 = bindings::ib_gid_type_IB_GID_TYPE_ROCE,
        /// RoCE v2 (UDP/IP encapsulation).
        RoceV2 = bindings::ib_gid_type_IB_GID_TYPE_ROCE_UDP_ENCAP,
    }
}

/// A driver's identity towards user space (`enum rdma_driver_id`): libibverbs picks the
/// provider by it.
///
/// # Examples
///
/// A driver declares its identity as [`Driver::DRIVER_ID`]:
///
/// ```
/// use kernel::rdma::DriverId;
///
/// // What a driver without a user-space provider of its own declares.
/// const DRIVER_ID: DriverId = DriverId::UNKNOWN;
///
/// assert_eq!(DRIVER_ID.to_raw(), 0);
/// assert!(DriverId::ERDMA != DRIVER_ID);
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DriverId(u32);

impl DriverId {
    /// No identity: libibverbs matches providers by other means.
    pub const UNKNOWN: Self = Self(bindings::rdma_driver_id_RDMA_DRIVER_UNKNOWN);
    /// Soft-RoCE (`rxe`).
    pub const RXE: Self = Self(bindings::rdma_driver_id_RDMA_DRIVER_RXE);
    /// Soft-iWARP (`siw`).
    pub const SIW: Self = Self(bindings::rdma_driver_id_RDMA_DRIVER_SIW);
    /// Alibaba Elastic RDMA Adapter (`erdma`).
    pub const ERDMA: Self = Self(bindings::rdma_driver_id_RDMA_DRIVER_ERDMA);
    /// Microsoft Azure Network Adapter (`mana`).
    pub const MANA: Self = Self(bindings::rdma_driver_id_RDMA_DRIVER_MANA);

    /// The C value.
    pub const fn to_raw(self) -> u32 {
        self.0
    }
}

#[macros::kunit_tests(rust_kernel_rdma)]
mod tests {
    use super::*;

    #[test]
    fn guid_from_mac_is_modified_eui64() {
        let guid = Guid::from_mac([0x02, 0x11, 0x22, 0x33, 0x44, 0x55]);
        assert_eq!(
            guid.to_bytes(),
            [0x00, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55]
        );
        let guid = Guid::from_mac([0x00, 0x16, 0x3e, 0x01, 0x02, 0x03]);
        assert_eq!(
            guid.to_bytes(),
            [0x02, 0x16, 0x3e, 0xff, 0xfe, 0x01, 0x02, 0x03]
        );
    }

    #[test]
    fn gid_forms() {
        let gid = Gid::from_ipv4([10, 0, 0, 1]);
        assert_eq!(&gid.0[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
        assert_eq!(&gid.0[12..], &[10, 0, 0, 1]);
        let gid = Gid::from_mac([1, 2, 3, 4, 5, 6]);
        assert_eq!(gid.0, [1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn mtu_from_bytes() {
        use attr::Mtu;
        assert_eq!(Mtu::from_bytes(9000), Mtu::Mtu4096);
        assert_eq!(Mtu::from_bytes(4096), Mtu::Mtu4096);
        assert_eq!(Mtu::from_bytes(1500), Mtu::Mtu1024);
        assert_eq!(Mtu::from_bytes(2048), Mtu::Mtu2048);
        assert_eq!(Mtu::from_bytes(600), Mtu::Mtu512);
        assert_eq!(Mtu::from_bytes(100), Mtu::Mtu256);
    }
}
