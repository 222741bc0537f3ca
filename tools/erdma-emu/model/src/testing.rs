// SPDX-License-Identifier: GPL-2.0

//! Simple implementations of [`GuestMemory`] and [`IrqSink`] for tests, and [`TestDriver`], a
//! minimal driver double that sets up the admin queues in a [`VecMemory`] and submits commands
//! the way the Linux driver does.

use std::sync::Arc;

use crate::clock::{Clock, MonotonicClock};
use crate::cmdq::{
    AddressVector, Command, Cqe, CreateEq, Gid, Header, NetType, OpCode, CQE_SIZE, GID_SIZE,
    WQEBB_SIZE,
};
use crate::device::{Device, DeviceConfig};
use crate::io::{GuestMemory, Io, IrqSink, MemError, MemErrorKind};
use crate::regs::{self, AdminQueue, CqDoorbell, EqDoorbell, MSIX_VECTORS};
use crate::wire::{AeqEvent, Eqe, EQE_SIZE};

/// Guest memory made of one flat buffer at guest-physical address `base`.
#[derive(Clone, Debug)]
pub struct VecMemory {
    base: u64,
    bytes: Vec<u8>,
    /// `(start, len)`: a range that reads as zeros and drops writes, backed by nothing (for
    /// tests that move more data than they could allocate).
    void: Option<(u64, u64)>,
}

impl VecMemory {
    /// `size` zeroed bytes at guest-physical `base`.
    pub fn new(base: u64, size: usize) -> Self {
        VecMemory {
            base,
            bytes: vec![0; size],
            void: None,
        }
    }

    /// Makes `[start, start + len)` (outside the backing bytes) read as zeros and drop writes.
    pub fn set_void(&mut self, start: u64, len: u64) {
        self.void = Some((start, len));
    }

    /// Whether `[gpa, gpa + len)` lies in the void range.
    fn in_void(&self, gpa: u64, len: usize) -> bool {
        self.void.is_some_and(|(start, n)| {
            gpa >= start
                && gpa
                    .checked_add(len as u64)
                    .is_some_and(|end| end <= start.saturating_add(n))
        })
    }

    /// Guest-physical address of the first byte.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The backing bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The backing bytes, mutable (what the "guest" writes).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }

    /// The index range of `[gpa, gpa + len)` in the buffer.
    fn range(&self, gpa: u64, len: usize) -> Result<core::ops::Range<usize>, MemError> {
        let err = |at, kind| MemError { gpa, len, at, kind };
        let len64 = len as u64;
        if gpa.checked_add(len64).is_none() {
            return Err(err(gpa, MemErrorKind::Overflow));
        }
        if len == 0 {
            return Ok(0..0);
        }
        let start = gpa
            .checked_sub(self.base)
            .and_then(|o| usize::try_from(o).ok())
            .filter(|&o| o < self.bytes.len())
            .ok_or(err(gpa, MemErrorKind::Unmapped))?;
        let avail = self.bytes.len() - start;
        if len > avail {
            return Err(err(gpa + avail as u64, MemErrorKind::Unmapped));
        }
        Ok(start..start + len)
    }
}

impl GuestMemory for VecMemory {
    fn read(&self, gpa: u64, buf: &mut [u8]) -> Result<(), MemError> {
        if self.in_void(gpa, buf.len()) {
            buf.fill(0);
            return Ok(());
        }
        let r = self.range(gpa, buf.len())?;
        buf.copy_from_slice(&self.bytes[r]);
        Ok(())
    }

    fn write(&mut self, gpa: u64, data: &[u8]) -> Result<(), MemError> {
        if self.in_void(gpa, data.len()) {
            return Ok(());
        }
        let r = self.range(gpa, data.len())?;
        self.bytes[r].copy_from_slice(data);
        Ok(())
    }
}

