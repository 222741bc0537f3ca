// SPDX-License-Identifier: GPL-2.0

//! The adapter as an RDMA device: attributes, GIDs, user contexts, counters.
//!
//! The two protocols the adapter speaks differ in their device operations (RoCEv2 has a GID
//! table the core manages, a P_Key and a link-layer query; iWARP has neither), so each has its
//! own [`rdma::Driver`]: [`Roce`] and [`Iwarp`]. Both forward to the shared implementation on
//! [`IbData`].

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
    new_mutex,
    page::{
        PAGE_SHIFT,
        PAGE_SIZE, //
    },
    prelude::*,
    rdma::{
        self,
        attr::{
            core_cap,
            device_cap,
            kernel_cap,
            port_cap,
            AtomicCap,
            Mtu,
            PhysState,
            PortState,
            MGMT_MAD_SIZE, //
        },
        CqSetup,
        DeviceAttr,
        DriverId,
        Gid,
        GidAttr,
        GidType,
        Guid,
        LinkLayer,
        NewMr,
        PdSetup,
        PortAttr,
        PortImmutable,
        QpAttr,
        QpAttrMask,
        QpAttrOut,
        QpInitAttr,
        QpSetup,
        RecvWrs,
        SendWrs,
        StatDesc,
        UContextSetup,
        UData,
        UserMrReq,
        Wc, //
    },
    sync::{
        Arc,
        Mutex, //
    },
    ThisModule,
};

use crate::{
    cmdq::Wait,
    commands::{
        AllocDb,
        ConfMtu,
        DbPages,
        DeviceCaps,
        FreeDb,
        GetStats,
        SetGid,
        STATS_BUF_LEN,
        STATS_COUNTERS,
        STATS_MAGIC, //
    },
    ids::Ids,
    objects::{
        Cq,
        Mr,
        Pd,
        Qp,
        MAX_PD,
        MAX_SEND_SGE,
        MAX_SEND_WR, //
    },
    regs::{
        MacAddr,
        Protocol, //
    },
    Hw,
};

/// The one port.
const PORT: u32 = 1;
/// The uverbs ABI of `erdma-abi.h`.
const ABI_VERSION: u32 = 1;
/// User contexts at most.
const MAX_CONTEXTS: u32 = 128 * 1024;
/// Outstanding RDMA Reads and atomics per QP, either direction.
const MAX_RD_ATOM: u32 = 128;
/// Pages of a fast-registration list.
const MAX_FRMR_PAGES: u32 = 512;
/// Supported page sizes: 4 KiB to 1 GiB.
const PAGE_SIZE_CAP: u64 = 0x7fff_f000;
const NODE_DESC: &[u8] = b"Elastic RDMA Adapter stack";

/// BAR0 offsets of the first page of each doorbell space, which every user context shares on
/// adapters without per-context doorbell pages.
const SQDB_SPACE: u64 = 0x1000;
const RQDB_SPACE: u64 = 0x61000;
const CQDB_SPACE: u64 = 0x79000;

/// The port counters, in GET_STATS order.
static HW_STATS: [StatDesc; STATS_COUNTERS] = [
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

/// The numbers the driver hands out for adapter objects.
pub(crate) struct ObjIds {
    pub(crate) pd: Ids,
    pub(crate) cq: Ids,
    pub(crate) qp: Ids,
    pub(crate) mr: Ids,
}

/// What the device's callbacks use.
pub(crate) struct IbData<'bound> {
    pub(crate) hw: Arc<Hw<'bound>>,
    pub(crate) caps: DeviceCaps,
    pub(crate) fw_version: u32,
    pub(crate) mac: MacAddr,
    pub(crate) protocol: Protocol,
    /// Completion vectors (CEQs).
    pub(crate) ceqs: u32,
    pub(crate) ids: Arc<Mutex<ObjIds>>,
    contexts: AtomicU32,
}

/// A user context: the doorbell pages it was given, if the adapter hands them out.
pub(crate) struct UCtx {
    pub(crate) db: Option<DbPages>,
}

