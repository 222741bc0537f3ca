// SPDX-License-Identifier: GPL-2.0

//! Queue pairs (erdma_rs_hw 3.5, 7.2): RC QPs for user space and kernel consumers, and the GSI QP
//! of RoCE adapters. User queues live in user memory; kernel queues are driven by
//! [`crate::kverbs`].

use kernel::{
    impl_has_work, new_mutex, new_work,
    prelude::*,
    rbtree::RBTreeNode,
    rdma::{
        self,
        qp::udp_sport,
        AccessFlags,
        CqEvents,
        QpAttr,
        QpAttrBit,
        QpAttrMask,
        QpAttrOut,
        QpCap,
        QpInitAttr,
        QpState,
        QpType,
        RecvWrs,
        SendWrs,
        UData,
        Umem, //
    },
    sync::{
        Arc,
        Mutex, //
    },
    workqueue::{
        Work,
        WorkItem, //
    },
};
use zerocopy::FromZeros;

use crate::{
    ah::{
        address_vector,
        compat_ips, //
    },
    cm::{
        CompatEnd,
        IwQp,
        IwStateSink, //
    },
    cmdq::Wait,
    commands::{
        CreateQp,
        CreateQpCfg0,
        CreateQpCfg1,
        CreateQpCfg2,
        CreateQpQueueCfg,
        DestroyQp,
        ModifyQpCfg,
        ModifyQpMask,
        ModifyQpRoce,
        QpDbCfg,
        QueryQp,
        QueueMttCfg, //
    },
    consts::{
        multiple_of,
        qp_type,
        GSI_QPN,
        INLINE_MTT,
        KERNEL_QP_PAGE_CODE,
        MAX_INLINE,
        MAX_RD_ATOM,
        MAX_RECV_SGE,
        MAX_SEND_SGE,
        MAX_SEND_WR,
        QP_PAGE_SIZES,
        WQEBBS_PER_WR,
        WQEBB_SIZE, //
    },
    cq::Cq,
    formats::low32,
    ibdev::{
        DeviceRef,
        IbData,
        Personality,
        UCtx, //
    },
    ids::{
        IdKind,
        ObjIds,
        TakenId, //
    },
    kverbs::{
        AddressHandle,
        FastReg,
        KernelCq,
        KernelQp,
        QpEntry, //
    },
    mtt::{
        CreateReq,
        DbRecord,
        Mtt, //
    },
    object::{
        retire,
        Kind,
        Numbers, //
    },
    pd::Pd,
    qpstate::transition,
    sgsi::{
        SoftQp,
        SoftRoute, //
    },
};

/// The response to CREATE_QP (`struct erdma_uresp_create_qp`).
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable)]
struct CreateQpResp {
    qpn: u32,
    sq_depth: u32,
    rq_depth: u32,
    rq_offset: u32,
}

/// What a compat-mode modify gives a queue pair (erdma_rs_hw 7.3), kept once it succeeds.
#[derive(Clone, Copy)]
struct CompatKept {
    ips: Option<([u8; 4], [u8; 4])>,
    dest_qpn: Option<u32>,
    timeout: Option<u8>,
}

impl CompatKept {
    fn apply(self, shadow: &mut QpShadow) {
        if let Some(ips) = self.ips {
            shadow.compat_ips = Some(ips);
        }
        if let Some(qpn) = self.dest_qpn {
            shadow.dest_qpn = qpn;
        }
        if let Some(t) = self.timeout {
            shadow.timeout = t;
        }
    }
}

/// The state of a queue pair the driver keeps for modify and query.
struct QpShadow {
    state: QpState,
    dest_qpn: u32,
    /// Compat mode (erdma_rs_hw 7.3): the local and remote IPv4 addresses of the last address
    /// vector, for RTS.
    compat_ips: Option<([u8; 4], [u8; 4])>,
    qkey: u32,
    /// The local ACK timeout, reported by query only: the adapter does not take it
    /// (erdma_rs_hw 10.15).
    timeout: u8,
}

/// The user memory of a user queue pair.
struct UserQp {
    rq_offset: u64,
    _sq_mtt: Mtt,
    _rq_mtt: Mtt,
    _sq: Umem,
    _rq: Umem,
    _dbrec: DbRecord,
}

