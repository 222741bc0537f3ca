// SPDX-License-Identifier: GPL-2.0

//! RQEs (§5.5) and the SQ and RQ doorbell values (§5.8): an RQ doorbell is the RQE's first
//! 8 bytes.

use super::{le32, Sge, RQE_SIZE};

/// An RQE (32 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rqe {
    /// @0: RQ producer counter after this RQE.
    pub index: u16,
    /// @4: QPN.
    pub qpn: u32,
    /// @16..: the SGE (length 0: no buffer).
    pub sge: Sge,
}

impl Rqe {
    /// Decodes 32 bytes.
    pub fn decode(b: &[u8; RQE_SIZE]) -> Self {
        Rqe {
            index: u16::from_le_bytes([b[0], b[1]]),
            qpn: le32(b, 4),
            sge: Sge::decode(&b[16..]),
        }
    }

    /// Encodes 32 bytes (reserved bytes zero).
    pub fn encode(&self) -> [u8; RQE_SIZE] {
        let mut b = [0u8; RQE_SIZE];
        b[..2].copy_from_slice(&self.index.to_le_bytes());
        b[4..8].copy_from_slice(&self.qpn.to_le_bytes());
        b[16..].copy_from_slice(&self.sge.encode());
        b
    }
}

/// An SQ doorbell value (§5.8): 51:32 QPN, 15:0 the new producer index (WQEBBs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SqDoorbell {
    /// QPN.
    pub qpn: u32,
    /// New SQ producer index.
    pub pi: u16,
}

impl SqDoorbell {
    /// Decodes a doorbell value; the other bits are ignored.
    pub fn decode(value: u64) -> Self {
        SqDoorbell {
            qpn: ((value >> 32) & 0xf_ffff) as u32,
            pi: value as u16,
        }
    }

    /// Encodes the doorbell value (what a driver writes).
    pub fn encode(self) -> u64 {
        u64::from(self.qpn & 0xf_ffff) << 32 | u64::from(self.pi)
    }
}

/// An RQ doorbell value (§5.5, §5.8): the first 8 bytes of the RQE, 63:32 QPN, 15:0 the new
/// producer index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RqDoorbell {
    /// QPN (all 32 bits; a QPN has 20).
    pub qpn: u32,
    /// New RQ producer index.
    pub pi: u16,
}

impl RqDoorbell {
    /// Decodes a doorbell value; bits 31:16 are ignored.
    pub fn decode(value: u64) -> Self {
        RqDoorbell {
            qpn: (value >> 32) as u32,
            pi: value as u16,
        }
    }

    /// Encodes the doorbell value (what a driver writes).
    pub fn encode(self) -> u64 {
        u64::from(self.qpn) << 32 | u64::from(self.pi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::fixtures::{image, SGE_A, SGE_A_IMG};

    #[test]
    fn rqe_and_doorbell_images() {
        let rqe = Rqe {
            index: 0x1234,
            qpn: 0x0001_2345,
            sge: SGE_A,
        };
        let img = image(
            32,
            &[
                (0, &[0x34, 0x12]),
                (4, &[0x45, 0x23, 0x01, 0x00]),
                (16, &SGE_A_IMG),
            ],
        );
        assert_eq!(rqe.encode().to_vec(), img);
        let mut garbage: [u8; RQE_SIZE] = img.clone().try_into().unwrap();
        garbage[2..4].copy_from_slice(&[0xee, 0xee]);
        garbage[8..16].fill(0xee);
        assert_eq!(Rqe::decode(&garbage), rqe, "reserved bytes are ignored");
        // The RQ doorbell is the RQE's first 8 bytes.
        let rq = RqDoorbell {
            qpn: 0x0001_2345,
            pi: 0x1234,
        };
        assert_eq!(
            rq.encode(),
            u64::from_le_bytes(img[..8].try_into().unwrap())
        );
        assert_eq!(RqDoorbell::decode(0x0001_2345_eeee_1234), rq);
        // SQ: 51:32 QPN, 15:0 PI.
        let sq = SqDoorbell {
            qpn: 0xabcde,
            pi: 0x1234,
        };
        assert_eq!(sq.encode(), 0x000a_bcde_0000_1234);
        assert_eq!(SqDoorbell::decode(0xfffa_bcde_ffff_1234), sq);
    }
}
