// SPDX-License-Identifier: GPL-2.0

//! Address translation through MTTs (memory translation tables, erdma_rs_hw 3.5, §6).
//!
//! * Queues (CREATE_QP, CREATE_CQ): level 0 holds up to four page addresses in the command,
//!   level 1 an address of a contiguous array of u64 page addresses. The model reads the array
//!   once, at creation (the drivers keep it, but the device owns its copy), so a queue is a
//!   [`QueueBuf`]: a page list, a page size and the offset of the queue in its first page.
//! * MRs (REG_MR, fast-register WQEs): level 0 = up to four inline entries, level 1 = contiguous
//!   array, levels 2 and 3 (format version 1) = a top page of addresses of pages of the level
//!   below, each page `4 KiB << code` bytes. MR tables are read at use time ([`Mtt::entry`]), so
//!   an MR of any size costs nothing until it is used, and a fast-register MR sees the page list
//!   the driver wrote into its buffer after registration.
//!
//! Every computation on guest-supplied numbers is checked; failures are [`Xlate`] errors.

use crate::io::{GuestMemory, MemError};

/// Why a translation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Xlate {
    /// The address is outside the queue/MR, or arithmetic overflowed.
    Bounds,
    /// An MTT page or data page is not guest memory.
    Dma(MemError),
}

impl From<MemError> for Xlate {
    fn from(e: MemError) -> Self {
        Xlate::Dma(e)
    }
}

/// A page table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mtt {
    /// The page addresses, held by the device.
    Direct(Vec<u64>),
    /// `count` entries in guest memory under `root`: level 1 = contiguous array at `root`;
    /// level 2/3 = `root` is a page of addresses of the next level's pages, each page of
    /// `1 << page_shift` bytes.
    Indirect {
        /// 1..=3.
        levels: u8,
        /// Address of the array (level 1) or of the top page.
        root: u64,
        /// Number of bottom-level entries.
        count: u64,
        /// log2 of the MTT page size (levels 2 and 3).
        page_shift: u8,
    },
}

impl Mtt {
    /// Number of entries.
    pub fn len(&self) -> u64 {
        match self {
            Mtt::Direct(v) => v.len() as u64,
            Mtt::Indirect { count, .. } => *count,
        }
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entry `i`.
    pub fn entry(&self, i: u64, mem: &dyn GuestMemory) -> Result<u64, Xlate> {
        match self {
            Mtt::Direct(v) => usize::try_from(i)
                .ok()
                .and_then(|i| v.get(i).copied())
                .ok_or(Xlate::Bounds),
            Mtt::Indirect {
                levels,
                root,
                count,
                page_shift,
            } => {
                if i >= *count {
                    return Err(Xlate::Bounds);
                }
                let per_page_log2 = u32::from(*page_shift)
                    .checked_sub(3)
                    .filter(|&s| s < 63)
                    .ok_or(Xlate::Bounds)?;
                // Index into each level, top first.
                let mut addr = *root;
                for level in (0..*levels).rev() {
                    let shift = per_page_log2
                        .checked_mul(u32::from(level))
                        .ok_or(Xlate::Bounds)?;
                    let idx = if level + 1 == *levels {
                        // Top: may hold more than one page's worth only at level 1.
                        i.checked_shr(shift).unwrap_or(0)
                    } else {
                        i.checked_shr(shift).unwrap_or(0) & ((1u64 << per_page_log2) - 1)
                    };
                    let at = idx
                        .checked_mul(8)
                        .and_then(|o| addr.checked_add(o))
                        .ok_or(Xlate::Bounds)?;
                    addr = mem.read_u64_le(at)?;
                }
                Ok(addr)
            }
        }
    }
}

/// Largest MTT page shift the model accepts for levels 2 and 3 (code 7: 512 KiB).
pub const MAX_MTT_PAGE_SHIFT: u8 = 19;

/// A queue buffer (SQ, RQ, CQ) described by a page list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueBuf {
    pages: Vec<u64>,
    page_shift: u8,
    offset: u64,
    size: u64,
}

