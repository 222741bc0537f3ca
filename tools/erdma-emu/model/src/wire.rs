// SPDX-License-Identifier: GPL-2.0

//! Data-path wire formats (erdma-hw.md §3.5, §5, §6): the RDMA object commands (CREATE_QP,
//! DESTROY_QP, MODIFY_QP in the RoCEv2 and iWARP layouts, CREATE_CQ, DESTROY_CQ, REFLUSH,
//! REG_MR, DEREG_MR, QUERY_QP), SQ WQEs (the header, the body of every opcode, the SGL), RQEs, data CQEs, the SQ/RQ
//! doorbell values and STags. The engines build and read these words only through the types
//! here; each layout is pinned to a byte image worked out from erdma-hw.md in the tests below.
//!
//! Decoders read only the fields that are meaningful for the command; the caller decides which of
//! the decoded optional fields (inline MTT entries, doorbell pages, ...) matter, so stale slot bytes
//! never do (§3.2, §10.4). Every encoder (`write_fields`) is what a driver writes and exists for
//! tests.

use crate::cmdq::{AddressVector, NetType, Request, Status};

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

// ------------------------------------------------------------------------------------------------
// MTT configuration of queues (CREATE_QP / CREATE_CQ)
// ------------------------------------------------------------------------------------------------

/// The MTT description of one queue buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueMttCfg {
    /// log2 of the page size (12 + the 4-bit page-size code).
    pub page_shift: u8,
    /// 0: `addr` (and inline entries) are page addresses; 1: `addr` is an array of page addresses.
    pub level: u8,
    /// Number of pages (MTT entries).
    pub count: u32,
    /// Byte offset of the queue inside its first page.
    pub offset: u64,
    /// Entry 0 (level 0) or the MTT array (level 1).
    pub addr: u64,
    /// Inline entries 1..3 (level 0 only; garbage otherwise).
    pub more: [u64; 3],
}

// ------------------------------------------------------------------------------------------------
// CREATE_QP / DESTROY_QP (§3.5)
// ------------------------------------------------------------------------------------------------

/// QP type RC (CREATE_QP cfg2 3:0).
pub const QP_TYPE_RC: u8 = 0;
/// QP type UD (also GSI, QPN 1).
pub const QP_TYPE_UD: u8 = 1;

/// CREATE_QP (RDMA/1): 120-byte request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreateQp {
    /// QPN (cfg0 19:0).
    pub qpn: u32,
    /// log2 SQ depth in WQEBBs (cfg0 31:20).
    pub sq_depth_log2: u32,
    /// log2 RQ depth in RQEs (cfg1 31:20).
    pub rq_depth_log2: u32,
    /// PDN (cfg1 19:0).
    pub pdn: u32,
    /// Send CQN (SQ cfg 23:0).
    pub send_cqn: u32,
    /// Receive CQN (RQ cfg 23:0).
    pub recv_cqn: u32,
    /// SQ cfg bit 25: user QP on an extended doorbell page.
    pub ext_db: bool,
    /// SQ buffer.
    pub sq: QueueMttCfg,
    /// RQ buffer.
    pub rq: QueueMttCfg,
    /// SQ doorbell record address.
    pub sq_dbrec: u64,
    /// RQ doorbell record address.
    pub rq_dbrec: u64,
    /// Doorbell pages `(SQ, RQ)` (meaningful only with `ext_db`).
    pub db_pages: (u16, u16),
    /// QP type (cfg2 3:0).
    pub qp_type: u8,
}

impl CreateQp {
    /// Bytes covered by the request.
    pub const LEN: usize = 120;

