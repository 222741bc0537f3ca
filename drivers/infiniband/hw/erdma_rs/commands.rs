// SPDX-License-Identifier: GPL-2.0

//! Typed commands of the command queue (erdma_rs_hw 3.4-3.6).
//!
//! A command is an 8-byte header, built by the command queue, followed by a body. Each body
//! type below gives its fields at their byte offsets in the 128-byte slot (header included);
//! padding is explicit so that no uninitialised byte reaches the adapter.

use kernel::{
    bitfield,
    num::Bounded,
    prelude::*, //
};

use zerocopy::byteorder::big_endian::{
    U16 as Be16,
    U32 as Be32, //
};

use crate::{
    consts::{
        KERNEL_CQ_DB,
        KERNEL_RQ_DB,
        KERNEL_SQ_DB, //
    },
    formats::MrAccess,
};

/// The two command sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SubModule {
    /// RDMA objects: device queries, QPs, CQs, MRs, AHs.
    Rdma = 0,
    /// Device-wide functions: event queues, MTU, statistics, doorbell pages.
    Common = 1,
}

/// A command body.
pub(crate) trait Command: IntoBytes + zerocopy::Immutable {
    /// Its command set.
    const SUBMOD: SubModule;
    /// Its opcode in that set.
    const OPCODE: u8;
    /// Its name, for messages.
    const NAME: &'static str;
    /// What its successful completion carries back.
    type Reply: Reply;
}

/// What a successful command returns, decoded from the two 64-bit response words of its
/// completion (erdma_rs_hw 3.3). Each command names its reply type once; callers never see the
/// raw words.
pub(crate) trait Reply: Sized {
    /// Decodes the response words.
    fn decode(words: [u64; 2]) -> Self;
}

/// Commands whose response carries nothing.
impl Reply for () {
    fn decode(_words: [u64; 2]) {}
}

impl From<SubModule> for Bounded<u64, 2> {
    fn from(value: SubModule) -> Self {
        match value {
            SubModule::Rdma => Bounded::<u64, 2>::new::<0>(),
            SubModule::Common => Bounded::<u64, 2>::new::<1>(),
        }
    }
}

impl TryFrom<Bounded<u64, 2>> for SubModule {
    type Error = u64;

    fn try_from(value: Bounded<u64, 2>) -> Result<Self, u64> {
        match value.get() {
            0 => Ok(Self::Rdma),
            1 => Ok(Self::Common),
            n => Err(n),
        }
    }
}

bitfield! {
    /// The header of a command: the first 8 bytes of its slot (erdma_rs_hw 3.2).
    pub(crate) struct CmdHeader(u64) {
        /// Basic blocks of the command, less one.
        54:52 wqebbs_minus_one;
        /// The driver's wait slot.
        47:32 cookie;
        /// The command set.
        25:24 submod ?=> SubModule;
        /// The opcode in that set.
        23:16 opcode;
        /// The producer index after this command, in basic blocks.
        15:0 wqebb_index;
    }
}

/// `command!(Body, SubModule, opcode)` or `command!(Body, SubModule, opcode => ReplyType)`.
macro_rules! command {
    ($ty:ident, $sub:ident, $op:literal) => {
        command!($ty, $sub, $op => ());
    };
    ($ty:ident, $sub:ident, $op:literal => $reply:ty) => {
        impl Command for $ty {
            const SUBMOD: SubModule = SubModule::$sub;
            const OPCODE: u8 = $op;
            const NAME: &'static str = stringify!($ty);
            type Reply = $reply;
        }
    };
}

/// Replies that are one bitfield word: the first response word.
macro_rules! word_reply {
    ($($ty:ty),* $(,)?) => {
        $(
            impl Reply for $ty {
                fn decode(words: [u64; 2]) -> Self {
                    Self::from_raw(words[0])
                }
            }
        )*
    };
}

/// RDMA 0: the adapter's capabilities, [`DeviceCaps`].
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable)]
pub(crate) struct QueryDevice {}
command!(QueryDevice, Rdma, 0 => DeviceCaps);

/// COMMON 0: create a completion event queue.
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct CreateEq {
    /// @8: DMA address of the ring.
    pub(crate) ring: u64,
    /// @16: MSI-X vector.
    pub(crate) vector: u8,
    /// @17: event queue number.
    pub(crate) eqn: u8,
    /// @18: log2 of the number of entries.
    pub(crate) depth_log2: u8,
    /// @19: queue type, [`crate::consts::EQ_TYPE_CEQ`].
    pub(crate) qtype: u8,
    /// @20: DMA address of the doorbell record, low half.
    pub(crate) dbrec_lo: u32,
    /// @24: DMA address of the doorbell record, high half.
    pub(crate) dbrec_hi: u32,
    pub(crate) reserved: u32,
}
command!(CreateEq, Common, 0);

/// COMMON 1: destroy a completion event queue.
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct DestroyEq {
    pub(crate) reserved0: u64,
    /// @16: MSI-X vector.
    pub(crate) vector: u8,
    /// @17: event queue number.
    pub(crate) eqn: u8,
    pub(crate) reserved1: u8,
    /// @19: queue type, [`crate::consts::EQ_TYPE_CEQ`].
    pub(crate) qtype: u8,
    pub(crate) reserved2: u32,
}
command!(DestroyEq, Common, 1);

/// COMMON 2: the firmware version, decoded by [`FwInfo`].
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable)]
pub(crate) struct QueryFwInfo {}
command!(QueryFwInfo, Common, 2 => FwInfo);

bitfield! {
    /// The first QUERY_FW_INFO response word.
    pub(crate) struct FwInfo(u64) {
        /// The firmware version: minor in bits 31:16, sub-minor in bits 15:0.
        31:0 version;
    }
}

bitfield! {
    /// The configuration word of CONF_DEVICE.
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct ConfDeviceCfg(u32) {
        /// `page_shift` is valid.
        31:31 page_size_enable => bool;
        /// The host's `PAGE_SHIFT`, the unit of doorbell page indices.
        4:0 page_shift;
    }
}

/// COMMON 5: announce the host page size, the unit of doorbell page indices.
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct ConfDevice {
    /// @8: the configuration.
    pub(crate) cfg: ConfDeviceCfg,
    pub(crate) reserved: [u32; 5],
}
command!(ConfDevice, Common, 5);

