// SPDX-License-Identifier: GPL-2.0

//! Completion queues (erdma_rs_hw 3.5, 4.4, 5.6): user ones, whose ring is in user memory, and
//! kernel ones, whose ring the driver reads (see [`crate::kverbs`]).

use kernel::{
    prelude::*,
    rbtree::RBTreeNode,
    rdma::{
        self,
        AccessFlag,
        UData,
        Umem,
        Wc, //
    },
    sync::Arc,
};

use crate::{
    cmdq::Wait,
    commands::{
        CreateCq,
        CreateCqCfg0,
        CreateCqCfg1,
        CreateCqCfg2,
        DestroyCq, //
    },
    consts::{
        multiple_of,
        CQE_SIZE,
        CQ_PAGE_SIZES,
        KERNEL_CQ_BYTES,
        KERNEL_CQ_PAGE_CODE, //
    },
    formats::low32,
    ibdev::{
        IbData,
        UCtx, //
    },
    ids::{
        IdKind,
        ObjIds, //
    },
    kverbs::{
        CqEntry,
        KernelCq, //
    },
    mtt::{
        CreateReq,
        DbRecord,
        Mtt, //
    },
    object::{
        retire,
        Kind, //
    },
    ring::{
        lower,
        upper, //
    },
};

/// The response to CREATE_CQ (`struct erdma_uresp_create_cq`).
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable)]
struct CreateCqResp {
    cqn: u32,
    depth: u32,
}

/// The user memory of a user completion queue.
struct UserCq {
    _mtt: Mtt,
    _buf: Umem,
    _dbrec: DbRecord,
}

/// A completion queue: a user one (its ring in user memory) or a kernel one.
pub(crate) struct Cq {
    pub(crate) cqn: u32,
    /// The CEQ that delivers its events.
    eqn: u32,
    kernel: Option<Arc<KernelCq>>,
    /// Shared so that a failed DESTROY_CQ can keep it ([`crate::hw::Hw::strand`]).
    user: Option<Arc<UserCq>>,
    /// Its consumer's events, for work that completes a failed adapter's work.
    pub(crate) events: kernel::rdma::CqEvents,
}

