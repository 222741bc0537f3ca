// SPDX-License-Identifier: GPL-2.0

//! Command-queue wire formats (erdma_rs_hw 3): the command header, the opcode table, completion
//! status codes, the big-endian CMDQ CQE, and the request layouts of the commands the model
//! executes.
//!
//! Request structs decode **only** the fields that are meaningful for their opcode: the driver
//! copies just `sizeof(request)` bytes into a 128-byte slot and builds several requests on the
//! stack without zeroing them (§3.2, §10.4), so everything else is stale garbage. Their
//! `write_fields` counterparts (used by tests and by anything that plays the driver) write exactly
//! those fields and nothing else (as far as they fit in the slot given).

use core::fmt;

use crate::stats::{Counter, TrafficCounters};

/// Size of a CMDQ SQ WQEBB in bytes.
pub const WQEBB_SIZE: usize = 32;
/// Largest command, in WQEBBs.
pub const MAX_CMD_WQEBBS: u16 = 4;
/// Largest command in bytes (4 WQEBBs).
pub const MAX_CMD_SIZE: usize = WQEBB_SIZE * MAX_CMD_WQEBBS as usize;
/// Size of a CMDQ CQE.
pub const CQE_SIZE: usize = 32;
/// Queue type the model writes into CMDQ CQEs (bits 15:8 of dword 0).
pub const CQE_QTYPE_CMDQ: u8 = 2;

// ------------------------------------------------------------------------------------------------
// Opcodes (§3.4)
// ------------------------------------------------------------------------------------------------

/// Sub-module number of the RDMA commands.
pub const SUB_RDMA: u8 = 0;
/// Sub-module number of the COMMON commands.
pub const SUB_COMMON: u8 = 1;

/// A raw `(sub-module, opcode)` pair as found in a command header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpCode {
    /// Sub-module (header bits 25:24): 0 RDMA, 1 COMMON; 2 and 3 are unknown.
    pub sub: u8,
    /// Opcode (header bits 23:16).
    pub op: u8,
}

impl fmt::Display for OpCode {
    /// The command's name (`COMMON.CREATE_EQ`) if it has one, else `sub.op`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Command::from_code(*self) {
            Some(c) => f.write_str(c.name()),
            None => write!(f, "{}.{}", self.sub, self.op),
        }
    }
}

