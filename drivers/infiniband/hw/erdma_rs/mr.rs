// SPDX-License-Identifier: GPL-2.0

//! Memory regions (erdma_rs_hw 3.5, 6): user regions described by MTTs, the DMA region of kernel
//! users, and fast-registration regions whose page list kernel QPs hand to the adapter.

use kernel::{
    page::PAGE_SHIFT,
    prelude::*,
    rdma::{
        self,
        AccessFlag,
        AccessFlags,
        NewMr,
        Umem,
        UserMrReq, //
    },
};

use crate::{
    cmdq::Wait,
    commands::{
        DeregMr,
        DeregMrCfg,
        RegMr,
        RegMrCfg0,
        RegMrCfg1,
        RegMrCfg2,
        RegMrHigh, //
    },
    consts::{
        mr_type,
        INLINE_MTT,
        MAX_FRMR_PAGES,
        MR_PAGE_SIZES, //
    },
    formats::{
        low32,
        low64,
        MrAccess,
        Stag, //
    },
    ibdev::IbData,
    ids::{
        IdKind,
        ObjIds, //
    },
    kverbs::{
        FastReg,
        Frmr, //
    },
    mtt::Mtt,
    object::{
        retire,
        Kind, //
    },
    pd::Pd,
};

/// A memory region.
pub(crate) struct Mr {
    stag: Stag,
    _mtt: Option<Mtt>,
    _umem: Option<Umem>,
    /// The page list of a fast-registration region.
    frmr: Option<Frmr>,
}

impl FastReg for Mr {
    fn frmr(&self) -> Option<&Frmr> {
        self.frmr.as_ref()
    }
}

/// REG_MR for a region of `mr_type` in `pd` with `access` (verbs flags); the caller fills in
/// the extent.
fn reg_mr(pd: &Pd, mr_type: u8, access: AccessFlags) -> RegMr {
    RegMr {
        cfg0: RegMrCfg0::zeroed(),
        cfg1: RegMrCfg1::zeroed()
            .with_pdn(low32(pd.pdn))
            .with_mr_type(low32(mr_type.into()))
            .with_access(MrAccess::from_verbs(access)),
        start_va: 0,
        size: 0,
        cfg2: RegMrCfg2::zeroed(),
        mtt: [0; 4],
    }
}

impl Mr {
    /// Registers `req`'s user memory.
    pub(crate) fn reg_user<T: rdma::Driver<Pd = Pd>>(
        data: &IbData<'_>,
        dev: &rdma::Device<T>,
        pd: &rdma::Pd<T>,
        req: &UserMrReq,
    ) -> Result<NewMr<Self>> {
        let max = 1u64 << data.caps.max_mr_size_log2;
        if req.length == 0
            || req.length > max
            || req.iova.checked_add(req.length).is_none()
            || req.start.checked_add(req.length).is_none()
        {
            return Err(EINVAL);
        }
        let umem = Umem::get(dev, req.start, req.length.try_into()?, req.access)?;
        let long = req.length > u64::from(u32::MAX);
        let mtt = if data.caps.mtt_va {
            Mtt::new_multilevel(data.bound(), &umem, req.iova, MR_PAGE_SIZES, !long)?
        } else {
            Mtt::new(data.bound(), &umem, req.iova, MR_PAGE_SIZES, INLINE_MTT)?
        };
        // Format version 1 carries the high bits of the length and of the entry count, and
        // the page size of the tables; multi-level tables need it (erdma_rs_hw 3.5).
        let v1 = mtt.level > 1 || long;
        if (!v1 && mtt.count >= 1 << 20) || (long && !data.caps.mtt_va) {
            // Without the version-1 format the entry count and the length are 20 and 32 bits.
            return Err(EINVAL);
        }
        let mut cmd = reg_mr(pd.data(), mr_type::NORMAL, req.access);
        if data.compat.is_some() {
            cmd.cfg1 = cmd.cfg1.with_access(cmd.cfg1.access().read_sink());
        }
        cmd.cfg0 = cmd.cfg0.with_valid(true);
        cmd.start_va = req.iova;
        // CAST: the low half; version 1 carries the rest.
        cmd.size = req.length as u32;
        cmd.cfg2 = cmd
            .cfg2
            .with_page_shift(low32(mtt.page_shift))
            .with_mtt_level(low32(mtt.level))
            .with_mtt_count(low32(mtt.count));
        cmd.mtt = mtt.entries;
        if v1 {
            cmd.cfg0 = cmd.cfg0.with_const_version::<1>();
            // CAST: PAGE_SHIFT - 12 is small.
            cmd.cfg2 = cmd.cfg2.with_mtt_page_code(low32((PAGE_SHIFT - 12) as u32));
            cmd.mtt[1] = RegMrHigh::zeroed()
                .with_length_high(low64(req.length >> 32))
                .with_mtt_count_high(mtt.count >> 20)
                .into_raw();
        }
        Self::register(data, cmd, req.iova, req.length, |stag| Self {
            stag,
            _mtt: Some(mtt),
            _umem: Some(umem),
            frmr: None,
        })
    }

