// SPDX-License-Identifier: GPL-2.0

//! Typed commands of the command queue (erdma-hw 3.4-3.6).
//!
//! A command is an 8-byte header, built by the command queue, followed by a body. Each body
//! type below gives its fields at their byte offsets in the 128-byte slot (header included);
//! padding is explicit so that no uninitialised byte reaches the adapter.

use kernel::{
    bitfield,
    prelude::*, //
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
}

/// What a successful command returns: two 64-bit response words.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Response(pub(crate) [u64; 2]);

macro_rules! command {
    ($ty:ident, $sub:ident, $op:literal) => {
        impl Command for $ty {
            const SUBMOD: SubModule = SubModule::$sub;
            const OPCODE: u8 = $op;
            const NAME: &'static str = stringify!($ty);
        }
    };
}

/// RDMA 0: the adapter's capabilities, decoded by [`DeviceCaps::from_response`].
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable)]
pub(crate) struct QueryDevice {}
command!(QueryDevice, Rdma, 0);

/// COMMON 0: create a completion event queue.
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable)]
pub(crate) struct CreateEq {
    /// @8: DMA address of the ring.
    pub(crate) ring: u64,
    /// @16: MSI-X vector.
    pub(crate) vector: u8,
    /// @17: event queue number.
    pub(crate) eqn: u8,
    /// @18: log2 of the number of entries.
    pub(crate) depth_log2: u8,
    /// @19: queue type, [`EQ_TYPE_CEQ`].
    pub(crate) qtype: u8,
    /// @20: DMA address of the doorbell record, low half.
    pub(crate) dbrec_lo: u32,
    /// @24: DMA address of the doorbell record, high half.
    pub(crate) dbrec_hi: u32,
    pub(crate) reserved: u32,
}
command!(CreateEq, Common, 0);

/// Event-queue type of a completion event queue.
pub(crate) const EQ_TYPE_CEQ: u8 = 1;

/// COMMON 1: destroy a completion event queue.
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable)]
pub(crate) struct DestroyEq {
    pub(crate) reserved0: u64,
    /// @16: MSI-X vector.
    pub(crate) vector: u8,
    /// @17: event queue number.
    pub(crate) eqn: u8,
    pub(crate) reserved1: u8,
    /// @19: queue type, [`EQ_TYPE_CEQ`].
    pub(crate) qtype: u8,
    pub(crate) reserved2: u32,
}
command!(DestroyEq, Common, 1);

/// COMMON 2: the firmware version, in bits 31:0 of the first response word.
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable)]
pub(crate) struct QueryFwInfo {}
command!(QueryFwInfo, Common, 2);

/// COMMON 5: announce the host page size, the unit of doorbell page indices.
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable)]
pub(crate) struct ConfDevice {
    /// @8: bit 31 enables the page size, bits 4:0 are the host's `PAGE_SHIFT`.
    pub(crate) config: u32,
    pub(crate) reserved: [u32; 5],
}
command!(ConfDevice, Common, 5);

impl ConfDevice {
    /// Announces pages of `1 << page_shift` bytes.
    pub(crate) fn new(page_shift: u32) -> Self {
        Self {
            config: (1 << 31) | (page_shift & 0x1f),
            reserved: [0; 5],
        }
    }
}

/// RDMA 14: add or delete a GID table entry (RoCE).
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable)]
pub(crate) struct SetGid {
    /// @8: bits 15:0 index, bit 16 network type (1 IPv6), bit 31 delete.
    pub(crate) cfg: u32,
    /// @12: the GID, as on the wire (ignored for delete).
    pub(crate) gid: [u8; 16],
}
command!(SetGid, Rdma, 14);

impl SetGid {
    const IPV6: u32 = 1 << 16;
    const DELETE: u32 = 1 << 31;

    /// Adds `gid` at `index`; `ipv6` for GIDs that are not IPv4-mapped.
    pub(crate) fn add(index: u16, gid: [u8; 16], ipv6: bool) -> Self {
        let net = if ipv6 { Self::IPV6 } else { 0 };
        Self {
            cfg: u32::from(index) | net,
            gid,
        }
    }