impl<'bound> IbData<'bound> {
    pub(crate) fn new(
        hw: Arc<Hw<'bound>>,
        caps: DeviceCaps,
        fw_version: u32,
        mac: MacAddr,
        protocol: Protocol,
        ceqs: u32,
    ) -> Result<Self> {
        let max_qp = caps.max_qp();
        // QPN, CQN and MPT index 0 are never used (erdma-hw 6, 9.1).
        let ids = ObjIds {
            pd: Ids::new(1, MAX_PD)?,
            cq: Ids::new(1, 2 * max_qp)?,
            qp: Ids::new(1, max_qp)?,
            mr: Ids::new(1, 2 * max_qp)?,
        };
        Ok(Self {
            hw,
            caps,
            fw_version,
            mac,
            protocol,
            ceqs,
            ids: Arc::pin_init(new_mutex!(ids), GFP_KERNEL)?,
            contexts: AtomicU32::new(0),
        })
    }

    pub(crate) fn dev(&self) -> &device::Device {
        self.hw.pdev.as_ref()
    }

    pub(crate) fn roce(&self) -> bool {
        self.protocol == Protocol::RoceV2
    }

    fn gid_table_len(&self) -> u32 {
        if self.roce() {
            1 << self.caps.max_gid_log2
        } else {
            1
        }
    }

    fn query_device(&self, attr: &mut DeviceAttr) -> Result {
        let caps = &self.caps;
        let qps = caps.max_qp();
        let pdev = self.hw.pdev;
        attr.set_fw_ver(self.fw_version.into())
            .set_sys_image_guid(Guid::from_mac(self.mac.0))
            .set_vendor_id(pdev.vendor_id().as_raw().into())
            .set_vendor_part_id(pdev.device_id().into())
            .set_hw_ver(pdev.revision_id().into())
            .set_max_mr_size(1u64 << caps.max_mr_size_log2.min(63))
            .set_page_size_cap(PAGE_SIZE_CAP)
            .set_max_qp(qps - 1)
            .set_max_qp_wr(MAX_SEND_WR.min(1 << caps.max_recv_wr_log2.min(31)))
            .set_max_send_sge(MAX_SEND_SGE)
            .set_max_recv_sge(1)
            .set_max_sge_rd(1)
            .set_max_cq(2 * qps - 1)
            .set_max_cqe(1 << caps.max_cqe_log2.min(31))
            .set_max_mr(2 * qps)
            .set_max_pd(MAX_PD)
            .set_max_mw(1 << caps.max_mw_log2.min(31))
            .set_max_qp_rd_atom(MAX_RD_ATOM)
            .set_max_qp_init_rd_atom(MAX_RD_ATOM)
            .set_max_res_rd_atom(qps.saturating_mul(MAX_RD_ATOM))
            .set_max_fast_reg_page_list_len(MAX_FRMR_PAGES)
            .set_device_cap_flags(device_cap::MEM_MGT_EXTENSIONS)
            .set_kernel_cap_flags(kernel_cap::LOCAL_DMA_LKEY)
            .set_atomic_cap(if caps.atomic {
                AtomicCap::Glob
            } else {
                AtomicCap::None
            });
        if self.roce() {
            attr.set_max_pkeys(1)
                .set_max_ah(1 << caps.max_ah_log2.min(31));
        }
        Ok(())
    }

    fn query_port<T: rdma::Driver>(
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
            .set_port_cap_flags(port_cap::CM_SUP | port_cap::DEVICE_MGMT_SUP)
            .set_max_msg_sz(u32::MAX);
        if self.roce() {
            attr.set_ip_gids(true).set_pkey_tbl_len(1);
        }
        Ok(())
    }

    fn get_port_immutable(&self, immutable: &mut PortImmutable) {
        // CAST: the GID table has at most 2^15 entries.
        immutable.set_gid_tbl_len(self.gid_table_len() as i32);
        if self.roce() {
            immutable
                .set_core_cap_flags(core_cap::ROCE_UDP_ENCAP)
                .set_pkey_tbl_len(1)
                .set_max_mad_size(MGMT_MAD_SIZE);
        } else {
            immutable.set_core_cap_flags(core_cap::IWARP);
        }
    }

    fn query_gid(&self, index: u32) -> Result<Gid> {
        if index != 0 {
            return Err(EINVAL);
        }
        Ok(Gid::from_mac(self.mac.0))
    }

