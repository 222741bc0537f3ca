// SPDX-License-Identifier: GPL-2.0

//! PCI device resources: the types of BARs a device decodes, and the device's enable count.
//!
//! C header: [`include/linux/pci.h`](srctree/include/linux/pci.h)

use super::Device;
use crate::{
    bindings,
    device, //
};

/// The address space decoded by a PCI BAR.
///
/// # Examples
///
/// ```
/// use kernel::{
///     device::Core,
///     pci,
///     prelude::*, //
/// };
///
/// // Accepts only devices that decode two 64-bit memory BARs, at BAR0 and BAR2.
/// fn check_bars(pdev: &pci::Device<Core<'_>>) -> Result {
///     if pdev.select_bars(pci::BarType::Memory) != 0b101 {
///         return Err(ENODEV);
///     }
///     if pdev.select_bars(pci::BarType::Io) != 0 {
///         return Err(ENODEV);
///     }
///     Ok(())
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarType {
    /// I/O port space (`IORESOURCE_IO`).
    Io,
    /// Memory space (`IORESOURCE_MEM`).
    Memory,
}

impl BarType {
    fn resource_flags(self) -> crate::ffi::c_ulong {
        let flags = match self {
            Self::Io => bindings::IORESOURCE_IO,
            Self::Memory => bindings::IORESOURCE_MEM,
        };

        // CAST: the `IORESOURCE_*` type flags fit in 32 bits, and `c_ulong` is at least as wide.
        flags as crate::ffi::c_ulong
    }
}

impl<Ctx: device::DeviceContext> Device<Ctx> {
    /// Returns the BARs of type `ty` as a bitmask in which bit `n` stands for BAR `n`.
    ///
    /// A 64-bit BAR occupies two BAR registers; only the lower one is reported, so a device with
    /// two 64-bit memory BARs at BAR0 and BAR2 yields `0b101`. This is `pci_select_bars()`.
    pub fn select_bars(&self, ty: BarType) -> u32 {
        // SAFETY: By the type invariant of `Device`, `self.as_raw()` is a valid pointer to a
        // `struct pci_dev`; `pci_select_bars()` only reads its resource flags.
        let bars = unsafe { bindings::pci_select_bars(self.as_raw(), ty.resource_flags()) };

        // CAST: `pci_select_bars()` returns a bitmask of at most `PCI_NUM_RESOURCES` bits, so the
        // value is never negative.
        bars as u32
    }
}

impl Device<device::Core<'_>> {
    /// Disables the device: drops one reference on its enable count, and when that reaches zero,
    /// turns off bus mastering and lets the platform release the device.
    ///
    /// Balances a successful [`Device::enable_device_mem`]; a driver calls it from its `unbind`
    /// callback once the device is quiesced. This is `pci_disable_device()`.
    pub fn disable_device(&self) {
        // SAFETY: By the type invariant of `Device`, `self.as_raw()` is a valid pointer to a
        // `struct pci_dev`, and the `Core` context guarantees that the device lock is held.
        unsafe { bindings::pci_disable_device(self.as_raw()) };
    }
}