macro_rules! commands {
    ($($(#[$doc:meta])* $variant:ident = ($sub:expr, $op:expr, $name:literal),)*) => {
        /// Every command of the opcode table (§3.4), including the ones the model does not
        /// execute (yet) and the out-of-tree driver's.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Command {
            $($(#[$doc])* $variant,)*
        }

        impl Command {
            /// All commands, in table order.
            pub const ALL: &'static [Command] = &[$(Command::$variant,)*];

            /// The command's `(sub-module, opcode)`.
            pub const fn code(self) -> OpCode {
                match self {
                    $(Command::$variant => OpCode { sub: $sub, op: $op },)*
                }
            }

            /// The command's name, `SUBMODULE.NAME`.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Command::$variant => $name,)*
                }
            }
        }
    };
}

commands! {
    /// RDMA/0: capabilities in resp0/resp1.
    QueryDevice = (SUB_RDMA, 0, "RDMA.QUERY_DEVICE"),
    /// RDMA/1.
    CreateQp = (SUB_RDMA, 1, "RDMA.CREATE_QP"),
    /// RDMA/2.
    DestroyQp = (SUB_RDMA, 2, "RDMA.DESTROY_QP"),
    /// RDMA/3.
    ModifyQp = (SUB_RDMA, 3, "RDMA.MODIFY_QP"),
    /// RDMA/4.
    CreateCq = (SUB_RDMA, 4, "RDMA.CREATE_CQ"),
    /// RDMA/5.
    DestroyCq = (SUB_RDMA, 5, "RDMA.DESTROY_CQ"),
    /// RDMA/6.
    Reflush = (SUB_RDMA, 6, "RDMA.REFLUSH"),
    /// RDMA/8.
    RegMr = (SUB_RDMA, 8, "RDMA.REG_MR"),
    /// RDMA/9.
    DeregMr = (SUB_RDMA, 9, "RDMA.DEREG_MR"),
    /// RDMA/11 (out-of-tree driver only).
    QueryQpc = (SUB_RDMA, 11, "RDMA.QUERY_QPC"),
    /// RDMA/12 (out-of-tree driver only).
    QueryCqc = (SUB_RDMA, 12, "RDMA.QUERY_CQC"),
    /// RDMA/14 (RoCE).
    SetGid = (SUB_RDMA, 14, "RDMA.SET_GID"),
    /// RDMA/15 (RoCE).
    CreateAh = (SUB_RDMA, 15, "RDMA.CREATE_AH"),
    /// RDMA/16 (RoCE).
    DestroyAh = (SUB_RDMA, 16, "RDMA.DESTROY_AH"),
    /// RDMA/17 (RoCE).
    QueryQp = (SUB_RDMA, 17, "RDMA.QUERY_QP"),
    /// COMMON/0: create a CEQ.
    CreateEq = (SUB_COMMON, 0, "COMMON.CREATE_EQ"),
    /// COMMON/1: destroy a CEQ.
    DestroyEq = (SUB_COMMON, 1, "COMMON.DESTROY_EQ"),
    /// COMMON/2: firmware version in resp0.
    QueryFwInfo = (SUB_COMMON, 2, "COMMON.QUERY_FW_INFO"),
    /// COMMON/3: the netdev MTU.
    ConfMtu = (SUB_COMMON, 3, "COMMON.CONF_MTU"),
    /// COMMON/4: DMA the traffic counters to a buffer.
    GetStats = (SUB_COMMON, 4, "COMMON.GET_STATS"),
    /// COMMON/5: host page size for doorbell page indices.
    ConfDevice = (SUB_COMMON, 5, "COMMON.CONF_DEVICE"),
    /// COMMON/6 (out-of-tree driver only).
    QueryEqc = (SUB_COMMON, 6, "COMMON.QUERY_EQC"),
    /// COMMON/7 (out-of-tree driver only).
    SetRetransNum = (SUB_COMMON, 7, "COMMON.SET_RETRANS_NUM"),
    /// COMMON/8: allocate per-context doorbell pages.
    AllocDb = (SUB_COMMON, 8, "COMMON.ALLOC_DB"),
    /// COMMON/9: free them.
    FreeDb = (SUB_COMMON, 9, "COMMON.FREE_DB"),
    /// COMMON/10 (out-of-tree driver only).
    SetExtAttr = (SUB_COMMON, 10, "COMMON.SET_EXT_ATTR"),
    /// COMMON/11 (out-of-tree driver only).
    GetExtAttr = (SUB_COMMON, 11, "COMMON.GET_EXT_ATTR"),
}

impl Command {
    /// The command with code `code`, if the table has one.
    pub fn from_code(code: OpCode) -> Option<Command> {
        Command::ALL.iter().copied().find(|c| c.code() == code)
    }

    /// The command named `name` (case-insensitive, e.g. `common.create_eq`).
    pub fn from_name(name: &str) -> Option<Command> {
        Command::ALL
            .iter()
            .copied()
            .find(|c| c.name().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

// ------------------------------------------------------------------------------------------------
// Header (§3.2)
// ------------------------------------------------------------------------------------------------

/// The 8-byte command header (u64 LE at offset 0 of the command).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Bits 15:0: SQ producer index (WQEBBs) **after** this command.
    pub wqebb_index: u16,
    /// Bits 25:24 and 23:16.
    pub code: OpCode,
    /// Bits 47:32: the driver's wait-slot cookie (not interpreted).
    pub cookie: u16,
    /// Bits 54:52 plus one: number of WQEBBs (1..=8; the model accepts up to 4).
    pub wqebbs: u16,
}

impl Header {
    /// Decodes a header; reserved bits are ignored.
    pub fn decode(value: u64) -> Self {
        Header {
            wqebb_index: value as u16,
            code: OpCode {
                sub: ((value >> 24) & 3) as u8,
                op: (value >> 16) as u8,
            },
            cookie: (value >> 32) as u16,
            wqebbs: ((value >> 52) & 7) as u16 + 1,
        }
    }

    /// Encodes the header (what a driver writes). `wqebbs` must be 1..=8.
    pub fn encode(&self) -> u64 {
        u64::from(self.wqebb_index)
            | u64::from(self.code.op) << 16
            | u64::from(self.code.sub & 3) << 24
            | u64::from(self.cookie) << 32
            | u64::from(self.wqebbs.wrapping_sub(1) & 7) << 52
    }
}

// ------------------------------------------------------------------------------------------------
// Status codes
// ------------------------------------------------------------------------------------------------

/// Completion status codes (CQE dword 0 bits 7:0). The drivers only distinguish 0 from non-zero
/// (-EIO); the values are the model's own, chosen to make logs and tests precise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Status {
    /// 0: the command was executed.
    Success = 0,
    /// 1: unknown (sub-module, opcode), an opcode the model does not execute (yet), a command
    /// for a capability the device does not report (ALLOC_DB without EXTEND_DB), a RoCEv2
    /// command (SET_GID, CREATE_AH, DESTROY_AH) on an iWARP function, or a UD QP on an iWARP
    /// function.
    Unsupported = 1,
    /// 2: a field is out of range (EQN, vector, depth, type, MTU, page shift, alignment, GID
    /// index, AHN, ...), or DESTROY_AH names another PD than the AH's.
    InvalidParam = 2,
    /// 3: resources exhausted or busy (no free doorbell pages; CONF_DEVICE changing the page
    /// size while doorbell pages are allocated).
    NoResources = 3,
    /// 4: the object does not exist (DESTROY_EQ of an unknown EQ, FREE_DB of pages not
    /// allocated, SET_GID delete of an empty entry, DESTROY_AH of an unknown AH).
    NotFound = 4,
    /// 5: the object already exists (CREATE_EQ of a live EQN, CREATE_AH of a live AHN, an iWARP
    /// RTS on a 4-tuple another QP has bound).
    Exists = 5,
    /// 6: a DMA address in the command is not in guest memory (or the SQ ring could not be read).
    DmaError = 6,
    /// 7: malformed command: WQEBB count above 4, header index inconsistent with the position,
    /// the command runs past the doorbell's producer index, or it is too short for its opcode.
    Malformed = 7,
}

impl Status {
    /// All statuses the model produces.
    pub const ALL: [Status; 8] = [
        Status::Success,
        Status::Unsupported,
        Status::InvalidParam,
        Status::NoResources,
        Status::NotFound,
        Status::Exists,
        Status::DmaError,
        Status::Malformed,
    ];

    /// The status byte.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// A short name for logs.
    pub fn name(self) -> &'static str {
        match self {
            Status::Success => "success",
            Status::Unsupported => "unsupported",
            Status::InvalidParam => "invalid parameter",
            Status::NoResources => "no resources",
            Status::NotFound => "not found",
            Status::Exists => "already exists",
            Status::DmaError => "DMA error",
            Status::Malformed => "malformed command",
        }
    }

    /// A description of status byte `code` for logs (also for injected statuses).
    pub fn describe(code: u8) -> String {
        match Status::ALL.iter().find(|s| s.code() == code) {
            Some(s) => format!("{code} ({})", s.name()),
            None => code.to_string(),
        }
    }
}

// ------------------------------------------------------------------------------------------------
// CQE (§3.3)
// ------------------------------------------------------------------------------------------------

/// A CMDQ CQE (32 bytes, big-endian dwords).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cqe {
    /// Owner/phase bit (dword 0 bit 31).
    pub owner: bool,
    /// Opcode (dword 0 bits 23:16): the command's opcode.
    pub opcode: u8,
    /// Queue type (dword 0 bits 15:8): [`CQE_QTYPE_CMDQ`].
    pub qtype: u8,
    /// Status (dword 0 bits 7:0).
    pub status: u8,
    /// SQ WQEBB index of the command's first WQEBB (dword 1).
    pub start: u32,
    /// Response qword 0 = w0 | w1 << 32.
    pub resp0: u64,
    /// Response qword 1 = w2 | w3 << 32.
    pub resp1: u64,
}

