// SPDX-License-Identifier: GPL-2.0

//! Shared pieces of the fuzz targets: devices set up by the model's driver double
//! ([`TestDriver`]) on a manual clock, and helpers that, unlike the double's own, never panic
//! whatever the device does (a panic here would be a false alarm: only the model's panics count).
//!
//! Inputs are sequences of operations built with `arbitrary`; numbers the model checks against
//! its state (addresses, keys, QPNs, sequence numbers) are mostly chosen from the ones the set-up
//! made ([`Val`], [`Addr`]), so that the fuzzer gets past the first check and deep into the
//! engines, with raw values for the rest.

use std::sync::Arc;
use std::time::Duration;

use arbitrary::Arbitrary;
use erdma_model::cmdq::{Cqe, Header, OpCode};
use erdma_model::testing::{layout, TestDriver};
use erdma_model::{DeviceConfig, GuestMemory, ManualClock};

/// A driver double on a manual clock (nothing in a target depends on the host's time).
pub fn driver(config: DeviceConfig) -> (TestDriver, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    let d = TestDriver::with(config, clock.clone(), 512, 128, 4096);
    (d, clock)
}

/// A guest address in the test memory, 16-byte granular: the whole 1 MiB is reachable.
pub fn mem_addr(x: u16) -> u64 {
    layout::MEM_BASE + ((u64::from(x) << 4) % layout::MEM_SIZE as u64)
}

/// A 64-bit number: mostly one the device can make sense of.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Addr {
    /// Somewhere in the test memory ([`mem_addr`]).
    Mem(u16),
    /// `base + offset` for a base the target knows (a buffer, an MTT area).
    Near(u8, u16),
    /// Anything.
    Raw(u64),
}

impl Addr {
    /// The address, `bases` being the target's interesting places.
    pub fn get(self, bases: &[u64]) -> u64 {
        match self {
            Addr::Mem(x) => mem_addr(x),
            Addr::Near(i, off) => pick(bases, i).wrapping_add(u64::from(off)),
            Addr::Raw(v) => v,
        }
    }
}

/// A value patched into a command or a WQE.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Val {
    /// A u8.
    U8(u8),
    /// A u16 (LE).
    U16(u16),
    /// A u32 (LE).
    U32(u32),
    /// A u64 (LE).
    U64(u64),
    /// An address (u64 LE).
    Addr(Addr),
    /// One of the target's known 32-bit values (QPNs, CQNs, keys, ...), as a u32 LE.
    Known(u8),
}

/// `vals[i % len]`, or 0 for an empty list.
pub fn pick<T: Copy + Default>(vals: &[T], i: u8) -> T {
    if vals.is_empty() {
        T::default()
    } else {
        vals[usize::from(i) % vals.len()]
    }
}

/// A patch: [`Val`] written at byte `at` of a buffer (cut at its end).
#[derive(Arbitrary, Clone, Copy, Debug)]
pub struct Patch {
    /// Byte offset.
    pub at: u8,
    /// What goes there.
    pub val: Val,
}

/// What patches resolve against.
#[derive(Clone, Debug, Default)]
pub struct Known {
    /// Interesting addresses.
    pub bases: Vec<u64>,
    /// Interesting 32-bit values.
    pub words: Vec<u32>,
}

impl Patch {
    /// Applies the patch to `buf`.
    pub fn apply(&self, buf: &mut [u8], known: &Known) {
        let bytes: Vec<u8> = match self.val {
            Val::U8(v) => vec![v],
            Val::U16(v) => v.to_le_bytes().to_vec(),
            Val::U32(v) => v.to_le_bytes().to_vec(),
            Val::U64(v) => v.to_le_bytes().to_vec(),
            Val::Addr(a) => a.get(&known.bases).to_le_bytes().to_vec(),
            Val::Known(i) => pick(&known.words, i).to_le_bytes().to_vec(),
        };
        put(buf, usize::from(self.at), &bytes);
    }
}

/// Writes `data` at `at` of `buf`, cut at its end.
pub fn put(buf: &mut [u8], at: usize, data: &[u8]) {
    if at >= buf.len() {
        return;
    }
    let n = data.len().min(buf.len() - at);
    buf[at..at + n].copy_from_slice(&data[..n]);
}

/// Applies `patches` to `buf`.
pub fn patch(buf: &mut [u8], patches: &[Patch], known: &Known) {
    for p in patches {
        p.apply(buf, known);
    }
}

/// Writes guest memory, ignoring what is not in it.
pub fn poke(d: &mut TestDriver, addr: u64, data: &[u8]) {
    let _ = d.mem.write(addr, data);
}

/// Reads guest memory (zeros for what is not in it).
pub fn peek(d: &TestDriver, addr: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0; len];
    let _ = d.mem.read(addr, &mut b);
    b
}

/// A command as the fuzzer sees it: the code, the WQEBB count, the body (bytes 8.. of the
/// command; the header is built), patches, and what may go wrong with the header.
#[derive(Arbitrary, Clone, Debug)]
pub struct RawCmd {
    /// Sub-module (2 bits used by the device).
    pub sub: u8,
    /// Opcode.
    pub op: u8,
    /// WQEBB count field (1..=8 in the header; the model takes 1..=4).
    pub wqebbs: u8,
    /// Added to the header's index (0: correct).
    pub index_delta: i8,
    /// The body bytes (from offset 8).
    pub body: Vec<u8>,
    /// Patches over the whole command (offset 0 is the header).
    pub patches: Vec<Patch>,
}