    /// Decodes the request.
    pub fn decode(r: &Request<'_>) -> Result<Self, Status> {
        let cfg0 = r.u32(8)?;
        let cfg1 = r.u32(12)?;
        let sqc = r.u32(16)?;
        let rqc = r.u32(20)?;
        let mtt = |cfg: u32, code: u32, addr: u64, more_at: usize| -> Result<QueueMttCfg, Status> {
            Ok(QueueMttCfg {
                page_shift: (12 + code) as u8,
                level: (cfg & 1) as u8,
                count: bits(cfg, 11, 1),
                offset: u64::from(cfg & 0xffff_f000),
                addr,
                more: [r.u64(more_at)?, r.u64(more_at + 8)?, r.u64(more_at + 16)?],
            })
        };
        let db = r.u32(112)?;
        Ok(CreateQp {
            qpn: bits(cfg0, 19, 0),
            sq_depth_log2: bits(cfg0, 31, 20),
            rq_depth_log2: bits(cfg1, 31, 20),
            pdn: bits(cfg1, 19, 0),
            send_cqn: bits(sqc, 23, 0),
            recv_cqn: bits(rqc, 23, 0),
            ext_db: sqc & (1 << 25) != 0,
            sq: mtt(r.u32(40)?, bits(sqc, 31, 28), r.u64(24)?, 64)?,
            rq: mtt(r.u32(44)?, bits(rqc, 31, 28), r.u64(32)?, 88)?,
            sq_dbrec: r.u64(48)?,
            rq_dbrec: r.u64(56)?,
            db_pages: ((db >> 16) as u16, db as u16),
            qp_type: (r.u32(116)? & 0xf) as u8,
        })
    }

    /// Writes the request into a command slot.
    pub fn write_fields(&self, slot: &mut [u8]) {
        let mttcfg = |m: &QueueMttCfg| {
            (m.offset as u32 & 0xffff_f000) | (m.count & 0x7ff) << 1 | u32::from(m.level & 1)
        };
        let code = |m: &QueueMttCfg| u32::from(m.page_shift.saturating_sub(12) & 0xf) << 28;
        put(
            slot,
            8,
            &(self.sq_depth_log2 << 20 | self.qpn & 0xf_ffff).to_le_bytes(),
        );
        put(
            slot,
            12,
            &(self.rq_depth_log2 << 20 | self.pdn & 0xf_ffff).to_le_bytes(),
        );
        let sqc = code(&self.sq) | u32::from(self.ext_db) << 25 | self.send_cqn & 0xff_ffff;
        put(slot, 16, &sqc.to_le_bytes());
        put(
            slot,
            20,
            &(code(&self.rq) | self.recv_cqn & 0xff_ffff).to_le_bytes(),
        );
        put(slot, 24, &self.sq.addr.to_le_bytes());
        put(slot, 32, &self.rq.addr.to_le_bytes());
        put(slot, 40, &mttcfg(&self.sq).to_le_bytes());
        put(slot, 44, &mttcfg(&self.rq).to_le_bytes());
        put(slot, 48, &self.sq_dbrec.to_le_bytes());
        put(slot, 56, &self.rq_dbrec.to_le_bytes());
        for i in 0..3 {
            put(slot, 64 + 8 * i, &self.sq.more[i].to_le_bytes());
            put(slot, 88 + 8 * i, &self.rq.more[i].to_le_bytes());
        }
        let db = u32::from(self.db_pages.0) << 16 | u32::from(self.db_pages.1);
        put(slot, 112, &db.to_le_bytes());
        put(slot, 116, &u32::from(self.qp_type).to_le_bytes());
    }
}

/// A request whose only field is a u32 at @8 (DESTROY_QP, DESTROY_CQ, QUERY_QP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct U32Arg(pub u32);

impl U32Arg {
    /// Decodes the u32 at @8.
    pub fn decode(r: &Request<'_>) -> Result<Self, Status> {
        Ok(U32Arg(r.u32(8)?))
    }

    /// Writes it.
    pub fn write_fields(&self, slot: &mut [u8]) {
        put(slot, 8, &self.0.to_le_bytes());
    }
}

// ------------------------------------------------------------------------------------------------
// MODIFY_QP, RoCEv2 layout (§3.5)
// ------------------------------------------------------------------------------------------------

