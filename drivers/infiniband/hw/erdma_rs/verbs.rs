// SPDX-License-Identifier: GPL-2.0

//! The adapter's [`rdma::Driver`]: the operations the RDMA core calls, dispatched to the device
//! ([`IbData`]) and to the verbs objects ([`Pd`], [`Cq`], [`Qp`], [`Mr`]).
//!
//! The two protocols the adapter speaks differ in a few device operations (RoCEv2 has a GID
//! table the core manages, a P_Key and a link-layer query; iWARP has neither): those are the
//! [`rdma::DeviceOps`] of [`Roce`] and [`Iwarp`], added to a device by its protocol. Every other
//! operation is [`Erdma`]'s, the same for both.

use kernel::{
    net::device::{
        Event as NetdevEvent,
        NetDevice, //
    },
    prelude::*,
    rdma::{
        self,
        iwcm::{
            CmId,
            ConnParam, //
        },
        AccessFlags,
        AhAttr,
        AhAttrOut,
        AhSetup,
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
        QpEvents,
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
        aref::ARef,
        Arc, //
    },
};

use crate::{
    ah::Ah,
    cm::{
        self,
        CmDevice,
        CmHw,
        IwQp, //
    },
    cq::Cq,
    ibdev::{
        DeviceRef,
        IbData,
        IwDev,
        UCtx,
        HW_STATS,
        PORT, //
    },
    mr::Mr,
    pd::Pd,
    qp::Qp,
};

/// The uverbs ABI of `erdma-abi.h`.
const ABI_VERSION: u32 = 1;
const NODE_DESC: &[u8] = b"Elastic RDMA Adapter stack";

/// The adapter's driver: the operations devices of both protocols have.
pub(crate) struct Erdma;
/// The operations only RoCEv2 devices have: a GID table the core manages, a P_Key, a
/// link-layer query and address handles.
pub(crate) struct Roce;
/// The operations only iWARP devices have: those of the iWARP connection manager, which
/// connects their queue pairs ([`crate::cm`]).
pub(crate) struct Iwarp;
/// Queue pairs, fast-registration and DMA regions, and the kernel verbs.
pub(crate) struct DataPath;

#[vtable]
impl rdma::Driver for Erdma {
    type Data<'a> = IbData<'a>;
    type UContext = UCtx;
    type Pd = Pd;
    type Cq = Cq;
    type Qp = Qp;
    type Mr = Mr;
    type Ah = Ah;
    type Ops = Self;
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