/// What a queue pair holds in the adapter.
pub(crate) struct QpHw {
    qpn: u32,
    qp_type: QpType,
    sq_depth: u32,
    rq_depth: u32,
    sq_sig_all: bool,
    kernel: Option<Arc<KernelQp>>,
    /// The kernel CQs the kernel queue pair completes through (the receive CQ only if it is
    /// another one).
    cqs: [Option<Arc<KernelCq>>; 2],
    /// Shared so that a failed DESTROY_QP can keep it ([`crate::hw::Hw::strand`]).
    user: Option<Arc<UserQp>>,
    /// The connection state of a queue pair of an iWARP adapter.
    iw: Option<Arc<IwQp>>,
    /// The REFLUSH work of a kernel queue pair.
    reflusher: Option<Arc<Reflusher>>,
}

/// The REFLUSH of a kernel queue pair in ERROR (erdma_rs_hw 10.13) as device work: a post, in
/// whatever context it runs, only queues it on the device's work queue; the work sends the
/// command and sleeps for its completion. Queueing it while it is still queued coalesces: one
/// REFLUSH then covers every post before it runs, as it reads the producer indices when it
/// runs.
#[pin_data]
pub(crate) struct Reflusher {
    qp: Arc<KernelQp>,
    dev: Arc<dyn DeviceRef>,
    /// The queue pair's CQs (send, receive): woken when the device is out of reach and the
    /// adapter failed, so that their consumers poll the flushed work ([`crate::health`]).
    cqs: [CqEvents; 2],
    #[pin]
    work: Work<Reflusher>,
    /// Cleared, under the lock, before the queue pair is destroyed: no REFLUSH may name its
    /// QPN afterwards (the number may be another queue pair's by then).
    #[pin]
    live: Mutex<bool>,
}

impl_has_work! {
    impl HasWork<Self> for Reflusher { self.work }
}

impl WorkItem for Reflusher {
    type Pointer = Arc<Reflusher>;

    fn run(this: Arc<Reflusher>) {
        let live = this.live.lock();
        // Not if the queue pair left ERROR (RESET) since the post asked.
        if *live && this.qp.in_error() {
            let reached = this.dev.with(&mut |data| data.reflush(&this.qp.reflush()));
            // Unregistering (a drain in a consumer's teardown): no command can run; a failed
            // adapter's work completes as the driver flushes it, when the consumers poll.
            if !reached {
                for cq in &this.cqs {
                    cq.completion();
                }
            }
        }
        drop(live);
    }
}

impl Reflusher {
    fn new(qp: Arc<KernelQp>, dev: Arc<dyn DeviceRef>, cqs: [CqEvents; 2]) -> Result<Arc<Self>> {
        Arc::pin_init(
            try_pin_init!(Self {
                qp,
                dev,
                cqs,
                work <- new_work!("erdma_rs::qp::Reflusher::work"),
                live <- new_mutex!(true),
            }),
            GFP_KERNEL,
        )
    }

    /// Asks for a REFLUSH, in any context: queued unless queued already.
    fn request(self: &Arc<Self>, data: &IbData<'_>) {
        // Already queued: that run covers this post too.
        let _ = data.work.enqueue(self.clone());
    }

    /// No REFLUSH after this returns (a running one is waited for).
    fn stop(&self) {
        *self.live.lock() = false;
    }
}

/// A queue pair.
#[pin_data]
pub(crate) struct Qp {
    imp: QpImpl,
    #[pin]
    shadow: Mutex<QpShadow>,
}

/// What carries a queue pair: the adapter, or the driver (compat mode's GSI QP, erdma_rs_hw 7.3).
pub(crate) enum QpImpl {
    Hw(QpHw),
    Soft(Arc<SoftQp>),
}

/// The MTT word of CREATE_QP for a queue described by `mtt`.
fn mtt_cfg(mtt: &Mtt) -> QueueMttCfg {
    // CAST: an offset inside a page of at most 512 KiB.
    QueueMttCfg::zeroed()
        .with_page_offset_4k(low32((mtt.offset >> 12) as u32))
        .with_count(low32(mtt.count))
        .with_level(low32(mtt.level))
}

/// Checks the sizes a queue pair asks for against the adapter's limits (erdma_rs_hw 9.1).
fn check_cap(data: &IbData<'_>, cap: &QpCap) -> Result {
    let max_recv = 1u32 << data.caps.max_recv_wr_log2;
    if cap.max_send_wr == 0
        || cap.max_send_wr > MAX_SEND_WR
        || cap.max_recv_wr == 0
        || cap.max_recv_wr > max_recv
        || cap.max_send_sge > MAX_SEND_SGE
        || cap.max_recv_sge > MAX_RECV_SGE
        || cap.max_inline_data > MAX_INLINE
    {
        return Err(EINVAL);
    }
    Ok(())
}

