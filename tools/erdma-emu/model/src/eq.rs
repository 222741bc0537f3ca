// SPDX-License-Identifier: GPL-2.0

//! Event queues (erdma-hw.md §4): the CMDQ EQ, the AEQ and the CEQs share one ring engine.
//!
//! * Entries are 16 bytes; the owner bit is bit 31 of dword 0. The device writes owner = 1 on the
//!   first pass through the ring, 0 on the second, and so on: the entry at counter `i` carries
//!   `owner = (i & depth) == 0`, so the driver sees it valid when
//!   `owner XOR ((ci & depth) != 0)` is 1.
//! * An EQ starts armed (the drivers arm only after servicing an interrupt). Writing an entry into
//!   an armed EQ raises its MSI-X vector and disarms it. The EQ doorbell (bits 23:0 CI, bit 31
//!   ARM) records the consumer index and re-arms; if entries beyond that CI are already there,
//!   the vector fires at once (and the EQ is disarmed again).
//! * Consumer indices are compared modulo 2^16 (the Linux driver's EQ counter is 16 bits and every
//!   depth divides 65536), so drivers with wider counters work too. A CI more than `depth` entries
//!   behind or ahead of the producer is nonsense: it is treated as "nothing pending".
//! * An entry that would overwrite one the driver has not consumed (by the last CI it reported) is
//!   dropped and reported as [`EqError::Full`].
//! * The body (bytes 4..16) is written before dword 0, so the owner bit becomes visible last.

use core::fmt;

use crate::io::{Io, MemError};
use crate::regs::EqDoorbell;

/// Size of an event queue entry.
pub const EQE_SIZE: usize = 16;
/// Owner bit in dword 0.
pub const OWNER_BIT: u32 = 1 << 31;

/// An asynchronous event (AEQE, §4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AeqEvent {
    /// Event type (dword 0 bits 23:16): 0 QP fatal, 1 QP RQ error, 2 access error, 3 CQ error,
    /// 4 other.
    pub ty: u8,
    /// Subtype (dword 0 bits 7:0).
    pub subtype: u8,
    /// dword 1 (QPN or CQN).
    pub data0: u32,
    /// dword 2.
    pub data1: u32,
}

/// A CEQE for `cqn` without its owner bit: first u64 LE bits 19:0 = CQN, the rest 0.
pub fn ceqe(cqn: u32) -> [u8; EQE_SIZE] {
    let mut e = [0u8; EQE_SIZE];
    e[..4].copy_from_slice(&(cqn & 0xf_ffff).to_le_bytes());
    e
}

/// An AEQE without its owner bit: four LE u32 (type/subtype, data0, data1, 0).
pub fn aeqe(ev: &AeqEvent) -> [u8; EQE_SIZE] {
    let dw0 = u32::from(ev.ty) << 16 | u32::from(ev.subtype);
    let mut e = [0u8; EQE_SIZE];
    e[..4].copy_from_slice(&dw0.to_le_bytes());
    e[4..8].copy_from_slice(&ev.data0.to_le_bytes());
    e[8..12].copy_from_slice(&ev.data1.to_le_bytes());
    e
}

/// Decodes an AEQE (what a driver reads): `(owner, event)`.
pub fn decode_aeqe(e: &[u8; EQE_SIZE]) -> (bool, AeqEvent) {
    let dw = |i: usize| u32::from_le_bytes([e[4 * i], e[4 * i + 1], e[4 * i + 2], e[4 * i + 3]]);
    let dw0 = dw(0);
    (
        dw0 & OWNER_BIT != 0,
        AeqEvent {
            ty: (dw0 >> 16) as u8,
            subtype: dw0 as u8,
            data0: dw(1),
            data1: dw(2),
        },
    )
}

/// The CMDQ EQE: only its owner bit means anything to the driver; the rest is 0.
pub fn cmdq_eqe() -> [u8; EQE_SIZE] {
    [0; EQE_SIZE]
}

/// Why an entry could not be posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EqError {
    /// The ring holds `depth` entries the driver has not consumed; the entry was dropped.
    Full,
    /// The ring is not in guest memory; the entry was dropped.
    Dma(MemError),
}

impl fmt::Display for EqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EqError::Full => f.write_str("EQ full (driver has not consumed the entries)"),
            EqError::Dma(e) => write!(f, "EQ ring not writable: {e}"),
        }
    }
}

/// What posting an entry or ringing a doorbell did to the interrupt line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fired {
    /// The EQ was not armed (or nothing was pending): no interrupt.
    No,
    /// The vector was raised and the EQ disarmed.
    Yes,
}

/// One event queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventQueue {
    addr: u64,
    depth: u32,
    vector: u16,
    pi: u32,
    ci: u32,
    armed: bool,
}

impl EventQueue {
    /// An empty, armed EQ of `depth` entries (a power of two in 1..=65536) at `addr` that raises
    /// `vector`. The caller has checked that the ring does not wrap the address space.
    pub fn new(addr: u64, depth: u32, vector: u16) -> Self {
        EventQueue {
            addr,
            depth,
            vector,
            pi: 0,
            ci: 0,
            armed: true,
        }
    }

    /// Ring address.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Depth in entries.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// MSI-X vector.
    pub fn vector(&self) -> u16 {
        self.vector
    }

    /// Entries written so far (wrapping counter).
    pub fn pi(&self) -> u32 {
        self.pi
    }

    /// The consumer index of the last doorbell.
    pub fn ci(&self) -> u32 {
        self.ci
    }

    /// Whether the next entry raises the vector.
    pub fn armed(&self) -> bool {
        self.armed
    }

