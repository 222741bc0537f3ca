// SPDX-License-Identifier: GPL-2.0

//! The register page's state (erdma_rs_hw 2): what the driver programmed for the admin queues,
//! DEV_STATUS, the admin queues latched by `DEV_CTRL.INIT` (or why it was refused), and the
//! doorbells (staged 4-byte halves, last values, writes into the doorbell spaces).
//!
//! [`Registers`] stores and returns register values and says what a write asks of the rest of
//! the device ([`RegWrite`]: DEV_CTRL bits, a complete doorbell); it does not reach into the
//! device. `DEV_CTRL.RESET` returns it to power-on with the rest of the function. [`spans`]
//! splits an access into the registers and holes it covers, and each [`Span`] moves its bytes.

use std::fmt;

use super::{DeviceConfig, WarnOnce};
use crate::regs::{self, AdminQueue, Bar0Area, Doorbell, Reg, RegSlot};
use crate::stats::TrafficCounters;

/// One admin ring as latched by `DEV_CTRL.INIT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingConfig {
    /// DMA address of the ring (aligned to the entry size).
    pub addr: u64,
    /// Number of entries (WQEBBs for the CMDQ SQ): a power of two.
    pub depth: u32,
    /// DMA address of the doorbell record (8-byte aligned).
    pub dbrec: u64,
}

/// The admin queues latched by `DEV_CTRL.INIT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdminQueues {
    /// CMDQ submission queue (32-byte WQEBBs).
    pub cmdq_sq: RingConfig,
    /// CMDQ completion queue (32-byte CQEs, depth = CMDQ_DEPTH).
    pub cmdq_cq: RingConfig,
    /// CMDQ event queue (16-byte EQEs).
    pub cmdq_eq: RingConfig,
    /// Asynchronous event queue (16-byte EQEs).
    pub aeq: RingConfig,
}

impl AdminQueues {
    /// The ring of queue `q`.
    pub fn get(&self, q: AdminQueue) -> &RingConfig {
        match q {
            AdminQueue::CmdqSq => &self.cmdq_sq,
            AdminQueue::CmdqCq => &self.cmdq_cq,
            AdminQueue::CmdqEq => &self.cmdq_eq,
            AdminQueue::Aeq => &self.aeq,
        }
    }
}

/// Why `DEV_CTRL.INIT` was refused: one programmed register holds an unusable value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitProblem {
    /// The offending register (for a ring address, its `_L` half).
    pub reg: Reg,
    /// The programmed value (for a ring address, both halves combined).
    pub value: u64,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for InitProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reg {
            Reg::RingAddrL(q) => write!(f, "{}:{}", Reg::RingAddrH(q), self.reg)?,
            reg => write!(f, "{reg}")?,
        }
        write!(f, " = {:#x}: {}", self.value, self.reason)
    }
}

/// The last write into a doorbell space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DbSpaceWrite {
    /// Which doorbell space.
    pub area: Bar0Area,
    /// BAR0 offset of the write.
    pub offset: u64,
    /// Length of the write in bytes.
    pub len: usize,
    /// The first (up to) 8 bytes written, little-endian.
    pub value: u64,
}

/// The admin queue registers as programmed (readable back, reset 0).
#[derive(Clone, Debug, Default)]
struct Programmed {
    ring_addr: [u64; 4],
    cmdq_depth: u32,
    cmdq_eq_depth: u32,
    aeq_depth: u32,
    dbrec: [u64; 4],
}

impl Programmed {
    fn depth_reg(q: AdminQueue) -> Reg {
        match q {
            AdminQueue::CmdqSq | AdminQueue::CmdqCq => Reg::CmdqDepth,
            AdminQueue::CmdqEq => Reg::CmdqEqDepth,
            AdminQueue::Aeq => Reg::AeqDepth,
        }
    }

    fn depth(&self, q: AdminQueue) -> u32 {
        match q {
            AdminQueue::CmdqSq | AdminQueue::CmdqCq => self.cmdq_depth,
            AdminQueue::CmdqEq => self.cmdq_eq_depth,
            AdminQueue::Aeq => self.aeq_depth,
        }
    }

