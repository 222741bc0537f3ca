// SPDX-License-Identifier: GPL-2.0

//! Which drivers hold the PCI devices of an ID, and a driver letting go of its device to have it
//! probed again.
//!
//! Two drivers can claim the same device ID (an in-tree driver and a replacement for it). The
//! one that is loaded second binds nothing while the first holds every device; it can ask who
//! holds them and say so, rather than load and do nothing.
//!
//! A driver that finds its device failed can start over with it: [`Device::reprobe_later`].
//!
//! C header: [`include/linux/pci.h`](srctree/include/linux/pci.h)

use super::{Device, Vendor};
use crate::{
    alloc::{flags::GFP_KERNEL, KVec},
    bindings, device,
    prelude::*,
    str::{CStr, CString},
    sync::aref::ARef,
    workqueue,
};

/// A PCI device of a given ID, as it was when it was looked at.
///
/// # Examples
///
/// ```
/// use kernel::{
///     pci,
///     prelude::*, //
/// };
///
/// // Says which driver holds each device with ID 1ded:107f.
/// fn log_holders() -> Result {
///     for holder in &pci::holders(pci::Vendor::ALIBABA, 0x107f)? {
///         match &holder.driver {
///             Some(driver) => pr_info!(
///                 "{} is bound to {}\n",
///                 holder.device.to_str()?,
///                 driver.to_str()?
///             ),
///             None => pr_info!("{} is free\n", holder.device.to_str()?),
///         }
///     }
///     Ok(())
/// }
/// ```
pub struct Holder {
    /// The device's name on its bus: its address, such as `0000:00:03.0`.
    pub device: CString,
    /// The name of the driver bound to the device, if one is.
    pub driver: Option<CString>,
}

/// Copies the NUL-terminated string at `ptr`.
///
/// # Safety
///
/// `ptr` is a valid pointer to a NUL-terminated string that lives for the duration of the call.
unsafe fn copy_c_string(ptr: *const crate::ffi::c_char) -> Result<CString> {
    // SAFETY: Guaranteed by the caller.
    let s = unsafe { CStr::from_char_ptr(ptr) };
    Ok(CString::try_from(s)?)
}

/// Returns every PCI device with `vendor`:`device` in the system, and the driver bound to each.
///
/// A snapshot: a driver can bind or unbind a device right after it is looked at. Each device's
/// driver is read under the device lock, so the name is that of a driver that was bound then.
/// Sleeps (takes each device's lock); not for a context that cannot.
///
/// # Examples
///
/// ```
/// use kernel::{
///     pci,
///     prelude::*, //
/// };
///
/// // Refuses to load when another driver holds every device this one would drive.
/// fn check_free(device: u32) -> Result {
///     let found = pci::holders(pci::Vendor::ALIBABA, device)?;
///     if !found.is_empty() && found.iter().all(|h| h.driver.is_some()) {
///         return Err(EBUSY);
///     }
///     Ok(())
/// }
/// ```
pub fn holders(vendor: Vendor, device: u32) -> Result<KVec<Holder>> {
    let mut found = KVec::new();
    let mut pdev: *mut bindings::pci_dev = core::ptr::null_mut();
    loop {
        // SAFETY: `pdev` is null or a device the previous call returned, with the reference that
        // call took; `pci_get_device()` drops that reference and takes one on the device it
        // returns.
        pdev = unsafe { bindings::pci_get_device(vendor.as_raw().into(), device, pdev) };
        if pdev.is_null() {
            return Ok(found);
        }
        // SAFETY: `pdev` is a valid `struct pci_dev` on which this function holds a reference.
        let dev = unsafe { &raw mut (*pdev).dev };
        // SAFETY: `dev` is valid (above); `device_lock()` is `mutex_lock(&dev->mutex)`, and this
        // function may sleep (its documented contract).
        unsafe { bindings::mutex_lock(&raw mut (*dev).mutex) };
        // SAFETY: `dev` is valid, and its name lives as long as the device.
        let name = unsafe { copy_c_string(bindings::dev_name(dev)) };
        // SAFETY: `dev` is valid, and its lock is held: the driver it points to stays bound (and
        // so its module loaded, and its name valid) until the lock is released.
        let driver = unsafe {
            let drv = (*dev).driver;
            if drv.is_null() {
                Ok(None)
            } else {
                copy_c_string((*drv).name).map(Some)
            }
        };
        // SAFETY: The lock was taken above by this function.
        unsafe { bindings::mutex_unlock(&raw mut (*dev).mutex) };
        let pushed = match (name, driver) {
            (Ok(device), Ok(driver)) => found
                .push(Holder { device, driver }, GFP_KERNEL)
                .map_err(Error::from),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        if let Err(e) = pushed {
            // SAFETY: `pdev` holds the reference `pci_get_device()` took; the loop ends here, so
            // nothing else drops it.
            unsafe { bindings::pci_dev_put(pdev) };
            return Err(e);
        }
    }
}

impl Device<device::Bound> {
    /// Has the driver core unbind the device's driver and probe for a driver again
    /// (`device_reprobe()`), from a work item of its own: for a driver that finds its device in
    /// a state only starting over cures (it stopped answering, or reported a fatal error).
    ///
    /// Returns at once. The work holds a reference to the device, not to the driver: the
    /// driver's unbind and probe run in it under the device lock, as for a sysfs unbind and
    /// bind, and the work's own code is the kernel's, so the driver's module may go meanwhile
    /// (its unbind then runs from the module's removal instead). A driver may call this from
    /// any of its own work items, but not from one its unbind waits for: that unbind runs in
    /// the new work.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::{
    ///     device::Bound,
    ///     pci,
    ///     prelude::*, //
    /// };
    ///
    /// // The device reads all-ones: it is gone; unbind and let the probe say what it finds.
    /// fn start_over(pdev: &pci::Device<Bound>) {
    ///     if let Err(e) = pdev.reprobe_later() {
    ///         dev_err!(pdev, "cannot queue the reprobe: {:?}\n", e);
    ///     }
    /// }
    /// ```
    pub fn reprobe_later(&self) -> Result {
        let dev: ARef<Device> = self.into();
        workqueue::system_long().try_spawn(GFP_KERNEL, move || {
            let raw: &device::Device = dev.as_ref();
            // SAFETY: `raw` is a valid device, held by the reference this work owns; the work
            // runs in process context and holds no device lock, as `device_reprobe()` needs.
            let ret = unsafe { bindings::device_reprobe(raw.as_raw()) };
            if ret != 0 {
                dev_err!(raw, "reprobe failed: {}\n", ret);
            }
        })?;
        Ok(())
    }
}