    fn set_gid(&self, attr: &GidAttr, add: bool) -> Result {
        if attr.port() != PORT || u32::from(attr.index()) >= self.gid_table_len() {
            return Err(EINVAL);
        }
        let cmd = if add {
            // Only RoCEv2 entries (IPv4-mapped or IPv6) reach the wire.
            if attr.gid_type() != Some(GidType::RoceV2) {
                return Err(EINVAL);
            }
            let gid = attr.gid();
            let ipv4 = gid.0[..10].iter().all(|&b| b == 0) && gid.0[10..12] == [0xff, 0xff];
            SetGid::add(attr.index(), gid.0, !ipv4)
        } else {
            SetGid::delete(attr.index())
        };
        self.hw.exec(&cmd, Wait::Sleep).map(|_| ())
    }

    fn alloc_ucontext(&self, setup: &UContextSetup<'_>, udata: &mut UData<'_>) -> Result<UCtx> {
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
        let ctx = if self.caps.extend_db {
            let resp = self.hw.exec(&AllocDb::new(), Wait::Sleep)?;
            UCtx {
                db: Some(DbPages::from_response(resp)),
            }
        } else {
            // The doorbell pages are shared with every other context.
            if !capable(Capability::SYS_RAWIO) {
                return Err(EPERM);
            }
            UCtx { db: None }
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
        // page of the "RDB" field: the ABI every provider expects (erdma-hw 3.6).
        let (sdb, rdb, cdb) = match ctx.db {
            Some(db) => (page(db.sq), page(db.cdb), page(db.rdb)),
            None => (SQDB_SPACE, RQDB_SPACE, CQDB_SPACE),
        };
        let pdev = self.hw.pdev;
        let map = |offset| setup.insert_bar_mmap(pdev, 0, offset, PAGE_SIZE);
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
            if let Err(e) = self.hw.exec(&FreeDb::new(db), Wait::Sleep) {
                dev_warn!(
                    self.dev(),
                    "FREE_DB of pages {}/{}/{} failed: {}\n",
                    db.sq,
                    db.cdb,
                    db.rdb,
                    e.to_errno()
                );
            }
        }
    }

    fn dealloc_ucontext(&self, ctx: &UCtx) {
        self.release_context(ctx);
        self.contexts.fetch_sub(1, Ordering::Relaxed);
    }

    fn get_hw_stats(&self, port: u32, values: &mut [u64]) -> Result<usize> {
        if port != PORT {
            return Ok(0);
        }
        let dev: &device::Device<device::Bound> = self.hw.pdev.as_ref();
        let buf: Coherent<[u64]> = Coherent::zeroed_slice(dev, STATS_BUF_LEN / 8, GFP_KERNEL)?;
        let cmd = GetStats {
            reserved0: 0,
            index: 0,
            buf: buf.dma_address(),
            // CAST: 256.
            len: STATS_BUF_LEN as u32,
            reserved1: 0,
        };
        self.hw.exec(&cmd, Wait::Sleep)?;
        let head: u64 = io_read!(&buf, [try: 0]);
        // CAST: the magic is the low 16 bits of the first word.
        if head as u16 != STATS_MAGIC {
            dev_warn!(
                self.dev(),
                "GET_STATS returned magic {:#x}, expected {:#x}: counters not updated\n",
                head as u16,
                STATS_MAGIC
            );
            return Err(EIO);
        }
        let n = values.len().min(STATS_COUNTERS);
        for (i, value) in values.iter_mut().take(n).enumerate() {
            *value = io_read!(&buf, [try: 2 + i]);
        }
        Ok(n)
    }

    fn netdev_event<T: rdma::Driver>(
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
                if let Err(e) = self.hw.exec(&ConfMtu { mtu }, Wait::Sleep) {
                    dev_warn!(self.dev(), "CONF_MTU {} failed: {}\n", mtu, e.to_errno());
                }
            }
            // The core turns the netdev's state changes into port events itself.
            NetdevEvent::Up | NetdevEvent::Down | NetdevEvent::Change | NetdevEvent::Register => {}
        }
    }
}

/// The RoCEv2 personality.
pub(crate) struct Roce;
/// The iWARP personality.
pub(crate) struct Iwarp;