impl Cqe {
    /// The 32 bytes of the CQE: dwords big-endian, response qwords low dword first, bytes
    /// 24..32 zero.
    pub fn encode(&self) -> [u8; CQE_SIZE] {
        let dw0 = u32::from(self.owner) << 31
            | u32::from(self.opcode) << 16
            | u32::from(self.qtype) << 8
            | u32::from(self.status);
        let words = [
            dw0,
            self.start,
            self.resp0 as u32,
            (self.resp0 >> 32) as u32,
            self.resp1 as u32,
            (self.resp1 >> 32) as u32,
            0,
            0,
        ];
        let mut b = [0u8; CQE_SIZE];
        for (chunk, w) in b.chunks_exact_mut(4).zip(words) {
            chunk.copy_from_slice(&w.to_be_bytes());
        }
        b
    }

    /// Decodes 32 CQE bytes (what a driver reads).
    pub fn decode(b: &[u8; CQE_SIZE]) -> Self {
        let w = |i: usize| u32::from_be_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
        let dw0 = w(0);
        Cqe {
            owner: dw0 >> 31 != 0,
            opcode: (dw0 >> 16) as u8,
            qtype: (dw0 >> 8) as u8,
            status: dw0 as u8,
            start: w(1),
            resp0: u64::from(w(2)) | u64::from(w(3)) << 32,
            resp1: u64::from(w(4)) | u64::from(w(5)) << 32,
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Requests
// ------------------------------------------------------------------------------------------------

/// The bytes of one command (its WQEBBs, at most 128 bytes), with bounds-checked little-endian
/// field accessors. A field beyond the command's extent is [`Status::Malformed`].
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    bytes: &'a [u8],
}

impl<'a> Request<'a> {
    /// The command occupying `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Request { bytes }
    }

    /// Length of the command in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether the command has no bytes at all.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    fn field<const N: usize>(&self, off: usize) -> Result<[u8; N], Status> {
        off.checked_add(N)
            .and_then(|end| self.bytes.get(off..end))
            .and_then(|s| s.try_into().ok())
            .ok_or(Status::Malformed)
    }

    /// The byte at `off`.
    pub fn u8(&self, off: usize) -> Result<u8, Status> {
        self.field::<1>(off).map(|b| b[0])
    }

    /// The LE u16 at `off`.
    pub fn u16(&self, off: usize) -> Result<u16, Status> {
        self.field(off).map(u16::from_le_bytes)
    }

    /// The LE u32 at `off`.
    pub fn u32(&self, off: usize) -> Result<u32, Status> {
        self.field(off).map(u32::from_le_bytes)
    }

    /// The LE u64 at `off`.
    pub fn u64(&self, off: usize) -> Result<u64, Status> {
        self.field(off).map(u64::from_le_bytes)
    }

    /// The `N` bytes at `off`, as they are (GIDs, MAC addresses).
    pub fn bytes<const N: usize>(&self, off: usize) -> Result<[u8; N], Status> {
        self.field(off)
    }
}

/// Copies `bytes` to `slot[off..]`, cut at the end of the slot (a command of fewer WQEBBs than
/// its request needs simply lacks the tail, as on the wire).
fn put(slot: &mut [u8], off: usize, bytes: &[u8]) {
    if let Some(dst) = slot.get_mut(off..) {
        let n = dst.len().min(bytes.len());
        dst[..n].copy_from_slice(&bytes[..n]);
    }
}

/// EQ type CEQ in CREATE_EQ/DESTROY_EQ (0 would be the AEQ, which is set up by registers).
pub const EQ_TYPE_CEQ: u8 = 1;

/// CREATE_EQ (COMMON/0), §3.6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreateEq {
    /// @8: ring DMA address.
    pub ring: u64,
    /// @16: MSI-X vector.
    pub vector: u8,
    /// @17: EQN.
    pub eqn: u8,
    /// @18: log2 of the depth in entries.
    pub depth_log2: u8,
    /// @19: type (1 = CEQ).
    pub ty: u8,
    /// @20 (low) and @24 (high): doorbell-record DMA address.
    pub dbrec: u64,
}

impl CreateEq {
    /// Bytes covered by the meaningful fields.
    pub const LEN: usize = 28;

    /// Decodes the meaningful fields.
    pub fn decode(r: &Request<'_>) -> Result<Self, Status> {
        Ok(CreateEq {
            ring: r.u64(8)?,
            vector: r.u8(16)?,
            eqn: r.u8(17)?,
            depth_log2: r.u8(18)?,
            ty: r.u8(19)?,
            dbrec: u64::from(r.u32(20)?) | u64::from(r.u32(24)?) << 32,
        })
    }

