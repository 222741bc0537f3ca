// SPDX-License-Identifier: GPL-2.0

//! SQ WQEs (§5.2-§5.4): the header, the SGL, and the body of every opcode.

use super::{bits, le32, le64, lo_hi, put, put_lo_hi, raw4, MAX_INLINE, MAX_SGES, SGE_SIZE};

/// Opcodes shared by SQEs and CQEs (§5.3).
pub mod op {
    /// RDMA WRITE.
    pub const WRITE: u8 = 0;
    /// RDMA READ.
    pub const READ: u8 = 1;
    /// SEND.
    pub const SEND: u8 = 2;
    /// SEND with immediate.
    pub const SEND_WITH_IMM: u8 = 3;
    /// RQ CQE: receive.
    pub const RECEIVE: u8 = 4;
    /// RQ CQE: incoming WRITE_WITH_IMM.
    pub const RECV_IMM: u8 = 5;
    /// RQ CQE: incoming SEND_WITH_INV.
    pub const RECV_INV: u8 = 6;
    /// RDMA WRITE with immediate.
    pub const WRITE_WITH_IMM: u8 = 9;
    /// RQ CQE: incoming SEND_WITH_IMM.
    pub const RSP_SEND_IMM: u8 = 12;
    /// SEND with invalidate.
    pub const SEND_WITH_INV: u8 = 13;
    /// Fast-register MR.
    pub const REG_MR: u8 = 14;
    /// Local invalidate.
    pub const LOCAL_INV: u8 = 15;
    /// RDMA READ with invalidate.
    pub const READ_WITH_INV: u8 = 16;
    /// Atomic compare and swap.
    pub const ATOMIC_CAS: u8 = 17;
    /// Atomic fetch and add.
    pub const ATOMIC_FAA: u8 = 18;
}

/// The SQE header (u64 LE at WQE offset 0, §5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SqeHeader {
    /// 15:0: producer index after this WQE.
    pub index: u16,
    /// Bit 22: generate a completion.
    pub ce: bool,
    /// Bit 23: solicited event.
    pub se: bool,
    /// Bit 24: fence.
    pub fence: bool,
    /// Bit 25: inline payload.
    pub inline: bool,
    /// 31:27: opcode.
    pub opcode: u8,
    /// 51:32: QPN.
    pub qpn: u32,
    /// 54:52 + 1: WQEBBs (1..=8).
    pub wqebbs: u16,
    /// 63:56: SGE count or inline byte count.
    pub sgl_len: u8,
}

impl SqeHeader {
    /// Decodes a header.
    pub fn decode(v: u64) -> Self {
        SqeHeader {
            index: v as u16,
            ce: v & (1 << 22) != 0,
            se: v & (1 << 23) != 0,
            fence: v & (1 << 24) != 0,
            inline: v & (1 << 25) != 0,
            opcode: ((v >> 27) & 0x1f) as u8,
            qpn: ((v >> 32) & 0xf_ffff) as u32,
            wqebbs: ((v >> 52) & 7) as u16 + 1,
            sgl_len: (v >> 56) as u8,
        }
    }

    /// Encodes the header.
    pub fn encode(&self) -> u64 {
        u64::from(self.index)
            | u64::from(self.ce) << 22
            | u64::from(self.se) << 23
            | u64::from(self.fence) << 24
            | u64::from(self.inline) << 25
            | u64::from(self.opcode & 0x1f) << 27
            | u64::from(self.qpn & 0xf_ffff) << 32
            | u64::from(self.wqebbs.wrapping_sub(1) & 7) << 52
            | u64::from(self.sgl_len) << 56
    }
}

/// A scatter/gather element.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Sge {
    /// Address (IOVA in the MR, or bus address with the local DMA lkey).
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// lkey / rkey.
    pub key: u32,
}

impl Sge {
    /// Decodes 16 bytes.
    pub fn decode(b: &[u8]) -> Self {
        let mut a = [0u8; 8];
        let mut l = [0u8; 4];
        let mut k = [0u8; 4];
        if b.len() >= SGE_SIZE {
            a.copy_from_slice(&b[..8]);
            l.copy_from_slice(&b[8..12]);
            k.copy_from_slice(&b[12..16]);
        }
        Sge {
            addr: u64::from_le_bytes(a),
            len: u32::from_le_bytes(l),
            key: u32::from_le_bytes(k),
        }
    }

