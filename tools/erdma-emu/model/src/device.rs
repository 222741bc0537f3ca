// SPDX-License-Identifier: GPL-2.0

//! The eRDMA function: its configuration, PCI configuration space and BAR0 register state machine.
//!
//! # Access semantics
//!
//! Every access of any size at any offset is accepted without panicking:
//!
//! * Register page: an access is split at register boundaries. Reads return, byte by byte, the
//!   bytes of the register(s) the access covers, so a 2-byte read at `DEV_STATUS + 1` returns
//!   bits 23:8 and an 8-byte read of a 32-bit register pair returns both. Writes merge the written
//!   bytes into the register. Bytes in holes read 0 and writes to them are dropped; both are
//!   logged once per offset.
//! * 64-bit registers accept one 8-byte access or two 4-byte halves. A doorbell fires when the
//!   write covers its most significant byte: an 8-byte write fires at once; with 4-byte halves the
//!   low half is staged and the high half fires with the combined value (the `lo_hi` order of
//!   Linux's non-atomic `writeq`). The staging is cleared after each doorbell.
//! * Doorbell spaces (SQ, RQ, CQ, extended): writes are recorded (see
//!   [`Device::last_db_space_write`]) and 8-byte ones go to the data path as doorbells (the
//!   `engine` submodule); reads return 0.
//! * The test page ([`regs::test_page`], only with [`DeviceConfig::test_page`]): the last 4 KiB
//!   of BAR0, byte-addressable.
//! * An access must stay within one BAR0 area; one that crosses into the next area, or goes beyond
//!   BAR0, is logged and ignored (reads return 0).
//! * BAR2 holds the MSI-X table and PBA, which QEMU emulates itself: reads return 0, writes are
//!   ignored.
//!
//! # Function state
//!
//! At power-on DEV_STATUS reads 0. `DEV_CTRL.RESET` returns the function (all BAR0 register
//! state, the command queue, every EQ, doorbell pages, the GID table, address handles, delayed
//! completions) to power-on and then sets `DEV_STATUS.RESET_DONE`; PCI configuration space is
//! not affected (that is a function-level reset by the host, [`Device::reset`]). `DEV_CTRL.INIT`
//! validates and latches the admin queue registers, creates the CMDQ EQ and the AEQ (armed) and
//! sets `DEV_STATUS.INIT_DONE`.
//!
//! The register page's state (what was programmed, DEV_STATUS, the latched admin queues, the
//! doorbell staging and records) is its own part, the `registers` submodule: it splits an access
//! into the registers it covers, stores values and says what a write asks of the device
//! (DEV_CTRL bits, a complete doorbell), which dispatches.
//!
//! # Engines
//!
//! * The command queue (`cmdq_engine` submodule, formats in [`crate::cmdq`]): CMDQ_SQ_DB fetches
//!   and executes commands, writes CMDQ CQEs, and with an armed CMDQ CQ an EQE into the CMDQ EQ
//!   (vector 0).
//! * RoCEv2 addressing ([`crate::roce`]): the GID table (SET_GID) and the address handles
//!   (CREATE_AH / DESTROY_AH).
//! * The RDMA objects (`objects` submodule: QPs, CQs, MRs and their commands) and the RoCEv2 RC
//!   data path (`engine` submodule: doorbells, requester, responder, CQEs), connected to other
//!   devices through a [`crate::fabric::Fabric`] ([`Device::attach_fabric`],
//!   [`Device::run_fabric`]); on iWARP functions the same engine runs over TCP streams handed
//!   over at MODIFY_QP(RTS) (`iwarp` submodule). What differs in moving RC messages is one
//!   trait with an implementation per protocol (`transport` submodule). The data-path engines
//!   do not get the device: they work on a context that borrows only what they use (the
//!   object tables, the fabric port and counters, event posting, ...; `engine::DataPath`).
//! * Event queues ([`crate::eq`]): the CMDQ EQ, the AEQ and up to 31 CEQs created by CREATE_EQ.
//!   [`Device::post_ceqe`] and [`Device::post_aeqe`] are the entry points for the control
//!   language and tests; the engines post through their context.
//! * The control language ([`crate::control`]) and the opt-in test page: fault injection and
//!   inspection. Their state (the "harness": fault rules, refuse-init, traffic counters,
//!   command count, test-page buffers) is not device state: it survives `DEV_CTRL.RESET` and
//!   [`Device::reset`], and only [`Device::reset_harness`] (a client disconnect) returns it to
//!   the start-up commands of [`DeviceConfig::startup`].
//!
//! # Time
//!
//! The device keeps delayed completions and the retransmission timers of QPs with lost requests
//! (see `engine`) with deadlines on its [`Clock`]; the transport calls [`Device::run_due`] when
//! [`Device::next_deadline`] has passed.

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::caps::Caps;
use crate::clock::{Clock, MonotonicClock};
use crate::control::{ControlCommand, FaultRules, HostileSettings};
use crate::eq::{EventQueue, EventQueues};
use crate::extdb::DbPages;
use crate::fabric::{Fabric, Port, Waker};
use crate::io::Io;
use crate::pci::{self, ConfigSpace};
use crate::ratelimit::{RateLimit, Verdict};
use crate::regs::{self, Bar0Area, Doorbell, Reg, RegSlot};
use crate::roce::{AhTable, GidTable};
use crate::stats::{TrafficCounters, UdDrops};