/// MODIFY_QP attribute mask bits.
pub mod qp_mask {
    /// Target state.
    pub const STATE: u32 = 1 << 0;
    /// Q_Key.
    pub const QKEY: u32 = 1 << 1;
    /// Address vector.
    pub const AV: u32 = 1 << 2;
    /// SQ PSN.
    pub const SQ_PSN: u32 = 1 << 3;
    /// RQ PSN.
    pub const RQ_PSN: u32 = 1 << 4;
    /// Destination QPN.
    pub const DST_QPN: u32 = 1 << 5;
}

/// RoCE QP states (§3.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum QpState {
    /// 0.
    Reset = 0,
    /// 1.
    Init = 1,
    /// 2.
    Rtr = 2,
    /// 3.
    Rts = 3,
    /// 4.
    Sqd = 4,
    /// 5.
    Sqe = 5,
    /// 6.
    Error = 6,
}

impl QpState {
    /// The state with number `v`.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            4 => QpState::Sqd,
            5 => QpState::Sqe,
            6 => QpState::Error,
            _ => return None,
        })
    }

    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Error => "ERROR",
        }
    }
}

/// MODIFY_QP (RDMA/3), RoCEv2 layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModifyQpRoce {
    /// QPN (@8 19:0).
    pub qpn: u32,
    /// Raw target state (@8 31:24).
    pub state: u8,
    /// Destination QPN (@12 19:0).
    pub dst_qpn: u32,
    /// Attribute mask (@16).
    pub mask: u32,
    /// Q_Key (@20).
    pub qkey: u32,
    /// RQ PSN (@24).
    pub rq_psn: u32,
    /// SQ PSN (@28).
    pub sq_psn: u32,
    /// The address vector (@32).
    pub av: AddressVector,
}

impl ModifyQpRoce {
    /// Bytes covered by the request.
    pub const LEN: usize = 32 + AddressVector::SIZE;

    /// Decodes the request.
    pub fn decode(r: &Request<'_>) -> Result<Self, Status> {
        let cfg = r.u32(8)?;
        Ok(ModifyQpRoce {
            qpn: bits(cfg, 19, 0),
            state: (cfg >> 24) as u8,
            dst_qpn: bits(r.u32(12)?, 19, 0),
            mask: r.u32(16)?,
            qkey: r.u32(20)?,
            rq_psn: r.u32(24)?,
            sq_psn: r.u32(28)?,
            av: AddressVector::decode_at(r, 32)?,
        })
    }

    /// Writes the request into a command slot.
    pub fn write_fields(&self, slot: &mut [u8]) {
        let cfg = u32::from(self.state) << 24 | self.qpn & 0xf_ffff;
        put(slot, 8, &cfg.to_le_bytes());
        put(slot, 12, &(self.dst_qpn & 0xf_ffff).to_le_bytes());
        put(slot, 16, &self.mask.to_le_bytes());
        put(slot, 20, &self.qkey.to_le_bytes());
        put(slot, 24, &self.rq_psn.to_le_bytes());
        put(slot, 28, &self.sq_psn.to_le_bytes());
        put(slot, 32, &self.av.encode());
    }
}

/// QUERY_QP resp0: 23:0 SQ PSN, 47:24 RQ PSN, 55:48 state, bit 56 SQ draining.
pub fn query_qp_resp0(sq_psn: u32, rq_psn: u32, state: QpState, draining: bool) -> u64 {
    qp_resp0(sq_psn, rq_psn, state as u8, draining)
}

fn qp_resp0(sq_psn: u32, rq_psn: u32, state: u8, draining: bool) -> u64 {
    u64::from(sq_psn & 0xff_ffff)
        | u64::from(rq_psn & 0xff_ffff) << 24
        | u64::from(state) << 48
        | u64::from(draining) << 56
}

// ------------------------------------------------------------------------------------------------
// MODIFY_QP, iWARP layout (§3.5, §7.1)
// ------------------------------------------------------------------------------------------------

