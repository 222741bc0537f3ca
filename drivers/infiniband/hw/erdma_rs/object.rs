// SPDX-License-Identifier: GPL-2.0

//! The lifecycle the adapter's objects (CQ, QP, MR, AH) share, written once (erdma_rs_hw 3.5).
//!
//! Creation: a number is taken from the object's range ([`crate::ids::TakenId`], given back on
//! any error); the create command names it; once the adapter has the object, it is linked
//! where the event handlers find it, and the number is its own until destruction.
//!
//! Destruction ([`retire`]): the destroy command; then the object is unlinked, so that no event
//! handler finds it any more; then its number goes back and its memory is freed, or, if the
//! adapter refused, number and memory are kept until unbind, as the adapter may still use
//! them. Entries removed from a table are dropped after the table's lock is released: the last
//! reference may free DMA memory, which needs interrupts on.

use kernel::{
    fmt,
    prelude::*, //
};

use crate::{
    cmdq::Wait,
    commands::Command,
    hw::Hw,
    ids::{
        AhIds,
        IdKind,
        ObjIds, //
    },
};

/// Where an object's number goes back to.
pub(crate) trait Numbers {
    /// Gives `number` back.
    fn give_back(&self, number: u32);
}

impl Numbers for AhIds {
    fn give_back(&self, number: u32) {
        self.lock().free(number);
    }
}

/// The numbers of one kind of object.
pub(crate) struct Kind<'a>(
    pub(crate) &'a kernel::sync::Mutex<ObjIds>,
    pub(crate) IdKind,
);

impl Numbers for Kind<'_> {
    fn give_back(&self, number: u32) {
        ObjIds::free(self.0, self.1, number);
    }
}

/// Ends an object: runs its destroy command `cmd` (waiting as `wait` says), then `unlink`s it,
/// then gives `number` back (if it has one of its own) and drops `memory`; or, if the adapter
/// refused, keeps both until unbind and says so, naming the object as `what` ("DESTROY_QP 5").
/// An object without memory of its own (`None`, an address handle, destroyed where sleeping
/// may not be allowed) keeps only its number.
pub(crate) fn retire<'b, C, M>(
    hw: &Hw<'b>,
    cmd: &C,
    wait: Wait,
    what: fmt::Arguments<'_>,
    unlink: impl FnOnce(),
    number: Option<(&dyn Numbers, u32)>,
    memory: Option<M>,
) where
    C: Command<Reply = ()>,
    M: Send + 'b,
{
    let result = hw.exec_with(cmd, wait);
    unlink();
    match (result, memory) {
        (Ok(()), memory) => {
            if let Some((numbers, n)) = number {
                numbers.give_back(n);
            }
            drop(memory);
        }
        (Err(e), Some(memory)) => hw.strand(
            fmt!(
                "{what} failed ({}); its number and memory are kept until unbind\n",
                e.to_errno()
            ),
            memory,
        ),
        (Err(e), None) => hw.reports.note(
            hw.dev(),
            fmt!("{what} failed ({}); its number is kept\n", e.to_errno()),
        ),
    }
}
