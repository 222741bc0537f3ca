// SPDX-License-Identifier: GPL-2.0

//! Pinned user memory (`struct ib_umem`).
//!
//! C header: [`include/rdma/ib_umem.h`](srctree/include/rdma/ib_umem.h).
//!
//! # Examples
//!
//! ```
//! use kernel::{
//!     prelude::*,
//!     rdma::{
//!         self,
//!         AccessFlag,
//!         Umem, //
//!     },
//! };
//!
//! // Pins a user buffer the device writes to, such as a completion queue.
//! fn pin_queue<T: rdma::Driver>(dev: &rdma::Device<T>, va: u64, len: usize) -> Result<Umem> {
//!     let umem = Umem::get(dev, va, len, AccessFlag::LocalWrite.into())?;
//!     if umem.len() < len {
//!         return Err(EINVAL);
//!     }
//!     Ok(umem)
//! }
//! ```

use super::{
    device::put_ib_device,
    mr::AccessFlags,
    Device,
    Driver, //
};
use crate::{
    bindings,
    error::from_err_ptr,
    page::PAGE_SIZE,
    prelude::*,
    scatterlist::{
        SGEntry,
        SGTable,
        SGTableIter, //
    },
    sync::aref::AlwaysRefCounted, //
};
use core::ptr::NonNull;

/// User memory pinned and mapped for DMA by the device. Dropping it unmaps and unpins it.
///
/// A umem may outlive the registration of its device (a driver keeps the memory of an object
/// whose teardown the device refused until it has reset the device), so it holds a reference
/// on the device: releasing it reads the device's DMA description.
///
/// # Examples
///
/// ```
/// use kernel::{
///     prelude::*,
///     rdma::{
///         self,
///         Umem,
///         UserMrReq, //
///     },
/// };
///
/// // Pins the memory of a registration and lists the bus addresses of its blocks, in the largest
/// // size (4 KiB or 2 MiB) the device can use.
/// fn pin_and_list<T: rdma::Driver>(
///     dev: &rdma::Device<T>,
///     req: &UserMrReq,
/// ) -> Result<(Umem, u64, KVec<u64>)> {
///     let umem = Umem::get(dev, req.start, usize::try_from(req.length)?, req.access)?;
///     let pgsz = umem.find_best_pgsz(0x1000 | 0x20_0000, req.iova).ok_or(EINVAL)?;
///     let mut blocks = KVec::with_capacity(umem.num_dma_blocks(pgsz), GFP_KERNEL)?;
///     for addr in umem.dma_blocks(pgsz) {
///         blocks.push(addr, GFP_KERNEL)?;
///     }
///     Ok((umem, pgsz, blocks))
/// }
/// ```
///
/// # Invariants
///
/// `ptr` is a umem returned by `ib_umem_get_va` and not released yet; its `ibdev` is kept
/// allocated by a reference on the embedded `struct device` that this owns.
pub struct Umem {
    ptr: NonNull<bindings::ib_umem>,
}

// SAFETY: The umem is a description of pinned pages; it may be released from any thread.
unsafe impl Send for Umem {}

// SAFETY: Shared access only reads the description.
unsafe impl Sync for Umem {}

impl Umem {
    /// Pins `len` bytes of the calling process's memory at `addr` and maps them for DMA by
    /// `dev`, with the rights `access`. Must be called from the process's context (a verbs
    /// call) and may sleep.
    pub fn get<T: Driver>(
        dev: &Device<T>,
        addr: u64,
        len: usize,
        access: AccessFlags,
    ) -> Result<Self> {
        // CAST: the C prototype takes the bits as an `int`.
        let access = u32::from(access) as i32;
        let addr = usize::try_from(addr).map_err(|_| EFAULT)?;
        // SAFETY: The device is live; the core checks and pins the range of the current
        // process.
        let ptr =
            from_err_ptr(unsafe { bindings::ib_umem_get_va(dev.as_raw(), addr, len, access) })?;
        let Some(ptr) = NonNull::new(ptr) else {
            return Err(ENOMEM);
        };
        // Dropped after the umem's release, by `put_ib_device`.
        dev.inc_ref();
        // INVARIANT: `from_err_ptr` let through only a valid umem of `dev`, now referenced.
        Ok(Self { ptr })
    }