bitfield! {
    /// The configuration word of SET_GID.
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct SetGidCfg(u32) {
        /// Delete the entry rather than add it.
        31:31 delete => bool;
        /// The GID is IPv6, not IPv4-mapped.
        16:16 ipv6 => bool;
        /// The table index.
        15:0 index;
    }
}

/// RDMA 14: add or delete a GID table entry (RoCE).
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct SetGid {
    /// @8: the entry and the operation.
    pub(crate) cfg: SetGidCfg,
    /// @12: the GID, as on the wire (ignored for delete).
    pub(crate) gid: [u8; 16],
}
command!(SetGid, Rdma, 14);

/// COMMON 3: the MTU of the adapter's network device changed.
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct ConfMtu {
    /// @8: the MTU in bytes.
    pub(crate) mtu: u32,
}
command!(ConfMtu, Common, 3);

/// COMMON 4: DMA-write the traffic counters to a buffer laid out as [`StatsHeader`] and
/// [`STATS_COUNTERS`] counters.
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct GetStats {
    pub(crate) reserved0: u32,
    /// @12: which counter set (0).
    pub(crate) index: u32,
    /// @16: DMA address of the response buffer.
    pub(crate) buf: u64,
    /// @24: its length.
    pub(crate) len: u32,
    pub(crate) reserved1: u32,
}
command!(GetStats, Common, 4);

bitfield! {
    /// The first 8 bytes of a GET_STATS response buffer.
    pub(crate) struct StatsHeader(u64) {
        /// The counter set.
        63:32 index;
        /// The length.
        31:24 length;
        /// The format version.
        23:16 version;
        /// [`STATS_MAGIC`].
        15:0 magic;
    }
}

/// The magic a GET_STATS response buffer starts with.
pub(crate) const STATS_MAGIC: u16 = 0x5566;
/// The counters a GET_STATS response holds, in 64-bit words.
pub(crate) const STATS_COUNTERS: usize = 11;
/// The 64-bit word of the GET_STATS response buffer where the counters start (byte 16).
pub(crate) const STATS_FIRST_COUNTER: usize = 2;
/// The length of the GET_STATS response buffer.
pub(crate) const STATS_BUF_LEN: usize = 256;

bitfield! {
    /// Which doorbell pages ALLOC_DB and FREE_DB handle.
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct DbEnable(u32) {
        /// The CQ doorbell page.
        2:2 cq => bool;
        /// The RQ doorbell page.
        1:1 rq => bool;
        /// The SQ doorbell page.
        0:0 sq => bool;
    }
}

impl DbEnable {
    /// All three pages.
    fn all() -> Self {
        Self::zeroed().with_sq(true).with_rq(true).with_cq(true)
    }
}

/// COMMON 8: allocate doorbell pages for a user context; the response is an [`AllocDbResp`].
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct AllocDb {
    /// @8: which doorbells.
    pub(crate) enable: DbEnable,
    pub(crate) reserved: [u32; 5],
}
command!(AllocDb, Common, 8 => DbPages);

impl AllocDb {
    /// Allocates all three pages.
    pub(crate) fn new() -> Self {
        Self {
            enable: DbEnable::all(),
            reserved: [0; 5],
        }
    }
}

bitfield! {
    /// The first ALLOC_DB response word: BAR0 page indices.
    pub(crate) struct AllocDbResp(u64) {
        /// The "RDB" page.
        63:48 rdb;
        /// The "CDB" page.
        47:32 cdb;
        /// The SQ doorbell page.
        15:0 sq;
    }
}

/// The pages ALLOC_DB hands out, in BAR0 page units, named as in the response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DbPages {
    /// The SQ doorbell page.
    pub(crate) sq: u16,
    /// The page of the response's "CDB" field.
    pub(crate) cdb: u16,
    /// The page of the response's "RDB" field.
    pub(crate) rdb: u16,
}

impl DbPages {
    /// Whether every page may go to a user context: inside a BAR of `bar_len` bytes, and
    /// neither the register page (page 0) nor a page of the doorbells every kernel queue
    /// shares (erdma_rs_hw 2.1). `page_shift` is the host's, the unit CONF_DEVICE set.
    pub(crate) fn usable(&self, page_shift: u32, bar_len: u64) -> bool {
        let shared = [KERNEL_SQ_DB, KERNEL_RQ_DB, KERNEL_CQ_DB].map(|at| (at as u64) >> page_shift);
        [self.sq, self.cdb, self.rdb].iter().all(|&page| {
            let page = u64::from(page);
            page != 0
                && !shared.contains(&page)
                && 1u64
                    .checked_shl(page_shift)
                    .and_then(|size| (page + 1).checked_mul(size))
                    .is_some_and(|end| end <= bar_len)
        })
    }
}

impl Reply for DbPages {
    /// Decodes an ALLOC_DB response.
    fn decode(words: [u64; 2]) -> Self {
        let r = AllocDbResp::from_raw(words[0]);
        // CAST: each field is 16 bits wide.
        Self {
            sq: r.sq().get() as u16,
            cdb: r.cdb().get() as u16,
            rdb: r.rdb().get() as u16,
        }
    }
}

/// COMMON 9: release the doorbell pages of a user context.
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct FreeDb {
    /// @8: which doorbells.
    pub(crate) enable: DbEnable,
    /// @12: the RQ doorbell page ("RDB").
    pub(crate) rq_page: u16,
    /// @14: the SQ doorbell page.
    pub(crate) sq_page: u16,
    pub(crate) reserved0: u16,
    /// @18: the CQ doorbell page ("CDB").
    pub(crate) cq_page: u16,
    pub(crate) reserved1: [u32; 3],
}
command!(FreeDb, Common, 9);

impl FreeDb {
    /// Releases the pages ALLOC_DB gave.
    pub(crate) fn new(pages: DbPages) -> Self {
        Self {
            enable: DbEnable::all(),
            rq_page: pages.rdb,
            sq_page: pages.sq,
            reserved0: 0,
            cq_page: pages.cdb,
            reserved1: [0; 3],
        }
    }
}

bitfield! {
    /// CREATE_CQ's first configuration word.
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct CreateCqCfg0(u32) {
        /// log2 of the number of entries.
        31:24 depth_log2;
        /// log2(page size) - 12.
        23:20 page_code;
        /// The CQ number.
        19:0 cqn;
    }
}

