// SPDX-License-Identifier: GPL-2.0

//! Event queues (erdma_rs_hw 4): the CMDQ EQ, the AEQ and the CEQs share one ring engine.
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
//! * [`EventQueues`] holds a function's EQs (CMDQ EQ, AEQ, CEQs), creates and destroys CEQs
//!   (CREATE_EQ, DESTROY_EQ) and is where events are posted and EQ doorbells land; the entry
//!   layouts are [`crate::wire::Eqe`].

use core::fmt;

use crate::cmdq::{CreateEq, DestroyEq, Status, EQ_TYPE_CEQ};
use crate::io::{GuestMemory, Io, MemError};
use crate::regs::{self, EqDoorbell};
use crate::wire::{self, AeqEvent, Eqe, EQE_SIZE};

/// log2 depths CREATE_EQ accepts (2..65536 entries; the driver's EQ counter is 16 bits).
pub const CEQ_DEPTH_LOG2_RANGE: core::ops::RangeInclusive<u8> = 1..=16;
/// EQNs and vectors CREATE_EQ accepts: CEQs only (EQN/vector 0 is the CMDQ EQ and the AEQ).
pub const CEQ_RANGE: core::ops::RangeInclusive<u8> = 1..=(regs::EQ_DB_COUNT - 1);

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

    /// Writes `entry` with the owner bit of its lap at the producer index and raises the vector
    /// if the EQ is armed.
    pub fn post(&mut self, entry: Eqe, io: &mut Io<'_>) -> Result<Fired, EqError> {
        if self.pending() >= self.depth.min(0xffff) {
            return Err(EqError::Full);
        }
        let slot = u64::from(self.pi & (self.depth - 1));
        let gpa = self.addr + slot * EQE_SIZE as u64;
        let bytes = entry.encode(self.pi & self.depth == 0);
        wire::write_owner_last(&bytes, |off, b| io.mem.write(gpa + off, b))
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

/// A CEQ created by CREATE_EQ.
#[derive(Clone, Debug)]
pub struct Ceq {
    /// The ring.
    pub eq: EventQueue,
    /// Doorbell-record address from CREATE_EQ (recorded; the model takes doorbells from MMIO).
    pub dbrec: u64,
}

/// Why an event was not posted ([`EventQueues::post_ceqe`], [`EventQueues::post_aeqe`] and the
/// device's entry points).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostError {
    /// DEV_CTRL.INIT has not completed: no EQs exist.
    NotInitialized,
    /// No CEQ with this EQN.
    NoSuchEq(u8),
    /// The EQ refused the entry.
    Eq(EqError),
}

