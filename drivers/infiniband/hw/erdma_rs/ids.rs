// SPDX-License-Identifier: GPL-2.0

//! Numbers the driver hands out for adapter objects: PDNs, CQNs, QPNs, MPT indices, AHNs.

use kernel::{
    id_pool::IdPool,
    prelude::*,
    sync::{
        Mutex,
        SpinLockIrq, //
    },
};

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

/// AHNs the driver hands out at most: `max_ah` is capped to this, so that the range's bitmap
/// stays small (128 KiB) whatever the adapter reports.
pub(crate) const MAX_AHS: u32 = 1 << 20;

/// The AHNs of a RoCE adapter that reports `2^max_ah_log2` address handles.
pub(crate) fn ahn_range(max_ah_log2: u8) -> Result<Ids> {
    Ids::new(0, max_ahs(max_ah_log2))
}

/// The number of address handles a RoCE adapter offers.
pub(crate) fn max_ahs(max_ah_log2: u8) -> u32 {
    (1u32 << max_ah_log2.min(31)).min(MAX_AHS)
}

/// The AHN range of a device, under an interrupt-safe lock.
pub(crate) type AhIds = SpinLockIrq<Ids>;

/// The kinds of object the driver numbers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum IdKind {
    Pd,
    Cq,
    Qp,
    Mr,
}

/// The numbers the driver hands out for adapter objects, one range per kind.
pub(crate) struct ObjIds {
    pub(crate) pd: Ids,
    pub(crate) cq: Ids,
    pub(crate) qp: Ids,
    pub(crate) mr: Ids,
}

impl ObjIds {
    fn range(&mut self, kind: IdKind) -> &mut Ids {
        match kind {
            IdKind::Pd => &mut self.pd,
            IdKind::Cq => &mut self.cq,
            IdKind::Qp => &mut self.qp,
            IdKind::Mr => &mut self.mr,
        }
    }

    /// Takes a number of `kind` for an object being created; see [`TakenId`].
    pub(crate) fn take(ids: &Mutex<ObjIds>, kind: IdKind) -> Result<TakenId<'_>> {
        let id = ids.lock().range(kind).alloc()?;
        Ok(TakenId { ids, kind, id })
    }

    /// Gives back the number of an object that is gone from the adapter.
    pub(crate) fn free(ids: &Mutex<ObjIds>, kind: IdKind, id: u32) {
        ids.lock().range(kind).free(id);
    }
}

/// A number taken for an object being created. Dropping it gives the number back, so every
/// error path of a creation does; [`TakenId::keep`] says the object now exists in the adapter
/// and its destruction gives the number back ([`ObjIds::free`]).
pub(crate) struct TakenId<'a> {
    ids: &'a Mutex<ObjIds>,
    kind: IdKind,
    id: u32,
}

impl TakenId<'_> {
    pub(crate) fn get(&self) -> u32 {
        self.id
    }

    /// Keeps the number taken; returns it.
    pub(crate) fn keep(self) -> u32 {
        let id = self.id;
        core::mem::forget(self);
        id
    }
}

impl Drop for TakenId<'_> {
    fn drop(&mut self) {
        ObjIds::free(self.ids, self.kind, self.id);
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

    #[test]
    fn taken_ids_come_back_unless_kept() -> Result {
        let ids = kernel::sync::Arc::pin_init(
            kernel::new_mutex!(ObjIds {
                pd: Ids::new(1, 3)?,
                cq: Ids::new(1, 2)?,
                qp: Ids::new(1, 2)?,
                mr: Ids::new(1, 2)?,
            }),
            GFP_KERNEL,
        )?;
        let a = ObjIds::take(&ids, IdKind::Pd)?;
        assert_eq!(a.get(), 1);
        drop(a);
        // Given back (and, the range being cyclic, handed out again after 2).
        let kept = ObjIds::take(&ids, IdKind::Pd)?.keep();
        assert_eq!(kept, 2);
        assert_eq!(ObjIds::take(&ids, IdKind::Pd)?.keep(), 1);
        assert!(ObjIds::take(&ids, IdKind::Pd).is_err());
        ObjIds::free(&ids, IdKind::Pd, kept);
        assert_eq!(ObjIds::take(&ids, IdKind::Pd)?.get(), 2);
        // The kinds are separate ranges.
        assert_eq!(ObjIds::take(&ids, IdKind::Mr)?.get(), 1);
        Ok(())
    }
}