bitfield! {
    /// CREATE_CQ's second configuration word.
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct CreateCqCfg1(u32) {
        /// Number of MTT entries.
        31:16 mtt_count;
        /// MTT level: 0 the buffer address, 1 the address of an array of page addresses.
        15:15 mtt_level;
        /// `db_page` of [`CreateCqCfg2`] is valid.
        11:11 ext_db => bool;
        /// The completion event queue.
        9:0 eqn;
    }
}

bitfield! {
    /// CREATE_CQ's third configuration word.
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct CreateCqCfg2(u32) {
        /// The CQ doorbell page of the user context.
        15:0 db_page;
    }
}

/// RDMA 4: create a completion queue.
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct CreateCq {
    /// @8: depth, page size and number.
    pub(crate) cfg0: CreateCqCfg0,
    /// @12: buffer (level 0) or MTT (level 1) address, low half.
    pub(crate) addr_lo: u32,
    /// @16: the same, high half.
    pub(crate) addr_hi: u32,
    /// @20: MTT and event queue.
    pub(crate) cfg1: CreateCqCfg1,
    /// @24: DMA address of the doorbell record.
    pub(crate) dbrec: u64,
    /// @32: byte offset of the first entry in the first page.
    pub(crate) first_offset: u32,
    /// @36: the doorbell page.
    pub(crate) cfg2: CreateCqCfg2,
}
command!(CreateCq, Rdma, 4);

/// RDMA 5: destroy a completion queue.
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct DestroyCq {
    /// @8: the CQN.
    pub(crate) cqn: u32,
}
command!(DestroyCq, Rdma, 5);

bitfield! {
    /// CREATE_QP's first configuration word.
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct CreateQpCfg0(u32) {
        /// log2 of the SQ depth in basic blocks.
        31:20 sq_depth_log2;
        /// The QP number.
        19:0 qpn;
    }
}

bitfield! {
    /// CREATE_QP's second configuration word.
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct CreateQpCfg1(u32) {
        /// log2 of the RQ depth in entries.
        31:20 rq_depth_log2;
        /// The protection domain.
        19:0 pdn;
    }
}

bitfield! {
    /// CREATE_QP's word for one queue.
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct CreateQpQueueCfg(u32) {
        /// log2(page size) - 12.
        31:28 page_code;
        /// `db_cfg` is valid (the SQ word only).
        25:25 ext_db => bool;
        /// The completion queue.
        23:0 cqn;
    }
}

bitfield! {
    /// CREATE_QP's MTT word for one queue.
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct QueueMttCfg(u32) {
        /// Byte offset of the queue in its first page, in 4 KiB units.
        31:12 page_offset_4k;
        /// Number of MTT entries.
        11:1 count;
        /// MTT level: 0 inline, 1 an array of page addresses.
        0:0 level;
    }
}

bitfield! {
    /// CREATE_QP's doorbell pages.
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct QpDbCfg(u32) {
        /// The SQ doorbell page.
        31:16 sq_page;
        /// The RQ doorbell page.
        15:0 rq_page;
    }
}

bitfield! {
    /// CREATE_QP's last configuration word.
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct CreateQpCfg2(u32) {
        /// The QP type ([`crate::consts::qp_type`]).
        3:0 qp_type;
    }
}

/// RDMA 1: create a queue pair.
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct CreateQp {
    /// @8: SQ depth and QPN.
    pub(crate) cfg0: CreateQpCfg0,
    /// @12: RQ depth and PDN.
    pub(crate) cfg1: CreateQpCfg1,
    /// @16: the send queue.
    pub(crate) sq_cfg: CreateQpQueueCfg,
    /// @20: the receive queue.
    pub(crate) rq_cfg: CreateQpQueueCfg,
    /// @24: SQ MTT entry 0 (level 0) or MTT address (level 1).
    pub(crate) sq_addr: u64,
    /// @32: the same for the RQ.
    pub(crate) rq_addr: u64,
    /// @40: the SQ's MTT.
    pub(crate) sq_mtt_cfg: QueueMttCfg,
    /// @44: the RQ's MTT.
    pub(crate) rq_mtt_cfg: QueueMttCfg,
    /// @48: DMA address of the SQ doorbell record.
    pub(crate) sq_dbrec: u64,
    /// @56: DMA address of the RQ doorbell record.
    pub(crate) rq_dbrec: u64,
    /// @64: SQ MTT entries 1..3 (level 0).
    pub(crate) sq_mtt: [u64; 3],
    /// @88: RQ MTT entries 1..3 (level 0).
    pub(crate) rq_mtt: [u64; 3],
    /// @112: the doorbell pages of the user context.
    pub(crate) db_cfg: QpDbCfg,
    /// @116: the QP type.
    pub(crate) cfg2: CreateQpCfg2,
}
command!(CreateQp, Rdma, 1 => CreateQpReply);

/// What CREATE_QP returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CreateQpReply {
    /// The cookie naming the queue pair to an iWARP peer in the MPA exchange (erdma_rs_hw 7.1).
    pub(crate) cookie: u32,
}

impl Reply for CreateQpReply {
    fn decode(words: [u64; 2]) -> Self {
        // CAST: the cookie is the first word's bits 31:0 (erdma_rs_hw 3.5).
        Self {
            cookie: words[0] as u32,
        }
    }
}

/// RDMA 2: destroy a queue pair.
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct DestroyQp {
    /// @8: the QPN.
    pub(crate) qpn: u32,
}
command!(DestroyQp, Rdma, 2);

bitfield! {
    /// The first word of an address vector.
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct AvFlow(u32) {
        /// The destination is IPv6.
        20:20 ipv6 => bool;
        /// The flow label.
        19:0 flow_label;
    }
}

/// The RoCEv2 address vector of MODIFY_QP and CREATE_AH (36 bytes).
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct AddressVector {
    /// @0: flow label and network type.
    pub(crate) flow: AvFlow,
    /// @4: traffic class.
    pub(crate) tclass: u8,
    /// @5: hop limit.
    pub(crate) hop_limit: u8,
    /// @6: service level.
    pub(crate) sl: u8,
    pub(crate) reserved: u8,
    /// @8: UDP source port.
    pub(crate) udp_sport: u16,
    /// @10: source GID index.
    pub(crate) sgid_index: u16,
    /// @12: destination MAC.
    pub(crate) dmac: [u8; 6],
    pub(crate) pad: [u8; 2],
    /// @20: destination GID.
    pub(crate) dgid: [u8; 16],
}