mod cmdq_engine;
mod cmdq_ring;
mod engine;
mod events;
mod harness;
mod hostile;
mod iwarp;
mod iwarp_qp;
mod objects;
mod pci_function;
mod rdma_cmds;
mod registers;
mod transport;

use cmdq_ring::{CmdRing, DelayedCqes};
pub use engine::{
    MAX_BACKLOG_BYTES, MAX_HELD, MAX_HELD_BYTES, MAX_MESSAGE, PENDING_COST, PORT_WINDOW, QP_WINDOW,
    RETRY_COUNT, RETRY_TIMEOUT,
};
pub use objects::MAX_QUEUE_PAGES;

/// The documented ceiling of the model's memory per adapter (function) with the default
/// capabilities (`qp_blocks=4`, `max_ah=16`), in bytes: what every bounded buffer together
/// may hold ([`PORT_WINDOW`] of its own requests and their answers, [`MAX_HELD_BYTES`] held
/// for receive WQEs, [`crate::fabric::MAX_INBOX_BYTES`] in its inbox, [`MAX_QUEUE_PAGES`] page
/// list entries, the object tables at their largest) with room to spare. The worst case a
/// guest user can build stays below it (`tests/memory_ceiling.rs`; README "Limits").
pub const MEMORY_CEILING: u64 = 160 << 20;
pub use iwarp::{IwarpQpInfo, AE_QP_FATAL, AE_RQ_ERROR};
use pci_function::PciFunction;
pub use registers::{AdminQueues, DbSpaceWrite, InitProblem, RingConfig};
use registers::{RegWrite, Registers, Span};

pub use crate::eq::{CEQ_DEPTH_LOG2_RANGE, CEQ_RANGE};
pub use cmdq_engine::MTU_RANGE;

/// Default VERSION register value. Any non-zero value marks a functional device and the drivers do
/// not interpret it further; the model reports 1 ("model revision 1 of the register interface").
pub const DEFAULT_VERSION: u32 = 1;
/// Default GRP_NUM register value (4 direct-WQE groups: what older drivers required).
pub const DEFAULT_GRP_NUM: u32 = 4;
/// Default MAC address (QEMU's default prefix 52:54:00).
pub const DEFAULT_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];

/// The RDMA protocol the function runs, as reported in DEV_PROTO.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Protocol {
    /// iWARP (DEV_PROTO = 0).
    Iwarp = 0,
    /// RoCEv2 (DEV_PROTO = 1).
    #[default]
    RoceV2 = 1,
}

impl Protocol {
    /// The DEV_PROTO register value.
    pub fn value(self) -> u32 {
        self as u32
    }
}

impl FromStr for Protocol {
    type Err = String;

