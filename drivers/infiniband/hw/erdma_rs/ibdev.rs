// SPDX-License-Identifier: GPL-2.0

//! The adapter as an RDMA device: what the device's callbacks share ([`IbData`]), and the
//! operations on the device itself: attributes, ports, GIDs, user contexts, counters and
//! network-device events. The verbs objects are in their own modules.

use core::sync::atomic::{
    AtomicU32,
    Ordering, //
};
use kernel::{
    capability::{
        capable,
        Capability, //
    },
    device,
    dma::Coherent,
    io::io_read,
    net::device::{
        Event as NetdevEvent,
        NetDevice, //
    },
    new_mutex, new_spinlock_irq,
    page::{
        PAGE_SHIFT,
        PAGE_SIZE, //
    },
    prelude::*,
    rdma::{
        self,
        attr::{
            AtomicCap,
            CoreCap,
            DeviceCap,
            KernelCap,
            Mtu,
            PhysState,
            PortCap,
            PortState,
            MGMT_MAD_SIZE, //
        },
        DeviceAttr,
        Gid,
        GidAttr,
        GidType,
        Guid,
        MmapCaching,
        PortAttr,
        PortImmutable,
        StatDesc,
        UContextSetup,
        UData, //
    },
    sync::{
        Arc,
        Mutex, //
    },
    workqueue::OwnedQueue,
};

use crate::{
    cm::{
        Cm,
        CmHw,
        CmOps,
        Registry,
        Timeouts,
        RESERVED_PORTS, //
    },
    commands::{
        AllocDb,
        ConfMtu,
        DbPages,
        DeviceCaps,
        FreeDb,
        GetStats,
        ModifyQpIwarp,
        Reflush,
        SetGid,
        SetGidCfg,
        StatsHeader,
        STATS_BUF_LEN,
        STATS_COUNTERS,
        STATS_FIRST_COUNTER,
        STATS_MAGIC, //
    },
    consts::{
        CQDB_SPACE,
        FAST_REG_PAGE_LIST_LEN,
        MAX_CONTEXTS,
        MAX_PD,
        MAX_RD_ATOM,
        MAX_RECV_SGE,
        MAX_SEND_SGE,
        MAX_SEND_WR,
        MR_PAGE_SIZES,
        RQDB_SPACE,
        SQDB_SPACE, //
    },
    hw::Hw,
    ids::{
        self,
        AhIds,
        Ids,
        ObjIds, //
    },
    kverbs::Objects,
    mtt::DbRecPages,
    regs::{
        MacAddr,
        Protocol, //
    },
    sgsi::{
        GsiOwner,
        GsiPort,
        COUNTERS as SGSI_COUNTERS,
        COUNTER_NAMES as SGSI_COUNTER_NAMES, //
    },
};

/// The one port.
pub(crate) const PORT: u32 = 1;

/// The GID table of an iWARP adapter in compat mode (erdma_rs_hw 7.3).
const COMPAT_GIDS: u32 = 16;

/// The port counters: those of GET_STATS, in its order, then the driver's count of
/// [`DeviceReports`](crate::report::DeviceReports), then the software GSI's ([`crate::sgsi`]:
/// zero but in compat mode).
pub(crate) static HW_STATS: [StatDesc; STATS_COUNTERS + 1 + SGSI_COUNTERS] = [
    StatDesc::new(c"tx_reqs_cnt"),
    StatDesc::new(c"tx_packets_cnt"),
    StatDesc::new(c"tx_bytes_cnt"),
    StatDesc::new(c"tx_disable_drop_cnt"),
    StatDesc::new(c"tx_bps_limit_drop_cnt"),
    StatDesc::new(c"tx_pps_limit_drop_cnt"),
    StatDesc::new(c"rx_packets_cnt"),
    StatDesc::new(c"rx_bytes_cnt"),
    StatDesc::new(c"rx_disable_drop_cnt"),
    StatDesc::new(c"rx_bps_limit_drop_cnt"),
    StatDesc::new(c"rx_pps_limit_drop_cnt"),
    StatDesc::new(c"adapter_errors_cnt"),
    StatDesc::new(SGSI_COUNTER_NAMES[0]),
    StatDesc::new(SGSI_COUNTER_NAMES[1]),
    StatDesc::new(SGSI_COUNTER_NAMES[2]),
    StatDesc::new(SGSI_COUNTER_NAMES[3]),
    StatDesc::new(SGSI_COUNTER_NAMES[4]),
    StatDesc::new(SGSI_COUNTER_NAMES[5]),
    StatDesc::new(SGSI_COUNTER_NAMES[6]),
    StatDesc::new(SGSI_COUNTER_NAMES[7]),
    StatDesc::new(SGSI_COUNTER_NAMES[8]),
];

