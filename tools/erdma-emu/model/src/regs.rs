// SPDX-License-Identifier: GPL-2.0

//! The eRDMA BAR0 address map and register page (erdma_rs_hw 2.1, §2.2), BAR sizes and the MSI-X
//! layout.
//!
//! This module is the single place where BAR0 offsets are decoded: [`bar0_area`] splits BAR0 into
//! the register page and the doorbell spaces, and [`decode`] turns an offset inside the register
//! page into a [`Reg`]. The behaviour of each register lives in [`crate::device`].

use core::fmt;

use crate::stats::Counter;

// ------------------------------------------------------------------------------------------------
// BARs and MSI-X
// ------------------------------------------------------------------------------------------------

/// Size of BAR0 (registers and doorbells): 4 MiB.
///
/// The driver does not check the size. 4 MiB holds the register page and the SQ/RQ/CQ doorbell
/// spaces of erdma_rs_hw 2.1 in the first MiB and leaves 3 MiB (768 pages of 4 KiB) for the
/// "extended doorbell" pages handed out by ALLOC_DB.
pub const BAR0_SIZE: u64 = 4 << 20;
/// Size of BAR2 (MSI-X table and PBA): 8 KiB.
pub const BAR2_SIZE: u64 = 8 << 10;
/// Number of MSI-X vectors: vector 0 serves the CMDQ EQ and the AEQ, vectors 1..=31 one CEQ each.
pub const MSIX_VECTORS: u16 = 32;
/// BAR holding the MSI-X table and PBA.
pub const MSIX_BAR: u8 = 2;
/// Offset of the MSI-X table in [`MSIX_BAR`].
pub const MSIX_TABLE_OFFSET: u32 = 0x0;
/// Offset of the MSI-X pending-bit array in [`MSIX_BAR`].
pub const MSIX_PBA_OFFSET: u32 = 0x1000;

// ------------------------------------------------------------------------------------------------
// BAR0 address map (§2.1)
// ------------------------------------------------------------------------------------------------

/// Size of one doorbell page (the driver's layout assumes 4 KiB pages).
pub const DB_PAGE_SIZE: u64 = 0x1000;
/// Register page: `0x0..0x1000`.
pub const REG_PAGE_SIZE: u64 = 0x1000;
/// SQ doorbell space: 96 pages, `0x1000..0x61000`.
pub const SQDB_BASE: u64 = 0x1000;
/// End (exclusive) of the SQ doorbell space.
pub const SQDB_END: u64 = 0x61000;
/// The SQ doorbell page shared by all kernel QPs (page index 95 with 4 KiB pages).
pub const SQDB_SHARED_PAGE: u64 = 95 * DB_PAGE_SIZE;
/// RQ doorbell space: 24 pages, `0x61000..0x79000`. Kernel QPs all use offset 0.
pub const RQDB_BASE: u64 = 0x61000;
/// End (exclusive) of the RQ doorbell space.
pub const RQDB_END: u64 = 0x79000;
/// CQ doorbell space, from `0x79000`. Kernel CQs all use offset 0.
pub const CQDB_BASE: u64 = 0x79000;
/// End (exclusive) of the CQ doorbell space. The hardware description leaves it open; the model
/// gives the CQ doorbell space the rest of the first MiB.
pub const CQDB_END: u64 = 0x10_0000;
/// Offset of QP `qpn`'s slot in an RQ doorbell page (32-byte slots, `QPN & 127`).
pub fn rq_db_slot(qpn: u32) -> u64 {
    u64::from(qpn & 127) * 32
}
/// Offset of CQ `cqn`'s slot in a CQ doorbell page (8-byte slots, `CQN & 511`).
pub fn cq_db_slot(cqn: u32) -> u64 {
    u64::from(cqn & 511) * 8
}
/// Start of the pages the model reserves for "extended doorbell" pages (ALLOC_DB); they run to the
/// end of BAR0 (or to [`TEST_PAGE_BASE`] when the test page is enabled).
pub const EXTDB_BASE: u64 = 0x10_0000;
/// The opt-in test page (see [`test_page`]): the last 4 KiB of BAR0. When it is disabled, the page
/// is part of the extended doorbell space.
pub const TEST_PAGE_BASE: u64 = BAR0_SIZE - TEST_PAGE_SIZE;
/// Size of the test page.
pub const TEST_PAGE_SIZE: u64 = 0x1000;