    /// Accepts `iwarp`, `roce` and `rocev2` (case-insensitive).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "iwarp" => Ok(Protocol::Iwarp),
            "roce" | "rocev2" => Ok(Protocol::RoceV2),
            _ => Err(format!(
                "unknown protocol {s:?} (expected \"roce\" or \"iwarp\")"
            )),
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Iwarp => "iwarp",
            Protocol::RoceV2 => "roce",
        })
    }
}

/// How a function is configured; fixed for the lifetime of the [`Device`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceConfig {
    /// Permanent MAC address, reported in NETDEV_MAC_H/L. The guest needs a NIC with the same
    /// permanent MAC or the driver defers probing forever.
    pub mac: [u8; 6],
    /// Protocol reported in DEV_PROTO.
    pub protocol: Protocol,
    /// VERSION register value. 0 models a "non-functional function" that drivers must refuse.
    pub version: u32,
    /// PCI revision ID (reported by the driver as `hw_ver`).
    pub revision: u8,
    /// GRP_NUM register value.
    pub grp_num: u32,
    /// What QUERY_DEVICE and QUERY_FW_INFO report.
    pub caps: Caps,
    /// Whether the test page at [`regs::TEST_PAGE_BASE`] is enabled (off: the page is ordinary
    /// extended doorbell space).
    pub test_page: bool,
    /// Control commands (fault rules, `refuse-init`, `stats`) applied at power-on and after
    /// [`Device::reset_harness`]. Others are ignored here (the command line refuses them).
    pub startup: Vec<ControlCommand>,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            mac: DEFAULT_MAC,
            protocol: Protocol::default(),
            version: DEFAULT_VERSION,
            revision: pci::DEFAULT_REVISION,
            grp_num: DEFAULT_GRP_NUM,
            caps: Caps::default(),
            test_page: false,
            startup: Vec::new(),
        }
    }
}

/// The queues that exist after `DEV_CTRL.INIT`.
#[derive(Clone, Debug)]
struct Queues {
    /// The CMDQ SQ and CQ.
    cmdq: CmdRing,
    /// The CMDQ EQ, the AEQ and the CEQs.
    eqs: EventQueues,
}

impl Queues {
    fn new(admin: AdminQueues) -> Self {
        Queues {
            cmdq: CmdRing::new(&admin),
            eqs: EventQueues::new(
                EventQueue::new(admin.cmdq_eq.addr, admin.cmdq_eq.depth, 0),
                EventQueue::new(admin.aeq.addr, admin.aeq.depth, 0),
                regs::EQ_DB_COUNT,
            ),
        }
    }
}

/// Everything `DEV_CTRL.RESET` returns to power-on.
#[derive(Clone, Debug)]
struct Function {
    /// The register page.
    regs: Registers,
    queues: Option<Queues>,
    /// The last CONF_MTU (0: none yet).
    mtu: u32,
    dbs: DbPages,
    /// The GID table (SET_GID; RoCEv2 only).
    gids: GidTable,
    /// Address handles (CREATE_AH / DESTROY_AH; RoCEv2 only).
    ahs: AhTable,
    /// Command completions held back by `delay` rules.
    delayed: DelayedCqes,
    /// QPs, CQs and MRs.
    rdma: objects::Rdma,
}

impl Function {
    fn power_on(config: &DeviceConfig) -> Self {
        Function {
            regs: Registers::power_on(),
            queues: None,
            mtu: 0,
            dbs: DbPages::new(config.test_page),
            gids: GidTable::new(config.caps.max_gid_log2),
            ahs: AhTable::new(config.caps.max_ah_log2),
            delayed: DelayedCqes::default(),
            rdma: objects::Rdma::default(),
        }
    }
}

/// Test-page buffers (see [`regs::test_page`]).
#[derive(Clone, Debug)]
struct TestPage {
    mailbox: [u8; regs::test_page::BUF_SIZE as usize],
    reply: [u8; regs::test_page::BUF_SIZE as usize],
    status: u32,
}