impl RawCmd {
    /// Writes the command at the driver's producer index and advances it (does not ring).
    pub fn queue(&self, d: &mut TestDriver, known: &Known) -> u16 {
        let wqebbs = u16::from(self.wqebbs % 8) + 1;
        let code = OpCode {
            sub: self.sub & 3,
            op: self.op,
        };
        let header = Header {
            wqebb_index: d
                .sq_pi
                .wrapping_add(wqebbs)
                .wrapping_add(self.index_delta as u16),
            code,
            cookie: 0,
            wqebbs,
        }
        .encode();
        let body = &self.body;
        let patches = &self.patches;
        d.queue_raw(header, wqebbs, |slot| {
            put(slot, 8, body);
            patch(slot, patches, known);
            // The count the ring was advanced by stays what the header said unless a patch
            // changed the header: then the device sees a malformed command, as it should.
        })
    }
}

/// Queues `fill`'s command of 4 WQEBBs with `code`, rings, and takes the completions.
/// Returns the CQE of this command if the device wrote one.
pub fn exec(d: &mut TestDriver, code: OpCode, fill: impl FnOnce(&mut [u8])) -> Option<Cqe> {
    let start = d.queue(code, fill);
    d.ring();
    drain_cmdq(d)
        .into_iter()
        .find(|c| c.start == u32::from(start))
}

/// Takes every valid CMDQ CQE (at most a ring's worth), consumes CMDQ EQEs and AEQEs, and
/// re-arms what the driver arms.
pub fn drain_cmdq(d: &mut TestDriver) -> Vec<Cqe> {
    let mut out = Vec::new();
    for _ in 0..d.sq_depth {
        match d.poll_cqe() {
            Some(c) => out.push(c),
            None => break,
        }
    }
    for _ in 0..d.eq_depth {
        if !d.poll_eqe() {
            break;
        }
    }
    for _ in 0..d.aeq_depth {
        if d.poll_aeqe().is_none() {
            break;
        }
    }
    d.arm_cq();
    d.arm_eq();
    d.arm_aeq();
    out
}

/// Moves the clock by `ms` milliseconds and runs the device's due work.
pub fn tick(d: &mut TestDriver, clock: &ManualClock, ms: u16) {
    clock.advance(Duration::from_millis(u64::from(ms)));
    d.run_due();
}

/// The bytes of an `arbitrary` vector, cut at `max`.
pub fn cut(v: &[u8], max: usize) -> &[u8] {
    &v[..v.len().min(max)]
}

/// The allocator of the fuzz targets: the system's, with limits. The targets are built without
/// a sanitizer (the model has no `unsafe`; the sanitizer would cost five times the speed), so
/// libFuzzer's `-malloc_limit_mb` has no malloc hooks to work with; this allocator does that job,
/// and more: any single allocation above [`MAX_ALLOC`] or more than [`MAX_LIVE`] bytes live at
/// once aborts the run, which libFuzzer reports as a crash with the input that did it. Guest
/// memory in the targets is 1 MiB per function, so anything near these limits is an
/// allocation out of all proportion to what the guest gave the model.
pub mod alloc {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::io::Write;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Largest single allocation.
    pub const MAX_ALLOC: usize = 256 << 20;
    /// Most bytes live at once.
    pub const MAX_LIVE: usize = 1 << 30;

    static LIVE: AtomicUsize = AtomicUsize::new(0);

    /// The limited allocator.
    pub struct Limited;

    fn too_much(what: &str, size: usize) -> ! {
        // No allocation here: stderr is unbuffered and the message is written in pieces.
        let mut e = std::io::stderr();
        let _ = e.write_all(b"==erdma-fuzz== allocation limit: ");
        let _ = e.write_all(what.as_bytes());
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        let mut n = size;
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let _ = e.write_all(&digits[i..]);
        let _ = e.write_all(b" bytes\n");
        std::process::abort()
    }

    fn account(size: usize) {
        if size > MAX_ALLOC {
            too_much("one allocation of ", size);
        }
        let live = LIVE.fetch_add(size, Ordering::Relaxed) + size;
        if live > MAX_LIVE {
            too_much("live allocations reached ", live);
        }
    }

    // SAFETY: every method forwards to `System` with the caller's layout and pointer
    // unchanged; the bookkeeping only counts bytes.
    unsafe impl GlobalAlloc for Limited {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            account(layout.size());
            // SAFETY: forwarded as is (see above).
            unsafe { System.alloc(layout) }
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            account(layout.size());
            // SAFETY: forwarded as is (see above).
            unsafe { System.alloc_zeroed(layout) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            // SAFETY: forwarded as is (see above).
            unsafe { System.dealloc(ptr, layout) }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            if new_size > layout.size() {
                account(new_size - layout.size());
                if new_size > MAX_ALLOC {
                    too_much("one allocation of ", new_size);
                }
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
            // SAFETY: forwarded as is (see above).
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }
}

#[global_allocator]
static ALLOC: alloc::Limited = alloc::Limited;