/// An [`IrqSink`] that records every delivered interrupt.
#[derive(Clone, Debug)]
pub struct RecordingIrqs {
    /// Bit n set: vector n is connected and delivers.
    pub connected: u32,
    /// Delivered vectors, in order.
    pub raised: Vec<u16>,
    /// Number of [`IrqSink::cancel_pending`] calls.
    pub cancels: usize,
}

impl RecordingIrqs {
    /// All 32 vectors connected.
    pub fn all_connected() -> Self {
        Self::with_connected(u32::MAX)
    }

    /// Only the vectors whose bit is set in `mask` are connected.
    pub fn with_connected(mask: u32) -> Self {
        RecordingIrqs {
            connected: mask,
            raised: Vec::new(),
            cancels: 0,
        }
    }
}

impl Default for RecordingIrqs {
    fn default() -> Self {
        Self::all_connected()
    }
}

impl IrqSink for RecordingIrqs {
    fn raise(&mut self, vector: u16) -> bool {
        if vector < MSIX_VECTORS && self.connected & (1 << vector) != 0 {
            self.raised.push(vector);
            true
        } else {
            false
        }
    }

    fn cancel_pending(&mut self) {
        self.cancels += 1;
    }
}

/// Where [`TestDriver`] puts things in its guest memory.
pub mod layout {
    /// Guest-physical base of the test memory.
    pub const MEM_BASE: u64 = 0x10_0000;
    /// Size of the test memory (1 MiB).
    pub const MEM_SIZE: usize = 0x10_0000;
    /// CMDQ SQ ring (up to 512 WQEBBs).
    pub const SQ: u64 = MEM_BASE;
    /// CMDQ CQ ring (up to 512 CQEs).
    pub const CQ: u64 = MEM_BASE + 0x4000;
    /// CMDQ EQ ring (up to 2048 entries).
    pub const CMDQ_EQ: u64 = MEM_BASE + 0x8000;
    /// AEQ ring (up to 4096 entries).
    pub const AEQ: u64 = MEM_BASE + 0x1_0000;
    /// Doorbell records of the admin queues, 8 bytes each in [`super::AdminQueue::ALL`] order.
    pub const DBRECS: u64 = MEM_BASE + 0x2_0000;
    /// Doorbell record of CEQ n: `CEQ_DBRECS + 8 * n`.
    pub const CEQ_DBRECS: u64 = MEM_BASE + 0x2_0100;
    /// Ring of CEQ n: `CEQS + n * 0x1000` (up to 256 entries each).
    pub const CEQS: u64 = MEM_BASE + 0x3_0000;
    /// Free for tests (GET_STATS buffers, ...): 512 KiB.
    pub const SCRATCH: u64 = MEM_BASE + 0x8_0000;
    /// Where the data-path helpers allocate queues and buffers (the last 448 KiB of
    /// [`SCRATCH`]).
    pub const DP_HEAP: u64 = SCRATCH + 0x1_0000;
    /// End of the data-path heap.
    pub const DP_HEAP_END: u64 = MEM_BASE + MEM_SIZE as u64;
}

/// A driver double: a [`Device`], its guest memory and interrupts, and the driver-side indices
/// of the admin queues. Commands are written the way the Linux driver writes them: the header and
/// the request's fields go into the slot, whatever else the slot held stays.
#[derive(Debug)]
pub struct TestDriver {
    /// The device.
    pub dev: Device,
    /// Guest memory ([`layout`]).
    pub mem: VecMemory,
    /// Interrupts (all vectors connected).
    pub irq: RecordingIrqs,
    /// CMDQ SQ depth in WQEBBs (= CMDQ CQ depth).
    pub sq_depth: u32,
    /// CMDQ EQ depth.
    pub eq_depth: u32,
    /// AEQ depth.
    pub aeq_depth: u32,
    /// Driver SQ producer index (WQEBBs).
    pub sq_pi: u16,
    /// Driver CMDQ CQ consumer index.
    pub cq_ci: u32,
    /// Driver CMDQ EQ consumer index.
    pub eq_ci: u32,
    /// Driver AEQ consumer index.
    pub aeq_ci: u32,
    /// Arm requests sent for the CMDQ CQ.
    pub cmdsn: u8,
    /// Data-path objects created through the helpers ([`dp`]).
    pub dp: dp::DpState,
}