    /// Deletes the entry at `index`.
    pub(crate) fn delete(index: u16) -> Self {
        Self {
            cfg: u32::from(index) | Self::DELETE,
            gid: [0; 16],
        }
    }
}

/// COMMON 3: the MTU of the adapter's network device changed.
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable)]
pub(crate) struct ConfMtu {
    /// @8: the MTU in bytes.
    pub(crate) mtu: u32,
}
command!(ConfMtu, Common, 3);

/// COMMON 4: DMA-write the traffic counters to a buffer.
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable)]
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

/// The magic a GET_STATS response buffer starts with.
pub(crate) const STATS_MAGIC: u16 = 0x5566;
/// The counters a GET_STATS response holds, from byte 16 on.
pub(crate) const STATS_COUNTERS: usize = 11;
/// The length of the GET_STATS response buffer.
pub(crate) const STATS_BUF_LEN: usize = 256;

/// Doorbell pages: SQ, RQ and CQ, all three enabled.
const DB_ALL: u32 = 0b111;

/// COMMON 8: allocate doorbell pages for a user context.
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable)]
pub(crate) struct AllocDb {
    /// @8: which doorbells.
    pub(crate) enable: u32,
    pub(crate) reserved: [u32; 5],
}
command!(AllocDb, Common, 8);

impl AllocDb {
    /// Allocates all three pages.
    pub(crate) fn new() -> Self {
        Self {
            enable: DB_ALL,
            reserved: [0; 5],
        }
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
    /// Decodes an ALLOC_DB response.
    pub(crate) fn from_response(resp: Response) -> Self {
        let w = resp.0[0];
        // CAST: each field is 16 bits wide.
        Self {
            sq: w as u16,
            cdb: (w >> 32) as u16,
            rdb: (w >> 48) as u16,
        }
    }
}

/// COMMON 9: release the doorbell pages of a user context.
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable)]
pub(crate) struct FreeDb {
    /// @8: which doorbells.
    pub(crate) enable: u32,
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
            enable: DB_ALL,
            rq_page: pages.rdb,
            sq_page: pages.sq,
            reserved0: 0,
            cq_page: pages.cdb,
            reserved1: [0; 3],
        }
    }
}

/// RDMA 4: create a completion queue.
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable, Default)]
pub(crate) struct CreateCq {
    /// @8: bits 31:24 log2(depth), 23:20 page-size code, 19:0 CQN.
    pub(crate) cfg0: u32,
    /// @12: buffer (level 0) or MTT (level 1) address, low half.
    pub(crate) addr_lo: u32,
    /// @16: the same, high half.
    pub(crate) addr_hi: u32,
    /// @20: bits 31:16 MTT entries, 15 MTT level, 11 extended doorbell page, 9:0 EQN.
    pub(crate) cfg1: u32,
    /// @24: DMA address of the doorbell record.
    pub(crate) dbrec: u64,
    /// @32: byte offset of the first entry in the first page.
    pub(crate) first_offset: u32,
    /// @36: bits 15:0 the CQ doorbell page (with the extended doorbell bit).
    pub(crate) cfg2: u32,
}
command!(CreateCq, Rdma, 4);

/// RDMA 5: destroy a completion queue.
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable)]
pub(crate) struct DestroyCq {
    /// @8: the CQN.
    pub(crate) cqn: u32,
}
command!(DestroyCq, Rdma, 5);

