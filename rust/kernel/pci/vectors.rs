// SPDX-License-Identifier: GPL-2.0

//! MSI-X vectors allocated for as long as a PCI device is bound.
//!
//! [`IrqVectorRegistration`](super::IrqVectorRegistration) frees its vectors when dropped, and
//! each IRQ request borrows it, so a driver cannot keep both in its bound data without a
//! self-referential structure. [`Device::alloc_msix_vectors_bound`] instead hands the vectors to
//! devres, which frees them when the device is unbound, after the driver's data (and with it every
//! IRQ registration) has been dropped; the returned [`BoundIrqVectors`] hands out IRQ requests
//! valid for the whole binding.
//!
//! C header: [`include/linux/pci.h`](srctree/include/linux/pci.h)

use super::Device;
use crate::{
    bindings,
    device::{
        self,
        Bound, //
    },
    devres,
    irq::IrqRequest,
    prelude::*,
    sync::aref::ARef, //
};

/// MSI-X vectors of a bound device, freed by devres when the device is unbound.
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
/// // Allocates one vector for the device and one per queue, up to eight queues, and returns the
/// // IRQ number of each.
/// fn queue_irqs(pdev: &pci::Device<Bound>) -> Result<KVec<u32>> {
///     let vectors = pdev.alloc_msix_vectors_bound(2, 9)?;
///     let mut irqs = KVec::new();
///     for index in 0..vectors.len() {
///         irqs.push(vectors.request(index)?.irq(), GFP_KERNEL)?;
///     }
///     Ok(irqs)
/// }
/// ```
///
/// # Invariants
///
/// `dev` has `len` MSI-X vectors allocated, which stay allocated while `dev` is bound.
#[derive(Clone, Copy)]
pub struct BoundIrqVectors<'a> {
    dev: &'a Device<Bound>,
    len: u32,
}

impl<'a> BoundIrqVectors<'a> {
    /// Returns the number of vectors.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Returns `true` if there are no vectors (never: allocation requires at least one).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Returns the request for the IRQ of vector `index`, valid while the device is bound.
    pub fn request(&self, index: u32) -> Result<IrqRequest<'a>> {
        if index >= self.len {
            return Err(EINVAL);
        }

        // SAFETY: `self.dev.as_raw()` is a valid `struct pci_dev`, and `index` is below the number
        // of allocated vectors.
        let irq = unsafe { bindings::pci_irq_vector(self.dev.as_raw(), index) };
        let irq = u32::try_from(irq).map_err(|_| Error::from_errno(irq))?;

        // SAFETY: `irq` is the IRQ of one of `dev`'s vectors, which stay allocated while `dev` is
        // bound (type invariant); the request's lifetime is that of the bound device reference.
        Ok(unsafe { IrqRequest::new(self.dev.as_ref(), irq) })
    }
}

/// Frees a device's IRQ vectors when dropped (by devres, at unbind).
struct FreeIrqVectors(ARef<Device>);

impl Drop for FreeIrqVectors {
    fn drop(&mut self) {
        // SAFETY: `self.0` is a valid `struct pci_dev` with vectors allocated by
        // `alloc_msix_vectors_bound()`; every IRQ registration using them belonged to the driver's
        // bound data, which is dropped before devres releases this.
        unsafe { bindings::pci_free_irq_vectors(self.0.as_raw()) };
    }
}

impl Device<device::Bound> {
    /// Allocates between `min` and `max` MSI-X vectors until the device is unbound.
    ///
    /// Fails with the error of `pci_alloc_irq_vectors()` if fewer than `min` vectors can be had,
    /// e.g. if the device has no MSI-X capability or vectors are already allocated.
    pub fn alloc_msix_vectors_bound(&self, min: u32, max: u32) -> Result<BoundIrqVectors<'_>> {
        // SAFETY: `self.as_raw()` is a valid `struct pci_dev`; the function checks its arguments.
        let ret = unsafe {
            bindings::pci_alloc_irq_vectors(self.as_raw(), min, max, bindings::PCI_IRQ_MSIX)
        };
        let len = u32::try_from(ret).map_err(|_| Error::from_errno(ret))?;

        // On failure, the guard is dropped and frees the vectors again.
        devres::register(self.as_ref(), FreeIrqVectors(self.into()), GFP_KERNEL)?;

        // INVARIANT: `len` vectors are allocated, and freed by devres only at unbind.
        Ok(BoundIrqVectors { dev: self, len })
    }
}