bitfield! {
    /// MODIFY_QP's first word.
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct ModifyQpCfg(u32) {
        /// The target state (RoCE numbering, that of the verbs).
        31:24 state;
        /// The QP number.
        19:0 qpn;
    }
}

bitfield! {
    /// Which attributes a RoCEv2 MODIFY_QP carries.
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct ModifyQpMask(u32) {
        /// `dst_qpn`.
        5:5 dst_qpn => bool;
        /// `rq_psn`.
        4:4 rq_psn => bool;
        /// `sq_psn`.
        3:3 sq_psn => bool;
        /// `av`.
        2:2 av => bool;
        /// `qkey`.
        1:1 qkey => bool;
        /// The state; always set.
        0:0 state => bool;
    }
}

/// RDMA 3: modify a queue pair, RoCEv2 layout.
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct ModifyQpRoce {
    /// @8: target state and QPN.
    pub(crate) cfg: ModifyQpCfg,
    /// @12: bits 19:0 the destination QPN.
    pub(crate) dst_qpn: u32,
    /// @16: which attributes.
    pub(crate) mask: ModifyQpMask,
    /// @20: Q_Key.
    pub(crate) qkey: u32,
    /// @24: RQ PSN.
    pub(crate) rq_psn: u32,
    /// @28: SQ PSN.
    pub(crate) sq_psn: u32,
    /// @32: the address vector.
    pub(crate) av: AddressVector,
    pub(crate) reserved: u32,
}
command!(ModifyQpRoce, Rdma, 3);

bitfield! {
    /// The iWARP MODIFY_QP's first word (erdma_rs_hw 3.5).
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct ModifyQpIwarpCfg(u32) {
        /// The target state, [`crate::consts::IwState`].
        31:24 state;
        /// The congestion-control algorithm agreed with the peer.
        23:20 cc;
        /// The QP number.
        19:0 qpn;
    }
}

/// RDMA 3: modify a queue pair, iWARP layout (erdma_rs_hw 3.5, 7.1). To RTS it hands the adapter
/// the TCP connection the connection manager made; the "stop" forms (to CLOSING, TERMINATE or
/// ERROR) carry only `cfg`.
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct ModifyQpIwarp {
    /// @8: target state, congestion control, QPN.
    pub(crate) cfg: ModifyQpIwarpCfg,
    /// @12: the peer's QP cookie, from its MPA frame.
    pub(crate) cookie: u32,
    /// @16: the peer's IPv4 address.
    pub(crate) daddr: Be32,
    /// @20: the local IPv4 address.
    pub(crate) saddr: Be32,
    /// @24: the local TCP port.
    pub(crate) sport: Be16,
    /// @26: the peer's TCP port.
    pub(crate) dport: Be16,
    /// @28: the TCP sequence number the adapter sends next.
    pub(crate) snd_nxt: u32,
    /// @32: the TCP sequence number the adapter expects next.
    pub(crate) rcv_nxt: u32,
    pub(crate) reserved: u32,
}
command!(ModifyQpIwarp, Rdma, 3);

/// RDMA 6: flush the work queue entries a queue pair in ERROR was given after it got there,
/// up to these producer indices (kernel queue pairs, erdma_rs_hw 3.5, 10.13).
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct Reflush {
    /// @8: the QPN.
    pub(crate) qpn: u32,
    /// @12: the send queue's producer index, in basic blocks.
    pub(crate) sq_pi: u32,
    /// @16: the receive queue's producer index.
    pub(crate) rq_pi: u32,
}
command!(Reflush, Rdma, 6);

/// RDMA 15: create an address handle (RoCEv2).
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct CreateAh {
    /// @8: the protection domain.
    pub(crate) pdn: u32,
    /// @12: the address handle's number.
    pub(crate) ahn: u32,
    /// @16: where its datagrams go.
    pub(crate) av: AddressVector,
}
command!(CreateAh, Rdma, 15);

/// RDMA 16: destroy an address handle.
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct DestroyAh {
    /// @8: the protection domain it was created in.
    pub(crate) pdn: u32,
    /// @12: its number.
    pub(crate) ahn: u32,
}
command!(DestroyAh, Rdma, 16);

/// RDMA 17: a queue pair's PSNs and state (RoCE), decoded by [`QueryQpResp`].
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct QueryQp {
    /// @8: the QPN.
    pub(crate) qpn: u32,
}
command!(QueryQp, Rdma, 17 => QueryQpResp);

bitfield! {
    /// The first QUERY_QP response word.
    pub(crate) struct QueryQpResp(u64) {
        /// The send queue is draining.
        56:56 sq_draining => bool;
        /// The state (RoCE numbering).
        55:48 state;
        /// The receive PSN.
        47:24 rq_psn;
        /// The send PSN.
        23:0 sq_psn;
    }
}

word_reply!(FwInfo, QueryQpResp);

bitfield! {
    /// REG_MR's first configuration word.
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct RegMrCfg0(u32) {
        /// The region is usable (fast-registration regions only after a REG_MR WQE).
        31:31 valid => bool;
        /// Format version: 1 carries `mtt_page_code` and [`RegMrHigh`].
        30:28 version;
        /// The key of the STag.
        27:20 key;
        /// The MPT index of the STag.
        19:0 mpt_index;
    }
}

bitfield! {
    /// REG_MR's second configuration word.
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct RegMrCfg1(u32) {
        /// The protection domain.
        31:12 pdn;
        /// The type ([`crate::consts::mr_type`]).
        7:6 mr_type;
        /// The access rights.
        5:1 access => MrAccess;
    }
}

bitfield! {
    /// REG_MR's third configuration word.
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct RegMrCfg2(u32) {
        /// log2 of the page size (not less 12).
        31:27 page_shift;
        /// Version 1: log2 of the MTT pages' size, less 12.
        26:24 mtt_page_code;
        /// MTT level: 0 inline, 1 an array, more a multi-level table.
        21:20 mtt_level;
        /// Number of MTT entries, low 20 bits.
        19:0 mtt_count;
    }
}

bitfield! {
    /// Version 1 of REG_MR: the high bits, in place of MTT entry 1.
    pub(crate) struct RegMrHigh(u64) {
        /// Number of MTT entries, bits 20 and up.
        63:32 mtt_count_high;
        /// The length, bits 63:32.
        31:0 length_high;
    }
}