/// Control state that is not device state: survives resets, cleared by
/// [`Device::reset_harness`].
#[derive(Clone, Debug)]
struct Harness {
    rules: FaultRules,
    refuse_init: bool,
    stats: TrafficCounters,
    /// Commands fetched from the CMDQ.
    cmds: u64,
    test_page: TestPage,
    /// UD datagrams dropped, by cause.
    ud_drops: UdDrops,
    /// The lies the device tells (`hostile`).
    hostile: HostileSettings,
    /// A `die` asked the serving process to exit.
    exit_requested: bool,
    /// `gone`: the BARs read all-ones and take no writes, until [`Device::reset`].
    gone: bool,
}

/// What an unexpected access was, for rate-limited logging.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Oddity {
    HoleRead,
    HoleWrite,
    ReadOnlyWrite,
    CrossesArea,
    OutOfRange,
    Bar2OutOfRange,
    ConfigOutOfRange,
    DevCtrlBits,
    DoorbellBeforeInit,
    UnknownCeqDoorbell,
    CqDoorbellCqn,
    SqUnreadable,
    CqeWrite,
    EqPost,
    TestPageWrite,
    DataDoorbell,
    MissingCq,
    DataPath,
    ShortDoorbell,
    /// A UD datagram dropped (key: the cause).
    UdDrop,
    /// A UD source GID index naming an empty GID table entry (key: the index).
    UdSourceGid,
}

/// What a guest-triggerable log line is about: each kind has its own [`RateLimit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LogKind {
    /// A refused or failed command, an INIT refused.
    Command,
    /// A data-path error: malformed WQE, refused key, bad doorbell PI, broken stream, a
    /// malformed or unexpected packet.
    DataPath,
    /// An event (AEQE, CEQE, CMDQ EQE or CQE) the device could not deliver and dropped.
    Event,
    /// An odd access: a register hole, a doorbell before INIT or for nothing.
    Access,
    /// An informational line a guest's action causes (a lost request, a connection that ended,
    /// an MTU, a GID, a CEQ): rate-limited like the warnings.
    Note,
}

impl LogKind {
    const ALL: [LogKind; 5] = [
        LogKind::Command,
        LogKind::DataPath,
        LogKind::Event,
        LogKind::Access,
        LogKind::Note,
    ];

    fn name(self) -> &'static str {
        match self {
            LogKind::Command => "command",
            LogKind::DataPath => "data-path",
            LogKind::Event => "dropped-event",
            LogKind::Access => "odd-access",
            LogKind::Note => "informational",
        }
    }
}

/// The log's rate limits of a device, so that a guest cannot flood the log: every line a guest
/// can trigger asks first. Odd accesses are logged once per kind and offset (and at most
/// [`WarnOnce::LIMIT`] distinct ones per reset); every kind of line is also limited to
/// [`WarnOnce::BURST`] lines per [`WarnOnce::INTERVAL`] on the device's clock, the first
/// line after a quiet spell reporting how many were suppressed. The limits survive resets
/// (a guest can reset its function as often as it likes).
#[derive(Clone, Debug)]
struct WarnOnce {
    seen: HashSet<(Oddity, u64)>,
    saturated: bool,
    clock: Arc<dyn Clock>,
    limits: [RateLimit; LogKind::ALL.len()],
}

impl Default for WarnOnce {
    fn default() -> Self {
        Self::new(Arc::new(MonotonicClock::new()))
    }
}

impl WarnOnce {
    /// Distinct (kind, offset) pairs remembered; beyond that, odd accesses are no longer logged.
    const LIMIT: usize = 1024;
    /// Lines of one kind logged per [`WarnOnce::INTERVAL`].
    pub(crate) const BURST: u32 = 20;
    /// The rate limits' interval.
    pub(crate) const INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

    /// Rate limits on `clock`.
    fn new(clock: Arc<dyn Clock>) -> Self {
        WarnOnce {
            seen: HashSet::new(),
            saturated: false,
            clock,
            limits: LogKind::ALL.map(|_| RateLimit::new(Self::BURST, Self::INTERVAL)),
        }
    }

    /// Forgets which odd accesses were logged (a reset), keeping the rate limits.
    fn forget_seen(&mut self) {
        self.seen.clear();
        self.saturated = false;
    }

