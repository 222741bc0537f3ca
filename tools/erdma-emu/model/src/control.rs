// SPDX-License-Identifier: GPL-2.0

//! The model's control language: fault injection and inspection, one command per line.
//!
//! The same commands arrive through the server's control socket (`devN <command>`), through the
//! opt-in BAR0 test page (guest tests with `devmem`), and from the command line (rules applied at
//! power-on). [`parse`] turns a line into a [`ControlCommand`]; [`crate::Device::control`] runs it
//! and returns the reply (`ok ...` / `error: ...` via [`format_reply`]).
//!
//! ```text
//! fail <op> status=<n> [count=<k>|forever] [skip=<j>]
//! delay <op> ms=<n> [count=<k>|forever] [skip=<j>]
//! refuse-init [on|off]
//! aeq type=<t> [subtype=<s>] data0=<d> [data1=<e>] [count=<k>]
//! ceq eqn=<n> cqn=<c> [count=<k>]
//! cqe cqn=<c> qpn=<q> queue=sq|rq index=<i> [status=<s>] [opcode=<o>] [byte_len=<n>]
//!     [count=<k>]
//! cmd-cqe index=<i> [status=<s>]
//! hostile caps <field>=<value> ...|max|zero|off
//! hostile alloc_db zero|beyond|kernel|off
//! hostile aeq-on-destroy on|off
//! hostile off
//! stats <counter>=<value> ...
//! clear
//! query mtu|page_shift|eqs|cmds|init_done|dbs|gids|ahs|ahns|rules|qps|cqs|mrs|objects|ud_drops|
//!       hostile|memory|stats|all
//! ```
//!
//! `<op>` is a command name (`COMMON.CREATE_EQ`, `RDMA.QUERY_DEVICE`, case-insensitive), a
//! numeric `sub.op` (`1.0`), or `any`. Numbers are decimal or `0x`-hex.
//!
//! Fault rules are checked in the order they were added. A rule that matches a command while it
//! still has matches to skip counts the command down and lets later rules look at it; the first
//! rule that fires decides the command's fate (fail: complete with the status without executing;
//! delay: execute now, complete later) and uses up one of its `count`. A destroy command a rule
//! fails is not executed: the object stays, and the device goes on writing its completions and
//! events.
//!
//! # A hostile adapter
//!
//! The rest make the adapter misbehave on purpose, so that tests can check that a driver
//! survives it. Each does bounded work and keeps the model's own state consistent:
//!
//! * `aeq ... count=<k>`, `ceq ... count=<k>` (k up to [`MAX_STORM`]): an event storm, k
//!   entries at once, as fast as the EQ takes them. An EQ full of entries the driver has not
//!   consumed refuses the rest (as for any event); the reply says how many went in
//!   (`posted=<n>`, with a count above 1).
//! * `cqe ...`: the adapter writes k (up to [`MAX_FORGED_CQES`], default 1) CQEs into CQ `<c>`
//!   at its producer index exactly as it writes real ones (owner bit of the lap, CQ overflow,
//!   the completion event of an armed CQ), naming any QPN and WQE index (unknown QPs, indices
//!   inside or past the posted work, repeated). `opcode` defaults to SEND for `sq`, RECEIVE for
//!   `rq`; `status` and `byte_len` to 0. Reply `written=<n>` (fewer than k: the CQ overflowed
//!   or broke). A CQN that names no CQ is an error.
//! * `cmd-cqe ...`: a command completion naming CMDQ SQ WQEBB `<i>` (a free slot, a command
//!   completed already, a made-up index) with `status` (default 0), signalled like a real one
//!   (the CMDQ EQ entry of an armed CMDQ CQ, vector 0).
//! * `hostile ...` settings ([`HostileSettings`]) last until `hostile off` or `clear` (or a
//!   client's disconnect, like every harness state): `caps` makes QUERY_DEVICE reply with raw
//!   field values ([`RawCaps`], up to each field's bit width) while the model keeps using its
//!   checked capabilities (several `caps` commands add up; `max`, `zero` set every field, `off`
//!   none); `alloc_db` makes ALLOC_DB reply with lies ([`AllocDbLie`]) and allocate nothing;
//!   `aeq-on-destroy on` makes DESTROY_QP and DESTROY_CQ of a live object first post an AEQE
//!   naming it (QP fatal, type 0 / CQ error, type 3), then destroy it.
//! * `query hostile`: `caps=<field>:<value>,...|off alloc_db=<mode> aeq_on_destroy=on|off`.

use core::fmt;
use std::time::Duration;

use crate::caps::{CapField, RawCaps};
use crate::cmdq::{Command, OpCode};
use crate::stats::Counter;
use crate::wire::{op, AeqEvent, CqeExtra, DataCqe, UdInfo, CQE_QTYPE_RQ, CQE_QTYPE_SQ};

/// Longest accepted delay: one hour (well beyond the drivers' 15 s command timeout).
pub const MAX_DELAY_MS: u64 = 3_600_000;
/// Most entries one `aeq` or `ceq` command posts (the deepest EQ the model accepts).
pub const MAX_STORM: u32 = 65536;
/// Most CQEs one `cqe` command writes.
pub const MAX_FORGED_CQES: u32 = 4096;

/// Which commands a rule applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpMatch {
    /// Every command.
    Any,
    /// Commands with this `(sub-module, opcode)`.
    Code(OpCode),
}

impl OpMatch {
    /// Parses `any`, a command name or `sub.op`.
    pub fn parse(s: &str) -> Result<Self, String> {
        if s.eq_ignore_ascii_case("any") {
            return Ok(OpMatch::Any);
        }
        if let Some(c) = Command::from_name(s) {
            return Ok(OpMatch::Code(c.code()));
        }
        let bad = || {
            format!(
                "unknown command {s:?} (expected a name like COMMON.CREATE_EQ or \
                 RDMA.QUERY_DEVICE, a number like 1.0, or any)"
            )
        };
        let (sub, op) = s.split_once('.').ok_or_else(bad)?;
        let sub = parse_number(sub).map_err(|_| bad())?;
        let op = parse_number(op).map_err(|_| bad())?;
        if sub > 3 || op > 255 {
            return Err(format!(
                "{s:?}: sub-module must be 0..=3 and opcode 0..=255"
            ));
        }
        Ok(OpMatch::Code(OpCode {
            sub: sub as u8,
            op: op as u8,
        }))
    }

    /// Whether a command with `code` matches.
    pub fn matches(&self, code: OpCode) -> bool {
        match self {
            OpMatch::Any => true,
            OpMatch::Code(c) => *c == code,
        }
    }
}