/// RDMA 8: register a memory region.
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct RegMr {
    /// @8: validity, format and STag.
    pub(crate) cfg0: RegMrCfg0,
    /// @12: PDN, type and access.
    pub(crate) cfg1: RegMrCfg1,
    /// @16: start IOVA.
    pub(crate) start_va: u64,
    /// @24: length, low 32 bits.
    pub(crate) size: u32,
    /// @28: page size and MTT.
    pub(crate) cfg2: RegMrCfg2,
    /// @32: inline entries (level 0) or the MTT address in entry 0; with format version 1,
    /// entry 1 is a [`RegMrHigh`].
    pub(crate) mtt: [u64; 4],
}
command!(RegMr, Rdma, 8);

bitfield! {
    /// DEREG_MR's word: the region's STag.
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct DeregMrCfg(u32) {
        /// The key of the STag.
        27:20 key;
        /// The MPT index of the STag.
        19:0 mpt_index;
    }
}

/// RDMA 9: deregister a memory region.
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct DeregMr {
    /// @8: the STag.
    pub(crate) cfg: DeregMrCfg,
}
command!(DeregMr, Rdma, 9);

bitfield! {
    /// First QUERY_DEVICE response word.
    struct Caps0(u64) {
        51:48 max_gid_log2;
        47:40 max_cqe_log2;
        31:31 atomic => bool;
        29:29 mtt_va => bool;
        27:27 extend_db => bool;
        23:16 max_recv_wr_log2;
        15:8 max_ah_log2;
        7:0 max_mr_size_log2;
    }
}

bitfield! {
    /// Second QUERY_DEVICE response word.
    struct Caps1(u64) {
        63:32 local_dma_lkey;
        31:28 cc;
        27:16 qp_blocks;
        7:0 max_mw_log2;
    }
}

/// The capabilities an adapter reports in QUERY_DEVICE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DeviceCaps {
    /// log2 of the largest memory region, in bytes.
    pub(crate) max_mr_size_log2: u8,
    /// log2 of the number of address handles.
    pub(crate) max_ah_log2: u8,
    /// log2 of the deepest receive queue.
    pub(crate) max_recv_wr_log2: u8,
    /// log2 of the deepest completion queue.
    pub(crate) max_cqe_log2: u8,
    /// log2 of the GID table size.
    pub(crate) max_gid_log2: u8,
    /// log2 of the number of memory windows (reported only).
    pub(crate) max_mw_log2: u8,
    /// Atomic operations are supported.
    pub(crate) atomic: bool,
    /// The adapter walks multi-level, scattered MTTs.
    pub(crate) mtt_va: bool,
    /// Doorbell pages are handed out per user context.
    pub(crate) extend_db: bool,
    /// Number of blocks of 1024 QPs.
    pub(crate) qp_blocks: u16,
    /// Default congestion-control algorithm.
    pub(crate) cc: u8,
    /// The reserved lkey for kernel users' DMA addresses.
    pub(crate) local_dma_lkey: u32,
}

impl Reply for DeviceCaps {
    /// Decodes a QUERY_DEVICE response.
    fn decode(words: [u64; 2]) -> Self {
        let c0 = Caps0::from_raw(words[0]);
        let c1 = Caps1::from_raw(words[1]);
        // CAST: every field is at most 12 bits wide (the lkey 32), so the narrowing casts below
        // are lossless.
        Self {
            max_mr_size_log2: c0.max_mr_size_log2().get() as u8,
            max_ah_log2: c0.max_ah_log2().get() as u8,
            max_recv_wr_log2: c0.max_recv_wr_log2().get() as u8,
            max_cqe_log2: c0.max_cqe_log2().get() as u8,
            max_gid_log2: c0.max_gid_log2().get() as u8,
            max_mw_log2: c1.max_mw_log2().get() as u8,
            atomic: c0.atomic(),
            mtt_va: c0.mtt_va(),
            extend_db: c0.extend_db(),
            qp_blocks: c1.qp_blocks().get() as u16,
            cc: c1.cc().get() as u8,
            local_dma_lkey: c1.local_dma_lkey().get() as u32,
        }
    }
}

/// A capability the adapter reported outside the range the driver accepts, and the value the
/// driver uses instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Clamped {
    /// The field, as named in [`DeviceCaps`].
    pub(crate) field: &'static str,
    /// What the adapter reported.
    pub(crate) reported: u16,
    /// What the driver uses.
    pub(crate) used: u16,
}

impl DeviceCaps {
    /// Number of QPs (QPN 0 is never used, so one fewer can exist).
    pub(crate) fn max_qp(&self) -> u32 {
        1024 * u32::from(self.qp_blocks)
    }

    /// The capabilities with every field brought into the range the driver accepts
    /// (erdma_rs_hw 3.5), calling `clamped` for each one that was not; `ENODEV` for an adapter
    /// without queue pairs. Every later use relies on these ranges: a shift by a reported
    /// log2 never overflows, and the deepest receive queue fits its 16-bit indices.
    pub(crate) fn checked(mut self, mut clamped: impl FnMut(Clamped)) -> Result<Self> {
        if self.qp_blocks == 0 {
            return Err(ENODEV);
        }
        let mut clamp = |field: &'static str, value: &mut u8, lo: u8, hi: u8| {
            let used = (*value).clamp(lo, hi);
            if used != *value {
                clamped(Clamped {
                    field,
                    reported: (*value).into(),
                    used: used.into(),
                });
                *value = used;
            }
        };
        // At least a page, and the size must fit a u64.
        clamp("max_mr_size_log2", &mut self.max_mr_size_log2, 12, 63);
        // Address handle numbers are at most 24 bits.
        clamp("max_ah_log2", &mut self.max_ah_log2, 0, 24);
        // Receive queue indices are 16 bits: 2^15 entries at most.
        clamp("max_recv_wr_log2", &mut self.max_recv_wr_log2, 1, 15);
        // CQ indices are 24 bits and the owner bit needs one more.
        clamp("max_cqe_log2", &mut self.max_cqe_log2, 1, 22);
        // The RDMA core gives every GID sysfs attributes in one allocation per port: 256
        // entries (as RoCE NICs have) keep it within what kmalloc serves.
        clamp("max_gid_log2", &mut self.max_gid_log2, 0, 8);
        clamp("max_mw_log2", &mut self.max_mw_log2, 0, 24);
        // The congestion-control algorithms of erdma_rs_hw 3.5; an unknown one is NewReno.
        if self.cc > 4 {
            clamped(Clamped {
                field: "cc",
                reported: self.cc.into(),
                used: 0,
            });
            self.cc = 0;
        }
        Ok(self)
    }
}
#[kunit_tests(erdma_rs_commands)]
mod tests {
    use super::*;
    use zerocopy::FromZeros;

