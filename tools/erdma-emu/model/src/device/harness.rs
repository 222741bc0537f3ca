// SPDX-License-Identifier: GPL-2.0

//! Running control commands ([`crate::control`]) against a device, and the test page that lets
//! guest tests do it through BAR0.

use super::hostile::storm;
use super::{Device, Harness, Oddity, TestPage};
use crate::control::{self, ControlCommand, FaultRules, HostileSettings, Query};
use crate::io::Io;
use crate::regs::{test_page, test_page::Field};
use crate::roce;
use crate::stats::{Counter, TrafficCounters, UdDrops};

impl Harness {
    pub(super) fn power_on() -> Self {
        Harness {
            rules: FaultRules::default(),
            refuse_init: false,
            stats: TrafficCounters::default(),
            cmds: 0,
            test_page: TestPage {
                mailbox: [0; test_page::BUF_SIZE as usize],
                reply: [0; test_page::BUF_SIZE as usize],
                status: 0,
            },
            ud_drops: UdDrops::default(),
            hostile: HostileSettings::default(),
            exit_requested: false,
            gone: false,
        }
    }
}

impl Device {
    /// Applies the start-up commands of the configuration (rules, refuse-init, stats).
    pub(super) fn apply_startup(&mut self) {
        for cmd in self.config.startup.clone() {
            if !cmd.allowed_at_startup() {
                log::warn!(
                    "start-up command \"{cmd}\" ignored (only rules, refuse-init and stats)"
                );
                continue;
            }
            if let Err(e) = self.run_without_io(cmd) {
                log::warn!("start-up command failed: {e}");
            }
        }
    }

    /// Commands that need neither guest memory nor interrupts.
    fn run_without_io(&mut self, cmd: ControlCommand) -> Result<String, String> {
        let h = &mut self.harness;
        match cmd {
            ControlCommand::Rule(rule) => {
                h.rules.add(rule)?;
                Ok(String::new())
            }
            ControlCommand::RefuseInit(on) => {
                h.refuse_init = on;
                Ok(String::new())
            }
            ControlCommand::Stats(set) => {
                for (c, v) in set {
                    *h.stats.get_mut(c) = v;
                }
                Ok(String::new())
            }
            ControlCommand::Hostile(setting) => {
                h.hostile.apply(setting);
                Ok(String::new())
            }
            ControlCommand::Clear => {
                h.rules.clear();
                h.refuse_init = false;
                h.hostile = HostileSettings::default();
                Ok(String::new())
            }
            ControlCommand::Query(q) => Ok(self.query(q)),
            ControlCommand::Die => {
                log::warn!("control: die: the process exits now, as if killed");
                self.harness.exit_requested = true;
                Ok(String::new())
            }
            ControlCommand::Fatal
            | ControlCommand::Gone
            | ControlCommand::Aeq { .. }
            | ControlCommand::Ceq { .. }
            | ControlCommand::Cqe(_)
            | ControlCommand::CmdCqe { .. } => Err("this command needs the device's I/O".into()),
        }
    }

    /// Runs one line of the control language and returns the reply text (without the `ok`
    /// prefix) or the error; see [`control::format_reply`].
    pub fn control(&mut self, line: &str, io: &mut Io<'_>) -> Result<String, String> {
        match control::parse(line)? {
            ControlCommand::Aeq { ev, count } => storm("aeq", count, || self.post_aeqe(ev, io)),
            ControlCommand::Ceq { eqn, cqn, count } => {
                storm("ceq", count, || self.post_ceqe(eqn, cqn, io))
            }
            ControlCommand::Cqe(forged) => self.forge_cqes(&forged, io),
            ControlCommand::CmdCqe { index, status } => self
                .forge_cmd_cqe(index, status, io)
                .map(|()| String::new())
                .map_err(|e| format!("cmd-cqe: {e}")),
            ControlCommand::Fatal => {
                self.fatal(io);
                Ok(String::new())
            }
            ControlCommand::Gone => {
                self.fatal(io);
                self.harness.gone = true;
                log::warn!("function gone (control: gone): BARs read all-ones until power-on");
                Ok(String::new())
            }
            cmd => self.run_without_io(cmd),
        }
    }

    /// Whether a `die` asked the serving process to exit (once: the request is taken). The
    /// server asks after each access it hands to the device, and kills itself.
    pub fn take_exit_request(&mut self) -> bool {
        std::mem::take(&mut self.harness.exit_requested)
    }