impl fmt::Display for OpMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpMatch::Any => f.write_str("any"),
            OpMatch::Code(c) => write!(f, "{c}"),
        }
    }
}

/// What a fault rule does to a command it fires on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultAction {
    /// Complete with this (non-zero) status without executing the command.
    Fail(u8),
    /// Execute the command, but write its completion this much later.
    Delay(Duration),
}

/// A fault rule: `fail` or `delay`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultRule {
    /// Which commands it fires on.
    pub when: MatchSpec,
    /// What it does.
    pub action: FaultAction,
}

/// Which and how many matching commands a rule fires on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatchSpec {
    /// The commands.
    pub op: OpMatch,
    /// Matching commands to let through before firing.
    pub skip: u32,
    /// Matching commands to fire on after that; `None` = forever.
    pub count: Option<u32>,
}

impl fmt::Display for FaultRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.action {
            FaultAction::Fail(s) => write!(f, "fail {} status={s}", self.when.op)?,
            FaultAction::Delay(d) => write!(f, "delay {} ms={}", self.when.op, d.as_millis())?,
        }
        match self.when.count {
            Some(c) => write!(f, " count={c}")?,
            None => f.write_str(" count=forever")?,
        }
        write!(f, " skip={}", self.when.skip)
    }
}

/// The fault rules of a device, in the order they were added.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultRules {
    rules: Vec<FaultRule>,
}

impl FaultRules {
    /// Most rules a device keeps (a guest or a runaway script cannot grow the list without bound).
    pub const LIMIT: usize = 256;

    /// Adds a rule at the end.
    pub fn add(&mut self, rule: FaultRule) -> Result<(), String> {
        if self.rules.len() >= Self::LIMIT {
            return Err(format!(
                "too many fault rules ({}); clear them first",
                Self::LIMIT
            ));
        }
        self.rules.push(rule);
        Ok(())
    }

    /// Drops every rule.
    pub fn clear(&mut self) {
        self.rules.clear();
    }

    /// Number of rules still active.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether no rule is active.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The active rules.
    pub fn rules(&self) -> &[FaultRule] {
        &self.rules
    }

    /// Consults the rules for a command with `code`: counts skips, and returns the action of the
    /// first rule that fires (removing it when its count is used up).
    pub fn check(&mut self, code: OpCode) -> Option<FaultAction> {
        let mut fired = None;
        for (i, rule) in self.rules.iter_mut().enumerate() {
            if !rule.when.op.matches(code) {
                continue;
            }
            if rule.when.skip > 0 {
                rule.when.skip -= 1;
                continue;
            }
            if let Some(c) = &mut rule.when.count {
                *c = c.saturating_sub(1);
            }
            fired = Some((i, rule.action));
            break;
        }
        let (i, action) = fired?;
        if self.rules[i].when.count == Some(0) {
            self.rules.remove(i);
        }
        Some(action)
    }
}

/// What a hostile ALLOC_DB replies instead of pages it allocates (`hostile alloc_db`). A lie
/// allocates nothing: a FREE_DB of its pages fails like that of any page not allocated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AllocDbLie {
    /// No lie: real pages (`off`).
    #[default]
    Off,
    /// Page 0, the register page, in every field (`zero`).
    Zero,
    /// The first pages beyond the end of BAR0 (`beyond`).
    Beyond,
    /// The page of the SQ doorbell every kernel QP shares (BAR0 0x5F000: index 95 in 4 KiB
    /// pages) in every field (`kernel`).
    Kernel,
}

impl AllocDbLie {
    const NAMES: [(&'static str, AllocDbLie); 4] = [
        ("off", AllocDbLie::Off),
        ("zero", AllocDbLie::Zero),
        ("beyond", AllocDbLie::Beyond),
        ("kernel", AllocDbLie::Kernel),
    ];

    /// The mode's name in the control language.
    pub fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, m)| *m == self)
            .map_or("?", |(n, _)| n)
    }

    fn parse(s: &str) -> Result<Self, String> {
        Self::NAMES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(s))
            .map(|&(_, m)| m)
            .ok_or_else(|| {
                format!(
                    "hostile alloc_db: unknown mode {s:?} (expected zero, beyond, kernel or off)"
                )
            })
    }
}

/// A `hostile` command: one setting of [`HostileSettings`] changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hostile {
    /// `hostile caps <field>=<value> ...|max|zero`: QUERY_DEVICE replies with these raw values
    /// (added to the fields set before).
    Caps(RawCaps),
    /// `hostile caps off`: QUERY_DEVICE tells the truth again.
    CapsOff,
    /// `hostile alloc_db <mode>`.
    AllocDb(AllocDbLie),
    /// `hostile aeq-on-destroy on|off`.
    AeqOnDestroy(bool),
    /// `hostile off`: every setting back to the truth.
    Off,
}

impl fmt::Display for Hostile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Hostile::Caps(raw) if *raw == RawCaps::max() => f.write_str("hostile caps max"),
            Hostile::Caps(raw) if *raw == RawCaps::zero() => f.write_str("hostile caps zero"),
            Hostile::Caps(raw) => {
                f.write_str("hostile caps")?;
                for (field, v) in raw.fields() {
                    write!(f, " {}={v}", field.name())?;
                }
                Ok(())
            }
            Hostile::CapsOff => f.write_str("hostile caps off"),
            Hostile::AllocDb(m) => write!(f, "hostile alloc_db {}", m.name()),
            Hostile::AeqOnDestroy(on) => {
                write!(
                    f,
                    "hostile aeq-on-destroy {}",
                    if *on { "on" } else { "off" }
                )
            }
            Hostile::Off => f.write_str("hostile off"),
        }
    }
}

/// How hostile a device is (harness state, like the fault rules): the lies it tells.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostileSettings {
    /// QUERY_DEVICE fields replaced by raw values.
    pub caps: RawCaps,
    /// What ALLOC_DB replies.
    pub alloc_db: AllocDbLie,
    /// DESTROY_QP and DESTROY_CQ post an AEQE naming the object first.
    pub aeq_on_destroy: bool,
}

impl HostileSettings {
    /// Applies a `hostile` command.
    pub fn apply(&mut self, h: Hostile) {
        match h {
            Hostile::Caps(raw) => self.caps.merge(&raw),
            Hostile::CapsOff => self.caps = RawCaps::default(),
            Hostile::AllocDb(m) => self.alloc_db = m,
            Hostile::AeqOnDestroy(on) => self.aeq_on_destroy = on,
            Hostile::Off => *self = HostileSettings::default(),
        }
    }

