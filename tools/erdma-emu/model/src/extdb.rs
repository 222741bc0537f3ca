// SPDX-License-Identifier: GPL-2.0

//! Extended doorbell pages (ALLOC_DB / FREE_DB / CONF_DEVICE, erdma_rs_hw 3.6, §8).
//!
//! User contexts get their own SQ, "CDB" (CQ) and "RDB" (RQ) doorbell pages from the extended
//! doorbell space of BAR0 ([`regs::EXTDB_BASE`] to the end of BAR0, minus the test page when it
//! is enabled). Page indices are BAR0 offsets in units of the host page size announced with
//! CONF_DEVICE (4 KiB until then): with 4 KiB pages the pool is pages 256..1024 (768 pages), with
//! 64 KiB pages 16..64. Only pages lying entirely inside the space are handed out; the lowest free
//! ones first.
//!
//! The model does not bind doorbells to pages (the doorbell value names the queue, §2.1), so the
//! CDB/RDB swap of the drivers (§3.6) is harmless. FREE_DB frees pages, not "contexts": each page
//! it names must be allocated (in any role), and a context disappears once all its pages are
//! free.

use std::collections::BTreeSet;
use std::ops::Range;

use crate::cmdq::{Status, DB_CQ, DB_RQ, DB_SQ};
use crate::regs;

/// Host page shift before CONF_DEVICE (or with its page-size-enable bit clear).
pub const DEFAULT_PAGE_SHIFT: u8 = 12;
/// Page shifts CONF_DEVICE accepts: 4 KiB to 2 MiB.
pub const PAGE_SHIFT_RANGE: core::ops::RangeInclusive<u8> = 12..=21;

/// Pages of one ALLOC_DB: `[SQ, CDB, RDB]`, `None` for the ones not enabled.
pub type DbContext = [Option<u16>; 3];

/// The extended doorbell pages of a function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DbPages {
    page_shift: u8,
    test_page: bool,
    contexts: Vec<DbContext>,
    used: BTreeSet<u16>,
}

impl DbPages {
    /// No pages allocated, 4 KiB units. `test_page`: the last 4 KiB of BAR0 is the test page and
    /// not part of the pool.
    pub fn new(test_page: bool) -> Self {
        DbPages {
            page_shift: DEFAULT_PAGE_SHIFT,
            test_page,
            contexts: Vec::new(),
            used: BTreeSet::new(),
        }
    }

    /// The page shift indices are counted in.
    pub fn page_shift(&self) -> u8 {
        self.page_shift
    }

    /// Changes the page unit (CONF_DEVICE). Refused with [`Status::NoResources`] (busy) while
    /// pages are allocated in other units, [`Status::InvalidParam`] outside
    /// [`PAGE_SHIFT_RANGE`].
    pub fn set_page_shift(&mut self, shift: u8) -> Result<(), Status> {
        if !PAGE_SHIFT_RANGE.contains(&shift) {
            return Err(Status::InvalidParam);
        }
        if shift != self.page_shift && !self.used.is_empty() {
            return Err(Status::NoResources);
        }
        self.page_shift = shift;
        Ok(())
    }

    /// The page indices of the pool.
    pub fn pool(&self) -> Range<u32> {
        let size = 1u64 << self.page_shift;
        let end = if self.test_page {
            regs::TEST_PAGE_BASE
        } else {
            regs::BAR0_SIZE
        };
        let first = regs::EXTDB_BASE.div_ceil(size);
        let last = end / size;
        // BAR0 is 4 MiB and pages are at least 4 KiB: indices fit easily.
        first as u32..(last.max(first)) as u32
    }

    /// BAR0 offset of page `index`.
    pub fn offset(&self, index: u16) -> u64 {
        u64::from(index) << self.page_shift
    }

    /// Live contexts.
    pub fn contexts(&self) -> &[DbContext] {
        &self.contexts
    }

    /// The role page `page` was allocated in: 0 SQ, 1 CDB, 2 RDB (`None`: not allocated).
    pub fn role_of(&self, page: u16) -> Option<usize> {
        self.contexts
            .iter()
            .find_map(|c| c.iter().position(|&p| p == Some(page)))
    }

    /// Where a doorbell written at BAR0 `offset` (in the extended doorbell space) goes: the role
    /// of the allocated page it lies in ([`DbPages::role_of`]) and the offset of its slot within
    /// the 4 KiB doorbell page; `None` if that page is not allocated.
    pub fn doorbell_at(&self, offset: u64) -> Option<(usize, u64)> {
        let shift = self.page_shift;
        let page = u16::try_from(offset >> shift).ok()?;
        let slot = (offset & ((1u64 << shift) - 1)) & (regs::DB_PAGE_SIZE - 1);
        Some((self.role_of(page)?, slot))
    }