/// The areas BAR0 is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bar0Area {
    /// The register page (§2.2).
    Registers,
    /// SQ doorbell pages (slots of 128 bytes, room for a direct WQE).
    SqDoorbells,
    /// RQ doorbell pages (slots of 32 bytes).
    RqDoorbells,
    /// CQ doorbell pages (slots of 8 bytes).
    CqDoorbells,
    /// Extended doorbell pages handed out per user context.
    ExtDoorbells,
    /// The model's test page (only when enabled, see [`test_page`]).
    TestPage,
}

impl Bar0Area {
    /// Name used in log messages.
    pub fn name(self) -> &'static str {
        match self {
            Bar0Area::Registers => "register page",
            Bar0Area::SqDoorbells => "SQ doorbell space",
            Bar0Area::RqDoorbells => "RQ doorbell space",
            Bar0Area::CqDoorbells => "CQ doorbell space",
            Bar0Area::ExtDoorbells => "extended doorbell space",
            Bar0Area::TestPage => "test page",
        }
    }
}

/// The area of BAR0 that contains `offset` and the area's `(start, end)` offsets (end exclusive),
/// or `None` if `offset` is beyond [`BAR0_SIZE`]. This is the map without the test page.
pub fn bar0_area(offset: u64) -> Option<(Bar0Area, u64, u64)> {
    bar0_area_with(offset, false)
}

/// Like [`bar0_area`], with the test page carved out of the end of the extended doorbell space
/// when `test_page` is true.
pub fn bar0_area_with(offset: u64, test_page: bool) -> Option<(Bar0Area, u64, u64)> {
    match offset {
        TEST_PAGE_BASE..BAR0_SIZE if test_page => {
            Some((Bar0Area::TestPage, TEST_PAGE_BASE, BAR0_SIZE))
        }
        EXTDB_BASE..TEST_PAGE_BASE if test_page => {
            Some((Bar0Area::ExtDoorbells, EXTDB_BASE, TEST_PAGE_BASE))
        }
        0..REG_PAGE_SIZE => Some((Bar0Area::Registers, 0, REG_PAGE_SIZE)),
        SQDB_BASE..SQDB_END => Some((Bar0Area::SqDoorbells, SQDB_BASE, SQDB_END)),
        RQDB_BASE..RQDB_END => Some((Bar0Area::RqDoorbells, RQDB_BASE, RQDB_END)),
        CQDB_BASE..CQDB_END => Some((Bar0Area::CqDoorbells, CQDB_BASE, CQDB_END)),
        EXTDB_BASE..BAR0_SIZE => Some((Bar0Area::ExtDoorbells, EXTDB_BASE, BAR0_SIZE)),
        _ => None,
    }
}

// ------------------------------------------------------------------------------------------------
// Register page (§2.2)
// ------------------------------------------------------------------------------------------------