impl TestDriver {
    /// A device with the driver's queue sizes (SQ 512 WQEBBs, CMDQ EQ 128, AEQ 4096), not yet
    /// initialized, on the host clock.
    pub fn new(config: DeviceConfig) -> Self {
        Self::with(config, Arc::new(MonotonicClock::new()), 512, 128, 4096)
    }

    /// A device with the given clock and queue depths (powers of two within [`layout`]).
    pub fn with(
        config: DeviceConfig,
        clock: Arc<dyn Clock>,
        sq_depth: u32,
        eq_depth: u32,
        aeq_depth: u32,
    ) -> Self {
        TestDriver {
            dev: Device::with_clock(config, clock),
            mem: VecMemory::new(layout::MEM_BASE, layout::MEM_SIZE),
            irq: RecordingIrqs::all_connected(),
            sq_depth,
            eq_depth,
            aeq_depth,
            sq_pi: 0,
            cq_ci: 0,
            eq_ci: 0,
            aeq_ci: 0,
            cmdsn: 0,
            dp: dp::DpState::default(),
        }
    }

    /// Writes BAR0.
    pub fn write(&mut self, off: u64, data: &[u8]) {
        let mut io = Io::new(&mut self.mem, &mut self.irq);
        self.dev.bar0_write(off, data, &mut io);
    }

    /// Writes a 32-bit BAR0 register.
    pub fn w32(&mut self, off: u64, v: u32) {
        self.write(off, &v.to_le_bytes());
    }

    /// Writes a 64-bit BAR0 register (one 8-byte access).
    pub fn w64(&mut self, off: u64, v: u64) {
        self.write(off, &v.to_le_bytes());
    }

    /// Reads `n` bytes of BAR0.
    pub fn read(&mut self, off: u64, n: usize) -> Vec<u8> {
        let mut b = vec![0; n];
        self.dev.bar0_read(off, &mut b);
        b
    }

