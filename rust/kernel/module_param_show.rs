// SPDX-License-Identifier: GPL-2.0

//! Module parameters shown in sysfs, read-only.
//!
//! The [`module!`] macro gives every parameter the permissions `0444` and the `get` operation
//! `show_param`: `/sys/module/NAME/parameters/PARAM` shows the value the module was loaded with
//! (its default if none was given), formatted as the C `param_get_*()` functions format theirs:
//! integers in decimal, `bool` as `Y` or `N`. A parameter still cannot be written after the module
//! is loaded.
//!
//! C header: [`include/linux/moduleparam.h`](srctree/include/linux/moduleparam.h)
//!
//! [`module!`]: macros::module

use crate::{
    bindings,
    module_param::{ModuleParam, ModuleParamAccess},
    page::PAGE_SIZE,
    prelude::*,
    str::RawFormatter,
};
use core::fmt::{self, Write};

/// How sysfs shows a module parameter's value.
pub trait ShowParam: ModuleParam {
    /// Writes the value as sysfs shows it, without the newline that follows it.
    fn show(&self, f: &mut RawFormatter) -> fmt::Result;
}

macro_rules! impl_show_int {
    ($($ty:ty),*) => {
        $(
            impl ShowParam for $ty {
                fn show(&self, f: &mut RawFormatter) -> fmt::Result {
                    write!(f, "{self}")
                }
            }
        )*
    };
}

impl_show_int!(i8, u8, i16, u16, i32, u32, i64, u64, isize, usize);

impl ShowParam for bool {
    fn show(&self, f: &mut RawFormatter) -> fmt::Result {
        f.write_str(if *self { "Y" } else { "N" })
    }
}

/// Shows a module parameter's value in sysfs (`struct kernel_param_ops.get`).
///
/// Returns the number of bytes written to `buffer`, the newline included.
///
/// # Safety
///
/// - `buffer` must be valid for writes of `PAGE_SIZE` bytes for the duration of the call.
/// - `param` must point to a `bindings::kernel_param` initialized by the [`module!`] macro for a
///   parameter of type `T`, valid for reads for the duration of the call.
///
/// The module subsystem's C code satisfies both when it calls this for a read of the sysfs file.
///
/// [`module!`]: macros::module
pub(crate) unsafe extern "C" fn show_param<T: ShowParam>(
    buffer: *mut c_char,
    param: *const bindings::kernel_param,
) -> c_int {
    // SAFETY: By the function's safety requirements, `param` is valid for reads.
    let arg = unsafe { (*param).__bindgen_anon_1.arg };
    // SAFETY: The `module!` macro initializes `arg` with a pointer to the parameter's
    // `static ModuleParamAccess<T>`, which lives as long as the module.
    let access = unsafe { &*arg.cast::<ModuleParamAccess<T>>() };
    // SAFETY: By the function's safety requirements, `buffer` is valid for writes of `PAGE_SIZE`
    // bytes for the duration of the call, which is longer than the formatter lives.
    let mut f = unsafe { RawFormatter::from_buffer(buffer.cast(), PAGE_SIZE) };
    if access
        .value()
        .show(&mut f)
        .and_then(|()| f.write_str("\n"))
        .is_err()
    {
        return EINVAL.to_errno();
    }
    // (A formatter counts what did not fit too; a value is far shorter than a page.)
    c_int::try_from(f.bytes_written().min(PAGE_SIZE)).unwrap_or(c_int::MAX)
}