    /// The bytes of `cmd` at slot offset `at` (the body starts after the 8-byte header).
    fn at<C: IntoBytes + zerocopy::Immutable>(cmd: &C, at: usize, len: usize) -> &[u8] {
        &cmd.as_bytes()[at - 8..at - 8 + len]
    }

    #[test]
    fn doorbell_pages_for_users_are_checked() {
        let pages = |sq, cdb, rdb| DbPages { sq, cdb, rdb };
        let bar = 0x200 << 12;
        assert!(pages(0x100, 0x101, 0x102).usable(12, bar));
        // The register page, the kernel's shared doorbell pages, beyond the BAR.
        assert!(!pages(0, 0x101, 0x102).usable(12, bar));
        assert!(!pages(0x100, 95, 0x102).usable(12, bar));
        assert!(!pages(0x100, 0x101, 0x61).usable(12, bar));
        assert!(!pages(0x79, 0x101, 0x102).usable(12, bar));
        assert!(!pages(0x100, 0x101, 0x102).usable(12, 0x102 << 12));
        assert!(pages(0x100, 0x101, 0x101).usable(12, 0x102 << 12));
        // 64 KiB pages: the kernel's pages are counted in them.
        assert!(!pages(0x5, 0x6, 0x7).usable(16, bar));
        assert!(pages(0x8, 0x9, 0xa).usable(16, bar));
        assert!(!pages(u16::MAX, 0x9, 0xa).usable(63, u64::MAX));
    }

    #[test]
    fn capabilities_are_brought_into_range() -> Result {
        let max = DeviceCaps::decode([u64::MAX, u64::MAX]);
        let mut seen = KVec::new();
        let caps = max.checked(|c| {
            let _ = seen.push(c.field, GFP_KERNEL);
        })?;
        assert_eq!(
            (
                caps.max_mr_size_log2,
                caps.max_ah_log2,
                caps.max_recv_wr_log2
            ),
            (63, 24, 15)
        );
        assert_eq!(
            (
                caps.max_cqe_log2,
                caps.max_gid_log2,
                caps.max_mw_log2,
                caps.cc
            ),
            (22, 8, 24, 0)
        );
        assert_eq!(
            &seen[..],
            &[
                "max_mr_size_log2",
                "max_ah_log2",
                "max_recv_wr_log2",
                "max_cqe_log2",
                "max_gid_log2",
                "max_mw_log2",
                "cc"
            ]
        );
        let none = DeviceCaps::decode([0, 1 << 16]);
        let caps = none.checked(|_| {})?;
        assert_eq!(
            (
                caps.max_mr_size_log2,
                caps.max_recv_wr_log2,
                caps.max_cqe_log2
            ),
            (12, 1, 1)
        );
        assert_eq!(DeviceCaps::decode([0, 0]).checked(|_| {}), Err(ENODEV));
        // In range: unchanged, nothing reported.
        let fine = DeviceCaps::decode([0x0004_1600_000d_1028, 0x0001_0008]);
        let mut any = false;
        assert_eq!(fine.checked(|_| any = true)?, fine);
        assert!(!any);
        Ok(())
    }

    #[test]
    fn header_image() {
        // erdma_rs_hw 3.2: index 15:0, opcode 23:16, sub-module 25:24, cookie 47:32,
        // WQEBBs-1 54:52.
        let h = CmdHeader::zeroed()
            .with_wqebb_index(0x0204u16)
            .with_opcode(8u8)
            .with_submod(SubModule::Common)
            .with_cookie(0x7fu16)
            .with_wqebbs_minus_one(Bounded::<u64, 3>::new::<3>());
        assert_eq!(h.into_raw(), 0x0030_007f_0108_0204);
        assert_eq!(
            CmdHeader::from_raw(0x0100_0000).submod(),
            Ok(SubModule::Common)
        );
        assert_eq!(CmdHeader::from_raw(0x0300_0000).submod(), Err(3));
    }

    #[test]
    fn body_sizes() {
        // Request sizes of erdma_rs_hw 3.5-3.6 less the 8-byte header.
        assert_eq!(size_of::<QueryDevice>(), 0);
        assert_eq!(size_of::<CreateEq>(), 24);
        assert_eq!(size_of::<DestroyEq>(), 16);
        assert_eq!(size_of::<ConfDevice>(), 24);
        assert_eq!(size_of::<SetGid>(), 20);
        assert_eq!(size_of::<GetStats>(), 24);
        assert_eq!(size_of::<AllocDb>(), 24);
        assert_eq!(size_of::<FreeDb>(), 24);
        assert_eq!(size_of::<CreateCq>(), 32);
        assert_eq!(size_of::<CreateQp>(), 112);
        assert_eq!(size_of::<AddressVector>(), 36);
        assert_eq!(size_of::<ModifyQpRoce>(), 64);
        assert_eq!(size_of::<RegMr>(), 56);
        assert_eq!(size_of::<Reflush>(), 12);
        // 56 bytes with the header; the last 4 are padding.
        assert_eq!(size_of::<CreateAh>(), 44);
        assert_eq!(size_of::<DestroyAh>(), 8);
    }

    #[test]
    fn ah_commands_image() {
        let c = CreateAh {
            pdn: 0x11,
            ahn: 0x0203,
            av: AddressVector {
                flow: AvFlow::zeroed()
                    .with_flow_label(Bounded::<u32, 20>::new::<0xabcde>())
                    .with_ipv6(true),
                tclass: 1,
                hop_limit: 64,
                sl: 3,
                reserved: 0,
                udp_sport: 0xc001,
                sgid_index: 2,
                dmac: [0x52, 0x54, 0, 1, 2, 3],
                pad: [0; 2],
                dgid: [9; 16],
            },
        };
        // @8 PDN, @12 AHN, @16 the address vector (flow label and type, class, hop limit, SL,
        // reserved, UDP port, GID index, MAC, padding, GID).
        assert_eq!(at(&c, 8, 8), &[0x11, 0, 0, 0, 3, 2, 0, 0]);
        assert_eq!(at(&c, 16, 4), &[0xde, 0xbc, 0x1a, 0]);
        assert_eq!(
            at(&c, 20, 18),
            &[1, 64, 3, 0, 1, 0xc0, 2, 0, 0x52, 0x54, 0, 1, 2, 3, 0, 0, 9, 9]
        );
        assert_eq!(
            at(&DestroyAh { pdn: 5, ahn: 6 }, 8, 8),
            &[5, 0, 0, 0, 6, 0, 0, 0]
        );
        let r = Reflush {
            qpn: 7,
            sq_pi: 0x1234,
            rq_pi: 0x10,
        };
        assert_eq!(
            at(&r, 8, 12),
            &[7, 0, 0, 0, 0x34, 0x12, 0, 0, 0x10, 0, 0, 0]
        );
    }

