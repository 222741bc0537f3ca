// SPDX-License-Identifier: GPL-2.0

//! The capabilities a function reports in QUERY_DEVICE and QUERY_FW_INFO (erdma_rs_hw 3.5, §3.6,
//! §9.1), configurable per device.
//!
//! Most limits are reported as log2 values; the driver turns them into `max_*` attributes
//! (`max_cqe = 2^max_cqe_log2`, ...). [`Caps::check`] keeps every field inside the range its
//! response field can carry and that the drivers can use without overflowing.

use core::ops::RangeInclusive;

/// Congestion-control algorithm numbers (QUERY_DEVICE resp1 bits 31:28).
pub const CC_NAMES: [&str; 5] = ["NewReno", "Cubic", "HPCC-RTT", "HPCC-ECN", "HPCC-INT"];

/// Capability flag bits in QUERY_DEVICE resp0 bits 31:24.
pub mod flags {
    /// Remote atomics supported (`atomic_cap = GLOB`).
    pub const ATOMIC: u8 = 1 << 7;
    /// The device walks multi-level scattered MTTs (REG_MR format version 1).
    pub const MTT_VA: u8 = 1 << 5;
    /// Per-context extended doorbell pages (ALLOC_DB/FREE_DB, CONF_DEVICE).
    pub const EXTEND_DB: u8 = 1 << 3;
}

/// What QUERY_DEVICE and QUERY_FW_INFO report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Number of 1024-QP blocks: `max_qp = 1024 * qp_blocks` (resp1 bits 27:16).
    pub qp_blocks: u16,
    /// log2 of the largest CQ (resp0 bits 47:40).
    pub max_cqe_log2: u8,
    /// log2 of the largest MR in bytes (resp0 bits 7:0).
    pub max_mr_size_log2: u8,
    /// log2 of the deepest RQ (`max_recv_wr`, resp0 bits 23:16).
    pub max_recv_wr_log2: u8,
    /// log2 of the number of address handles (resp0 bits 15:8).
    pub max_ah_log2: u8,
    /// log2 of the number of memory windows (resp1 bits 7:0; reported only).
    pub max_mw_log2: u8,
    /// log2 of the GID table size (resp0 bits 51:48).
    pub max_gid_log2: u8,
    /// Capability flag ATOMIC.
    pub atomic: bool,
    /// Capability flag MTT_VA.
    pub mtt_va: bool,
    /// Capability flag EXTEND_DB. Without it ALLOC_DB is unsupported.
    pub extend_db: bool,
    /// Default congestion-control algorithm, an index into [`CC_NAMES`] (resp1 bits 31:28).
    pub cc: u8,
    /// The reserved local DMA lkey (resp1 bits 63:32).
    pub local_dma_lkey: u32,
    /// Firmware version (QUERY_FW_INFO resp0 bits 31:0).
    pub fw_version: u32,
}

/// Default number of QP blocks: 4096 QPs (QPN 1..4095) and 8192 CQs.
pub const DEFAULT_QP_BLOCKS: u16 = 4;
/// Default log2 of the largest CQ: 4 Mi CQEs.
pub const DEFAULT_MAX_CQE_LOG2: u8 = 22;
/// Default log2 of the largest MR: 1 TiB.
pub const DEFAULT_MAX_MR_SIZE_LOG2: u8 = 40;
/// Default log2 of the deepest RQ: 8192 (the driver's cap for SQs too).
pub const DEFAULT_MAX_RECV_WR_LOG2: u8 = 13;
/// Default log2 of the number of AHs: 65536.
pub const DEFAULT_MAX_AH_LOG2: u8 = 16;
/// Default log2 of the number of MWs: 1 (MWs are not supported by the drivers anyway).
pub const DEFAULT_MAX_MW_LOG2: u8 = 0;
/// Default log2 of the GID table size: 16 entries.
pub const DEFAULT_MAX_GID_LOG2: u8 = 4;
/// Default congestion-control algorithm: 0 (NewReno).
pub const DEFAULT_CC: u8 = 0;
/// Default local DMA lkey. Bits 31:28 set: it cannot collide with a driver-built STag
/// (`MPT index << 8 | key`, MPT index 20 bits).
pub const DEFAULT_LOCAL_DMA_LKEY: u32 = 0xf000_0000;
/// Default firmware version: 0x0001_0000 (rdma-core shows "0.1.0").
pub const DEFAULT_FW_VERSION: u32 = 0x0001_0000;