    /// Writes the meaningful fields into a command slot (not the header).
    pub fn write_fields(&self, slot: &mut [u8]) {
        put(slot, 8, &self.ring.to_le_bytes());
        put(slot, 16, &[self.vector, self.eqn, self.depth_log2, self.ty]);
        put(slot, 20, &(self.dbrec as u32).to_le_bytes());
        put(slot, 24, &((self.dbrec >> 32) as u32).to_le_bytes());
    }
}

/// DESTROY_EQ (COMMON/1), §3.6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DestroyEq {
    /// @16: MSI-X vector (not checked by the model).
    pub vector: u8,
    /// @17: EQN.
    pub eqn: u8,
    /// @19: type (1 = CEQ).
    pub ty: u8,
}

impl DestroyEq {
    /// Bytes covered by the meaningful fields.
    pub const LEN: usize = 20;

    /// Decodes the meaningful fields.
    pub fn decode(r: &Request<'_>) -> Result<Self, Status> {
        Ok(DestroyEq {
            vector: r.u8(16)?,
            eqn: r.u8(17)?,
            ty: r.u8(19)?,
        })
    }

    /// Writes the meaningful fields into a command slot.
    pub fn write_fields(&self, slot: &mut [u8]) {
        put(slot, 16, &[self.vector, self.eqn]);
        put(slot, 19, &[self.ty]);
    }
}

/// CONF_MTU (COMMON/3), §3.6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConfMtu {
    /// @8: MTU in bytes.
    pub mtu: u32,
}

impl ConfMtu {
    /// Bytes covered by the meaningful fields.
    pub const LEN: usize = 12;

    /// Decodes the meaningful fields.
    pub fn decode(r: &Request<'_>) -> Result<Self, Status> {
        Ok(ConfMtu { mtu: r.u32(8)? })
    }

    /// Writes the meaningful fields into a command slot.
    pub fn write_fields(&self, slot: &mut [u8]) {
        put(slot, 8, &self.mtu.to_le_bytes());
    }
}

/// GET_STATS (COMMON/4), §3.6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GetStats {
    /// @12: index (echoed into the buffer).
    pub index: u32,
    /// @16: response buffer DMA address.
    pub addr: u64,
    /// @24: response buffer length in bytes.
    pub len: u32,
}

impl GetStats {
    /// Bytes covered by the meaningful fields.
    pub const LEN: usize = 28;

    /// Decodes the meaningful fields.
    pub fn decode(r: &Request<'_>) -> Result<Self, Status> {
        Ok(GetStats {
            index: r.u32(12)?,
            addr: r.u64(16)?,
            len: r.u32(24)?,
        })
    }

    /// Writes the meaningful fields into a command slot.
    pub fn write_fields(&self, slot: &mut [u8]) {
        put(slot, 12, &self.index.to_le_bytes());
        put(slot, 16, &self.addr.to_le_bytes());
        put(slot, 24, &self.len.to_le_bytes());
    }
}

/// GET_STATS buffer magic.
pub const STATS_MAGIC: u16 = 0x5566;
/// GET_STATS buffer version the model writes.
pub const STATS_VERSION: u8 = 1;
/// Bytes of the GET_STATS buffer the model writes: a 16-byte header and 11 counters. A smaller
/// buffer is refused.
pub const STATS_LEN: usize = 16 + 8 * Counter::ALL.len();

/// The GET_STATS response buffer: magic, version, length (of this buffer, [`STATS_LEN`]), the
/// request's index, 8 reserved zero bytes, then the counters as LE u64 in [`Counter::ALL`] order.
pub fn stats_buffer(index: u32, counters: &TrafficCounters) -> [u8; STATS_LEN] {
    let mut b = [0u8; STATS_LEN];
    put(&mut b, 0, &STATS_MAGIC.to_le_bytes());
    b[2] = STATS_VERSION;
    b[3] = STATS_LEN as u8;
    put(&mut b, 4, &index.to_le_bytes());
    for (i, c) in counters.values().iter().enumerate() {
        put(&mut b, 16 + 8 * i, &c.to_le_bytes());
    }
    b
}

/// CONF_DEVICE (COMMON/5), §3.6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConfDevice {
    /// @8 bit 31: page-size enable.
    pub page_size_enable: bool,
    /// @8 bits 4:0: host PAGE_SHIFT.
    pub page_shift: u8,
}

impl ConfDevice {
    /// Bytes covered by the meaningful fields.
    pub const LEN: usize = 12;

    /// Decodes the meaningful fields.
    pub fn decode(r: &Request<'_>) -> Result<Self, Status> {
        let v = r.u32(8)?;
        Ok(ConfDevice {
            page_size_enable: v & (1 << 31) != 0,
            page_shift: (v & 0x1f) as u8,
        })
    }

    /// Writes the meaningful fields into a command slot.
    pub fn write_fields(&self, slot: &mut [u8]) {
        let v = u32::from(self.page_size_enable) << 31 | u32::from(self.page_shift & 0x1f);
        put(slot, 8, &v.to_le_bytes());
    }
}

/// ALLOC_DB/FREE_DB enable bit: SQ doorbell page.
pub const DB_SQ: u32 = 1 << 0;
/// ALLOC_DB/FREE_DB enable bit: RQ doorbell page ("RDB").
pub const DB_RQ: u32 = 1 << 1;
/// ALLOC_DB/FREE_DB enable bit: CQ doorbell page ("CDB").
pub const DB_CQ: u32 = 1 << 2;

/// ALLOC_DB (COMMON/8), §3.6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocDb {
    /// @8: enable bits [`DB_SQ`] | [`DB_RQ`] | [`DB_CQ`] (other bits ignored).
    pub enable: u32,
}

impl AllocDb {
    /// Bytes covered by the meaningful fields.
    pub const LEN: usize = 12;

