// SPDX-License-Identifier: GPL-2.0

//! The spike of issue 32: a Rust module built out of tree against Debian's
//! own kernel (its configuration, its `Module.symvers`, the kernel crate
//! built again from the same source by the same rustc) must load into that
//! kernel. It takes from `vmlinux` what a driver does: the kernel crate's
//! printing (a Rust symbol of `vmlinux`), its allocator (`krealloc`), a
//! mutex, and `core`'s formatting.

use kernel::prelude::*;
use kernel::{new_mutex, sync::Mutex};

module! {
    type: AbiProbe,
    name: "erdma_rs_abi_probe",
    authors: ["erdma-rs developers"],
    description: "issue 32 spike: a Rust module on Debian's own kernel",
    license: "GPL",
}

#[pin_data(PinnedDrop)]
struct AbiProbe {
    #[pin]
    numbers: Mutex<KVec<u64>>,
}

impl kernel::InPlaceModule for AbiProbe {
    fn init(_module: &'static ThisModule) -> impl PinInit<Self, Error> {
        let mut v = KVec::new();
        let mut total = 0u64;
        for i in 1..=16u64 {
            if v.push(i * i, GFP_KERNEL).is_err() {
                pr_err!("erdma_rs_abi_probe: no memory\n");
                break;
            }
            total += i * i;
        }
        pr_info!("erdma_rs_abi_probe: loaded; {} squares, sum {}\n", v.len(), total);
        try_pin_init!(Self {
            numbers <- new_mutex!(v),
        })
    }
}

#[pinned_drop]
impl PinnedDrop for AbiProbe {
    fn drop(self: Pin<&mut Self>) {
        let n = self.numbers.lock().len();
        pr_info!("erdma_rs_abi_probe: unloaded ({n} numbers)\n");
    }
}