    /// Reads a 32-bit BAR0 register.
    pub fn r32(&mut self, off: u64) -> u32 {
        let b = self.read(off, 4);
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Programs the admin queue registers (§2.3 order) and writes DEV_CTRL.INIT. Returns
    /// whether INIT_DONE is set. The driver indices restart at 0.
    pub fn init(&mut self) -> bool {
        self.program();
        self.start()
    }

    /// Writes DEV_CTRL.INIT and returns whether INIT_DONE is set. The driver indices restart
    /// at 0.
    pub fn start(&mut self) -> bool {
        use crate::regs::*;
        self.w32(DEV_CTRL, DEV_CTRL_INIT);
        (self.sq_pi, self.cq_ci, self.eq_ci, self.aeq_ci, self.cmdsn) = (0, 0, 0, 0, 0);
        self.r32(DEV_STATUS) & DEV_STATUS_INIT_DONE != 0
    }

    /// Programs the admin queue registers in the driver's order (§2.3), without INIT.
    pub fn program(&mut self) {
        use crate::regs::*;
        self.w32(AEQ_ADDR_H, (layout::AEQ >> 32) as u32);
        self.w32(AEQ_ADDR_L, layout::AEQ as u32);
        self.w32(AEQ_DEPTH, self.aeq_depth);
        self.w32(CMDQ_SQ_ADDR_H, (layout::SQ >> 32) as u32);
        self.w32(CMDQ_SQ_ADDR_L, layout::SQ as u32);
        self.w32(CMDQ_DEPTH, self.sq_depth);
        self.w32(CMDQ_CQ_ADDR_H, (layout::CQ >> 32) as u32);
        self.w32(CMDQ_CQ_ADDR_L, layout::CQ as u32);
        self.w32(CMDQ_EQ_ADDR_H, (layout::CMDQ_EQ >> 32) as u32);
        self.w32(CMDQ_EQ_ADDR_L, layout::CMDQ_EQ as u32);
        self.w32(CMDQ_EQ_DEPTH, self.eq_depth);
        for q in AdminQueue::ALL {
            self.w64(q.dbrec_reg(), layout::DBRECS + 8 * q.index() as u64);
        }
    }

    /// Guest address of SQ WQEBB `index`.
    pub fn wqebb_addr(&self, index: u16) -> u64 {
        layout::SQ + u64::from(u32::from(index) & (self.sq_depth - 1)) * WQEBB_SIZE as u64
    }

    /// Writes a command of `wqebbs` WQEBBs with header `header` at the producer index: the slot
    /// as it is in memory is handed to `fill` (after the header went in), then written back.
    /// Advances the producer index, does not ring. Returns the start index.
    pub fn queue_raw(&mut self, header: u64, wqebbs: u16, fill: impl FnOnce(&mut [u8])) -> u16 {
        let start = self.sq_pi;
        let len = usize::from(wqebbs) * WQEBB_SIZE;
        let mut slot = vec![0u8; len];
        for (i, chunk) in (0u16..).zip(slot.chunks_exact_mut(WQEBB_SIZE)) {
            let a = self.wqebb_addr(start.wrapping_add(i));
            self.mem.read(a, chunk).expect("SQ ring in test memory");
        }
        slot[..8].copy_from_slice(&header.to_le_bytes());
        fill(&mut slot);
        for (i, chunk) in (0u16..).zip(slot.chunks_exact(WQEBB_SIZE)) {
            let a = self.wqebb_addr(start.wrapping_add(i));
            self.mem.write(a, chunk).expect("SQ ring in test memory");
        }
        self.sq_pi = start.wrapping_add(wqebbs);
        start
    }

    /// The header the driver writes for a 4-WQEBB command with `code` at the producer index.
    pub fn header(&self, code: OpCode) -> u64 {
        Header {
            wqebb_index: self.sq_pi.wrapping_add(4),
            code,
            cookie: 0,
            wqebbs: 4,
        }
        .encode()
    }

    /// Queues a 4-WQEBB command (see [`TestDriver::queue_raw`]).
    pub fn queue(&mut self, code: OpCode, fill: impl FnOnce(&mut [u8])) -> u16 {
        let h = self.header(code);
        self.queue_raw(h, 4, fill)
    }

    /// Rings CMDQ_SQ_DB with the producer index (doorbell record first, like the driver).
    pub fn ring(&mut self) {
        let pi = u64::from(self.sq_pi);
        let rec = layout::DBRECS + 8 * AdminQueue::CmdqSq.index() as u64;
        self.mem
            .write_u64_le(rec, pi)
            .expect("dbrec in test memory");
        self.w64(regs::CMDQ_SQ_DB, pi);
    }

    /// The raw bytes of CMDQ CQ entry `index` (masked by the depth).
    pub fn cqe_raw(&self, index: u32) -> [u8; CQE_SIZE] {
        let a = layout::CQ + u64::from(index & (self.sq_depth - 1)) * CQE_SIZE as u64;
        let mut b = [0u8; CQE_SIZE];
        self.mem.read(a, &mut b).expect("CQ ring in test memory");
        b
    }

    /// The CQE at the consumer index if it is valid (owner rule); advances the consumer index.
    pub fn poll_cqe(&mut self) -> Option<Cqe> {
        let cqe = Cqe::decode(&self.cqe_raw(self.cq_ci));
        let phase = self.cq_ci & self.sq_depth != 0;
        if cqe.owner == phase {
            return None;
        }
        self.cq_ci = self.cq_ci.wrapping_add(1);
        Some(cqe)
    }

    /// Queues a 4-WQEBB `cmd`, rings, and returns its CQE (panics if none was written).
    pub fn exec(&mut self, cmd: Command, fill: impl FnOnce(&mut [u8])) -> Cqe {
        self.exec_code(cmd.code(), fill)
    }

    /// Like [`TestDriver::exec`] with a raw code.
    pub fn exec_code(&mut self, code: OpCode, fill: impl FnOnce(&mut [u8])) -> Cqe {
        let start = self.queue(code, fill);
        self.ring();
        let cqe = self.poll_cqe().expect("a CQE for the command");
        assert_eq!(cqe.start, u32::from(start), "CQE echoes the start index");
        cqe
    }

    /// Arms the CMDQ CQ with the current consumer index (like the driver's interrupt path).
    pub fn arm_cq(&mut self) {
        let db = CqDoorbell {
            ci: self.cq_ci,
            cmdsn: self.cmdsn & 3,
            solicited: false,
            arm: true,
            cqn: 0,
            seq: self.cmdsn,
        };
        self.w64(regs::CMDQ_CQ_DB, db.encode());
    }

    fn eqe_raw(&self, base: u64, depth: u32, index: u32) -> [u8; EQE_SIZE] {
        let a = base + u64::from(index & (depth - 1)) * EQE_SIZE as u64;
        let mut b = [0u8; EQE_SIZE];
        self.mem.read(a, &mut b).expect("EQ ring in test memory");
        b
    }

    fn eqe_valid(e: &[u8; EQE_SIZE], ci: u32, depth: u32) -> bool {
        Eqe::owner(e) != (ci & depth != 0)
    }

    /// Consumes one valid CMDQ EQE if there is one.
    pub fn poll_eqe(&mut self) -> bool {
        let e = self.eqe_raw(layout::CMDQ_EQ, self.eq_depth, self.eq_ci);
        let valid = Self::eqe_valid(&e, self.eq_ci, self.eq_depth);
        if valid {
            self.eq_ci = self.eq_ci.wrapping_add(1);
        }
        valid
    }

    /// Re-arms the CMDQ EQ (EQ_DB\[0\]) with the consumer index.
    pub fn arm_eq(&mut self) {
        let v = EqDoorbell {
            ci: self.eq_ci,
            arm: true,
        }
        .encode();
        self.w64(regs::eq_db(0), v);
    }

    /// Consumes one valid AEQE if there is one.
    pub fn poll_aeqe(&mut self) -> Option<AeqEvent> {
        let e = self.eqe_raw(layout::AEQ, self.aeq_depth, self.aeq_ci);
        if !Self::eqe_valid(&e, self.aeq_ci, self.aeq_depth) {
            return None;
        }
        self.aeq_ci = self.aeq_ci.wrapping_add(1);
        Some(Eqe::decode_aeqe(&e))
    }

    /// Re-arms the AEQ with the consumer index.
    pub fn arm_aeq(&mut self) {
        let v = EqDoorbell {
            ci: self.aeq_ci,
            arm: true,
        }
        .encode();
        self.w64(regs::AEQ_DB, v);
    }

    /// Ring address of CEQ `eqn` in [`layout`].
    pub fn ceq_ring(eqn: u8) -> u64 {
        layout::CEQS + u64::from(eqn) * 0x1000
    }

    /// CREATE_EQ for CEQ `eqn` on `vector` with 2^`depth_log2` entries (≤ 8 to stay in
    /// [`layout`]), ring and doorbell record from [`layout`].
    pub fn create_ceq(&mut self, eqn: u8, vector: u8, depth_log2: u8) -> Cqe {
        let req = CreateEq {
            ring: Self::ceq_ring(eqn),
            vector,
            eqn,
            depth_log2,
            ty: crate::cmdq::EQ_TYPE_CEQ,
            dbrec: layout::CEQ_DBRECS + 8 * u64::from(eqn),
        };
        self.exec(Command::CreateEq, |s| req.write_fields(s))
    }

    /// CEQ `eqn` entry `index` (masked by `depth`): `(owner, CQN)`.
    pub fn ceqe(&self, eqn: u8, depth: u32, index: u32) -> (bool, u32) {
        let e = self.eqe_raw(Self::ceq_ring(eqn), depth, index);
        (Eqe::owner(&e), Eqe::decode_ceqe(&e))
    }

    /// Runs the device's due delayed work.
    pub fn run_due(&mut self) -> usize {
        let mut io = Io::new(&mut self.mem, &mut self.irq);
        self.dev.run_due(&mut io)
    }

    /// Runs a control command.
    pub fn control(&mut self, line: &str) -> Result<String, String> {
        let mut io = Io::new(&mut self.mem, &mut self.irq);
        self.dev.control(line, &mut io)
    }

    /// Takes the interrupts raised so far.
    pub fn take_irqs(&mut self) -> Vec<u16> {
        std::mem::take(&mut self.irq.raised)
    }
}

pub mod dp;

/// xorshift64*: deterministic pseudo-random numbers for tests, with no external crate.
pub struct XorShift(pub u64);

impl XorShift {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (not quite uniform; fine for tests).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Fills `b` with random bytes.
    pub fn fill(&mut self, b: &mut [u8]) {
        for x in b {
            // CAST: the low byte, truncation intended.
            *x = self.next_u64() as u8;
        }
    }
}

/// `::ffff:a.b.c.d`, the GID of an IPv4 address.
pub fn ipv4_gid(a: [u8; 4]) -> Gid {
    let mut g = [0u8; GID_SIZE];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&a);
    g
}

