// SPDX-License-Identifier: GPL-2.0

//! The adapter's [`rdma::Driver`]s: the operations the RDMA core calls, dispatched to the device
//! ([`IbData`]) and to the verbs objects ([`Pd`], [`Cq`], [`Qp`], [`Mr`]).
//!
//! The two protocols the adapter speaks differ in their device operations (RoCEv2 has a GID
//! table the core manages, a P_Key and a link-layer query; iWARP has neither), so each has its
//! own [`rdma::Driver`]: [`Roce`] and [`Iwarp`].

use kernel::{
    device,
    net::device::{
        Event as NetdevEvent,
        NetDevice, //
    },
    prelude::*,
    rdma::{
        self,
        CqSetup,
        DeviceAttr,
        DriverId,
        Gid,
        GidAttr,
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
    ThisModule,
};

use crate::{
    cq::Cq,
    ibdev::{
        IbData,
        UCtx,
        HW_STATS,
        PORT, //
    },
    mr::Mr,
    pd::Pd,
    qp::Qp,
    regs::Protocol,
};

/// The uverbs ABI of `erdma-abi.h`.
const ABI_VERSION: u32 = 1;
const NODE_DESC: &[u8] = b"Elastic RDMA Adapter stack";

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
        Pd::alloc(data)
    }

    fn dealloc_pd(_dev: &rdma::Device<Self>, data: &IbData<'_>, pd: Pin<&mut Pd>) {
        pd.dealloc(data);
    }

    fn create_cq(
        dev: &rdma::Device<Self>,
        data: &Self::Data<'_>,
        setup: &CqSetup<'_, Self>,
        udata: &mut UData<'_>,
    ) -> impl PinInit<Cq, Error> {
        Cq::create(data, dev, setup, udata)
    }

    fn destroy_cq(_dev: &rdma::Device<Self>, data: &IbData<'_>, cq: Pin<&mut Cq>) {
        cq.destroy(data);
    }

    fn reg_user_mr(
        dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        pd: &rdma::Pd<Self>,
        req: &UserMrReq,
        _udata: &mut UData<'_>,
    ) -> Result<NewMr<Mr>> {
        Mr::reg_user(data, dev, pd, req)
    }

    fn dereg_mr(_dev: &rdma::Device<Self>, data: &IbData<'_>, mr: Mr) {
        mr.dereg(data);
    }

    fn create_qp(
        dev: &rdma::Device<Self>,
        data: &Self::Data<'_>,
        setup: &QpSetup<'_, Self>,
        attr: &QpInitAttr<'_, Self>,
        udata: &mut UData<'_>,
    ) -> impl PinInit<Qp, Error> {
        Qp::new(Qp::create_hw(data, dev, setup, attr, udata))
    }

    fn modify_qp(
        _dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        qp: &rdma::Qp<Self>,
        attr: &QpAttr<'_>,
        mask: QpAttrMask,
        _udata: &mut UData<'_>,
    ) -> Result {
        qp.data().modify(data, attr, mask)
    }

    fn query_qp(
        _dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        qp: &rdma::Qp<Self>,
        out: &mut QpAttrOut<'_>,
    ) -> Result {
        qp.data().query(data, out)
    }

    fn destroy_qp(_dev: &rdma::Device<Self>, data: &IbData<'_>, qp: Pin<&mut Qp>) {
        qp.destroy(data);
    }

    fn get_dma_mr(
        _dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        pd: &rdma::Pd<Self>,
        access: u32,
    ) -> Result<NewMr<Mr>> {
        Mr::get_dma::<Self>(data, pd, access)
    }

    fn alloc_mr(
        _dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        pd: &rdma::Pd<Self>,
        max_num_sg: u32,
    ) -> Result<NewMr<Mr>> {
        Mr::alloc_frmr::<Self>(data, pd, max_num_sg)
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
        qp.data().post_send(data, wrs)
    }

    fn post_recv(
        _dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        qp: &rdma::Qp<Self>,
        wrs: RecvWrs<'_>,
    ) -> core::result::Result<(), (Error, usize)> {
        qp.data().post_recv(data, wrs)
    }

    fn poll_cq(
        _dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        cq: &rdma::Cq<Self>,
        wc: &mut [Wc],
    ) -> usize {
        cq.data().poll(data, wc)
    }

    fn req_notify_cq(
        _dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        cq: &rdma::Cq<Self>,
        solicited: bool,
        report_missed: bool,
    ) -> Result<bool> {
        cq.data().req_notify(data, solicited, report_missed)
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
        Pd::alloc(data)
    }

    fn dealloc_pd(_dev: &rdma::Device<Self>, data: &IbData<'_>, pd: Pin<&mut Pd>) {
        pd.dealloc(data);
    }

    fn create_cq(
        dev: &rdma::Device<Self>,
        data: &Self::Data<'_>,
        setup: &CqSetup<'_, Self>,
        udata: &mut UData<'_>,
    ) -> impl PinInit<Cq, Error> {
        Cq::create(data, dev, setup, udata)
    }

    fn destroy_cq(_dev: &rdma::Device<Self>, data: &IbData<'_>, cq: Pin<&mut Cq>) {
        cq.destroy(data);
    }

    fn reg_user_mr(
        dev: &rdma::Device<Self>,
        data: &IbData<'_>,
        pd: &rdma::Pd<Self>,
        req: &UserMrReq,
        _udata: &mut UData<'_>,
    ) -> Result<NewMr<Mr>> {
        Mr::reg_user(data, dev, pd, req)
    }

    fn dereg_mr(_dev: &rdma::Device<Self>, data: &IbData<'_>, mr: Mr) {
        mr.dereg(data);
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