    /// Whether the device tells the truth.
    pub fn is_off(&self) -> bool {
        *self == HostileSettings::default()
    }

    /// The `query hostile` text:
    /// `caps=<field>:<value>,...|off alloc_db=<mode> aeq_on_destroy=on|off`.
    pub fn report(&self) -> String {
        let caps: Vec<String> = self
            .caps
            .fields()
            .map(|(f, v)| format!("{}:{v}", f.name()))
            .collect();
        let caps = if caps.is_empty() {
            "off".to_string()
        } else {
            caps.join(",")
        };
        format!(
            "caps={caps} alloc_db={} aeq_on_destroy={}",
            self.alloc_db.name(),
            if self.aeq_on_destroy { "on" } else { "off" }
        )
    }
}

/// `cqe ...`: CQEs the adapter writes into a CQ although no work completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForgedCqes {
    /// The CQ.
    pub cqn: u32,
    /// The entry (its owner bit is the CQ's business).
    pub cqe: DataCqe,
    /// How many copies, 1..=[`MAX_FORGED_CQES`].
    pub count: u32,
}

/// What `query` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Query {
    /// `mtu=<n>`: the last CONF_MTU (0 before any).
    Mtu,
    /// `page_shift=<n>`: the doorbell page shift (CONF_DEVICE, 12 by default).
    PageShift,
    /// `eqs=<n>,<n>...`: the live CEQ numbers.
    Eqs,
    /// `cmds=<n>`: commands fetched from the CMDQ since the client connected.
    Cmds,
    /// `init_done=0|1`.
    InitDone,
    /// `dbs=<n>`: live doorbell contexts (ALLOC_DB not yet freed).
    Dbs,
    /// `gids=<index>:<ipv4|ipv6>:<32 hex digits>,...`: the populated GID table entries, by
    /// index (`gids=` when none). About 40 bytes per entry: the test page's 255-byte reply holds
    /// six; the control socket has no limit. Not part of [`Query::All`].
    Gids,
    /// `ahs=<n>`: live address handles.
    Ahs,
    /// `ahns=<ahn>:<pdn>,...`: the live address handles by AHN, with their PDs (`ahns=` when
    /// none). Not part of [`Query::All`].
    Ahns,
    /// `rules=<n>`: active fault rules.
    Rules,
    /// `qps=<qpn>:<state>,...`: the live QPs by QPN (`qps=` when none). An iWARP QP shows its
    /// iWARP state and, from RTS on, its connection:
    /// `<qpn>:<state>:<src ip>:<src port>-<dst ip>:<dst port>:snd=<SND.NXT>:rcv=<RCV.NXT>:cookie=<peer cookie>`,
    /// with `:closed` once the stream ended. Not part of [`Query::All`].
    Qps,
    /// `cqs=<cqn>,...`: the live CQs. Not part of [`Query::All`].
    Cqs,
    /// `queues=q<qpn>:<state>:<sq pi>/<sq ci>:<unanswered>:<lost>:<held>,...
    /// c<cqn>:<pi>/<ci>:<a|->:<E|->,...`: the engine's view of every QP (SQ indices, requests
    /// without an answer, lost ones, incoming ones held for receive WQEs) and CQ (indices, armed,
    /// broken by an overflow), for a test that hangs. For an iWARP QP `<lost>` counts the stream
    /// messages waiting for retransmission, and the connection (as in [`Query::Qps`]) follows.
    /// Not part of [`Query::All`].
    Queues,
    /// `mrs=<stag>,...`: the registered MRs' STags in hex. Not part of [`Query::All`].
    Mrs,
    /// `objects=<qps>/<cqs>/<mrs>/<ahs>`: how many QPs, CQs, MRs and address handles exist
    /// (what leak checks compare). Not part of [`Query::All`].
    Objects,
    /// `ud_drops=<total> no_fabric=<n> unknown_gid=<n> ...`: UD datagrams dropped, by cause
    /// ([`crate::stats::UdDrop`]). Not part of [`Query::All`].
    UdDrops,
    /// `caps=<field>:<value>,...|off alloc_db=<mode> aeq_on_destroy=on|off`: the hostile
    /// settings ([`HostileSettings::report`]). Not part of [`Query::All`].
    Hostile,
    /// `rss=<bytes>|unknown hwm=<bytes>|unknown ceiling=<bytes> inflight=<bytes>
    /// held=<bytes>`: the serving process's resident memory now and at its peak (VmRSS, VmHWM;
    /// the server reads them, the model alone cannot), the documented ceiling of the model's
    /// memory per adapter ([`crate::device::MEMORY_CEILING`]), and what this function holds of
    /// its bounded buffers now (the port's window, requests held for receive WQEs). Not part
    /// of [`Query::All`].
    Memory,
    /// The 11 GET_STATS counters, `tx_reqs=<n> ...`.
    Stats,
    /// Everything above except [`Query::Gids`] (it would push the rest beyond the test page's
    /// reply): `mtu page_shift eqs cmds init_done dbs ahs rules stats`.
    All,
}

impl Query {
    const NAMES: [(&'static str, Query); 20] = [
        ("mtu", Query::Mtu),
        ("page_shift", Query::PageShift),
        ("eqs", Query::Eqs),
        ("cmds", Query::Cmds),
        ("init_done", Query::InitDone),
        ("dbs", Query::Dbs),
        ("gids", Query::Gids),
        ("ahs", Query::Ahs),
        ("ahns", Query::Ahns),
        ("rules", Query::Rules),
        ("qps", Query::Qps),
        ("cqs", Query::Cqs),
        ("queues", Query::Queues),
        ("mrs", Query::Mrs),
        ("objects", Query::Objects),
        ("ud_drops", Query::UdDrops),
        ("hostile", Query::Hostile),
        ("memory", Query::Memory),
        ("stats", Query::Stats),
        ("all", Query::All),
    ];

    fn parse(s: &str) -> Result<Self, String> {
        Self::NAMES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(s))
            .map(|&(_, q)| q)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::NAMES.iter().map(|(n, _)| *n).collect();
                format!("query: unknown item {s:?} (expected {})", names.join(", "))
            })
    }
}

