// SPDX-License-Identifier: GPL-2.0

//! POSIX capabilities of the current task.
//!
//! C header: [`include/linux/capability.h`](srctree/include/linux/capability.h)
//!
//! # Examples
//!
//! ```
//! use kernel::capability::{
//!     capable,
//!     Capability, //
//! };
//!
//! // Lets only an administrator of the network change the device's addresses.
//! fn check_may_configure() -> Result {
//!     if !capable(Capability::NET_ADMIN) {
//!         return Err(EPERM);
//!     }
//!     Ok(())
//! }
//! ```

use crate::bindings;

/// A capability (`CAP_*`).
///
/// # Examples
///
/// ```
/// use kernel::capability::{
///     capable,
///     Capability, //
/// };
///
/// // Raw access to the device's registers is for privileged users only.
/// fn may_access_registers() -> bool {
///     capable(Capability::SYS_RAWIO)
/// }
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Capability(u32);

impl Capability {
    /// Raw I/O: device registers, `iopl`, `/dev/mem`.
    pub const SYS_RAWIO: Self = Self(bindings::CAP_SYS_RAWIO);
    /// System administration.
    pub const SYS_ADMIN: Self = Self(bindings::CAP_SYS_ADMIN);
    /// Network administration.
    pub const NET_ADMIN: Self = Self(bindings::CAP_NET_ADMIN);
}

/// Whether the current task has `cap` in the initial user namespace (and, as a side effect of
/// a positive answer, is marked as having used a privilege).
pub fn capable(cap: Capability) -> bool {
    // CAST: capability numbers are small.
    // SAFETY: `capable` may be called from any process context with any capability number.
    unsafe { bindings::capable(cap.0 as i32) }
}
