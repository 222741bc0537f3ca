// SPDX-License-Identifier: GPL-2.0

//! Registration of an RDMA device with the core.
//!
//! # Examples
//!
//! ```
//! use kernel::{
//!     prelude::*,
//!     rdma::{
//!         self,
//!         Registration, //
//!     },
//! };
//!
//! // The data a PCI driver keeps while its device is bound: dropping it unregisters the RDMA
//! // device.
//! struct MyBoundData<'a, T: rdma::Driver> {
//!     ib: Registration<'a, T>,
//! }
//!
//! impl<T: rdma::Driver> MyBoundData<'_, T> {
//!     fn ib_name(&self) -> &CStr {
//!         self.ib.device().name()
//!     }
//! }
//! ```

use super::{
    device::{
        Device,
        UnregisteredDevice, //
    },
    driver::Driver,
    netdev::NetdevEvents,
};
use crate::{
    bindings,
    device,
    error::to_result,
    prelude::*, //
};
use core::{
    marker::PhantomData,
    ptr::NonNull, //
};
use pin_init::PinInit;

/// A registered device. Dropping it unregisters the device (closing every user context),
/// frees it and then drops the registration's data.
///
/// # Examples
///
/// ```
/// use kernel::{
///     device::{
///         Bound,
///         Device, //
///     },
///     prelude::*,
///     rdma::{
///         self,
///         Registration,
///         UnregisteredDevice, //
///     },
/// };
///
/// fn register<'a, T: rdma::Driver>(
///     parent: &'a Device<Bound>,
///     data: T::Data<'a>,
/// ) -> Result<Registration<'a, T>> {
///     let dev = UnregisteredDevice::<T>::new(parent)?;
///     // SAFETY: The caller keeps the registration in its bound data, dropped at unbind.
///     unsafe { Registration::new(dev, c"mydev_%d", parent, Ok::<_, Error>(data)) }
/// }
/// ```
///
/// # Invariants
///
/// `dev` is a registered device allocated for `T` whose initial reference this owns; its
/// registration data points to `data`.
pub struct Registration<'a, T: Driver> {
    netdev: Option<NetdevEvents<T>>,
    dev: NonNull<Device<T>>,
    _data: Pin<KBox<T::Data<'a>>>,
    _p: PhantomData<&'a ()>,
}

// SAFETY: The device is `Send`, and so is `Data` by the trait bound.
unsafe impl<T: Driver> Send for Registration<'_, T> {}

// SAFETY: Shared access only reads the device pointer.
unsafe impl<T: Driver> Sync for Registration<'_, T> {}

impl<'a, T: Driver> Registration<'a, T> {
    /// Registers `dev` as `name` (a pattern such as `c"mydev_%d"`), with `data` available to
    /// its callbacks, DMA going through `dma_device`; then, if `T` implements
    /// [`Driver::netdev_event`], forwards it the network-device events.
    ///
    /// # Safety
    ///
    /// The registration must be dropped (not leaked) before `'a` ends: its callbacks use the
    /// data, which may borrow from the bound parent device.
    pub unsafe fn new(
        dev: UnregisteredDevice<T>,
        name: &CStr,
        dma_device: &'a device::Device<device::Bound>,
        data: impl PinInit<T::Data<'a>, Error>,
    ) -> Result<Self> {
        let data = KBox::pin_init(data, GFP_KERNEL)?;
        let ptr: NonNull<T::Data<'static>> = NonNull::from(&*data).cast();
        // SAFETY: Not registered yet: no callback runs. The data is pinned and outlives the
        // registration, which clears the pointer after unregistering.
        unsafe { dev.device().set_data(Some(ptr)) };

        let raw = dev.device().as_raw();
        // SAFETY: The device is allocated with `T`'s operations; `name` and `dma_device` are
        // valid (the core copies the name).
        let ret =
            unsafe { bindings::ib_register_device(raw, name.as_ptr().cast(), dma_device.as_raw()) };
        if let Err(e) = to_result(ret) {
            // SAFETY: Registration failed: no callback runs any more.
            unsafe { dev.device().set_data(None) };
            return Err(e);
        }

        // INVARIANT: Registered, with its data pointing to `data`.
        let mut this = Self {
            netdev: None,
            dev: dev.into_raw(),
            _data: data,
            _p: PhantomData,
        };
        if T::HAS_NETDEV_EVENT {
            this.netdev = Some(NetdevEvents::new(this.device())?);
        }
        Ok(this)
    }

    /// The registered device.
    pub fn device(&self) -> &Device<T> {
        // SAFETY: The registration keeps the device allocated (type invariant).
        unsafe { self.dev.as_ref() }
    }
}

impl<T: Driver> Drop for Registration<'_, T> {
    fn drop(&mut self) {
        // No network-device event is forwarded once this returns.
        self.netdev = None;
        let raw = self.device().as_raw();
        // SAFETY: The device is registered (type invariant). Unregistration closes every user
        // context and waits for running callbacks.
        unsafe { bindings::ib_unregister_device(raw) };
        // SAFETY: Unregistered: no callback runs any more.
        unsafe { self.device().set_data(None) };
        // SAFETY: The device was allocated by `_ib_alloc_device` and is no longer registered;
        // this drops the initial reference the registration owns. `data` is dropped after.
        unsafe { bindings::ib_dealloc_device(raw) };
    }
}
