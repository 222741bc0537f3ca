// SPDX-License-Identifier: GPL-2.0

//! IRQ registrations that own their name and may carry an affinity hint.
//!
//! [`Registration`] takes a `&'static CStr` name, because `request_irq()` keeps the pointer for as
//! long as the handler is registered. Drivers with several devices name their interrupts per
//! device (`"foo-ceq3@pci:0000:00:04.0"`), so the name must be allocated and outlive the
//! registration: [`NamedRegistration`] owns it.
//!
//! C header: [`include/linux/interrupt.h`](srctree/include/linux/interrupt.h)

use super::{
    Flags,
    Handler,
    IrqRequest,
    Registration, //
};
use crate::{
    bindings,
    cpu::CpuId,
    cpumask::CpumaskVar,
    prelude::*,
    str::CString, //
};

/// An IRQ handler registration that owns its name and, optionally, an affinity hint.
///
/// The hint is published with `irq_set_affinity_and_hint()` once the handler is registered, and
/// withdrawn before the handler is freed (`free_irq()` warns about a hint left behind).
///
/// # Examples
///
/// ```
/// use kernel::{
///     cpu,
///     irq::{
///         self,
///         IrqReturn,
///         NamedRegistration, //
///     },
///     pci,
///     prelude::*,
///     str::CString, //
/// };
///
/// struct QueueIrq;
///
/// impl irq::Handler for QueueIrq {
///     fn handle(&self) -> IrqReturn {
///         IrqReturn::Handled
///     }
/// }
///
/// // Registers the handler of queue `queue` as "mydev-q<queue>", handled on a CPU of its own.
/// fn request_queue_irq<'a>(
///     vectors: &pci::BoundIrqVectors<'a>,
///     queue: u32,
/// ) -> Result<Pin<KBox<NamedRegistration<'a, QueueIrq>>>> {
///     let name = CString::try_from_fmt(fmt!("mydev-q{queue}"))?;
///     // SAFETY: The registration is boxed and kept in the driver's bound data, dropped at
///     // unbind; it is never forgotten.
///     let init = unsafe {
///         NamedRegistration::new(
///             vectors.request(queue)?,
///             irq::Flags::SHARED,
///             name,
///             Some(cpu::local_spread(queue)),
///             Ok::<_, Error>(QueueIrq),
///         )
///     };
///     KBox::try_pin_init(init, GFP_KERNEL)
/// }
/// ```
///
/// # Invariants
///
/// - `registration` was requested with a pointer to `name`'s buffer, which is not freed or
///   changed before `registration` is dropped (fields drop in declaration order).
/// - If `hint` is `Some`, the IRQ's affinity hint points to it; it stays pinned until
///   the registration's drop (`PinnedDrop::drop`) withdraws the hint.
#[pin_data(PinnedDrop)]
pub struct NamedRegistration<'a, T: Handler> {
    #[pin]
    registration: Registration<'a, T>,
    name: CString,
    hint: Option<Hint>,
    irq: u32,
}

/// The affinity mask of one registration's hint, owned by it alone.
struct Hint(CpumaskVar);

// SAFETY: A `Hint` owns its mask: inline, or (with `CONFIG_CPUMASK_OFFSTACK`) an allocation
// nothing else points to but the IRQ core's hint, which only reads it. Nothing writes the mask
// after it is made, so moving a `Hint` to another thread moves an owned value. (`CpumaskVar`
// itself is not `Send` with `CONFIG_CPUMASK_OFFSTACK`, which Debian's kernels set.)
unsafe impl Send for Hint {}

// SAFETY: Nothing writes the mask after it is made (see `Send` above): shared references only
// read it.
unsafe impl Sync for Hint {}

impl<'a, T: Handler + 'a> NamedRegistration<'a, T> {
    /// Registers `handler` for `request` under `name`, and hints that the IRQ should be handled
    /// on `cpu` if one is given.
    ///
    /// A failure to publish the hint is not an error: the hint is advisory.
    ///
    /// # Safety
    ///
    /// As for [`Registration::new`]: callers must not `mem::forget()` the returned registration
    /// or otherwise prevent its destructor from running.
    pub unsafe fn new(
        request: IrqRequest<'a>,
        flags: Flags,
        name: CString,
        cpu: Option<CpuId>,
        handler: impl PinInit<T, Error> + 'a,
    ) -> impl PinInit<Self, Error> + 'a {
        let irq = request.irq();
        // The name lives in its own allocation, so moving the `CString` into `Self` does not
        // move the bytes `request_irq()` keeps a pointer to.
        let name_ptr: *const CStr = &*name;
        let hint = cpu.map(|cpu| -> Result<Hint> {
            let mut mask = CpumaskVar::new_zero(GFP_KERNEL)?;
            mask.set(cpu);
            Ok(Hint(mask))
        });

        try_pin_init!(Self {
            // SAFETY: `name_ptr` points to the buffer of `name`, which is stored in `Self` and
            // dropped after `registration` (see the type invariants), so it outlives the
            // registration; the caller promises not to forget `Self`.
            registration <- unsafe { Registration::new(request, flags, &*name_ptr, handler) },
            name,
            hint: hint.transpose()?,
            irq,
            _: {
                // Initialised fields are in scope here, in their final (pinned) place.
                if let Some(mask) = hint {
                    // SAFETY: `irq` is registered (above), and `mask` is a valid cpumask that
                    // stays pinned inside `Self` until `drop` withdraws the hint.
                    let _ = unsafe {
                        bindings::__irq_apply_affinity_hint(*irq, mask.0.as_raw(), true)
                    };
                }
            },
        })
    }

    /// Returns the IRQ number.
    pub fn irq(&self) -> u32 {
        self.irq
    }

    /// Returns the handler.
    pub fn handler(&self) -> &T {
        self.registration.handler()
    }

    /// Waits for running handlers of this IRQ on other CPUs to finish.
    pub fn synchronize(&self) {
        self.registration.synchronize()
    }
}

#[pinned_drop]
impl<T: Handler> PinnedDrop for NamedRegistration<'_, T> {
    fn drop(self: Pin<&mut Self>) {
        if self.hint.is_some() {
            // SAFETY: `self.irq` is still registered (the registration drops after this);
            // clearing the hint takes no pointer.
            unsafe { bindings::__irq_apply_affinity_hint(self.irq, core::ptr::null(), false) };
        }
    }
}