    /// Whether a line of `kind` may be logged now; the first one after suppressed lines first
    /// logs how many there were.
    fn allow(&mut self, kind: LogKind) -> bool {
        let now = self.clock.now();
        let limit = &mut self.limits[kind as usize];
        match limit.check(now) {
            Verdict::Log { suppressed } => {
                if suppressed > 0 {
                    log::warn!(
                        "{suppressed} {} line(s) suppressed (at most {} per {:?})",
                        kind.name(),
                        limit.burst(),
                        limit.interval()
                    );
                }
                true
            }
            Verdict::Quiet => false,
        }
    }

    /// Whether a failed command should be logged as a warning (rate limit; callers log the
    /// rest at debug level).
    fn cmd_error(&mut self) -> bool {
        self.allow(LogKind::Command)
    }

    /// Whether a data-path error (a guest mistake that may repeat per packet) should be logged
    /// as a warning (rate limit).
    fn dp_error(&mut self) -> bool {
        self.allow(LogKind::DataPath)
    }

    /// Whether a dropped event should be logged as a warning (rate limit).
    fn event_drop(&mut self) -> bool {
        self.allow(LogKind::Event)
    }

    /// Whether an informational line a guest caused should be logged (rate limit).
    fn note(&mut self) -> bool {
        self.allow(LogKind::Note)
    }

    /// Whether `(what, key)` is new and should be logged (and the odd-access rate limit lets
    /// it).
    fn first(&mut self, what: Oddity, key: u64) -> bool {
        if self.seen.len() >= Self::LIMIT {
            if !self.saturated {
                self.saturated = true;
                if self.allow(LogKind::Access) {
                    log::warn!("too many unexpected accesses; no longer logging them");
                }
            }
            return false;
        }
        self.seen.insert((what, key)) && self.allow(LogKind::Access)
    }
}

/// One eRDMA PCI function.
#[derive(Clone, Debug)]
pub struct Device {
    config: DeviceConfig,
    clock: Arc<dyn Clock>,
    pci: PciFunction,
    func: Function,
    harness: Harness,
    warned: WarnOnce,
    /// The fabric attachment (none: requests fail with "retry exceeded").
    port: Option<Arc<Port>>,
    /// Where `query memory` reads the serving process's resident memory.
    process_memory: Option<Arc<dyn crate::io::ProcessMemory>>,
}

impl Device {
    /// A function at power-on, on the host's monotonic clock.
    pub fn new(config: DeviceConfig) -> Self {
        Self::with_clock(config, Arc::new(MonotonicClock::new()))
    }

    /// A function at power-on whose delayed work runs on `clock`.
    pub fn with_clock(config: DeviceConfig, clock: Arc<dyn Clock>) -> Self {
        let mut dev = Device {
            pci: PciFunction::new(config.revision, config.test_page),
            func: Function::power_on(&config),
            harness: Harness::power_on(),
            config,
            warned: WarnOnce::new(clock.clone()),
            clock,
            port: None,
            process_memory: None,
        };
        dev.apply_startup();
        dev
    }

    /// Power-on reset of the whole function (what a host FLR or a new VM sees): configuration
    /// space and all register and engine state. DEV_STATUS reads 0 afterwards. The control state
    /// (fault rules, ...) is kept: see [`Device::reset_harness`].
    pub fn reset(&mut self) {
        self.pci.reset();
        self.harness.gone = false;
        self.power_on_function();
        self.warned.forget_seen();
    }

    /// Returns the function to power-on: requests held for receive WQEs are answered with
    /// failure first (their requesters must not wait forever), and the GIDs leave the fabric.
    fn power_on_function(&mut self) {
        self.data_path().stop_all();
        self.func = Function::power_on(&self.config);
        self.publish_gids();
    }

    /// Attaches the device to `fabric`; `waker` is called when packets arrive for it (the
    /// transport then calls [`Device::run_fabric`]). Replaces an earlier attachment.
    pub fn attach_fabric(&mut self, fabric: &Arc<Fabric>, waker: Arc<dyn Waker>) {
        self.port = Some(fabric.attach(waker));
        self.publish_gids();
    }

