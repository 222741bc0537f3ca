// SPDX-License-Identifier: GPL-2.0

//! The command queue's rings (erdma_rs_hw 3): [`CmdRing`] fetches commands from the CMDQ SQ and
//! writes CQEs into the CMDQ CQ, and keeps the CQ's arm; [`DelayedCqes`] holds the completions
//! that `delay` fault rules hold back. Neither executes anything nor posts events: they say
//! when the CMDQ EQE is due, and the device (`cmdq_engine`) posts it through the event queues.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use super::{AdminQueues, Oddity, RingConfig, WarnOnce};
use crate::cmdq::{Cqe, Header, OpCode, Status, MAX_CMD_SIZE, MAX_CMD_WQEBBS, WQEBB_SIZE};
use crate::io::{GuestMemory, MemError};
use crate::regs::CqDoorbell;
use crate::wire;

/// Most completions a device holds back for `delay` rules; beyond that they complete at once.
const MAX_DELAYED: usize = 65536;

/// A command that could not be fetched: how to complete it and how far to move on.
pub(super) struct BadCommand {
    pub(super) code: OpCode,
    pub(super) status: Status,
    pub(super) why: String,
    pub(super) extent: u16,
}

impl BadCommand {
    pub(super) fn new(code: OpCode, status: Status, why: impl Into<String>, extent: u16) -> Self {
        BadCommand {
            code,
            status,
            why: why.into(),
            extent,
        }
    }
}

/// The CMDQ SQ and CQ as latched by `DEV_CTRL.INIT`, with the device's indices.
#[derive(Clone, Debug)]
pub(super) struct CmdRing {
    sq: RingConfig,
    cq: RingConfig,
    /// Device consumer index of the CMDQ SQ (WQEBBs, 16-bit wrapping like the header index).
    sq_ci: u16,
    /// CMDQ CQEs written (wrapping counter; slot and owner bit derive from it).
    cq_pi: u32,
    /// The CI of the last CMDQ CQ doorbell.
    cq_ci: u32,
    /// The next CQE produces an EQE (CMDQ_CQ_DB with ARM, one event per arm).
    cq_armed: bool,
}

impl CmdRing {
    /// The rings of `admin`, empty, the CQ not armed.
    pub(super) fn new(admin: &AdminQueues) -> Self {
        CmdRing {
            sq: admin.cmdq_sq,
            cq: admin.cmdq_cq,
            sq_ci: 0,
            cq_pi: 0,
            cq_ci: 0,
            cq_armed: false,
        }
    }

    /// The device's SQ consumer index.
    pub(super) fn consumer_index(&self) -> u16 {
        self.sq_ci
    }

    /// Moves the SQ consumer index to `ci`.
    pub(super) fn set_consumer_index(&mut self, ci: u16) {
        self.sq_ci = ci;
    }

    /// Checks a CMDQ_SQ_DB producer index: one more than the ring depth ahead of the consumer
    /// index cannot be right, so the consumer index jumps to it and the error says why.
    pub(super) fn check_producer_index(&mut self, pi: u16) -> Result<(), String> {
        let depth = self.sq.depth;
        let ahead = pi.wrapping_sub(self.sq_ci);
        if u32::from(ahead) > depth {
            let msg = format!(
                "CMDQ_SQ_DB: producer index {pi:#x} is {ahead} WQEBBs ahead of the device's \
                 consumer index {:#x} (ring depth {depth}); resynchronised, nothing executed",
                self.sq_ci
            );
            self.sq_ci = pi;
            return Err(msg);
        }
        Ok(())
    }