/// The response to GET_CONTEXT (`struct erdma_uresp_alloc_ctx`).
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable)]
struct AllocCtxResp {
    dev_id: u32,
    pad: u32,
    sdb_type: u32,
    sdb_offset: u32,
    sdb: u64,
    rdb: u64,
    cdb: u64,
}

/// What the device's callbacks use.
pub(crate) struct IbData<'bound> {
    /// The device's work queue: commands that post, poll and completion paths may not wait
    /// for run here ([`crate::qp::Reflusher`]). First, so that it drains before the rest goes.
    pub(crate) work: OwnedQueue,
    pub(crate) hw: Arc<Hw<'bound>>,
    /// The lookup tables through which the adapter's events reach the objects.
    pub(crate) objects: Arc<Objects>,
    pub(crate) caps: DeviceCaps,
    pub(crate) fw_version: u32,
    pub(crate) mac: MacAddr,
    /// What the adapter's protocol gives it.
    pub(crate) proto: Personality,
    /// Compat mode (erdma_rs_hw 7.3), on an iWARP adapter: it shows itself as a RoCEv2 device,
    /// and its queue pairs are connected the RoCE way.
    pub(crate) compat: Option<Compat>,
    /// Compat mode's software GSI.
    sgsi: Option<GsiOwner>,
    /// Completion vectors (CEQs).
    pub(crate) ceqs: u32,
    pub(crate) ids: Arc<Mutex<ObjIds>>,
    contexts: AtomicU32,
}

/// What an adapter has for the protocol it speaks (erdma_rs_hw 7): operations that differ match
/// on it once.
pub(crate) enum Personality {
    /// RoCEv2: address handles, whose numbers (AHNs) the driver hands out; connections are made
    /// by the RDMA core's own connection manager over the GSI QP.
    Roce(Arc<AhIds>),
    /// iWARP: the driver's connection manager (MPA over kernel TCP sockets).
    Iwarp(Pin<KBox<Cm>>),
}

/// Compat mode on an iWARP adapter (erdma_rs_hw 7.3): to the RDMA core and to applications a
/// RoCEv2 device (a CA with RoCEv2 GIDs the core manages, a P_Key, 256-byte MADs), whose
/// queue pairs reach RTS by `modify_qp` with an address vector and the peer's QPN, on a TCP
/// 4-tuple both ends make up ([`crate::cm::compat_link`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Compat {
    /// The first of the [`RESERVED_PORTS`] TCP ports compat connections use.
    pub(crate) ports_base: u16,
}

impl Compat {
    /// Compat mode for an adapter of `protocol`, as the module parameters ask: iWARP adapters
    /// only.
    fn of(protocol: Protocol) -> Option<Self> {
        (protocol == Protocol::Iwarp && crate::module_parameters::compat_mode.value()).then(|| {
            Self {
                ports_base: crate::module_parameters::reserve_ports_base.value(),
            }
        })
    }
}

/// A user context: the doorbell pages it was given, if the adapter hands them out, and the
/// pages of its queues' doorbell records.
pub(crate) struct UCtx {
    pub(crate) db: Option<DbPages>,
    pub(crate) dbrecs: Arc<DbRecPages>,
}