    /// Decodes the meaningful fields.
    pub fn decode(r: &Request<'_>) -> Result<Self, Status> {
        Ok(AllocDb {
            enable: r.u32(8)? & (DB_SQ | DB_RQ | DB_CQ),
        })
    }

    /// Writes the meaningful fields into a command slot.
    pub fn write_fields(&self, slot: &mut [u8]) {
        put(slot, 8, &self.enable.to_le_bytes());
    }
}

/// ALLOC_DB resp0: SQ page in bits 15:0, "CDB" (CQ) page in 47:32, "RDB" (RQ) page in 63:48.
pub fn alloc_db_resp0(sq: u16, cdb: u16, rdb: u16) -> u64 {
    u64::from(sq) | u64::from(cdb) << 32 | u64::from(rdb) << 48
}

/// FREE_DB (COMMON/9), §3.6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreeDb {
    /// @8: enable bits (which of the pages below to free; other bits ignored).
    pub enable: u32,
    /// @12: RQ page.
    pub rq_page: u16,
    /// @14: SQ page.
    pub sq_page: u16,
    /// @18: CQ page.
    pub cq_page: u16,
}

impl FreeDb {
    /// Bytes covered by the meaningful fields.
    pub const LEN: usize = 20;

    /// Decodes the meaningful fields.
    pub fn decode(r: &Request<'_>) -> Result<Self, Status> {
        Ok(FreeDb {
            enable: r.u32(8)? & (DB_SQ | DB_RQ | DB_CQ),
            rq_page: r.u16(12)?,
            sq_page: r.u16(14)?,
            cq_page: r.u16(18)?,
        })
    }

    /// Writes the meaningful fields into a command slot.
    pub fn write_fields(&self, slot: &mut [u8]) {
        put(slot, 8, &self.enable.to_le_bytes());
        put(slot, 12, &self.rq_page.to_le_bytes());
        put(slot, 14, &self.sq_page.to_le_bytes());
        put(slot, 18, &self.cq_page.to_le_bytes());
    }

    /// The pages to free: `(enable bit, page)` for each enabled one.
    pub fn pages(&self) -> impl Iterator<Item = (u32, u16)> + '_ {
        [
            (DB_SQ, self.sq_page),
            (DB_RQ, self.rq_page),
            (DB_CQ, self.cq_page),
        ]
        .into_iter()
        .filter(|&(bit, _)| self.enable & bit != 0)
    }
}

// ------------------------------------------------------------------------------------------------
// RoCEv2 addressing: SET_GID, CREATE_AH, DESTROY_AH (§3.5)
// ------------------------------------------------------------------------------------------------

/// Size of a GID in bytes.
pub const GID_SIZE: usize = 16;

/// A raw 16-byte GID, in network order (IPv4 addresses IPv4-mapped: `::ffff:a.b.c.d`).
pub type Gid = [u8; GID_SIZE];

/// The network type of a GID or an address vector: SET_GID cfg bit 16, AV cfg0 bit 20.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NetType {
    /// 0: RoCEv2 over IPv4.
    Ipv4,
    /// 1: RoCEv2 over IPv6.
    Ipv6,
}

impl NetType {
    /// The type a one-bit field holds.
    pub fn from_bit(set: bool) -> Self {
        if set {
            NetType::Ipv6
        } else {
            NetType::Ipv4
        }
    }

    /// The value of the one-bit field (0 IPv4, 1 IPv6).
    pub fn bit(self) -> u32 {
        match self {
            NetType::Ipv4 => 0,
            NetType::Ipv6 => 1,
        }
    }

    /// `ipv4` or `ipv6` (the control language's spelling).
    pub fn name(self) -> &'static str {
        match self {
            NetType::Ipv4 => "ipv4",
            NetType::Ipv6 => "ipv6",
        }
    }
}

impl fmt::Display for NetType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// SET_GID cfg: GID index (bits 15:0).
const SET_GID_INDEX_MASK: u32 = 0xffff;
/// SET_GID cfg: network type (bit 16; add only).
const SET_GID_NTYPE_SHIFT: u32 = 16;
/// SET_GID cfg: operation (bit 31): 0 add, 1 delete.
const SET_GID_OP_DELETE: u32 = 1 << 31;

/// What a SET_GID does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GidOp {
    /// Add (or replace) the entry.
    Add {
        /// cfg bit 16.
        net_type: NetType,
        /// @12: the GID.
        gid: Gid,
    },
    /// Delete the entry. The network type bit and the GID bytes are not meaningful: the driver
    /// builds the request on the stack without zeroing it (§3.2).
    Delete,
}

/// SET_GID (RDMA/14), §3.5: @8 u32 cfg (15:0 index, bit 16 network type, bit 31 delete), @12 the
/// 16-byte GID (add only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetGid {
    /// cfg bits 15:0: the GID table index.
    pub index: u16,
    /// cfg bit 31 and, for an add, bit 16 and the GID.
    pub op: GidOp,
}

impl SetGid {
    /// Bytes covered by the meaningful fields of an add (a delete needs only 12).
    pub const LEN: usize = 12 + GID_SIZE;

    /// Decodes the meaningful fields: the GID bytes only for an add.
    pub fn decode(r: &Request<'_>) -> Result<Self, Status> {
        let cfg = r.u32(8)?;
        let op = if cfg & SET_GID_OP_DELETE != 0 {
            GidOp::Delete
        } else {
            GidOp::Add {
                net_type: NetType::from_bit(cfg >> SET_GID_NTYPE_SHIFT & 1 != 0),
                gid: r.bytes(12)?,
            }
        };
        Ok(SetGid {
            index: (cfg & SET_GID_INDEX_MASK) as u16,
            op,
        })
    }

