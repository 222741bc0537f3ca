// SPDX-License-Identifier: GPL-2.0

//! QP commands (§3.5): the MTT description of a queue buffer (also CREATE_CQ's), CREATE_QP,
//! the u32 argument of DESTROY_QP / DESTROY_CQ / QUERY_QP, MODIFY_QP in the RoCEv2 and the iWARP
//! layouts, QUERY_QP's reply and REFLUSH.

use super::{bits, put};
use crate::cmdq::{AddressVector, Request, Status};

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

/// The page shift of a kernel QP's queues (page-size code 8): each queue is one contiguous
/// buffer described as a single 1 MiB "page" (§3.5). A user's queues are pinned pages of
/// 4 KiB to 512 KiB, so this layout, with no extended doorbell page, marks a kernel QP.
pub const KERNEL_QUEUE_PAGE_SHIFT: u8 = 20;

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

/// Bit 30 of [`IwarpConnection::cookie`]: compat mode (erdma_rs_hw 7.3), the field names the
/// peer's QPN (bits 19:0) instead of a cookie from its MPA frame.
pub const COMPAT_COOKIE: u32 = 1 << 30;

/// The QPN bits of a compat-mode cookie.
pub const COMPAT_QPN_MASK: u32 = 0xf_ffff;

/// MODIFY_QP (RDMA/3), iWARP layout, words @12..@36: the connection handed over at RTS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IwarpConnection {
    /// The peer's cookie from its MPA frame (@12, host order): the cookie the peer's CREATE_QP
    /// returned.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::fixtures::{image, pins};

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
}
