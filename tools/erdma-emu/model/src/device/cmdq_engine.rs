// SPDX-License-Identifier: GPL-2.0

//! The command queue engine (erdma_rs_hw 3) and the COMMON commands it executes; the CMDQ EQE
//! it posts on an armed CMDQ CQ goes through [`crate::eq::EventQueues`]. The rings (fetching,
//! CQEs, the CQ arm) and the delayed completions are the `cmdq_ring` part; this drives them.
//! Fetching and completing commands (with the fault rules and delayed completions) is
//! `CmdEngine`, which borrows only those parts of the device; the device executes each command
//! it fetched (the handler table, [`Device::execute`]).
//!
//! # Fetching
//!
//! A CMDQ_SQ_DB write names the new producer index (WQEBBs, 16 bits). The device consumes every
//! command between its consumer index and that PI, in order:
//!
//! 1. Read the 8-byte header at the consumer index. Its WQEBB count (bits 54:52, plus one) gives
//!    the command's extent.
//! 2. A malformed header completes the command with [`Status::Malformed`] and the device moves
//!    on: a count above 4 (the extent is then the count, capped at the PI), a command that runs
//!    past the PI (extent: up to the PI), or a header index that is not `start + count` (extent:
//!    the count).
//! 3. Fault rules may fail the command (not executed) or delay its completion (executed now).
//! 4. The command is executed by the handler its `(sub-module, opcode)` selects in
//!    [`Device::execute`]; unknown and not-yet-modelled commands are [`Status::Unsupported`], and
//!    so are the RoCEv2-only commands (SET_GID, CREATE_AH, DESTROY_AH) on an iWARP function.
//! 5. A 32-byte CQE goes to the CMDQ CQ at the device's producer index; its dword 1 is the
//!    command's start index. If the CMDQ CQ is armed, an EQE goes to the CMDQ EQ and the CQ is
//!    disarmed (one event per arm); the EQ raises vector 0 if it is armed.
//!
//! A PI more than the ring depth ahead of the consumer index cannot be right: it is logged and the
//! consumer index jumps to it (nothing is executed, nothing completes).
//!
//! # Failures that have no status to report them
//!
//! A CQE or EQE that cannot be written (ring outside guest memory, EQ full) is dropped with a
//! rate-limited warning: real hardware would raise a fatal error, and the driver will time out.

use std::time::Duration;

use super::cmdq_ring::{BadCommand, DelayedCqes};
use super::hostile::Doomed;
use super::{Device, Oddity, Protocol, Queues, WarnOnce};
use crate::clock::Clock;
use crate::cmdq::{
    self, AllocDb, Command, ConfDevice, ConfMtu, Cqe, CreateAh, CreateEq, DestroyAh, DestroyEq,
    FreeDb, GetStats, OpCode, Request, SetGid, Status, CQE_QTYPE_CMDQ, MAX_CMD_SIZE, WQEBB_SIZE,
};
use crate::control::{FaultAction, FaultRules};
use crate::eq::EventQueues;
use crate::extdb;
use crate::io::Io;
use crate::regs::CqDoorbell;
use crate::roce::{AhTable, GidTable};
use crate::wire;

/// MTUs CONF_MTU accepts (an Ethernet netdev's range).
pub const MTU_RANGE: core::ops::RangeInclusive<u32> = 68..=65535;

/// Most delayed completions one [`Device::run_due`] call writes.
pub const MAX_DUE_BATCH: usize = 256;

/// A command's result: `(resp0, resp1)` or a failure status.
type Outcome = Result<(u64, u64), Status>;

impl Device {
    // --------------------------------------------------------------------------------------------
    // CMDQ SQ
    // --------------------------------------------------------------------------------------------