    /// Encodes 16 bytes.
    pub fn encode(&self) -> [u8; SGE_SIZE] {
        let mut b = [0u8; SGE_SIZE];
        b[..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..12].copy_from_slice(&self.len.to_le_bytes());
        b[12..].copy_from_slice(&self.key.to_le_bytes());
        b
    }
}

impl SqeHeader {
    /// Bytes of the header at the start of every WQE.
    pub const SIZE: usize = 8;

    /// Decodes the header at the start of `wqe` (a u64 LE; missing bytes read 0).
    pub fn read(wqe: &[u8]) -> Self {
        Self::decode(le64(wqe, 0))
    }

    /// Writes the header at the start of `wqe` (cut at its end).
    pub fn write(&self, wqe: &mut [u8]) {
        put(wqe, 0, &self.encode().to_le_bytes());
    }
}

/// The payload part of a SEND / WRITE WQE (§5.4): inline bytes, or up to [`MAX_SGES`] SGEs,
/// from the opcode's SGL offset on. The SQE header's SGL-length field counts either.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sgl<'a> {
    /// INLINE set: the bytes themselves.
    Inline(&'a [u8]),
    /// INLINE clear: the SGEs.
    Sges(Vec<Sge>),
}

impl<'a> Sgl<'a> {
    /// The SGL of `wqe` (whose header is `hdr`) at `at`: `None` (a WQE format error) if the
    /// header's count is beyond [`MAX_INLINE`] bytes or [`MAX_SGES`] SGEs, or the SGL does not
    /// fit in `wqe`.
    pub fn decode(hdr: &SqeHeader, wqe: &'a [u8], at: usize) -> Option<Self> {
        let n = usize::from(hdr.sgl_len);
        if hdr.inline {
            if n > MAX_INLINE {
                return None;
            }
            return wqe.get(at..at.checked_add(n)?).map(Sgl::Inline);
        }
        if n > MAX_SGES {
            return None;
        }
        let bytes = wqe.get(at..at.checked_add(n * SGE_SIZE)?)?;
        Some(Sgl::Sges(
            bytes.chunks_exact(SGE_SIZE).map(Sge::decode).collect(),
        ))
    }

    /// Writes the SGL at `at` (cut at the end of `wqe`); returns `(INLINE flag, SGL-length
    /// field, total length)` for the header and the fixed part.
    pub fn write(&self, wqe: &mut [u8], at: usize) -> (bool, u8, u32) {
        match self {
            Sgl::Inline(data) => {
                put(wqe, at, data);
                (true, data.len() as u8, data.len() as u32)
            }
            Sgl::Sges(sges) => {
                for (i, s) in sges.iter().enumerate() {
                    put(wqe, at + SGE_SIZE * i, &s.encode());
                }
                let total = sges.iter().fold(0u32, |t, s| t.wrapping_add(s.len));
                (false, sges.len() as u8, total)
            }
        }
    }
}

/// WRITE / WRITE_WITH_IMM (§5.4): 32-byte fixed part, then the SGL or inline data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct WriteSqe {
    /// @8: the immediate, in network order as the verb gave it.
    pub imm: [u8; 4],
    /// @12: total payload length.
    pub length: u32,
    /// @16: remote STag.
    pub rkey: u32,
    /// @20 low / @24 high: remote address.
    pub raddr: u64,
}

impl WriteSqe {
    /// Size of the fixed part.
    pub const LEN: usize = 32;
    /// Where the SGL or inline data starts.
    pub const SGL_OFFSET: usize = 32;

    /// Decodes the fixed part; `None` if `wqe` is shorter.
    pub fn decode(wqe: &[u8]) -> Option<Self> {
        (wqe.len() >= Self::LEN).then(|| WriteSqe {
            imm: raw4(wqe, 8),
            length: le32(wqe, 12),
            rkey: le32(wqe, 16),
            raddr: lo_hi(wqe, 20),
        })
    }

    /// Writes the fixed part (not the header).
    pub fn write_fields(&self, wqe: &mut [u8]) {
        put(wqe, 8, &self.imm);
        put(wqe, 12, &self.length.to_le_bytes());
        put(wqe, 16, &self.rkey.to_le_bytes());
        put_lo_hi(wqe, 20, self.raddr);
    }
}

