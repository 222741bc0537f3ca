// SPDX-License-Identifier: GPL-2.0

//! Hardware counters (`rdma statistic`, `hw_counters` in sysfs).
//!
//! # Examples
//!
//! ```
//! use kernel::{
//!     prelude::*,
//!     rdma::StatDesc, //
//! };
//!
//! // The port counters of a driver, as `Driver::HW_PORT_STATS`.
//! static HW_STATS: [StatDesc; 2] = [StatDesc::new(c"tx_packets"), StatDesc::new(c"rx_packets")];
//!
//! // Fills in the counters in the same order (`DeviceOps::get_hw_stats`).
//! fn get_hw_stats(values: &mut [u64], tx: u64, rx: u64) -> Result<usize> {
//!     let counters = [tx, rx];
//!     let n = values.len().min(counters.len());
//!     values[..n].copy_from_slice(&counters[..n]);
//!     Ok(n)
//! }
//!
//! let mut values = [0; 2];
//! assert_eq!(get_hw_stats(&mut values, 3, 4)?, HW_STATS.len());
//! assert_eq!(values, [3, 4]);
//! # Ok::<(), Error>(())
//! ```

use crate::{
    bindings,
    prelude::*, //
};

/// The description of one hardware counter (`struct rdma_stat_desc`).
///
/// A driver lists its port counters in [`super::Driver::HW_PORT_STATS`]; the core reads them
/// through [`super::DeviceOps::get_hw_stats`] in the same order.
///
/// # Examples
///
/// ```
/// use kernel::rdma::{
///     self,
///     StatDesc, //
/// };
///
/// struct MyDriver;
///
/// impl MyDriver {
///     // The value of `rdma::Driver::HW_PORT_STATS` in the driver's `rdma::Driver` implementation.
///     const HW_PORT_STATS: &'static [StatDesc] = &[
///         StatDesc::new(c"tx_packets"),
///         StatDesc::new(c"rx_packets"),
///         StatDesc::new(c"retransmits"),
///     ];
/// }
///
/// assert_eq!(MyDriver::HW_PORT_STATS.len(), 3);
/// ```
#[repr(transparent)]
pub struct StatDesc(bindings::rdma_stat_desc);

// SAFETY: A `StatDesc` only holds a pointer to a static string; it is never written after
// construction.
unsafe impl Sync for StatDesc {}

impl StatDesc {
    /// A counter named `name`.
    pub const fn new(name: &'static CStr) -> Self {
        Self(bindings::rdma_stat_desc {
            name: name.as_ptr().cast(),
            flags: 0,
            priv_: core::ptr::null(),
        })
    }
}

/// Allocates the core's counter set for `descs`, or returns `NULL` (which the core takes as
/// "no counters").
pub(crate) fn alloc(descs: &'static [StatDesc]) -> *mut bindings::rdma_hw_stats {
    let Ok(num) = i32::try_from(descs.len()) else {
        return core::ptr::null_mut();
    };
    if num == 0 {
        return core::ptr::null_mut();
    }
    // CAST: a small constant (10 jiffies).
    let lifespan = bindings::RDMA_HW_STATS_DEFAULT_LIFESPAN as crate::ffi::c_ulong;
    // SAFETY: `descs` is a static array of `num` descriptions; the core frees the result.
    unsafe { bindings::rdma_alloc_hw_stats_struct(descs.as_ptr().cast(), num, lifespan) }
}