    #[test]
    fn eq_commands_image() {
        let c = CreateEq {
            ring: 0x1122_3344_5566_7788,
            vector: 3,
            eqn: 4,
            depth_log2: 12,
            qtype: crate::consts::EQ_TYPE_CEQ,
            dbrec_lo: 0xaabb_ccdd,
            dbrec_hi: 0x1,
            reserved: 0,
        };
        assert_eq!(
            at(&c, 8, 8),
            &[0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]
        );
        assert_eq!(
            at(&c, 16, 12),
            &[3, 4, 12, 1, 0xdd, 0xcc, 0xbb, 0xaa, 1, 0, 0, 0]
        );
        let d = DestroyEq {
            reserved0: 0,
            vector: 5,
            eqn: 5,
            reserved1: 0,
            qtype: 1,
            reserved2: 0,
        };
        assert_eq!(at(&d, 16, 4), &[5, 5, 0, 1]);
    }

    #[test]
    fn device_commands_image() {
        let c = ConfDevice {
            cfg: ConfDeviceCfg::zeroed()
                .with_page_size_enable(true)
                .with_page_shift(Bounded::<u32, 5>::new::<12>()),
            reserved: [0; 5],
        };
        assert_eq!(at(&c, 8, 4), &[0x0c, 0, 0, 0x80]);
        let g = SetGid {
            cfg: SetGidCfg::zeroed().with_index(3u16).with_ipv6(true),
            gid: [7; 16],
        };
        assert_eq!(at(&g, 8, 5), &[3, 0, 1, 0, 7]);
        let del = SetGidCfg::zeroed().with_index(2u16).with_delete(true);
        assert_eq!(del.into_raw(), 0x8000_0002);
        let f = FreeDb::new(DbPages {
            sq: 1,
            cdb: 2,
            rdb: 3,
        });
        // @8 enable SQ/RQ/CQ, @12 RQ page ("RDB"), @14 SQ page, @18 CQ page ("CDB").
        assert_eq!(at(&f, 8, 12), &[7, 0, 0, 0, 3, 0, 1, 0, 0, 0, 2, 0]);
        assert_eq!(at(&AllocDb::new(), 8, 4), &[7, 0, 0, 0]);
        let s = StatsHeader::from_raw(0x0000_0000_0110_5566);
        assert_eq!(
            (s.magic().get(), s.version().get(), s.length().get()),
            (0x5566, 0x10, 1)
        );
        assert_eq!(
            FwInfo::from_raw(0xffff_ffff_0001_0002).version().get(),
            0x0001_0002
        );
    }

    #[test]
    fn create_cq_image() {
        let c = CreateCq {
            cfg0: CreateCqCfg0::zeroed()
                .with_depth_log2(10u8)
                .with_page_code(Bounded::<u32, 4>::new::<13>())
                .with_cqn(Bounded::<u32, 20>::new::<0x12345>()),
            addr_lo: 0x89ab_c000,
            addr_hi: 0x1,
            cfg1: CreateCqCfg1::zeroed()
                .with_mtt_count(2u8)
                .with_mtt_level(Bounded::<u32, 1>::new::<1>())
                .with_ext_db(true)
                .with_eqn(Bounded::<u32, 10>::new::<3>()),
            dbrec: 0x5000,
            first_offset: 0x40,
            cfg2: CreateCqCfg2::zeroed().with_db_page(0x21u16),
        };
        // cfg0: 31:24 depth, 23:20 page code, 19:0 CQN.
        assert_eq!(at(&c, 8, 4), &[0x45, 0x23, 0xd1, 0x0a]);
        assert_eq!(at(&c, 12, 8), &[0, 0xc0, 0xab, 0x89, 1, 0, 0, 0]);
        // cfg1: 31:16 entries, 15 level, 11 extended doorbell, 9:0 EQN.
        assert_eq!(at(&c, 20, 4), &[0x03, 0x88, 0x02, 0x00]);
        assert_eq!(at(&c, 24, 8), &[0, 0x50, 0, 0, 0, 0, 0, 0]);
        assert_eq!(at(&c, 32, 8), &[0x40, 0, 0, 0, 0x21, 0, 0, 0]);
    }

    #[test]
    fn create_qp_image() {
        let mut c = CreateQp::new_zeroed();
        c.cfg0 = CreateQpCfg0::zeroed()
            .with_sq_depth_log2(Bounded::<u32, 12>::new::<9>())
            .with_qpn(0x123u16);
        c.cfg1 = CreateQpCfg1::zeroed()
            .with_rq_depth_log2(Bounded::<u32, 12>::new::<6>())
            .with_pdn(0x45u16);
        c.sq_cfg = CreateQpQueueCfg::zeroed()
            .with_page_code(Bounded::<u32, 4>::new::<8>())
            .with_ext_db(true)
            .with_cqn(0x678u16);
        c.rq_cfg = CreateQpQueueCfg::zeroed().with_cqn(0x9u16);
        c.sq_addr = 0x1000;
        c.sq_mtt_cfg = QueueMttCfg::zeroed()
            .with_page_offset_4k(Bounded::<u32, 20>::new::<1>())
            .with_count(3u8)
            .with_level(Bounded::<u32, 1>::new::<1>());
        c.sq_dbrec = 0x2000;
        c.rq_mtt = [0, 0, 0x3000];
        c.db_cfg = QpDbCfg::zeroed()
            .with_sq_page(0x11u16)
            .with_rq_page(0x22u16);
        c.cfg2 = CreateQpCfg2::zeroed().with_qp_type(Bounded::<u32, 4>::new::<1>());
        // @8 cfg0: 31:20 log2 SQ depth, 19:0 QPN; @12 cfg1: 31:20 log2 RQ depth, 19:0 PDN.
        assert_eq!(
            at(&c, 8, 8),
            &[0x23, 0x01, 0x90, 0x00, 0x45, 0x00, 0x60, 0x00]
        );
        // @16 SQ cfg: 31:28 page code, 25 extended doorbell, 23:0 CQN.
        assert_eq!(at(&c, 16, 8), &[0x78, 0x06, 0x00, 0x82, 0x09, 0, 0, 0]);
        assert_eq!(at(&c, 24, 2), &[0, 0x10]);
        // @40 SQ MTT cfg: 31:12 offset in 4 KiB units, 11:1 entries, 0 level.
        assert_eq!(at(&c, 40, 4), &[0x07, 0x10, 0, 0]);
        assert_eq!(at(&c, 48, 2), &[0, 0x20]);
        assert_eq!(at(&c, 104, 2), &[0, 0x30]);
        // @112 31:16 SQ page, 15:0 RQ page; @116 QP type.
        assert_eq!(at(&c, 112, 8), &[0x22, 0, 0x11, 0, 1, 0, 0, 0]);
    }

