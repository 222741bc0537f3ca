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
//! aeq type=<t> [subtype=<s>] data0=<d> [data1=<e>]
//! ceq eqn=<n> cqn=<c>
//! stats <counter>=<value> ...
//! clear
//! query mtu|page_shift|eqs|cmds|init_done|dbs|gids|ahs|ahns|rules|qps|cqs|mrs|objects|ud_drops|
//!       stats|all
//! ```
//!
//! `<op>` is a command name (`COMMON.CREATE_EQ`, `RDMA.QUERY_DEVICE`, case-insensitive), a
//! numeric `sub.op` (`1.0`), or `any`. Numbers are decimal or `0x`-hex.
//!
//! Fault rules are checked in the order they were added. A rule that matches a command while it
//! still has matches to skip counts the command down and lets later rules look at it; the first
//! rule that fires decides the command's fate (fail: complete with the status without executing;
//! delay: execute now, complete later) and uses up one of its `count`.

use core::fmt;
use std::time::Duration;

use crate::cmdq::{Command, OpCode};
use crate::stats::Counter;
use crate::wire::AeqEvent;

/// Longest accepted delay: one hour (well beyond the drivers' 15 s command timeout).
pub const MAX_DELAY_MS: u64 = 3_600_000;

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
    /// The 11 GET_STATS counters, `tx_reqs=<n> ...`.
    Stats,
    /// Everything above except [`Query::Gids`] (it would push the rest beyond the test page's
    /// reply): `mtu page_shift eqs cmds init_done dbs ahs rules stats`.
    All,
}

impl Query {
    const NAMES: [(&'static str, Query); 18] = [
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
    /// `aeq ...`: post an AEQE now.
    Aeq(AeqEvent),
    /// `ceq eqn=<n> cqn=<c>`: post a CEQE now.
    Ceq {
        /// The CEQ.
        eqn: u8,
        /// The CQN in the entry (20 bits).
        cqn: u32,
    },
    /// `stats name=value ...`: set traffic counters.
    Stats(Vec<(Counter, u64)>),
    /// `clear`: drop every fault rule (and `refuse-init`).
    Clear,
    /// `query <what>`.
    Query(Query),
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
            ControlCommand::Aeq(ev) => write!(
                f,
                "aeq type={} subtype={} data0={:#x} data1={:#x}",
                ev.ty, ev.subtype, ev.data0, ev.data1
            ),
            ControlCommand::Ceq { eqn, cqn } => write!(f, "ceq eqn={eqn} cqn={cqn:#x}"),
            ControlCommand::Stats(set) => {
                f.write_str("stats")?;
                for &(c, v) in set {
                    write!(f, " {}={v}", c.name())?;
                }
                Ok(())
            }
            ControlCommand::Clear => f.write_str("clear"),
            ControlCommand::Query(q) => write!(f, "query {q}"),
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
            a.finish()?;
            Ok(ControlCommand::Aeq(ev))
        }
        "ceq" => {
            let mut a = Args::new("ceq", rest)?;
            let eqn = a.required("eqn", 255)? as u8;
            let cqn = a.required("cqn", 0xf_ffff)? as u32;
            a.finish()?;
            Ok(ControlCommand::Ceq { eqn, cqn })
        }
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
        "query" => match rest {
            [what] => Query::parse(what).map(ControlCommand::Query),
            _ => Err("query takes one item (e.g. query all)".into()),
        },
        _ => Err(format!(
            "unknown command {verb:?} (expected fail, delay, refuse-init, aeq, ceq, stats, \
             clear or query)"
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
            Ok(ControlCommand::Aeq(AeqEvent {
                ty: 3,
                subtype: 0,
                data0: 16,
                data1: 0
            }))
        );
        assert_eq!(
            parse("aeq type=1 subtype=2 data0=3 data1=4"),
            Ok(ControlCommand::Aeq(AeqEvent {
                ty: 1,
                subtype: 2,
                data0: 3,
                data1: 4
            }))
        );
        assert_eq!(
            parse("ceq eqn=1 cqn=0xfffff"),
            Ok(ControlCommand::Ceq {
                eqn: 1,
                cqn: 0xfffff
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
        ] {
            let e = parse(line).unwrap_err();
            assert!(!e.is_empty(), "{line:?}");
        }
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