    /// Lets `query memory` report the serving process's resident memory through `probe`.
    pub fn set_process_memory(&mut self, probe: Arc<dyn crate::io::ProcessMemory>) {
        self.process_memory = Some(probe);
    }

    /// The fabric port, if attached.
    pub fn port(&self) -> Option<&Arc<Port>> {
        self.port.as_ref()
    }

    /// Tells the fabric which GIDs this device owns (its GID table).
    fn publish_gids(&self) {
        if let Some(port) = &self.port {
            port.set_gids(self.func.gids.iter().map(|(_, e)| e.gid).collect());
        }
    }

    /// Returns the control state (fault rules, refuse-init, GET_STATS counters, command count,
    /// test-page buffers) to power-on and applies [`DeviceConfig::startup`] again: what a new
    /// client sees.
    pub fn reset_harness(&mut self) {
        self.harness = Harness::power_on();
        self.apply_startup();
    }

    /// The clock delayed work runs on.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The configuration the function was created with.
    pub fn device_config(&self) -> &DeviceConfig {
        &self.config
    }

    /// The PCI configuration space.
    pub fn pci(&self) -> &ConfigSpace {
        self.pci.config_space()
    }

    /// Whether the function may initiate DMA.
    pub fn bus_master(&self) -> bool {
        self.pci.config_space().bus_master()
    }

    /// The DEV_STATUS register.
    pub fn dev_status(&self) -> u32 {
        self.func.regs.status()
    }

    /// The admin queues latched by the last successful `DEV_CTRL.INIT`, if any.
    pub fn admin_queues(&self) -> Option<&AdminQueues> {
        self.func.regs.admin()
    }

    /// Why the last `DEV_CTRL.INIT` was refused (empty if it was not).
    pub fn init_problems(&self) -> &[InitProblem] {
        self.func.regs.init_problems()
    }

    /// The last value written to doorbell `db` since the last reset.
    pub fn last_doorbell(&self, db: Doorbell) -> Option<u64> {
        self.func.regs.last_doorbell(db)
    }

    /// The last write into a doorbell space since the last reset.
    pub fn last_db_space_write(&self) -> Option<DbSpaceWrite> {
        self.func.regs.last_db_space_write()
    }

    /// Number of writes into the doorbell spaces since the last reset.
    pub fn db_space_writes(&self) -> u64 {
        self.func.regs.db_space_writes()
    }

    // --------------------------------------------------------------------------------------------
    // Configuration space
    // --------------------------------------------------------------------------------------------

    /// Reads PCI configuration space.
    pub fn pci_config_read(&mut self, offset: u64, data: &mut [u8]) {
        self.pci.config_read(offset, data, &mut self.warned);
    }

    /// Writes PCI configuration space.
    pub fn pci_config_write(&mut self, offset: u64, data: &[u8]) {
        self.pci.config_write(offset, data, &mut self.warned);
    }

    // --------------------------------------------------------------------------------------------
    // BAR2 (MSI-X, emulated by QEMU)
    // --------------------------------------------------------------------------------------------

    /// Reads BAR2. QEMU emulates the MSI-X table and PBA itself, so this reads 0.
    pub fn bar2_read(&mut self, offset: u64, data: &mut [u8]) {
        if self.harness.gone {
            data.fill(0xff);
            return;
        }
        data.fill(0);
        self.pci.bar2_access(offset, data.len(), &mut self.warned);
    }

    /// Writes BAR2: ignored (QEMU emulates the MSI-X table and PBA itself).
    pub fn bar2_write(&mut self, offset: u64, data: &[u8]) {
        self.pci.bar2_access(offset, data.len(), &mut self.warned);
    }

    // --------------------------------------------------------------------------------------------
    // BAR0
    // --------------------------------------------------------------------------------------------

    /// Reads BAR0 at `offset`. Never fails: see the module documentation for the semantics.
    pub fn bar0_read(&mut self, offset: u64, data: &mut [u8]) {
        if self.harness.gone {
            data.fill(0xff);
            return;
        }
        data.fill(0);
        // Doorbell spaces are write-only and read 0.
        match self.bar0_area_of(offset, data.len(), "read") {
            Some(Bar0Area::Registers) => self.reg_read(offset, data),
            Some(Bar0Area::TestPage) => self.test_page_read(offset - regs::TEST_PAGE_BASE, data),
            _ => {}
        }
    }