impl Cq {
    /// Creates a completion queue of at least the requested depth, rounded up to a power of two.
    pub(crate) fn create<T: rdma::Driver<UContext = UCtx>>(
        data: &IbData<'_>,
        dev: &rdma::Device<T>,
        setup: &rdma::CqSetup<'_, T>,
        udata: &mut UData<'_>,
    ) -> Result<Self> {
        let attr = setup.attr();
        if attr.cqe == 0 || attr.cqe > (1 << data.caps.max_cqe_log2) || !attr.flags.is_empty() {
            return Err(EINVAL);
        }
        if attr.comp_vector >= data.ceqs {
            return Err(EINVAL);
        }
        let depth = attr.cqe.checked_next_power_of_two().ok_or(EINVAL)?;
        let cqe_size = CQE_SIZE as u64;
        // Completion vector c is CEQ c + 1.
        let eqn = attr.comp_vector + 1;
        let table = data.objects.ceq_cqs(eqn)?;
        let mut cmd = CreateCq {
            cfg0: CreateCqCfg0::zeroed(),
            addr_lo: 0,
            addr_hi: 0,
            cfg1: CreateCqCfg1::zeroed().with_eqn(low32(eqn)),
            dbrec: 0,
            first_offset: 0,
            cfg2: CreateCqCfg2::zeroed(),
        };
        let (kernel, user) = if udata.is_user() {
            let ctx = setup.ucontext().ok_or(EINVAL)?;
            let req: CreateReq = udata.read_in(size_of::<CreateReq>())?;
            // The buffer must hold every entry (the C driver does not check this).
            let need = u64::from(depth) * cqe_size;
            if !multiple_of(req.qbuf_va, cqe_size)
                || u64::from(req.qbuf_len) < need
                || req.qbuf_va.checked_add(need).is_none()
            {
                return Err(EINVAL);
            }
            let buf = Umem::get(
                dev,
                req.qbuf_va,
                need as usize,
                AccessFlag::LocalWrite.into(),
            )?;
            let mtt = Mtt::new(data.bound(), &buf, req.qbuf_va, CQ_PAGE_SIZES, 1)?;
            let dbrec = DbRecord::pin(dev, &ctx.dbrecs, req.db_va, 8)?;
            cmd.cfg0 = cmd.cfg0.with_page_code(low32(mtt.page_code()));
            cmd.addr_lo = lower(mtt.entries[0]);
            cmd.addr_hi = upper(mtt.entries[0]);
            cmd.cfg1 = cmd
                .cfg1
                .with_mtt_count(low32(mtt.count))
                .with_mtt_level(low32(mtt.level));
            cmd.dbrec = dbrec.dma;
            // CAST: an offset inside a page of at most 32 MiB.
            cmd.first_offset = mtt.offset as u32;
            if let Some(db) = ctx.db {
                cmd.cfg1 = cmd.cfg1.with_ext_db(true);
                cmd.cfg2 = cmd.cfg2.with_db_page(db.cdb);
            }
            let user = UserCq {
                _mtt: mtt,
                _buf: buf,
                _dbrec: dbrec,
            };
            (None, Some(Arc::new(user, GFP_KERNEL)?))
        } else {
            // One contiguous ring, described as one "page" of 32 MiB.
            if u64::from(depth) * cqe_size > KERNEL_CQ_BYTES {
                return Err(EINVAL);
            }
            let k = Arc::pin_init(KernelCq::new(data.bound(), depth)?, GFP_KERNEL)?;
            cmd.cfg0 = cmd.cfg0.with_page_code(low32(KERNEL_CQ_PAGE_CODE));
            cmd.addr_lo = lower(k.ring_addr());
            cmd.addr_hi = upper(k.ring_addr());
            cmd.cfg1 = cmd.cfg1.with_mtt_count(1u8);
            cmd.dbrec = k.dbrec_addr();
            (Some(k), None)
        };

        let entry = Arc::new(
            CqEntry {
                events: setup.events(),
                kernel: kernel.clone(),
            },
            GFP_KERNEL,
        )?;
        let taken = ObjIds::take(&data.ids, IdKind::Cq)?;
        let cqn = taken.get();
        if let Some(k) = &kernel {
            k.set_cqn(cqn);
        }
        let node = RBTreeNode::new(cqn, entry, GFP_KERNEL)?;
        cmd.cfg0 = cmd
            .cfg0
            .with_depth_log2(low32(depth.trailing_zeros()))
            .with_cqn(low32(cqn));
        data.hw.exec(&cmd)?;
        // From here on, `destroy` undoes the creation.
        taken.keep();
        table.lock().insert(node);
        let cq = Cq {
            cqn,
            eqn,
            kernel,
            user,
            events: setup.events(),
        };
        setup.set_cqe(depth);
        if let Err(e) = udata.respond(&CreateCqResp { cqn, depth }) {
            cq.destroy(data);
            return Err(e);
        }
        Ok(cq)
    }

    /// Destroys the queue in the adapter; its memory goes with `self`, or, if the adapter
    /// refuses, is kept with its CQN until unbind.
    pub(crate) fn destroy(&self, data: &IbData<'_>) {
        let cqn = self.cqn;
        retire(
            &data.hw,
            &DestroyCq { cqn },
            Wait::Sleep,
            fmt!("DESTROY_CQ {cqn}"),
            // After this, the CEQ handler no longer finds the queue.
            || {
                if let Ok(cqs) = data.objects.ceq_cqs(self.eqn) {
                    let entry = cqs.lock().remove(&cqn);
                    drop(entry);
                }
            },
            Some((&Kind(&data.ids, IdKind::Cq), cqn)),
            Some((self.kernel.clone(), self.user.clone())),
        );
    }

    /// Polls a kernel CQ; completions of live queue pairs for work they do not have posted are
    /// the adapter's error, reported.
    pub(crate) fn poll(&self, data: &IbData<'_>, wcs: &mut [Wc]) -> usize {
        let Some(k) = &self.kernel else {
            return 0;
        };
        let polled = k.poll(wcs, data.hw.failed());
        if let Some((count, qpn, index)) = polled.stray {
            data.hw.reports.report(
                data.dev(),
                fmt!(
                    "CQ {}: {count} completion(s) for no posted work (the last: QP {qpn}, \
                     index {index}); dropped\n",
                    self.cqn
                ),
            );
        }
        polled.n
    }

    /// The ring of a kernel CQ.
    pub(crate) fn kernel(&self) -> Option<&Arc<KernelCq>> {
        self.kernel.as_ref()
    }

    /// Arms a kernel CQ.
    pub(crate) fn req_notify(
        &self,
        data: &IbData<'_>,
        solicited: bool,
        report_missed: bool,
    ) -> Result<bool> {
        let k = self.kernel.as_ref().ok_or(EINVAL)?;
        Ok(k.arm(&data.hw.bar, solicited, report_missed, data.hw.failed()))
    }
}