    #[test]
    fn modify_qp_image() {
        let mut c = ModifyQpRoce::new_zeroed();
        c.cfg = ModifyQpCfg::zeroed().with_state(3u8).with_qpn(0x12u8);
        c.mask = ModifyQpMask::zeroed()
            .with_state(true)
            .with_av(true)
            .with_dst_qpn(true);
        c.dst_qpn = 0x34;
        c.av = AddressVector {
            flow: AvFlow::zeroed()
                .with_ipv6(true)
                .with_flow_label(Bounded::<u32, 20>::new::<0x12345>()),
            tclass: 1,
            hop_limit: 64,
            sl: 2,
            reserved: 0,
            udp_sport: 0xc001,
            sgid_index: 3,
            dmac: [0x52, 0x54, 0, 0, 0, 1],
            pad: [0; 2],
            dgid: [0xfe; 16],
        };
        assert_eq!(
            at(&c, 8, 12),
            &[0x12, 0, 0, 3, 0x34, 0, 0, 0, 0x25, 0, 0, 0]
        );
        // The address vector at @32: flow word, TC, hop limit, SL, port, GID index, MAC.
        assert_eq!(at(&c, 32, 4), &[0x45, 0x23, 0x11, 0]);
        assert_eq!(at(&c, 36, 8), &[1, 64, 2, 0, 0x01, 0xc0, 3, 0]);
        assert_eq!(at(&c, 44, 6), &[0x52, 0x54, 0, 0, 0, 1]);
        assert_eq!(at(&c, 52, 1), &[0xfe]);
    }

    #[test]
    fn mr_commands_image() {
        let mut c = RegMr::new_zeroed();
        c.cfg0 = RegMrCfg0::zeroed()
            .with_valid(true)
            .with_const_version::<1>()
            .with_key(0xabu8)
            .with_mpt_index(0x123u16);
        c.cfg1 = RegMrCfg1::zeroed()
            .with_pdn(0x5u8)
            .with_mr_type(Bounded::<u32, 2>::new::<1>())
            .with_access(
                MrAccess::zeroed()
                    .with_local_read(true)
                    .with_remote_write(true),
            );
        c.size = 0x1000;
        c.cfg2 = RegMrCfg2::zeroed()
            .with_page_shift(Bounded::<u32, 5>::new::<12>())
            .with_mtt_page_code(Bounded::<u32, 3>::new::<0>())
            .with_mtt_level(Bounded::<u32, 2>::new::<2>())
            .with_mtt_count(0x456u16);
        c.mtt[1] = RegMrHigh::zeroed()
            .with_length_high(1u8)
            .with_mtt_count_high(2u8)
            .into_raw();
        // cfg0: 31 valid, 30:28 version, 27:20 key, 19:0 index.
        assert_eq!(at(&c, 8, 4), &[0x23, 0x01, 0xb0, 0x9a]);
        // cfg1: 31:12 PDN, 7:6 type, 5:1 access (LR 1, RW 4).
        assert_eq!(at(&c, 12, 4), &[0x64, 0x50, 0, 0]);
        // cfg2: 31:27 log2 page size, 21:20 level, 19:0 entries.
        assert_eq!(at(&c, 28, 4), &[0x56, 0x04, 0x20, 0x60]);
        assert_eq!(at(&c, 40, 8), &[1, 0, 0, 0, 2, 0, 0, 0]);
        let d = DeregMr {
            cfg: DeregMrCfg::zeroed()
                .with_key(0xabu8)
                .with_mpt_index(0x123u16),
        };
        assert_eq!(at(&d, 8, 4), &[0x23, 0x01, 0xb0, 0x0a]);
    }

    #[test]
    fn responses_decoding() {
        let pages = DbPages::decode([0x0030_0020_0000_0010, 0]);
        assert_eq!(
            pages,
            DbPages {
                sq: 0x10,
                cdb: 0x20,
                rdb: 0x30
            }
        );
        // QUERY_QP: 23:0 SQ PSN, 47:24 RQ PSN, 55:48 state, 56 draining.
        let q = QueryQpResp::from_raw(0x0103_0000_0200_0001);
        assert_eq!(
            (q.sq_psn().get(), q.rq_psn().get(), q.state().get()),
            (1, 2, 3)
        );
        assert!(q.sq_draining());
    }

    #[test]
    fn query_device_decoding() {
        let resp0 = 40 | (14 << 8) | (13 << 16) | (0xa8 << 24) | (20u64 << 40) | (4u64 << 48);
        let resp1 = 12 | (4 << 16) | (1 << 28) | (0x1ffu64 << 32);
        let caps = DeviceCaps::decode([resp0, resp1]);
        assert_eq!(caps.max_mr_size_log2, 40);
        assert_eq!(caps.max_ah_log2, 14);
        assert_eq!(caps.max_recv_wr_log2, 13);
        assert!(caps.atomic);
        assert!(caps.mtt_va);
        assert!(caps.extend_db);
        assert_eq!(caps.max_cqe_log2, 20);
        assert_eq!(caps.max_gid_log2, 4);
        assert_eq!(caps.max_mw_log2, 12);
        assert_eq!(caps.qp_blocks, 4);
        assert_eq!(caps.max_qp(), 4096);
        assert_eq!(caps.cc, 1);
        assert_eq!(caps.local_dma_lkey, 0x1ff);
    }
}