/// VERSION (R32): non-zero for a functional device.
pub const VERSION: u64 = 0x000;
/// DEV_PROTO (R32): 0 iWARP, 1 RoCEv2.
pub const DEV_PROTO: u64 = 0x00C;
/// DEV_CTRL (W32): [`DEV_CTRL_RESET`], [`DEV_CTRL_INIT`].
pub const DEV_CTRL: u64 = 0x010;
/// DEV_STATUS (R32): [`DEV_STATUS_RESET_DONE`], [`DEV_STATUS_INIT_DONE`].
pub const DEV_STATUS: u64 = 0x014;
/// NETDEV_MAC_L (R32): MAC bytes 2..5, MAC\[2\] in bits 31:24.
pub const NETDEV_MAC_L: u64 = 0x018;
/// NETDEV_MAC_H (R32): MAC bytes 0..1, MAC\[0\] in bits 15:8.
pub const NETDEV_MAC_H: u64 = 0x01C;
/// CMDQ_SQ_ADDR_L (W32): CMDQ SQ ring DMA address, low half.
pub const CMDQ_SQ_ADDR_L: u64 = 0x020;
/// CMDQ_SQ_ADDR_H (W32): CMDQ SQ ring DMA address, high half.
pub const CMDQ_SQ_ADDR_H: u64 = 0x024;
/// CMDQ_CQ_ADDR_L (W32): CMDQ CQ ring DMA address, low half.
pub const CMDQ_CQ_ADDR_L: u64 = 0x028;
/// CMDQ_CQ_ADDR_H (W32): CMDQ CQ ring DMA address, high half.
pub const CMDQ_CQ_ADDR_H: u64 = 0x02C;
/// CMDQ_DEPTH (W32): CMDQ SQ depth in 32-byte WQEBBs; the CMDQ CQ has as many CQEs.
pub const CMDQ_DEPTH: u64 = 0x030;
/// CMDQ_EQ_DEPTH (W32): CMDQ EQ depth in entries.
pub const CMDQ_EQ_DEPTH: u64 = 0x034;
/// CMDQ_EQ_ADDR_L (W32): CMDQ EQ ring DMA address, low half.
pub const CMDQ_EQ_ADDR_L: u64 = 0x038;
/// CMDQ_EQ_ADDR_H (W32): CMDQ EQ ring DMA address, high half.
pub const CMDQ_EQ_ADDR_H: u64 = 0x03C;
/// AEQ_ADDR_L (W32): AEQ ring DMA address, low half.
pub const AEQ_ADDR_L: u64 = 0x040;
/// AEQ_ADDR_H (W32): AEQ ring DMA address, high half.
pub const AEQ_ADDR_H: u64 = 0x044;
/// AEQ_DEPTH (W32): AEQ depth in entries.
pub const AEQ_DEPTH: u64 = 0x048;
/// GRP_NUM (R32): number of direct-WQE groups (historical).
pub const GRP_NUM: u64 = 0x04C;
/// AEQ_DB (W64): AEQ doorbell.
pub const AEQ_DB: u64 = 0x050;
/// CMDQ_SQ_DBREC_ADDR (W64): DMA address of the CMDQ SQ doorbell record.
pub const CMDQ_SQ_DBREC_ADDR: u64 = 0x060;
/// CMDQ_CQ_DBREC_ADDR (W64): DMA address of the CMDQ CQ doorbell record.
pub const CMDQ_CQ_DBREC_ADDR: u64 = 0x068;
/// CMDQ_EQ_DBREC_ADDR (W64): DMA address of the CMDQ EQ doorbell record.
pub const CMDQ_EQ_DBREC_ADDR: u64 = 0x070;
/// AEQ_DBREC_ADDR (W64): DMA address of the AEQ doorbell record.
pub const AEQ_DBREC_ADDR: u64 = 0x078;
/// A statistics register (R64): where it is, its name and the traffic counter it reads (the
/// pairing is the model's, see [`crate::stats`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatsReg {
    /// Offset in the register page.
    pub offset: u64,
    /// Name.
    pub name: &'static str,
    /// The counter it reads.
    pub counter: Counter,
}

const fn stats_reg(offset: u64, name: &'static str, counter: Counter) -> StatsReg {
    StatsReg {
        offset,
        name,
        counter,
    }
}

/// The statistics registers, in register order.
pub const STATS: [StatsReg; 11] = [
    stats_reg(0x080, "STATS_TSO_IN_PKTS", Counter::TxReqs),
    stats_reg(0x088, "STATS_TSO_OUT_PKTS", Counter::TxPackets),
    stats_reg(0x090, "STATS_TSO_OUT_BYTES", Counter::TxBytes),
    stats_reg(0x098, "STATS_TX_DROP_PKTS", Counter::TxDisableDrop),
    stats_reg(
        0x0A0,
        "STATS_TX_BPS_METER_DROP_PKTS",
        Counter::TxBpsLimitDrop,
    ),
    stats_reg(
        0x0A8,
        "STATS_TX_PPS_METER_DROP_PKTS",
        Counter::TxPpsLimitDrop,
    ),
    stats_reg(0x0C0, "STATS_RX_PKTS", Counter::RxPackets),
    stats_reg(0x0C8, "STATS_RX_BYTES", Counter::RxBytes),
    stats_reg(0x0D0, "STATS_RX_DROP_PKTS", Counter::RxDisableDrop),
    stats_reg(
        0x0D8,
        "STATS_RX_BPS_METER_DROP_PKTS",
        Counter::RxBpsLimitDrop,
    ),
    stats_reg(
        0x0E0,
        "STATS_RX_PPS_METER_DROP_PKTS",
        Counter::RxPpsLimitDrop,
    ),
];
/// EQ_DB\[0\] (W64); EQ_DB\[n\] is at `EQ_DB_BASE + 8 * n`, see [`eq_db`].
pub const EQ_DB_BASE: u64 = 0x100;
/// Number of EQ doorbells: n = 0 is the CMDQ EQ, n = k + 1 is CEQ k.
pub const EQ_DB_COUNT: u8 = 32;
/// CMDQ_SQ_DB (W64): bits 15:0 are the new CMDQ SQ producer index in WQEBBs.
pub const CMDQ_SQ_DB: u64 = 0x200;
/// CMDQ_CQ_DB (W64): CMDQ CQ arm doorbell.
pub const CMDQ_CQ_DB: u64 = 0x300;