    /// The admin queues, if everything programmed is usable.
    fn validate(&self) -> Result<AdminQueues, Vec<InitProblem>> {
        let mut problems = Vec::new();
        let mut ring = |q: AdminQueue| {
            let (entry, min_depth) = match q {
                AdminQueue::CmdqSq => (regs::CMDQ_WQEBB_SIZE, regs::CMDQ_WQEBBS_PER_CMD),
                AdminQueue::CmdqCq => (regs::CMDQ_CQE_SIZE, regs::CMDQ_WQEBBS_PER_CMD),
                AdminQueue::CmdqEq | AdminQueue::Aeq => (regs::EQE_SIZE, 1),
            };
            let addr = self.ring_addr[q.index()];
            let depth = self.depth(q);
            let dbrec = self.dbrec[q.index()];
            let mut bad = |reg, value, reason: String| {
                problems.push(InitProblem { reg, value, reason });
            };
            if addr == 0 {
                bad(Reg::RingAddrL(q), addr, "ring address is 0".into());
            } else if addr % entry != 0 {
                bad(
                    Reg::RingAddrL(q),
                    addr,
                    format!("ring address not aligned to the {entry}-byte entry size"),
                );
            }
            let depth_ok =
                depth.is_power_of_two() && (min_depth..=regs::MAX_RING_DEPTH).contains(&depth);
            // The CMDQ CQ has no depth register of its own: CMDQ_DEPTH is reported once, for the SQ.
            if !depth_ok && q != AdminQueue::CmdqCq {
                bad(
                    Self::depth_reg(q),
                    depth.into(),
                    format!(
                        "depth must be a power of two in {min_depth}..={}",
                        regs::MAX_RING_DEPTH
                    ),
                );
            }
            if depth_ok && addr.checked_add(u64::from(depth) * entry).is_none() {
                bad(
                    Reg::RingAddrL(q),
                    addr,
                    "ring wraps the 64-bit address space".into(),
                );
            }
            if dbrec == 0 {
                bad(
                    Reg::DbrecAddr(q),
                    dbrec,
                    "doorbell record address is 0".into(),
                );
            } else if dbrec % regs::DBREC_ALIGN != 0 {
                bad(
                    Reg::DbrecAddr(q),
                    dbrec,
                    format!(
                        "doorbell record address not {}-byte aligned",
                        regs::DBREC_ALIGN
                    ),
                );
            }
            RingConfig { addr, depth, dbrec }
        };
        let admin = AdminQueues {
            cmdq_sq: ring(AdminQueue::CmdqSq),
            cmdq_cq: ring(AdminQueue::CmdqCq),
            cmdq_eq: ring(AdminQueue::CmdqEq),
            aeq: ring(AdminQueue::Aeq),
        };
        if problems.is_empty() {
            Ok(admin)
        } else {
            Err(problems)
        }
    }
}

/// What a register write asks of the device beyond storing its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RegWrite {
    /// Stored; nothing else to do.
    Stored,
    /// The register is read-only: the write is ignored.
    ReadOnly,
    /// DEV_CTRL: these bits were written.
    DevCtrl(u32),
    /// A doorbell is complete (its most significant byte was written): its 64-bit value.
    Doorbell(Doorbell, u64),
}

/// The register page's state. Everything here returns to power-on on `DEV_CTRL.RESET`.
#[derive(Clone, Debug)]
pub(super) struct Registers {
    programmed: Programmed,
    status: u32,
    admin: Option<AdminQueues>,
    init_problems: Vec<InitProblem>,
    db_last: [Option<u64>; Doorbell::COUNT],
    db_staged: [u64; Doorbell::COUNT],
    db_space_last: Option<DbSpaceWrite>,
    db_space_writes: u64,
}

impl Registers {
    /// Everything 0 or empty: DEV_STATUS reads 0.
    pub(super) fn power_on() -> Self {
        Registers {
            programmed: Programmed::default(),
            status: 0,
            admin: None,
            init_problems: Vec::new(),
            db_last: [None; Doorbell::COUNT],
            db_staged: [0; Doorbell::COUNT],
            db_space_last: None,
            db_space_writes: 0,
        }
    }