    /// Writes BAR0 at `offset`. Never fails: see the module documentation for the semantics.
    pub fn bar0_write(&mut self, offset: u64, data: &[u8], io: &mut Io<'_>) {
        if self.harness.gone {
            return;
        }
        match self.bar0_area_of(offset, data.len(), "write") {
            Some(Bar0Area::Registers) => self.reg_write(offset, data, io),
            Some(Bar0Area::TestPage) => {
                self.test_page_write(offset - regs::TEST_PAGE_BASE, data, io)
            }
            Some(area) => self.db_space_write(area, offset, data, io),
            None => {}
        }
    }

    /// The BAR0 area an access falls in, or `None` (logged) if it leaves its area or BAR0.
    fn bar0_area_of(&mut self, offset: u64, len: usize, dir: &str) -> Option<Bar0Area> {
        self.pci.bar0_area(offset, len, dir, &mut self.warned)
    }

    /// Reads from the register page; the range is inside it.
    fn reg_read(&mut self, offset: u64, data: &mut [u8]) {
        for span in registers::spans(offset, data.len()) {
            match span {
                Span::Reg { slot, .. } => {
                    let value = self
                        .func
                        .regs
                        .read(slot.reg, &self.config, &self.harness.stats);
                    span.read_into(value, data, offset);
                }
                Span::Hole { dword } => {
                    if self.warned.first(Oddity::HoleRead, dword) {
                        log::warn!("read of unknown register {dword:#x} returns 0");
                    }
                }
            }
        }
    }

    /// Writes to the register page; the range is inside it.
    fn reg_write(&mut self, offset: u64, data: &[u8], io: &mut Io<'_>) {
        for span in registers::spans(offset, data.len()) {
            match span {
                Span::Reg { slot, .. } => {
                    let (value, mask) = span.written(data, offset);
                    self.write_reg(slot, value, mask, io);
                }
                Span::Hole { dword } => {
                    if self.warned.first(Oddity::HoleWrite, dword) {
                        log::warn!("write to unknown register {dword:#x} ignored");
                    }
                }
            }
        }
    }

    /// Writes the bytes selected by `mask` of `value` (both positioned within the register) to the
    /// register in `slot`, and does what the write asks for.
    fn write_reg(&mut self, slot: RegSlot, value: u64, mask: u64, io: &mut Io<'_>) {
        match self.func.regs.write(slot.reg, value, mask) {
            RegWrite::Stored => {}
            RegWrite::ReadOnly => {
                if self.warned.first(Oddity::ReadOnlyWrite, slot.base) {
                    log::warn!(
                        "write of {value:#x} to read-only register {} ({:#x}) ignored",
                        slot.reg,
                        slot.base
                    );
                }
            }
            RegWrite::DevCtrl(bits) => self.dev_ctrl(bits, io),
            RegWrite::Doorbell(db, value) => self.doorbell(db, value, io),
        }
    }

    /// A write to DEV_CTRL; `value` holds the written bits.
    fn dev_ctrl(&mut self, value: u32, io: &mut Io<'_>) {
        let unknown = value & !(regs::DEV_CTRL_RESET | regs::DEV_CTRL_INIT);
        if unknown != 0 && self.warned.first(Oddity::DevCtrlBits, 0) {
            log::warn!("DEV_CTRL: unknown bits {unknown:#x} ignored");
        }
        if value & regs::DEV_CTRL_RESET != 0 {
            if value & regs::DEV_CTRL_INIT != 0 && self.warned.first(Oddity::DevCtrlBits, 1) {
                log::warn!("DEV_CTRL: RESET and INIT written together; RESET wins");
            }
            self.power_on_function();
            self.func.regs.set_reset_done();
            // Interrupts raised before the reset must not reach the next driver instance.
            io.irq.cancel_pending();
            if self.warned.note() {
                log::info!("function reset (DEV_CTRL.RESET)");
            }
        } else if value & regs::DEV_CTRL_INIT != 0 {
            self.init();
        }
    }

