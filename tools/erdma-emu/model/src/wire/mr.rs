// SPDX-License-Identifier: GPL-2.0

//! REG_MR and DEREG_MR (§3.5, §6), MR access bits and STags.

use super::{bits, put};
use crate::cmdq::{Request, Status};

/// MR access bits (REG_MR cfg1 5:1 and the fast-register WQE, shifted down by one).
pub mod access {
    /// Remote atomic.
    pub const REMOTE_ATOMIC: u8 = 1 << 0;
    /// Local read (always set by the drivers).
    pub const LOCAL_READ: u8 = 1 << 1;
    /// Local write.
    pub const LOCAL_WRITE: u8 = 1 << 2;
    /// Remote read.
    pub const REMOTE_READ: u8 = 1 << 3;
    /// Remote write.
    pub const REMOTE_WRITE: u8 = 1 << 4;
}

/// MR types (REG_MR cfg1 7:6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MrType {
    /// 0: normal (user) MR.
    Normal,
    /// 1: fast-register MR (valid only after a REG_MR WQE).
    Frmr,
    /// 2: DMA MR: all guest memory.
    Dma,
}

/// REG_MR (RDMA/8): 64-byte request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegMr {
    /// cfg0 bit 31.
    pub valid: bool,
    /// cfg0 30:28: 0, or 1 for multi-level MTTs.
    pub version: u8,
    /// cfg0 27:20: key (STag bits 7:0).
    pub key: u8,
    /// cfg0 19:0: MPT index (STag bits 27:8).
    pub index: u32,
    /// cfg1 31:12.
    pub pdn: u32,
    /// cfg1 7:6 (3 is invalid).
    pub mr_type: u8,
    /// cfg1 5:1 ([`access`]).
    pub access: u8,
    /// @16: IOVA.
    pub va: u64,
    /// Length: @24 low 32 bits, and in version 1 @40 the high 32 bits.
    pub len: u64,
    /// cfg2 31:27: log2 of the page size.
    pub page_shift: u8,
    /// cfg2 26:24: MTT page-size code (version 1).
    pub mtt_page_code: u8,
    /// cfg2 21:20: MTT level 0..3.
    pub level: u8,
    /// cfg2 19:0, and in version 1 @44 bits 39:20.
    pub count: u64,
    /// @32: inline entries (level 0) or entry 0 = MTT address. In version 1 entries 1 is the
    /// length/count high words.
    pub entries: [u64; 4],
}

impl RegMr {
    /// Bytes covered by the request.
    pub const LEN: usize = 64;

    /// Decodes the request.
    pub fn decode(r: &Request<'_>) -> Result<Self, Status> {
        let cfg0 = r.u32(8)?;
        let cfg1 = r.u32(12)?;
        let cfg2 = r.u32(28)?;
        let version = bits(cfg0, 30, 28) as u8;
        let mut len = u64::from(r.u32(24)?);
        let mut count = u64::from(bits(cfg2, 19, 0));
        if version == 1 {
            len |= u64::from(r.u32(40)?) << 32;
            count |= u64::from(r.u32(44)?) << 20;
        }
        Ok(RegMr {
            valid: cfg0 >> 31 != 0,
            version,
            key: bits(cfg0, 27, 20) as u8,
            index: bits(cfg0, 19, 0),
            pdn: cfg1 >> 12,
            mr_type: bits(cfg1, 7, 6) as u8,
            access: bits(cfg1, 5, 1) as u8,
            va: r.u64(16)?,
            len,
            page_shift: (cfg2 >> 27) as u8,
            mtt_page_code: bits(cfg2, 26, 24) as u8,
            level: bits(cfg2, 21, 20) as u8,
            count,
            entries: [r.u64(32)?, r.u64(40)?, r.u64(48)?, r.u64(56)?],
        })
    }

    /// Writes the request into a command slot (in version 1 the high words overwrite entry 1).
    pub fn write_fields(&self, slot: &mut [u8]) {
        let cfg0 = u32::from(self.valid) << 31
            | u32::from(self.version & 7) << 28
            | u32::from(self.key) << 20
            | self.index & 0xf_ffff;
        let cfg1 =
            self.pdn << 12 | u32::from(self.mr_type & 3) << 6 | u32::from(self.access & 0x1f) << 1;
        let cfg2 = u32::from(self.page_shift & 0x1f) << 27
            | u32::from(self.mtt_page_code & 7) << 24
            | u32::from(self.level & 3) << 20
            | (self.count as u32) & 0xf_ffff;
        put(slot, 8, &cfg0.to_le_bytes());
        put(slot, 12, &cfg1.to_le_bytes());
        put(slot, 16, &self.va.to_le_bytes());
        put(slot, 24, &(self.len as u32).to_le_bytes());
        put(slot, 28, &cfg2.to_le_bytes());
        for (i, e) in self.entries.iter().enumerate() {
            put(slot, 32 + 8 * i, &e.to_le_bytes());
        }
        if self.version == 1 {
            put(slot, 40, &((self.len >> 32) as u32).to_le_bytes());
            put(slot, 44, &((self.count >> 20) as u32).to_le_bytes());
        }
    }
}

/// The STag of MPT `index` with `key` (§6: index in 27:8, key in 7:0).
pub fn stag(index: u32, key: u8) -> u32 {
    (index & 0xf_ffff) << 8 | u32::from(key)
}

/// The MPT index of an STag.
pub fn stag_index(stag: u32) -> u32 {
    stag >> 8
}

/// The key of an STag.
pub fn stag_key(stag: u32) -> u8 {
    stag as u8
}

/// DEREG_MR (RDMA/9): @8 u32, 27:20 key, 19:0 MPT index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeregMr {
    /// MPT index.
    pub index: u32,
    /// Key.
    pub key: u8,
}

impl DeregMr {
    /// Decodes the request.
    pub fn decode(r: &Request<'_>) -> Result<Self, Status> {
        let v = r.u32(8)?;
        Ok(DeregMr {
            index: bits(v, 19, 0),
            key: bits(v, 27, 20) as u8,
        })
    }

    /// Writes the request into a command slot.
    pub fn write_fields(&self, slot: &mut [u8]) {
        let v = u32::from(self.key) << 20 | self.index & 0xf_ffff;
        put(slot, 8, &v.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::fixtures::{image, pins};

    #[test]
    fn stag_and_dereg_mr_images() {
        assert_eq!(stag(0x12345, 0x67), 0x0123_4567);
        assert_eq!(
            (stag_index(0x0123_4567), stag_key(0x0123_4567)),
            (0x12345, 0x67)
        );
        let d = DeregMr {
            index: 0x12345,
            key: 0x42,
        };
        // @8: 27:20 key, 19:0 index.
        let img = image(12, &[(8, &[0x45, 0x23, 0x21, 0x04])]);
        pins(&img, |b| d.write_fields(b));
        assert_eq!(DeregMr::decode(&Request::new(&img)), Ok(d));
    }
}