/// One parsed control command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlCommand {
    /// `fail ...` or `delay ...`: add a fault rule.
    Rule(FaultRule),
    /// `refuse-init [on|off]`: DEV_CTRL.INIT never sets INIT_DONE while on.
    RefuseInit(bool),
    /// `aeq ...`: post AEQEs now.
    Aeq {
        /// The event.
        ev: AeqEvent,
        /// How many copies, 1..=[`MAX_STORM`].
        count: u32,
    },
    /// `ceq eqn=<n> cqn=<c> [count=<k>]`: post CEQEs now.
    Ceq {
        /// The CEQ.
        eqn: u8,
        /// The CQN in the entry (20 bits).
        cqn: u32,
        /// How many copies, 1..=[`MAX_STORM`].
        count: u32,
    },
    /// `cqe ...`: write CQEs into a CQ now.
    Cqe(ForgedCqes),
    /// `cmd-cqe index=<i> [status=<s>]`: write a command completion now.
    CmdCqe {
        /// The CMDQ SQ WQEBB index it names (dword 1).
        index: u32,
        /// Its status.
        status: u8,
    },
    /// `hostile ...`: change a hostile setting.
    Hostile(Hostile),
    /// `stats name=value ...`: set traffic counters.
    Stats(Vec<(Counter, u64)>),
    /// `clear`: drop every fault rule, `refuse-init` and every hostile setting.
    Clear,
    /// `query <what>`.
    Query(Query),
    /// `fatal`: the function fails as on a fatal error of its own: it drops every queue and
    /// object, `DEV_STATUS` reads 0 (INIT_DONE clear), nothing is fetched, completed or
    /// signalled, until the driver resets it (`DEV_CTRL.RESET`).
    Fatal,
    /// `gone`: the function is gone, as if surprise-removed: BAR0 and BAR2 read all-ones,
    /// writes go nowhere, and it neither signals nor touches guest memory again, until a
    /// power-on reset of the whole function (a new VM). What a guest sees of a device model
    /// that died (QEMU's vfio-user proxy fails the accesses: all-ones), without the process
    /// dying.
    Gone,
    /// `die`: the process serving the adapters exits at once (SIGKILL), as if killed: every
    /// adapter it serves stops answering. For tests of a dead device; only through the
    /// control socket or a test page that was switched on.
    Die,
}

impl fmt::Display for Query {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = Self::NAMES
            .iter()
            .find(|(_, q)| q == self)
            .map_or("?", |(n, _)| n);
        f.write_str(name)
    }
}

impl fmt::Display for ControlCommand {
    /// The canonical text of the command ([`parse`] reads it back).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ControlCommand::Rule(r) => write!(f, "{r}"),
            ControlCommand::RefuseInit(on) => {
                write!(f, "refuse-init {}", if *on { "on" } else { "off" })
            }
            ControlCommand::Aeq { ev, count } => {
                write!(
                    f,
                    "aeq type={} subtype={} data0={:#x} data1={:#x}",
                    ev.ty, ev.subtype, ev.data0, ev.data1
                )?;
                write_count(f, *count)
            }
            ControlCommand::Ceq { eqn, cqn, count } => {
                write!(f, "ceq eqn={eqn} cqn={cqn:#x}")?;
                write_count(f, *count)
            }
            ControlCommand::Cqe(c) => write!(
                f,
                "cqe cqn={} qpn={} queue={} index={} status={} opcode={} byte_len={} count={}",
                c.cqn,
                c.cqe.qpn,
                if c.cqe.qtype == CQE_QTYPE_RQ {
                    "rq"
                } else {
                    "sq"
                },
                c.cqe.wqe_index,
                c.cqe.status,
                c.cqe.opcode,
                c.cqe.byte_len,
                c.count
            ),
            ControlCommand::CmdCqe { index, status } => {
                write!(f, "cmd-cqe index={index} status={status}")
            }
            ControlCommand::Hostile(h) => write!(f, "{h}"),
            ControlCommand::Stats(set) => {
                f.write_str("stats")?;
                for &(c, v) in set {
                    write!(f, " {}={v}", c.name())?;
                }
                Ok(())
            }
            ControlCommand::Clear => f.write_str("clear"),
            ControlCommand::Query(q) => write!(f, "query {q}"),
            ControlCommand::Fatal => f.write_str("fatal"),
            ControlCommand::Gone => f.write_str("gone"),
            ControlCommand::Die => f.write_str("die"),
        }
    }
}

impl ControlCommand {
    /// Whether the command makes sense before any client exists (command line): rules,
    /// `refuse-init` and `stats`.
    pub fn allowed_at_startup(&self) -> bool {
        matches!(
            self,
            ControlCommand::Rule(_) | ControlCommand::RefuseInit(_) | ControlCommand::Stats(_)
        )
    }
}

/// ` count=<k>` unless `count` is 1 (the default).
fn write_count(f: &mut fmt::Formatter<'_>, count: u32) -> fmt::Result {
    if count == 1 {
        Ok(())
    } else {
        write!(f, " count={count}")
    }
}

/// Parses a decimal or `0x`-hexadecimal number.
pub fn parse_number(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse::<u64>(),
    };
    r.map_err(|_| format!("{s:?} is not a number (decimal or 0x-hex)"))
}

/// `key=value` arguments, each key at most once, all consumed by the end.
struct Args<'a> {
    verb: &'a str,
    items: Vec<(&'a str, &'a str, bool)>,
}

impl<'a> Args<'a> {
    fn new(verb: &'a str, words: &[&'a str]) -> Result<Self, String> {
        let mut items: Vec<(&str, &str, bool)> = Vec::new();
        for w in words {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| format!("{verb}: {w:?} is not key=value"))?;
            if items.iter().any(|(key, _, _)| key.eq_ignore_ascii_case(k)) {
                return Err(format!("{verb}: {k}= given twice"));
            }
            items.push((k, v, false));
        }
        Ok(Args { verb, items })
    }

    fn raw(&mut self, key: &str) -> Option<&'a str> {
        let item = self
            .items
            .iter_mut()
            .find(|(k, _, _)| k.eq_ignore_ascii_case(key))?;
        item.2 = true;
        Some(item.1)
    }

    fn num(&mut self, key: &str, max: u64) -> Result<Option<u64>, String> {
        let verb = self.verb;
        match self.raw(key) {
            None => Ok(None),
            Some(v) => {
                let n = parse_number(v).map_err(|e| format!("{verb}: {key}: {e}"))?;
                if n > max {
                    return Err(format!("{verb}: {key}={v} is above the maximum {max}"));
                }
                Ok(Some(n))
            }
        }
    }

    fn required(&mut self, key: &str, max: u64) -> Result<u64, String> {
        let verb = self.verb;
        self.num(key, max)?
            .ok_or_else(|| format!("{verb}: {key}= is required"))
    }

    /// `count=<k>`: 1..=`max`, 1 when absent.
    fn count(&mut self, max: u32) -> Result<u32, String> {
        let verb = self.verb;
        match self.num("count", max.into())? {
            None => Ok(1),
            Some(0) => Err(format!("{verb}: count must be 1..={max}")),
            // CAST: at most `max`, a u32.
            Some(n) => Ok(n as u32),
        }
    }

    fn finish(self) -> Result<(), String> {
        match self.items.iter().find(|(_, _, used)| !used) {
            Some((k, _, _)) => Err(format!("{}: unknown argument {k}=", self.verb)),
            None => Ok(()),
        }
    }
}