    /// `fatal`: the function fails as on a fatal error of its own (erdma_rs_hw 2.5): every
    /// queue and object goes, as on a reset, but DEV_STATUS reads 0 (INIT_DONE clear, no
    /// RESET_DONE); doorbells are ignored and nothing is signalled until `DEV_CTRL.RESET`.
    fn fatal(&mut self, io: &mut Io<'_>) {
        self.power_on_function();
        io.irq.cancel_pending();
        log::warn!("function failed (control: fatal): DEV_STATUS 0 until DEV_CTRL.RESET");
    }

    /// `DEV_CTRL.INIT`: latch the admin queues if what was programmed is usable.
    fn init(&mut self) {
        if self.func.regs.initialized() {
            if self.warned.first(Oddity::DevCtrlBits, 2) {
                log::warn!("DEV_CTRL.INIT while already initialized, ignored (write RESET first)");
            }
            return;
        }
        if self.harness.refuse_init {
            if self.warned.note() {
                log::info!(
                    "DEV_CTRL.INIT refused (fault injection: refuse-init), INIT_DONE stays 0"
                );
            }
            return;
        }
        if let Some(admin) = self.func.regs.latch_admin(&mut self.warned) {
            self.func.queues = Some(Queues::new(admin));
        }
    }

    /// The single dispatch point for the register-page doorbells: `value` is the complete 64-bit
    /// doorbell.
    fn doorbell(&mut self, db: Doorbell, value: u64, io: &mut Io<'_>) {
        log::trace!("doorbell {} = {value:#x}", Reg::Doorbell(db));
        self.func.regs.record_doorbell(db, value);
        if self.func.queues.is_none() {
            if self.warned.first(Oddity::DoorbellBeforeInit, db.offset()) {
                log::warn!(
                    "{} = {value:#x} before DEV_CTRL.INIT, ignored",
                    Reg::Doorbell(db)
                );
            }
            return;
        }
        match db {
            // CMDQ engine: fetch commands up to the new producer index (bits 15:0).
            Doorbell::CmdqSq => self.cmdq_sq_doorbell(regs::cmdq_sq_db_pi(value), io),
            // CMDQ CQ arm (CQ doorbell format).
            Doorbell::CmdqCq => self.cmdq_cq_doorbell(regs::CqDoorbell::decode(value), io),
            // Event queue consumer index / re-arm (EQ doorbell format).
            Doorbell::Aeq => self.eq_doorbell(None, regs::EqDoorbell::decode(value), io),
            Doorbell::Eq(n) => self.eq_doorbell(Some(n), regs::EqDoorbell::decode(value), io),
        }
    }

    /// A write into one of the doorbell spaces; the range is inside `area`.
    fn db_space_write(&mut self, area: Bar0Area, offset: u64, data: &[u8], io: &mut Io<'_>) {
        let mut first = [0u8; 8];
        let n = data.len().min(8);
        first[..n].copy_from_slice(&data[..n]);
        let value = u64::from_le_bytes(first);
        log::trace!(
            "{} write {offset:#x}+{} = {value:#x}",
            area.name(),
            data.len()
        );
        self.func.regs.record_db_space_write(DbSpaceWrite {
            area,
            offset,
            len: data.len(),
            value,
        });
        if self.func.queues.is_none() {
            if self.warned.first(Oddity::DoorbellBeforeInit, offset >> 12) {
                log::warn!("{} write before DEV_CTRL.INIT, ignored", area.name());
            }
            return;
        }
        if data.len() < 8 {
            if self.warned.first(Oddity::ShortDoorbell, offset >> 12) {
                log::warn!(
                    "{}-byte write into the {} at {offset:#x}: doorbells are 64-bit, ignored",
                    data.len(),
                    area.name()
                );
            }
            return;
        }
        self.data_doorbell(area, offset, value, io);
    }
}

#[cfg(test)]
mod cmd_tests;
#[cfg(test)]
mod dp_tests;
#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod iwarp_tests;
#[cfg(test)]
mod tests;
