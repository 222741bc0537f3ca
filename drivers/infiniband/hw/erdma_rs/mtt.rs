// SPDX-License-Identifier: GPL-2.0

//! User memory the adapter reads and writes: page lists (MTTs) of queue buffers and memory
//! regions (erdma_rs_hw 3.5, 6), pinned doorbell records, and the request by which user space
//! describes a queue buffer (erdma_rs_hw 8).

use kernel::{
    device,
    dma::{
        Coherent,
        CoherentBox, //
    },
    page::PAGE_SIZE,
    prelude::*,
    rdma::{
        self,
        umem::Blocks,
        AccessFlags,
        Umem, //
    },
    sync::{
        new_mutex,
        Arc,
        Mutex, //
    },
};

use crate::consts::{
    multiple_of,
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
    /// Multi-level tables, bottom level first (erdma_rs_hw 6).
    _levels: KVec<Level>,
}

/// Entries of one MTT page of a multi-level table.
const MTT_PAGE_ENTRIES: usize = PAGE_SIZE / 8;

/// Pages of one level allocated together, at most: an order-4 allocation, which falls back
/// to single pages when memory is fragmented.
const CHUNK_PAGES: usize = 16;

/// A source of table entries, written in bulk.
trait Entries {
    /// Writes the next entries into `out`, as many as it holds and there are; returns how many.
    fn fill(&mut self, out: &mut [u64]) -> usize;
}

/// The blocks of a user buffer, a segment at a time.
impl<S: Iterator<Item = (u64, u64)>> Entries for Blocks<S> {
    fn fill(&mut self, out: &mut [u64]) -> usize {
        Blocks::fill(self, out)
    }
}

/// The entries of an iterator, one at a time (the page addresses of a level below).
struct Each<I>(I);

impl<I: Iterator<Item = u64>> Entries for Each<I> {
    fn fill(&mut self, out: &mut [u64]) -> usize {
        out.iter_mut()
            .zip(&mut self.0)
            .map(|(slot, addr)| *slot = addr)
            .count()
    }
}

/// Entries taken from a source, counted: a table gets exactly as many as it describes
/// blocks, or the registration fails (an entry left 0 would send the adapter's writes to bus
/// address 0).
struct Counted<E> {
    inner: E,
    taken: usize,
}

impl<E: Entries> Counted<E> {
    fn new(inner: E) -> Self {
        Self { inner, taken: 0 }
    }

    /// `Ok` if exactly `count` entries were taken.
    fn check(&self, count: usize) -> Result {
        if self.taken == count {
            Ok(())
        } else {
            Err(EINVAL)
        }
    }
}

impl<E: Entries> Entries for Counted<E> {
    fn fill(&mut self, out: &mut [u64]) -> usize {
        let n = self.inner.fill(out);
        self.taken += n;
        n
    }
}

/// Fills a new coherent array of `len` entries (zero past the last one) from `entries`.
fn filled(
    dev: &device::Device<device::Bound>,
    len: usize,
    entries: &mut impl Entries,
) -> Result<Coherent<[u64]>> {
    let mut array = CoherentBox::<[u64]>::zeroed_slice(dev, len, GFP_KERNEL)?;
    entries.fill(&mut array);
    Ok(array.into())
}

/// One level of a multi-level MTT: page-sized tables of entries, written in place, in
/// chunks of contiguous pages.
struct Level {
    chunks: KVec<Coherent<[u64]>>,
    pages: usize,
}

impl Level {
    /// Stores `count` entries from `addrs`.
    fn new(dev: &device::Device<device::Bound>, count: usize, addrs: impl Entries) -> Result<Self> {
        let mut addrs = Counted::new(addrs);
        let pages = count.div_ceil(MTT_PAGE_ENTRIES);
        let mut chunks = KVec::with_capacity(pages.div_ceil(CHUNK_PAGES), GFP_KERNEL)?;
        let mut left = pages;
        while left > 0 {
            let n = left.min(CHUNK_PAGES);
            let chunk = match filled(dev, n * MTT_PAGE_ENTRIES, &mut addrs) {
                Err(e) if e == ENOMEM && n > 1 => filled(dev, MTT_PAGE_ENTRIES, &mut addrs)?,
                chunk => chunk?,
            };
            left -= chunk.len() / MTT_PAGE_ENTRIES;
            chunks.push(chunk, GFP_KERNEL)?;
        }
        addrs.check(count)?;
        Ok(Self { chunks, pages })
    }

    /// The bus addresses of the level's pages, in order.
    fn page_addrs(&self) -> impl Iterator<Item = u64> + '_ {
        self.chunks.iter().flat_map(|chunk| {
            let base = chunk.dma_address();
            // CAST: at most `CHUNK_PAGES` pages of `PAGE_SIZE`.
            (0..chunk.len() / MTT_PAGE_ENTRIES).map(move |i| base + (i * PAGE_SIZE) as u64)
        })
    }
}

