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
