// SPDX-License-Identifier: GPL-2.0

//! Device, port and GID attributes.
//!
//! The core hands the driver zeroed attribute structures to fill in; these wrappers give typed
//! setters for the fields a driver reports.
//!
//! # Examples
//!
//! ```
//! use kernel::{
//!     net::device::NetDevice,
//!     prelude::*,
//!     rdma::{
//!         attr::{
//!             Mtu,
//!             PhysState,
//!             PortState, //
//!         },
//!         DeviceAttr,
//!         PortAttr, //
//!     },
//! };
//!
//! // What a small device reports (`Driver::query_device`).
//! fn query_device(attr: &mut DeviceAttr) -> Result {
//!     attr.set_max_qp(1024)
//!         .set_max_cq(2048)
//!         .set_max_cqe(4096)
//!         .set_max_mr_size(u64::MAX);
//!     Ok(())
//! }
//!
//! // What its port reports, from its network device (`Driver::query_port`).
//! fn query_port(attr: &mut PortAttr, ndev: &NetDevice) -> Result {
//!     let mtu = Mtu::from_bytes(ndev.mtu());
//!     attr.set_mtu(Mtu::Mtu4096, mtu);
//!     if ndev.is_running() && ndev.carrier_ok() {
//!         attr.set_state(PortState::Active, PhysState::LinkUp);
//!     } else {
//!         attr.set_state(PortState::Down, PhysState::Disabled);
//!     }
//!     Ok(())
//! }
//! ```

use super::{
    c_enum,
    Gid,
    GidType,
    Guid, //
};
use crate::bindings;