/// DEV_CTRL bit 0: reset the function.
pub const DEV_CTRL_RESET: u32 = 1 << 0;
/// DEV_CTRL bit 1: latch the programmed admin queues and start the function.
pub const DEV_CTRL_INIT: u32 = 1 << 1;
/// DEV_STATUS bit 0: a reset completed.
pub const DEV_STATUS_RESET_DONE: u32 = 1 << 0;
/// DEV_STATUS bit 1: initialization completed (polled by the driver after INIT).
pub const DEV_STATUS_INIT_DONE: u32 = 1 << 1;

/// Offset of EQ_DB\[n\].
pub const fn eq_db(n: u8) -> u64 {
    EQ_DB_BASE + 8 * n as u64
}

// ------------------------------------------------------------------------------------------------
// Doorbell values (§3.2, §4.1, §4.4)
// ------------------------------------------------------------------------------------------------

/// The new CMDQ SQ producer index (WQEBB units) in a CMDQ_SQ_DB value: bits 15:0.
pub fn cmdq_sq_db_pi(value: u64) -> u16 {
    value as u16
}

/// An EQ doorbell value (AEQ_DB, EQ_DB\[n\]): bits 23:0 consumer index, bit 31 ARM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EqDoorbell {
    /// Consumer index (the driver's entry counter, 24 bits).
    pub ci: u32,
    /// Re-arm the EQ.
    pub arm: bool,
}

impl EqDoorbell {
    /// Decodes a doorbell value; the other bits are ignored.
    pub fn decode(value: u64) -> Self {
        EqDoorbell {
            ci: (value & 0x00ff_ffff) as u32,
            arm: value & (1 << 31) != 0,
        }
    }

    /// Encodes the doorbell value (what a driver writes).
    pub fn encode(self) -> u64 {
        u64::from(self.ci & 0x00ff_ffff) | u64::from(self.arm) << 31
    }
}

/// A CQ doorbell value (CMDQ_CQ_DB and the data CQs, §4.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqDoorbell {
    /// Consumer index, bits 23:0.
    pub ci: u32,
    /// CMDSN, bits 29:28.
    pub cmdsn: u8,
    /// SOL (solicited only), bit 30.
    pub solicited: bool,
    /// ARM, bit 31.
    pub arm: bool,
    /// CQN, bits 55:32 (0 for the CMDQ CQ).
    pub cqn: u32,
    /// Arm sequence, bits 63:56.
    pub seq: u8,
}

impl CqDoorbell {
    /// Decodes a doorbell value; bits 27:24 are ignored.
    pub fn decode(value: u64) -> Self {
        CqDoorbell {
            ci: (value & 0x00ff_ffff) as u32,
            cmdsn: ((value >> 28) & 3) as u8,
            solicited: value & (1 << 30) != 0,
            arm: value & (1 << 31) != 0,
            cqn: ((value >> 32) & 0x00ff_ffff) as u32,
            seq: (value >> 56) as u8,
        }
    }

    /// Encodes the doorbell value (what a driver writes).
    pub fn encode(self) -> u64 {
        u64::from(self.ci & 0x00ff_ffff)
            | u64::from(self.cmdsn & 3) << 28
            | u64::from(self.solicited) << 30
            | u64::from(self.arm) << 31
            | u64::from(self.cqn & 0x00ff_ffff) << 32
            | u64::from(self.seq) << 56
    }
}

// ------------------------------------------------------------------------------------------------
// The test page (model-specific, opt-in)
// ------------------------------------------------------------------------------------------------