    /// The current value of a register (what a full-width read returns): the identity comes
    /// from `config`, the STATS registers from `stats`.
    pub(super) fn read(&self, reg: Reg, config: &DeviceConfig, stats: &TrafficCounters) -> u64 {
        let p = &self.programmed;
        let mac = config.mac.map(u64::from);
        match reg {
            Reg::Version => config.version.into(),
            Reg::DevProto => config.protocol.value().into(),
            Reg::DevCtrl => 0,
            Reg::DevStatus => self.status.into(),
            Reg::NetdevMacL => mac[2] << 24 | mac[3] << 16 | mac[4] << 8 | mac[5],
            Reg::NetdevMacH => mac[0] << 8 | mac[1],
            Reg::RingAddrL(q) => p.ring_addr[q.index()] & 0xffff_ffff,
            Reg::RingAddrH(q) => p.ring_addr[q.index()] >> 32,
            Reg::CmdqDepth => p.cmdq_depth.into(),
            Reg::CmdqEqDepth => p.cmdq_eq_depth.into(),
            Reg::AeqDepth => p.aeq_depth.into(),
            Reg::GrpNum => config.grp_num.into(),
            Reg::DbrecAddr(q) => p.dbrec[q.index()],
            Reg::Stats(n) => regs::STATS
                .get(usize::from(n))
                .map_or(0, |s| stats.get(s.counter)),
            // Doorbells are write-only.
            Reg::Doorbell(_) => 0,
        }
    }

    /// Writes the bytes selected by `mask` of `value` (both positioned within the register) to
    /// `reg`, and says what else the write asks for.
    pub(super) fn write(&mut self, reg: Reg, value: u64, mask: u64) -> RegWrite {
        let merge = |old: u64| (old & !mask) | (value & mask);
        let merge32 = |old: u32| merge(old.into()) as u32;
        let p = &mut self.programmed;
        match reg {
            Reg::Version
            | Reg::DevProto
            | Reg::DevStatus
            | Reg::NetdevMacL
            | Reg::NetdevMacH
            | Reg::GrpNum
            | Reg::Stats(_) => return RegWrite::ReadOnly,
            Reg::DevCtrl => return RegWrite::DevCtrl((value & mask) as u32),
            Reg::RingAddrL(q) => {
                let a = &mut p.ring_addr[q.index()];
                *a = (*a & !0xffff_ffff) | u64::from(merge32(*a as u32));
            }
            Reg::RingAddrH(q) => {
                let a = &mut p.ring_addr[q.index()];
                *a = (*a & 0xffff_ffff) | u64::from(merge32((*a >> 32) as u32)) << 32;
            }
            Reg::CmdqDepth => p.cmdq_depth = merge32(p.cmdq_depth),
            Reg::CmdqEqDepth => p.cmdq_eq_depth = merge32(p.cmdq_eq_depth),
            Reg::AeqDepth => p.aeq_depth = merge32(p.aeq_depth),
            Reg::DbrecAddr(q) => p.dbrec[q.index()] = merge(p.dbrec[q.index()]),
            Reg::Doorbell(db) => {
                let staged = &mut self.db_staged[db.index()];
                *staged = merge(*staged);
                if mask >> 56 != 0 {
                    return RegWrite::Doorbell(db, std::mem::take(staged));
                }
            }
        }
        RegWrite::Stored
    }

    /// The DEV_STATUS register.
    pub(super) fn status(&self) -> u32 {
        self.status
    }

    /// Whether `DEV_STATUS.INIT_DONE` is set.
    pub(super) fn initialized(&self) -> bool {
        self.status & regs::DEV_STATUS_INIT_DONE != 0
    }

    /// DEV_STATUS after `DEV_CTRL.RESET`: `RESET_DONE` only.
    pub(super) fn set_reset_done(&mut self) {
        self.status = regs::DEV_STATUS_RESET_DONE;
    }