impl<'bound> IbData<'bound> {
    pub(crate) fn new(
        hw: Arc<Hw<'bound>>,
        objects: Arc<Objects>,
        caps: DeviceCaps,
        fw_version: u32,
        mac: MacAddr,
        protocol: Protocol,
        ceqs: u32,
    ) -> Result<Self> {
        let max_qp = caps.max_qp();
        let compat = Compat::of(protocol);
        if let Some(c) = compat {
            dev_info!(
                hw.dev(),
                "compat mode: a RoCEv2 device to applications, its connections on TCP ports {} \
                 to {} (erdma_rs_hw 7.3)\n",
                c.ports_base,
                c.ports_base + (RESERVED_PORTS - 1)
            );
        }
        // QPN, CQN and MPT index 0 are never used (erdma_rs_hw 6, 9.1).
        let ids = ObjIds {
            pd: Ids::new(1, MAX_PD)?,
            cq: Ids::new(1, 2 * max_qp)?,
            // QPN 1 of a RoCE adapter is its GSI QP (erdma_rs_hw 7.2), in compat mode too.
            qp: Ids::new(
                if protocol == Protocol::RoceV2 || compat.is_some() {
                    2
                } else {
                    1
                },
                max_qp,
            )?,
            mr: Ids::new(1, 2 * max_qp)?,
        };
        Ok(Self {
            work: OwnedQueue::new_ordered(c"erdma_rs_dev")?,
            hw,
            objects,
            caps,
            fw_version,
            mac,
            proto: match protocol {
                Protocol::RoceV2 => Personality::Roce(Arc::pin_init(
                    new_spinlock_irq!(ids::ahn_range(caps.max_ah_log2)?),
                    GFP_KERNEL,
                )?),
                Protocol::Iwarp => Personality::Iwarp(KBox::pin_init(
                    Cm::new(Timeouts::new(
                        crate::module_parameters::mpa_reply_timeout_ms.value(),
                        crate::module_parameters::mpa_request_timeout_ms.value(),
                    ))?,
                    GFP_KERNEL,
                )?),
            },
            sgsi: compat.map(|_| GsiOwner::new()).transpose()?,
            compat,
            ceqs,
            ids: Arc::pin_init(new_mutex!(ids), GFP_KERNEL)?,
            contexts: AtomicU32::new(0),
        })
    }

    pub(crate) fn dev(&self) -> &device::Device {
        self.hw.dev()
    }

    /// The bound device, for DMA allocations.
    pub(crate) fn bound(&self) -> &device::Device<device::Bound> {
        self.hw.bound()
    }

    /// Whether the RDMA core sees a RoCEv2 device: a RoCEv2 adapter, or an iWARP adapter in
    /// compat mode.
    pub(crate) fn roce_face(&self) -> bool {
        matches!(self.proto, Personality::Roce(_)) || self.compat.is_some()
    }

    /// The GID table: a RoCEv2 adapter's from its capabilities, 16 entries in compat mode (as
    /// the out-of-tree driver has), an iWARP adapter's one entry (its MAC).
    fn gid_table_len(&self) -> u32 {
        match self.proto {
            Personality::Roce(_) => 1 << self.caps.max_gid_log2,
            Personality::Iwarp(_) if self.compat.is_some() => COMPAT_GIDS,
            Personality::Iwarp(_) => 1,
        }
    }

    pub(crate) fn query_device(&self, attr: &mut DeviceAttr) -> Result {
        let caps = &self.caps;
        let qps = caps.max_qp();
        let pdev = self.hw.pdev;
        attr.set_fw_ver(self.fw_version.into())
            .set_sys_image_guid(Guid::from_mac(self.mac.0))
            .set_vendor_id(pdev.vendor_id().as_raw().into())
            .set_vendor_part_id(pdev.device_id().into())
            .set_hw_ver(pdev.revision_id().into())
            .set_max_mr_size(1u64 << caps.max_mr_size_log2)
            .set_page_size_cap(MR_PAGE_SIZES)
            .set_max_qp(qps - 1)
            .set_max_qp_wr(MAX_SEND_WR.min(1 << caps.max_recv_wr_log2))
            .set_max_send_sge(MAX_SEND_SGE)
            .set_max_recv_sge(MAX_RECV_SGE)
            .set_max_sge_rd(1)
            .set_max_cq(2 * qps - 1)
            .set_max_cqe(1 << caps.max_cqe_log2)
            .set_max_mr(2 * qps)
            .set_max_pd(MAX_PD)
            .set_max_mw(1 << caps.max_mw_log2)
            .set_max_qp_rd_atom(MAX_RD_ATOM)
            .set_max_qp_init_rd_atom(MAX_RD_ATOM)
            .set_max_res_rd_atom(qps.saturating_mul(MAX_RD_ATOM))
            .set_max_fast_reg_page_list_len(FAST_REG_PAGE_LIST_LEN)
            .set_device_cap_flags(DeviceCap::MemMgtExtensions.into())
            .set_kernel_cap_flags(KernelCap::LocalDmaLkey.into())
            .set_atomic_cap(if caps.atomic {
                AtomicCap::Glob
            } else {
                AtomicCap::None
            });
        if self.roce_face() {
            attr.set_max_pkeys(1);
        }
        if let Personality::Roce(_) = self.proto {
            attr.set_max_ah(ids::max_ahs(caps.max_ah_log2));
        }
        Ok(())
    }