#[vtable]
impl rdma::Driver for Roce {
    type Data<'a> = IbData<'a>;
    type UContext = UCtx;
    type Pd = Pd;
    type Cq = Cq;
    type Qp = Qp;
    type Mr = Mr;
    const DRIVER_ID: DriverId = DriverId::ERDMA;
    const UVERBS_ABI_VERSION: u32 = ABI_VERSION;
    const HW_PORT_STATS: &'static [StatDesc] = &HW_STATS;

    fn query_device(
        _dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        attr: &mut DeviceAttr,
        _udata: &mut UData<'_>,
    ) -> Result {
        data.query_device(attr)
    }

    fn query_port(
        dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        port: u32,
        attr: &mut PortAttr,
    ) -> Result {
        data.query_port(dev, port, attr)
    }

    fn get_port_immutable(
        _dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        _port: u32,
        immutable: &mut PortImmutable,
    ) -> Result {
        data.get_port_immutable(immutable);
        Ok(())
    }

    fn get_link_layer(_dev: &rdma::Device<Self>, _data: &IbData<'_>, _port: u32) -> LinkLayer {
        LinkLayer::Ethernet
    }

    fn query_gid(
        _dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        _port: u32,
        index: u32,
    ) -> Result<Gid> {
        data.query_gid(index)
    }

    fn query_pkey(
        _dev: &rdma::Device<Self>,
        _data: &IbData<'_>,
        _port: u32,
        index: u16,
    ) -> Result<u16> {
        if index != 0 {
            return Err(EINVAL);
        }
        Ok(0xffff)
    }

    fn add_gid(_dev: &rdma::Device<Self>, data: &IbData<'_>, attr: &GidAttr) -> Result {
        data.set_gid(attr, true)
    }

    fn del_gid(_dev: &rdma::Device<Self>, data: &IbData<'_>, attr: &GidAttr) -> Result {
        data.set_gid(attr, false)
    }

    fn alloc_ucontext(
        _dev: &rdma::Device<Self>,
        data: &Self::Data<'_>,
        setup: &UContextSetup<'_>,
        udata: &mut UData<'_>,
    ) -> impl PinInit<UCtx, Error> {
        data.alloc_ucontext(setup, udata)
    }

    fn dealloc_ucontext(_dev: &rdma::Device<Self>, data: &IbData<'_>, ctx: Pin<&mut UCtx>) {
        data.dealloc_ucontext(&ctx);
    }

    fn alloc_pd(
        _dev: &rdma::Device<Self>,
        data: &Self::Data<'_>,
        _setup: &PdSetup<'_, Self>,
        _udata: &mut UData<'_>,
    ) -> impl PinInit<Pd, Error> {
        data.alloc_pd()
    }

    fn dealloc_pd(_dev: &rdma::Device<Self>, data: &IbData<'_>, pd: Pin<&mut Pd>) {
        data.dealloc_pd(&pd);
    }

    fn create_cq(
        dev: &rdma::Device<Self>,
        data: &Self::Data<'_>,
        setup: &CqSetup<'_, Self>,
        udata: &mut UData<'_>,
    ) -> impl PinInit<Cq, Error> {
        data.create_cq(dev, setup, udata)
    }

    fn destroy_cq(_dev: &rdma::Device<Self>, data: &IbData<'_>, cq: Pin<&mut Cq>) {
        data.destroy_cq(&cq);
    }

    fn reg_user_mr(
        dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        pd: &rdma::Pd<Self>,
        req: &UserMrReq,
        _udata: &mut UData<'_>,
    ) -> Result<NewMr<Mr>> {
        data.reg_user_mr(dev, pd, req)
    }

    fn dereg_mr(_dev: &rdma::Device<Self>, data: &IbData<'_>, mr: Mr) {
        data.dereg_mr(mr);
    }

    fn create_qp(
        dev: &rdma::Device<Self>,
        data: &Self::Data<'_>,
        setup: &QpSetup<'_, Self>,
        attr: &QpInitAttr<'_, Self>,
        udata: &mut UData<'_>,
    ) -> impl PinInit<Qp, Error> {
        Qp::new(data.create_qp(dev, setup, attr, udata))
    }

