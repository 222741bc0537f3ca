// SPDX-License-Identifier: GPL-2.0

//! Data CQEs (§5.6) and completion status codes (§5.7).

use super::CQE_SIZE;
use crate::cmdq::NetType;

/// Completion status codes (§5.7).
pub mod wc {
    /// Success.
    pub const SUCCESS: u8 = 0;
    /// General error.
    pub const GENERAL: u8 = 1;
    /// Receive WQE format error.
    pub const RECV_FORMAT: u8 = 2;
    /// Receive: invalid STag.
    pub const RECV_STAG: u8 = 3;
    /// Receive: address/bounds violation.
    pub const RECV_BOUNDS: u8 = 4;
    /// Receive: access-rights violation.
    pub const RECV_ACCESS: u8 = 5;
    /// Receive: PD mismatch.
    pub const RECV_PD: u8 = 6;
    /// Receive: wrap error.
    pub const RECV_WRAP: u8 = 7;
    /// Send WQE format error.
    pub const SEND_FORMAT: u8 = 8;
    /// ORD exceeded.
    pub const ORD_EXCEEDED: u8 = 9;
    /// Send: invalid STag.
    pub const SEND_STAG: u8 = 10;
    /// Send: address violation.
    pub const SEND_BOUNDS: u8 = 11;
    /// Send: access-rights violation.
    pub const SEND_ACCESS: u8 = 12;
    /// Send: PD mismatch.
    pub const SEND_PD: u8 = 13;
    /// Send: wrap error.
    pub const SEND_WRAP: u8 = 14;
    /// Flushed.
    pub const FLUSHED: u8 = 15;
    /// Retry exceeded.
    pub const RETRY_EXCEEDED: u8 = 16;
}

/// CQE queue type SQ.
pub const CQE_QTYPE_SQ: u8 = 0;
/// CQE queue type RQ.
pub const CQE_QTYPE_RQ: u8 = 1;

/// What goes into @12 of a CQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqeExtra {
    /// Nothing (zero).
    None,
    /// An immediate: the 4 bytes as the sender put them in its WQE (network order).
    Imm([u8; 4]),
    /// The invalidated rkey (BE u32).
    InvRkey(u32),
}

/// UD info word: network type (bit 31).
const UD_INFO_IPV6: u32 = 1 << 31;
/// UD info word: SL (bits 27:20).
const UD_INFO_SL_SHIFT: u32 = 20;
/// UD info word: source QPN (bits 19:0).
const UD_INFO_QPN_MASK: u32 = 0xf_ffff;

/// The UD/GSI info word of a receive CQE (@28, BE u32, §5.6): bit 31 network type of the
/// received packet (0 IPv4, 1 IPv6), 27:20 the sender's SL, 19:0 the sender's QPN. All zero in
/// RC CQEs and in SQ CQEs ([`UdInfo::NONE`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdInfo {
    /// Bit 31: the network header type the GRH area holds.
    pub net_type: NetType,
    /// Bits 27:20: service level.
    pub sl: u8,
    /// Bits 19:0: source QPN (cut to 20 bits when encoded).
    pub src_qpn: u32,
}

impl UdInfo {
    /// The word of a CQE that is not a UD receive: 0.
    pub const NONE: UdInfo = UdInfo {
        net_type: NetType::Ipv4,
        sl: 0,
        src_qpn: 0,
    };

    /// The 32-bit word (host order).
    pub fn word(&self) -> u32 {
        let ty = match self.net_type {
            NetType::Ipv4 => 0,
            NetType::Ipv6 => UD_INFO_IPV6,
        };
        ty | u32::from(self.sl) << UD_INFO_SL_SHIFT | self.src_qpn & UD_INFO_QPN_MASK
    }

    /// Decodes the word (bits 30:28 are ignored).
    pub fn from_word(w: u32) -> Self {
        UdInfo {
            net_type: NetType::from_bit(w & UD_INFO_IPV6 != 0),
            sl: (w >> UD_INFO_SL_SHIFT) as u8,
            src_qpn: w & UD_INFO_QPN_MASK,
        }
    }
}

impl Default for UdInfo {
    fn default() -> Self {
        UdInfo::NONE
    }
}

/// A data CQE (32 bytes, big-endian but the immediate).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataCqe {
    /// Owner bit (set by the CQ when written).
    pub owner: bool,
    /// Opcode (§5.3).
    pub opcode: u8,
    /// [`CQE_QTYPE_SQ`] or [`CQE_QTYPE_RQ`].
    pub qtype: u8,
    /// Status (§5.7).
    pub status: u8,
    /// SQ: counter of the first WQEBB; RQ: the RQE's position counter.
    pub wqe_index: u32,
    /// QPN.
    pub qpn: u32,
    /// @12.
    pub extra: CqeExtra,
    /// Byte count.
    pub byte_len: u32,
    /// @28: the UD info word ([`UdInfo::NONE`] but for UD receive completions).
    pub ud: UdInfo,
}