    /// Writes the meaningful fields into a command slot: for a delete only cfg (as the driver
    /// does; the GID bytes keep whatever the slot held).
    pub fn write_fields(&self, slot: &mut [u8]) {
        let mut cfg = u32::from(self.index);
        match self.op {
            GidOp::Add { net_type, gid } => {
                cfg |= net_type.bit() << SET_GID_NTYPE_SHIFT;
                put(slot, 12, &gid);
            }
            GidOp::Delete => cfg |= SET_GID_OP_DELETE,
        }
        put(slot, 8, &cfg.to_le_bytes());
    }
}

/// AV cfg0: flow label (bits 19:0).
const AV_FLOW_LABEL_MASK: u32 = 0xf_ffff;
/// AV cfg0: network type (bit 20).
const AV_NTYPE_SHIFT: u32 = 20;

/// The 36-byte address vector of CREATE_AH and the RoCEv2 MODIFY_QP (§3.5). The reserved byte
/// @7, the padding @18..20 and cfg0 bits 31:21 are not meaningful and are ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressVector {
    /// @0 bits 19:0: IPv6 flow label.
    pub flow_label: u32,
    /// @0 bit 20: network type.
    pub net_type: NetType,
    /// @4: traffic class.
    pub traffic_class: u8,
    /// @5: hop limit (TTL).
    pub hop_limit: u8,
    /// @6: service level.
    pub sl: u8,
    /// @8: UDP source port.
    pub udp_sport: u16,
    /// @10: source GID index (into the function's GID table).
    pub sgid_index: u16,
    /// @12: destination MAC.
    pub dmac: [u8; 6],
    /// @20: destination GID (IPv4-mapped for IPv4).
    pub dgid: Gid,
}

impl AddressVector {
    /// Size of the address vector in bytes.
    pub const SIZE: usize = 36;

    /// Decodes the address vector at byte `off` of a command.
    pub fn decode_at(r: &Request<'_>, off: usize) -> Result<Self, Status> {
        let at = |o: usize| off.checked_add(o).ok_or(Status::Malformed);
        let cfg0 = r.u32(at(0)?)?;
        Ok(AddressVector {
            flow_label: cfg0 & AV_FLOW_LABEL_MASK,
            net_type: NetType::from_bit(cfg0 >> AV_NTYPE_SHIFT & 1 != 0),
            traffic_class: r.u8(at(4)?)?,
            hop_limit: r.u8(at(5)?)?,
            sl: r.u8(at(6)?)?,
            udp_sport: r.u16(at(8)?)?,
            sgid_index: r.u16(at(10)?)?,
            dmac: r.bytes(at(12)?)?,
            dgid: r.bytes(at(20)?)?,
        })
    }

    /// The 36 bytes the driver writes (reserved and padding bytes zero, the flow label cut to
    /// 20 bits).
    pub fn encode(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        let cfg0 = self.flow_label & AV_FLOW_LABEL_MASK | self.net_type.bit() << AV_NTYPE_SHIFT;
        put(&mut b, 0, &cfg0.to_le_bytes());
        put(&mut b, 4, &[self.traffic_class, self.hop_limit, self.sl]);
        put(&mut b, 8, &self.udp_sport.to_le_bytes());
        put(&mut b, 10, &self.sgid_index.to_le_bytes());
        put(&mut b, 12, &self.dmac);
        put(&mut b, 20, &self.dgid);
        b
    }

    /// Writes the meaningful fields at byte `off` of a command slot (reserved and padding bytes
    /// keep whatever the slot held).
    pub fn write_fields_at(&self, slot: &mut [u8], off: usize) {
        let b = self.encode();
        put(slot, off, &b[..7]);
        put(slot, off.saturating_add(8), &b[8..18]);
        put(slot, off.saturating_add(20), &b[20..]);
    }
}

/// CREATE_AH (RDMA/15), §3.5: @8 u32 PDN, @12 u32 AHN, @16 the address vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreateAh {
    /// @8: protection domain (a driver-side number; recorded, not interpreted).
    pub pdn: u32,
    /// @12: address handle number.
    pub ahn: u32,
    /// @16: the address vector.
    pub av: AddressVector,
}

impl CreateAh {
    /// Bytes covered by the meaningful fields.
    pub const LEN: usize = 16 + AddressVector::SIZE;

    /// Decodes the meaningful fields.
    pub fn decode(r: &Request<'_>) -> Result<Self, Status> {
        Ok(CreateAh {
            pdn: r.u32(8)?,
            ahn: r.u32(12)?,
            av: AddressVector::decode_at(r, 16)?,
        })
    }

    /// Writes the meaningful fields into a command slot.
    pub fn write_fields(&self, slot: &mut [u8]) {
        put(slot, 8, &self.pdn.to_le_bytes());
        put(slot, 12, &self.ahn.to_le_bytes());
        self.av.write_fields_at(slot, 16);
    }
}

/// DESTROY_AH (RDMA/16), §3.5: @8 u32 PDN, @12 u32 AHN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DestroyAh {
    /// @8: protection domain (must be the one the AH was created with).
    pub pdn: u32,
    /// @12: address handle number.
    pub ahn: u32,
}

impl DestroyAh {
    /// Bytes covered by the meaningful fields.
    pub const LEN: usize = 16;

    /// Decodes the meaningful fields.
    pub fn decode(r: &Request<'_>) -> Result<Self, Status> {
        Ok(DestroyAh {
            pdn: r.u32(8)?,
            ahn: r.u32(12)?,
        })
    }