impl QueueBuf {
    /// A queue of `size` bytes starting at byte `offset` of the first of `pages` (each
    /// `1 << page_shift` bytes). `None` if the pages cannot hold it.
    pub fn new(pages: Vec<u64>, page_shift: u8, offset: u64, size: u64) -> Option<Self> {
        let page = 1u64.checked_shl(u32::from(page_shift))?;
        if page_shift > 40 || offset >= page {
            return None;
        }
        let need = offset.checked_add(size)?.div_ceil(page);
        if (pages.len() as u64) < need || size == 0 {
            return None;
        }
        if pages.iter().any(|p| p.checked_add(page).is_none()) {
            return None;
        }
        Some(QueueBuf {
            pages,
            page_shift,
            offset,
            size,
        })
    }

    /// Number of pages held (what the queue covers).
    pub fn pages(&self) -> usize {
        self.pages.len()
    }

    /// Size of the queue in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The guest address of byte `off` of the queue and how many bytes follow it in the same
    /// page.
    fn locate(&self, off: u64) -> Option<(u64, u64)> {
        if off >= self.size {
            return None;
        }
        let pos = self.offset.checked_add(off)?;
        let idx = usize::try_from(pos >> self.page_shift).ok()?;
        let in_page = pos & ((1u64 << self.page_shift) - 1);
        let page = *self.pages.get(idx)?;
        let left = (1u64 << self.page_shift) - in_page;
        Some((page.checked_add(in_page)?, left.min(self.size - off)))
    }

    /// Reads `buf.len()` bytes at byte `off` (wrapping at the end of the queue).
    pub fn read(&self, off: u64, buf: &mut [u8], mem: &dyn GuestMemory) -> Result<(), Xlate> {
        let mut done = 0usize;
        let mut pos = off % self.size;
        while done < buf.len() {
            let (gpa, left) = self.locate(pos).ok_or(Xlate::Bounds)?;
            let n = (buf.len() - done).min(usize::try_from(left).unwrap_or(usize::MAX));
            mem.read(gpa, &mut buf[done..done + n])?;
            done += n;
            pos = (pos + n as u64) % self.size;
        }
        Ok(())
    }

    /// Writes `data` at byte `off` (wrapping at the end of the queue).
    pub fn write(&self, off: u64, data: &[u8], mem: &mut dyn GuestMemory) -> Result<(), Xlate> {
        let mut done = 0usize;
        let mut pos = off % self.size;
        while done < data.len() {
            let (gpa, left) = self.locate(pos).ok_or(Xlate::Bounds)?;
            let n = (data.len() - done).min(usize::try_from(left).unwrap_or(usize::MAX));
            mem.write(gpa, &data[done..done + n])?;
            done += n;
            pos = (pos + n as u64) % self.size;
        }
        Ok(())
    }
}

/// One contiguous piece of a translated range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Guest-physical address.
    pub gpa: u64,
    /// Length.
    pub len: u64,
}