fn parse_rule(verb: &str, words: &[&str]) -> Result<FaultRule, String> {
    let (op, rest) = words
        .split_first()
        .ok_or_else(|| format!("{verb}: which command? (e.g. {verb} COMMON.CREATE_EQ ...)"))?;
    let op = OpMatch::parse(op)?;
    let mut args = Args::new(verb, rest)?;
    let action = if verb == "fail" {
        let status = args.required("status", 255)?;
        if status == 0 {
            return Err("fail: status must be 1..=255 (0 is success)".into());
        }
        FaultAction::Fail(status as u8)
    } else {
        FaultAction::Delay(Duration::from_millis(args.required("ms", MAX_DELAY_MS)?))
    };
    let count = match args.raw("count") {
        Some(v) if v.eq_ignore_ascii_case("forever") => None,
        Some(v) => {
            let n = parse_number(v).map_err(|e| format!("{verb}: count: {e}"))?;
            if n == 0 || n > u64::from(u32::MAX) {
                return Err(format!(
                    "{verb}: count={v} must be 1..={} or forever",
                    u32::MAX
                ));
            }
            Some(n as u32)
        }
        None => Some(1),
    };
    let skip = args.num("skip", u32::MAX.into())?.unwrap_or(0) as u32;
    args.finish()?;
    Ok(FaultRule {
        when: MatchSpec { op, skip, count },
        action,
    })
}

/// `on` or `off`.
fn on_off(s: &str) -> Option<bool> {
    if s.eq_ignore_ascii_case("on") {
        Some(true)
    } else if s.eq_ignore_ascii_case("off") {
        Some(false)
    } else {
        None
    }
}

fn parse_hostile(words: &[&str]) -> Result<Hostile, String> {
    let usage = "hostile: expected caps, alloc_db, aeq-on-destroy or off";
    let Some((what, rest)) = words.split_first() else {
        return Err(usage.into());
    };
    match what.to_ascii_lowercase().replace('-', "_").as_str() {
        "off" if rest.is_empty() => Ok(Hostile::Off),
        "off" => Err("hostile off takes no arguments".into()),
        "caps" => parse_hostile_caps(rest),
        "alloc_db" => match rest {
            [mode] => AllocDbLie::parse(mode).map(Hostile::AllocDb),
            _ => Err("hostile alloc_db takes zero, beyond, kernel or off".into()),
        },
        "aeq_on_destroy" => match rest {
            [v] => on_off(v).map(Hostile::AeqOnDestroy),
            _ => None,
        }
        .ok_or_else(|| "hostile aeq-on-destroy takes on or off".into()),
        _ => Err(format!("{usage}, not {what:?}")),
    }
}

fn parse_hostile_caps(words: &[&str]) -> Result<Hostile, String> {
    let names: Vec<&str> = CapField::ALL.iter().map(|f| f.name()).collect();
    match words {
        [] => Err(format!(
            "hostile caps: give max, zero, off or field=value ... (fields: {})",
            names.join(", ")
        )),
        [w] if w.eq_ignore_ascii_case("max") => Ok(Hostile::Caps(RawCaps::max())),
        [w] if w.eq_ignore_ascii_case("zero") => Ok(Hostile::Caps(RawCaps::zero())),
        [w] if w.eq_ignore_ascii_case("off") => Ok(Hostile::CapsOff),
        _ => {
            let mut a = Args::new("hostile caps", words)?;
            let mut raw = RawCaps::default();
            for field in CapField::ALL {
                if let Some(v) = a.num(field.name(), field.max().into())? {
                    // CAST: at most the field's maximum, a u16.
                    raw.set(field, v as u16);
                }
            }
            a.finish()
                .map_err(|e| format!("{e} (fields: {})", names.join(", ")))?;
            Ok(Hostile::Caps(raw))
        }
    }
}

fn parse_cqe(words: &[&str]) -> Result<ForgedCqes, String> {
    let mut a = Args::new("cqe", words)?;
    let cqn = a.required("cqn", u32::MAX.into())? as u32;
    let qpn = a.required("qpn", u32::MAX.into())? as u32;
    let (qtype, default_opcode) = match a.raw("queue") {
        Some(q) if q.eq_ignore_ascii_case("sq") => (CQE_QTYPE_SQ, op::SEND),
        Some(q) if q.eq_ignore_ascii_case("rq") => (CQE_QTYPE_RQ, op::RECEIVE),
        Some(q) => return Err(format!("cqe: queue={q} must be sq or rq")),
        None => return Err("cqe: queue= is required (sq or rq)".into()),
    };
    let index = a.required("index", u32::MAX.into())? as u32;
    let status = a.num("status", 255)?.unwrap_or(0) as u8;
    let opcode = a.num("opcode", 255)?.map_or(default_opcode, |o| o as u8);
    let byte_len = a.num("byte_len", u32::MAX.into())?.unwrap_or(0) as u32;
    let count = a.count(MAX_FORGED_CQES)?;
    a.finish()?;
    Ok(ForgedCqes {
        cqn,
        cqe: DataCqe {
            owner: false,
            opcode,
            qtype,
            status,
            wqe_index: index,
            qpn,
            extra: CqeExtra::None,
            byte_len,
            ud: UdInfo::NONE,
        },
        count,
    })
}

