// SPDX-License-Identifier: GPL-2.0

//! The hostile adapter: what the control language's `hostile` settings, event storms and
//! forged completions ([`crate::control`]) do to the device. Each does bounded work and leaves
//! the model's own state consistent; only what the guest is told changes.
//!
//! * QUERY_DEVICE replies through [`crate::caps::RawCaps::apply`] (`cmdq_engine`); the tables
//!   and limits keep the checked capabilities.
//! * ALLOC_DB asks [`Device::alloc_db_lie`] first: a lie allocates no page.
//! * DESTROY_QP and DESTROY_CQ call [`Device::before_destroy`] before they destroy anything.
//! * Forged data CQEs go through the data path's own CQE writer (owner bit, overflow, CQ
//!   events); a forged command CQE through the command queue's (`cmdq_engine`).

use core::fmt;

use super::{Device, AE_QP_FATAL};
use crate::cmdq::{Status, DB_CQ, DB_RQ, DB_SQ};
use crate::control::{AllocDbLie, ForgedCqes};
use crate::eq::PostError;
use crate::io::Io;
use crate::regs;
use crate::wire::AeqEvent;

/// AE type: CQ error.
const AE_CQ_ERROR: u8 = 3;

/// An object a destroy command is about to destroy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Doomed {
    /// QP with this QPN (DESTROY_QP).
    Qp(u32),
    /// CQ with this CQN (DESTROY_CQ).
    Cq(u32),
}

impl fmt::Display for Doomed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Doomed::Qp(n) => write!(f, "QP {n}"),
            Doomed::Cq(n) => write!(f, "CQ {n}"),
        }
    }
}

/// Posts up to `count` events with `post`, stopping at the first the EQ refuses (a full EQ
/// refuses every later one too). The reply: empty for one event, `posted=<n>` for more; an
/// error if not even the first went in.
pub(super) fn storm(
    verb: &str,
    count: u32,
    mut post: impl FnMut() -> Result<(), PostError>,
) -> Result<String, String> {
    let mut posted = 0u32;
    while posted < count {
        match post() {
            Ok(()) => posted += 1,
            Err(e) if posted == 0 => return Err(format!("{verb}: {e}")),
            Err(e) => {
                log::info!("{verb}: {posted} of {count} entries posted, then: {e}");
                break;
            }
        }
    }
    Ok(if count == 1 {
        String::new()
    } else {
        format!("posted={posted}")
    })
}

impl Device {
    /// What ALLOC_DB replies instead of pages it allocates, `[SQ, CDB, RDB]` (`None`: no lie,
    /// allocate). Roles `enable` does not name are 0, as for real pages; no role at all is
    /// [`Status::InvalidParam`], as for real pages.
    pub(super) fn alloc_db_lie(&self, enable: u32) -> Result<Option<[u16; 3]>, Status> {
        let shift = self.func.dbs.page_shift();
        let page = |offset: u64| u16::try_from(offset >> shift).unwrap_or(u16::MAX);
        let lie = match self.harness.hostile.alloc_db {
            AllocDbLie::Off => return Ok(None),
            AllocDbLie::Zero => [0; 3],
            AllocDbLie::Beyond => {
                let end = page(regs::BAR0_SIZE);
                [0, 1, 2].map(|i| end.saturating_add(i))
            }
            AllocDbLie::Kernel => [page(regs::SQDB_SHARED_PAGE); 3],
        };
        let roles = [DB_SQ, DB_CQ, DB_RQ];
        if roles.iter().all(|&r| enable & r == 0) {
            return Err(Status::InvalidParam);
        }
        let mut pages = [0; 3];
        for ((p, l), r) in pages.iter_mut().zip(lie).zip(roles) {
            if enable & r != 0 {
                *p = l;
            }
        }
        Ok(Some(pages))
    }

    /// Before DESTROY_QP or DESTROY_CQ destroys a live object: with `hostile aeq-on-destroy`,
    /// posts an AEQE naming it (QP fatal / CQ error), so the event reaches the driver for an
    /// object it is destroying.
    pub(super) fn before_destroy(&mut self, doomed: Doomed, io: &mut Io<'_>) {
        if !self.harness.hostile.aeq_on_destroy {
            return;
        }
        let rdma = &self.func.rdma;
        let (ty, n, live) = match doomed {
            Doomed::Qp(qpn) => (AE_QP_FATAL, qpn, rdma.qps.contains_key(&qpn)),
            Doomed::Cq(cqn) => (AE_CQ_ERROR, cqn, rdma.cqs.contains_key(&cqn)),
        };
        if !live {
            return;
        }
        let ev = AeqEvent {
            ty,
            subtype: 0,
            data0: n,
            data1: 0,
        };
        match self.post_aeqe(ev, io) {
            Ok(()) => {
                if self.warned.note() {
                    log::info!("{doomed}: AEQE type {ty} before its destruction (hostile)");
                }
            }
            Err(e) => {
                if self.warned.event_drop() {
                    log::warn!("{doomed}: AEQE type {ty} before its destruction dropped: {e}");
                }
            }
        }
    }

    /// `cqe ...`: writes the forged CQEs into their CQ the way completions are written (owner
    /// bit, overflow, the event of an armed CQ). The reply: `written=<n>`.
    pub(super) fn forge_cqes(&mut self, f: &ForgedCqes, io: &mut Io<'_>) -> Result<String, String> {
        let pi = |d: &Device| d.func.rdma.cqs.get(&f.cqn).map(|cq| cq.pi);
        let before = pi(self).ok_or_else(|| format!("cqe: no CQ {}", f.cqn))?;
        let mut dp = self.data_path();
        for _ in 0..f.count {
            dp.post_cqe(f.cqn, f.cqe, false, io);
        }
        let written = pi(self).unwrap_or(before).wrapping_sub(before);
        log::info!(
            "CQ {}: {written} of {} forged CQE(s) written (QPN {}, index {:#x}, status {})",
            f.cqn,
            f.count,
            f.cqe.qpn,
            f.cqe.wqe_index,
            f.cqe.status
        );
        Ok(format!("written={written}"))
    }
}