/// RDMA 1: create a queue pair.
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable, Default)]
pub(crate) struct CreateQp {
    /// @8: bits 31:20 log2(SQ depth in WQEBBs), 19:0 QPN.
    pub(crate) cfg0: u32,
    /// @12: bits 31:20 log2(RQ depth), 19:0 PDN.
    pub(crate) cfg1: u32,
    /// @16: bits 31:28 page-size code, 25 extended doorbell page, 23:0 send CQN.
    pub(crate) sq_cfg: u32,
    /// @20: bits 31:28 page-size code, 23:0 receive CQN.
    pub(crate) rq_cfg: u32,
    /// @24: SQ MTT entry 0 (level 0) or MTT address (level 1).
    pub(crate) sq_addr: u64,
    /// @32: the same for the RQ.
    pub(crate) rq_addr: u64,
    /// @40: bits 31:12 offset in the first page, 11:1 MTT entries, 0 level.
    pub(crate) sq_mtt_cfg: u32,
    /// @44: the same for the RQ.
    pub(crate) rq_mtt_cfg: u32,
    /// @48: DMA address of the SQ doorbell record.
    pub(crate) sq_dbrec: u64,
    /// @56: DMA address of the RQ doorbell record.
    pub(crate) rq_dbrec: u64,
    /// @64: SQ MTT entries 1..3 (level 0).
    pub(crate) sq_mtt: [u64; 3],
    /// @88: RQ MTT entries 1..3 (level 0).
    pub(crate) rq_mtt: [u64; 3],
    /// @112: bits 31:16 SQ doorbell page, 15:0 RQ doorbell page.
    pub(crate) db_cfg: u32,
    /// @116: bits 3:0 QP type.
    pub(crate) cfg2: u32,
}
command!(CreateQp, Rdma, 1);

/// RDMA 2: destroy a queue pair.
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable)]
pub(crate) struct DestroyQp {
    /// @8: the QPN.
    pub(crate) qpn: u32,
}
command!(DestroyQp, Rdma, 2);

/// The RoCEv2 address vector of MODIFY_QP and CREATE_AH (36 bytes).
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable, Default, Clone, Copy, Debug)]
pub(crate) struct AddressVector {
    /// @0: bits 19:0 flow label, 20 network type (1 IPv6).
    pub(crate) flow: u32,
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

/// RDMA 3: modify a queue pair, RoCEv2 layout.
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable, Default)]
pub(crate) struct ModifyQpRoce {
    /// @8: bits 31:24 target state, 19:0 QPN.
    pub(crate) cfg: u32,
    /// @12: destination QPN.
    pub(crate) dst_qpn: u32,
    /// @16: which attributes ([`ModifyQpRoce::STATE`] ...).
    pub(crate) mask: u32,
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

impl ModifyQpRoce {
    pub(crate) const STATE: u32 = 1 << 0;
    pub(crate) const QKEY: u32 = 1 << 1;
    pub(crate) const AV: u32 = 1 << 2;
    pub(crate) const SQ_PSN: u32 = 1 << 3;
    pub(crate) const RQ_PSN: u32 = 1 << 4;
    pub(crate) const DST_QPN: u32 = 1 << 5;
}

/// RDMA 17: a queue pair's PSNs and state (RoCE).
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable)]
pub(crate) struct QueryQp {
    /// @8: the QPN.
    pub(crate) qpn: u32,
}
command!(QueryQp, Rdma, 17);

/// RDMA 8: register a memory region.
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable, Default)]
pub(crate) struct RegMr {
    /// @8: bit 31 valid, 30:28 format version, 27:20 key, 19:0 MPT index.
    pub(crate) cfg0: u32,
    /// @12: bits 31:12 PDN, 7:6 type, 5:1 access.
    pub(crate) cfg1: u32,
    /// @16: start IOVA.
    pub(crate) start_va: u64,
    /// @24: length, low 32 bits.
    pub(crate) size: u32,
    /// @28: bits 31:27 log2(page size), 26:24 MTT page-size code, 21:20 level, 19:0 entries.
    pub(crate) cfg2: u32,
    /// @32: inline entries (level 0) or the MTT address in entry 0; with format version 1,
    /// entry 1 holds the length's high half and the entry count's high bits.
    pub(crate) mtt: [u64; 4],
}
command!(RegMr, Rdma, 8);