    /// CMDQ_SQ_DB: process every command up to `pi`.
    pub(super) fn cmdq_sq_doorbell(&mut self, pi: u16, io: &mut Io<'_>) {
        let Some(q) = self.func.queues.as_mut() else {
            return;
        };
        if let Err(msg) = q.cmdq.check_producer_index(pi) {
            if self.warned.cmd_error() {
                log::warn!("{msg}");
            } else {
                log::debug!("{msg}");
            }
            return;
        }
        loop {
            let ci = match self.func.queues.as_ref() {
                Some(q) if q.cmdq.consumer_index() != pi => q.cmdq.consumer_index(),
                _ => break,
            };
            let extent = self.process_command(ci, pi.wrapping_sub(ci), io);
            if let Some(q) = self.func.queues.as_mut() {
                q.cmdq.set_consumer_index(ci.wrapping_add(extent));
            }
        }
    }

    /// Fetches, executes and completes the command at WQEBB index `start`; `remaining` (> 0)
    /// WQEBBs are left before the doorbell's PI. Returns the WQEBBs consumed (1..=remaining).
    fn process_command(&mut self, start: u16, remaining: u16, io: &mut Io<'_>) -> u16 {
        let (code, count, buf, delay) = match self.cmd_engine().fetch(start, remaining, io) {
            Fetched::Done(extent) => return extent,
            Fetched::Execute {
                code,
                count,
                buf,
                delay,
            } => (code, count, buf, delay),
        };
        let len = usize::from(count) * WQEBB_SIZE;
        let outcome = self.execute(code, &Request::new(&buf[..len]), io);
        let mut engine = self.cmd_engine();
        match outcome {
            Ok(_) => log::debug!("CMDQ {code} at {start:#x}: ok"),
            Err(status) => engine.log_cmd_error(start, code, status.code(), status.name()),
        }
        engine.complete(start, code, outcome, delay, io);
        count
    }