    /// `DEV_CTRL.INIT`: latches the admin queues if what was programmed is usable (and sets
    /// `INIT_DONE`), or records why not. Returns the latched queues.
    pub(super) fn latch_admin(&mut self, warned: &mut WarnOnce) -> Option<AdminQueues> {
        match self.programmed.validate() {
            Ok(admin) => {
                let level = if warned.note() {
                    log::Level::Info
                } else {
                    log::Level::Debug
                };
                log::log!(
                    level,
                    "initialized: CMDQ SQ {:#x}/{} CQ {:#x} EQ {:#x}/{}, AEQ {:#x}/{}",
                    admin.cmdq_sq.addr,
                    admin.cmdq_sq.depth,
                    admin.cmdq_cq.addr,
                    admin.cmdq_eq.addr,
                    admin.cmdq_eq.depth,
                    admin.aeq.addr,
                    admin.aeq.depth
                );
                self.admin = Some(admin);
                self.init_problems.clear();
                self.status |= regs::DEV_STATUS_INIT_DONE;
                Some(admin)
            }
            Err(problems) => {
                let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
                let level = if warned.cmd_error() {
                    log::Level::Warn
                } else {
                    log::Level::Debug
                };
                log::log!(
                    level,
                    "DEV_CTRL.INIT refused, INIT_DONE stays 0: {}",
                    list.join("; ")
                );
                self.init_problems = problems;
                None
            }
        }
    }

    /// The admin queues latched by the last successful `DEV_CTRL.INIT`, if any.
    pub(super) fn admin(&self) -> Option<&AdminQueues> {
        self.admin.as_ref()
    }

    /// Why the last `DEV_CTRL.INIT` was refused (empty if it was not).
    pub(super) fn init_problems(&self) -> &[InitProblem] {
        &self.init_problems
    }

    /// Records the complete value written to doorbell `db`.
    pub(super) fn record_doorbell(&mut self, db: Doorbell, value: u64) {
        self.db_last[db.index()] = Some(value);
    }

    /// The last value written to doorbell `db`.
    pub(super) fn last_doorbell(&self, db: Doorbell) -> Option<u64> {
        self.db_last[db.index()]
    }

    /// Records a write into a doorbell space.
    pub(super) fn record_db_space_write(&mut self, write: DbSpaceWrite) {
        self.db_space_last = Some(write);
        self.db_space_writes = self.db_space_writes.wrapping_add(1);
    }

    /// The last write into a doorbell space.
    pub(super) fn last_db_space_write(&self) -> Option<DbSpaceWrite> {
        self.db_space_last
    }

    /// Number of writes into the doorbell spaces.
    pub(super) fn db_space_writes(&self) -> u64 {
        self.db_space_writes
    }
}

/// One piece of an access to the register page, which is split at register boundaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Span {
    /// Bytes `start..stop` of BAR0, inside the register `slot`.
    Reg {
        slot: RegSlot,
        start: u64,
        stop: u64,
    },
    /// Bytes of the 4-byte hole at `dword`, which holds no register.
    Hole { dword: u64 },
}

/// The pieces of the access of `len` bytes at `offset` (inside the register page), in order.
pub(super) fn spans(offset: u64, len: usize) -> impl Iterator<Item = Span> {
    let end = offset + len as u64;
    let mut a = offset;
    std::iter::from_fn(move || {
        if a >= end {
            return None;
        }
        Some(match regs::decode(a) {
            Some(slot) => {
                let (start, stop) = (a, end.min(slot.base + slot.width));
                a = stop;
                Span::Reg { slot, start, stop }
            }
            None => {
                let dword = a & !3;
                a = end.min(dword + 4);
                Span::Hole { dword }
            }
        })
    })
}

impl Span {
    /// A read: copies the bytes of register value `value` this piece covers into `data`, the
    /// buffer of the access at `offset`.
    pub(super) fn read_into(&self, value: u64, data: &mut [u8], offset: u64) {
        if let Span::Reg { slot, start, stop } = *self {
            for x in start..stop {
                data[(x - offset) as usize] = (value >> (8 * (x - slot.base))) as u8;
            }
        }
    }