/// iWARP QP states (§3.5): the target state of MODIFY_QP on an iWARP function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum IwarpState {
    /// 0: created, not connected.
    Idle = 0,
    /// 1: RTR (accepted, no meaning to the device beyond IDLE).
    Rtr = 1,
    /// 2: connected: the device owns the TCP stream.
    Rts = 2,
    /// 3: closing (the peer's socket closed, or a local graceful stop).
    Closing = 3,
    /// 4: terminate (a local stop with a Terminate message).
    Terminate = 4,
    /// 5: error.
    Error = 5,
}

impl IwarpState {
    /// The state with number `v`.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => IwarpState::Idle,
            1 => IwarpState::Rtr,
            2 => IwarpState::Rts,
            3 => IwarpState::Closing,
            4 => IwarpState::Terminate,
            5 => IwarpState::Error,
            _ => return None,
        })
    }

    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            IwarpState::Idle => "IDLE",
            IwarpState::Rtr => "RTR",
            IwarpState::Rts => "RTS",
            IwarpState::Closing => "CLOSING",
            IwarpState::Terminate => "TERMINATE",
            IwarpState::Error => "ERROR",
        }
    }
}

/// MODIFY_QP (RDMA/3), iWARP layout, word @8: what every iWARP MODIFY_QP means. The rest of the
/// command ([`IwarpConnection`]) is meaningful only for the transition to RTS: the "stop" form
/// (to CLOSING, TERMINATE, ERROR) carries stack garbage there (§10.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModifyQpIwarp {
    /// QPN (@8 19:0).
    pub qpn: u32,
    /// Raw target state (@8 31:24), [`IwarpState`] numbering.
    pub state: u8,
    /// Congestion-control algorithm (@8 23:20).
    pub cc: u8,
}

impl ModifyQpIwarp {
    /// Bytes the driver's struct covers (36 meaningful).
    pub const LEN: usize = 40;

    /// Decodes word @8 only.
    pub fn decode(r: &Request<'_>) -> Result<Self, Status> {
        let cfg = r.u32(8)?;
        Ok(ModifyQpIwarp {
            qpn: bits(cfg, 19, 0),
            state: bits(cfg, 31, 24) as u8,
            cc: bits(cfg, 23, 20) as u8,
        })
    }

    /// Writes word @8.
    pub fn write_fields(&self, slot: &mut [u8]) {
        let cfg =
            u32::from(self.state) << 24 | (u32::from(self.cc) & 0xf) << 20 | self.qpn & 0xf_ffff;
        put(slot, 8, &cfg.to_le_bytes());
    }
}

/// MODIFY_QP (RDMA/3), iWARP layout, words @12..@36: the connection handed over at RTS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IwarpConnection {
    /// The peer's cookie from its MPA frame (@12, host order): the model's QPN of the peer.
    pub cookie: u32,
    /// Destination IPv4 address (@16, big-endian on the wire).
    pub dst_ip: [u8; 4],
    /// Source IPv4 address (@20, big-endian).
    pub src_ip: [u8; 4],
    /// Source TCP port (@24, big-endian u16).
    pub src_port: u16,
    /// Destination TCP port (@26, big-endian u16).
    pub dst_port: u16,
    /// TCP SND.NXT to continue with (@28).
    pub snd_nxt: u32,
    /// TCP RCV.NXT (@32).
    pub rcv_nxt: u32,
}

impl IwarpConnection {
    /// Decodes words @12..@36 (only for the transition to RTS).
    pub fn decode(r: &Request<'_>) -> Result<Self, Status> {
        Ok(IwarpConnection {
            cookie: r.u32(12)?,
            dst_ip: r.bytes(16)?,
            src_ip: r.bytes(20)?,
            src_port: u16::from_be_bytes(r.bytes(24)?),
            dst_port: u16::from_be_bytes(r.bytes(26)?),
            snd_nxt: r.u32(28)?,
            rcv_nxt: r.u32(32)?,
        })
    }