/// The shape of a multi-level table of `count` entries: the pages of each level, bottom level
/// first, up to a top level of one page; `EINVAL` if that takes more than [`MAX_MTT_LEVELS`]
/// levels.
fn level_pages(count: usize) -> Result<KVec<usize>> {
    let mut shape = KVec::new();
    let mut entries = count.max(1);
    loop {
        let pages = entries.div_ceil(MTT_PAGE_ENTRIES);
        shape.push(pages, GFP_KERNEL)?;
        if pages == 1 {
            return Ok(shape);
        }
        if shape.len() >= MAX_MTT_LEVELS as usize {
            return Err(EINVAL);
        }
        entries = pages;
    }
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
        let mut blocks = Counted::new(umem.dma_blocks(pgsz));
        if count <= inline_max {
            blocks.fill(&mut mtt.entries);
        } else {
            let array = filled(dev, count, &mut blocks)?;
            mtt.level = 1;
            mtt.entries[0] = array.dma_address();
            mtt._array = Some(array);
        }
        blocks.check(count)?;
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
        // Too large a region fails here, before anything is allocated.
        let shape = level_pages(count)?;
        let mut levels = KVec::with_capacity(shape.len(), GFP_KERNEL)?;
        levels.push(Level::new(dev, count, umem.dma_blocks(pgsz))?, GFP_KERNEL)?;
        for _ in 1..shape.len() {
            let below = levels.last().ok_or(EINVAL)?;
            let next = Level::new(dev, below.pages, Each(below.page_addrs()))?;
            levels.push(next, GFP_KERNEL)?;
        }
        let top = levels
            .last()
            .and_then(|l| l.page_addrs().next())
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

/// The doorbell-record pages of one user context. The provider hands out records from pages
/// it shares between queues, so each page is pinned once, when the first queue with a record
/// on it is created, and released with the last one.
#[pin_data]
pub(crate) struct DbRecPages {
    #[pin]
    pages: Mutex<KVec<DbRecPage>>,
}

/// One pinned page of doorbell records.
struct DbRecPage {
    /// The page's user address.
    va: u64,
    /// The records on it that queues hold ([`DbRecord`]s).
    users: usize,
    /// The page's DMA address.
    dma: u64,
    _page: Umem,
}

impl DbRecPages {
    /// No page pinned yet.
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                pages <- new_mutex!(KVec::new()),
            }),
            GFP_KERNEL,
        )
    }
}

/// A user doorbell record: its page held pinned, and the record's DMA address.
pub(crate) struct DbRecord {
    pages: Arc<DbRecPages>,
    page_va: u64,
    pub(crate) dma: u64,
}

impl DbRecord {
    /// Takes the `len` bytes of doorbell record at `va` (8-byte aligned, inside one page),
    /// pinning its page unless another record of the context holds it already. The adapter
    /// only reads records, so the page is pinned without write access.
    pub(crate) fn pin<T: rdma::Driver>(
        dev: &rdma::Device<T>,
        pages: &Arc<DbRecPages>,
        va: u64,
        len: u64,
    ) -> Result<Self> {
        let page_size = PAGE_SIZE as u64;
        let offset = va % page_size;
        if !multiple_of(va, 8) || offset + len > page_size {
            return Err(EINVAL);
        }
        let page_va = va - offset;
        let mut list = pages.pages.lock();
        let base = match list.iter_mut().find(|p| p.va == page_va) {
            Some(page) => {
                page.users += 1;
                page.dma
            }
            None => {
                let page = Umem::get(dev, page_va, PAGE_SIZE, AccessFlags::default())?;
                let dma = page.dma_blocks(page_size).next().ok_or(EFAULT)?;
                list.push(
                    DbRecPage {
                        va: page_va,
                        users: 1,
                        dma,
                        _page: page,
                    },
                    GFP_KERNEL,
                )?;
                dma
            }
        };
        Ok(Self {
            pages: pages.clone(),
            page_va,
            dma: base + offset,
        })
    }
}

impl Drop for DbRecord {
    fn drop(&mut self) {
        let mut list = self.pages.pages.lock();
        let Some(i) = list.iter().position(|p| p.va == self.page_va) else {
            return;
        };
        list[i].users -= 1;
        let unused = if list[i].users == 0 {
            list.remove(i).ok()
        } else {
            None
        };
        drop(list);
        // Unpinned outside the lock.
        drop(unused);
    }
}

#[kunit_tests(erdma_rs_mtt)]
mod tests {
    use super::*;

    #[test]
    fn levels_grow_one_page_of_entries_at_a_time() -> Result {
        let e = MTT_PAGE_ENTRIES;
        assert_eq!(&level_pages(5)?[..], &[1]);
        assert_eq!(&level_pages(e)?[..], &[1]);
        assert_eq!(&level_pages(e + 1)?[..], &[2, 1]);
        assert_eq!(&level_pages(e * e)?[..], &[e, 1]);
        assert_eq!(&level_pages(e * e + 1)?[..], &[e + 1, 2, 1]);
        // Three levels at most (MAX_MTT_LEVELS).
        assert_eq!(&level_pages(e * e * e)?[..], &[e * e, e, 1]);
        assert_eq!(level_pages(e * e * e + 1).map(|_| ()), Err(EINVAL));
        Ok(())
    }

    #[test]
    fn a_table_takes_exactly_the_addresses_it_describes() {
        let mut table = [0u64; 3];
        let mut short = Counted::new(Each([0x1000u64, 0x2000].into_iter()));
        assert_eq!(short.fill(&mut table), 2);
        // Fewer addresses than blocks: an entry would be left 0.
        assert_eq!(short.check(3), Err(EINVAL));
        let mut exact = Counted::new(Each([0x1000u64, 0x2000, 0x3000].into_iter()));
        assert_eq!(exact.fill(&mut table), 3);
        assert_eq!(table, [0x1000, 0x2000, 0x3000]);
        assert_eq!(exact.check(3), Ok(()));
    }
}