    /// A write: the bytes of `data` (the access at `offset`) this piece covers, positioned
    /// within its register, and the mask of the bytes written: `(value, mask)`.
    pub(super) fn written(&self, data: &[u8], offset: u64) -> (u64, u64) {
        let (mut value, mut mask) = (0u64, 0u64);
        if let Span::Reg { slot, start, stop } = *self {
            for x in start..stop {
                let shift = 8 * (x - slot.base);
                value |= u64::from(data[(x - offset) as usize]) << shift;
                mask |= 0xff << shift;
            }
        }
        (value, mask)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accesses_split_at_register_boundaries() {
        let version = regs::decode(regs::VERSION).unwrap();
        let got: Vec<Span> = spans(0x002, 8).collect();
        assert_eq!(
            got,
            [
                Span::Reg {
                    slot: version,
                    start: 0x002,
                    stop: 0x004
                },
                Span::Hole { dword: 0x004 },
                Span::Hole { dword: 0x008 },
            ]
        );
        let data = [0x11, 0x22, 0, 0, 0, 0, 0, 0];
        assert_eq!(got[0].written(&data, 0x002), (0x2211_0000, 0xffff_0000));
        assert_eq!(got[1].written(&data, 0x002), (0, 0), "a hole takes nothing");
        let mut out = [0u8; 8];
        got[0].read_into(0xaabb_ccdd, &mut out, 0x002);
        assert_eq!(out[..2], [0xbb, 0xaa], "bytes 3:2 of VERSION");
        let doorbell = regs::decode(regs::AEQ_DB).unwrap();
        let halves: Vec<Span> = spans(regs::AEQ_DB + 4, 4).collect();
        assert_eq!(
            halves,
            [Span::Reg {
                slot: doorbell,
                start: regs::AEQ_DB + 4,
                stop: regs::AEQ_DB + 8
            }],
            "the high half of a 64-bit register"
        );
        assert_eq!(spans(0x010, 0).count(), 0);
    }

    #[test]
    fn writes_say_what_they_ask_for() {
        let mut r = Registers::power_on();
        let config = DeviceConfig::default();
        let stats = TrafficCounters::default();
        let db = Reg::Doorbell(Doorbell::CmdqSq);
        // A doorbell in lo/hi halves fires with the combined value on the high half only.
        assert_eq!(r.write(db, 0x1234, 0xffff_ffff), RegWrite::Stored);
        assert_eq!(
            r.write(db, 0x0000_0001 << 32, 0xffff_ffff << 32),
            RegWrite::Doorbell(Doorbell::CmdqSq, 0x1_0000_1234)
        );
        // The staging is cleared after the doorbell.
        assert_eq!(
            r.write(db, 0x2 << 32, 0xffff_ffff << 32),
            RegWrite::Doorbell(Doorbell::CmdqSq, 0x2_0000_0000)
        );
        assert_eq!(r.read(db, &config, &stats), 0, "doorbells are write-only");
        assert_eq!(r.write(Reg::Version, 5, 0xff), RegWrite::ReadOnly);
        assert_eq!(r.read(Reg::Version, &config, &stats), 1);
        assert_eq!(
            r.write(Reg::DevCtrl, 0xff03, 0xff),
            RegWrite::DevCtrl(0x03),
            "only the written bytes"
        );
        let q = AdminQueue::Aeq;
        r.write(Reg::RingAddrL(q), 0x1000, 0xffff_ffff);
        r.write(Reg::RingAddrH(q), 0x2, 0xffff_ffff);
        assert_eq!(r.read(Reg::RingAddrL(q), &config, &stats), 0x1000);
        assert_eq!(r.read(Reg::RingAddrH(q), &config, &stats), 0x2);
        assert!(!r.initialized());
        assert_eq!(
            r.latch_admin(&mut WarnOnce::default()),
            None,
            "nothing else programmed"
        );
        assert!(!r.init_problems().is_empty());
        assert_eq!(r.status(), 0);
    }
}