/// RDMA 9: deregister a memory region.
#[repr(C)]
#[derive(IntoBytes, zerocopy_derive::Immutable)]
pub(crate) struct DeregMr {
    /// @8: bits 27:20 key, 19:0 MPT index.
    pub(crate) stag: u32,
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

impl DeviceCaps {
    /// Decodes a QUERY_DEVICE response.
    pub(crate) fn from_response(resp: Response) -> Self {
        let c0 = Caps0::from_raw(resp.0[0]);
        let c1 = Caps1::from_raw(resp.0[1]);
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

    /// Number of QPs (QPN 0 is never used, so one fewer can exist).
    pub(crate) fn max_qp(&self) -> u32 {
        1024 * u32::from(self.qp_blocks)
    }
}

#[kunit_tests(erdma_rs_commands)]
mod tests {
    use super::*;

    #[test]
    fn body_layouts() {
        assert_eq!(core::mem::size_of::<CreateEq>(), 24);
        assert_eq!(core::mem::size_of::<DestroyEq>(), 16);
        assert_eq!(core::mem::size_of::<ConfDevice>(), 24);
        assert_eq!(core::mem::size_of::<QueryDevice>(), 0);
        let c = CreateEq {
            ring: 0x1122_3344_5566_7788,
            vector: 3,
            eqn: 4,
            depth_log2: 12,
            qtype: EQ_TYPE_CEQ,
            dbrec_lo: 0xaabb_ccdd,
            dbrec_hi: 0x1,
            reserved: 0,
        };
        let b = c.as_bytes();
        // Offsets in the body are the slot offsets minus the 8-byte header.
        assert_eq!(b[0], 0x88);
        assert_eq!(&b[8..12], &[3, 4, 12, 1]);
        assert_eq!(&b[12..16], &0xaabb_ccddu32.to_le_bytes());
        assert_eq!(&b[16..20], &1u32.to_le_bytes());
        assert_eq!(ConfDevice::new(12).config, 0x8000_000c);
        assert_eq!(core::mem::size_of::<SetGid>(), 20);
        assert_eq!(core::mem::size_of::<GetStats>(), 24);
        assert_eq!(core::mem::size_of::<AllocDb>(), 24);
        assert_eq!(core::mem::size_of::<FreeDb>(), 24);
        // Request sizes of erdma-hw 3.5 minus the 8-byte header.
        assert_eq!(core::mem::size_of::<CreateCq>(), 32);
        assert_eq!(core::mem::size_of::<CreateQp>(), 112);
        assert_eq!(core::mem::size_of::<AddressVector>(), 36);
        assert_eq!(core::mem::size_of::<ModifyQpRoce>(), 64);
        assert_eq!(core::mem::size_of::<RegMr>(), 56);
        assert_eq!(core::mem::offset_of!(CreateQp, db_cfg) + 8, 112);
        assert_eq!(core::mem::offset_of!(ModifyQpRoce, av) + 8, 32);
        assert_eq!(core::mem::offset_of!(RegMr, mtt) + 8, 32);
        let g = SetGid::add(3, [7; 16], true);
        assert_eq!(&g.as_bytes()[..4], &0x0001_0003u32.to_le_bytes());
        assert_eq!(SetGid::delete(2).cfg, 0x8000_0002);
        let f = FreeDb::new(DbPages {
            sq: 1,
            cdb: 2,
            rdb: 3,
        });
        // @12 RQ page ("RDB"), @14 SQ page, @18 CQ page ("CDB").
        assert_eq!(&f.as_bytes()[4..12], &[3, 0, 1, 0, 0, 0, 2, 0]);
    }

    #[test]
    fn alloc_db_decoding() {
        let pages = DbPages::from_response(Response([0x0030_0020_0000_0010, 0]));
        assert_eq!(
            pages,
            DbPages {
                sq: 0x10,
                cdb: 0x20,
                rdb: 0x30
            }
        );
    }

    #[test]
    fn query_device_decoding() {
        let resp0 = 40 | (14 << 8) | (13 << 16) | (0xa8 << 24) | (20u64 << 40) | (4u64 << 48);
        let resp1 = 12 | (4 << 16) | (1 << 28) | (0x1ffu64 << 32);
        let caps = DeviceCaps::from_response(Response([resp0, resp1]));
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