/// Parses one command line (leading/trailing whitespace ignored).
pub fn parse(line: &str) -> Result<ControlCommand, String> {
    let words: Vec<&str> = line.split_ascii_whitespace().collect();
    let Some((&verb, rest)) = words.split_first() else {
        return Err("empty command".into());
    };
    let verb_lc = verb.to_ascii_lowercase();
    let no_args = |cmd: ControlCommand| {
        if rest.is_empty() {
            Ok(cmd)
        } else {
            Err(format!("{verb_lc} takes no arguments"))
        }
    };
    match verb_lc.as_str() {
        "fail" | "delay" => parse_rule(&verb_lc, rest).map(ControlCommand::Rule),
        "refuse-init" => match rest {
            [] => Ok(ControlCommand::RefuseInit(true)),
            [v] if v.eq_ignore_ascii_case("on") => Ok(ControlCommand::RefuseInit(true)),
            [v] if v.eq_ignore_ascii_case("off") => Ok(ControlCommand::RefuseInit(false)),
            _ => Err("refuse-init takes on or off".into()),
        },
        "aeq" => {
            let mut a = Args::new("aeq", rest)?;
            let ev = AeqEvent {
                ty: a.required("type", 255)? as u8,
                subtype: a.num("subtype", 255)?.unwrap_or(0) as u8,
                data0: a.required("data0", u32::MAX.into())? as u32,
                data1: a.num("data1", u32::MAX.into())?.unwrap_or(0) as u32,
            };
            let count = a.count(MAX_STORM)?;
            a.finish()?;
            Ok(ControlCommand::Aeq { ev, count })
        }
        "ceq" => {
            let mut a = Args::new("ceq", rest)?;
            let eqn = a.required("eqn", 255)? as u8;
            let cqn = a.required("cqn", 0xf_ffff)? as u32;
            let count = a.count(MAX_STORM)?;
            a.finish()?;
            Ok(ControlCommand::Ceq { eqn, cqn, count })
        }
        "cqe" => parse_cqe(rest).map(ControlCommand::Cqe),
        "cmd-cqe" => {
            let mut a = Args::new("cmd-cqe", rest)?;
            let index = a.required("index", u32::MAX.into())? as u32;
            let status = a.num("status", 255)?.unwrap_or(0) as u8;
            a.finish()?;
            Ok(ControlCommand::CmdCqe { index, status })
        }
        "hostile" => parse_hostile(rest).map(ControlCommand::Hostile),
        "stats" => {
            if rest.is_empty() {
                return Err("stats: give at least one counter=value".into());
            }
            let mut a = Args::new("stats", rest)?;
            let mut set = Vec::new();
            for c in Counter::ALL {
                let name = c.name();
                let with_cnt = format!("{name}_cnt");
                let v = match (a.num(name, u64::MAX)?, a.num(&with_cnt, u64::MAX)?) {
                    (Some(_), Some(_)) => {
                        return Err(format!("stats: {name} given twice"));
                    }
                    (v, w) => v.or(w),
                };
                if let Some(v) = v {
                    set.push((c, v));
                }
            }
            a.finish()
                .map_err(|e| format!("{e} (counters: {})", Counter::names().join(", ")))?;
            Ok(ControlCommand::Stats(set))
        }
        "clear" => no_args(ControlCommand::Clear),
        "fatal" => no_args(ControlCommand::Fatal),
        "gone" => no_args(ControlCommand::Gone),
        "die" => no_args(ControlCommand::Die),
        "query" => match rest {
            [what] => Query::parse(what).map(ControlCommand::Query),
            _ => Err("query takes one item (e.g. query all)".into()),
        },
        _ => Err(format!(
            "unknown command {verb:?} (expected fail, delay, refuse-init, aeq, ceq, cqe, \
             cmd-cqe, hostile, stats, clear, query, fatal, gone or die)"
        )),
    }
}