    fn dereg_mr(_dev: &rdma::Device<Self>, data: &IbData<'_>, mr: Mr) {
        mr.dereg(data);
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
impl rdma::DeviceOps<Erdma> for Erdma {
    fn query_gid(
        _dev: &rdma::Device<Erdma>,
        data: &IbData<'_>,
        _port: u32,
        index: u32,
    ) -> Result<Gid> {
        data.query_gid(index)
    }

    fn alloc_ucontext(
        _dev: &rdma::Device<Erdma>,
        data: &<Erdma as rdma::Driver>::Data<'_>,
        setup: &UContextSetup<'_>,
        udata: &mut UData<'_>,
    ) -> impl PinInit<UCtx, Error> {
        data.alloc_ucontext(setup, udata)
    }

    fn dealloc_ucontext(_dev: &rdma::Device<Erdma>, data: &IbData<'_>, ctx: Pin<&mut UCtx>) {
        data.dealloc_ucontext(&ctx);
    }

    fn alloc_pd(
        _dev: &rdma::Device<Erdma>,
        data: &<Erdma as rdma::Driver>::Data<'_>,
        _setup: &PdSetup<'_, Erdma>,
        _udata: &mut UData<'_>,
    ) -> impl PinInit<Pd, Error> {
        Pd::alloc(data)
    }

    fn dealloc_pd(_dev: &rdma::Device<Erdma>, data: &IbData<'_>, pd: Pin<&mut Pd>) {
        pd.dealloc(data);
    }

    fn create_cq(
        dev: &rdma::Device<Erdma>,
        data: &<Erdma as rdma::Driver>::Data<'_>,
        setup: &CqSetup<'_, Erdma>,
        udata: &mut UData<'_>,
    ) -> impl PinInit<Cq, Error> {
        Cq::create(data, dev, setup, udata)
    }

    fn destroy_cq(_dev: &rdma::Device<Erdma>, data: &IbData<'_>, cq: Pin<&mut Cq>) {
        cq.destroy(data);
    }

    fn reg_user_mr(
        dev: &rdma::Device<Erdma>,
        data: &IbData<'_>,
        pd: &rdma::Pd<Erdma>,
        req: &UserMrReq,
        _udata: &mut UData<'_>,
    ) -> Result<NewMr<Mr>> {
        Mr::reg_user(data, dev, pd, req)
    }

    fn get_hw_stats(
        _dev: &rdma::Device<Erdma>,
        data: &IbData<'_>,
        port: u32,
        values: &mut [u64],
    ) -> Result<usize> {
        data.get_hw_stats(port, values)
    }
}

#[vtable]
impl rdma::DeviceOps<Erdma> for Roce {
    fn get_link_layer(_dev: &rdma::Device<Erdma>, _data: &IbData<'_>, _port: u32) -> LinkLayer {
        LinkLayer::Ethernet
    }

    fn query_pkey(
        _dev: &rdma::Device<Erdma>,
        _data: &IbData<'_>,
        _port: u32,
        index: u16,
    ) -> Result<u16> {
        if index != 0 {
            return Err(EINVAL);
        }
        Ok(0xffff)
    }

    fn add_gid(_dev: &rdma::Device<Erdma>, data: &IbData<'_>, attr: &GidAttr) -> Result {
        data.set_gid(attr, true)
    }

    fn del_gid(_dev: &rdma::Device<Erdma>, data: &IbData<'_>, attr: &GidAttr) -> Result {
        data.set_gid(attr, false)
    }

    fn create_ah(
        _dev: &rdma::Device<Erdma>,
        data: &<Erdma as rdma::Driver>::Data<'_>,
        setup: &AhSetup<'_, Erdma>,
        attr: &AhAttr<'_>,
    ) -> impl PinInit<Ah, Error> {
        Ah::create(data, setup, attr)
    }

    fn destroy_ah(
        _dev: &rdma::Device<Erdma>,
        data: &IbData<'_>,
        ah: Pin<&mut Ah>,
        sleepable: bool,
    ) {
        ah.destroy(data, sleepable);
    }

    fn query_ah(
        _dev: &rdma::Device<Erdma>,
        _data: &IbData<'_>,
        ah: &rdma::Ah<Erdma>,
        out: &mut AhAttrOut<'_>,
    ) -> Result {
        ah.data().query(out);
        Ok(())
    }
}

#[vtable]
impl rdma::DeviceOps<Erdma> for DataPath {
    fn create_qp(
        dev: &rdma::Device<Erdma>,
        data: &<Erdma as rdma::Driver>::Data<'_>,
        setup: &QpSetup<'_, Erdma>,
        attr: &QpInitAttr<'_, Erdma>,
        udata: &mut UData<'_>,
    ) -> impl PinInit<Qp, Error> {
        Qp::new(Qp::create(data, dev, setup, attr, udata, || {
            let handle: Arc<dyn DeviceRef> = Arc::new(DevHandle(ARef::from(dev)), GFP_KERNEL)?;
            Ok(handle)
        }))
    }

    fn modify_qp(
        _dev: &rdma::Device<Erdma>,
        data: &IbData<'_>,
        qp: &rdma::Qp<Erdma>,
        attr: &QpAttr<'_>,
        mask: QpAttrMask,
        _udata: &mut UData<'_>,
    ) -> Result {
        qp.data().modify(data, attr, mask)
    }

    fn query_qp(
        _dev: &rdma::Device<Erdma>,
        data: &IbData<'_>,
        qp: &rdma::Qp<Erdma>,
        out: &mut QpAttrOut<'_>,
    ) -> Result {
        qp.data().query(data, out)
    }

    fn destroy_qp(_dev: &rdma::Device<Erdma>, data: &IbData<'_>, qp: Pin<&mut Qp>) {
        qp.destroy(data);
    }

    fn get_dma_mr(
        _dev: &rdma::Device<Erdma>,
        data: &IbData<'_>,
        pd: &rdma::Pd<Erdma>,
        access: AccessFlags,
    ) -> Result<NewMr<Mr>> {
        Mr::get_dma::<Erdma>(data, pd, access)
    }

    fn alloc_mr(
        _dev: &rdma::Device<Erdma>,
        data: &IbData<'_>,
        pd: &rdma::Pd<Erdma>,
        max_num_sg: u32,
    ) -> Result<NewMr<Mr>> {
        Mr::alloc_frmr::<Erdma>(data, pd, max_num_sg)
    }

    fn mr_map_start(mr: &rdma::Mr<Erdma>) -> Result {
        mr.data().map_start()
    }

    fn mr_set_page(mr: &rdma::Mr<Erdma>, addr: u64) -> Result {
        mr.data().set_page(addr)
    }

    fn post_send(
        _dev: &rdma::Device<Erdma>,
        data: &IbData<'_>,
        qp: &rdma::Qp<Erdma>,
        wrs: SendWrs<'_, Erdma>,
    ) -> core::result::Result<(), (Error, usize)> {
        qp.data().post_send(data, wrs)
    }

    fn post_recv(
        _dev: &rdma::Device<Erdma>,
        data: &IbData<'_>,
        qp: &rdma::Qp<Erdma>,
        wrs: RecvWrs<'_>,
    ) -> core::result::Result<(), (Error, usize)> {
        qp.data().post_recv(data, wrs)
    }

    fn poll_cq(
        _dev: &rdma::Device<Erdma>,
        data: &IbData<'_>,
        cq: &rdma::Cq<Erdma>,
        wc: &mut [Wc],
    ) -> usize {
        cq.data().poll(data, wc)
    }

    fn req_notify_cq(
        _dev: &rdma::Device<Erdma>,
        data: &IbData<'_>,
        cq: &rdma::Cq<Erdma>,
        solicited: bool,
        report_missed: bool,
    ) -> Result<bool> {
        cq.data().req_notify(data, solicited, report_missed)
    }
}

/// A device as work reaches it (the connection manager's, a queue pair's REFLUSH): through a
/// reference on the device, while it is registered.
struct DevHandle(ARef<rdma::Device<Erdma>>);

impl DeviceRef for DevHandle {
    fn with(&self, f: &mut dyn FnMut(&IbData<'_>)) -> bool {
        self.0.with_registered(|_, data| f(data)).is_some()
    }
}

impl CmDevice for DevHandle {
    fn with(&self, f: &mut dyn FnMut(&dyn CmHw)) -> bool {
        self.0
            .with_registered(|_, data| match data.iw() {
                Some(iw) => {
                    f(&iw);
                    true
                }
                None => false,
            })
            .unwrap_or(false)
    }
}

/// What the connection manager's operations on `dev` need: the device as it reaches it, and a
/// handle for its work.
fn cm_device<'a, 'b>(
    dev: &rdma::Device<Erdma>,
    data: &'a IbData<'b>,
) -> Result<(IwDev<'a, 'b>, Arc<dyn CmDevice>)> {
    let iw = data.iw().ok_or(EOPNOTSUPP)?;
    let handle: Arc<dyn CmDevice> = Arc::new(DevHandle(ARef::from(dev)), GFP_KERNEL)?;
    Ok((iw, handle))
}

/// The connection state of the iWARP queue pair numbered `qpn`.
fn iw_qp(data: &IbData<'_>, qpn: u32) -> Result<Arc<IwQp>> {
    data.objects
        .qps
        .lock()
        .get(&qpn)
        .and_then(|e| e.iw.clone())
        .ok_or(EINVAL)
}

#[vtable]
impl rdma::DeviceOps<Erdma> for Iwarp {
    fn iw_connect(
        dev: &rdma::Device<Erdma>,
        data: &IbData<'_>,
        id: &CmId,
        param: &ConnParam<'_>,
    ) -> Result {
        let (iw, handle) = cm_device(dev, data)?;
        cm::connect(&iw, handle, id, param, iw_qp(data, param.qpn)?)
    }

    fn iw_accept(
        _dev: &rdma::Device<Erdma>,
        data: &IbData<'_>,
        id: &CmId,
        param: &ConnParam<'_>,
    ) -> Result {
        let iw = data.iw().ok_or(EOPNOTSUPP)?;
        cm::accept(&iw, id, param, iw_qp(data, param.qpn)?)
    }

    fn iw_reject(
        _dev: &rdma::Device<Erdma>,
        data: &IbData<'_>,
        id: &CmId,
        private_data: &[u8],
    ) -> Result {
        cm::reject(&data.iw().ok_or(EOPNOTSUPP)?, id, private_data)
    }

    fn iw_create_listen(
        dev: &rdma::Device<Erdma>,
        data: &IbData<'_>,
        id: &CmId,
        backlog: i32,
    ) -> Result {
        let (iw, handle) = cm_device(dev, data)?;
        let ifindex = dev.netdev(PORT).map_or(0, |n| n.ifindex());
        cm::create_listen(&iw, handle, id, backlog, ifindex)
    }

    fn iw_destroy_listen(_dev: &rdma::Device<Erdma>, data: &IbData<'_>, id: &CmId) -> Result {
        cm::destroy_listen(&data.iw().ok_or(EOPNOTSUPP)?, id)
    }

    fn iw_get_qp(_dev: &rdma::Device<Erdma>, data: &IbData<'_>, qpn: u32) -> Option<QpEvents> {
        data.objects
            .qps
            .lock()
            .get(&qpn)
            .filter(|e| e.iw.is_some())
            .map(|e| e.events.clone())
    }

    fn iw_add_ref(qp: &rdma::Qp<Erdma>) {
        if let Some(iw) = qp.data().iw() {
            iw.add_ref();
        }
    }

    fn iw_rem_ref(qp: &rdma::Qp<Erdma>) {
        if let Some(iw) = qp.data().iw() {
            iw.rem_ref();
        }
    }
}

/// The registered device.
pub(crate) struct IbDevice<'bound>(rdma::Registration<'bound, Erdma>);

impl<'bound> IbDevice<'bound> {
    /// Registers the adapter as `erdma_<n>`, on `ndev`, with `ceqs` completion vectors.
    pub(crate) fn register(data: IbData<'bound>, ndev: &NetDevice, ceqs: u32) -> Result<Self> {
        let pdev = data.hw.pdev;
        let mut dev = rdma::UnregisteredDevice::<Erdma>::new(pdev.as_ref())?;
        // An iWARP adapter in compat mode is a RoCEv2 device to the core (erdma_rs_hw 7.3).
        if data.roce_face() {
            dev.add_ops::<Roce>()
                .add_ops::<DataPath>()
                .set_node_type(rdma::NodeType::IbCa);
        } else {
            // The port mapper learns the interface from the device (an unset name made rdma_cm
            // fail with Alibaba's own driver).
            let mut name = [0u8; 16];
            let len = ndev.name(&mut name);
            dev.add_ops::<Iwarp>()
                .add_ops::<DataPath>()
                .set_node_type(rdma::NodeType::Rnic)
                .set_iw_ifname(&name[..len]);
        }
        dev.set_node_guid(Guid::from_mac(data.mac.0))
            .set_node_desc(NODE_DESC)
            .set_num_comp_vectors(ceqs)
            .set_local_dma_lkey(data.caps.local_dma_lkey)
            .set_netdev(PORT, ndev)?;
        // SAFETY: The registration is kept in the driver's bound data and dropped at unbind (or
        // on the probe error path), never leaked.
        let reg = unsafe {
            rdma::Registration::new(dev, c"erdma_%d", pdev.as_ref(), Ok::<_, Error>(data))
        }?;
        Ok(Self(reg))
    }

    /// The device's name.
    pub(crate) fn name(&self) -> &CStr {
        self.0.device().name()
    }

    /// The registered device.
    pub(crate) fn device(&self) -> &rdma::Device<Erdma> {
        self.0.device()
    }
}