/// SEND / SEND_WITH_IMM / SEND_WITH_INV on an RC QP (§5.4): 16-byte fixed part, then the SGL or
/// inline data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SendSqe {
    /// @8: the immediate (network order), or for SEND_WITH_INV the STag to invalidate (LE u32,
    /// see [`SendSqe::inv_stag`]).
    pub imm: [u8; 4],
    /// @12: total payload length.
    pub length: u32,
}

impl SendSqe {
    /// Size of the fixed part.
    pub const LEN: usize = 16;
    /// Where the SGL or inline data starts.
    pub const SGL_OFFSET: usize = 16;

    /// A SEND_WITH_INV fixed part.
    pub fn with_inv(stag: u32, length: u32) -> Self {
        SendSqe {
            imm: stag.to_le_bytes(),
            length,
        }
    }

    /// @8 read as the STag to invalidate (SEND_WITH_INV).
    pub fn inv_stag(&self) -> u32 {
        u32::from_le_bytes(self.imm)
    }

    /// Decodes the fixed part; `None` if `wqe` is shorter.
    pub fn decode(wqe: &[u8]) -> Option<Self> {
        (wqe.len() >= Self::LEN).then(|| SendSqe {
            imm: raw4(wqe, 8),
            length: le32(wqe, 12),
        })
    }

    /// Writes the fixed part (not the header).
    pub fn write_fields(&self, wqe: &mut [u8]) {
        put(wqe, 8, &self.imm);
        put(wqe, 12, &self.length.to_le_bytes());
    }
}

/// SEND / SEND_WITH_IMM on a UD or GSI QP (§5.4): 32-byte fixed part, then the SGL or inline
/// data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct UdSendSqe {
    /// @8: the immediate (network order).
    pub imm: [u8; 4],
    /// @12: total payload length.
    pub length: u32,
    /// @16: Q_Key.
    pub qkey: u32,
    /// @20: destination QPN.
    pub dst_qpn: u32,
    /// @24: AHN.
    pub ahn: u32,
}

impl UdSendSqe {
    /// Size of the fixed part.
    pub const LEN: usize = 32;
    /// Where the SGL or inline data starts.
    pub const SGL_OFFSET: usize = 32;

    /// Decodes the fixed part; `None` if `wqe` is shorter.
    pub fn decode(wqe: &[u8]) -> Option<Self> {
        (wqe.len() >= Self::LEN).then(|| UdSendSqe {
            imm: raw4(wqe, 8),
            length: le32(wqe, 12),
            qkey: le32(wqe, 16),
            dst_qpn: le32(wqe, 20),
            ahn: le32(wqe, 24),
        })
    }

    /// Writes the fixed part (not the header).
    pub fn write_fields(&self, wqe: &mut [u8]) {
        put(wqe, 8, &self.imm);
        put(wqe, 12, &self.length.to_le_bytes());
        put(wqe, 16, &self.qkey.to_le_bytes());
        put(wqe, 20, &self.dst_qpn.to_le_bytes());
        put(wqe, 24, &self.ahn.to_le_bytes());
    }
}

/// READ / READ_WITH_INV (§5.4): 48 bytes, exactly one local (sink) SGE and the remote SGE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ReadSqe {
    /// @8: the STag to invalidate after the READ (READ_WITH_INV only).
    pub inv_stag: u32,
    /// @12: length.
    pub length: u32,
    /// @16: local (sink) STag.
    pub lkey: u32,
    /// @20 low / @24 high: local (sink) address.
    pub laddr: u64,
    /// @32: remote SGE (address, length, rkey).
    pub remote: Sge,
}

impl ReadSqe {
    /// Size of the WQE.
    pub const LEN: usize = 48;

    /// Decodes the WQE; `None` if `wqe` is shorter.
    pub fn decode(wqe: &[u8]) -> Option<Self> {
        (wqe.len() >= Self::LEN).then(|| ReadSqe {
            inv_stag: le32(wqe, 8),
            length: le32(wqe, 12),
            lkey: le32(wqe, 16),
            laddr: lo_hi(wqe, 20),
            remote: Sge::decode(&wqe[32..48]),
        })
    }