    /// Registers the region `cmd` describes under a new MPT index (key 0), which is given
    /// back if the adapter refuses; `mr` makes the driver's part for the new STag.
    fn register(
        data: &IbData<'_>,
        mut cmd: RegMr,
        iova: u64,
        length: u64,
        mr: impl FnOnce(Stag) -> Self,
    ) -> Result<NewMr<Self>> {
        let index = ObjIds::take(&data.ids, IdKind::Mr)?;
        cmd.cfg0 = cmd.cfg0.with_mpt_index(low32(index.get()));
        data.hw.exec(&cmd)?;
        let index = index.keep();
        let stag = Stag::zeroed().with_index(low32(index));
        Ok(NewMr {
            lkey: stag.into_raw(),
            rkey: stag.into_raw(),
            iova,
            length,
            data: mr(stag),
        })
    }

    /// Deregisters the region; the pages are unpinned only after the adapter let go of them.
    pub(crate) fn dereg(self, data: &IbData<'_>) {
        let cmd = DeregMr {
            cfg: DeregMrCfg::zeroed()
                .with_key(self.stag.key())
                .with_mpt_index(low32(self.stag.index().get())),
        };
        let stag = self.stag;
        retire(
            &data.hw,
            &cmd,
            Wait::Sleep,
            fmt!("DEREG_MR {:#x}", stag.into_raw()),
            // Nothing finds a region by its key.
            || {},
            Some((&Kind(&data.ids, IdKind::Mr), stag.index().get())),
            Some(self),
        );
    }

    /// Registers the region through which kernel users address bus addresses (erdma_rs_hw 6: no
    /// MTT; the adapter ignores the extent fields).
    pub(crate) fn get_dma<T: rdma::Driver<Pd = Pd>>(
        data: &IbData<'_>,
        pd: &rdma::Pd<T>,
        access: AccessFlags,
    ) -> Result<NewMr<Self>> {
        let cmd = reg_mr(pd.data(), mr_type::DMA, access);
        Self::register(data, cmd, 0, u64::MAX, |stag| Self {
            stag,
            _mtt: None,
            _umem: None,
            frmr: None,
        })
    }

    /// Allocates a fast-registration region for up to `max_pages` pages of `PAGE_SIZE`
    /// (erdma_rs_hw 6): invalid until a fast-registration work request names it.
    pub(crate) fn alloc_frmr<T: rdma::Driver<Pd = Pd>>(
        data: &IbData<'_>,
        pd: &rdma::Pd<T>,
        max_pages: u32,
    ) -> Result<NewMr<Self>> {
        if max_pages == 0 || max_pages > MAX_FRMR_PAGES {
            return Err(EINVAL);
        }
        let frmr = Frmr::new(data.bound(), max_pages)?;
        let all = AccessFlag::LocalWrite | AccessFlag::RemoteRead | AccessFlag::RemoteWrite;
        let mut cmd = reg_mr(pd.data(), mr_type::FRMR, all);
        // CAST: PAGE_SHIFT is small.
        cmd.cfg2 = cmd
            .cfg2
            .with_page_shift(low32(PAGE_SHIFT as u32))
            .with_const_mtt_level::<1>()
            .with_mtt_count(low32(max_pages));
        cmd.mtt[0] = frmr.dma_address();
        Self::register(data, cmd, 0, 0, |stag| Self {
            stag,
            _mtt: None,
            _umem: None,
            frmr: Some(frmr),
        })
    }

    /// Starts a new page list (fast-registration regions only).
    pub(crate) fn map_start(&self) -> Result {
        self.frmr.as_ref().ok_or(EINVAL)?.map_start();
        Ok(())
    }

    /// Appends a page to the list.
    pub(crate) fn set_page(&self, addr: u64) -> Result {
        self.frmr.as_ref().ok_or(EINVAL)?.set_page(addr)
    }
}