    /// Reads and checks the command at `start`: its code, WQEBB count and bytes. `remaining`
    /// (> 0) WQEBBs are left before the doorbell's PI.
    pub(super) fn fetch(
        &self,
        start: u16,
        remaining: u16,
        mem: &dyn GuestMemory,
        warned: &mut WarnOnce,
    ) -> Result<(OpCode, u16, [u8; MAX_CMD_SIZE]), BadCommand> {
        let sq = self.sq;
        let wqebb_addr = |i: u16| {
            let slot = u64::from(u32::from(i) & (sq.depth - 1));
            sq.addr + slot * WQEBB_SIZE as u64
        };
        let header = match mem.read_u64_le(wqebb_addr(start)) {
            Ok(h) => Header::decode(h),
            Err(e) => {
                if warned.first(Oddity::SqUnreadable, 0) {
                    log::warn!("CMDQ SQ ring unreadable: {e}");
                }
                let extent = remaining.min(MAX_CMD_WQEBBS);
                let code = OpCode { sub: 0, op: 0 };
                return Err(BadCommand::new(
                    code,
                    Status::DmaError,
                    e.to_string(),
                    extent,
                ));
            }
        };
        let code = header.code;
        let count = header.wqebbs;
        if count > MAX_CMD_WQEBBS {
            let why = format!("header {:#x}: {count} WQEBBs (at most 4)", header.encode());
            return Err(BadCommand::new(
                code,
                Status::Malformed,
                why,
                count.min(remaining),
            ));
        }
        if count > remaining {
            let why = format!("{count} WQEBBs, but only {remaining} before the doorbell's PI");
            return Err(BadCommand::new(code, Status::Malformed, why, remaining));
        }
        let expected = start.wrapping_add(count);
        if header.wqebb_index != expected {
            let why = format!(
                "header index {:#x}, expected {expected:#x} (start {start:#x} + {count} WQEBBs)",
                header.wqebb_index
            );
            return Err(BadCommand::new(code, Status::Malformed, why, count));
        }
        let mut buf = [0u8; MAX_CMD_SIZE];
        let len = usize::from(count) * WQEBB_SIZE;
        for (i, chunk) in (0u16..).zip(buf[..len].chunks_exact_mut(WQEBB_SIZE)) {
            if let Err(e) = mem.read(wqebb_addr(start.wrapping_add(i)), chunk) {
                return Err(BadCommand::new(
                    code,
                    Status::DmaError,
                    e.to_string(),
                    count,
                ));
            }
        }
        Ok((code, count, buf))
    }

    /// Writes a CQE (owner bit from the producer index) into the CMDQ CQ. Returns whether the
    /// CQ was armed, which it no longer is: the CMDQ EQE is then due.
    pub(super) fn write_cqe(
        &mut self,
        mut cqe: Cqe,
        mem: &mut dyn GuestMemory,
    ) -> Result<bool, MemError> {
        let cq = self.cq;
        cqe.owner = self.cq_pi & cq.depth == 0;
        let slot = u64::from(self.cq_pi & (cq.depth - 1));
        let gpa = cq.addr + slot * crate::cmdq::CQE_SIZE as u64;
        let bytes = cqe.encode();
        wire::write_owner_last(&bytes, |at, b| mem.write(gpa + at, b))?;
        self.cq_pi = self.cq_pi.wrapping_add(1);
        Ok(std::mem::replace(&mut self.cq_armed, false))
    }

    /// CMDQ_CQ_DB: records the CI; with ARM, the next CQE produces an EQE, unless CQEs the
    /// driver has not seen are there already: then the EQE is due now (the return value).
    pub(super) fn cq_doorbell(&mut self, db: CqDoorbell) -> bool {
        self.cq_ci = db.ci;
        if !db.arm {
            return false;
        }
        let pending = self.cq_pi.wrapping_sub(db.ci) & 0xffff;
        if pending != 0 && pending <= self.cq.depth {
            // CQEs the driver has not seen yet: the event is due now.
            true
        } else {
            self.cq_armed = true;
            false
        }
    }

    /// `(SQ consumer index, CQ producer index, CQ armed)`.
    pub(super) fn state(&self) -> (u16, u32, bool) {
        (self.sq_ci, self.cq_pi, self.cq_armed)
    }
}