    /// Writes the WQE but its header.
    pub fn write_fields(&self, wqe: &mut [u8]) {
        put(wqe, 8, &self.inv_stag.to_le_bytes());
        put(wqe, 12, &self.length.to_le_bytes());
        put(wqe, 16, &self.lkey.to_le_bytes());
        put_lo_hi(wqe, 20, self.laddr);
        put(wqe, 32, &self.remote.encode());
    }
}

/// ATOMIC_CAS / ATOMIC_FAA (§5.4): 64 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AtomicSqe {
    /// @16: the swap value (CAS) or the value to add (FAA).
    pub swap_or_add: u64,
    /// @24: the compare value (CAS).
    pub compare: u64,
    /// @32: remote SGE (its length is not set by the drivers).
    pub remote: Sge,
    /// @48: local SGE, where the original value is returned.
    pub local: Sge,
}

impl AtomicSqe {
    /// Size of the WQE.
    pub const LEN: usize = 64;

    /// Decodes the WQE; `None` if `wqe` is shorter.
    pub fn decode(wqe: &[u8]) -> Option<Self> {
        (wqe.len() >= Self::LEN).then(|| AtomicSqe {
            swap_or_add: le64(wqe, 16),
            compare: le64(wqe, 24),
            remote: Sge::decode(&wqe[32..48]),
            local: Sge::decode(&wqe[48..64]),
        })
    }

    /// Writes the WQE but its header (the reserved u64 @8 is left alone).
    pub fn write_fields(&self, wqe: &mut [u8]) {
        put(wqe, 16, &self.swap_or_add.to_le_bytes());
        put(wqe, 24, &self.compare.to_le_bytes());
        put(wqe, 32, &self.remote.encode());
        put(wqe, 48, &self.local.encode());
    }
}

/// Fast-register MTT type 0: the page addresses are inline in the WQE.
pub const FAST_REG_MTT_INLINE: u8 = 0;
/// Fast-register MTT type 1: the MR's pre-registered MTT buffer holds the page addresses.
pub const FAST_REG_MTT_BUFFER: u8 = 1;
/// Most page addresses inline in a fast-register WQE.
pub const FAST_REG_MAX_INLINE_PAGES: usize = 4;

/// REG_MR fast-register WQE (§5.4): 32-byte fixed part, then up to 4 inline page addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FastRegSqe {
    /// @8: IOVA of the MR.
    pub iova: u64,
    /// @16: MR length (32 bits).
    pub length: u32,
    /// @20: the new STag (index and new key).
    pub stag: u32,
    /// @24 bits 5:1: access bits ([`access`](super::access)).
    pub access: u8,
    /// @24 bits 7:6: [`FAST_REG_MTT_INLINE`] or [`FAST_REG_MTT_BUFFER`].
    pub mtt_type: u8,
    /// @24 bits 31:12: number of pages.
    pub npages: u32,
}

impl FastRegSqe {
    /// Size of the fixed part.
    pub const LEN: usize = 32;
    /// Where the inline page addresses start.
    pub const PAGES_OFFSET: usize = 32;

    /// Decodes the fixed part; `None` if `wqe` is shorter.
    pub fn decode(wqe: &[u8]) -> Option<Self> {
        let attrs = le32(wqe, 24);
        (wqe.len() >= Self::LEN).then(|| FastRegSqe {
            iova: le64(wqe, 8),
            length: le32(wqe, 16),
            stag: le32(wqe, 20),
            access: bits(attrs, 5, 1) as u8,
            mtt_type: bits(attrs, 7, 6) as u8,
            npages: attrs >> 12,
        })
    }

    /// The [`FastRegSqe::npages`] inline page addresses of `wqe`: `None` if there are more than
    /// [`FAST_REG_MAX_INLINE_PAGES`] or they do not fit in `wqe`.
    pub fn inline_pages(&self, wqe: &[u8]) -> Option<Vec<u64>> {
        let n = usize::try_from(self.npages)
            .ok()
            .filter(|&n| n <= FAST_REG_MAX_INLINE_PAGES)?;
        let bytes = wqe.get(Self::PAGES_OFFSET..Self::PAGES_OFFSET + 8 * n)?;
        Some((0..n).map(|i| le64(bytes, 8 * i)).collect())
    }