    /// Writes the meaningful fields into a command slot.
    pub fn write_fields(&self, slot: &mut [u8]) {
        put(slot, 8, &self.pdn.to_le_bytes());
        put(slot, 12, &self.ahn.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcode_table_is_consistent() {
        for &c in Command::ALL {
            assert_eq!(Command::from_code(c.code()), Some(c));
            assert_eq!(Command::from_name(c.name()), Some(c));
            assert_eq!(Command::from_name(&c.name().to_ascii_lowercase()), Some(c));
            assert_eq!(c.code().to_string(), c.name());
        }
        assert_eq!(Command::from_code(OpCode { sub: 0, op: 7 }), None);
        assert_eq!(Command::from_code(OpCode { sub: 2, op: 0 }), None);
        assert_eq!(OpCode { sub: 3, op: 200 }.to_string(), "3.200");
        assert_eq!(Command::CreateEq.code(), OpCode { sub: 1, op: 0 });
        assert_eq!(Command::QueryQp.code(), OpCode { sub: 0, op: 17 });
    }

    #[test]
    fn header_round_trip() {
        let h = Header {
            wqebb_index: 0xfffc,
            code: OpCode { sub: 1, op: 9 },
            cookie: 127,
            wqebbs: 4,
        };
        let v = h.encode();
        assert_eq!(v, 0x0030_007f_0109_fffc);
        assert_eq!(Header::decode(v), h);
        // Reserved bits are ignored; the count field decodes to 1..=8.
        let g = Header::decode(v | 0xff80_0000_fc00_0000 | 7 << 52);
        assert_eq!(g.wqebbs, 8);
        assert_eq!(g.code, OpCode { sub: 1, op: 9 });
        assert_eq!(Header::decode(0).wqebbs, 1);
    }

    #[test]
    fn cqe_is_big_endian() {
        let c = Cqe {
            owner: true,
            opcode: 0x11,
            qtype: 2,
            status: 0x05,
            start: 0x1234,
            resp0: 0x0102_0304_0506_0708,
            resp1: 0x1112_1314_1516_1718,
        };
        let b = c.encode();
        assert_eq!(
            b,
            [
                0x80, 0x11, 0x02, 0x05, 0x00, 0x00, 0x12, 0x34, // dw0, dw1
                0x05, 0x06, 0x07, 0x08, 0x01, 0x02, 0x03,
                0x04, // w0 = low, w1 = high of resp0
                0x15, 0x16, 0x17, 0x18, 0x11, 0x12, 0x13, 0x14, // resp1
                0, 0, 0, 0, 0, 0, 0, 0,
            ]
        );
        assert_eq!(Cqe::decode(&b), c);
    }

    #[test]
    fn requests_read_only_their_fields() {
        let mut slot = [0xeeu8; MAX_CMD_SIZE];
        let eq = CreateEq {
            ring: 0x1122_3344_5566_7000,
            vector: 3,
            eqn: 3,
            depth_log2: 12,
            ty: 1,
            dbrec: 0x0000_0009_8765_4328,
        };
        eq.write_fields(&mut slot);
        assert_eq!(CreateEq::decode(&Request::new(&slot)), Ok(eq));
        assert_eq!(
            CreateEq::decode(&Request::new(&slot[..CreateEq::LEN])),
            Ok(eq)
        );
        assert_eq!(
            CreateEq::decode(&Request::new(&slot[..CreateEq::LEN - 1])),
            Err(Status::Malformed)
        );
        let r = Request::new(&slot[..32]);
        assert_eq!(r.u64(25), Err(Status::Malformed));
        assert_eq!(r.u8(usize::MAX), Err(Status::Malformed));
        assert_eq!(r.len(), 32);
        assert!(!r.is_empty());

        let f = FreeDb {
            enable: DB_SQ | DB_CQ,
            rq_page: 1,
            sq_page: 2,
            cq_page: 3,
        };
        f.write_fields(&mut slot);
        assert_eq!(FreeDb::decode(&Request::new(&slot)), Ok(f));
        assert_eq!(f.pages().collect::<Vec<_>>(), [(DB_SQ, 2), (DB_CQ, 3)]);
        let c = ConfDevice {
            page_size_enable: true,
            page_shift: 16,
        };
        c.write_fields(&mut slot);
        assert_eq!(
            u32::from_le_bytes(slot[8..12].try_into().unwrap()),
            0x8000_0010
        );
        assert_eq!(ConfDevice::decode(&Request::new(&slot)), Ok(c));
    }

    #[test]
    fn address_vector_bytes() {
        // CREATE_AH as the driver lays it out (erdma_cmdq_create_ah_req), every byte spelled out.
        #[rustfmt::skip]
        let req: [u8; CreateAh::LEN] = [
            0x0f, 0, 0, 0, 0, 0, 0, 0,          // header (not decoded here)
            0x34, 0x12, 0x00, 0x00,             // @8 PDN 0x1234
            0x07, 0x00, 0x01, 0x00,             // @12 AHN 0x10007
            0x45, 0x23, 0x31, 0xe0,             // @16 cfg0: flow label 0x12345, IPv6, 31:21 junk
            0xb8,                               // @20 traffic class
            0x40,                               // @21 hop limit
            0x03,                               // @22 SL
            0x99,                               // @23 reserved (junk)
            0x07, 0xc0,                         // @24 UDP source port 0xc007
            0x02, 0x00,                         // @26 source GID index 2
            0x02, 0x11, 0x22, 0x33, 0x44, 0x55, // @28 destination MAC
            0xde, 0xad,                         // @34 padding (junk)
            0xfe, 0x80, 0, 0, 0, 0, 0, 0,       // @36 destination GID fe80::1:2
            0, 0, 0, 0, 0, 0x01, 0, 0x02,
        ];
        let want = CreateAh {
            pdn: 0x1234,
            ahn: 0x10007,
            av: AddressVector {
                flow_label: 0x12345,
                net_type: NetType::Ipv6,
                traffic_class: 0xb8,
                hop_limit: 0x40,
                sl: 3,
                udp_sport: 0xc007,
                sgid_index: 2,
                dmac: [0x02, 0x11, 0x22, 0x33, 0x44, 0x55],
                dgid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0, 0x02],
            },
        };
        assert_eq!(CreateAh::decode(&Request::new(&req)), Ok(want));
        assert_eq!(
            CreateAh::decode(&Request::new(&req[..CreateAh::LEN - 1])),
            Err(Status::Malformed)
        );
        // What the driver writes: junk bits and bytes zero, the rest identical.
        let mut clean = req;
        clean[18] = 0x11;
        clean[19] = 0;
        clean[23] = 0;
        clean[34..36].fill(0);
        assert_eq!(want.av.encode(), clean[16..]);
        // write_fields leaves the reserved and padding bytes alone.
        let mut slot = [0x5au8; 64];
        want.write_fields(&mut slot);
        assert_eq!(&slot[8..16], &clean[8..16]);
        assert_eq!((slot[23], &slot[34..36]), (0x5a, &[0x5a, 0x5a][..]));
        assert_eq!(CreateAh::decode(&Request::new(&slot)), Ok(want));
        // An IPv4 AV: bit 20 clear; the flow label is cut to 20 bits on encode.
        let v4 = AddressVector {
            flow_label: 0xfff_ffff,
            net_type: NetType::Ipv4,
            ..want.av
        };
        assert_eq!(&v4.encode()[..4], &[0xff, 0xff, 0x0f, 0x00]);
        // The AV decodes at any offset (MODIFY_QP carries it at 32).
        let mut q = [0u8; 72];
        q[32..68].copy_from_slice(&want.av.encode());
        assert_eq!(AddressVector::decode_at(&Request::new(&q), 32), Ok(want.av));
        assert_eq!(
            AddressVector::decode_at(&Request::new(&q), 37),
            Err(Status::Malformed)
        );
        assert_eq!(
            AddressVector::decode_at(&Request::new(&q), usize::MAX),
            Err(Status::Malformed)
        );

        let d = DestroyAh {
            pdn: 9,
            ahn: 0x8000,
        };
        d.write_fields(&mut slot);
        assert_eq!(&slot[8..16], &[9, 0, 0, 0, 0, 0x80, 0, 0]);
        assert_eq!(DestroyAh::decode(&Request::new(&slot[..16])), Ok(d));
    }

    #[test]
    fn set_gid_fields() {
        let gid = [0xab; GID_SIZE];
        let add = SetGid {
            index: 0x1234,
            op: GidOp::Add {
                net_type: NetType::Ipv6,
                gid,
            },
        };
        let mut slot = [0u8; 32];
        add.write_fields(&mut slot);
        assert_eq!(&slot[8..12], &[0x34, 0x12, 0x01, 0x00]);
        assert_eq!(&slot[12..28], &gid);
        assert_eq!(SetGid::decode(&Request::new(&slot)), Ok(add));
        // Delete: bit 31; the GID bytes (and bit 16) are not looked at, and need not be there.
        let del = SetGid {
            index: 7,
            op: GidOp::Delete,
        };
        del.write_fields(&mut slot);
        assert_eq!(&slot[8..12], &[7, 0, 0, 0x80]);
        assert_eq!(&slot[12..28], &gid, "left alone");
        assert_eq!(SetGid::decode(&Request::new(&slot[..12])), Ok(del));
        slot[10] = 0x01;
        assert_eq!(SetGid::decode(&Request::new(&slot)), Ok(del));
        // An add needs the GID.
        slot[11] = 0;
        assert_eq!(
            SetGid::decode(&Request::new(&slot[..SetGid::LEN - 1])),
            Err(Status::Malformed)
        );
        assert_eq!(NetType::from_bit(false).name(), "ipv4");
        assert_eq!(NetType::Ipv6.to_string(), "ipv6");
    }

    #[test]
    fn stats_buffer_layout() {
        // §3.6: from @16 tx_reqs, tx_packets, tx_bytes, tx_disable_drop, tx_bps_limit_drop,
        // tx_pps_limit_drop, rx_packets, rx_bytes, rx_disable_drop, rx_bps_limit_drop,
        // rx_pps_limit_drop.
        let counters = TrafficCounters {
            tx_reqs: 0x100,
            tx_packets: 0x101,
            tx_bytes: 0x102,
            tx_disable_drop: 0x103,
            tx_bps_limit_drop: 0x104,
            tx_pps_limit_drop: 0x105,
            rx_packets: 0x106,
            rx_bytes: 0x107,
            rx_disable_drop: 0x108,
            rx_bps_limit_drop: 0x109,
            rx_pps_limit_drop: 0x10a,
        };
        let b = stats_buffer(7, &counters);
        assert_eq!(b.len(), 104);
        assert_eq!(&b[0..4], &[0x66, 0x55, 1, 104]);
        assert_eq!(&b[4..16], &[7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        for i in 0..11u8 {
            let at = 16 + 8 * usize::from(i);
            assert_eq!(&b[at..at + 8], &[i, 1, 0, 0, 0, 0, 0, 0], "counter {i}");
        }
        assert_eq!(Counter::ALL.len(), 11);
    }

    #[test]
    fn status_names() {
        assert_eq!(Status::describe(2), "2 (invalid parameter)");
        assert_eq!(Status::describe(200), "200");
        for s in Status::ALL {
            assert_eq!(Status::ALL[usize::from(s.code())], s);
        }
    }
}