    /// The length of the pinned range in bytes.
    pub fn len(&self) -> usize {
        // SAFETY: The umem is valid (type invariant).
        unsafe { (*self.ptr.as_ptr()).length }
    }

    /// Whether the pinned range is empty (never, for a umem that was pinned).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The largest page size of `pgsz_bitmap` (a set of powers of two) in which the range can be
    /// described to a device that sees it at the virtual address `virt`, or `None`.
    pub fn find_best_pgsz(&self, pgsz_bitmap: u64, virt: u64) -> Option<u64> {
        // SAFETY: The umem is valid.
        let pgsz = unsafe {
            bindings::ib_umem_find_best_pgsz(
                self.ptr.as_ptr(),
                pgsz_bitmap as crate::ffi::c_ulong,
                virt,
            )
        };
        (pgsz != 0).then_some(pgsz as u64)
    }

    /// The number of `pgsz` blocks the range spans.
    pub fn num_dma_blocks(&self, pgsz: u64) -> usize {
        // SAFETY: The umem is valid.
        unsafe { bindings::ib_umem_num_dma_blocks(self.ptr.as_ptr(), pgsz as crate::ffi::c_ulong) }
    }

    /// The DMA addresses of the `pgsz` blocks of the range, in order (the blocks of
    /// `rdma_umem_for_each_dma_block`); the first is aligned down to `pgsz`. `pgsz` must be one
    /// [`Umem::find_best_pgsz`] accepted, or at most `PAGE_SIZE`: then every boundary between
    /// two DMA segments falls on a block boundary.
    pub fn dma_blocks(&self, pgsz: u64) -> DmaBlocks<'_> {
        let raw = self.ptr.as_ptr();
        // SAFETY: The umem is valid (type invariant); its table is not changed after
        // `ib_umem_get_va` and lives as long as the umem, which the iterator borrows.
        let table = unsafe { SGTable::from_raw(&raw mut (*raw).sgt_append.sgt) };
        // SAFETY: The umem is valid.
        let offset = unsafe { (*raw).address } as u64 % PAGE_SIZE as u64;
        let segments: Segments<'_> = table
            .iter()
            .map(|entry| (entry.dma_address(), entry.dma_len()));
        Blocks::new(segments, offset, pgsz, self.num_dma_blocks(pgsz))
    }
}

