// SPDX-License-Identifier: GPL-2.0

//! CREATE_CQ (§3.5).

use super::{bits, put, QueueMttCfg};
use crate::cmdq::{Request, Status};

/// CREATE_CQ (RDMA/4): 40-byte request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreateCq {
    /// CQN (cfg0 19:0).
    pub cqn: u32,
    /// log2 depth (cfg0 31:24).
    pub depth_log2: u32,
    /// The buffer: `offset` is the first-CQE offset @32, `more` is unused.
    pub buf: QueueMttCfg,
    /// EQN of the CEQ (cfg1 9:0).
    pub eqn: u32,
    /// cfg1 bit 11: extended doorbell page.
    pub ext_db: bool,
    /// Doorbell record address.
    pub dbrec: u64,
    /// Doorbell page (cfg2 15:0, meaningful with `ext_db`).
    pub db_page: u16,
}

impl CreateCq {
    /// Bytes covered by the request.
    pub const LEN: usize = 40;

    /// Decodes the request.
    pub fn decode(r: &Request<'_>) -> Result<Self, Status> {
        let cfg0 = r.u32(8)?;
        let cfg1 = r.u32(20)?;
        let addr = u64::from(r.u32(12)?) | u64::from(r.u32(16)?) << 32;
        Ok(CreateCq {
            cqn: bits(cfg0, 19, 0),
            depth_log2: cfg0 >> 24,
            buf: QueueMttCfg {
                page_shift: (12 + bits(cfg0, 23, 20)) as u8,
                level: bits(cfg1, 15, 15) as u8,
                count: cfg1 >> 16,
                offset: u64::from(r.u32(32)?),
                addr,
                more: [0; 3],
            },
            eqn: bits(cfg1, 9, 0),
            ext_db: cfg1 & (1 << 11) != 0,
            dbrec: r.u64(24)?,
            db_page: r.u16(36)?,
        })
    }

    /// Writes the request into a command slot.
    pub fn write_fields(&self, slot: &mut [u8]) {
        let code = u32::from(self.buf.page_shift.saturating_sub(12) & 0xf);
        let cfg0 = self.depth_log2 << 24 | code << 20 | self.cqn & 0xf_ffff;
        put(slot, 8, &cfg0.to_le_bytes());
        put(slot, 12, &(self.buf.addr as u32).to_le_bytes());
        put(slot, 16, &((self.buf.addr >> 32) as u32).to_le_bytes());
        let cfg1 = self.buf.count << 16
            | u32::from(self.buf.level & 1) << 15
            | u32::from(self.ext_db) << 11
            | self.eqn & 0x3ff;
        put(slot, 20, &cfg1.to_le_bytes());
        put(slot, 24, &self.dbrec.to_le_bytes());
        put(slot, 32, &(self.buf.offset as u32).to_le_bytes());
        put(slot, 36, &u32::from(self.db_page).to_le_bytes());
    }
}