    /// The command engine's part of the device.
    fn cmd_engine(&mut self) -> CmdEngine<'_> {
        CmdEngine {
            queues: self.func.queues.as_mut(),
            delayed: &mut self.func.delayed,
            rules: &mut self.harness.rules,
            cmds: &mut self.harness.cmds,
            clock: &*self.clock,
            warned: &mut self.warned,
        }
    }

    /// The handler table: one arm per `(sub-module, opcode)`.
    fn execute(&mut self, code: OpCode, req: &Request<'_>, io: &mut Io<'_>) -> Outcome {
        let Some(cmd) = Command::from_code(code) else {
            return Err(Status::Unsupported);
        };
        match cmd {
            // A hostile adapter may report raw values; the model keeps using its checked caps.
            Command::QueryDevice => Ok(self
                .harness
                .hostile
                .caps
                .apply(self.config.caps.query_device())),
            Command::CreateEq => {
                let r = CreateEq::decode(req)?;
                self.eqs()?.create_ceq(&r, io.mem)?;
                if self.warned.note() {
                    log::info!(
                        "CEQ {} created: ring {:#x}, 2^{} entries, vector {}",
                        r.eqn,
                        r.ring,
                        r.depth_log2,
                        r.vector
                    );
                }
                Ok((0, 0))
            }
            Command::DestroyEq => {
                let r = DestroyEq::decode(req)?;
                self.eqs()?.destroy_ceq(&r)?;
                if self.warned.note() {
                    log::info!("CEQ {} destroyed", r.eqn);
                }
                Ok((0, 0))
            }
            Command::QueryFwInfo => Ok((u64::from(self.config.caps.fw_version), 0)),
            Command::ConfMtu => self.cmd_conf_mtu(ConfMtu::decode(req)?),
            Command::GetStats => self.cmd_get_stats(GetStats::decode(req)?, io),
            Command::ConfDevice => self.cmd_conf_device(ConfDevice::decode(req)?),
            Command::AllocDb => self.cmd_alloc_db(AllocDb::decode(req)?),
            Command::FreeDb => self.cmd_free_db(FreeDb::decode(req)?),
            // RoCEv2 addressing; the protocol is checked before anything is decoded.
            Command::SetGid => {
                self.require_roce()?;
                let r = SetGid::decode(req)?;
                self.func.gids.set_gid(&r)?;
                if self.warned.note() {
                    match r.op {
                        cmdq::GidOp::Add { net_type, gid } => log::info!(
                            "GID {} = {} ({net_type})",
                            r.index,
                            std::net::Ipv6Addr::from(gid)
                        ),
                        cmdq::GidOp::Delete => log::info!("GID {} deleted", r.index),
                    }
                }
                self.publish_gids();
                Ok((0, 0))
            }
            Command::CreateAh => {
                self.require_roce()?;
                let r = CreateAh::decode(req)?;
                self.func
                    .ahs
                    .create_ah(&r, &self.func.gids)
                    .map(|()| (0, 0))
            }
            Command::DestroyAh => {
                self.require_roce()?;
                self.func
                    .ahs
                    .destroy_ah(&DestroyAh::decode(req)?)
                    .map(|()| (0, 0))
            }
            // Data-path objects (device/objects.rs), on both protocols; MODIFY_QP has a layout
            // per protocol (device/iwarp.rs for iWARP).
            Command::CreateCq => self.cmd_create_cq(wire::CreateCq::decode(req)?, io),
            Command::DestroyCq => {
                let r = wire::U32Arg::decode(req)?;
                self.before_destroy(Doomed::Cq(r.0), io);
                self.cmd_destroy_cq(r)
            }
            Command::RegMr => self.cmd_reg_mr(wire::RegMr::decode(req)?, io),
            Command::DeregMr => self.cmd_dereg_mr(wire::DeregMr::decode(req)?),
            Command::CreateQp => self.cmd_create_qp(wire::CreateQp::decode(req)?, io),
            Command::DestroyQp => {
                let r = wire::U32Arg::decode(req)?;
                self.before_destroy(Doomed::Qp(r.0), io);
                self.data_path().cmd_destroy_qp(r)
            }
            Command::ModifyQp => match self.config.protocol {
                Protocol::RoceV2 => self
                    .data_path()
                    .cmd_modify_qp(wire::ModifyQpRoce::decode(req)?, io),
                Protocol::Iwarp => {
                    self.data_path()
                        .cmd_modify_qp_iwarp(wire::ModifyQpIwarp::decode(req)?, req, io)
                }
            },
            Command::QueryQp => self.cmd_query_qp(wire::U32Arg::decode(req)?),
            Command::Reflush => self
                .data_path()
                .cmd_reflush(wire::Reflush::decode(req)?, io),
            // Out-of-tree driver only.
            Command::QueryQpc
            | Command::QueryCqc
            | Command::QueryEqc
            | Command::SetRetransNum
            | Command::SetExtAttr
            | Command::GetExtAttr => Err(Status::Unsupported),
        }
    }

    // --------------------------------------------------------------------------------------------
    // COMMON commands
    // --------------------------------------------------------------------------------------------

    /// The event queues CREATE_EQ and DESTROY_EQ change (once INIT latched the queues).
    fn eqs(&mut self) -> Result<&mut EventQueues, Status> {
        Ok(&mut self.func.queues.as_mut().ok_or(Status::InvalidParam)?.eqs)
    }

    fn cmd_conf_mtu(&mut self, r: ConfMtu) -> Outcome {
        if !MTU_RANGE.contains(&r.mtu) {
            return Err(Status::InvalidParam);
        }
        self.func.mtu = r.mtu;
        if self.warned.note() {
            log::info!("MTU {}", r.mtu);
        }
        Ok((0, 0))
    }

    fn cmd_get_stats(&mut self, r: GetStats, io: &mut Io<'_>) -> Outcome {
        if (r.len as usize) < cmdq::STATS_LEN {
            return Err(Status::InvalidParam);
        }
        let buf = cmdq::stats_buffer(r.index, &self.harness.stats);
        io.mem.write(r.addr, &buf).map_err(|_| Status::DmaError)?;
        Ok((0, 0))
    }

    fn cmd_conf_device(&mut self, r: ConfDevice) -> Outcome {
        let shift = if r.page_size_enable {
            r.page_shift
        } else {
            extdb::DEFAULT_PAGE_SHIFT
        };
        self.func.dbs.set_page_shift(shift)?;
        if self.warned.note() {
            log::info!("doorbell page shift {shift}");
        }
        Ok((0, 0))
    }

    fn cmd_alloc_db(&mut self, r: AllocDb) -> Outcome {
        if !self.config.caps.extend_db {
            return Err(Status::Unsupported);
        }
        if let Some([sq, cdb, rdb]) = self.alloc_db_lie(r.enable)? {
            if self.warned.note() {
                log::info!(
                    "ALLOC_DB: SQ page {sq}, CDB page {cdb}, RDB page {rdb} (hostile: a lie)"
                );
            }
            return Ok((cmdq::alloc_db_resp0(sq, cdb, rdb), 0));
        }
        let [sq, cdb, rdb] = self.func.dbs.alloc(r.enable)?;
        let (sq, cdb, rdb) = (sq.unwrap_or(0), cdb.unwrap_or(0), rdb.unwrap_or(0));
        log::debug!("ALLOC_DB: SQ page {sq}, CDB page {cdb}, RDB page {rdb}");
        Ok((cmdq::alloc_db_resp0(sq, cdb, rdb), 0))
    }

    fn cmd_free_db(&mut self, r: FreeDb) -> Outcome {
        if !self.config.caps.extend_db {
            return Err(Status::Unsupported);
        }
        let pages: Vec<u16> = r.pages().map(|(_, p)| p).collect();
        self.func.dbs.free(&pages)?;
        Ok((0, 0))
    }

    // --------------------------------------------------------------------------------------------
    // RDMA commands: RoCEv2 addressing
    // --------------------------------------------------------------------------------------------

    /// SET_GID, CREATE_AH and DESTROY_AH exist on RoCEv2 functions only (an iWARP port has a
    /// single MAC-based GID and no AHs, §7.2, §9.1).
    fn require_roce(&self) -> Result<(), Status> {
        match self.config.protocol {
            Protocol::RoceV2 => Ok(()),
            Protocol::Iwarp => Err(Status::Unsupported),
        }
    }

    // --------------------------------------------------------------------------------------------
    // Completions
    // --------------------------------------------------------------------------------------------

    /// Writes a command completion that no command asked for, naming CMDQ SQ WQEBB `start`,
    /// with `status`, and signals it like a real one: the CMDQ EQE of an armed CMDQ CQ (control
    /// `cmd-cqe`). Fails before INIT and when the CMDQ CQ is not writable.
    pub(super) fn forge_cmd_cqe(
        &mut self,
        start: u32,
        status: u8,
        io: &mut Io<'_>,
    ) -> Result<(), String> {
        let Some(q) = self.func.queues.as_mut() else {
            return Err("device not initialized (no command queue)".into());
        };
        let cqe = Cqe {
            owner: false,
            opcode: 0,
            qtype: CQE_QTYPE_CMDQ,
            status,
            start,
            resp0: 0,
            resp1: 0,
        };
        let armed = q
            .cmdq
            .write_cqe(cqe, io.mem)
            .map_err(|e| format!("CMDQ CQ not writable: {e}"))?;
        if self.warned.note() {
            log::info!("CMDQ: forged completion naming WQEBB {start:#x}, status {status}");
        }
        if armed {
            self.cmd_engine().post_cmdq_eqe(io);
        }
        Ok(())
    }

    /// CMDQ_CQ_DB: record the CI; with ARM, the next CQE (or one already beyond the CI) produces
    /// an EQE.
    pub(super) fn cmdq_cq_doorbell(&mut self, db: CqDoorbell, io: &mut Io<'_>) {
        self.cmd_engine().cq_doorbell(db, io);
    }

    // --------------------------------------------------------------------------------------------
    // Delayed work
    // --------------------------------------------------------------------------------------------

    /// When the earliest delayed work is due (a delayed completion, or a QP's retransmission
    /// timer), on [`Device::clock`].
    pub fn next_deadline(&self) -> Option<Duration> {
        let delayed = self.func.delayed.next_due();
        match (delayed, self.func.rdma.next_retransmit()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// How long from now until [`Device::next_deadline`] (zero if it has passed).
    pub fn time_until_deadline(&self) -> Option<Duration> {
        let now = self.clock.now();
        self.next_deadline().map(|d| d.saturating_sub(now))
    }

    /// Writes the delayed completions that are due, earliest first (ties in command order), at
    /// most 256 (`MAX_DUE_BATCH`) per call, then fires the retransmission timers that are due.
    /// Returns how many of both. Each call does bounded work under the device lock: with more
    /// due, [`Device::time_until_deadline`] is zero and the caller comes back (after letting
    /// go of the lock).
    pub fn run_due(&mut self, io: &mut Io<'_>) -> usize {
        let now = self.clock.now();
        let mut n = 0;
        let mut engine = self.cmd_engine();
        while n < MAX_DUE_BATCH {
            let Some(cqe) = engine.delayed.take_due(now) else {
                break;
            };
            log::debug!(
                "CMDQ: delayed completion of the command at {:#x}",
                cqe.start
            );
            engine.write_cqe(cqe, io);
            n += 1;
        }
        n + self.data_path().run_retransmits(now, io)
    }

    // --------------------------------------------------------------------------------------------
    // Inspection
    // --------------------------------------------------------------------------------------------

    /// The last CONF_MTU value (0 before any).
    pub fn mtu(&self) -> u32 {
        self.func.mtu
    }

    /// The doorbell pages (ALLOC_DB state, page shift).
    pub fn db_pages(&self) -> &extdb::DbPages {
        &self.func.dbs
    }

    /// The GID table (SET_GID).
    pub fn gid_table(&self) -> &GidTable {
        &self.func.gids
    }

    /// The address handles (CREATE_AH / DESTROY_AH).
    pub fn address_handles(&self) -> &AhTable {
        &self.func.ahs
    }

    /// CMDQ state: `(SQ consumer index, CQ producer index, CQ armed)` (after INIT).
    pub fn cmdq_state(&self) -> Option<(u16, u32, bool)> {
        self.func.queues.as_ref().map(|q| q.cmdq.state())
    }

    /// Delayed completions not yet written.
    pub fn delayed_completions(&self) -> usize {
        self.func.delayed.len()
    }
}

/// The command engine's part of the device: the CMDQ rings (and the EQs a completion posts
/// to), the completions held back by `delay` rules, the fault rules and the command count. It
/// fetches a command and completes it; the device executes it (`Device::execute`).
struct CmdEngine<'a> {
    queues: Option<&'a mut Queues>,
    delayed: &'a mut DelayedCqes,
    rules: &'a mut FaultRules,
    /// Commands fetched from the CMDQ.
    cmds: &'a mut u64,
    clock: &'a dyn Clock,
    warned: &'a mut WarnOnce,
}

