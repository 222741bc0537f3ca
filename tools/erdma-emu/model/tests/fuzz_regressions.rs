// SPDX-License-Identifier: GPL-2.0

//! Regressions found by the fuzz targets (`fuzz/`, `make fuzz`): each test replays what an
//! input did, in terms of the model's API, and checks that the model now copes.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use erdma_model::testing::dp::{self, Wqe};
use erdma_model::testing::TestDriver;
use erdma_model::wire::{wc, Sge};
use erdma_model::DeviceConfig;

/// The largest single allocation so far (the tests of this file run one at a time through
/// [`LOCK`]).
static LARGEST: AtomicUsize = AtomicUsize::new(0);
static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

struct Measuring;

// SAFETY: forwards to `System` unchanged; only records sizes.
unsafe impl GlobalAlloc for Measuring {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded as is.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: forwarded as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Measuring = Measuring;

/// A 1 GiB SEND gathered through the local DMA lkey from a guest of 1 MiB (the `datapath`
/// target's message sizes at the limit): the model allocated and zeroed the whole GiB before
/// the read failed (`read_pieces`), so every such WQE of any guest cost it 1 GiB. The payload
/// is now buffered only as far as guest memory backs it, and the WQE still fails with
/// SEND_BOUNDS.
#[test]
fn a_gather_beyond_guest_memory_allocates_nothing_big() {
    let _one = LOCK.lock();
    let mut d = TestDriver::new(DeviceConfig::default());
    let f = dp::fabric();
    d.attach(&f);
    d.dp_setup(1);
    assert_eq!(d.create_cq(1, 6).status, 0);
    assert_eq!(d.create_qp(10, 1, 6, 6).status, 0);
    assert_eq!(d.create_qp(11, 1, 6, 6).status, 0);
    d.connect(10, 1, 11);
    d.connect(11, 1, 10);
    let buf = d.alloc(0x1000, 0x1000);
    LARGEST.store(0, Ordering::Relaxed);
    let sge = Sge {
        addr: buf,
        len: 1 << 30,
        key: 0xf000_0000,
    };
    d.send_wqe(10, &Wqe::send(&[sge]));
    dp::pump(&mut [&mut d]);
    let cqes = d.poll_all(1);
    assert_eq!(cqes.len(), 1);
    assert_eq!(cqes[0].status, wc::SEND_BOUNDS);
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(largest < 64 << 20, "largest allocation {largest} bytes");
}