    /// Allocated pages, in increasing order.
    pub fn allocated(&self) -> impl Iterator<Item = u16> + '_ {
        self.used.iter().copied()
    }

    /// ALLOC_DB: one page for each bit of `enable` ([`DB_SQ`], [`DB_CQ`], [`DB_RQ`]); all or
    /// nothing.
    pub fn alloc(&mut self, enable: u32) -> Result<DbContext, Status> {
        let roles = [DB_SQ, DB_CQ, DB_RQ];
        let wanted = roles.iter().filter(|&&r| enable & r != 0).count();
        if wanted == 0 {
            return Err(Status::InvalidParam);
        }
        let free: Vec<u16> = self
            .pool()
            .filter_map(|p| u16::try_from(p).ok())
            .filter(|p| !self.used.contains(p))
            .take(wanted)
            .collect();
        if free.len() < wanted {
            return Err(Status::NoResources);
        }
        let mut free = free.into_iter();
        let mut ctx: DbContext = [None; 3];
        for (slot, role) in ctx.iter_mut().zip(roles) {
            if enable & role != 0 {
                *slot = free.next();
            }
        }
        self.used.extend(ctx.iter().flatten());
        self.contexts.push(ctx);
        Ok(ctx)
    }

    /// FREE_DB of `pages`: every page must be allocated and named once, or nothing is freed
    /// ([`Status::NotFound`], [`Status::InvalidParam`] for a page named twice or no page).
    pub fn free(&mut self, pages: &[u16]) -> Result<(), Status> {
        if pages.is_empty() {
            return Err(Status::InvalidParam);
        }
        let set: BTreeSet<u16> = pages.iter().copied().collect();
        if set.len() != pages.len() {
            return Err(Status::InvalidParam);
        }
        if !set.is_subset(&self.used) {
            return Err(Status::NotFound);
        }
        for ctx in &mut self.contexts {
            for slot in ctx.iter_mut() {
                if slot.is_some_and(|p| set.contains(&p)) {
                    *slot = None;
                }
            }
        }
        self.contexts.retain(|c| c.iter().any(Option::is_some));
        self.used.retain(|p| !set.contains(p));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools() {
        let mut d = DbPages::new(false);
        assert_eq!(d.pool(), 256..1024);
        d.set_page_shift(16).unwrap();
        assert_eq!(d.pool(), 16..64);
        assert_eq!(d.offset(16), 0x10_0000);
        let mut t = DbPages::new(true);
        assert_eq!(t.pool(), 256..1023, "the test page is not handed out");
        t.set_page_shift(16).unwrap();
        assert_eq!(t.pool(), 16..63, "nor the 64 KiB page that holds it");
        t.set_page_shift(21).unwrap();
        assert!(t.pool().is_empty());
        assert_eq!(t.alloc(DB_SQ), Err(Status::NoResources));
        assert_eq!(t.set_page_shift(11), Err(Status::InvalidParam));
        assert_eq!(t.set_page_shift(22), Err(Status::InvalidParam));
    }

    #[test]
    fn doorbells_land_in_allocated_pages_by_role() {
        let mut d = DbPages::new(false);
        assert_eq!(d.alloc(DB_SQ | DB_RQ), Ok([Some(256), None, Some(257)]));
        assert_eq!(d.doorbell_at(0x10_0000 + 0x28), Some((0, 0x28)));
        assert_eq!(d.doorbell_at(0x10_1000 + 0x80), Some((2, 0x80)));
        assert_eq!(d.doorbell_at(0x10_2000), None, "not allocated");
        assert_eq!(d.doorbell_at(u64::MAX), None, "beyond any page");
        let mut big = DbPages::new(false);
        big.set_page_shift(16).unwrap();
        assert_eq!(big.alloc(DB_CQ), Ok([None, Some(16), None]));
        assert_eq!(
            big.doorbell_at(0x10_0000 + 0x2348),
            Some((1, 0x348)),
            "the slot within the 4 KiB doorbell page"
        );
    }

    #[test]
    fn alloc_free_exhaustion() {
        let mut d = DbPages::new(false);
        let all = DB_SQ | DB_RQ | DB_CQ;
        assert_eq!(d.alloc(all), Ok([Some(256), Some(257), Some(258)]));
        assert_eq!(d.alloc(DB_CQ), Ok([None, Some(259), None]));
        assert_eq!(d.alloc(0), Err(Status::InvalidParam));
        assert_eq!(d.set_page_shift(16), Err(Status::NoResources), "busy");
        assert_eq!(d.set_page_shift(12), Ok(()), "same unit is fine");
        // Freeing with the roles swapped (the drivers' CDB/RDB quirk) works.
        assert_eq!(d.free(&[258, 257, 256]), Ok(()));
        assert_eq!(d.contexts().len(), 1);
        assert_eq!(d.free(&[256]), Err(Status::NotFound), "already freed");
        assert_eq!(d.free(&[259, 259]), Err(Status::InvalidParam));
        assert_eq!(d.free(&[259, 300]), Err(Status::NotFound));
        assert_eq!(d.allocated().collect::<Vec<_>>(), [259], "nothing freed");
        assert_eq!(d.free(&[]), Err(Status::InvalidParam));
        // Exhaust the 768 pages: 255 contexts of 3, then 2 pages are left with 259 in use.
        for _ in 0..255 {
            d.alloc(all).unwrap();
        }
        assert_eq!(d.allocated().count(), 766);
        assert_eq!(d.alloc(all), Err(Status::NoResources), "all or nothing");
        assert_eq!(d.allocated().count(), 766);
        assert_eq!(d.alloc(DB_SQ | DB_RQ), Ok([Some(1022), None, Some(1023)]));
        assert_eq!(d.alloc(DB_SQ), Err(Status::NoResources));
        assert_eq!(d.free(&[259]), Ok(()));
        assert_eq!(d.alloc(DB_SQ), Ok([Some(259), None, None]));
    }
}