/// Accepted range of [`Caps::qp_blocks`] (12-bit field, at least one block).
pub const QP_BLOCKS_RANGE: RangeInclusive<u64> = 1..=4095;
/// Accepted range of [`Caps::max_cqe_log2`]: CQ consumer indices are 24 bits and the owner bit
/// needs one more, so 2^22 CQEs at most.
pub const MAX_CQE_RANGE: RangeInclusive<u64> = 1..=22;
/// Accepted range of [`Caps::max_mr_size_log2`]: at least a page, and `1 << n` must fit a u64.
pub const MAX_MR_SIZE_RANGE: RangeInclusive<u64> = 12..=63;
/// Accepted range of [`Caps::max_recv_wr_log2`] (RQ producer indices are 16 bits).
pub const MAX_RECV_WR_RANGE: RangeInclusive<u64> = 1..=16;
/// Accepted range of [`Caps::max_ah_log2`] (the driver keeps `max_ah` in an `int`).
pub const MAX_AH_RANGE: RangeInclusive<u64> = 0..=24;
/// Accepted range of [`Caps::max_mw_log2`].
pub const MAX_MW_RANGE: RangeInclusive<u64> = 0..=24;
/// Accepted range of [`Caps::max_gid_log2`] (4-bit field).
pub const MAX_GID_RANGE: RangeInclusive<u64> = 0..=15;
/// Accepted range of [`Caps::cc`].
pub const CC_RANGE: RangeInclusive<u64> = 0..=4;

impl Default for Caps {
    fn default() -> Self {
        Caps {
            qp_blocks: DEFAULT_QP_BLOCKS,
            max_cqe_log2: DEFAULT_MAX_CQE_LOG2,
            max_mr_size_log2: DEFAULT_MAX_MR_SIZE_LOG2,
            max_recv_wr_log2: DEFAULT_MAX_RECV_WR_LOG2,
            max_ah_log2: DEFAULT_MAX_AH_LOG2,
            max_mw_log2: DEFAULT_MAX_MW_LOG2,
            max_gid_log2: DEFAULT_MAX_GID_LOG2,
            atomic: true,
            mtt_va: true,
            extend_db: true,
            cc: DEFAULT_CC,
            local_dma_lkey: DEFAULT_LOCAL_DMA_LKEY,
            fw_version: DEFAULT_FW_VERSION,
        }
    }
}

impl Caps {
    /// Checks every field against its accepted range; the error names the first bad field.
    pub fn check(&self) -> Result<(), String> {
        let fields: [(&str, u64, RangeInclusive<u64>); 8] = [
            ("qp_blocks", self.qp_blocks.into(), QP_BLOCKS_RANGE),
            ("max_cqe", self.max_cqe_log2.into(), MAX_CQE_RANGE),
            (
                "max_mr_size",
                self.max_mr_size_log2.into(),
                MAX_MR_SIZE_RANGE,
            ),
            (
                "max_recv_wr",
                self.max_recv_wr_log2.into(),
                MAX_RECV_WR_RANGE,
            ),
            ("max_ah", self.max_ah_log2.into(), MAX_AH_RANGE),
            ("max_mw", self.max_mw_log2.into(), MAX_MW_RANGE),
            ("max_gid", self.max_gid_log2.into(), MAX_GID_RANGE),
            ("cc", self.cc.into(), CC_RANGE),
        ];
        for (name, value, range) in fields {
            if !range.contains(&value) {
                return Err(format!(
                    "{name}={value} is out of range {}..={}",
                    range.start(),
                    range.end()
                ));
            }
        }
        Ok(())
    }

    /// The capability flag byte (resp0 bits 31:24).
    pub fn flags(&self) -> u8 {
        let mut f = 0;
        if self.atomic {
            f |= flags::ATOMIC;
        }
        if self.mtt_va {
            f |= flags::MTT_VA;
        }
        if self.extend_db {
            f |= flags::EXTEND_DB;
        }
        f
    }

    /// QUERY_DEVICE `(resp0, resp1)` (§3.5). Fields are masked to their widths.
    pub fn query_device(&self) -> (u64, u64) {
        let resp0 = u64::from(self.max_mr_size_log2)
            | u64::from(self.max_ah_log2) << 8
            | u64::from(self.max_recv_wr_log2) << 16
            | u64::from(self.flags()) << 24
            | u64::from(self.max_cqe_log2) << 40
            | u64::from(self.max_gid_log2 & 0xf) << 48;
        let resp1 = u64::from(self.max_mw_log2)
            | u64::from(self.qp_blocks & 0xfff) << 16
            | u64::from(self.cc & 0xf) << 28
            | u64::from(self.local_dma_lkey) << 32;
        (resp0, resp1)
    }

