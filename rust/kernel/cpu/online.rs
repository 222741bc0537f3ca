// SPDX-License-Identifier: GPL-2.0

//! Online CPUs: how many there are, and spreading per-queue work over them.
//!
//! C header: [`include/linux/cpumask.h`](srctree/include/linux/cpumask.h)

use super::CpuId;
use crate::{
    bindings,
    cpumask::Cpumask, //
};

/// Returns the number of CPUs that are online now (`num_online_cpus()`).
///
/// CPUs can go on- and offline at any time; the value is a snapshot.
///
/// # Examples
///
/// ```
/// use kernel::cpu::num_online_cpus;
///
/// // One queue per online CPU, at least one and at most 32.
/// let queues = num_online_cpus().clamp(1, 32);
/// assert!(queues >= 1);
/// ```
pub fn num_online_cpus() -> u32 {
    // SAFETY: `__cpu_online_mask` is a valid, statically allocated cpumask that lives forever;
    // it is only read here.
    let online = unsafe { Cpumask::from_raw(&raw const bindings::__cpu_online_mask) };
    online.weight()
}

/// Returns the `i`-th CPU in an order that spreads consecutive `i` over the online CPUs, closest
/// NUMA node first (`cpumask_local_spread(i, NUMA_NO_NODE)`). Wraps around for large `i`.
///
/// # Examples
///
/// ```
/// use kernel::cpu::{
///     local_spread,
///     nr_cpu_ids, //
/// };
///
/// // The CPU that handles the interrupts of each of four queues.
/// for queue in 0..4 {
///     let cpu = local_spread(queue);
///     assert!(cpu.as_u32() < nr_cpu_ids());
/// }
/// ```
pub fn local_spread(i: u32) -> CpuId {
    // SAFETY: `cpumask_local_spread()` accepts any `i` and `NUMA_NO_NODE`.
    let cpu = unsafe { bindings::cpumask_local_spread(i, bindings::NUMA_NO_NODE) };

    // SAFETY: `cpumask_local_spread()` returns a CPU of `cpu_online_mask`, hence a valid CPU id.
    unsafe { CpuId::from_u32_unchecked(cpu) }
}