/// Defines setters for plain fields of a wrapped C struct.
macro_rules! setters {
    ($($(#[$meta:meta])* $setter:ident => $field:ident: $ty:ty;)*) => {
        $(
            $(#[$meta])*
            #[inline]
            pub fn $setter(&mut self, value: $ty) -> &mut Self {
                self.0.$field = value.into();
                self
            }
        )*
    };
}

crate::impl_flags!(
    /// Device capability flags (`enum ib_device_cap_flags`), for
    /// [`DeviceAttr::set_device_cap_flags`].
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::attr::{
    ///     DeviceCap,
    ///     DeviceCapFlags, //
    /// };
    ///
    /// let flags: DeviceCapFlags = DeviceCap::MemMgtExtensions.into();
    /// assert!(flags.contains(DeviceCap::MemMgtExtensions));
    /// assert!(!DeviceCapFlags::empty().contains(DeviceCap::MemMgtExtensions));
    /// ```
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct DeviceCapFlags(u64);

    /// One device capability.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{
    ///     attr::DeviceCap,
    ///     DeviceAttr, //
    /// };
    ///
    /// // A device that supports fast registration and local invalidation.
    /// fn report_caps(attr: &mut DeviceAttr) {
    ///     attr.set_device_cap_flags(DeviceCap::MemMgtExtensions.into());
    /// }
    /// ```
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum DeviceCap {
        /// Memory management extensions: fast registration, local invalidation, send with
        /// invalidate.
        // CAST: the flags are a 64-bit mask.
        MemMgtExtensions = bindings::ib_device_cap_flags_IB_DEVICE_MEM_MGT_EXTENSIONS as u64,
    }
);

crate::impl_flags!(
    /// Kernel-only capability flags (`enum ib_kernel_cap_flags`), for
    /// [`DeviceAttr::set_kernel_cap_flags`].
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::attr::{
    ///     KernelCap,
    ///     KernelCapFlags, //
    /// };
    ///
    /// let flags = KernelCapFlags::from(KernelCap::LocalDmaLkey);
    /// assert!(flags.contains(KernelCap::LocalDmaLkey));
    /// assert_eq!(u64::from(KernelCapFlags::empty()), 0);
    /// ```
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct KernelCapFlags(u64);

    /// One kernel-only capability.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{
    ///     attr::KernelCap,
    ///     DeviceAttr, //
    /// };
    ///
    /// // A device whose kernel users may address memory by bus address (see
    /// // `UnregisteredDevice::set_local_dma_lkey`).
    /// fn report_kernel_caps(attr: &mut DeviceAttr) {
    ///     attr.set_kernel_cap_flags(KernelCap::LocalDmaLkey.into());
    /// }
    /// ```
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum KernelCap {
        /// The device supports the local DMA lkey.
        // CAST: the flags are a 64-bit mask.
        LocalDmaLkey = bindings::ib_kernel_cap_flags_IBK_LOCAL_DMA_LKEY as u64,
    }
);

crate::impl_flags!(
    /// Port capability flags (`enum ib_port_capability_mask_bits`), for
    /// [`PortAttr::set_port_cap_flags`].
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::attr::{
    ///     PortCap,
    ///     PortCapFlags, //
    /// };
    ///
    /// let caps: PortCapFlags = PortCap::CmSup | PortCap::DeviceMgmtSup;
    /// assert!(caps.contains_all(PortCap::CmSup | PortCap::DeviceMgmtSup));
    /// assert!(!PortCapFlags::empty().contains_any(caps));
    /// ```
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct PortCapFlags(u32);

    /// One port capability.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{
    ///     attr::PortCap,
    ///     PortAttr, //
    /// };
    ///
    /// fn report_port_caps(attr: &mut PortAttr) {
    ///     attr.set_port_cap_flags(PortCap::CmSup | PortCap::DeviceMgmtSup);
    /// }
    /// ```
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum PortCap {
        /// Connection management is supported.
        CmSup = bindings::ib_port_capability_mask_bits_IB_PORT_CM_SUP,
        /// Device management is supported.
        DeviceMgmtSup = bindings::ib_port_capability_mask_bits_IB_PORT_DEVICE_MGMT_SUP,
    }
);

crate::impl_flags!(
    /// Core capabilities of a port (`RDMA_CORE_PORT_*`), for
    /// [`PortImmutable::set_core_cap_flags`].
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::attr::{
    ///     CoreCap,
    ///     CoreCapFlags, //
    /// };
    ///
    /// let iwarp = CoreCapFlags::from(CoreCap::Iwarp);
    /// assert!(iwarp.contains(CoreCap::Iwarp));
    /// assert!(!iwarp.contains(CoreCap::RoceUdpEncap));
    /// ```
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct CoreCapFlags(u32);

    /// One core capability: the port's protocol.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{
    ///     attr::{
    ///         CoreCap,
    ///         MGMT_MAD_SIZE, //
    ///     },
    ///     PortImmutable, //
    /// };
    ///
    /// // The protocol of a port: RoCE v2 ports have management datagrams, iWARP ports do not.
    /// fn report_protocol(immutable: &mut PortImmutable, roce: bool) {
    ///     if roce {
    ///         immutable
    ///             .set_core_cap_flags(CoreCap::RoceUdpEncap.into())
    ///             .set_max_mad_size(MGMT_MAD_SIZE);
    ///     } else {
    ///         immutable.set_core_cap_flags(CoreCap::Iwarp.into());
    ///     }
    /// }
    /// ```
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum CoreCap {
        /// iWARP.
        Iwarp = bindings::RDMA_CORE_PORT_IWARP,
        /// RoCE v2 (UDP encapsulation).
        RoceUdpEncap = bindings::RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP,
    }
);

/// The size of a management datagram, for [`PortImmutable::set_max_mad_size`].
pub const MGMT_MAD_SIZE: u32 = bindings::IB_MGMT_MAD_SIZE;

c_enum! {
    /// Atomic operation support.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{
    ///     attr::AtomicCap,
    ///     DeviceAttr, //
    /// };
    ///
    /// fn report_atomics(attr: &mut DeviceAttr, supported: bool) {
    ///     attr.set_atomic_cap(if supported {
    ///         AtomicCap::Glob
    ///     } else {
    ///         AtomicCap::None
    ///     });
    /// }
    /// ```
    pub enum AtomicCap {
        /// No atomics.
        None = bindings::ib_atomic_cap_IB_ATOMIC_NONE,
        /// Atomic within the device.
        Hca = bindings::ib_atomic_cap_IB_ATOMIC_HCA,
        /// Atomic with respect to every agent.
        Glob = bindings::ib_atomic_cap_IB_ATOMIC_GLOB,
    }
}

c_enum! {
    /// Logical port state.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{
    ///     attr::{
    ///         PhysState,
    ///         PortState, //
    ///     },
    ///     PortAttr, //
    /// };
    ///
    /// fn report_link(attr: &mut PortAttr, up: bool) {
    ///     if up {
    ///         attr.set_state(PortState::Active, PhysState::LinkUp);
    ///     } else {
    ///         attr.set_state(PortState::Down, PhysState::Disabled);
    ///     }
    /// }
    ///
    /// assert_eq!(PortState::from_raw(PortState::Active.to_raw()), Some(PortState::Active));
    /// ```
    pub enum PortState {
        /// The link is down.
        Down = bindings::ib_port_state_IB_PORT_DOWN,
        /// The link is up, not yet active.
        Init = bindings::ib_port_state_IB_PORT_INIT,
        /// The port can carry traffic.
        Active = bindings::ib_port_state_IB_PORT_ACTIVE,
    }
}

c_enum! {
    /// Physical port state.
    ///
    /// # Examples
    ///
    /// A port reports it with [`PortAttr::set_state`]; the module example shows it.
    ///
    /// ```
    /// use kernel::rdma::attr::PhysState;
    ///
    /// assert_eq!(PhysState::from_raw(PhysState::LinkUp.to_raw()), Some(PhysState::LinkUp));
    /// assert!(PhysState::LinkUp != PhysState::Disabled);
    /// ```
    pub enum PhysState {
        /// Disabled.
        Disabled = bindings::ib_port_phys_state_IB_PORT_PHYS_STATE_DISABLED,
        /// The link is up.
        LinkUp = bindings::ib_port_phys_state_IB_PORT_PHYS_STATE_LINK_UP,
    }
}

c_enum! {
    /// An RDMA path MTU.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::attr::Mtu;
    ///
    /// // The path MTU of a port on an Ethernet link of 1500 bytes, and of a jumbo one.
    /// assert_eq!(Mtu::from_bytes(1500), Mtu::Mtu1024);
    /// assert_eq!(Mtu::from_bytes(9000), Mtu::Mtu4096);
    /// ```
    pub enum Mtu {
        /// 256 bytes.
        Mtu256 = bindings::ib_mtu_IB_MTU_256,
        /// 512 bytes.
        Mtu512 = bindings::ib_mtu_IB_MTU_512,
        /// 1024 bytes.
        Mtu1024 = bindings::ib_mtu_IB_MTU_1024,
        /// 2048 bytes.
        Mtu2048 = bindings::ib_mtu_IB_MTU_2048,
        /// 4096 bytes.
        Mtu4096 = bindings::ib_mtu_IB_MTU_4096,
    }
}

impl Mtu {
    /// The largest RDMA MTU that fits in a link MTU of `bytes`.
    pub const fn from_bytes(bytes: u32) -> Self {
        match bytes {
            4096.. => Self::Mtu4096,
            2048.. => Self::Mtu2048,
            1024.. => Self::Mtu1024,
            512.. => Self::Mtu512,
            _ => Self::Mtu256,
        }
    }
}

/// Device attributes (`struct ib_device_attr`), as reported by `query_device`.
///
/// # Examples
///
/// ```
/// use kernel::{
///     prelude::*,
///     rdma::{
///         attr::DeviceCap,
///         DeviceAttr,
///         Guid, //
///     },
/// };
///
/// // What a device reports (`Driver::query_device`).
/// fn query_device(attr: &mut DeviceAttr, mac: [u8; 6]) -> Result {
///     attr.set_sys_image_guid(Guid::from_mac(mac))
///         .set_vendor_id(0x1ded)
///         .set_max_qp(1024)
///         .set_max_qp_wr(4096)
///         .set_max_send_sge(4)
///         .set_max_recv_sge(1)
///         .set_max_cq(2048)
///         .set_max_cqe(4096)
///         .set_max_pd(1024)
///         .set_max_mr(2048)
///         .set_page_size_cap(0x1000 | 0x20_0000)
///         .set_device_cap_flags(DeviceCap::MemMgtExtensions.into());
///     Ok(())
/// }
/// ```
#[repr(transparent)]
pub struct DeviceAttr(bindings::ib_device_attr);

impl DeviceAttr {
    /// Wraps the core's attribute structure.
    ///
    /// # Safety
    ///
    /// `ptr` must be valid for reads and writes, and not otherwise accessed, for `'a`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::ib_device_attr) -> &'a mut Self {
        // SAFETY: `DeviceAttr` is transparent over `ib_device_attr`; the caller guarantees
        // exclusive access.
        unsafe { &mut *ptr.cast() }
    }

    /// Sets the system image GUID.
    pub fn set_sys_image_guid(&mut self, guid: Guid) -> &mut Self {
        self.0.sys_image_guid = guid.raw();
        self
    }

    /// Sets the atomic capability.
    pub fn set_atomic_cap(&mut self, cap: AtomicCap) -> &mut Self {
        self.0.atomic_cap = cap.to_raw();
        self
    }

    setters! {
        /// Sets the firmware version.
        set_fw_ver => fw_ver: u64;
        /// Sets the largest memory region, in bytes.
        set_max_mr_size => max_mr_size: u64;
        /// Sets the supported page sizes (a bit per size).
        set_page_size_cap => page_size_cap: u64;
        /// Sets the PCI vendor ID.
        set_vendor_id => vendor_id: u32;
        /// Sets the vendor's part (device) ID.
        set_vendor_part_id => vendor_part_id: u32;
        /// Sets the hardware version.
        set_hw_ver => hw_ver: u32;
        /// Sets the number of queue pairs.
        set_max_qp => max_qp: u32;
        /// Sets the depth of a work queue.
        set_max_qp_wr => max_qp_wr: u32;
        /// Sets the device capability flags.
        set_device_cap_flags => device_cap_flags: DeviceCapFlags;
        /// Sets the kernel capability flags.
        set_kernel_cap_flags => kernel_cap_flags: KernelCapFlags;
        /// Sets the scatter/gather entries of a send work request.
        set_max_send_sge => max_send_sge: u32;
        /// Sets the scatter/gather entries of a receive work request.
        set_max_recv_sge => max_recv_sge: u32;
        /// Sets the scatter/gather entries of an RDMA Read.
        set_max_sge_rd => max_sge_rd: u32;
        /// Sets the number of completion queues.
        set_max_cq => max_cq: u32;
        /// Sets the depth of a completion queue.
        set_max_cqe => max_cqe: u32;
        /// Sets the number of memory regions.
        set_max_mr => max_mr: u32;
        /// Sets the number of protection domains.
        set_max_pd => max_pd: u32;
        /// Sets the outstanding RDMA Reads and atomics a QP may be the target of.
        set_max_qp_rd_atom => max_qp_rd_atom: u32;
        /// Sets the outstanding RDMA Reads and atomics a QP may initiate.
        set_max_qp_init_rd_atom => max_qp_init_rd_atom: u32;
        /// Sets the outstanding RDMA Reads and atomics of the whole device.
        set_max_res_rd_atom => max_res_rd_atom: u32;
        /// Sets the number of memory windows.
        set_max_mw => max_mw: u32;
        /// Sets the number of address handles.
        set_max_ah => max_ah: u32;
        /// Sets the pages of a fast-registration list.
        set_max_fast_reg_page_list_len => max_fast_reg_page_list_len: u32;
        /// Sets the number of partition keys.
        set_max_pkeys => max_pkeys: u16;
    }
}

/// Port attributes (`struct ib_port_attr`), as reported by `query_port`.
///
/// # Examples
///
/// ```
/// use kernel::{
///     prelude::*,
///     rdma::{
///         self,
///         attr::{
///             Mtu,
///             PhysState,
///             PortState, //
///         },
///         PortAttr, //
///     },
/// };
///
/// // What a port reports from its network device (`Driver::query_port`).
/// fn query_port<T: rdma::Driver>(
///     dev: &rdma::Device<T>,
///     port: u32,
///     attr: &mut PortAttr,
/// ) -> Result {
///     attr.set_state(PortState::Down, PhysState::Disabled)
///         .set_gid_tbl_len(1)
///         .set_max_msg_sz(u32::MAX);
///     if let Some(ndev) = dev.netdev(port) {
///         let mtu = Mtu::from_bytes(ndev.mtu());
///         attr.set_mtu(mtu, mtu);
///         if ndev.is_running() && ndev.carrier_ok() {
///             attr.set_state(PortState::Active, PhysState::LinkUp);
///         }
///     }
///     Ok(())
/// }
/// ```
#[repr(transparent)]
pub struct PortAttr(bindings::ib_port_attr);

impl PortAttr {
    /// Wraps the core's attribute structure.
    ///
    /// # Safety
    ///
    /// `ptr` must be valid for reads and writes, and not otherwise accessed, for `'a`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::ib_port_attr) -> &'a mut Self {
        // SAFETY: `PortAttr` is transparent over `ib_port_attr`; the caller guarantees exclusive
        // access.
        unsafe { &mut *ptr.cast() }
    }

    /// Sets the logical and physical state.
    pub fn set_state(&mut self, state: PortState, phys: PhysState) -> &mut Self {
        self.0.state = state.to_raw();
        // CAST: physical states fit in a byte.
        self.0.phys_state = phys.to_raw() as u8;
        self
    }

    /// Sets the largest and the active MTU.
    pub fn set_mtu(&mut self, max: Mtu, active: Mtu) -> &mut Self {
        self.0.max_mtu = max.to_raw();
        self.0.active_mtu = active.to_raw();
        self
    }

    /// Sets whether the GID table holds IP-based GIDs (RoCE).
    pub fn set_ip_gids(&mut self, ip_gids: bool) -> &mut Self {
        self.0.set_ip_gids(ip_gids.into());
        self
    }

    setters! {
        /// Sets the size of the GID table.
        set_gid_tbl_len => gid_tbl_len: i32;
        /// Sets the port capability flags.
        set_port_cap_flags => port_cap_flags: PortCapFlags;
        /// Sets the largest message, in bytes.
        set_max_msg_sz => max_msg_sz: u32;
        /// Sets the size of the partition key table.
        set_pkey_tbl_len => pkey_tbl_len: u16;
        /// Sets the link speed (`IB_SPEED_*`).
        set_active_speed => active_speed: u16;
        /// Sets the link width (`IB_WIDTH_*`).
        set_active_width => active_width: u8;
    }
}

/// The attributes of a port that never change (`struct ib_port_immutable`).
///
/// # Examples
///
/// ```
/// use kernel::{
///     prelude::*,
///     rdma::{
///         attr::{
///             CoreCap,
///             MGMT_MAD_SIZE, //
///         },
///         PortImmutable, //
///     },
/// };
///
/// // What a RoCE v2 port with one GID and one partition key reports
/// // (`Driver::get_port_immutable`).
/// fn get_port_immutable(immutable: &mut PortImmutable) -> Result {
///     immutable
///         .set_gid_tbl_len(1)
///         .set_pkey_tbl_len(1)
///         .set_core_cap_flags(CoreCap::RoceUdpEncap.into())
///         .set_max_mad_size(MGMT_MAD_SIZE);
///     Ok(())
/// }
/// ```
#[repr(transparent)]
pub struct PortImmutable(bindings::ib_port_immutable);

impl PortImmutable {
    /// Wraps the core's structure.
    ///
    /// # Safety
    ///
    /// `ptr` must be valid for reads and writes, and not otherwise accessed, for `'a`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::ib_port_immutable) -> &'a mut Self {
        // SAFETY: `PortImmutable` is transparent over `ib_port_immutable`; the caller
        // guarantees exclusive access.
        unsafe { &mut *ptr.cast() }
    }

    setters! {
        /// Sets the size of the partition key table.
        set_pkey_tbl_len => pkey_tbl_len: i32;
        /// Sets the size of the GID table.
        set_gid_tbl_len => gid_tbl_len: i32;
        /// Sets the core capabilities.
        set_core_cap_flags => core_cap_flags: CoreCapFlags;
        /// Sets the size of a management datagram ([`MGMT_MAD_SIZE`] if the port has them).
        set_max_mad_size => max_mad_size: u32;
    }
}

/// A GID table entry being added or removed (`struct ib_gid_attr`).
///
/// # Examples
///
/// ```
/// use kernel::{
///     prelude::*,
///     rdma::{
///         GidAttr,
///         GidType, //
///     },
/// };
///
/// // Programs a GID the core added to the table of port 1 (`DeviceOps::add_gid`).
/// fn add_gid(attr: &GidAttr) -> Result {
///     if attr.port() != 1 || attr.gid_type() != Some(GidType::RoceV2) {
///         return Err(EINVAL);
///     }
///     pr_debug!("GID {} is {:02x?}\n", attr.index(), attr.gid().0);
///     Ok(())
/// }
/// ```
#[repr(transparent)]
pub struct GidAttr(bindings::ib_gid_attr);

impl GidAttr {
    /// Wraps the core's structure.
    ///
    /// # Safety
    ///
    /// `ptr` must be valid for reads for `'a`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *const bindings::ib_gid_attr) -> &'a Self {
        // SAFETY: `GidAttr` is transparent over `ib_gid_attr`; the caller guarantees validity.
        unsafe { &*ptr.cast() }
    }

    /// The GID.
    pub fn gid(&self) -> Gid {
        // SAFETY: Every bit pattern of the union is a valid byte array.
        Gid(unsafe { self.0.gid.raw })
    }

    /// The index of the entry in the port's table.
    pub fn index(&self) -> u16 {
        self.0.index
    }

    /// The port, counted from 1.
    pub fn port(&self) -> u32 {
        self.0.port_num
    }

    /// How the GID is used, or `None` for a type this abstraction does not know.
    pub fn gid_type(&self) -> Option<GidType> {
        GidType::from_raw(self.0.gid_type)
    }
}