    pub(crate) fn query_port<T: rdma::Driver>(
        &self,
        dev: &rdma::Device<T>,
        port: u32,
        attr: &mut PortAttr,
    ) -> Result {
        // Without its network device (unregistered for now) the port is down.
        attr.set_state(PortState::Down, PhysState::Disabled);
        if let Some(ndev) = dev.netdev(port) {
            // Without ethtool link settings the core falls back to a default itself.
            if let Ok((speed, width)) = dev.eth_speed(port) {
                attr.set_active_speed(speed).set_active_width(width);
            }
            let mtu = Mtu::from_bytes(ndev.mtu());
            attr.set_mtu(mtu, mtu);
            if ndev.is_running() && ndev.carrier_ok() {
                attr.set_state(PortState::Active, PhysState::LinkUp);
            }
        }
        // CAST: the GID table has at most 2^15 entries.
        attr.set_gid_tbl_len(self.gid_table_len() as i32)
            .set_port_cap_flags(PortCap::CmSup | PortCap::DeviceMgmtSup)
            .set_max_msg_sz(u32::MAX);
        if self.roce_face() {
            attr.set_ip_gids(true).set_pkey_tbl_len(1);
        }
        Ok(())
    }

    pub(crate) fn get_port_immutable(&self, immutable: &mut PortImmutable) {
        // CAST: the GID table has at most 2^15 entries.
        immutable.set_gid_tbl_len(self.gid_table_len() as i32);
        if self.roce_face() {
            immutable
                .set_core_cap_flags(CoreCap::RoceUdpEncap.into())
                .set_pkey_tbl_len(1)
                .set_max_mad_size(MGMT_MAD_SIZE);
        } else {
            immutable.set_core_cap_flags(CoreCap::Iwarp.into());
        }
    }

    pub(crate) fn query_gid(&self, index: u32) -> Result<Gid> {
        if index != 0 {
            return Err(EINVAL);
        }
        Ok(Gid::from_mac(self.mac.0))
    }

    /// Adds or removes entry `attr` of the GID table; an iWARP adapter in compat mode has no
    /// table of its own (the core's is all there is: the addresses reach the adapter in
    /// `MODIFY_QP`).
    pub(crate) fn set_gid(&self, attr: &GidAttr, add: bool) -> Result {
        if attr.port() != PORT || u32::from(attr.index()) >= self.gid_table_len() {
            return Err(EINVAL);
        }
        if add && attr.gid_type() != Some(GidType::RoceV2) {
            return Err(EINVAL);
        }
        if self.compat.is_some() {
            return match &self.sgsi {
                Some(g) => g.port().set_gid(attr.index(), attr.gid(), add),
                None => Ok(()),
            };
        }
        let cfg = SetGidCfg::zeroed().with_index(attr.index());
        // Only RoCEv2 entries (IPv4-mapped or IPv6) reach the wire.
        let cmd = if add {
            let gid = attr.gid();
            SetGid {
                cfg: cfg.with_ipv6(gid.to_ipv4().is_none()),
                gid: gid.0,
            }
        } else {
            SetGid {
                cfg: cfg.with_delete(true),
                gid: [0; 16],
            }
        };
        self.hw.exec(&cmd)
    }

    pub(crate) fn alloc_ucontext(
        &self,
        setup: &UContextSetup<'_>,
        udata: &mut UData<'_>,
    ) -> Result<UCtx> {
        if udata.out_len() < size_of::<AllocCtxResp>() {
            return Err(EINVAL);
        }
        if self.contexts.fetch_add(1, Ordering::Relaxed) >= MAX_CONTEXTS {
            self.contexts.fetch_sub(1, Ordering::Relaxed);
            return Err(ENOMEM);
        }
        let ctx = self.open_context(setup, udata);
        if ctx.is_err() {
            self.contexts.fetch_sub(1, Ordering::Relaxed);
        }
        ctx
    }