impl Qp {
    /// A queue pair in RESET around what [`Qp::create`] made.
    pub(crate) fn new(imp: Result<QpImpl>) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            imp: imp?,
            shadow <- new_mutex!(QpShadow {
                state: QpState::Reset,
                dest_qpn: 0,
                compat_ips: None,
                qkey: 0,
                timeout: 0,
            }),
        }? Error)
    }

    /// Creates the queue pair: in the adapter, or in software for the GSI QP of an adapter in
    /// compat mode.
    pub(crate) fn create<T: rdma::Driver<UContext = UCtx, Pd = Pd, Cq = Cq>>(
        data: &IbData<'_>,
        dev: &rdma::Device<T>,
        setup: &rdma::QpSetup<'_, T>,
        attr: &QpInitAttr<'_, T>,
        udata: &mut UData<'_>,
        dev_ref: impl FnOnce() -> Result<Arc<dyn DeviceRef>>,
    ) -> Result<QpImpl> {
        if let (Some(QpType::Gsi), Some(gsi)) = (attr.qp_type(), data.soft_gsi()) {
            if udata.is_user() {
                return Err(EOPNOTSUPP);
            }
            if attr.has_srq() || !attr.create_flags().is_empty() {
                return Err(EOPNOTSUPP);
            }
            let (Some(scq), Some(rcq)) = (attr.send_cq(), attr.recv_cq()) else {
                return Err(EINVAL);
            };
            let (Some(sk), Some(rk)) = (scq.data().kernel(), rcq.data().kernel()) else {
                return Err(EINVAL);
            };
            let qp = SoftQp::create(
                gsi,
                setup.events(),
                [
                    (sk, scq.data().events.clone()),
                    (rk, rcq.data().events.clone()),
                ],
                attr.cap(),
                attr.sq_sig_all(),
            )?;
            setup.set_qp_num(GSI_QPN);
            return Ok(QpImpl::Soft(qp));
        }
        Self::create_hw(data, dev, setup, attr, udata, dev_ref).map(QpImpl::Hw)
    }

    /// Creates the queue pair in the adapter.
    fn create_hw<T: rdma::Driver<UContext = UCtx, Pd = Pd, Cq = Cq>>(
        data: &IbData<'_>,
        dev: &rdma::Device<T>,
        setup: &rdma::QpSetup<'_, T>,
        attr: &QpInitAttr<'_, T>,
        udata: &mut UData<'_>,
        dev_ref: impl FnOnce() -> Result<Arc<dyn DeviceRef>>,
    ) -> Result<QpHw> {
        let qp_type = attr.qp_type().ok_or(EOPNOTSUPP)?;
        let roce = matches!(data.proto, Personality::Roce(_));
        match qp_type {
            QpType::Rc => {}
            // Datagrams on RoCE adapters (erdma_rs_hw 7.2): UD QPs, and the GSI QP of the core's
            // MAD layer, a kernel UD QP with number 1. User space may create UD QPs (as with
            // the C driver), though the provider has no address handles to send with.
            QpType::Ud if roce => {}
            QpType::Gsi if roce && !udata.is_user() => {}
            _ => return Err(EOPNOTSUPP),
        }
        let datagram = matches!(qp_type, QpType::Ud | QpType::Gsi);
        if attr.has_srq() || !attr.create_flags().is_empty() {
            return Err(EOPNOTSUPP);
        }
        let cap = attr.cap();
        check_cap(data, &cap)?;
        let (Some(scq), Some(rcq)) = (attr.send_cq(), attr.recv_cq()) else {
            return Err(EINVAL);
        };
        let sq_depth = (cap.max_send_wr * WQEBBS_PER_WR)
            .checked_next_power_of_two()
            .ok_or(EINVAL)?;
        let rq_depth = cap.max_recv_wr.checked_next_power_of_two().ok_or(EINVAL)?;
        let sq_bytes = u64::from(sq_depth) * WQEBB_SIZE as u64;
        let rq_bytes = u64::from(rq_depth) * WQEBB_SIZE as u64;
        let mut cmd = CreateQp {
            cfg0: CreateQpCfg0::zeroed(),
            cfg1: CreateQpCfg1::zeroed()
                .with_rq_depth_log2(low32(rq_depth.trailing_zeros()))
                .with_pdn(low32(setup.pd().data().pdn)),
            sq_cfg: CreateQpQueueCfg::zeroed().with_cqn(low32(scq.data().cqn)),
            rq_cfg: CreateQpQueueCfg::zeroed().with_cqn(low32(rcq.data().cqn)),
            sq_addr: 0,
            rq_addr: 0,
            sq_mtt_cfg: QueueMttCfg::zeroed(),
            rq_mtt_cfg: QueueMttCfg::zeroed(),
            sq_dbrec: 0,
            rq_dbrec: 0,
            sq_mtt: [0; 3],
            rq_mtt: [0; 3],
            db_cfg: QpDbCfg::zeroed(),
            cfg2: CreateQpCfg2::zeroed(),
        };

        let (kernel, user) = if udata.is_user() {
            let ctx = setup.ucontext().ok_or(EINVAL)?;
            let req: CreateReq = udata.read_in(size_of::<CreateReq>())?;
            let rq_offset = sq_bytes.next_multiple_of(4096);
            // The buffer must hold both queues (the C driver does not check the receive
            // queue), and queue offsets reach the adapter in 4 KiB units.
            let need = rq_offset + rq_bytes;
            if !multiple_of(req.qbuf_va, 4096)
                || u64::from(req.qbuf_len) < need
                || req.qbuf_va.checked_add(need).is_none()
            {
                return Err(EINVAL);
            }
            let rq_va = req.qbuf_va + rq_offset;
            // The adapter only reads work queues: pinned without write access.
            let sq = Umem::get(dev, req.qbuf_va, sq_bytes as usize, AccessFlags::default())?;
            let rq = Umem::get(dev, rq_va, rq_bytes as usize, AccessFlags::default())?;
            let sq_mtt = Mtt::new(data.bound(), &sq, req.qbuf_va, QP_PAGE_SIZES, INLINE_MTT)?;
            let rq_mtt = Mtt::new(data.bound(), &rq, rq_va, QP_PAGE_SIZES, INLINE_MTT)?;
            let dbrec = DbRecord::pin(dev, &ctx.dbrecs, req.db_va, 16)?;
            cmd.sq_cfg = cmd.sq_cfg.with_page_code(low32(sq_mtt.page_code()));
            cmd.rq_cfg = cmd.rq_cfg.with_page_code(low32(rq_mtt.page_code()));
            cmd.sq_addr = sq_mtt.entries[0];
            cmd.rq_addr = rq_mtt.entries[0];
            cmd.sq_mtt_cfg = mtt_cfg(&sq_mtt);
            cmd.rq_mtt_cfg = mtt_cfg(&rq_mtt);
            cmd.sq_dbrec = dbrec.dma;
            cmd.rq_dbrec = dbrec.dma + 8;
            cmd.sq_mtt = [sq_mtt.entries[1], sq_mtt.entries[2], sq_mtt.entries[3]];
            cmd.rq_mtt = [rq_mtt.entries[1], rq_mtt.entries[2], rq_mtt.entries[3]];
            if let Some(db) = ctx.db {
                // CREATE_QP names the "RDB" page for the receive queue (erdma_rs_hw 3.6).
                cmd.sq_cfg = cmd.sq_cfg.with_ext_db(true);
                cmd.db_cfg = QpDbCfg::zeroed().with_sq_page(db.sq).with_rq_page(db.rdb);
            }
            let user = UserQp {
                rq_offset,
                _sq_mtt: sq_mtt,
                _rq_mtt: rq_mtt,
                _sq: sq,
                _rq: rq,
                _dbrec: dbrec,
            };
            (None, Some(Arc::new(user, GFP_KERNEL)?))
        } else {
            // One contiguous buffer per queue, described as one "page" of 1 MiB.
            // CAST: depths of at most 32768 and 8192 (checked above).
            let k = KernelQp::new(
                data.bound(),
                sq_depth as u16,
                rq_depth as u16,
                attr.sq_sig_all(),
                datagram,
                data.compat.is_some(),
                setup.pd().data().pdn,
            )?;
            let k = Arc::pin_init(k, GFP_KERNEL)?;
            let one_page = QueueMttCfg::zeroed().with_count(1u8);
            cmd.sq_cfg = cmd.sq_cfg.with_page_code(low32(KERNEL_QP_PAGE_CODE));
            cmd.rq_cfg = cmd.rq_cfg.with_page_code(low32(KERNEL_QP_PAGE_CODE));
            cmd.sq_addr = k.sq_addr();
            cmd.rq_addr = k.rq_addr();
            cmd.sq_mtt_cfg = one_page;
            cmd.rq_mtt_cfg = one_page;
            cmd.sq_dbrec = k.sq_dbrec();
            cmd.rq_dbrec = k.rq_dbrec();
            (Some(k), None)
        };
        let reflusher = match &kernel {
            Some(k) => Some(Reflusher::new(
                k.clone(),
                dev_ref()?,
                [scq.data().events.clone(), rcq.data().events.clone()],
            )?),
            None => None,
        };

        // The GSI QP has its fixed number; the others take one, given back on error.
        if datagram {
            cmd.cfg2 = cmd.cfg2.with_qp_type(low32(qp_type::UD.into()));
        }
        let taken = if qp_type == QpType::Gsi {
            None
        } else {
            Some(ObjIds::take(&data.ids, IdKind::Qp)?)
        };
        let qpn = taken.as_ref().map_or(GSI_QPN, |t| t.get());
        // An iWARP queue pair is connected by the connection manager (erdma_rs_hw 7.1).
        let iw = if roce {
            None
        } else {
            let sink = kernel.clone().map(|k| -> Arc<dyn IwStateSink> { k });
            Some(Arc::pin_init(IwQp::new(qpn, sink), GFP_KERNEL)?)
        };
        let entry = Arc::new(
            QpEntry {
                events: setup.events(),
                kernel: kernel.clone(),
                iw: iw.clone(),
                soft: None,
            },
            GFP_KERNEL,
        )?;
        if let Some(k) = &kernel {
            k.set_qpn(qpn);
        }
        // A kernel queue pair's completions are looked up in its CQs (see KernelCq::poll).
        let mut cqs = [None, None];
        let mut cq_nodes = [None, None];
        if kernel.is_some() {
            for (i, cq) in [scq, rcq].into_iter().enumerate() {
                let Some(k) = cq.data().kernel() else {
                    return Err(EINVAL);
                };
                if i == 1 && cqs[0].as_ref().is_some_and(|s| Arc::ptr_eq(s, k)) {
                    break;
                }
                cq_nodes[i] = Some(RBTreeNode::new(qpn, entry.clone(), GFP_KERNEL)?);
                cqs[i] = Some(k.clone());
            }
        }
        let node = RBTreeNode::new(qpn, entry, GFP_KERNEL)?;
        cmd.cfg0 = CreateQpCfg0::zeroed()
            .with_sq_depth_log2(low32(sq_depth.trailing_zeros()))
            .with_qpn(low32(qpn));
        let reply = data.hw.exec(&cmd)?;
        if let Some(iw) = &iw {
            iw.set_cookie(reply.cookie);
        }
        // From here on, `destroy` undoes the creation.
        taken.map(TakenId::keep);
        data.objects.qps.lock().insert(node);
        for (cq, node) in cqs.iter().zip(cq_nodes) {
            if let (Some(cq), Some(node)) = (cq, node) {
                cq.attach(node);
            }
        }
        let qp = QpHw {
            qpn,
            qp_type,
            sq_depth,
            rq_depth,
            sq_sig_all: attr.sq_sig_all(),
            kernel,
            cqs,
            user,
            iw,
            reflusher,
        };
        setup.set_qp_num(qpn);
        if let Some(u) = &qp.user {
            let resp = CreateQpResp {
                qpn,
                sq_depth,
                rq_depth,
                // CAST: at most 1 MiB.
                rq_offset: u.rq_offset as u32,
            };
            if let Err(e) = udata.respond(&resp) {
                qp.destroy(data, QpState::Reset);
                return Err(e);
            }
        }
        Ok(qp)
    }
}