/// The DMA segments of a umem's table: address and length.
type Segments<'a> = core::iter::Map<SGTableIter<'a>, fn(&'a SGEntry) -> (u64, u64)>;

/// The DMA addresses of the blocks of a [`Umem`], from [`Umem::dma_blocks`].
///
/// # Examples
///
/// ```
/// use kernel::rdma::{
///     umem::DmaBlocks,
///     Umem, //
/// };
///
/// // The bus address of the first 4 KiB block of a pinned buffer.
/// fn first_block(umem: &Umem) -> Option<u64> {
///     let mut blocks: DmaBlocks<'_> = umem.dma_blocks(0x1000);
///     blocks.next()
/// }
/// ```
pub type DmaBlocks<'a> = Blocks<Segments<'a>>;

/// The `pgsz`-aligned blocks that cover a list of DMA segments (address, length), in order:
/// one step per segment and additions per block, so a long segment costs no call per block.
/// As `rdma_umem_for_each_dma_block` does, it walks the segments as one stream of bytes: a
/// block that runs past the end of its segment goes on in the next one, whose first bytes it
/// covers are passed over. (Two blocks may have the same address: the blocks of two pages that
/// lie in one block of the bus, in another order or apart.)
///
/// # Examples
///
/// ```
/// use kernel::rdma::umem::Blocks;
///
/// // Two segments: three pages at 0x10000, one at 0x40000.
/// let segments = [(0x10000, 0x3000), (0x40000, 0x1000)];
/// let mut blocks = Blocks::new(segments.iter().copied(), 0, 0x1000, 4);
/// assert_eq!(blocks.next(), Some(0x10000));
/// assert_eq!(blocks.next(), Some(0x11000));
/// assert_eq!(blocks.next(), Some(0x12000));
/// assert_eq!(blocks.next(), Some(0x40000));
/// assert_eq!(blocks.next(), None);
///
/// // In 8 KiB blocks, a block that two contiguous segments share comes once.
/// let segments = [(0x1000, 0x1800), (0x2800, 0x1800)];
/// let blocks = Blocks::new(segments.iter().copied(), 0, 0x2000, 2);
/// assert!(blocks.eq([0x0, 0x2000]));
/// ```
pub struct Blocks<S> {
    segments: S,
    /// Bytes to pass over at the start of the first segment.
    skip: u64,
    /// The next block of the current segment, and the segment's end.
    next: u64,
    end: u64,
    /// Bytes of the block returned last that lie beyond the end of its segment.
    carry: u64,
    /// Blocks still to return.
    left: usize,
    pgsz: u64,
}

impl<S: Iterator<Item = (u64, u64)>> Blocks<S> {
    /// At most `count` blocks of `pgsz` (a power of two) covering `segments`, leaving out the
    /// whole blocks of the first `offset` bytes of the first segment.
    pub fn new(segments: S, offset: u64, pgsz: u64, count: usize) -> Self {
        let pgsz = pgsz.max(1);
        Self {
            segments,
            skip: offset & !(pgsz - 1),
            next: 0,
            end: 0,
            carry: 0,
            left: count,
            pgsz,
        }
    }
}

impl<S: Iterator<Item = (u64, u64)>> Blocks<S> {
    /// Makes `next` a block of the current segment, moving to the next segment as needed;
    /// false when the segments ran out.
    #[inline]
    fn at_block(&mut self) -> bool {
        while self.next >= self.end {
            let Some((start, len)) = self.segments.next() else {
                return false;
            };
            let carry = core::mem::take(&mut self.carry);
            if carry >= len {
                // The whole segment belongs to the block returned last.
                self.carry = carry - len;
                continue;
            }
            self.end = start + len;
            self.next = (start + carry + core::mem::take(&mut self.skip)) & !(self.pgsz - 1);
        }
        true
    }

    /// Writes the next blocks into `out`, as many as it holds and there are; returns how many.
    /// The blocks [`Iterator::next`] gives, in bulk: one loop of additions per segment.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::umem::Blocks;
    ///
    /// let segments = [(0x10000, 0x3000), (0x40000, 0x1000)];
    /// let mut blocks = Blocks::new(segments.iter().copied(), 0, 0x1000, 4);
    /// let mut table = [0u64; 3];
    /// assert_eq!(blocks.fill(&mut table), 3);
    /// assert_eq!(table, [0x10000, 0x11000, 0x12000]);
    /// assert_eq!(blocks.fill(&mut table), 1);
    /// assert_eq!(table[0], 0x40000);
    /// assert_eq!(blocks.fill(&mut table), 0);
    /// ```
    pub fn fill(&mut self, out: &mut [u64]) -> usize {
        let mut n = 0;
        while n < out.len() && self.left > 0 && self.at_block() {
            // Blocks that start in this segment: `next < end` here.
            let here = (self.end - self.next).div_ceil(self.pgsz);
            let k = usize::try_from(here)
                .unwrap_or(usize::MAX)
                .min(out.len() - n)
                .min(self.left);
            let mut block = self.next;
            for slot in &mut out[n..n + k] {
                *slot = block;
                block += self.pgsz;
            }
            self.next = block;
            self.carry = self.next.saturating_sub(self.end);
            self.left -= k;
            n += k;
        }
        n
    }
}

impl<S: Iterator<Item = (u64, u64)>> Iterator for Blocks<S> {
    type Item = u64;

    #[inline]
    fn next(&mut self) -> Option<u64> {
        if self.left == 0 || !self.at_block() {
            return None;
        }
        let block = self.next;
        self.next += self.pgsz;
        self.carry = self.next.saturating_sub(self.end);
        self.left -= 1;
        Some(block)
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: The umem is valid (type invariant).
        let ibdev = unsafe { (*self.ptr.as_ptr()).ibdev };
        // SAFETY: The umem is valid and this is its last use; its device is still allocated
        // (type invariant).
        unsafe { bindings::ib_umem_release(self.ptr.as_ptr()) };
        // SAFETY: The reference taken by `get`; nothing uses the device after this.
        unsafe { put_ib_device(ibdev) };
    }
}

#[macros::kunit_tests(rust_kernel_rdma_umem)]
mod tests {
    use super::*;

    const K4: u64 = 0x1000;

    /// The blocks `next` gives, checked against what `fill` gives in tables of a few sizes.
    fn blocks(segments: &[(u64, u64)], offset: u64, pgsz: u64, count: usize) -> KVec<u64> {
        let mut out = KVec::new();
        for b in Blocks::new(segments.iter().copied(), offset, pgsz, count) {
            out.push(b, GFP_KERNEL).unwrap();
        }
        for table in [1, 2, 3, 64] {
            let mut filled = KVec::new();
            let mut it = Blocks::new(segments.iter().copied(), offset, pgsz, count);
            let mut buf = [0u64; 64];
            loop {
                let n = it.fill(&mut buf[..table]);
                if n == 0 {
                    break;
                }
                filled.extend_from_slice(&buf[..n], GFP_KERNEL).unwrap();
            }
            assert_eq!(&filled[..], &out[..]);
        }
        out
    }

    #[test]
    fn pages_of_scattered_and_contiguous_segments() {
        let segments = [(0x10000, 3 * K4), (0x40000, K4), (0x7000, 2 * K4)];
        assert_eq!(
            &blocks(&segments, 0, K4, 6)[..],
            &[0x10000, 0x11000, 0x12000, 0x40000, 0x7000, 0x8000]
        );
        // The count stops the walk (the range ends inside the table).
        assert_eq!(
            &blocks(&segments, 0, K4, 4)[..],
            &[0x10000, 0x11000, 0x12000, 0x40000]
        );
        // More blocks asked for than the segments hold: the walk ends with them.
        assert_eq!(blocks(&segments, 0, K4, 100).len(), 6);
        assert!(blocks(&[], 0, K4, 3).is_empty());
    }

    #[test]
    fn large_blocks_start_aligned_down() {
        // 2 MiB blocks of a range whose segments meet on block boundaries.
        let m2 = 0x20_0000;
        let segments = [
            (0x60_3000, m2 - 0x3000),
            (0x100_0000, m2),
            (0x200_0000, 0x5000),
        ];
        assert_eq!(
            &blocks(&segments, 0, m2, 3)[..],
            &[0x60_0000, 0x100_0000, 0x200_0000]
        );
    }

    #[test]
    fn sub_page_blocks_skip_the_offset_and_a_cut_block_comes_once() {
        // 1 KiB blocks, the range starting 0x900 bytes into its first page.
        let segments = [(0x5000, K4), (0x9000, K4)];
        assert_eq!(
            &blocks(&segments, 0x900, 0x400, 4)[..],
            &[0x5800, 0x5c00, 0x9000, 0x9400]
        );
        // A block that two contiguous segments share is returned once.
        let segments = [(0x1000, 0x1800), (0x2800, 0x1800)];
        assert_eq!(&blocks(&segments, 0, 2 * K4, 2)[..], &[0x0, 0x2000]);
        assert_eq!(&blocks(&segments, 0, 2 * K4, 3)[..], &[0x0, 0x2000]);
    }

    #[test]
    fn blocks_of_two_pages_in_one_bus_block_come_twice() {
        // Two pages of a user buffer 0x20 bytes into its first page, that the bus has in one
        // 16 KiB block, the second page first: ib_umem_find_best_pgsz accepts 16 KiB (the
        // virtual and bus addresses agree in their low 14 bits in each page, and the pages meet
        // on a 16 KiB virtual boundary). Each page is a block of its own, at the same address.
        // (Returned once, the second one's entry stayed 0: the adapter wrote to bus address 0.)
        let segments = [(0xd49b000, K4), (0xd498000, K4)];
        assert_eq!(
            &blocks(&segments, 0x20, 4 * K4, 2)[..],
            &[0xd498000, 0xd498000]
        );
        // In 4 KiB blocks, the pages themselves.
        assert_eq!(&blocks(&segments, 0x20, K4, 2)[..], &[0xd49b000, 0xd498000]);
    }
}
