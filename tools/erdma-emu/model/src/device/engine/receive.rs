// SPDX-License-Identifier: GPL-2.0

//! Receive WQEs (erdma_rs_hw 5.5) as the responder and UD use them: the RQE at a QP's
//! consumer index, checked, and the scatter of an incoming message into its buffer. Each gets
//! only the QP, the key checks and guest memory.

use super::mr::{write_pieces, Keys};
use crate::device::objects::{Qp, Wq};
use crate::io::GuestMemory;
use crate::wire::{access, wc, Rqe, Sge, RQE_SIZE};

impl Qp {
    /// The RQE at the RQ's consumer index. `Err(code)` for a format error: unreadable, or an
    /// index or QPN that is not this entry's.
    pub(super) fn rqe_at_ci(&self, mem: &dyn GuestMemory) -> Result<Rqe, u8> {
        let ci = self.rq.ci;
        let off = u64::from(u32::from(ci) & (self.rq.depth - 1)) * RQE_SIZE as u64;
        let mut b = [0u8; RQE_SIZE];
        if self.rq.buf.read(off, &mut b, mem).is_err() {
            return Err(wc::RECV_FORMAT);
        }
        let rqe = Rqe::decode(&b);
        if rqe.index != ci.wrapping_add(1) || rqe.qpn != self.qpn {
            return Err(wc::RECV_FORMAT);
        }
        Ok(rqe)
    }
}

impl Wq {
    /// Consumes the entry at the consumer index; returns its index.
    pub(super) fn consume(&mut self) -> u16 {
        let index = self.ci;
        self.ci = index.wrapping_add(1);
        index
    }
}

/// Writes `data` at byte `offset` of the buffer of receive SGE `sge` under PD `pdn` (a
/// message arrives a segment at a time). `Err(code)`: the status the RQE completes with (4 for
/// a message longer than the buffer, 3..6 for the SGE).
pub(super) fn scatter(
    keys: Keys<'_>,
    pdn: u32,
    sge: &Sge,
    offset: u64,
    data: &[u8],
    mem: &mut dyn GuestMemory,
) -> Result<(), u8> {
    if offset.saturating_add(data.len() as u64) > u64::from(sge.len) {
        return Err(wc::RECV_BOUNDS);
    }
    let pieces = keys
        .access(
            sge.key,
            pdn,
            sge.addr.wrapping_add(offset),
            data.len() as u64,
            access::LOCAL_WRITE,
            mem,
        )
        .map_err(|e| e.remote())?;
    write_pieces(mem, &pieces, data).map_err(|()| wc::RECV_BOUNDS)
}

#[cfg(test)]
mod tests {
    use super::super::mr::tests::{tables, LKEY};
    use super::*;
    use crate::device::objects::fixtures::memory;
    use crate::wire;

    /// Where [`Qp::for_test`]'s RQ lives.
    const RQ: u64 = 0x1_2000;

    #[test]
    fn rqes_are_checked_then_consumed_in_order() {
        let mut mem = memory();
        let mut qp = Qp::for_test(5);
        let sge = Sge {
            addr: 0x4000,
            len: 16,
            key: wire::stag(3, 1),
        };
        let rqe = |index, qpn| Rqe { index, qpn, sge };
        mem.write(RQ, &rqe(1, 5).encode()).unwrap();
        mem.write(RQ + RQE_SIZE as u64, &rqe(7, 5).encode())
            .unwrap();
        assert_eq!(qp.rqe_at_ci(&mem), Ok(rqe(1, 5)));
        assert_eq!(qp.rq.consume(), 0);
        assert_eq!(qp.rqe_at_ci(&mem), Err(wc::RECV_FORMAT), "index 7 at CI 1");
        mem.write(RQ + RQE_SIZE as u64, &rqe(2, 6).encode())
            .unwrap();
        assert_eq!(qp.rqe_at_ci(&mem), Err(wc::RECV_FORMAT), "another QP's");
        assert_eq!(qp.rq.consume(), 1);
        let unmapped = crate::testing::VecMemory::new(0, 0x10);
        assert_eq!(qp.rqe_at_ci(&unmapped), Err(wc::RECV_FORMAT));
    }

    #[test]
    fn scatter_checks_length_and_key() {
        let mut mem = memory();
        let t = tables(access::LOCAL_WRITE, &mem);
        let keys = Keys::new(&t, Some(LKEY));
        let sge = Sge {
            addr: 0x4000,
            len: 4,
            key: wire::stag(3, 1),
        };
        assert_eq!(scatter(keys, 1, &sge, 0, &[1, 2, 3, 4], &mut mem), Ok(()));
        assert_eq!(mem.bytes()[..4], [1, 2, 3, 4]);
        let long = scatter(keys, 1, &sge, 0, &[0; 5], &mut mem);
        assert_eq!(long, Err(wc::RECV_BOUNDS), "longer than the buffer");
        assert_eq!(scatter(keys, 2, &sge, 0, &[0], &mut mem), Err(wc::RECV_PD));
        let t = tables(access::REMOTE_READ, &mem);
        let keys = Keys::new(&t, Some(LKEY));
        assert_eq!(
            scatter(keys, 1, &sge, 0, &[0], &mut mem),
            Err(wc::RECV_ACCESS)
        );
    }
}