impl QpHw {
    /// After a post: a queue pair in ERROR flushes the new work only on REFLUSH, which posts
    /// (that may run where sleeping is not allowed) leave to the device's work queue.
    fn reflush_if_error(&self, data: &IbData<'_>, k: &KernelQp) {
        if k.in_error() {
            if let Some(r) = &self.reflusher {
                r.request(data);
            }
        }
    }

    /// What a kernel queue pair needs after it reached `state`: in ERROR, a REFLUSH for work
    /// posted while the adapter was getting there; in RESET, its completions in its CQs
    /// forgotten (erdma_rs_hw 10.12, 10.13).
    fn kernel_state_changed(&self, data: &IbData<'_>, k: &KernelQp, state: QpState) {
        match state {
            QpState::Err => data.reflush(&k.reflush()),
            QpState::Reset => {
                for cq in self.cqs.iter().flatten() {
                    if cq.forget_qp(self.qpn).is_err() {
                        dev_warn!(
                            data.dev(),
                            "QP {}: no memory to drop its completions at RESET\n",
                            self.qpn
                        );
                    }
                }
            }
            _ => {}
        }
    }

    /// Destroys the queue pair in the adapter, stopping it first unless it is in `state`
    /// RESET or ERROR. Its memory goes with `self`, or, if the adapter refuses, is kept with
    /// its QPN until unbind. An iWARP queue pair's connection stops first, and the connection
    /// manager lets go of it.
    fn destroy(&self, data: &IbData<'_>, state: QpState) {
        let qpn = self.qpn;
        if let (Some(iw), Some(dev)) = (&self.iw, data.iw()) {
            iw.destroy(&dev);
        } else if state != QpState::Err && state != QpState::Reset {
            // Stop the queue pair before it goes (erdma_rs_hw 10.11). Should the adapter refuse,
            // DESTROY_QP below still stops it, so the failure is only reported.
            let cmd = ModifyQpRoce {
                cfg: ModifyQpCfg::zeroed()
                    .with_state(low32(QpState::Err.to_raw()))
                    .with_qpn(low32(qpn)),
                mask: ModifyQpMask::zeroed().with_state(true),
                ..ModifyQpRoce::new_zeroed()
            };
            if let Err(e) = data.hw.exec(&cmd) {
                data.hw.reports.note(
                    data.dev(),
                    fmt!(
                        "MODIFY_QP {qpn} to ERROR before its destruction failed ({})\n",
                        e.to_errno()
                    ),
                );
            }
        }
        if let Some(r) = &self.reflusher {
            r.stop();
        }
        let kind = Kind(&data.ids, IdKind::Qp);
        retire(
            &data.hw,
            &DestroyQp { qpn },
            Wait::Sleep,
            fmt!("DESTROY_QP {qpn}"),
            // After this, neither the AEQ handler nor a kernel CQ finds the queue pair.
            || {
                for cq in self.cqs.iter().flatten() {
                    cq.detach(qpn);
                }
                let entry = data.objects.qps.lock().remove(&qpn);
                drop(entry);
            },
            // The GSI QP's number is fixed, not taken.
            (qpn != GSI_QPN).then_some((&kind as &dyn Numbers, qpn)),
            Some((self.kernel.clone(), self.user.clone())),
        );
    }
}