/// Layout of the model's opt-in test page at [`TEST_PAGE_BASE`] (offsets relative to the page).
///
/// Tests running inside the guest drive the model's control language through it with plain MMIO
/// (busybox `devmem`): write a NUL-terminated ASCII command into the mailbox, write 1 to
/// [`EXECUTE`](test_page::EXECUTE), read [`STATUS`](test_page::STATUS) and the reply.
pub mod test_page {
    /// MAGIC (RO u32): [`MAGIC_VALUE`].
    pub const MAGIC: u64 = 0x000;
    /// STATUS (RO u32): 0 if the last command succeeded, 1 if it failed.
    pub const STATUS: u64 = 0x004;
    /// EXECUTE (WO u32): writing 1 runs the command in the mailbox.
    pub const EXECUTE: u64 = 0x008;
    /// Mailbox (RW bytes): the NUL-terminated ASCII command.
    pub const MAILBOX: u64 = 0x100;
    /// Reply (RO bytes): the NUL-terminated ASCII reply of the last command.
    pub const REPLY: u64 = 0x200;
    /// Size of the mailbox and of the reply buffer.
    pub const BUF_SIZE: u64 = 0x100;
    /// The MAGIC value: "TEST" in little-endian byte order.
    pub const MAGIC_VALUE: u32 = 0x5453_4554;

    /// What a byte of the test page is.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Field {
        /// Byte `n` (0..4) of MAGIC.
        Magic(u8),
        /// Byte `n` of STATUS.
        Status(u8),
        /// Byte `n` of EXECUTE.
        Execute(u8),
        /// Byte `n` of the mailbox.
        Mailbox(u8),
        /// Byte `n` of the reply.
        Reply(u8),
        /// Unused (reads 0, writes ignored).
        Unused,
    }

    /// Decodes byte `offset` of the test page.
    pub fn decode(offset: u64) -> Field {
        let byte = |base: u64| (offset - base) as u8;
        match offset {
            MAGIC..STATUS => Field::Magic(byte(MAGIC)),
            STATUS..EXECUTE => Field::Status(byte(STATUS)),
            0x008..0x00C => Field::Execute(byte(EXECUTE)),
            0x100..0x200 => Field::Mailbox(byte(MAILBOX)),
            0x200..0x300 => Field::Reply(byte(REPLY)),
            _ => Field::Unused,
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Admin queue geometry (§3.1, §4.1) used to validate INIT
// ------------------------------------------------------------------------------------------------

/// Size of a CMDQ SQ WQEBB.
pub const CMDQ_WQEBB_SIZE: u64 = 32;
/// WQEBBs used by one command (128 bytes).
pub const CMDQ_WQEBBS_PER_CMD: u32 = 4;
/// Size of a CMDQ CQE.
pub const CMDQ_CQE_SIZE: u64 = 32;
/// Size of an event queue entry (CMDQ EQ, AEQ, CEQ).
pub const EQE_SIZE: u64 = 16;
/// Largest ring depth the model accepts (the driver's EQ consumer index is a 16-bit counter and
/// the CMDQ SQ producer index in the doorbell has 16 bits).
pub const MAX_RING_DEPTH: u32 = 1 << 16;
/// Required alignment of a doorbell record address.
pub const DBREC_ALIGN: u64 = 8;

// ------------------------------------------------------------------------------------------------
// Decoding
// ------------------------------------------------------------------------------------------------

/// One of the four queues set up through registers before INIT.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AdminQueue {
    /// CMDQ submission queue.
    CmdqSq,
    /// CMDQ completion queue.
    CmdqCq,
    /// CMDQ event queue (EQN 0).
    CmdqEq,
    /// Asynchronous event queue.
    Aeq,
}

impl AdminQueue {
    /// All admin queues, in doorbell-record register order.
    pub const ALL: [AdminQueue; 4] = [
        AdminQueue::CmdqSq,
        AdminQueue::CmdqCq,
        AdminQueue::CmdqEq,
        AdminQueue::Aeq,
    ];

    /// Index into [`AdminQueue::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Offset of the queue's doorbell-record address register.
    pub fn dbrec_reg(self) -> u64 {
        CMDQ_SQ_DBREC_ADDR + 8 * self as u64
    }
}

/// The 64-bit doorbell registers of the register page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Doorbell {
    /// AEQ_DB (0x50).
    Aeq,
    /// EQ_DB\[n\] (0x100 + 8n): n = 0 is the CMDQ EQ, n = k + 1 is CEQ k. `n < 32`.
    Eq(u8),
    /// CMDQ_SQ_DB (0x200).
    CmdqSq,
    /// CMDQ_CQ_DB (0x300).
    CmdqCq,
}

impl Doorbell {
    /// Number of distinct doorbell registers.
    pub const COUNT: usize = 3 + EQ_DB_COUNT as usize;

