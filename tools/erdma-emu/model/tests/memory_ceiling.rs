// SPDX-License-Identifier: GPL-2.0

//! The model's memory per adapter stays under its documented ceiling
//! (`erdma_model::device::MEMORY_CEILING`, README "Limits") in the worst case a guest user can
//! build: two adapters on one fabric, QPs on both whose SQs are at their deepest (2^15 WQEBBs)
//! and full of the largest messages (1 GiB): RDMA WRITEs into the peer, RDMA READs from it and
//! SENDs to QPs that never post a receive, from both ends at once, on RoCEv2 and then on iWARP
//! (whose streams keep what they sent until acknowledged). The engines run for a while; a counting allocator measures the peak of what the model allocated beyond the test's
//! own guest memory (allocated before the measurement starts), and the process's VmHWM is read
//! from /proc/self/status.
//!
//! One test in its own binary: the allocator counts the whole process, and the two protocols
//! run one after the other in it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use erdma_model::device::{MAX_HELD_BYTES, MEMORY_CEILING, PORT_WINDOW, RETRY_TIMEOUT};
use erdma_model::fabric::Fabric;
use erdma_model::testing::dp::EQN;
use erdma_model::testing::dp::{Wqe, ALL_ACCESS, PDN};
use erdma_model::testing::{layout, TestDriver, VecMemory};
use erdma_model::wire::{self, IwarpConnection, RegMr, Sge, QP_TYPE_RC};
use erdma_model::{DeviceConfig, Io, ManualClock, ProcessMemory, Protocol};

/// Counts the bytes allocated now and at the peak.
struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(n: usize) {
    let now = CURRENT.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call goes to the system allocator with the caller's layout; the counters are
// only bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is the system allocator's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator (the system's) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc` and `alloc`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// `(VmRSS, VmHWM)` of this process in bytes.
#[derive(Debug)]
struct ProcStatus;

impl ProcessMemory for ProcStatus {
    fn resident(&self) -> Option<(u64, u64)> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        erdma_model::proc_status_memory(&status)
    }
}

/// QPs per adapter: a third WRITE, a third READ, a third SEND. More than the port's window
/// holds at one QP window each, so the port's window is the bound that bites.
const QPS: u32 = 24;
/// log2 of the deepest SQ (WQEBBs).
const SQ_LOG2: u32 = 15;
/// The largest message.
const MSG: u32 = 1 << 30;
/// Where the SQs live (real memory, past the layout's megabyte).
const SQS: u64 = layout::MEM_BASE + layout::MEM_SIZE as u64;
/// Guest memory with no backing: message data is read from and written to here.
const VOID: u64 = 0x100_0000_0000;
const VOID_LEN: u64 = 16 << 30;

/// An adapter on `fabric` (host `host`, 10.0.0.`host`) speaking `protocol`, with CQ 1, a DMA
/// MR (STag 1 << 8) and [`QPS`] RC QPs (QPN 10..), every SQ at its deepest; returns it with its
/// QPs' cookies (iWARP).
fn adapter(
    fabric: &Arc<Fabric>,
    clock: &Arc<ManualClock>,
    protocol: Protocol,
    host: u8,
) -> (TestDriver, Vec<u32>) {
    let config = DeviceConfig {
        protocol,
        ..Default::default()
    };
    let mut d = TestDriver::with(config, clock.clone(), 512, 128, 4096);
    let sq_bytes = (1u64 << SQ_LOG2) * 32;
    d.mem = VecMemory::new(
        layout::MEM_BASE,
        layout::MEM_SIZE + (sq_bytes * u64::from(QPS)) as usize,
    );
    d.mem.set_void(VOID, VOID_LEN);
    d.attach(fabric);
    d.dev.set_process_memory(Arc::new(ProcStatus));
    if protocol == Protocol::Iwarp {
        assert!(d.init());
        assert_eq!(d.create_ceq(EQN, 1, 8).status, 0);
    } else {
        d.dp_setup(host);
    }
    assert_eq!(d.create_cq(1, 12).status, 0);
    let dma = RegMr {
        valid: false,
        version: 1,
        key: 0,
        index: 1,
        pdn: PDN,
        mr_type: 2,
        access: ALL_ACCESS,
        va: 0,
        len: 0,
        page_shift: 12,
        mtt_page_code: 0,
        level: 0,
        count: 0,
        entries: [0; 4],
    };
    assert_eq!(d.reg_mr_raw(&dma).status, 0);
    let mut cookies = Vec::new();
    for i in 0..QPS {
        let qpn = 10 + i;
        let rq = d.alloc(16 * 32, 0x1000);
        let sq = SQS + u64::from(i) * sq_bytes;
        let made = d.create_qp_on(qpn, 1, [(sq, SQ_LOG2), (rq, 4)], QP_TYPE_RC, PDN);
        assert_eq!(made.status, 0);
        cookies.push(made.resp0 as u32);
    }
    (d, cookies)
}