impl Qp {
    /// The connection state of an iWARP queue pair.
    pub(crate) fn iw(&self) -> Option<&Arc<IwQp>> {
        match &self.imp {
            QpImpl::Hw(hw) => hw.iw.as_ref(),
            QpImpl::Soft(_) => None,
        }
    }

    /// Destroys the queue pair in the adapter (or the driver); its memory goes with `self`.
    pub(crate) fn destroy(&self, data: &IbData<'_>) {
        match &self.imp {
            QpImpl::Hw(hw) => {
                let state = self.shadow.lock().state;
                hw.destroy(data, state);
            }
            QpImpl::Soft(soft) => soft.destroy(),
        }
    }

    /// Modifies a queue pair: by [`Qp::modify_iwarp`] on iWARP adapters; on RoCEv2 adapters
    /// (erdma_rs_hw 7.2) checks the transition against the verbs state machine, then sends the
    /// state, Q_Key, address vector, PSNs and destination QPN.
    pub(crate) fn modify(&self, data: &IbData<'_>, attr: &QpAttr<'_>, mask: QpAttrMask) -> Result {
        let hw = match &self.imp {
            QpImpl::Hw(hw) => hw,
            QpImpl::Soft(soft) => return soft.modify(attr, mask),
        };
        if let Some(iw) = &hw.iw {
            return self.modify_iwarp(data, hw, iw, attr, mask);
        }
        let mut shadow = self.shadow.lock();
        let next = transition(hw.qp_type, shadow.state, attr, mask)?;
        let dest_qpn = if mask.contains(QpAttrBit::DestQpn) {
            attr.dest_qp_num()
        } else {
            shadow.dest_qpn
        };
        // The adapter numbers states as the verbs do (erdma_rs_hw 3.5).
        let mut cmd = ModifyQpRoce {
            cfg: ModifyQpCfg::zeroed()
                .with_state(low32(next.to_raw()))
                .with_qpn(low32(hw.qpn)),
            mask: ModifyQpMask::zeroed().with_state(true),
            ..ModifyQpRoce::new_zeroed()
        };
        if mask.contains(QpAttrBit::Qkey) {
            cmd.mask = cmd.mask.with_qkey(true);
            cmd.qkey = attr.qkey();
        }
        if mask.contains(QpAttrBit::RqPsn) {
            cmd.mask = cmd.mask.with_rq_psn(true);
            cmd.rq_psn = attr.rq_psn() & 0xff_ffff;
        }
        if mask.contains(QpAttrBit::SqPsn) {
            cmd.mask = cmd.mask.with_sq_psn(true);
            cmd.sq_psn = attr.sq_psn() & 0xff_ffff;
        }
        if mask.contains(QpAttrBit::DestQpn) {
            cmd.mask = cmd.mask.with_dst_qpn(true);
            cmd.dst_qpn = dest_qpn & 0xff_ffff;
        }
        if mask.contains(QpAttrBit::Av) {
            cmd.mask = cmd.mask.with_av(true);
            let qpn = hw.qpn;
            cmd.av = address_vector(&attr.ah_attr(), |fl| udp_sport(fl, qpn, dest_qpn))?;
        }
        if let Err(e) = data.hw.exec(&cmd) {
            // A failed adapter has stopped every queue pair: stopping one succeeds, and its
            // kernel work completes as flushed, by the driver (a drain must not fail).
            if !(data.hw.failed() && matches!(next, QpState::Err | QpState::Reset)) {
                return Err(e);
            }
        }
        if let Some(k) = &hw.kernel {
            k.set_state(next);
            if mask.contains(QpAttrBit::Qkey) {
                k.set_qkey(attr.qkey());
            }
            hw.kernel_state_changed(data, k, next);
        }
        shadow.state = next;
        shadow.dest_qpn = dest_qpn;
        if mask.contains(QpAttrBit::Qkey) {
            shadow.qkey = attr.qkey();
        }
        if mask.contains(QpAttrBit::Timeout) {
            shadow.timeout = attr.timeout();
        }
        Ok(())
    }