    /// The text of a `query`.
    fn query(&self, q: Query) -> String {
        match q {
            Query::Mtu => format!("mtu={}", self.func.mtu),
            Query::PageShift => format!("page_shift={}", self.func.dbs.page_shift()),
            Query::Eqs => {
                let eqs: Vec<String> = self.ceqs().iter().map(ToString::to_string).collect();
                format!("eqs={}", eqs.join(","))
            }
            Query::Cmds => format!("cmds={}", self.harness.cmds),
            Query::InitDone => format!("init_done={}", u8::from(self.func.regs.initialized())),
            Query::Dbs => format!("dbs={}", self.func.dbs.contexts().len()),
            Query::Gids => {
                let gids: Vec<String> = self
                    .func
                    .gids
                    .iter()
                    .map(|(i, e)| format!("{i}:{}:{}", e.net_type, roce::gid_hex(&e.gid)))
                    .collect();
                format!("gids={}", gids.join(","))
            }
            Query::Ahs => format!("ahs={}", self.func.ahs.len()),
            Query::Ahns => {
                let ahs: Vec<String> = self
                    .func
                    .ahs
                    .iter()
                    .map(|(n, ah)| format!("{n}:{}", ah.pdn))
                    .collect();
                format!("ahns={}", ahs.join(","))
            }
            Query::UdDrops => self.harness.ud_drops.report(),
            Query::Hostile => self.harness.hostile.report(),
            Query::Memory => {
                let (rss, hwm) = match self.process_memory.as_ref().and_then(|p| p.resident()) {
                    Some((rss, hwm)) => (rss.to_string(), hwm.to_string()),
                    None => ("unknown".into(), "unknown".into()),
                };
                format!(
                    "rss={rss} hwm={hwm} ceiling={} inflight={} held={}",
                    super::MEMORY_CEILING,
                    self.func.rdma.inflight,
                    self.func.rdma.held_bytes
                )
            }
            Query::Rules => format!("rules={}", self.harness.rules.len()),
            Query::Qps => format!("qps={}", self.func.rdma.qps_view().join(",")),
            Query::Cqs => {
                let cqs: Vec<String> = self.cqs().iter().map(ToString::to_string).collect();
                format!("cqs={}", cqs.join(","))
            }
            Query::Queues => format!("queues={}", self.func.rdma.queues_view().join(",")),
            Query::Mrs => {
                let mrs: Vec<String> = self
                    .mr_layouts()
                    .iter()
                    .map(|(k, level, n)| format!("{k:#x}:L{level}:{n}"))
                    .collect();
                format!("mrs={}", mrs.join(","))
            }
            Query::Objects => format!(
                "objects={}/{}/{}/{}",
                self.qps().len(),
                self.cqs().len(),
                self.mrs().len(),
                self.func.ahs.len()
            ),
            Query::Stats => Counter::ALL
                .iter()
                .map(|&c| format!("{}={}", c.name(), self.harness.stats.get(c)))
                .collect::<Vec<_>>()
                .join(" "),
            Query::All => [
                Query::Mtu,
                Query::PageShift,
                Query::Eqs,
                Query::Cmds,
                Query::InitDone,
                Query::Dbs,
                Query::Ahs,
                Query::Rules,
                Query::Stats,
            ]
            .map(|q| self.query(q))
            .join(" "),
        }
    }

    /// The hostile settings (`hostile`).
    pub fn hostile(&self) -> &HostileSettings {
        &self.harness.hostile
    }

    /// Fault rules still active.
    pub fn fault_rules(&self) -> &FaultRules {
        &self.harness.rules
    }

    /// Commands fetched from the CMDQ since the harness was last reset.
    pub fn commands_processed(&self) -> u64 {
        self.harness.cmds
    }

    /// The traffic counters (GET_STATS, the statistics registers).
    pub fn stats_counters(&self) -> &TrafficCounters {
        &self.harness.stats
    }

    // --------------------------------------------------------------------------------------------
    // Test page
    // --------------------------------------------------------------------------------------------

    /// Reads the test page at `offset` (relative to the page; the access is inside it).
    pub(super) fn test_page_read(&mut self, offset: u64, data: &mut [u8]) {
        let tp = &self.harness.test_page;
        for (o, b) in (offset..).zip(data.iter_mut()) {
            *b = match test_page::decode(o) {
                Field::Magic(i) => test_page::MAGIC_VALUE.to_le_bytes()[usize::from(i)],
                Field::Status(i) => tp.status.to_le_bytes()[usize::from(i)],
                Field::Mailbox(i) => tp.mailbox[usize::from(i)],
                Field::Reply(i) => tp.reply[usize::from(i)],
                Field::Execute(_) | Field::Unused => 0,
            };
        }
    }

    /// Writes the test page at `offset` (relative to the page; the access is inside it).
    pub(super) fn test_page_write(&mut self, offset: u64, data: &[u8], io: &mut Io<'_>) {
        let mut execute: Option<u32> = None;
        for (o, &b) in (offset..).zip(data) {
            match test_page::decode(o) {
                Field::Mailbox(i) => self.harness.test_page.mailbox[usize::from(i)] = b,
                Field::Execute(i) => {
                    let v = execute.get_or_insert(0);
                    *v |= u32::from(b) << (8 * i);
                }
                Field::Magic(_) | Field::Status(_) | Field::Reply(_) | Field::Unused => {
                    if self.warned.first(Oddity::TestPageWrite, o & !3) {
                        log::warn!("test page: write to read-only or unused offset {o:#x} ignored");
                    }
                }
            }
        }
        if execute == Some(1) {
            self.test_page_execute(io);
        }
    }

    fn test_page_execute(&mut self, io: &mut Io<'_>) {
        let mailbox = self.harness.test_page.mailbox;
        let result = match mailbox.iter().position(|&b| b == 0) {
            None => Err("mailbox is not NUL-terminated".to_string()),
            Some(n) => match std::str::from_utf8(&mailbox[..n]) {
                Ok(line) if line.is_ascii() => {
                    let r = self.control(line, io);
                    let level = if self.warned.note() {
                        log::Level::Info
                    } else {
                        log::Level::Debug
                    };
                    log::log!(level, "test page: {line} -> {}", control::format_reply(&r));
                    r
                }
                _ => Err("mailbox is not ASCII".to_string()),
            },
        };
        let tp = &mut self.harness.test_page;
        tp.status = u32::from(result.is_err());
        let reply = control::format_reply(&result);
        let n = reply.len().min(tp.reply.len() - 1);
        tp.reply.fill(0);
        tp.reply[..n].copy_from_slice(&reply.as_bytes()[..n]);
    }
}