/// An IPv4 address vector to 10.0.0.`host` through source GID `sgid_index`.
pub fn ipv4_av(sgid_index: u16, host: u8) -> AddressVector {
    AddressVector {
        flow_label: 0,
        net_type: NetType::Ipv4,
        traffic_class: 0,
        hop_limit: 64,
        sl: 0,
        udp_sport: 0xc000 | u16::from(host),
        sgid_index,
        dmac: [0x52, 0x54, 0, 0, 0, host],
        dgid: ipv4_gid([10, 0, 0, host]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vec_memory_bounds() {
        let mut m = VecMemory::new(0x1000, 0x100);
        m.write(0x1000, &[1, 2, 3]).unwrap();
        m.write_u64_le(0x10f8, 0x1122_3344_5566_7788).unwrap();
        assert_eq!(m.read_u64_le(0x10f8).unwrap(), 0x1122_3344_5566_7788);
        let mut b = [0u8; 3];
        m.read(0x1000, &mut b).unwrap();
        assert_eq!(b, [1, 2, 3]);
        let e = m.read(0x10ff, &mut [0u8; 2]).unwrap_err();
        assert_eq!((e.at, e.kind), (0x1100, MemErrorKind::Unmapped));
        assert_eq!(
            m.read(0xfff, &mut b).unwrap_err().kind,
            MemErrorKind::Unmapped
        );
        assert_eq!(
            m.write(0x1100, &[0]).unwrap_err().kind,
            MemErrorKind::Unmapped
        );
        let e = m.write(u64::MAX, &[0, 0]).unwrap_err();
        assert_eq!(e.kind, MemErrorKind::Overflow);
        assert!(m.read(0x5000, &mut []).is_ok(), "empty access");
        assert!(!e.to_string().is_empty());
    }

    #[test]
    fn recording_irqs() {
        let mut i = RecordingIrqs::with_connected(0b10);
        assert!(!i.raise(0));
        assert!(i.raise(1));
        assert!(!i.raise(32));
        assert!(!i.raise(u16::MAX));
        assert_eq!(i.raised, vec![1]);
    }
}