    fn open_context(&self, setup: &UContextSetup<'_>, udata: &mut UData<'_>) -> Result<UCtx> {
        let dbrecs = DbRecPages::new()?;
        let ctx = if self.caps.extend_db {
            let pages = self.hw.exec(&AllocDb::new())?;
            let pdev = self.hw.pdev;
            // CAST: PAGE_SHIFT is small.
            if !pages.usable(PAGE_SHIFT as u32, pdev.resource_len(0)?) {
                self.hw.reports.report(
                    self.dev(),
                    fmt!(
                        "ALLOC_DB gave doorbell pages {}/{}/{}, which no user may map\n",
                        pages.sq,
                        pages.cdb,
                        pages.rdb
                    ),
                );
                self.free_db(pages);
                return Err(EIO);
            }
            UCtx {
                db: Some(pages),
                dbrecs,
            }
        } else {
            // The doorbell pages are shared with every other context.
            if !capable(Capability::SYS_RAWIO) {
                return Err(EPERM);
            }
            UCtx { db: None, dbrecs }
        };
        let ret = self.map_doorbells(setup, udata, &ctx);
        if ret.is_err() {
            self.release_context(&ctx);
        }
        ret.map(|()| ctx)
    }

    fn map_doorbells(
        &self,
        setup: &UContextSetup<'_>,
        udata: &mut UData<'_>,
        ctx: &UCtx,
    ) -> Result {
        let page = |index: u16| u64::from(index) << PAGE_SHIFT;
        // The RQ doorbell goes on the page of the "CDB" field and the CQ doorbell on the
        // page of the "RDB" field: the ABI every provider expects (erdma_rs_hw 3.6).
        let (sdb, rdb, cdb) = match ctx.db {
            Some(db) => (page(db.sq), page(db.cdb), page(db.rdb)),
            // CAST: BAR0 offsets.
            None => (SQDB_SPACE as u64, RQDB_SPACE as u64, CQDB_SPACE as u64),
        };
        let pdev = self.hw.pdev;
        let map = |offset| setup.insert_bar_mmap(pdev, 0, offset, PAGE_SIZE, MmapCaching::Device);
        let resp = AllocCtxResp {
            dev_id: pdev.device_id().into(),
            pad: 0,
            sdb_type: 0,
            sdb_offset: 0,
            sdb: map(sdb)?,
            rdb: map(rdb)?,
            cdb: map(cdb)?,
        };
        udata.respond(&resp)
    }

    fn release_context(&self, ctx: &UCtx) {
        if let Some(db) = ctx.db {
            self.free_db(db);
        }
    }

    fn free_db(&self, db: DbPages) {
        if let Err(e) = self.hw.exec(&FreeDb::new(db)) {
            // The failure itself is reported (and counted) by the command queue.
            self.hw.reports.note(
                self.dev(),
                fmt!(
                    "FREE_DB of pages {}/{}/{} failed: {}\n",
                    db.sq,
                    db.cdb,
                    db.rdb,
                    e.to_errno()
                ),
            );
        }
    }