    /// Modifies an iWARP queue pair (erdma_rs_hw 7.1): only its state counts. In compat mode
    /// (7.3) the transitions and their attributes are checked as on RoCEv2, the address vector
    /// and the destination QPN are kept, and RTR makes the connection up from them.
    fn modify_iwarp(
        &self,
        data: &IbData<'_>,
        hw: &QpHw,
        iw: &IwQp,
        attr: &QpAttr<'_>,
        mask: QpAttrMask,
    ) -> Result {
        let mut shadow = self.shadow.lock();
        let compat = match data.compat {
            Some(c) => Some((c, compat_attrs(hw, &shadow, iw, attr, mask)?)),
            None => None,
        };
        if !mask.contains(QpAttrBit::State) {
            if let Some((_, kept)) = compat {
                kept.apply(&mut shadow);
            }
            return Ok(());
        }
        let next = attr.state().ok_or(EINVAL)?;
        let dev = data.iw().ok_or(EINVAL)?;
        let moved = match compat {
            // The adapter has no receive-only state for a stream: RTR hands it the connection
            // already (as Alibaba's driver does), so that a peer that only reaches RTR (a
            // perftest server) receives; RTS then changes nothing.
            Some((c, kept)) if matches!(next, QpState::Rtr | QpState::Rts) => {
                let (local, remote) = kept.ips.or(shadow.compat_ips).ok_or(EINVAL)?;
                let qpn = kept.dest_qpn.unwrap_or(shadow.dest_qpn);
                iw.compat_rts(&dev, local, CompatEnd { ip: remote, qpn }, c.ports_base)
            }
            _ => iw.modify(&dev, next),
        };
        let modified = match moved {
            // As for RoCEv2 queue pairs: a failed adapter has stopped them all.
            Err(_) if data.hw.failed() && next == QpState::Err => Ok(()),
            m => m,
        };
        if let Some(k) = &hw.kernel {
            if modified.is_ok() {
                k.iw_state_changed(next);
            }
            // Stopped (also when the adapter or the connection stopped it first, which makes
            // this modify fail): what was posted completes as flushed, so that a consumer that
            // waits for its work before draining (nvmet-rdma) gets it back.
            let now = if k.in_error() { QpState::Err } else { next };
            if modified.is_ok() || now == QpState::Err {
                hw.kernel_state_changed(data, k, now);
            }
        }
        modified?;
        if let Some((_, kept)) = compat {
            kept.apply(&mut shadow);
        }
        shadow.state = next;
        Ok(())
    }