    fn modify_qp(
        _dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        qp: &rdma::Qp<Self>,
        attr: &QpAttr<'_>,
        mask: QpAttrMask,
        _udata: &mut UData<'_>,
    ) -> Result {
        data.modify_qp(qp.data(), attr, mask)
    }

    fn query_qp(
        _dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        qp: &rdma::Qp<Self>,
        out: &mut QpAttrOut<'_>,
    ) -> Result {
        data.query_qp(qp.data(), out)
    }

    fn destroy_qp(_dev: &rdma::Device<Self>, data: &IbData<'_>, qp: Pin<&mut Qp>) {
        data.destroy_qp(&qp);
    }

    fn get_dma_mr(
        _dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        pd: &rdma::Pd<Self>,
        access: u32,
    ) -> Result<NewMr<Mr>> {
        data.get_dma_mr::<Self>(pd, access)
    }

    fn alloc_mr(
        _dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        pd: &rdma::Pd<Self>,
        max_num_sg: u32,
    ) -> Result<NewMr<Mr>> {
        data.alloc_mr::<Self>(pd, max_num_sg)
    }

    fn mr_map_start(mr: &rdma::Mr<Self>) -> Result {
        mr.data().map_start()
    }

    fn mr_set_page(mr: &rdma::Mr<Self>, addr: u64) -> Result {
        mr.data().set_page(addr)
    }

    fn post_send(
        _dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        qp: &rdma::Qp<Self>,
        wrs: SendWrs<'_, Self>,
    ) -> core::result::Result<(), (Error, usize)> {
        data.post_send(qp.data(), wrs)
    }

    fn post_recv(
        _dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        qp: &rdma::Qp<Self>,
        wrs: RecvWrs<'_>,
    ) -> core::result::Result<(), (Error, usize)> {
        data.post_recv(qp.data(), wrs)
    }

    fn poll_cq(
        _dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        cq: &rdma::Cq<Self>,
        wc: &mut [Wc],
    ) -> usize {
        data.poll_cq(cq.data(), wc)
    }

    fn req_notify_cq(
        _dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        cq: &rdma::Cq<Self>,
        solicited: bool,
        report_missed: bool,
    ) -> Result<bool> {
        data.req_notify_cq(cq.data(), solicited, report_missed)
    }

    fn get_hw_stats(
        _dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        port: u32,
        values: &mut [u64],
    ) -> Result<usize> {
        data.get_hw_stats(port, values)
    }

    fn netdev_event(
        dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        port: Option<u32>,
        event: NetdevEvent,
        ndev: &NetDevice,
    ) {
        data.netdev_event(dev, port, event, ndev)
    }
}

#[vtable]
impl rdma::Driver for Iwarp {
    type Data<'a> = IbData<'a>;
    type UContext = UCtx;
    type Pd = Pd;
    type Cq = Cq;
    type Qp = Qp;
    type Mr = Mr;
    const DRIVER_ID: DriverId = DriverId::ERDMA;
    const UVERBS_ABI_VERSION: u32 = ABI_VERSION;
    const HW_PORT_STATS: &'static [StatDesc] = &HW_STATS;

    fn query_device(
        _dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        attr: &mut DeviceAttr,
        _udata: &mut UData<'_>,
    ) -> Result {
        data.query_device(attr)
    }

    fn query_port(
        dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        port: u32,
        attr: &mut PortAttr,
    ) -> Result {
        data.query_port(dev, port, attr)
    }

    fn get_port_immutable(
        _dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        _port: u32,
        immutable: &mut PortImmutable,
    ) -> Result {
        data.get_port_immutable(immutable);
        Ok(())
    }

    fn query_gid(
        _dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        _port: u32,
        index: u32,
    ) -> Result<Gid> {
        data.query_gid(index)
    }

    fn alloc_ucontext(
        _dev: &rdma::Device<Self>,
        data: &Self::Data<'_>,
        setup: &UContextSetup<'_>,
        udata: &mut UData<'_>,
    ) -> impl PinInit<UCtx, Error> {
        data.alloc_ucontext(setup, udata)
    }

