// SPDX-License-Identifier: GPL-2.0

//! Protection domains (`struct ib_pd`) and completion queues (`struct ib_cq`).

use super::{
    object::{
        kind,
        Events,
        Object, //
    },
    ucontext::UContext,
    Driver,
};
use crate::bindings;

/// A protection domain of a device of `T`.
pub type Pd<T> = Object<kind::Pd, <T as Driver>::Pd>;

/// A completion queue of a device of `T`.
pub type Cq<T> = Object<kind::Cq, <T as Driver>::Cq>;

/// Reports completion-queue events: see [`Events::completion`] and [`Events::error`].
pub type CqEvents = Events<kind::Cq>;

/// What the creator of a completion queue asks for.
#[derive(Clone, Copy, Debug)]
pub struct CqAttr {
    /// Completions it must hold at least.
    pub cqe: u32,
    /// The completion vector its events go through (below the device's count).
    pub comp_vector: u32,
    /// Creation flags.
    pub flags: CqCreateFlags,
}

crate::impl_flags!(
    /// Creation flags of a completion queue (`enum ib_uverbs_ex_create_cq_flags`). Flags
    /// this abstraction does not name are kept: see [`CqCreateFlags::unnamed`].
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct CqCreateFlags(u32);

    /// One creation flag.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum CqCreateFlag {
        /// Completions carry a timestamp.
        TimestampCompletion =
            bindings::ib_uverbs_ex_create_cq_flags_IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION,
        /// The queue may overrun without an error.
        IgnoreOverrun = bindings::ib_uverbs_ex_create_cq_flags_IB_UVERBS_CQ_FLAGS_IGNORE_OVERRUN,
    }
);

open_flags!(CqCreateFlags, u32);

/// What a driver has while creating a completion queue.
pub struct CqSetup<'a, T: Driver> {
    pub(crate) cq: *mut bindings::ib_cq,
    pub(crate) attr: CqAttr,
    pub(crate) events: &'a CqEvents,
    pub(crate) ucontext: Option<&'a UContext<T>>,
}

impl<T: Driver> CqSetup<'_, T> {
    /// The requested attributes.
    pub fn attr(&self) -> &CqAttr {
        &self.attr
    }

    /// A handle to report events of the new queue; it stays usable (and does nothing) after the
    /// queue is destroyed.
    pub fn events(&self) -> CqEvents {
        self.events.clone()
    }

    /// The driver's part of the calling user context, for a user queue.
    pub fn ucontext(&self) -> Option<&T::UContext> {
        self.ucontext.map(|c| c.data())
    }

    /// Tells the consumer how many completions the queue really holds.
    pub fn set_cqe(&self, cqe: u32) {
        // SAFETY: The core is creating the CQ and does not read `cqe` until creation returns.
        unsafe { (*self.cq).cqe = cqe.try_into().unwrap_or(i32::MAX) };
    }
}

/// What a driver has while creating a protection domain.
pub struct PdSetup<'a, T: Driver> {
    pub(crate) ucontext: Option<&'a UContext<T>>,
}

impl<T: Driver> PdSetup<'_, T> {
    /// The driver's part of the calling user context, for a user PD.
    pub fn ucontext(&self) -> Option<&T::UContext> {
        self.ucontext.map(|c| c.data())
    }
}