/// The reply line for a command's result: `ok`, `ok <text>` or `error: <message>`.
pub fn format_reply(result: &Result<String, String>) -> String {
    match result {
        Ok(s) if s.is_empty() => "ok".into(),
        Ok(s) => format!("ok {s}"),
        Err(e) => format!("error: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(line: &str) -> FaultRule {
        match parse(line).unwrap() {
            ControlCommand::Rule(r) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn rules_parse() {
        let r = rule("fail COMMON.CREATE_EQ status=2");
        assert_eq!(r.action, FaultAction::Fail(2));
        assert_eq!(
            r.when,
            MatchSpec {
                op: OpMatch::Code(OpCode { sub: 1, op: 0 }),
                skip: 0,
                count: Some(1)
            }
        );
        let r = rule("  FAIL rdma.query_device status=0xff count=3 skip=2 ");
        assert_eq!(r.action, FaultAction::Fail(255));
        assert_eq!((r.when.skip, r.when.count), (2, Some(3)));
        assert_eq!(
            r.to_string(),
            "fail RDMA.QUERY_DEVICE status=255 count=3 skip=2"
        );
        let r = rule("delay 1.4 ms=1500 count=forever");
        assert_eq!(r.action, FaultAction::Delay(Duration::from_millis(1500)));
        assert_eq!(r.when.op, OpMatch::Code(OpCode { sub: 1, op: 4 }));
        assert_eq!(r.when.count, None);
        assert_eq!(
            r.to_string(),
            "delay COMMON.GET_STATS ms=1500 count=forever skip=0"
        );
        assert_eq!(rule("delay any ms=0").when.op, OpMatch::Any);
        assert_eq!(
            rule("fail 3.255 status=1").when.op,
            OpMatch::Code(OpCode { sub: 3, op: 255 })
        );
    }

    #[test]
    fn other_commands_parse() {
        assert_eq!(parse("refuse-init"), Ok(ControlCommand::RefuseInit(true)));
        assert_eq!(
            parse("refuse-init OFF"),
            Ok(ControlCommand::RefuseInit(false))
        );
        assert_eq!(
            parse("aeq type=3 data0=0x10"),
            Ok(ControlCommand::Aeq {
                ev: AeqEvent {
                    ty: 3,
                    subtype: 0,
                    data0: 16,
                    data1: 0
                },
                count: 1
            })
        );
        assert_eq!(
            parse("aeq type=1 subtype=2 data0=3 data1=4"),
            Ok(ControlCommand::Aeq {
                ev: AeqEvent {
                    ty: 1,
                    subtype: 2,
                    data0: 3,
                    data1: 4
                },
                count: 1
            })
        );
        assert_eq!(
            parse("ceq eqn=1 cqn=0xfffff"),
            Ok(ControlCommand::Ceq {
                eqn: 1,
                cqn: 0xfffff,
                count: 1
            })
        );
        assert_eq!(
            parse("stats rx_bytes=5 tx_reqs_cnt=0x10"),
            Ok(ControlCommand::Stats(vec![
                (Counter::TxReqs, 16),
                (Counter::RxBytes, 5)
            ]))
        );
        assert_eq!(parse("clear"), Ok(ControlCommand::Clear));
        assert_eq!(parse("query EQS"), Ok(ControlCommand::Query(Query::Eqs)));
        assert_eq!(parse("query all"), Ok(ControlCommand::Query(Query::All)));
        assert_eq!(parse("query GIDs"), Ok(ControlCommand::Query(Query::Gids)));
        assert_eq!(parse("query ahs"), Ok(ControlCommand::Query(Query::Ahs)));
        assert_eq!(parse("query AHNS"), Ok(ControlCommand::Query(Query::Ahns)));
        assert_eq!(
            parse("query ud_drops"),
            Ok(ControlCommand::Query(Query::UdDrops))
        );
        assert!(parse("stats tx_reqs=1").unwrap().allowed_at_startup());
        assert!(!parse("query all").unwrap().allowed_at_startup());
    }

    #[test]
    fn bad_commands_are_errors() {
        for line in [
            "",
            "   ",
            "frobnicate",
            "fail",
            "fail COMMON.CREATE_EQ",
            "fail COMMON.CREATE_EQ status=0",
            "fail COMMON.CREATE_EQ status=256",
            "fail COMMON.NOPE status=1",
            "fail 4.0 status=1",
            "fail 1.256 status=1",
            "fail 1 status=1",
            "fail x.y status=1",
            "fail any status=1 count=0",
            "fail any status=1 count=-1",
            "fail any status=1 count=0x1_0000_0000",
            "fail any status=1 skip=4294967296",
            "fail any status=1 status=2",
            "fail any status=1 colour=red",
            "fail any status=1 junk",
            "delay any",
            "delay any ms=3600001",
            "refuse-init maybe",
            "refuse-init on off",
            "aeq data0=1",
            "aeq type=1",
            "aeq type=256 data0=1",
            "aeq type=1 data0=0x1_0000_0000",
            "ceq eqn=1",
            "ceq eqn=1 cqn=0x100000",
            "ceq eqn=256 cqn=1",
            "stats",
            "stats tx_reqs",
            "stats bogus=1",
            "stats tx_reqs=1 tx_reqs_cnt=2",
            "stats tx_reqs=x",
            "clear all",
            "query",
            "query mtu eqs",
            "query colour",
            "aeq type=1 data0=1 count=0",
            "aeq type=1 data0=1 count=65537",
            "ceq eqn=1 cqn=1 count=x",
            "cqe",
            "cqe qpn=1 queue=sq index=0",
            "cqe cqn=1 queue=sq index=0",
            "cqe cqn=1 qpn=1 index=0",
            "cqe cqn=1 qpn=1 queue=cq index=0",
            "cqe cqn=1 qpn=1 queue=sq",
            "cqe cqn=1 qpn=0x100000000 queue=sq index=0",
            "cqe cqn=1 qpn=1 queue=sq index=0 status=256",
            "cqe cqn=1 qpn=1 queue=sq index=0 opcode=256",
            "cqe cqn=1 qpn=1 queue=sq index=0 byte_len=0x100000000",
            "cqe cqn=1 qpn=1 queue=sq index=0 count=0",
            "cqe cqn=1 qpn=1 queue=sq index=0 count=4097",
            "cqe cqn=1 qpn=1 queue=sq index=0 imm=1",
            "cmd-cqe",
            "cmd-cqe index=0x100000000",
            "cmd-cqe index=1 status=256",
            "cmd-cqe index=1 count=2",
            "hostile",
            "hostile on",
            "hostile off now",
            "hostile caps",
            "hostile caps max zero",
            "hostile caps max cc=1",
            "hostile caps max_cqe=256",
            "hostile caps max_gid=16",
            "hostile caps qp_blocks=4096",
            "hostile caps cc=16",
            "hostile caps atomic=1",
            "hostile caps max_cqe=1 max_cqe=2",
            "hostile caps max_cqe",
            "hostile alloc_db",
            "hostile alloc_db random",
            "hostile alloc_db zero beyond",
            "hostile aeq-on-destroy",
            "hostile aeq-on-destroy maybe",
        ] {
            let e = parse(line).unwrap_err();
            assert!(!e.is_empty(), "{line:?}");
        }
    }

    #[test]
    fn hostile_and_forging_commands_parse() {
        let hostile = |line| match parse(line) {
            Ok(ControlCommand::Hostile(h)) => h,
            other => panic!("{line}: {other:?}"),
        };
        assert_eq!(hostile("hostile caps MAX"), Hostile::Caps(RawCaps::max()));
        assert_eq!(hostile("HOSTILE caps zero"), Hostile::Caps(RawCaps::zero()));
        assert_eq!(hostile("hostile caps off"), Hostile::CapsOff);
        let mut raw = RawCaps::default();
        raw.set(CapField::MaxCqe, 255);
        raw.set(CapField::QpBlocks, 0xfff);
        assert_eq!(
            hostile("hostile caps qp_blocks=0xfff MAX_CQE=255"),
            Hostile::Caps(raw)
        );
        for (line, mode) in [
            ("hostile alloc_db zero", AllocDbLie::Zero),
            ("hostile alloc-db BEYOND", AllocDbLie::Beyond),
            ("hostile alloc_db kernel", AllocDbLie::Kernel),
            ("hostile alloc_db off", AllocDbLie::Off),
        ] {
            assert_eq!(hostile(line), Hostile::AllocDb(mode));
        }
        assert_eq!(
            hostile("hostile aeq-on-destroy on"),
            Hostile::AeqOnDestroy(true)
        );
        assert_eq!(
            hostile("hostile aeq_on_destroy OFF"),
            Hostile::AeqOnDestroy(false)
        );
        assert_eq!(hostile("hostile off"), Hostile::Off);

        let Ok(ControlCommand::Cqe(c)) = parse("cqe cqn=3 qpn=9 queue=SQ index=0x10") else {
            panic!("cqe");
        };
        assert_eq!((c.cqn, c.count), (3, 1));
        assert_eq!(
            (c.cqe.qpn, c.cqe.qtype, c.cqe.wqe_index, c.cqe.opcode),
            (9, CQE_QTYPE_SQ, 0x10, op::SEND)
        );
        assert_eq!((c.cqe.status, c.cqe.byte_len, c.cqe.owner), (0, 0, false));
        let Ok(ControlCommand::Cqe(c)) =
            parse("cqe cqn=3 qpn=9 queue=rq index=1 status=4 opcode=12 byte_len=99 count=4096")
        else {
            panic!("cqe");
        };
        assert_eq!(c.count, MAX_FORGED_CQES);
        assert_eq!(
            (c.cqe.qtype, c.cqe.status, c.cqe.opcode, c.cqe.byte_len),
            (CQE_QTYPE_RQ, 4, 12, 99)
        );
        assert_eq!(
            parse("cqe cqn=3 qpn=9 queue=rq index=1").map(|c| c.to_string()),
            Ok("cqe cqn=3 qpn=9 queue=rq index=1 status=0 opcode=4 byte_len=0 count=1".to_string()),
            "RECEIVE by default on the RQ"
        );
        assert_eq!(
            parse("cmd-cqe index=0xffffffff"),
            Ok(ControlCommand::CmdCqe {
                index: u32::MAX,
                status: 0
            })
        );
        assert_eq!(
            parse("aeq type=0 data0=1 count=0x10000"),
            Ok(ControlCommand::Aeq {
                ev: AeqEvent {
                    ty: 0,
                    subtype: 0,
                    data0: 1,
                    data1: 0
                },
                count: MAX_STORM
            })
        );
        assert_eq!(
            parse("ceq eqn=1 cqn=2 count=1").map(|c| c.to_string()),
            Ok("ceq eqn=1 cqn=0x2".to_string()),
            "count=1 is the default"
        );
        assert_eq!(
            parse("query hostile"),
            Ok(ControlCommand::Query(Query::Hostile))
        );
        for line in [
            "hostile off",
            "cqe cqn=1 qpn=1 queue=sq index=0",
            "cmd-cqe index=0",
        ] {
            assert!(!parse(line).unwrap().allowed_at_startup(), "{line}");
        }
        let e = parse("hostile caps colour=1").unwrap_err();
        assert!(e.contains("fields: max_mr_size, "), "{e}");
        let e = parse("hostile caps max_gid=16").unwrap_err();
        assert!(e.contains("above the maximum 15"), "{e}");
    }

    #[test]
    fn hostile_settings_add_up_and_report() {
        let mut h = HostileSettings::default();
        assert!(h.is_off());
        assert_eq!(h.report(), "caps=off alloc_db=off aeq_on_destroy=off");
        for line in [
            "hostile caps max_cqe=7",
            "hostile caps cc=2 max_cqe=9",
            "hostile alloc_db beyond",
            "hostile aeq-on-destroy on",
        ] {
            let Ok(ControlCommand::Hostile(cmd)) = parse(line) else {
                panic!("{line}");
            };
            h.apply(cmd);
        }
        assert_eq!(
            h.report(),
            "caps=max_cqe:9,cc:2 alloc_db=beyond aeq_on_destroy=on"
        );
        h.apply(Hostile::CapsOff);
        assert_eq!(h.report(), "caps=off alloc_db=beyond aeq_on_destroy=on");
        h.apply(Hostile::Caps(RawCaps::max()));
        assert!(h.report().len() < 200, "fits the test page's reply");
        h.apply(Hostile::Off);
        assert!(h.is_off());
    }

    #[test]
    fn rule_matching_skip_count_order() {
        let mut rules = FaultRules::default();
        let create = OpCode { sub: 1, op: 0 };
        let query = OpCode { sub: 0, op: 0 };
        rules
            .add(rule("fail COMMON.CREATE_EQ status=2 count=2 skip=1"))
            .unwrap();
        rules.add(rule("delay any ms=5")).unwrap();
        // The first CREATE_EQ is skipped by rule 1 and so falls to rule 2 (delay any).
        assert_eq!(
            rules.check(create),
            Some(FaultAction::Delay(Duration::from_millis(5)))
        );
        assert_eq!(rules.len(), 1, "the delay rule is used up");
        assert_eq!(rules.check(query), None);
        assert_eq!(rules.check(create), Some(FaultAction::Fail(2)));
        assert_eq!(rules.check(create), Some(FaultAction::Fail(2)));
        assert_eq!(rules.check(create), None);
        assert!(rules.is_empty());
        rules.add(rule("fail any status=9 count=forever")).unwrap();
        for _ in 0..1000 {
            assert_eq!(rules.check(query), Some(FaultAction::Fail(9)));
        }
        assert_eq!(rules.rules().len(), 1);
        rules.clear();
        assert!(rules.is_empty());
        for _ in 0..FaultRules::LIMIT {
            rules.add(rule("fail any status=1")).unwrap();
        }
        assert!(rules.add(rule("fail any status=1")).is_err());
    }

    #[test]
    fn display_round_trips() {
        for line in [
            "fail COMMON.CREATE_EQ status=2 count=1 skip=0",
            "delay any ms=5 count=forever skip=3",
            "fail 3.200 status=9 count=7 skip=0",
            "refuse-init on",
            "refuse-init off",
            "aeq type=3 subtype=1 data0=0x10 data1=0xffffffff",
            "ceq eqn=1 cqn=0xfffff",
            "aeq type=0 subtype=0 data0=0x7 data1=0x0 count=65536",
            "ceq eqn=2 cqn=0x5 count=3",
            "cqe cqn=1 qpn=77 queue=rq index=5 status=0 opcode=4 byte_len=4294967295 count=1",
            "cqe cqn=4294967295 qpn=0 queue=sq index=65535 status=15 opcode=255 byte_len=0 count=4096",
            "cmd-cqe index=4660 status=3",
            "hostile caps max",
            "hostile caps zero",
            "hostile caps off",
            "hostile caps max_cqe=255 max_gid=15 qp_blocks=4095 cc=15",
            "hostile alloc_db zero",
            "hostile alloc_db beyond",
            "hostile alloc_db kernel",
            "hostile alloc_db off",
            "hostile aeq-on-destroy on",
            "hostile aeq-on-destroy off",
            "hostile off",
            "query hostile",
            "stats tx_reqs=1 rx_pps_limit_drop=18446744073709551615",
            "clear",
            "query page_shift",
            "query gids",
            "query ahs",
            "query ahns",
            "query ud_drops",
            "query all",
        ] {
            let cmd = parse(line).unwrap();
            assert_eq!(cmd.to_string(), line);
            assert_eq!(parse(&cmd.to_string()), Ok(cmd));
        }
    }

    #[test]
    fn replies() {
        assert_eq!(format_reply(&Ok(String::new())), "ok");
        assert_eq!(format_reply(&Ok("mtu=1500".into())), "ok mtu=1500");
        assert_eq!(format_reply(&Err("nope".into())), "error: nope");
        assert_eq!(parse_number("0x10"), Ok(16));
        assert!(parse_number("ten").is_err());
    }
}