    fn dealloc_ucontext(_dev: &rdma::Device<Self>, data: &IbData<'_>, ctx: Pin<&mut UCtx>) {
        data.dealloc_ucontext(&ctx);
    }

    fn alloc_pd(
        _dev: &rdma::Device<Self>,
        data: &Self::Data<'_>,
        _setup: &PdSetup<'_, Self>,
        _udata: &mut UData<'_>,
    ) -> impl PinInit<Pd, Error> {
        data.alloc_pd()
    }

    fn dealloc_pd(_dev: &rdma::Device<Self>, data: &IbData<'_>, pd: Pin<&mut Pd>) {
        data.dealloc_pd(&pd);
    }

    fn create_cq(
        dev: &rdma::Device<Self>,
        data: &Self::Data<'_>,
        setup: &CqSetup<'_, Self>,
        udata: &mut UData<'_>,
    ) -> impl PinInit<Cq, Error> {
        data.create_cq(dev, setup, udata)
    }

    fn destroy_cq(_dev: &rdma::Device<Self>, data: &IbData<'_>, cq: Pin<&mut Cq>) {
        data.destroy_cq(&cq);
    }

    fn reg_user_mr(
        dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        pd: &rdma::Pd<Self>,
        req: &UserMrReq,
        _udata: &mut UData<'_>,
    ) -> Result<NewMr<Mr>> {
        data.reg_user_mr(dev, pd, req)
    }

    fn dereg_mr(_dev: &rdma::Device<Self>, data: &IbData<'_>, mr: Mr) {
        data.dereg_mr(mr);
    }

    fn get_hw_stats(
        _dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        port: u32,
        values: &mut [u64],
    ) -> Result<usize> {
        data.get_hw_stats(port, values)
    }

    fn netdev_event(
        dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        port: Option<u32>,
        event: NetdevEvent,
        ndev: &NetDevice,
    ) {
        data.netdev_event(dev, port, event, ndev)
    }
}

/// A registered device of either personality.
pub(crate) enum IbDevice<'bound> {
    Roce(rdma::Registration<'bound, Roce>),
    Iwarp(rdma::Registration<'bound, Iwarp>),
}

impl<'bound> IbDevice<'bound> {
    /// Registers the adapter as `erdma_<n>`, on `ndev`, with `ceqs` completion vectors.
    pub(crate) fn register(
        data: IbData<'bound>,
        ndev: &NetDevice,
        ceqs: u32,
        module: &'static ThisModule,
    ) -> Result<Self> {
        let pdev = data.hw.pdev;
        Ok(match data.protocol {
            Protocol::RoceV2 => Self::Roce(Self::register_as(
                pdev,
                rdma::NodeType::IbCa,
                data,
                ndev,
                ceqs,
                module,
            )?),
            Protocol::Iwarp => Self::Iwarp(Self::register_as(
                pdev,
                rdma::NodeType::Rnic,
                data,
                ndev,
                ceqs,
                module,
            )?),
        })
    }

    fn register_as<T: for<'a> rdma::Driver<Data<'a> = IbData<'a>>>(
        pdev: &'bound kernel::pci::Device<device::Bound>,
        node_type: rdma::NodeType,
        data: IbData<'bound>,
        ndev: &NetDevice,
        ceqs: u32,
        module: &'static ThisModule,
    ) -> Result<rdma::Registration<'bound, T>> {
        let mut dev = rdma::UniqueDevice::<T>::new(pdev.as_ref(), module)?;
        dev.set_node_type(node_type)
            .set_node_guid(Guid::from_mac(data.mac.0))
            .set_node_desc(NODE_DESC)
            .set_num_comp_vectors(ceqs)
            .set_local_dma_lkey(data.caps.local_dma_lkey)
            .set_netdev(PORT, ndev)?;
        // SAFETY: The registration is kept in the driver's bound data and dropped at unbind (or
        // on the probe error path), never leaked.
        unsafe { rdma::Registration::new(dev, c"erdma_%d", pdev.as_ref(), Ok::<_, Error>(data)) }
    }

    /// The device's name.
    pub(crate) fn name(&self) -> &CStr {
        match self {
            Self::Roce(r) => r.device().name(),
            Self::Iwarp(r) => r.device().name(),
        }
    }
}