/// What fetching a command came to.
enum Fetched {
    /// Completed already (malformed, or failed by a fault rule): the WQEBBs it took.
    Done(u16),
    /// To be executed: its code, WQEBBs and bytes, and the delay of its completion (a fault
    /// rule).
    Execute {
        code: OpCode,
        count: u16,
        buf: [u8; MAX_CMD_SIZE],
        delay: Option<Duration>,
    },
}

impl CmdEngine<'_> {
    /// Fetches the command at WQEBB index `start` (`remaining` WQEBBs before the doorbell's
    /// PI) and applies the fault rules; completes it if it goes no further.
    fn fetch(&mut self, start: u16, remaining: u16, io: &mut Io<'_>) -> Fetched {
        *self.cmds = self.cmds.wrapping_add(1);
        let (code, count, buf) = match self.read(start, remaining, io) {
            Ok(fetched) => fetched,
            Err(bad) => {
                self.log_cmd_error(start, bad.code, bad.status.code(), &bad.why);
                self.complete(start, bad.code, Err(bad.status), None, io);
                return Fetched::Done(bad.extent);
            }
        };
        let delay = match self.rules.check(code) {
            Some(FaultAction::Fail(status)) => {
                log::debug!("CMDQ {code} at {start:#x}: failed with status {status} (fault rule)");
                self.complete_status(start, code, status, (0, 0), None, io);
                return Fetched::Done(count);
            }
            Some(FaultAction::Delay(d)) => Some(d),
            None => None,
        };
        Fetched::Execute {
            code,
            count,
            buf,
            delay,
        }
    }

    /// Reads and checks the command at `start`: its code, WQEBB count and bytes.
    fn read(
        &mut self,
        start: u16,
        remaining: u16,
        io: &mut Io<'_>,
    ) -> Result<(OpCode, u16, [u8; MAX_CMD_SIZE]), BadCommand> {
        match self.queues.as_deref() {
            Some(q) => q.cmdq.fetch(start, remaining, io.mem, self.warned),
            None => Err(BadCommand::new(
                OpCode { sub: 0, op: 0 },
                Status::DmaError,
                "",
                remaining,
            )),
        }
    }

    fn log_cmd_error(&mut self, start: u16, code: OpCode, status: u8, why: &str) {
        let msg = format!(
            "CMDQ {code} at {start:#x} failed with status {}: {why}",
            cmdq::Status::describe(status)
        );
        if self.warned.cmd_error() {
            log::warn!("{msg}");
        } else {
            log::debug!("{msg}");
        }
    }

    /// Completes the command at `start` now, or after `delay`.
    fn complete(
        &mut self,
        start: u16,
        code: OpCode,
        outcome: Outcome,
        delay: Option<Duration>,
        io: &mut Io<'_>,
    ) {
        let (status, resp) = match outcome {
            Ok(resp) => (Status::Success.code(), resp),
            Err(s) => (s.code(), (0, 0)),
        };
        self.complete_status(start, code, status, resp, delay, io);
    }

    fn complete_status(
        &mut self,
        start: u16,
        code: OpCode,
        status: u8,
        (resp0, resp1): (u64, u64),
        delay: Option<Duration>,
        io: &mut Io<'_>,
    ) {
        let cqe = Cqe {
            owner: false,
            opcode: code.op,
            qtype: CQE_QTYPE_CMDQ,
            status,
            start: start.into(),
            resp0,
            resp1,
        };
        match delay {
            Some(d) => {
                let due = self.clock.now().saturating_add(d);
                if self.delayed.hold(due, cqe) {
                    log::debug!("CMDQ {code} at {start:#x}: completion delayed by {d:?}");
                } else {
                    if self.warned.cmd_error() {
                        log::warn!("too many delayed completions; completing {code} at once");
                    }
                    self.write_cqe(cqe, io);
                }
            }
            None => self.write_cqe(cqe, io),
        }
    }

    /// Writes a CQE (owner bit from the producer index) into the CMDQ CQ and, if the CQ is
    /// armed, an EQE into the CMDQ EQ.
    fn write_cqe(&mut self, cqe: Cqe, io: &mut Io<'_>) {
        let Some(q) = self.queues.as_deref_mut() else {
            return;
        };
        match q.cmdq.write_cqe(cqe, io.mem) {
            Ok(true) => self.post_cmdq_eqe(io),
            Ok(false) => {}
            Err(e) => {
                if self.warned.first(Oddity::CqeWrite, 0) {
                    log::warn!("CMDQ CQE for the command at {:#x} dropped: {e}", cqe.start);
                }
            }
        }
    }

    fn post_cmdq_eqe(&mut self, io: &mut Io<'_>) {
        let Some(q) = self.queues.as_deref_mut() else {
            return;
        };
        if let Err(e) = q.eqs.post_cmdq_eqe(io) {
            if self.warned.first(Oddity::EqPost, 0) {
                log::warn!("CMDQ EQE dropped: {e}");
            }
        }
    }

    /// CMDQ_CQ_DB: record the CI; with ARM, the next CQE (or one already beyond the CI) produces
    /// an EQE.
    fn cq_doorbell(&mut self, db: CqDoorbell, io: &mut Io<'_>) {
        if db.cqn != 0 && self.warned.first(Oddity::CqDoorbellCqn, 0) {
            log::warn!(
                "CMDQ_CQ_DB with CQN {} (expected 0), taken as the CMDQ CQ",
                db.cqn
            );
        }
        let Some(q) = self.queues.as_deref_mut() else {
            return;
        };
        if q.cmdq.cq_doorbell(db) {
            self.post_cmdq_eqe(io);
        }
    }
}