impl DataCqe {
    /// The 32 bytes.
    pub fn encode(&self) -> [u8; CQE_SIZE] {
        let dw0 = u32::from(self.owner) << 31
            | u32::from(self.opcode) << 16
            | u32::from(self.qtype) << 8
            | u32::from(self.status);
        let mut b = [0u8; CQE_SIZE];
        b[..4].copy_from_slice(&dw0.to_be_bytes());
        b[4..8].copy_from_slice(&self.wqe_index.to_be_bytes());
        b[8..12].copy_from_slice(&self.qpn.to_be_bytes());
        match self.extra {
            CqeExtra::None => {}
            // The driver reads a LE u32 and converts it to BE: store the wire bytes reversed.
            CqeExtra::Imm(w) => b[12..16].copy_from_slice(&[w[3], w[2], w[1], w[0]]),
            CqeExtra::InvRkey(k) => b[12..16].copy_from_slice(&k.to_be_bytes()),
        }
        b[16..20].copy_from_slice(&self.byte_len.to_be_bytes());
        b[28..32].copy_from_slice(&self.ud.word().to_be_bytes());
        b
    }

    /// Decodes 32 bytes (what a driver reads); @12 comes back as [`CqeExtra::Imm`] with the
    /// immediate in network order, whatever the opcode.
    pub fn decode(b: &[u8; CQE_SIZE]) -> Self {
        let be = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let dw0 = be(0);
        DataCqe {
            owner: dw0 >> 31 != 0,
            opcode: (dw0 >> 16) as u8,
            qtype: (dw0 >> 8) as u8,
            status: dw0 as u8,
            wqe_index: be(4),
            qpn: be(8),
            extra: CqeExtra::Imm([b[15], b[14], b[13], b[12]]),
            byte_len: be(16),
            ud: UdInfo::from_word(be(28)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::fixtures::image;
    use crate::wire::op;

    #[test]
    fn data_cqe_image() {
        let c = DataCqe {
            owner: true,
            opcode: op::RECV_INV,
            qtype: CQE_QTYPE_RQ,
            status: wc::RECV_BOUNDS,
            wqe_index: 0x0102_0304,
            qpn: 0x0001_0203,
            extra: CqeExtra::InvRkey(0x0a0b_0c0d),
            byte_len: 0x1112_1314,
            ud: UdInfo::NONE,
        };
        // Big-endian: dword 0 is owner (31), opcode (23:16), queue type (15:8), status (7:0).
        let img = image(
            32,
            &[
                (0, &[0x80, 0x06, 0x01, 0x04]),
                (4, &[1, 2, 3, 4]),
                (8, &[0, 1, 2, 3]),
                (12, &[0x0a, 0x0b, 0x0c, 0x0d]),
                (16, &[0x11, 0x12, 0x13, 0x14]),
            ],
        );
        assert_eq!(c.encode().to_vec(), img);
        let none = DataCqe {
            owner: false,
            extra: CqeExtra::None,
            ..c
        };
        let mut img0 = img.clone();
        img0[0] = 0;
        img0[12..16].fill(0);
        assert_eq!(none.encode().to_vec(), img0);
        // The UD info word @28: bit 31 IPv6, 27:20 SL, 19:0 source QPN.
        let ud = DataCqe {
            ud: UdInfo {
                net_type: NetType::Ipv6,
                sl: 0xa5,
                src_qpn: 0x1_2345,
            },
            ..none
        };
        let mut img_ud = img0.clone();
        img_ud[28..32].copy_from_slice(&[0x8a, 0x51, 0x23, 0x45]);
        assert_eq!(ud.encode().to_vec(), img_ud);
        let back = DataCqe::decode(&ud.encode());
        assert_eq!((back.ud, back.byte_len), (ud.ud, ud.byte_len));
        let v4 = UdInfo {
            net_type: NetType::Ipv4,
            sl: 3,
            src_qpn: 1,
        };
        assert_eq!(v4.word(), 0x0030_0001);
        assert_eq!(UdInfo::from_word(0x7030_0001), v4, "bits 30:28 ignored");
        assert_eq!(UdInfo::NONE.word(), 0);
        assert_eq!(UdInfo::default(), UdInfo::NONE);
        // QPNs are cut to 20 bits.
        assert_eq!(
            UdInfo {
                src_qpn: 0xff_ffff,
                ..v4
            }
            .word(),
            0x003f_ffff
        );
    }

    #[test]
    fn cqe_immediate_is_reversed() {
        let c = DataCqe {
            owner: true,
            opcode: op::RECV_IMM,
            qtype: CQE_QTYPE_RQ,
            status: 0,
            wqe_index: 7,
            qpn: 9,
            extra: CqeExtra::Imm([1, 2, 3, 4]),
            byte_len: 100,
            ud: UdInfo::NONE,
        };
        let b = c.encode();
        assert_eq!(&b[12..16], &[4, 3, 2, 1]);
        assert_eq!(b[0], 0x80);
        assert_eq!(DataCqe::decode(&b), c);
    }
}
