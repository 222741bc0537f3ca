// SPDX-License-Identifier: GPL-2.0

//! Numbers the driver hands out for adapter objects: PDNs, CQNs, QPNs, MPT indices.

use kernel::{id_pool::IdPool, prelude::*};

/// A range of numbers `[first, end)`, handed out cyclically (a number just freed is reused
/// last, so that a stale reference is unlikely to meet a new object).
pub(crate) struct Ids {
    pool: IdPool,
    first: usize,
    end: usize,
    next: usize,
}

impl Ids {
    /// The numbers `first..end`.
    pub(crate) fn new(first: u32, end: u32) -> Result<Self> {
        let (first, end) = (first as usize, end as usize);
        if first >= end {
            return Err(EINVAL);
        }
        Ok(Self {
            pool: IdPool::with_capacity(end, GFP_KERNEL)?,
            first,
            end,
            next: first,
        })
    }

    /// Takes the next free number; `ENOMEM` when all are taken.
    pub(crate) fn alloc(&mut self) -> Result<u32> {
        for start in [self.next, self.first] {
            let Some(id) = self.pool.find_unused_id(start) else {
                continue;
            };
            if id.as_usize() >= self.end {
                continue;
            }
            let id = id.acquire();
            self.next = if id + 1 >= self.end {
                self.first
            } else {
                id + 1
            };
            // CAST: below `end`, which came from a `u32`.
            return Ok(id as u32);
        }
        Err(ENOMEM)
    }

    /// Returns `id` to the range.
    pub(crate) fn free(&mut self, id: u32) {
        let id = id as usize;
        if (self.first..self.end).contains(&id) {
            self.pool.release_id(id);
        }
    }
}

#[kunit_tests(erdma_rs_ids)]
mod tests {
    use super::*;

    #[test]
    fn cyclic_and_bounded() -> Result {
        let mut ids = Ids::new(1, 4)?;
        assert_eq!(ids.alloc()?, 1);
        assert_eq!(ids.alloc()?, 2);
        ids.free(1);
        assert_eq!(ids.alloc()?, 3);
        // Wraps around to the freed number.
        assert_eq!(ids.alloc()?, 1);
        assert_eq!(ids.alloc(), Err(ENOMEM));
        ids.free(2);
        assert_eq!(ids.alloc()?, 2);
        // Out-of-range numbers are ignored.
        ids.free(0);
        ids.free(9);
        assert_eq!(ids.alloc(), Err(ENOMEM));
        Ok(())
    }
}