    pub(crate) fn dealloc_ucontext(&self, ctx: &UCtx) {
        self.release_context(ctx);
        self.contexts.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn get_hw_stats(&self, port: u32, values: &mut [u64]) -> Result<usize> {
        if port != PORT {
            return Ok(0);
        }
        let buf: Coherent<[u64]> =
            Coherent::zeroed_slice(self.bound(), STATS_BUF_LEN / 8, GFP_KERNEL)?;
        let cmd = GetStats {
            reserved0: 0,
            index: 0,
            buf: buf.dma_address(),
            // CAST: 256.
            len: STATS_BUF_LEN as u32,
            reserved1: 0,
        };
        self.hw.exec(&cmd)?;
        let head = StatsHeader::from_raw(io_read!(&buf, [try: 0]));
        let magic = head.magic().get();
        if magic != u64::from(STATS_MAGIC) {
            self.hw.reports.report(
                self.dev(),
                fmt!(
                    "GET_STATS returned magic {magic:#x}, expected {STATS_MAGIC:#x}: counters \
                     not updated\n"
                ),
            );
            return Err(EIO);
        }
        let n = values.len().min(STATS_COUNTERS);
        for (i, value) in values.iter_mut().take(n).enumerate() {
            *value = io_read!(&buf, [try: STATS_FIRST_COUNTER + i]);
        }
        let Some(errors) = values.get_mut(STATS_COUNTERS) else {
            return Ok(n);
        };
        *errors = self.hw.reports.count();
        let soft = self
            .sgsi
            .as_ref()
            .map_or([0; SGSI_COUNTERS], |g| g.port().counters());
        let rest = values.get_mut(STATS_COUNTERS + 1..).unwrap_or(&mut []);
        let m = rest.len().min(SGSI_COUNTERS);
        rest[..m].copy_from_slice(&soft[..m]);
        Ok(STATS_COUNTERS + 1 + m)
    }

    pub(crate) fn netdev_event<T: rdma::Driver>(
        &self,
        dev: &rdma::Device<T>,
        port: Option<u32>,
        event: NetdevEvent,
        ndev: &NetDevice,
    ) {
        let Some(port) = port else {
            // A network device with the adapter's MAC comes back: attach it.
            if event == NetdevEvent::Register
                && ndev.perm_addr() == self.mac.0
                && dev.netdev(PORT).is_none()
            {
                match dev.set_netdev(PORT, Some(ndev)) {
                    Ok(()) => dev_info!(self.dev(), "{}: network device is back\n", dev.name()),
                    Err(e) => dev_warn!(
                        self.dev(),
                        "{}: cannot attach the network device: {}\n",
                        dev.name(),
                        e.to_errno()
                    ),
                }
            }
            return;
        };
        match event {
            NetdevEvent::Unregister => {
                // Let it go; the port is down until it comes back.
                let _ = dev.set_netdev(port, None);
                dev_info!(self.dev(), "{}: network device unregistered\n", dev.name());
            }
            NetdevEvent::ChangeMtu => {
                let mtu = ndev.mtu();
                if let Err(e) = self.hw.exec(&ConfMtu { mtu }) {
                    dev_warn!(self.dev(), "CONF_MTU {} failed: {}\n", mtu, e.to_errno());
                }
            }
            // The core turns the netdev's state changes into port events itself.
            NetdevEvent::Up | NetdevEvent::Down | NetdevEvent::Change | NetdevEvent::Register => {}
        }
    }
}

/// An iWARP device, as its connection manager reaches it.
pub(crate) struct IwDev<'a, 'bound> {
    data: &'a IbData<'bound>,
    cm: &'a Cm,
}

/// The device as deferred work reaches it: through a counted reference to the device, while it
/// is registered.
pub(crate) trait DeviceRef: Send + Sync {
    /// Runs `f` on the device's data if the device is still registered, holding off its
    /// unregistration until `f` returns; returns whether it ran.
    fn with(&self, f: &mut dyn FnMut(&IbData<'_>)) -> bool;
}

impl<'bound> IbData<'bound> {
    /// Sends a REFLUSH (erdma_rs_hw 10.13) and waits for it (process context); a failure is noted
    /// as the device's, the caller goes on.
    pub(crate) fn reflush(&self, cmd: &Reflush) {
        if self.hw.failed() {
            // Nothing flushes but the driver: the CQs' consumers poll the flushed work.
            self.objects.wake_all();
            return;
        }
        if let Err(e) = self.hw.exec(cmd) {
            self.hw.reports.note(
                self.dev(),
                fmt!("REFLUSH of QP {} failed ({})\n", cmd.qpn, e.to_errno()),
            );
        }
    }

    /// The device as its connection manager reaches it; `None` on RoCE adapters.
    pub(crate) fn iw(&self) -> Option<IwDev<'_, 'bound>> {
        match &self.proto {
            Personality::Iwarp(cm) => Some(IwDev { data: self, cm }),
            Personality::Roce(_) => None,
        }
    }

    /// Compat mode's software GSI; `None` without compat mode.
    pub(crate) fn soft_gsi(&self) -> Option<&Arc<GsiPort>> {
        self.sgsi.as_ref().map(GsiOwner::port)
    }

    /// The AHNs of a RoCE adapter; `EOPNOTSUPP` on iWARP adapters, which have no address
    /// handles.
    pub(crate) fn ahs(&self) -> Result<&Arc<AhIds>> {
        match &self.proto {
            Personality::Roce(ahs) => Ok(ahs),
            Personality::Iwarp(_) => Err(EOPNOTSUPP),
        }
    }
}

impl CmOps for IwDev<'_, '_> {
    fn tables(&self) -> &Cm {
        self.cm
    }
}

impl CmHw for IwDev<'_, '_> {
    fn cm(&self) -> &dyn Registry {
        self.cm
    }

    fn dev(&self) -> &device::Device {
        self.data.dev()
    }

    fn modify_qp(&self, cmd: &ModifyQpIwarp) -> Result {
        self.data.hw.exec(cmd).map(drop)
    }

    fn reflush(&self, cmd: &Reflush) {
        self.data.reflush(cmd);
    }

    fn cc(&self) -> u8 {
        self.data.caps.cc
    }
}