    /// Writes words @12..@36.
    pub fn write_fields(&self, slot: &mut [u8]) {
        put(slot, 12, &self.cookie.to_le_bytes());
        put(slot, 16, &self.dst_ip);
        put(slot, 20, &self.src_ip);
        put(slot, 24, &self.src_port.to_be_bytes());
        put(slot, 26, &self.dst_port.to_be_bytes());
        put(slot, 28, &self.snd_nxt.to_le_bytes());
        put(slot, 32, &self.rcv_nxt.to_le_bytes());
    }
}

/// QUERY_QP resp0 of an iWARP QP: the fields of [`query_qp_resp0`], with the low 24 bits of
/// SND.NXT and RCV.NXT as the PSNs and the [`IwarpState`] number as the state.
pub fn query_qp_resp0_iwarp(snd_nxt: u32, rcv_nxt: u32, state: IwarpState) -> u64 {
    qp_resp0(snd_nxt, rcv_nxt, state as u8, false)
}

// ------------------------------------------------------------------------------------------------
// CREATE_CQ (§3.5)
// ------------------------------------------------------------------------------------------------

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

// ------------------------------------------------------------------------------------------------
// REFLUSH (§3.5)
// ------------------------------------------------------------------------------------------------

/// REFLUSH (RDMA/6): @8 QPN, @12 SQ producer index, @16 RQ producer index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reflush {
    /// QPN.
    pub qpn: u32,
    /// SQ producer index (WQEBBs; 16 bits are used).
    pub sq_pi: u32,
    /// RQ producer index (16 bits are used).
    pub rq_pi: u32,
}

impl Reflush {
    /// Decodes the request.
    pub fn decode(r: &Request<'_>) -> Result<Self, Status> {
        Ok(Reflush {
            qpn: r.u32(8)?,
            sq_pi: r.u32(12)?,
            rq_pi: r.u32(16)?,
        })
    }

    /// Writes the request into a command slot.
    pub fn write_fields(&self, slot: &mut [u8]) {
        put(slot, 8, &self.qpn.to_le_bytes());
        put(slot, 12, &self.sq_pi.to_le_bytes());
        put(slot, 16, &self.rq_pi.to_le_bytes());
    }
}

// ------------------------------------------------------------------------------------------------
// REG_MR / DEREG_MR (§3.5, §6)
// ------------------------------------------------------------------------------------------------

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

// ------------------------------------------------------------------------------------------------
// WQEs (§5.2-§5.4)
// ------------------------------------------------------------------------------------------------

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
    /// @24 bits 5:1: access bits ([`access`]).
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

// ------------------------------------------------------------------------------------------------
// RQE (§5.5)
// ------------------------------------------------------------------------------------------------

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

// ------------------------------------------------------------------------------------------------
// CQE (§5.6) and completion status (§5.7)
// ------------------------------------------------------------------------------------------------

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

// ------------------------------------------------------------------------------------------------
// Owner bits and EQEs (§4.1, §4.2, §5.6)
// ------------------------------------------------------------------------------------------------

/// Bytes at the start of a CQE (data or CMDQ) or an EQE that hold its owner bit.
pub const OWNER_BYTES: usize = 4;

/// Writes an entry (CQE or EQE) so that the owner bit becomes visible last: `write(offset,
/// bytes)` is called for the body (from [`OWNER_BYTES`] on) and then for the first
/// [`OWNER_BYTES`] bytes; the second write does not happen if the first fails.
pub fn write_owner_last<E>(
    entry: &[u8],
    mut write: impl FnMut(u64, &[u8]) -> Result<(), E>,
) -> Result<(), E> {
    let (head, body) = entry.split_at(OWNER_BYTES.min(entry.len()));
    write(OWNER_BYTES as u64, body)?;
    write(0, head)
}

/// Size of an event queue entry.
pub const EQE_SIZE: usize = 16;
/// The owner bit of an EQE: bit 31 of its first LE u32.
const EQE_OWNER: u32 = 1 << 31;