/// Connects the QPs of `d` (host `host`) to the same QPNs of host `peer` (whose QPs' cookies
/// are `peer_cookies`) and fills every SQ: a third WRITEs, a third READs, a third SENDs.
fn connect_and_fill(
    d: &mut TestDriver,
    protocol: Protocol,
    host: u8,
    peer: u8,
    peer_cookies: &[u32],
) {
    let key = wire::stag(1, 0);
    let data = Sge {
        addr: VOID,
        len: MSG,
        key,
    };
    for i in 0..QPS {
        let qpn = 10 + i;
        if protocol == Protocol::Iwarp {
            // The 4-tuple both ends agree on (the connection manager's, in a guest).
            let port = |h: u8| 20000 + u16::from(h) * 100 + i as u16;
            let conn = IwarpConnection {
                cookie: peer_cookies[i as usize],
                dst_ip: [10, 0, 0, peer],
                src_ip: [10, 0, 0, host],
                src_port: port(host),
                dst_port: port(peer),
                snd_nxt: 7,
                rcv_nxt: 7,
            };
            assert_eq!(d.iwarp_rts(qpn, &conn).status, 0);
        } else {
            d.connect(qpn, peer, qpn);
        }
        let wqe = match i % 3 {
            0 => Wqe::write(key, VOID, &[data]),
            1 => Wqe::read(key, VOID, MSG, key, VOID),
            _ => Wqe::send(&[data]),
        };
        let n = (1u64 << SQ_LOG2) / u64::from(wqe.wqebbs());
        for _ in 0..n {
            d.post_wqe(qpn, &wqe);
        }
    }
}

fn run(d: &mut TestDriver) -> usize {
    let mut io = Io::new(&mut d.mem, &mut d.irq);
    d.dev.run_fabric(&mut io)
}

fn query(d: &mut TestDriver, what: &str) -> String {
    d.control(&format!("query {what}")).expect("a query")
}

fn field(reply: &str, name: &str) -> u64 {
    reply
        .split(' ')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} in {reply:?}"))
}

#[test]
fn the_worst_case_a_guest_can_build_stays_under_the_ceiling() {
    for protocol in [Protocol::RoceV2, Protocol::Iwarp] {
        worst_case(protocol);
    }
}

fn worst_case(protocol: Protocol) {
    let fabric = Fabric::new();
    let clock = Arc::new(ManualClock::new());
    let (mut a, cookies_a) = adapter(&fabric, &clock, protocol, 1);
    let (mut b, cookies_b) = adapter(&fabric, &clock, protocol, 2);
    connect_and_fill(&mut a, protocol, 1, 2, &cookies_b);
    connect_and_fill(&mut b, protocol, 2, 1, &cookies_a);
    let rss_before = ProcStatus.resident().map_or(0, |r| r.0);
    let base = CURRENT.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);

    // One doorbell per QP asks for 16384 messages of 1 GiB (WRITE/READ) or 8192 (SEND).
    for d in [&mut a, &mut b] {
        for i in 0..QPS {
            d.ring_sq(10 + i);
        }
    }
    let start = Instant::now();
    let (mut rounds, mut packets) = (0u64, 0usize);
    let (mut max_inflight, mut max_held) = (0u64, 0u64);
    // At least 4 s, and on until the windows have filled and drained 17 times over
    // (what the assertion below asks for), whatever the host's load: a busy host moved
    // only 223 MiB in the first 4 s (make check beside a debootstrap). 60 s at most.
    let moved = |a: &mut TestDriver, b: &mut TestDriver| {
        field(&query(a, "stats"), "tx_bytes") + field(&query(b, "stats"), "tx_bytes")
    };
    loop {
        let t = start.elapsed();
        if rounds >= 5000 || t >= Duration::from_secs(60) {
            break;
        }
        if t >= Duration::from_secs(4)
            && rounds % 4 == 0
            && moved(&mut a, &mut b) > 17 * PORT_WINDOW
        {
            break;
        }
        packets += run(&mut a) + run(&mut b);
        rounds += 1;
        if rounds % 50 == 0 {
            // Retransmission timers (requests the full inboxes refused) run too.
            clock.advance(RETRY_TIMEOUT);
            a.run_due();
            b.run_due();
        }
        for d in [&a, &b] {
            max_inflight = max_inflight.max(d.dev.inflight_bytes());
            max_held = max_held.max(d.dev.held_bytes());
        }
    }
    let peak = PEAK.load(Ordering::Relaxed) - base;
    let memory = query(&mut a, "memory");
    let (rss, hwm) = ProcStatus.resident().expect("/proc/self/status");
    let moved = moved(&mut a, &mut b);
    eprintln!(
        "worst case ({protocol:?}): {rounds} rounds, {packets} packets, {} MiB moved in {:?}; model peak {} KiB \
         allocated beyond the setup (ceiling {} KiB for two adapters); port window at most \
         {max_inflight} B, held at most {max_held} B; VmRSS {} KiB (before {} KiB), VmHWM {} KiB; \
         a: {memory}",
        moved >> 20,
        start.elapsed(),
        peak >> 10,
        (2 * MEMORY_CEILING) >> 10,
        rss >> 10,
        rss_before >> 10,
        hwm >> 10,
    );
    // The engines did run the worst case: the windows filled and drained many times over
    // (gigabytes in a release build), the windows and the held bytes filled to their bounds
    // and no further.
    assert!(moved > 16 * PORT_WINDOW, "only {moved} bytes moved");
    assert!(max_inflight <= PORT_WINDOW && max_inflight > PORT_WINDOW / 2);
    assert!(max_held <= MAX_HELD_BYTES);
    // The model's own memory for both adapters stays under twice the ceiling.
    assert!(
        (peak as u64) < 2 * MEMORY_CEILING,
        "peak {peak} bytes beyond the setup"
    );
    // And so does the process's: its high-water mark above its resident memory before.
    assert!(
        hwm.saturating_sub(rss_before) < 2 * MEMORY_CEILING,
        "VmHWM {hwm}, VmRSS before {rss_before}"
    );
    assert_eq!(field(&memory, "ceiling"), MEMORY_CEILING);
    assert!(field(&memory, "hwm") >= field(&memory, "rss"));
}