/// Translates `[iova, iova + len)` of an MR whose first page starts the page containing `va`,
/// with pages of `1 << page_shift` bytes, into guest-physical pieces (at most `limit` of them;
/// the caller bounds `len`). The caller has checked the range against the MR.
pub fn mr_pieces(
    mtt: &Mtt,
    va: u64,
    page_shift: u8,
    iova: u64,
    len: u64,
    mem: &dyn GuestMemory,
) -> Result<Vec<Piece>, Xlate> {
    if page_shift >= 64 {
        return Err(Xlate::Bounds);
    }
    let page = 1u64 << page_shift;
    let mut out: Vec<Piece> = Vec::new();
    let mut at = iova;
    let mut left = len;
    while left > 0 {
        let idx = (at >> page_shift)
            .checked_sub(va >> page_shift)
            .ok_or(Xlate::Bounds)?;
        let base = mtt.entry(idx, mem)?;
        let in_page = at & (page - 1);
        let n = (page - in_page).min(left);
        let gpa = base.checked_add(in_page).ok_or(Xlate::Bounds)?;
        gpa.checked_add(n).ok_or(Xlate::Bounds)?;
        match out.last_mut() {
            Some(p) if p.gpa.checked_add(p.len) == Some(gpa) => p.len += n,
            _ => out.push(Piece { gpa, len: n }),
        }
        at = at.checked_add(n).ok_or(Xlate::Bounds)?;
        left -= n;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::VecMemory;

    #[test]
    fn queue_buf_wraps_and_crosses_pages() {
        let mut mem = VecMemory::new(0, 0x10000);
        // Two 4 KiB pages in reverse order, queue at offset 0x800 of the first, 4 KiB long.
        let q = QueueBuf::new(vec![0x5000, 0x2000], 12, 0x800, 0x1000).unwrap();
        q.write(0x7f0, &[1; 32], &mut mem).unwrap();
        assert_eq!(mem.bytes()[0x5ff0..0x6000], [1; 16]);
        assert_eq!(mem.bytes()[0x2000..0x2010], [1; 16]);
        // Wrap at the end of the queue.
        q.write(0xff0, &[2; 32], &mut mem).unwrap();
        assert_eq!(mem.bytes()[0x27f0..0x2800], [2; 16]);
        assert_eq!(mem.bytes()[0x5800..0x5810], [2; 16]);
        let mut b = [0u8; 32];
        q.read(0xff0, &mut b, &mem).unwrap();
        assert_eq!(b, [2; 32]);
        assert!(QueueBuf::new(vec![0x5000], 12, 0x800, 0x1000).is_none());
        assert!(QueueBuf::new(vec![u64::MAX - 10], 12, 0, 0x100).is_none());
        assert!(QueueBuf::new(vec![0], 12, 0x1000, 0x100).is_none());
    }

    #[test]
    fn multi_level_walk() {
        let mut mem = VecMemory::new(0, 0x20000);
        // Level 2 with 4 KiB MTT pages: top page at 0x1000 points to bottom pages 0x2000, 0x3000.
        mem.write_u64_le(0x1000, 0x2000).unwrap();
        mem.write_u64_le(0x1008, 0x3000).unwrap();
        for i in 0..512u64 {
            mem.write_u64_le(0x2000 + 8 * i, 0x100_0000 + i * 0x1000)
                .unwrap();
        }
        mem.write_u64_le(0x3000, 0x900_0000).unwrap();
        let m = Mtt::Indirect {
            levels: 2,
            root: 0x1000,
            count: 513,
            page_shift: 12,
        };
        assert_eq!(m.entry(0, &mem), Ok(0x100_0000));
        assert_eq!(m.entry(511, &mem), Ok(0x100_0000 + 511 * 0x1000));
        assert_eq!(m.entry(512, &mem), Ok(0x900_0000));
        assert_eq!(m.entry(513, &mem), Err(Xlate::Bounds));
        let l1 = Mtt::Indirect {
            levels: 1,
            root: 0x2000,
            count: 600,
            page_shift: 12,
        };
        assert_eq!(l1.entry(2, &mem), Ok(0x100_2000));
        let wild = Mtt::Indirect {
            levels: 3,
            root: u64::MAX - 4,
            count: u64::MAX,
            page_shift: 12,
        };
        assert!(wild.entry(u64::MAX - 1, &mem).is_err());
        let p = mr_pieces(&l1, 0x10_0800, 12, 0x10_0f00, 0x200, &mem).unwrap();
        assert_eq!(
            p,
            [Piece {
                gpa: 0x100_0f00,
                len: 0x200
            }],
            "adjacent pages merge"
        );
        assert!(mr_pieces(&l1, 0x10_0000, 12, 0xf_f000, 0x10, &mem).is_err());
    }
}
