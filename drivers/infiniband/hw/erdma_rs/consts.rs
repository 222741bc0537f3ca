// SPDX-License-Identifier: GPL-2.0

//! Numbers of the adapter's interface, each stated once: entry sizes, limits, opcodes, object
//! types and the doorbell spaces of BAR0 (erdma_rs_hw 2.1, 3, 5, 6, 9).

/// Whether `x` is a multiple of `n` (`n` > 0). Rust has `is_multiple_of` from 1.87; the driver
/// also builds with the rustc Debian's kernels are built with, 1.85 (issue 32).
#[allow(clippy::manual_is_multiple_of)]
pub(crate) const fn multiple_of(x: u64, n: u64) -> bool {
    x % n == 0
}

/// Bytes of a send-queue basic block (WQEBB), of the command queue's too.
pub(crate) const WQEBB_SIZE: usize = 32;
/// Bytes of a receive-queue entry.
pub(crate) const RQE_SIZE: usize = 32;
/// Bytes of a completion-queue entry, of the command queue's too.
pub(crate) const CQE_SIZE: usize = 32;
/// Bytes of an event-queue entry.
pub(crate) const EQE_SIZE: usize = 16;
/// Basic blocks of the largest send-queue entry (128 bytes).
pub(crate) const MAX_SQE_WQEBBS: usize = 4;
/// Send-queue basic blocks reserved per work request when sizing a send queue.
pub(crate) const WQEBBS_PER_WR: u32 = 4;

/// Work requests of a send queue at most.
pub(crate) const MAX_SEND_WR: u32 = 8192;
/// Scatter/gather entries of a send work request at most.
pub(crate) const MAX_SEND_SGE: u32 = 6;
/// Scatter/gather entries of a receive work request at most.
pub(crate) const MAX_RECV_SGE: u32 = 1;
/// Inline bytes of a send work request at most.
pub(crate) const MAX_INLINE: u32 = 96;
/// Protection domains at most.
pub(crate) const MAX_PD: u32 = 128 * 1024;
/// User contexts at most.
pub(crate) const MAX_CONTEXTS: u32 = 128 * 1024;
/// Outstanding RDMA Reads and atomics per QP, either direction.
pub(crate) const MAX_RD_ATOM: u32 = 128;
/// Pages a fast-registration region may be allocated for.
pub(crate) const MAX_FRMR_PAGES: u32 = 512 * 1024;
/// The fast-registration page-list length reported to consumers (`max_fast_reg_page_list_len`),
/// smaller than what [`MAX_FRMR_PAGES`] accepts, as the C driver reports.
pub(crate) const FAST_REG_PAGE_LIST_LEN: u32 = 512;
/// Completion event queues at most: one per MSI-X vector after vector 0.
pub(crate) const MAX_CEQS: u32 = 31;

/// Page sizes the adapter accepts for queue-pair buffers: 4 KiB to 512 KiB.
pub(crate) const QP_PAGE_SIZES: u64 = 0x000f_f000;
/// Page sizes the adapter accepts for completion-queue buffers: 4 KiB to 32 MiB.
pub(crate) const CQ_PAGE_SIZES: u64 = 0x03ff_f000;
/// Page sizes the adapter accepts for memory regions: 4 KiB to 1 GiB (`page_size_cap`).
pub(crate) const MR_PAGE_SIZES: u64 = 0x7fff_f000;
/// MTT entries CREATE_QP and REG_MR carry inline.
pub(crate) const INLINE_MTT: usize = 4;
/// Levels of a multi-level MTT at most.
pub(crate) const MAX_MTT_LEVELS: u32 = 3;
/// Kernel queue pairs: each queue is one contiguous buffer, described as one "page" of 1 MiB.
pub(crate) const KERNEL_QP_PAGE_CODE: u32 = 8;
/// Kernel completion queues: one contiguous ring, described as one "page" of 32 MiB.
pub(crate) const KERNEL_CQ_PAGE_CODE: u32 = 13;
/// The largest ring of a kernel completion queue.
pub(crate) const KERNEL_CQ_BYTES: u64 = 32 << 20;