    /// Entries written beyond the last reported consumer index.
    pub fn pending(&self) -> u32 {
        let d = self.pi.wrapping_sub(self.ci) & 0xffff;
        if d > self.depth {
            0
        } else {
            d
        }
    }

    /// Writes `entry` (its owner bit is set here) at the producer index and raises the vector if
    /// the EQ is armed.
    pub fn post(&mut self, entry: [u8; EQE_SIZE], io: &mut Io<'_>) -> Result<Fired, EqError> {
        if self.pending() >= self.depth.min(0xffff) {
            return Err(EqError::Full);
        }
        let slot = u64::from(self.pi & (self.depth - 1));
        let gpa = self.addr + slot * EQE_SIZE as u64;
        let mut dw0 = u32::from_le_bytes([entry[0], entry[1], entry[2], entry[3]]) & !OWNER_BIT;
        if self.pi & self.depth == 0 {
            dw0 |= OWNER_BIT;
        }
        io.mem.write(gpa + 4, &entry[4..]).map_err(EqError::Dma)?;
        io.mem
            .write(gpa, &dw0.to_le_bytes())
            .map_err(EqError::Dma)?;
        self.pi = self.pi.wrapping_add(1);
        Ok(self.fire_if_armed(io))
    }

    /// An EQ doorbell: record the consumer index and, with ARM, re-arm (firing at once if
    /// entries are pending).
    pub fn doorbell(&mut self, db: EqDoorbell, io: &mut Io<'_>) -> Fired {
        self.ci = db.ci;
        if !db.arm {
            return Fired::No;
        }
        self.armed = true;
        if self.pending() > 0 {
            self.fire_if_armed(io)
        } else {
            Fired::No
        }
    }

    fn fire_if_armed(&mut self, io: &mut Io<'_>) -> Fired {
        if !self.armed {
            return Fired::No;
        }
        self.armed = false;
        // A vector without an eventfd is the transport's business (it keeps it pending).
        io.irq.raise(self.vector);
        Fired::Yes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{RecordingIrqs, VecMemory};

    fn entry(mem: &VecMemory, addr: u64, i: u32) -> [u8; 16] {
        let off = (addr - mem.base()) as usize + i as usize * 16;
        mem.bytes()[off..off + 16].try_into().unwrap()
    }

    #[test]
    fn owner_bit_laps_and_arming() {
        let mut mem = VecMemory::new(0x1000, 0x1000);
        let mut irq = RecordingIrqs::all_connected();
        let mut eq = EventQueue::new(0x1000, 4, 7);
        assert!(eq.armed());
        let mut io = Io::new(&mut mem, &mut irq);
        assert_eq!(eq.post(ceqe(0x12345), &mut io), Ok(Fired::Yes));
        assert_eq!(eq.post(ceqe(2), &mut io), Ok(Fired::No), "disarmed");
        assert_eq!(irq.raised, [7]);
        let e0 = entry(&mem, 0x1000, 0);
        assert_eq!(u32::from_le_bytes(e0[..4].try_into().unwrap()), 0x8001_2345);
        // Re-arm with CI 1: entry 1 is pending, so the vector fires at once.
        let mut io = Io::new(&mut mem, &mut irq);
        let db = |ci, arm| EqDoorbell { ci, arm };
        assert_eq!(eq.doorbell(db(1, true), &mut io), Fired::Yes);
        assert!(!eq.armed());
        // Consumed everything: arming does not fire.
        assert_eq!(eq.doorbell(db(2, true), &mut io), Fired::No);
        assert!(eq.armed());
        // Fill the ring up to the second lap: owner 0 on lap 1.
        for i in 2..6 {
            eq.post(ceqe(i), &mut io).unwrap();
        }
        assert_eq!(eq.post(ceqe(6), &mut io), Err(EqError::Full));
        let mut io = Io::new(&mut mem, &mut irq);
        eq.doorbell(db(6, false), &mut io);
        assert!(!eq.armed(), "a doorbell without ARM does not arm");
        assert_eq!(eq.pending(), 0);
        for (slot, want_owner) in [(0, false), (1, false), (2, true), (3, true)] {
            let e = entry(&mem, 0x1000, slot);
            assert_eq!(e[3] & 0x80 != 0, want_owner, "slot {slot}");
        }
        assert_eq!(irq.raised, [7, 7, 7]);
    }

    #[test]
    fn bogus_ci_and_unmapped_ring() {
        let mut mem = VecMemory::new(0x1000, 0x100);
        let mut irq = RecordingIrqs::all_connected();
        let mut io = Io::new(&mut mem, &mut irq);
        let mut eq = EventQueue::new(0x1000, 16, 0);
        eq.post(cmdq_eqe(), &mut io).unwrap();
        // A CI from the future: nothing pending, arming does not fire.
        let f = eq.doorbell(
            EqDoorbell {
                ci: 0x8000,
                arm: true,
            },
            &mut io,
        );
        assert_eq!(f, Fired::No);
        let mut far = EventQueue::new(0x9000, 16, 0);
        assert!(matches!(far.post(ceqe(1), &mut io), Err(EqError::Dma(_))));
        assert_eq!(far.pi(), 0, "nothing written, nothing counted");
        assert!(!EqError::Full.to_string().is_empty());
    }

    #[test]
    fn aeqe_layout() {
        let ev = AeqEvent {
            ty: 3,
            subtype: 9,
            data0: 0x1234_5678,
            data1: 0x9abc_def0,
        };
        let e = aeqe(&ev);
        assert_eq!(
            e,
            [9, 0, 3, 0, 0x78, 0x56, 0x34, 0x12, 0xf0, 0xde, 0xbc, 0x9a, 0, 0, 0, 0]
        );
        assert_eq!(decode_aeqe(&e), (false, ev));
    }
}