impl fmt::Display for PostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PostError::NotInitialized => f.write_str("device not initialized (no EQs)"),
            PostError::NoSuchEq(n) => write!(f, "no CEQ with EQN {n}"),
            PostError::Eq(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for PostError {}

/// The event queues of an initialized function: the CMDQ EQ (EQN 0) and the AEQ, both on
/// vector 0, and the CEQs by EQN (1 and up; slot 0 is never used).
#[derive(Clone, Debug)]
pub struct EventQueues {
    cmdq_eq: EventQueue,
    aeq: EventQueue,
    ceqs: Vec<Option<Ceq>>,
}

impl EventQueues {
    /// The CMDQ EQ, the AEQ and room for CEQs with EQNs below `count`.
    pub fn new(cmdq_eq: EventQueue, aeq: EventQueue, count: u8) -> Self {
        EventQueues {
            cmdq_eq,
            aeq,
            ceqs: vec![None; usize::from(count)],
        }
    }

    /// The CMDQ EQ.
    pub fn cmdq_eq(&self) -> &EventQueue {
        &self.cmdq_eq
    }

    /// The AEQ.
    pub fn aeq(&self) -> &EventQueue {
        &self.aeq
    }

    /// CEQ `eqn`, if it exists.
    pub fn ceq(&self, eqn: u8) -> Option<&Ceq> {
        self.ceqs.get(usize::from(eqn))?.as_ref()
    }

    /// The slot of CEQ `eqn` (to create or destroy it); `None` beyond the EQNs there are.
    pub fn ceq_slot(&mut self, eqn: u8) -> Option<&mut Option<Ceq>> {
        self.ceqs.get_mut(usize::from(eqn))
    }

    /// EQNs of the live CEQs, in increasing order.
    pub fn live_ceqs(&self) -> Vec<u8> {
        (0..=u8::MAX)
            .zip(&self.ceqs)
            .filter(|(_, c)| c.is_some())
            .map(|(n, _)| n)
            .collect()
    }

    /// CREATE_EQ (erdma_rs_hw 3.5): a CEQ, every field in range and the ring and its doorbell
    /// record aligned first ([`Status::InvalidParam`]), then the EQN must be free
    /// ([`Status::Exists`]) and the ring and the record guest memory, probed with reads only
    /// ([`Status::DmaError`]).
    pub fn create_ceq(&mut self, r: &CreateEq, mem: &dyn GuestMemory) -> Result<(), Status> {
        if r.ty != EQ_TYPE_CEQ
            || !CEQ_RANGE.contains(&r.eqn)
            || !CEQ_RANGE.contains(&r.vector)
            || !CEQ_DEPTH_LOG2_RANGE.contains(&r.depth_log2)
        {
            return Err(Status::InvalidParam);
        }
        let depth = 1u32 << r.depth_log2;
        let size = u64::from(depth) * EQE_SIZE as u64;
        let ring_end = r.ring.checked_add(size);
        if r.ring == 0
            || r.ring % EQE_SIZE as u64 != 0
            || ring_end.is_none()
            || r.dbrec == 0
            || r.dbrec % regs::DBREC_ALIGN != 0
        {
            return Err(Status::InvalidParam);
        }
        let slot = self.ceq_slot(r.eqn).ok_or(Status::InvalidParam)?;
        if slot.is_some() {
            return Err(Status::Exists);
        }
        let mut b = [0u8; 1];
        mem.read(r.ring, &mut b)
            .and_then(|()| mem.read(r.ring + size - 1, &mut b))
            .and_then(|()| mem.read_u64_le(r.dbrec).map(drop))
            .map_err(|_| Status::DmaError)?;
        *slot = Some(Ceq {
            eq: EventQueue::new(r.ring, depth, u16::from(r.vector)),
            dbrec: r.dbrec,
        });
        // The device logs the command at info level, rate-limited (it is the guest's to repeat).
        log::debug!(
            "CEQ {} created: ring {:#x}, {depth} entries, vector {}",
            r.eqn,
            r.ring,
            r.vector
        );
        Ok(())
    }

    /// DESTROY_EQ: CEQ `r.eqn` must exist ([`Status::NotFound`]); the vector named is not
    /// checked.
    pub fn destroy_ceq(&mut self, r: &DestroyEq) -> Result<(), Status> {
        if r.ty != EQ_TYPE_CEQ || !CEQ_RANGE.contains(&r.eqn) {
            return Err(Status::InvalidParam);
        }
        let slot = self.ceq_slot(r.eqn).ok_or(Status::InvalidParam)?;
        let ceq = slot.take().ok_or(Status::NotFound)?;
        if ceq.eq.vector() != u16::from(r.vector) {
            log::debug!(
                "DESTROY_EQ {}: vector {} given, the EQ uses {} (not checked)",
                r.eqn,
                r.vector,
                ceq.eq.vector()
            );
        }
        log::debug!("CEQ {} destroyed", r.eqn);
        Ok(())
    }

    /// Posts a CMDQ EQE; raises vector 0 if the CMDQ EQ is armed.
    pub fn post_cmdq_eqe(&mut self, io: &mut Io<'_>) -> Result<Fired, EqError> {
        self.cmdq_eq.post(Eqe::Cmdq, io)
    }

    /// Posts a CEQE for `cqn` (20 bits) to CEQ `eqn`; raises the CEQ's vector if it is armed.
    pub fn post_ceqe(&mut self, eqn: u8, cqn: u32, io: &mut Io<'_>) -> Result<Fired, PostError> {
        let ceq = self
            .ceqs
            .get_mut(usize::from(eqn))
            .and_then(Option::as_mut)
            .filter(|_| eqn != 0)
            .ok_or(PostError::NoSuchEq(eqn))?;
        ceq.eq.post(Eqe::Ceq { cqn }, io).map_err(PostError::Eq)
    }

    /// Posts an asynchronous event to the AEQ; raises vector 0 if the AEQ is armed.
    pub fn post_aeqe(&mut self, ev: AeqEvent, io: &mut Io<'_>) -> Result<Fired, PostError> {
        self.aeq.post(Eqe::Aeq(ev), io).map_err(PostError::Eq)
    }

    /// An EQ doorbell: AEQ_DB (`None`) or EQ_DB\[n\] (0 = CMDQ EQ, n = CEQ n). `None` if CEQ `n`
    /// does not exist.
    pub fn doorbell(&mut self, n: Option<u8>, db: EqDoorbell, io: &mut Io<'_>) -> Option<Fired> {
        let eq = match n {
            None => &mut self.aeq,
            Some(0) => &mut self.cmdq_eq,
            Some(n) => &mut self.ceqs.get_mut(usize::from(n))?.as_mut()?.eq,
        };
        Some(eq.doorbell(db, io))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{RecordingIrqs, VecMemory};

    fn ceqe(cqn: u32) -> Eqe {
        Eqe::Ceq { cqn }
    }

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
    fn event_queues_route_posts_and_doorbells() {
        let mut mem = VecMemory::new(0x1000, 0x1000);
        let mut irq = RecordingIrqs::all_connected();
        let mut io = Io::new(&mut mem, &mut irq);
        let mut eqs = EventQueues::new(
            EventQueue::new(0x1000, 4, 0),
            EventQueue::new(0x1100, 4, 0),
            4,
        );
        *eqs.ceq_slot(2).unwrap() = Some(Ceq {
            eq: EventQueue::new(0x1200, 4, 5),
            dbrec: 0x1f00,
        });
        assert!(eqs.ceq_slot(4).is_none(), "beyond the EQNs");
        assert_eq!(eqs.live_ceqs(), [2]);
        assert_eq!(eqs.post_ceqe(2, 7, &mut io), Ok(Fired::Yes));
        assert_eq!(eqs.post_ceqe(1, 7, &mut io), Err(PostError::NoSuchEq(1)));
        assert_eq!(eqs.post_ceqe(0, 7, &mut io), Err(PostError::NoSuchEq(0)));
        assert_eq!(eqs.post_ceqe(9, 7, &mut io), Err(PostError::NoSuchEq(9)));
        let ev = AeqEvent {
            ty: 2,
            subtype: 0,
            data0: 10,
            data1: 0,
        };
        assert_eq!(eqs.post_aeqe(ev, &mut io), Ok(Fired::Yes));
        assert_eq!(eqs.post_cmdq_eqe(&mut io), Ok(Fired::Yes));
        assert_eq!((eqs.aeq().pi(), eqs.cmdq_eq().pi()), (1, 1));
        assert_eq!(eqs.ceq(2).map(|c| (c.eq.pi(), c.dbrec)), Some((1, 0x1f00)));
        let db = EqDoorbell { ci: 1, arm: true };
        assert_eq!(eqs.doorbell(Some(2), db, &mut io), Some(Fired::No));
        assert_eq!(eqs.doorbell(Some(3), db, &mut io), None);
        assert_eq!(eqs.doorbell(None, db, &mut io), Some(Fired::No));
        assert_eq!(eqs.doorbell(Some(0), db, &mut io), Some(Fired::No));
        assert_eq!(irq.raised, [5, 0, 0]);
        let e = entry(&mem, 0x1100, 0);
        assert_eq!((Eqe::owner(&e), Eqe::decode_aeqe(&e)), (true, ev));
        assert_eq!(Eqe::decode_ceqe(&entry(&mem, 0x1200, 0)), 7);
    }

    #[test]
    fn bogus_ci_and_unmapped_ring() {
        let mut mem = VecMemory::new(0x1000, 0x100);
        let mut irq = RecordingIrqs::all_connected();
        let mut io = Io::new(&mut mem, &mut irq);
        let mut eq = EventQueue::new(0x1000, 16, 0);
        eq.post(Eqe::Cmdq, &mut io).unwrap();
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
}