/// An asynchronous event (AEQE, §4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AeqEvent {
    /// Event type (dword 0 bits 23:16): 0 QP fatal, 1 QP RQ error, 2 access error, 3 CQ error,
    /// 4 other.
    pub ty: u8,
    /// Subtype (dword 0 bits 7:0).
    pub subtype: u8,
    /// dword 1 (QPN or CQN).
    pub data0: u32,
    /// dword 2.
    pub data1: u32,
}

/// An event queue entry (16 bytes, §4.2), without its owner bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eqe {
    /// A CEQE: first u64 LE bits 19:0 = CQN, the rest 0.
    Ceq {
        /// CQN (20 bits).
        cqn: u32,
    },
    /// An AEQE: four LE u32 (bits 23:16 type and 7:0 subtype, data0, data1, 0).
    Aeq(AeqEvent),
    /// A CMDQ EQE: only its owner bit means anything to the driver; the rest is 0.
    Cmdq,
}

impl Eqe {
    /// The 16 bytes, with owner bit `owner`.
    pub fn encode(&self, owner: bool) -> [u8; EQE_SIZE] {
        let mut words = [0u32; 4];
        match self {
            Eqe::Ceq { cqn } => words[0] = cqn & 0xf_ffff,
            Eqe::Aeq(ev) => {
                words[0] = u32::from(ev.ty) << 16 | u32::from(ev.subtype);
                words[1] = ev.data0;
                words[2] = ev.data1;
            }
            Eqe::Cmdq => {}
        }
        if owner {
            words[0] |= EQE_OWNER;
        }
        let mut b = [0u8; EQE_SIZE];
        for (chunk, w) in b.chunks_exact_mut(4).zip(words) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// The owner bit of an entry (what a driver reads).
    pub fn owner(e: &[u8; EQE_SIZE]) -> bool {
        le32(e, 0) & EQE_OWNER != 0
    }

    /// Reads an entry as a CEQE (what a driver does on a CEQ): its CQN.
    pub fn decode_ceqe(e: &[u8; EQE_SIZE]) -> u32 {
        bits(le32(e, 0), 19, 0)
    }

    /// Reads an entry as an AEQE (what a driver does on the AEQ).
    pub fn decode_aeqe(e: &[u8; EQE_SIZE]) -> AeqEvent {
        let dw0 = le32(e, 0);
        AeqEvent {
            ty: bits(dw0, 23, 16) as u8,
            subtype: bits(dw0, 7, 0) as u8,
            data0: le32(e, 4),
            data1: le32(e, 8),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `len`-byte image with `bytes` at each offset (the rest zero).
    fn image(len: usize, at: &[(usize, &[u8])]) -> Vec<u8> {
        let mut b = vec![0u8; len];
        for &(off, bytes) in at {
            b[off..off + bytes.len()].copy_from_slice(bytes);
        }
        b
    }

    /// `write` on a zeroed buffer of `img.len()` bytes gives `img`.
    fn pins(img: &[u8], write: impl Fn(&mut [u8])) {
        let mut b = vec![0u8; img.len()];
        write(&mut b);
        assert_eq!(b, img);
    }

    /// The values of the image tests (distinct bytes, so a wrong offset or width shows).
    const SGE_A: Sge = Sge {
        addr: 0x1122_3344_5566_7788,
        len: 0x99aa_bbcc,
        key: 0x0102_0304,
    };
    const SGE_A_IMG: [u8; 16] = [
        0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0xcc, 0xbb, 0xaa, 0x99, 0x04, 0x03, 0x02,
        0x01,
    ];

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
    fn eqe_images() {
        let ev = AeqEvent {
            ty: 3,
            subtype: 9,
            data0: 0x1234_5678,
            data1: 0x9abc_def0,
        };
        // dword 0: bit 31 owner, 23:16 type, 7:0 subtype; dword 1 data0; dword 2 data1.
        let img = [
            9, 0, 3, 0x80, 0x78, 0x56, 0x34, 0x12, 0xf0, 0xde, 0xbc, 0x9a, 0, 0, 0, 0,
        ];
        assert_eq!(Eqe::Aeq(ev).encode(true), img);
        assert_eq!(Eqe::decode_aeqe(&img), ev);
        assert!(Eqe::owner(&img));
        let mut off = img;
        off[3] = 0;
        assert_eq!(Eqe::Aeq(ev).encode(false), off);
        assert!(!Eqe::owner(&off));
        // CEQE: 19:0 CQN, bit 31 owner; CQN bits beyond 20 are not written.
        let ceqe = Eqe::Ceq { cqn: 0xf_2345 }.encode(true);
        assert_eq!(
            ceqe,
            [0x45, 0x23, 0x0f, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(Eqe::Ceq { cqn: 0x1f_2345 }.encode(true), ceqe);
        assert_eq!(Eqe::decode_ceqe(&ceqe), 0xf_2345);
        let mut cmdq = [0u8; EQE_SIZE];
        assert_eq!(Eqe::Cmdq.encode(false), cmdq);
        cmdq[3] = 0x80;
        assert_eq!(Eqe::Cmdq.encode(true), cmdq);
    }

    #[test]
    fn owner_bytes_are_written_last() {
        let entry: Vec<u8> = (0..32).collect();
        let mut writes = Vec::new();
        let r: Result<(), ()> = write_owner_last(&entry, |off, b| {
            writes.push((off, b.to_vec()));
            Ok(())
        });
        assert_eq!(r, Ok(()));
        assert_eq!(writes, [(4, entry[4..].to_vec()), (0, entry[..4].to_vec())]);
        let mut n = 0;
        assert_eq!(
            write_owner_last(&entry, |_, _| {
                n += 1;
                Err(())
            }),
            Err(())
        );
        assert_eq!(n, 1, "the owner bytes are not written after a failed body");
    }

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

    #[test]
    fn modify_qp_iwarp_image() {
        // Word @8: state 2 (RTS) in 31:24, CC 1 in 23:20, QPN 0x12345; cookie 0x0a0b0c0d;
        // 10.0.0.2 <- 10.0.0.1, ports 0x1234 -> 0x5678 (big-endian), SND.NXT, RCV.NXT.
        let img = image(
            40,
            &[
                (8, &[0x45, 0x23, 0x11, 0x02]),
                (12, &[0x0d, 0x0c, 0x0b, 0x0a]),
                (16, &[10, 0, 0, 2]),
                (20, &[10, 0, 0, 1]),
                (24, &[0x12, 0x34, 0x56, 0x78]),
                (28, &[0x44, 0x33, 0x22, 0x11]),
                (32, &[0x88, 0x77, 0x66, 0x55]),
            ],
        );
        let m = ModifyQpIwarp {
            qpn: 0x1_2345,
            state: IwarpState::Rts as u8,
            cc: 1,
        };
        let c = IwarpConnection {
            cookie: 0x0a0b_0c0d,
            dst_ip: [10, 0, 0, 2],
            src_ip: [10, 0, 0, 1],
            src_port: 0x1234,
            dst_port: 0x5678,
            snd_nxt: 0x1122_3344,
            rcv_nxt: 0x5566_7788,
        };
        pins(&img, |b| {
            m.write_fields(b);
            c.write_fields(b);
        });
        assert_eq!(ModifyQpIwarp::decode(&Request::new(&img)), Ok(m));
        assert_eq!(IwarpConnection::decode(&Request::new(&img)), Ok(c));
        // The stop form: only word @8 is read, so a command cut after it still decodes.
        assert_eq!(
            ModifyQpIwarp::decode(&Request::new(&img[..12])),
            Ok(m),
            "word @8 alone"
        );
        assert_eq!(
            IwarpConnection::decode(&Request::new(&img[..12])),
            Err(Status::Malformed)
        );
        for v in 0..=5 {
            assert_eq!(IwarpState::from_u8(v).map(|s| s as u8), Some(v));
        }
        assert_eq!(IwarpState::from_u8(6), None);
        assert_eq!(
            query_qp_resp0_iwarp(0x1ab_cdef, 0x12_3456, IwarpState::Closing),
            0x0003_1234_56ab_cdef
        );
    }

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