    /// Writes the fixed part (not the header) and the inline `pages`.
    pub fn write_fields(&self, wqe: &mut [u8], pages: &[u64]) {
        let attrs = u32::from(self.access & 0x1f) << 1
            | u32::from(self.mtt_type & 3) << 6
            | (self.npages & 0xf_ffff) << 12;
        put(wqe, 8, &self.iova.to_le_bytes());
        put(wqe, 16, &self.length.to_le_bytes());
        put(wqe, 20, &self.stag.to_le_bytes());
        put(wqe, 24, &attrs.to_le_bytes());
        for (i, p) in pages.iter().enumerate() {
            put(wqe, Self::PAGES_OFFSET + 8 * i, &p.to_le_bytes());
        }
    }
}

/// LOCAL_INV (§5.4): one WQEBB; only the STag means anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct LocalInvSqe {
    /// @20: the STag to invalidate.
    pub stag: u32,
}

impl LocalInvSqe {
    /// Size of the WQE.
    pub const LEN: usize = 32;

    /// Decodes the WQE; `None` if `wqe` is shorter.
    pub fn decode(wqe: &[u8]) -> Option<Self> {
        (wqe.len() >= Self::LEN).then(|| LocalInvSqe {
            stag: le32(wqe, 20),
        })
    }