/// QP number of the GSI QP on RoCE adapters, never handed to other QPs.
pub(crate) const GSI_QPN: u32 = 1;

/// BAR0 offset of the SQ doorbell space (96 pages).
pub(crate) const SQDB_SPACE: usize = 0x1000;
/// BAR0 offset of the RQ doorbell space (24 pages).
pub(crate) const RQDB_SPACE: usize = 0x61000;
/// BAR0 offset of the CQ doorbell space.
pub(crate) const CQDB_SPACE: usize = 0x79000;
/// BAR0 offset of the SQ doorbell every kernel QP shares: page 95 of 4 KiB.
pub(crate) const KERNEL_SQ_DB: usize = 95 * 0x1000;
/// BAR0 offset of the RQ doorbell every kernel QP shares: the first slot of its space.
pub(crate) const KERNEL_RQ_DB: usize = RQDB_SPACE;
/// BAR0 offset of the CQ doorbell every kernel CQ shares: the first slot of its space.
pub(crate) const KERNEL_CQ_DB: usize = CQDB_SPACE;

/// Opcodes of send-queue entries and completion entries (erdma_rs_hw 5.3).
pub(crate) mod opcode {
    pub(crate) const WRITE: u8 = 0;
    pub(crate) const READ: u8 = 1;
    pub(crate) const SEND: u8 = 2;
    pub(crate) const SEND_WITH_IMM: u8 = 3;
    pub(crate) const RECV_IMM: u8 = 5;
    pub(crate) const RECV_INV: u8 = 6;
    pub(crate) const WRITE_WITH_IMM: u8 = 9;
    pub(crate) const INVALIDATE: u8 = 11;
    pub(crate) const RSP_SEND_IMM: u8 = 12;
    pub(crate) const SEND_WITH_INV: u8 = 13;
    pub(crate) const REG_MR: u8 = 14;
    pub(crate) const LOCAL_INV: u8 = 15;
    pub(crate) const READ_WITH_INV: u8 = 16;
    pub(crate) const ATOMIC_CAS: u8 = 17;
    pub(crate) const ATOMIC_FAA: u8 = 18;
}

/// Queue types of completion entries (0 is the send queue).
pub(crate) mod cqe_queue {
    /// A receive-queue completion.
    pub(crate) const RQ: u8 = 1;
}

/// QP types of CREATE_QP (0 is RC).
pub(crate) mod qp_type {
    pub(crate) const UD: u8 = 1;
}

/// The adapter's states of an iWARP queue pair, as MODIFY_QP names them (erdma_rs_hw 3.5, 7.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum IwState {
    /// Not connected (what the verbs' RESET and INIT map to).
    Idle = 0,
    /// Connected: the adapter owns the TCP stream.
    Rts = 2,
    /// Closing gracefully (the verbs' SQD).
    Closing = 3,
    /// Terminating (the verbs' SQE).
    Terminate = 4,
    /// Failed (the verbs' ERR).
    Error = 5,
}

impl IwState {
    /// The state's number in MODIFY_QP.
    pub(crate) const fn to_raw(self) -> u32 {
        self as u32
    }
}

/// The congestion-control algorithm both sides fall back to when theirs differ (Cubic).
pub(crate) const CC_COMPROMISE: u8 = 1;

/// MR types of REG_MR.
pub(crate) mod mr_type {
    /// A region of user memory.
    pub(crate) const NORMAL: u8 = 0;
    /// A fast-registration region.
    pub(crate) const FRMR: u8 = 1;
    /// All of physical memory, for bus addresses.
    pub(crate) const DMA: u8 = 2;
}

/// MTT types of a fast-registration WQE (0: the page addresses are inline).
pub(crate) mod frmr_mtt {
    /// The adapter reads the region's pre-registered page list.
    pub(crate) const REGISTERED: u8 = 1;
}

/// Event-queue type of CREATE_EQ and DESTROY_EQ for a completion event queue.
pub(crate) const EQ_TYPE_CEQ: u8 = 1;