    /// Reports the state and attributes: a RoCEv2 queue pair's PSNs and state from the adapter,
    /// an iWARP queue pair's state as the connection left it.
    pub(crate) fn query(&self, data: &IbData<'_>, out: &mut QpAttrOut<'_>) -> Result {
        let hw = match &self.imp {
            QpImpl::Hw(hw) => hw,
            QpImpl::Soft(soft) => {
                soft.query(out);
                return Ok(());
            }
        };
        let qpn = hw.qpn;
        let shadow = self.shadow.lock();
        if let Some(iw) = &hw.iw {
            // In compat mode the verbs' state, which the adapter's RTS from RTR on hides.
            let state = match iw.state() {
                QpState::Rts if data.compat.is_some() => shadow.state,
                s => s,
            };
            out.set_state(state, false);
        } else {
            let resp = data.hw.exec(&QueryQp { qpn })?;
            // CAST: an 8-bit field.
            let state = QpState::from_raw(resp.state().get() as u32).ok_or(EIO)?;
            // CAST: fields of 24 bits.
            out.set_state(state, resp.sq_draining())
                .set_psns(resp.sq_psn().get() as u32, resp.rq_psn().get() as u32);
        }
        out.set_dest_qp_num(shadow.dest_qpn)
            .set_qkey(shadow.qkey)
            .set_timeout(shadow.timeout)
            .set_port(1)
            // CAST: 128 fits.
            .set_rd_atomic(MAX_RD_ATOM as u8, MAX_RD_ATOM as u8)
            .set_sq_sig_all(hw.sq_sig_all)
            .set_cap(QpCap {
                // The send queue's depth in basic blocks, as the C driver reports it.
                max_send_wr: hw.sq_depth,
                max_recv_wr: hw.rq_depth,
                max_send_sge: MAX_SEND_SGE,
                max_recv_sge: MAX_RECV_SGE,
                max_inline_data: MAX_INLINE,
            });
        Ok(())
    }

