// SPDX-License-Identifier: GPL-2.0

//! User memory the adapter reads and writes: page lists (MTTs) of queue buffers and memory
//! regions (erdma-hw 3.5, 6), pinned doorbell records, and the request by which user space
//! describes a queue buffer (erdma-hw 8).

use kernel::{
    device,
    dma::Coherent,
    page::PAGE_SIZE,
    prelude::*,
    rdma::{
        self,
        AccessFlag,
        Umem, //
    },
};

use crate::consts::{
    INLINE_MTT,
    MAX_MTT_LEVELS, //
};

/// The driver's request in CREATE_CQ and CREATE_QP (`struct erdma_ureq_create_cq/qp`).
#[repr(C)]
#[derive(FromBytes, IntoBytes, Default)]
pub(crate) struct CreateReq {
    /// The doorbell record.
    pub(crate) db_va: u64,
    /// The queue buffer.
    pub(crate) qbuf_va: u64,
    /// Its length.
    pub(crate) qbuf_len: u32,
    pub(crate) reserved: u32,
}

/// How the pages of a buffer reach the adapter: inline entries (level 0) or an array of page
/// addresses the adapter reads (level 1).
pub(crate) struct Mtt {
    pub(crate) page_shift: u32,
    pub(crate) count: u32,
    pub(crate) level: u32,
    /// Level 0: the entries; level 1: the array's address in entry 0.
    pub(crate) entries: [u64; INLINE_MTT],
    /// Byte offset of the buffer's start in its first page.
    pub(crate) offset: u64,
    _array: Option<Coherent<[u64]>>,
    /// Multi-level tables, bottom level first: pages of entries (erdma-hw 6).
    _levels: KVec<KVec<Coherent<[u64]>>>,
}

/// Entries of one MTT page of a multi-level table.
const MTT_PAGE_ENTRIES: usize = PAGE_SIZE / 8;

/// Stores `addrs` in as many pages of entries as they need; returns the pages.
fn mtt_pages(
    dev: &device::Device<device::Bound>,
    addrs: impl Iterator<Item = u64>,
) -> Result<KVec<Coherent<[u64]>>> {
    let mut pages = KVec::new();
    let mut buf = KVec::with_capacity(MTT_PAGE_ENTRIES, GFP_KERNEL)?;
    let flush = |buf: &mut KVec<u64>, pages: &mut KVec<Coherent<[u64]>>| -> Result {
        // Unused entries of the last page stay zero.
        buf.resize(MTT_PAGE_ENTRIES, 0, GFP_KERNEL)?;
        pages.push(Coherent::from_slice(dev, buf, GFP_KERNEL)?, GFP_KERNEL)?;
        buf.clear();
        Ok(())
    };
    for addr in addrs {
        buf.push(addr, GFP_KERNEL)?;
        if buf.len() == MTT_PAGE_ENTRIES {
            flush(&mut buf, &mut pages)?;
        }
    }
    if !buf.is_empty() {
        flush(&mut buf, &mut pages)?;
    }
    Ok(pages)
}

impl Mtt {
    /// Describes `umem`, which the adapter sees at `va`, in the largest page size of
    /// `page_sizes`; inline when it has at most `inline_max` pages.
    pub(crate) fn new(
        dev: &device::Device<device::Bound>,
        umem: &Umem,
        va: u64,
        page_sizes: u64,
        inline_max: usize,
    ) -> Result<Self> {
        let pgsz = umem.find_best_pgsz(page_sizes, va).ok_or(EINVAL)?;
        let count = umem.num_dma_blocks(pgsz);
        let mut mtt = Self {
            page_shift: pgsz.trailing_zeros(),
            count: count.try_into()?,
            level: 0,
            entries: [0; INLINE_MTT],
            offset: va & (pgsz - 1),
            _array: None,
            _levels: KVec::new(),
        };
        if count <= inline_max {
            for (slot, addr) in mtt.entries.iter_mut().zip(umem.dma_blocks(pgsz)) {
                *slot = addr;
            }
        } else {
            let mut pages = KVec::with_capacity(count, GFP_KERNEL)?;
            for addr in umem.dma_blocks(pgsz) {
                pages.push(addr, GFP_KERNEL)?;
            }
            let array = Coherent::from_slice(dev, &pages, GFP_KERNEL)?;
            mtt.level = 1;
            mtt.entries[0] = array.dma_address();
            mtt._array = Some(array);
        }
        Ok(mtt)
    }

    /// Describes a memory region: inline up to four pages, otherwise in page-sized tables of
    /// up to three levels, each level holding the addresses of the pages of the level below,
    /// for adapters that walk them (capability MTT_VA).
    /// With `inline_ok` false, a table is used even for a few pages (the version-1 format
    /// of REG_MR overlays inline entries).
    pub(crate) fn new_multilevel(
        dev: &device::Device<device::Bound>,
        umem: &Umem,
        va: u64,
        page_sizes: u64,
        inline_ok: bool,
    ) -> Result<Self> {
        let pgsz = umem.find_best_pgsz(page_sizes, va).ok_or(EINVAL)?;
        let count = umem.num_dma_blocks(pgsz);
        if count == 1 || (inline_ok && count <= INLINE_MTT) {
            return Self::new(dev, umem, va, page_sizes, INLINE_MTT);
        }
        let mut levels = KVec::new();
        levels.push(mtt_pages(dev, umem.dma_blocks(pgsz))?, GFP_KERNEL)?;
        while levels.last().map_or(0, |l| l.len()) > 1 {
            if levels.len() as u32 >= MAX_MTT_LEVELS {
                return Err(EINVAL);
            }
            let below = levels.last().ok_or(EINVAL)?;
            let next = mtt_pages(dev, below.iter().map(|p| p.dma_address()))?;
            levels.push(next, GFP_KERNEL)?;
        }
        let top = levels
            .last()
            .and_then(|l| l.first())
            .map(|p| p.dma_address())
            .ok_or(EINVAL)?;
        Ok(Self {
            page_shift: pgsz.trailing_zeros(),
            count: count.try_into()?,
            // CAST: at most 3.
            level: levels.len() as u32,
            entries: [top, 0, 0, 0],
            offset: va & (pgsz - 1),
            _array: None,
            _levels: levels,
        })
    }

    /// The page-size code of CREATE_CQ / CREATE_QP: log2(page size) - 12.
    pub(crate) fn page_code(&self) -> u32 {
        self.page_shift - 12
    }
}

/// A user doorbell record: the pinned page holding it and the record's DMA address.
pub(crate) struct DbRecord {
    _page: Umem,
    pub(crate) dma: u64,
}

impl DbRecord {
    /// Pins the `len` bytes of doorbell record at `va` (8-byte aligned, inside one page).
    pub(crate) fn pin<T: rdma::Driver>(dev: &rdma::Device<T>, va: u64, len: u64) -> Result<Self> {
        let page_size = PAGE_SIZE as u64;
        let offset = va % page_size;
        if !va.is_multiple_of(8) || offset + len > page_size {
            return Err(EINVAL);
        }
        let page = Umem::get(dev, va - offset, PAGE_SIZE, AccessFlag::LocalWrite.into())?;
        let base = page.dma_blocks(page_size).next().ok_or(EFAULT)?;
        Ok(Self {
            dma: base + offset,
            _page: page,
        })
    }
}