    /// `max_qp` as the model counts it: `1024 * qp_blocks` QPNs (QPN 0 unused).
    pub fn max_qp(&self) -> u32 {
        1024 * u32::from(self.qp_blocks)
    }
}

/// A QUERY_DEVICE field that a hostile adapter may fill with any raw value (`hostile caps`):
/// the log2 limits, the QP blocks and the congestion-control algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapField {
    /// log2 of the largest MR (resp0 7:0).
    MaxMrSize,
    /// log2 of the number of AHs (resp0 15:8).
    MaxAh,
    /// log2 of the deepest RQ (resp0 23:16).
    MaxRecvWr,
    /// log2 of the largest CQ (resp0 47:40).
    MaxCqe,
    /// log2 of the GID table size (resp0 51:48).
    MaxGid,
    /// log2 of the number of MWs (resp1 7:0).
    MaxMw,
    /// QP blocks (resp1 27:16).
    QpBlocks,
    /// Congestion-control algorithm (resp1 31:28).
    Cc,
}

impl CapField {
    /// Every field, in the order of the reply (resp0, then resp1, low bits first).
    pub const ALL: [CapField; 8] = [
        CapField::MaxMrSize,
        CapField::MaxAh,
        CapField::MaxRecvWr,
        CapField::MaxCqe,
        CapField::MaxGid,
        CapField::MaxMw,
        CapField::QpBlocks,
        CapField::Cc,
    ];

    /// The field's name: the one [`Caps::check`] and the command line's `caps` keys use.
    pub fn name(self) -> &'static str {
        match self {
            CapField::MaxMrSize => "max_mr_size",
            CapField::MaxAh => "max_ah",
            CapField::MaxRecvWr => "max_recv_wr",
            CapField::MaxCqe => "max_cqe",
            CapField::MaxGid => "max_gid",
            CapField::MaxMw => "max_mw",
            CapField::QpBlocks => "qp_blocks",
            CapField::Cc => "cc",
        }
    }

    /// The field named `name` (case-insensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(name))
    }

    /// `(response word: 0 or 1, lowest bit, width in bits)`.
    fn position(self) -> (usize, u32, u32) {
        match self {
            CapField::MaxMrSize => (0, 0, 8),
            CapField::MaxAh => (0, 8, 8),
            CapField::MaxRecvWr => (0, 16, 8),
            CapField::MaxCqe => (0, 40, 8),
            CapField::MaxGid => (0, 48, 4),
            CapField::MaxMw => (1, 0, 8),
            CapField::QpBlocks => (1, 16, 12),
            CapField::Cc => (1, 28, 4),
        }
    }

    /// The largest value the field can carry (all its bits set).
    pub fn max(self) -> u16 {
        let (_, _, width) = self.position();
        // CAST: widths are at most 12 bits.
        ((1u32 << width) - 1) as u16
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Raw values that replace fields of the QUERY_DEVICE reply, bypassing [`Caps::check`]: what a
/// hostile adapter reports. The model's own tables and limits keep the checked [`Caps`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawCaps {
    values: [Option<u16>; CapField::ALL.len()],
}

impl RawCaps {
    /// Every field set to `value(field)` (masked to the field's width).
    pub fn every(value: impl Fn(CapField) -> u16) -> Self {
        let mut r = RawCaps::default();
        for f in CapField::ALL {
            r.set(f, value(f));
        }
        r
    }

    /// Every field at its bit-width maximum (`hostile caps max`).
    pub fn max() -> Self {
        Self::every(CapField::max)
    }

    /// Every field 0 (`hostile caps zero`).
    pub fn zero() -> Self {
        Self::every(|_| 0)
    }

    /// Replaces field `f` with `value`, masked to the field's width.
    pub fn set(&mut self, f: CapField, value: u16) {
        self.values[f.index()] = Some(value & f.max());
    }

    /// The raw value of field `f`, if it is replaced.
    pub fn get(&self, f: CapField) -> Option<u16> {
        self.values[f.index()]
    }

    /// Takes every field `other` replaces.
    pub fn merge(&mut self, other: &RawCaps) {
        for f in CapField::ALL {
            if let Some(v) = other.get(f) {
                self.set(f, v);
            }
        }
    }

    /// Whether no field is replaced.
    pub fn is_empty(&self) -> bool {
        self.values.iter().all(Option::is_none)
    }