/// A command completion held back by a `delay` rule, ordered by when it is due, then by
/// command order (`seq`).
#[derive(Clone, Debug)]
struct Delayed {
    due: Duration,
    seq: u64,
    cqe: Cqe,
}

impl PartialEq for Delayed {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}

impl Eq for Delayed {}

impl PartialOrd for Delayed {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Delayed {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        #[cfg(test)]
        tests::COMPARISONS.with(|c| c.set(c.get() + 1));
        (self.due, self.seq).cmp(&(other.due, other.seq))
    }
}

/// Command completions held back by `delay` rules, written when due: a min-heap by due time
/// (then command order), so holding one and taking the earliest cost O(log n) each.
#[derive(Clone, Debug, Default)]
pub(super) struct DelayedCqes {
    held: BinaryHeap<Reverse<Delayed>>,
    next_seq: u64,
}

impl DelayedCqes {
    /// Holds `cqe` until `due`; refused (false) when [`MAX_DELAYED`] are held already.
    pub(super) fn hold(&mut self, due: Duration, cqe: Cqe) -> bool {
        if self.held.len() >= MAX_DELAYED {
            return false;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.held.push(Reverse(Delayed { due, seq, cqe }));
        true
    }

    /// When the earliest held completion is due.
    pub(super) fn next_due(&self) -> Option<Duration> {
        self.held.peek().map(|d| d.0.due)
    }

    /// The earliest held completion due at `now` (ties in command order), released.
    pub(super) fn take_due(&mut self, now: Duration) -> Option<Cqe> {
        if self.held.peek()?.0.due > now {
            return None;
        }
        self.held.pop().map(|d| d.0.cqe)
    }

    /// How many are held.
    pub(super) fn len(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmdq::CQE_SIZE;
    use crate::testing::VecMemory;

    const SQ: u64 = 0x1000;
    const CQ: u64 = 0x2000;

    fn ring() -> CmdRing {
        let r = |addr, depth| RingConfig {
            addr,
            depth,
            dbrec: 0x3000,
        };
        CmdRing::new(&AdminQueues {
            cmdq_sq: r(SQ, 8),
            cmdq_cq: r(CQ, 4),
            cmdq_eq: r(0x4000, 4),
            aeq: r(0x5000, 4),
        })
    }

    fn cqe(start: u32) -> Cqe {
        Cqe {
            owner: false,
            opcode: 1,
            qtype: 0,
            status: 0,
            start,
            resp0: 0,
            resp1: 0,
        }
    }

    fn arm(ci: u32) -> CqDoorbell {
        CqDoorbell {
            ci,
            cmdsn: 0,
            solicited: false,
            arm: true,
            cqn: 0,
            seq: 0,
        }
    }

    #[test]
    fn fetch_checks_the_header() {
        let mut mem = VecMemory::new(SQ, 0x1000);
        let mut warned = WarnOnce::default();
        let r = ring();
        let header = |index, wqebbs| Header {
            wqebb_index: index,
            code: OpCode { sub: 0, op: 1 },
            cookie: 0,
            wqebbs,
        };
        mem.write_u64_le(SQ, header(2, 2).encode()).unwrap();
        let (code, count, _) = r.fetch(0, 2, &mem, &mut warned).ok().unwrap();
        assert_eq!((code.op, count), (1, 2));
        let bad = r.fetch(0, 1, &mem, &mut warned).err().unwrap();
        assert_eq!(
            (bad.status, bad.extent),
            (Status::Malformed, 1),
            "past the PI"
        );
        mem.write_u64_le(SQ, header(7, 2).encode()).unwrap();
        let bad = r.fetch(0, 4, &mem, &mut warned).err().unwrap();
        assert_eq!(
            (bad.status, bad.extent),
            (Status::Malformed, 2),
            "wrong index"
        );
        let unmapped = VecMemory::new(0x10_0000, 0x10);
        let bad = r.fetch(0, 8, &unmapped, &mut warned).err().unwrap();
        assert_eq!((bad.status, bad.extent), (Status::DmaError, 4));
    }

    #[test]
    fn producer_index_and_cq_arm() {
        let mut r = ring();
        assert!(r.check_producer_index(8).is_ok());
        assert!(r.check_producer_index(9).is_err());
        assert_eq!(r.consumer_index(), 9, "resynchronised");
        let mut mem = VecMemory::new(CQ, 4 * CQE_SIZE);
        assert!(!r.cq_doorbell(arm(0)), "nothing pending: armed");
        assert_eq!(
            r.write_cqe(cqe(1), &mut mem),
            Ok(true),
            "the arm fires once"
        );
        assert_eq!(r.write_cqe(cqe(2), &mut mem), Ok(false));
        assert!(r.cq_doorbell(arm(1)), "one CQE unseen: due now");
        assert_eq!(r.state(), (9, 2, false));
        let first: [u8; CQE_SIZE] = mem.bytes()[..CQE_SIZE].try_into().unwrap();
        assert!(Cqe::decode(&first).owner, "first lap");
        let mut nowhere = VecMemory::new(0, 0);
        assert!(r.write_cqe(cqe(3), &mut nowhere).is_err());
        assert_eq!(r.state().1, 2, "a CQE not written is not produced");
    }

    #[test]
    fn delayed_completions_in_due_then_command_order() {
        let mut d = DelayedCqes::default();
        let s = Duration::from_secs;
        assert!(d.hold(s(2), cqe(1)));
        assert!(d.hold(s(1), cqe(2)));
        assert!(d.hold(s(1), cqe(3)));
        assert_eq!((d.len(), d.next_due()), (3, Some(s(1))));
        assert_eq!(d.take_due(s(0)), None);
        let order: Vec<u32> = std::iter::from_fn(|| d.take_due(s(5)).map(|c| c.start)).collect();
        assert_eq!(order, [2, 3, 1]);
        for i in 0..MAX_DELAYED {
            assert!(d.hold(s(1), cqe(i as u32)));
        }
        assert!(!d.hold(s(1), cqe(0)), "full");
    }

    thread_local! {
        /// Comparisons of held completions made by this thread.
        pub(super) static COMPARISONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    /// Holding and releasing many completions is not quadratic: a full set of due completions
    /// (the most a guest can build with `delay` rules) comes out in due, then command, order
    /// with O(n log n) comparisons (a scan per completion would make 65536^2 / 2).
    #[test]
    fn many_delayed_completions_come_out_in_order_quickly() {
        let mut d = DelayedCqes::default();
        let n = MAX_DELAYED as u32;
        COMPARISONS.with(|c| c.set(0));
        for i in 0..n {
            // Due times out of order, several completions per due time.
            let due = Duration::from_millis(u64::from((i * 7919) % 1000));
            assert!(d.hold(due, cqe(i)));
        }
        assert_eq!(d.next_due(), Some(Duration::ZERO));
        assert_eq!(d.take_due(Duration::ZERO).map(|c| c.start), Some(0));
        let mut last = (Duration::ZERO, 0u32);
        let mut count = 1;
        while let Some(c) = d.take_due(Duration::from_secs(1)) {
            let due = Duration::from_millis(u64::from((c.start * 7919) % 1000));
            assert!((due, c.start) > last, "{:?} after {last:?}", (due, c.start));
            last = (due, c.start);
            count += 1;
        }
        assert_eq!((count, d.len()), (n, 0));
        let comparisons = COMPARISONS.with(|c| c.get());
        // log2(65536) = 16: a heap makes at most about 2 log2(n) per push and pop.
        assert!(
            comparisons < u64::from(n) * 2 * 2 * 16,
            "{comparisons} comparisons for {n} completions"
        );
    }
}