    /// A dense index in `0..Doorbell::COUNT`.
    pub fn index(self) -> usize {
        match self {
            Doorbell::Aeq => 0,
            Doorbell::CmdqSq => 1,
            Doorbell::CmdqCq => 2,
            Doorbell::Eq(n) => 3 + usize::from(n % EQ_DB_COUNT),
        }
    }

    /// Offset of the doorbell register.
    pub fn offset(self) -> u64 {
        match self {
            Doorbell::Aeq => AEQ_DB,
            Doorbell::Eq(n) => eq_db(n % EQ_DB_COUNT),
            Doorbell::CmdqSq => CMDQ_SQ_DB,
            Doorbell::CmdqCq => CMDQ_CQ_DB,
        }
    }
}

/// A register of the register page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reg {
    /// VERSION.
    Version,
    /// DEV_PROTO.
    DevProto,
    /// DEV_CTRL.
    DevCtrl,
    /// DEV_STATUS.
    DevStatus,
    /// NETDEV_MAC_L.
    NetdevMacL,
    /// NETDEV_MAC_H.
    NetdevMacH,
    /// Low half of an admin queue ring address (CMDQ_SQ/CQ/EQ_ADDR_L, AEQ_ADDR_L).
    RingAddrL(AdminQueue),
    /// High half of an admin queue ring address.
    RingAddrH(AdminQueue),
    /// CMDQ_DEPTH.
    CmdqDepth,
    /// CMDQ_EQ_DEPTH.
    CmdqEqDepth,
    /// AEQ_DEPTH.
    AeqDepth,
    /// GRP_NUM.
    GrpNum,
    /// A doorbell-record address register (64-bit).
    DbrecAddr(AdminQueue),
    /// Statistics counter `n` of [`STATS`] (64-bit).
    Stats(u8),
    /// A doorbell register (64-bit).
    Doorbell(Doorbell),
}

/// A decoded register: what it is, where it starts and how wide it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegSlot {
    /// The register.
    pub reg: Reg,
    /// Offset of its first byte.
    pub base: u64,
    /// Width in bytes (4 or 8).
    pub width: u64,
}