    /// Writes the WQE but its header.
    pub fn write_fields(&self, wqe: &mut [u8]) {
        put(wqe, 20, &self.stag.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::fixtures::{image, pins, SGE_A, SGE_A_IMG};
    use crate::wire::{access, MAX_WQE_SIZE};

    #[test]
    fn sqe_header_image() {
        let h = SqeHeader {
            index: 0x1234,
            ce: true,
            se: false,
            fence: true,
            inline: false,
            opcode: op::ATOMIC_CAS,
            qpn: 0xabcde,
            wqebbs: 2,
            sgl_len: 6,
        };
        // 15:0 index, bit 22 CE, bit 24 FENCE, 31:27 opcode 17; 51:32 QPN, 54:52 count - 1,
        // 63:56 SGL length.
        let img = [0x34, 0x12, 0x40, 0x89, 0xde, 0xbc, 0x1a, 0x06];
        pins(&img, |b| h.write(b));
        assert_eq!(SqeHeader::read(&img), h);
        let mut flags = img;
        flags[2] = 0x80; // bit 23: SE
        flags[3] = 0x02; // bit 25: INLINE
        let f = SqeHeader::read(&flags);
        assert_eq!(
            (f.ce, f.se, f.fence, f.inline, f.opcode),
            (false, true, false, true, 0)
        );
        assert_eq!(
            SqeHeader::read(&img[..7]),
            SqeHeader::decode(0),
            "short input reads 0"
        );
    }

    #[test]
    fn sge_image() {
        pins(&SGE_A_IMG, |b| b.copy_from_slice(&SGE_A.encode()));
        assert_eq!(Sge::decode(&SGE_A_IMG), SGE_A);
    }

    #[test]
    fn write_sqe_image() {
        let w = WriteSqe {
            imm: [0xf1, 0xf2, 0xf3, 0xf4],
            length: 0x0000_0100,
            rkey: 0x0000_0a01,
            raddr: 0x1122_3344_5566_7788,
        };
        let img = image(
            32,
            &[
                (8, &[0xf1, 0xf2, 0xf3, 0xf4]),
                (12, &[0x00, 0x01, 0, 0]),
                (16, &[0x01, 0x0a, 0, 0]),
                (20, &[0x88, 0x77, 0x66, 0x55]),
                (24, &[0x44, 0x33, 0x22, 0x11]),
            ],
        );
        pins(&img, |b| w.write_fields(b));
        assert_eq!(WriteSqe::decode(&img), Some(w));
        assert_eq!(WriteSqe::decode(&img[..31]), None);
        assert_eq!((WriteSqe::LEN, WriteSqe::SGL_OFFSET), (32, 32));
    }

    #[test]
    fn send_sqe_images() {
        let s = SendSqe {
            imm: [0xf1, 0xf2, 0xf3, 0xf4],
            length: 0x0000_0203,
        };
        let img = image(16, &[(8, &[0xf1, 0xf2, 0xf3, 0xf4]), (12, &[3, 2, 0, 0])]);
        pins(&img, |b| s.write_fields(b));
        assert_eq!(SendSqe::decode(&img), Some(s));
        assert_eq!(SendSqe::decode(&img[..15]), None);
        // SEND_WITH_INV: the STag is a LE u32 @8.
        let inv = SendSqe::with_inv(0x0102_0304, 5);
        let img = image(16, &[(8, &[4, 3, 2, 1]), (12, &[5, 0, 0, 0])]);
        pins(&img, |b| inv.write_fields(b));
        assert_eq!(
            SendSqe::decode(&img).map(|s| s.inv_stag()),
            Some(0x0102_0304)
        );
        assert_eq!(SendSqe::SGL_OFFSET, 16);
        // UD: Q_Key @16, destination QPN @20, AHN @24, SGL @32.
        let ud = UdSendSqe {
            imm: [0xf1, 0xf2, 0xf3, 0xf4],
            length: 3,
            qkey: 0x8001_0203,
            dst_qpn: 0x0001_0405,
            ahn: 0x0607,
        };
        let img = image(
            32,
            &[
                (8, &[0xf1, 0xf2, 0xf3, 0xf4]),
                (12, &[3, 0, 0, 0]),
                (16, &[0x03, 0x02, 0x01, 0x80]),
                (20, &[0x05, 0x04, 0x01, 0x00]),
                (24, &[0x07, 0x06, 0, 0]),
            ],
        );
        pins(&img, |b| ud.write_fields(b));
        assert_eq!(UdSendSqe::decode(&img), Some(ud));
        assert_eq!(UdSendSqe::decode(&img[..31]), None);
        assert_eq!(UdSendSqe::SGL_OFFSET, 32);
    }

    #[test]
    fn read_sqe_image() {
        let r = ReadSqe {
            inv_stag: 0x0000_0201,
            length: 0x0000_0008,
            lkey: 0x0000_0301,
            laddr: 0x0000_0001_0000_2000,
            remote: SGE_A,
        };
        let img = image(
            48,
            &[
                (8, &[0x01, 0x02, 0, 0]),
                (12, &[0x08, 0, 0, 0]),
                (16, &[0x01, 0x03, 0, 0]),
                (20, &[0x00, 0x20, 0x00, 0x00]),
                (24, &[0x01, 0, 0, 0]),
                (32, &SGE_A_IMG),
            ],
        );
        pins(&img, |b| r.write_fields(b));
        assert_eq!(ReadSqe::decode(&img), Some(r));
        assert_eq!(ReadSqe::decode(&img[..47]), None, "a READ is 48 bytes");
    }

    #[test]
    fn atomic_sqe_image() {
        let local = Sge {
            addr: 0x0000_0000_0000_5008,
            len: 8,
            key: 0x0000_0102,
        };
        let a = AtomicSqe {
            swap_or_add: 0x0102_0304_0506_0708,
            compare: 0x1112_1314_1516_1718,
            remote: SGE_A,
            local,
        };
        let img = image(
            64,
            &[
                (16, &[8, 7, 6, 5, 4, 3, 2, 1]),
                (24, &[0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11]),
                (32, &SGE_A_IMG),
                (
                    48,
                    &[0x08, 0x50, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0x02, 0x01, 0, 0],
                ),
            ],
        );
        pins(&img, |b| a.write_fields(b));
        assert_eq!(AtomicSqe::decode(&img), Some(a));
        assert_eq!(AtomicSqe::decode(&img[..63]), None, "an atomic is 64 bytes");
    }

    #[test]
    fn fast_reg_sqe_image() {
        let f = FastRegSqe {
            iova: 0x0102_0304_0506_0708,
            length: 0x1112_1314,
            stag: 0x0000_0205,
            access: access::REMOTE_WRITE | access::REMOTE_READ | access::LOCAL_WRITE,
            mtt_type: FAST_REG_MTT_INLINE,
            npages: 2,
        };
        let pages = [0x0000_0000_1234_5000, 0x0000_00ab_cdef_0000];
        // @24: 5:1 access (0b11100 << 1 = 0x38), 7:6 MTT type 0, 31:12 pages (2 << 12).
        let img = image(
            48,
            &[
                (8, &[8, 7, 6, 5, 4, 3, 2, 1]),
                (16, &[0x14, 0x13, 0x12, 0x11]),
                (20, &[0x05, 0x02, 0, 0]),
                (24, &[0x38, 0x20, 0, 0]),
                (32, &[0x00, 0x50, 0x34, 0x12, 0, 0, 0, 0]),
                (40, &[0x00, 0x00, 0xef, 0xcd, 0xab, 0, 0, 0]),
            ],
        );
        pins(&img, |b| f.write_fields(b, &pages));
        assert_eq!(FastRegSqe::decode(&img), Some(f));
        assert_eq!(f.inline_pages(&img), Some(pages.to_vec()));
        assert_eq!(f.inline_pages(&img[..47]), None, "pages beyond the WQE");
        // Bit 6: MTT type 1; bits 31:12 all ones: 2^20 - 1 pages; bit 0 is not access.
        let mut big = img.clone();
        big[24..28].copy_from_slice(&[0x41, 0xf0, 0xff, 0xff]);
        let d = FastRegSqe::decode(&big).unwrap();
        assert_eq!(
            (d.access, d.mtt_type, d.npages),
            (0, FAST_REG_MTT_BUFFER, 0xf_ffff)
        );
        assert_eq!(d.inline_pages(&big), None, "more than 4 inline pages");
        assert_eq!(FastRegSqe::decode(&img[..31]), None);
    }

    #[test]
    fn local_inv_sqe_image() {
        let img = image(32, &[(20, &[0x05, 0x04, 0x03, 0x02])]);
        pins(&img, |b| LocalInvSqe { stag: 0x0203_0405 }.write_fields(b));
        assert_eq!(
            LocalInvSqe::decode(&img),
            Some(LocalInvSqe { stag: 0x0203_0405 })
        );
        assert_eq!(LocalInvSqe::decode(&img[..31]), None);
    }

    #[test]
    fn sgl_decode_and_limits() {
        let hdr = |inline, n| SqeHeader {
            index: 0,
            ce: false,
            se: false,
            fence: false,
            inline,
            opcode: op::SEND,
            qpn: 0,
            wqebbs: 4,
            sgl_len: n,
        };
        let mut wqe = vec![0u8; MAX_WQE_SIZE];
        wqe[16..32].copy_from_slice(&SGE_A_IMG);
        wqe[32..48].copy_from_slice(&SGE_A_IMG);
        assert_eq!(
            Sgl::decode(&hdr(false, 2), &wqe, 16),
            Some(Sgl::Sges(vec![SGE_A, SGE_A]))
        );
        assert_eq!(
            Sgl::decode(&hdr(true, 3), &wqe, 16),
            Some(Sgl::Inline(&SGE_A_IMG[..3]))
        );
        // Six SGEs from 32 run to the end of a 128-byte WQE; a seventh is a format error, and
        // so is an SGL that does not fit.
        assert!(Sgl::decode(&hdr(false, 6), &wqe, 32).is_some());
        assert_eq!(Sgl::decode(&hdr(false, 7), &wqe, 16), None);
        assert_eq!(Sgl::decode(&hdr(false, 6), &wqe[..127], 32), None);
        assert_eq!(
            Sgl::decode(&hdr(true, 96), &wqe, 32),
            Some(Sgl::Inline(&wqe[32..]))
        );
        assert_eq!(Sgl::decode(&hdr(true, 97), &wqe, 16), None);
        assert_eq!(Sgl::decode(&hdr(true, 96), &wqe, 33), None);
        // Writing gives back the header and length fields.
        let mut out = vec![0u8; 64];
        assert_eq!(
            Sgl::Sges(vec![SGE_A; 2]).write(&mut out, 16),
            (false, 2, 0x3355_7798)
        );
        assert_eq!(&out[16..32], &SGE_A_IMG);
        assert_eq!(&out[32..48], &SGE_A_IMG);
        assert_eq!(Sgl::Inline(b"abc").write(&mut out, 32), (true, 3, 3));
        assert_eq!(&out[32..35], b"abc");
    }

    #[test]
    fn sqe_header_round_trip() {
        let h = SqeHeader {
            index: 0xfffe,
            ce: true,
            se: false,
            fence: true,
            inline: true,
            opcode: op::ATOMIC_FAA,
            qpn: 0xabcde,
            wqebbs: 4,
            sgl_len: 96,
        };
        assert_eq!(SqeHeader::decode(h.encode()), h);
    }
}