    /// The replaced fields and their values, in [`CapField::ALL`] order.
    pub fn fields(&self) -> impl Iterator<Item = (CapField, u16)> + '_ {
        CapField::ALL
            .into_iter()
            .filter_map(|f| self.get(f).map(|v| (f, v)))
    }

    /// A QUERY_DEVICE `(resp0, resp1)` with the replaced fields overwritten.
    pub fn apply(&self, resp: (u64, u64)) -> (u64, u64) {
        let mut words = [resp.0, resp.1];
        for (f, v) in self.fields() {
            let (word, shift, _) = f.position();
            let mask = u64::from(f.max()) << shift;
            words[word] = words[word] & !mask | u64::from(v) << shift & mask;
        }
        (words[0], words[1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_encode() {
        let c = Caps::default();
        c.check().unwrap();
        let (r0, r1) = c.query_device();
        assert_eq!(r0 & 0xff, 40);
        assert_eq!(r0 >> 8 & 0xff, 16);
        assert_eq!(r0 >> 16 & 0xff, 13);
        assert_eq!(r0 >> 24 & 0xff, 0xa8, "ATOMIC | MTT_VA | EXTEND_DB");
        assert_eq!(r0 >> 32 & 0xff, 0, "bits 39:32 reserved");
        assert_eq!(r0 >> 40 & 0xff, 22);
        assert_eq!(r0 >> 48, 4);
        assert_eq!(r1 & 0xff, 0);
        assert_eq!(r1 >> 16 & 0xfff, 4);
        assert_eq!(r1 >> 28 & 0xf, 0);
        assert_eq!(r1 >> 32, 0xf000_0000);
        assert_eq!(c.max_qp(), 4096);
    }

    #[test]
    fn check_names_the_bad_field() {
        let bad = [
            Caps {
                qp_blocks: 0,
                ..Default::default()
            },
            Caps {
                qp_blocks: 4096,
                ..Default::default()
            },
            Caps {
                max_cqe_log2: 23,
                ..Default::default()
            },
            Caps {
                max_mr_size_log2: 64,
                ..Default::default()
            },
            Caps {
                max_recv_wr_log2: 0,
                ..Default::default()
            },
            Caps {
                max_gid_log2: 16,
                ..Default::default()
            },
            Caps {
                cc: 5,
                ..Default::default()
            },
        ];
        let names = [
            "qp_blocks",
            "qp_blocks",
            "max_cqe",
            "max_mr_size",
            "max_recv_wr",
            "max_gid",
            "cc",
        ];
        for (c, name) in bad.iter().zip(names) {
            let e = c.check().unwrap_err();
            assert!(e.starts_with(name), "{e}");
        }
        let none = Caps {
            atomic: false,
            mtt_va: false,
            extend_db: false,
            ..Default::default()
        };
        assert_eq!(none.query_device().0 >> 24 & 0xff, 0);
    }

    #[test]
    fn raw_caps_replace_only_their_fields() {
        let truth = Caps::default().query_device();
        assert_eq!(RawCaps::default().apply(truth), truth);
        let (r0, r1) = RawCaps::max().apply(truth);
        assert_eq!(
            r0, 0x000f_ff00_a8ff_ffff,
            "flags and reserved bits untouched"
        );
        assert_eq!(
            r1, 0xf000_0000_ffff_00ff,
            "lkey and reserved bits untouched"
        );
        let (r0, r1) = RawCaps::zero().apply(truth);
        assert_eq!(r0, 0xa800_0000);
        assert_eq!(r1, 0xf000_0000_0000_0000);
        let mut one = RawCaps::default();
        one.set(CapField::MaxGid, 0xffff);
        assert_eq!(one.get(CapField::MaxGid), Some(15), "masked to the width");
        assert_eq!(one.apply(truth).0, truth.0 | 0xf << 48);
        assert_eq!(one.apply(truth).1, truth.1);
        let mut both = RawCaps::zero();
        both.merge(&one);
        assert_eq!(both.fields().count(), 8);
        assert_eq!(both.get(CapField::MaxGid), Some(15));
        assert_eq!(both.get(CapField::Cc), Some(0));
        for f in CapField::ALL {
            assert_eq!(CapField::from_name(&f.name().to_uppercase()), Some(f));
        }
        assert_eq!(CapField::from_name("atomic"), None);
        let maxima: Vec<u16> = CapField::ALL.iter().map(|f| f.max()).collect();
        assert_eq!(maxima, [255, 255, 255, 255, 15, 255, 4095, 15]);
    }
}