    /// Posts a kernel consumer's send work requests.
    pub(crate) fn post_send<T>(
        &self,
        data: &IbData<'_>,
        wrs: SendWrs<'_, T>,
    ) -> core::result::Result<(), (Error, usize)>
    where
        T: rdma::Driver,
        T::Mr: FastReg,
        T::Ah: AddressHandle + SoftRoute,
    {
        let hw = match &self.imp {
            QpImpl::Hw(hw) => hw,
            QpImpl::Soft(soft) => return soft.post_send(wrs),
        };
        let k = hw.kernel.as_ref().ok_or((EINVAL, 0))?;
        let ret = k.post_send(&data.hw.bar, wrs);
        hw.reflush_if_error(data, k);
        ret
    }

    /// Posts a kernel consumer's receive work requests.
    pub(crate) fn post_recv(
        &self,
        data: &IbData<'_>,
        wrs: RecvWrs<'_>,
    ) -> core::result::Result<(), (Error, usize)> {
        let hw = match &self.imp {
            QpImpl::Hw(hw) => hw,
            QpImpl::Soft(soft) => return soft.post_recv(wrs),
        };
        let k = hw.kernel.as_ref().ok_or((EINVAL, 0))?;
        let ret = k.post_recv(&data.hw.bar, wrs);
        hw.reflush_if_error(data, k);
        ret
    }
}

/// Compat mode (erdma_rs_hw 7.3): checks a modify as on RoCEv2 (the transition, with the
/// attributes the verbs require and allow for it; P_Key index 0) and returns what it gives
/// for RTS, kept once it succeeds.
fn compat_attrs(
    hw: &QpHw,
    shadow: &QpShadow,
    iw: &IwQp,
    attr: &QpAttr<'_>,
    mask: QpAttrMask,
) -> Result<CompatKept> {
    let known = if iw.state() == QpState::Err {
        QpState::Err
    } else {
        shadow.state
    };
    transition(hw.qp_type, known, attr, mask)?;
    Ok(CompatKept {
        ips: if mask.contains(QpAttrBit::Av) {
            Some(compat_ips(&attr.ah_attr())?)
        } else {
            None
        },
        dest_qpn: mask
            .contains(QpAttrBit::DestQpn)
            .then(|| attr.dest_qp_num()),
        timeout: mask.contains(QpAttrBit::Timeout).then(|| attr.timeout()),
    })
}
