// SPDX-License-Identifier: GPL-2.0

//! Data-path wire formats (erdma_rs_hw 3.5, §5, §6): the RDMA object commands (CREATE_QP,
//! DESTROY_QP, MODIFY_QP in the RoCEv2 and iWARP layouts, CREATE_CQ, DESTROY_CQ, REFLUSH,
//! REG_MR, DEREG_MR, QUERY_QP), SQ WQEs (the header, the body of every opcode, the SGL), RQEs, data CQEs, the SQ/RQ
//! doorbell values and STags. The engines build and read these words only through the types
//! here; each layout is pinned to a byte image worked out from erdma_rs_hw in its part's tests.
//!
//! Decoders read only the fields that are meaningful for the command; the caller decides which of
//! the decoded optional fields (inline MTT entries, doorbell pages, ...) matter, so stale slot bytes
//! never do (§3.2, §10.4). Every encoder (`write_fields`) is what a driver writes and exists for
//! tests.
//!
//! # Parts
//!
//! * `qp`, `cq`, `mr`: the object commands and their replies.
//! * `sqe`: SQ WQEs; `rqe`: RQEs and the SQ/RQ doorbell values.
//! * `cqe`: data CQEs and status codes; `eqe`: owner bits and EQEs.
//! * here: the sizes they share and the byte helpers every layout reads and writes with.

mod cq;
mod cqe;
mod eqe;
mod mr;
mod qp;
mod rqe;
mod sqe;

pub use cq::*;
pub use cqe::*;
pub use eqe::*;
pub use mr::*;
pub use qp::*;
pub use rqe::*;
pub use sqe::*;

/// Size of an SQ WQEBB.
pub const SQ_WQEBB_SIZE: usize = 32;
/// Largest WQE: 4 WQEBBs.
pub const MAX_WQE_SIZE: usize = 128;
/// Size of an RQE.
pub const RQE_SIZE: usize = 32;
/// Size of a data CQE.
pub const CQE_SIZE: usize = 32;
/// Size of an SGE: u64 address, u32 length, u32 key.
pub const SGE_SIZE: usize = 16;
/// Most SGEs in a send WQE.
pub const MAX_SGES: usize = 6;
/// Most inline bytes in a send WQE.
pub const MAX_INLINE: usize = 96;

/// Copies `bytes` to `slot[off..]`, cut at the end of the slot.
fn put(slot: &mut [u8], off: usize, bytes: &[u8]) {
    if let Some(dst) = slot.get_mut(off..) {
        let n = dst.len().min(bytes.len());
        dst[..n].copy_from_slice(&bytes[..n]);
    }
}

/// Bits `hi:lo` of `v`.
fn bits(v: u32, hi: u32, lo: u32) -> u32 {
    (v >> lo) & (u32::MAX >> (31 - (hi - lo)))
}

/// The little-endian u32 at `b[off..]` (out of range reads 0: decoders check lengths first).
fn le32(b: &[u8], off: usize) -> u32 {
    let mut x = [0u8; 4];
    if let Some(s) = b.get(off..off.saturating_add(4)) {
        x.copy_from_slice(s);
    }
    u32::from_le_bytes(x)
}

/// See [`le32`].
fn le64(b: &[u8], off: usize) -> u64 {
    let mut x = [0u8; 8];
    if let Some(s) = b.get(off..off.saturating_add(8)) {
        x.copy_from_slice(s);
    }
    u64::from_le_bytes(x)
}

/// The 4 bytes at `b[off..]`, as stored (out of range reads 0).
fn raw4(b: &[u8], off: usize) -> [u8; 4] {
    le32(b, off).to_le_bytes()
}

/// A u64 split in two LE u32 words, low word at `off`, high word at `off + 4`.
fn lo_hi(b: &[u8], off: usize) -> u64 {
    u64::from(le32(b, off)) | u64::from(le32(b, off + 4)) << 32
}

/// Writes `v` as two LE u32 words, low word first (see [`lo_hi`]).
fn put_lo_hi(b: &mut [u8], off: usize, v: u64) {
    put(b, off, &(v as u32).to_le_bytes());
    put(b, off + 4, &((v >> 32) as u32).to_le_bytes());
}

/// Byte images and values the layout tests share.
#[cfg(test)]
mod fixtures {
    use super::*;

    /// A `len`-byte image with `bytes` at each offset (the rest zero).
    pub(super) fn image(len: usize, at: &[(usize, &[u8])]) -> Vec<u8> {
        let mut b = vec![0u8; len];
        for &(off, bytes) in at {
            b[off..off + bytes.len()].copy_from_slice(bytes);
        }
        b
    }

    /// `write` on a zeroed buffer of `img.len()` bytes gives `img`.
    pub(super) fn pins(img: &[u8], write: impl Fn(&mut [u8])) {
        let mut b = vec![0u8; img.len()];
        write(&mut b);
        assert_eq!(b, img);
    }

    /// The values of the image tests (distinct bytes, so a wrong offset or width shows).
    pub(super) const SGE_A: Sge = Sge {
        addr: 0x1122_3344_5566_7788,
        len: 0x99aa_bbcc,
        key: 0x0102_0304,
    };

    pub(super) const SGE_A_IMG: [u8; 16] = [
        0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0xcc, 0xbb, 0xaa, 0x99, 0x04, 0x03, 0x02,
        0x01,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmdq::Request;

    #[test]
    fn commands_round_trip() {
        let mut slot = [0xa5u8; 128];
        let q = CreateQp {
            qpn: 5,
            sq_depth_log2: 8,
            rq_depth_log2: 6,
            pdn: 3,
            send_cqn: 1,
            recv_cqn: 2,
            ext_db: true,
            sq: QueueMttCfg {
                page_shift: 12,
                level: 0,
                count: 2,
                offset: 0,
                addr: 0x1000,
                more: [0x2000, 0, 0],
            },
            rq: QueueMttCfg {
                page_shift: 20,
                level: 1,
                count: 9,
                offset: 0x3000,
                addr: 0x5000,
                more: [0; 3],
            },
            sq_dbrec: 0x100,
            rq_dbrec: 0x108,
            db_pages: (256, 258),
            qp_type: QP_TYPE_RC,
        };
        q.write_fields(&mut slot);
        assert_eq!(CreateQp::decode(&Request::new(&slot)), Ok(q));
        let m = RegMr {
            valid: true,
            version: 1,
            key: 0x42,
            index: 77,
            pdn: 9,
            mr_type: 0,
            access: access::LOCAL_READ | access::REMOTE_WRITE,
            va: 0x7fff_0000_1234,
            len: 0x1_2345_6789,
            page_shift: 12,
            mtt_page_code: 0,
            level: 2,
            count: 0x12_3456,
            entries: [0x9000, 0, 0, 0],
        };
        m.write_fields(&mut slot);
        let d = RegMr::decode(&Request::new(&slot)).unwrap();
        assert_eq!((d.len, d.count, d.level, d.key), (m.len, m.count, 2, 0x42));
        let c = CreateCq {
            cqn: 4,
            depth_log2: 6,
            buf: QueueMttCfg {
                page_shift: 25,
                level: 0,
                count: 1,
                offset: 0x40,
                addr: 0x1_0000_2000,
                more: [0; 3],
            },
            eqn: 1,
            ext_db: true,
            dbrec: 0x3000,
            db_page: 300,
        };
        c.write_fields(&mut slot);
        assert_eq!(CreateCq::decode(&Request::new(&slot)), Ok(c));
    }
}