/// The register that contains byte `offset` of the register page, or `None` for a hole.
pub fn decode(offset: u64) -> Option<RegSlot> {
    let dword = offset & !3;
    let r32 = |reg| {
        Some(RegSlot {
            reg,
            base: dword,
            width: 4,
        })
    };
    let qword = offset & !7;
    let r64 = |reg| {
        Some(RegSlot {
            reg,
            base: qword,
            width: 8,
        })
    };
    match dword {
        VERSION => r32(Reg::Version),
        DEV_PROTO => r32(Reg::DevProto),
        DEV_CTRL => r32(Reg::DevCtrl),
        DEV_STATUS => r32(Reg::DevStatus),
        NETDEV_MAC_L => r32(Reg::NetdevMacL),
        NETDEV_MAC_H => r32(Reg::NetdevMacH),
        CMDQ_SQ_ADDR_L => r32(Reg::RingAddrL(AdminQueue::CmdqSq)),
        CMDQ_SQ_ADDR_H => r32(Reg::RingAddrH(AdminQueue::CmdqSq)),
        CMDQ_CQ_ADDR_L => r32(Reg::RingAddrL(AdminQueue::CmdqCq)),
        CMDQ_CQ_ADDR_H => r32(Reg::RingAddrH(AdminQueue::CmdqCq)),
        CMDQ_DEPTH => r32(Reg::CmdqDepth),
        CMDQ_EQ_DEPTH => r32(Reg::CmdqEqDepth),
        CMDQ_EQ_ADDR_L => r32(Reg::RingAddrL(AdminQueue::CmdqEq)),
        CMDQ_EQ_ADDR_H => r32(Reg::RingAddrH(AdminQueue::CmdqEq)),
        AEQ_ADDR_L => r32(Reg::RingAddrL(AdminQueue::Aeq)),
        AEQ_ADDR_H => r32(Reg::RingAddrH(AdminQueue::Aeq)),
        AEQ_DEPTH => r32(Reg::AeqDepth),
        GRP_NUM => r32(Reg::GrpNum),
        _ => match qword {
            AEQ_DB => r64(Reg::Doorbell(Doorbell::Aeq)),
            CMDQ_SQ_DBREC_ADDR => r64(Reg::DbrecAddr(AdminQueue::CmdqSq)),
            CMDQ_CQ_DBREC_ADDR => r64(Reg::DbrecAddr(AdminQueue::CmdqCq)),
            CMDQ_EQ_DBREC_ADDR => r64(Reg::DbrecAddr(AdminQueue::CmdqEq)),
            AEQ_DBREC_ADDR => r64(Reg::DbrecAddr(AdminQueue::Aeq)),
            CMDQ_SQ_DB => r64(Reg::Doorbell(Doorbell::CmdqSq)),
            CMDQ_CQ_DB => r64(Reg::Doorbell(Doorbell::CmdqCq)),
            q if (EQ_DB_BASE..eq_db(EQ_DB_COUNT)).contains(&q) => {
                // The range check bounds the quotient by EQ_DB_COUNT.
                r64(Reg::Doorbell(Doorbell::Eq(((q - EQ_DB_BASE) / 8) as u8)))
            }
            q => STATS
                .iter()
                .position(|s| s.offset == q)
                .and_then(|i| r64(Reg::Stats(i as u8))),
        },
    }
}

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let q = |q: &AdminQueue| match q {
            AdminQueue::CmdqSq => "CMDQ_SQ",
            AdminQueue::CmdqCq => "CMDQ_CQ",
            AdminQueue::CmdqEq => "CMDQ_EQ",
            AdminQueue::Aeq => "AEQ",
        };
        match self {
            Reg::Version => f.write_str("VERSION"),
            Reg::DevProto => f.write_str("DEV_PROTO"),
            Reg::DevCtrl => f.write_str("DEV_CTRL"),
            Reg::DevStatus => f.write_str("DEV_STATUS"),
            Reg::NetdevMacL => f.write_str("NETDEV_MAC_L"),
            Reg::NetdevMacH => f.write_str("NETDEV_MAC_H"),
            Reg::RingAddrL(a) => write!(f, "{}_ADDR_L", q(a)),
            Reg::RingAddrH(a) => write!(f, "{}_ADDR_H", q(a)),
            Reg::CmdqDepth => f.write_str("CMDQ_DEPTH"),
            Reg::CmdqEqDepth => f.write_str("CMDQ_EQ_DEPTH"),
            Reg::AeqDepth => f.write_str("AEQ_DEPTH"),
            Reg::GrpNum => f.write_str("GRP_NUM"),
            Reg::DbrecAddr(a) => write!(f, "{}_DBREC_ADDR", q(a)),
            Reg::Stats(n) => {
                let name = STATS.get(usize::from(*n)).map_or("STATS_?", |s| s.name);
                f.write_str(name)
            }
            Reg::Doorbell(Doorbell::Aeq) => f.write_str("AEQ_DB"),
            Reg::Doorbell(Doorbell::Eq(n)) => write!(f, "EQ_DB[{n}]"),
            Reg::Doorbell(Doorbell::CmdqSq) => f.write_str("CMDQ_SQ_DB"),
            Reg::Doorbell(Doorbell::CmdqCq) => f.write_str("CMDQ_CQ_DB"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_register_decodes_at_its_offset() {
        let table: &[(u64, Reg, u64)] = &[
            (VERSION, Reg::Version, 4),
            (DEV_PROTO, Reg::DevProto, 4),
            (DEV_CTRL, Reg::DevCtrl, 4),
            (DEV_STATUS, Reg::DevStatus, 4),
            (NETDEV_MAC_L, Reg::NetdevMacL, 4),
            (NETDEV_MAC_H, Reg::NetdevMacH, 4),
            (CMDQ_SQ_ADDR_L, Reg::RingAddrL(AdminQueue::CmdqSq), 4),
            (CMDQ_SQ_ADDR_H, Reg::RingAddrH(AdminQueue::CmdqSq), 4),
            (CMDQ_CQ_ADDR_L, Reg::RingAddrL(AdminQueue::CmdqCq), 4),
            (CMDQ_CQ_ADDR_H, Reg::RingAddrH(AdminQueue::CmdqCq), 4),
            (CMDQ_DEPTH, Reg::CmdqDepth, 4),
            (CMDQ_EQ_DEPTH, Reg::CmdqEqDepth, 4),
            (CMDQ_EQ_ADDR_L, Reg::RingAddrL(AdminQueue::CmdqEq), 4),
            (CMDQ_EQ_ADDR_H, Reg::RingAddrH(AdminQueue::CmdqEq), 4),
            (AEQ_ADDR_L, Reg::RingAddrL(AdminQueue::Aeq), 4),
            (AEQ_ADDR_H, Reg::RingAddrH(AdminQueue::Aeq), 4),
            (AEQ_DEPTH, Reg::AeqDepth, 4),
            (GRP_NUM, Reg::GrpNum, 4),
            (AEQ_DB, Reg::Doorbell(Doorbell::Aeq), 8),
            (CMDQ_SQ_DBREC_ADDR, Reg::DbrecAddr(AdminQueue::CmdqSq), 8),
            (CMDQ_CQ_DBREC_ADDR, Reg::DbrecAddr(AdminQueue::CmdqCq), 8),
            (CMDQ_EQ_DBREC_ADDR, Reg::DbrecAddr(AdminQueue::CmdqEq), 8),
            (AEQ_DBREC_ADDR, Reg::DbrecAddr(AdminQueue::Aeq), 8),
            (CMDQ_SQ_DB, Reg::Doorbell(Doorbell::CmdqSq), 8),
            (CMDQ_CQ_DB, Reg::Doorbell(Doorbell::CmdqCq), 8),
        ];
        for &(off, reg, width) in table {
            for byte in 0..width {
                let slot = decode(off + byte).unwrap();
                assert_eq!(
                    slot,
                    RegSlot {
                        reg,
                        base: off,
                        width
                    },
                    "offset {:#x}",
                    off + byte
                );
            }
        }
        for (n, s) in STATS.iter().enumerate() {
            assert_eq!(decode(s.offset + 5).unwrap().reg, Reg::Stats(n as u8));
        }
        for n in 0..EQ_DB_COUNT {
            let slot = decode(eq_db(n) + 4).unwrap();
            assert_eq!(
                (slot.reg, slot.base),
                (Reg::Doorbell(Doorbell::Eq(n)), eq_db(n))
            );
            assert_eq!(Doorbell::Eq(n).offset(), eq_db(n));
        }
        for q in AdminQueue::ALL {
            assert_eq!(decode(q.dbrec_reg()).unwrap().reg, Reg::DbrecAddr(q));
        }
    }

    #[test]
    fn holes_decode_to_none() {
        for off in [0x4, 0x8, 0x58, 0xB0, 0xB8, 0xE8, 0xF8, 0x208, 0x308, 0xFFC] {
            assert_eq!(decode(off), None, "offset {off:#x}");
        }
    }

    #[test]
    fn doorbell_indices_are_dense_and_unique() {
        let mut seen = [false; Doorbell::COUNT];
        let all = [Doorbell::Aeq, Doorbell::CmdqSq, Doorbell::CmdqCq]
            .into_iter()
            .chain((0..EQ_DB_COUNT).map(Doorbell::Eq));
        for db in all {
            assert!(!seen[db.index()]);
            seen[db.index()] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn bar0_map() {
        assert_eq!(bar0_area(0).unwrap().0, Bar0Area::Registers);
        assert_eq!(bar0_area(0xFFF).unwrap().0, Bar0Area::Registers);
        assert_eq!(bar0_area(0x1000).unwrap().0, Bar0Area::SqDoorbells);
        assert_eq!(
            bar0_area(SQDB_SHARED_PAGE).unwrap().0,
            Bar0Area::SqDoorbells
        );
        assert_eq!(bar0_area(0x60FFF).unwrap().0, Bar0Area::SqDoorbells);
        assert_eq!(bar0_area(0x61000).unwrap().0, Bar0Area::RqDoorbells);
        assert_eq!(bar0_area(0x78FFF).unwrap().0, Bar0Area::RqDoorbells);
        assert_eq!(bar0_area(0x79000).unwrap().0, Bar0Area::CqDoorbells);
        assert_eq!(bar0_area(0x10_0000).unwrap().0, Bar0Area::ExtDoorbells);
        assert_eq!(bar0_area(BAR0_SIZE - 1).unwrap().0, Bar0Area::ExtDoorbells);
        assert_eq!(bar0_area(BAR0_SIZE), None);
        assert_eq!(Reg::Doorbell(Doorbell::Eq(7)).to_string(), "EQ_DB[7]");
        assert_eq!(Reg::RingAddrH(AdminQueue::Aeq).to_string(), "AEQ_ADDR_H");
    }
}
