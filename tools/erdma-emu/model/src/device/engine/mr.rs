// SPDX-License-Identifier: GPL-2.0

//! Key and memory-region access: the MR checks of local SGEs and remote keys (the status
//! codes of each side), gathering SGEs, fast-register and invalidate, and moving data across
//! translated guest-memory pieces.
//!
//! The checks get only the MR table and, for the local side of a kernel QP, the function's
//! local DMA lkey ([`Keys`], a view the data path lends): the lkey names raw guest-physical
//! memory, so it is never a remote key and never a key of a user's QP (see
//! [`crate::device::objects::Qp::kernel`]). Fast-register and invalidate change the MR table
//! ([`Rdma`]) and nothing else.

use std::collections::BTreeMap;

use super::{DataPath, MAX_MESSAGE};
use crate::device::objects::{Mr, Rdma};
use crate::io::GuestMemory;
use crate::mtt::{self, Mtt, Piece, Xlate};
use crate::wire::{
    self, access, wc, FastRegSqe, MrType, Sge, FAST_REG_MTT_BUFFER, FAST_REG_MTT_INLINE,
};

/// Why an MR check failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AccessErr {
    Stag,
    Bounds,
    Rights,
    Pd,
}

impl AccessErr {
    pub(super) fn local(self) -> u8 {
        match self {
            AccessErr::Stag => wc::SEND_STAG,
            AccessErr::Bounds => wc::SEND_BOUNDS,
            AccessErr::Rights => wc::SEND_ACCESS,
            AccessErr::Pd => wc::SEND_PD,
        }
    }

    pub(super) fn remote(self) -> u8 {
        match self {
            AccessErr::Stag => wc::RECV_STAG,
            AccessErr::Bounds => wc::RECV_BOUNDS,
            AccessErr::Rights => wc::RECV_ACCESS,
            AccessErr::Pd => wc::RECV_PD,
        }
    }
}

/// Bytes [`read_pieces`] reads at a time: the buffer grows only as far as guest memory backed
/// what was read before, so a range beyond guest memory (a 1 GiB SGE of a guest with less)
/// costs at most this much before it fails.
const READ_CHUNK: u64 = 64 << 10;

/// Reads the pieces into one buffer.
pub(super) fn read_pieces(
    mem: &dyn GuestMemory,
    pieces: &[Piece],
    out: &mut Vec<u8>,
) -> Result<(), ()> {
    for p in pieces {
        let (mut gpa, mut left) = (p.gpa, p.len);
        while left > 0 {
            let n = usize::try_from(left.min(READ_CHUNK)).map_err(|_| ())?;
            let start = out.len();
            out.resize(start.checked_add(n).ok_or(())?, 0);
            mem.read(gpa, &mut out[start..]).map_err(|_| ())?;
            // Only read again while bytes are left (mem.read checks its own range).
            gpa = gpa.wrapping_add(n as u64);
            left -= n as u64;
        }
    }
    Ok(())
}

/// Writes `data` across the pieces (which cover at least its length).
pub(super) fn write_pieces(
    mem: &mut dyn GuestMemory,
    pieces: &[Piece],
    data: &[u8],
) -> Result<(), ()> {
    let mut done = 0usize;
    for p in pieces {
        if done >= data.len() {
            break;
        }
        let n = usize::try_from(p.len)
            .unwrap_or(usize::MAX)
            .min(data.len() - done);
        mem.write(p.gpa, &data[done..done + n]).map_err(|_| ())?;
        done += n;
    }
    if done < data.len() {
        return Err(());
    }
    Ok(())
}

/// What keys are checked against: the MR table (the MPT) and, where it is valid, the
/// function's local DMA lkey.
#[derive(Clone, Copy)]
pub(super) struct Keys<'a> {
    mrs: &'a BTreeMap<u32, Mr>,
    local_dma_lkey: Option<u32>,
}

impl DataPath<'_> {
    /// The keys of QP `qpn`'s own SGEs (its gather lists, read and atomic sinks and receive
    /// buffers): the MR table, and the local DMA lkey if `qpn` is a kernel QP.
    pub(super) fn local_keys(&self, qpn: u32) -> Keys<'_> {
        let kernel = self.rdma.qps.get(&qpn).is_some_and(|q| q.kernel);
        Keys::new(self.rdma, kernel.then_some(self.caps.local_dma_lkey))
    }

    /// The keys a peer's request may name (rkeys): the MR table alone.
    pub(super) fn remote_keys(&self) -> Keys<'_> {
        Keys::new(self.rdma, None)
    }
}

impl<'a> Keys<'a> {
    /// Keys of the MRs in `rdma`, and `local_dma_lkey` (physical addresses, unchecked) if given.
    pub(super) fn new(rdma: &'a Rdma, local_dma_lkey: Option<u32>) -> Self {
        Keys {
            mrs: &rdma.mrs,
            local_dma_lkey,
        }
    }
}

impl Keys<'_> {
    /// Checks `[addr, addr + len)` under `key` for PD `pdn` with `need` access bits, and
    /// translates it.
    pub(super) fn access(
        &self,
        key: u32,
        pdn: u32,
        addr: u64,
        len: u64,
        need: u8,
        mem: &dyn GuestMemory,
    ) -> Result<Vec<Piece>, AccessErr> {
        let end = addr.checked_add(len).ok_or(AccessErr::Bounds)?;
        if Some(key) == self.local_dma_lkey {
            return Ok(if len == 0 {
                Vec::new()
            } else {
                vec![Piece { gpa: addr, len }]
            });
        }
        let mr = self
            .mrs
            .get(&wire::stag_index(key))
            .ok_or(AccessErr::Stag)?;
        if mr.key != wire::stag_key(key) || !mr.valid {
            return Err(AccessErr::Stag);
        }
        if mr.pdn != pdn {
            return Err(AccessErr::Pd);
        }
        if need & !mr.access & !access::LOCAL_READ != 0 {
            return Err(AccessErr::Rights);
        }
        if mr.mr_type == MrType::Dma {
            return Ok(if len == 0 {
                Vec::new()
            } else {
                vec![Piece { gpa: addr, len }]
            });
        }
        let mr_end = mr.va.checked_add(mr.len).ok_or(AccessErr::Bounds)?;
        if addr < mr.va || end > mr_end {
            return Err(AccessErr::Bounds);
        }
        if len == 0 {
            return Ok(Vec::new());
        }
        mtt::mr_pieces(&mr.mtt, mr.va, mr.page_shift, addr, len, mem).map_err(|e| match e {
            Xlate::Bounds | Xlate::Dma(_) => AccessErr::Bounds,
        })
    }

    /// Gathers bytes `[offset, offset + n)` of the payload of local SGEs (status on failure):
    /// only the SGEs (and pages) that range covers are checked and read.
    pub(super) fn gather_range(
        &self,
        pdn: u32,
        sges: &[Sge],
        offset: u64,
        n: u64,
        mem: &dyn GuestMemory,
    ) -> Result<Vec<u8>, u8> {
        let mut data = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
        let (mut skip, mut left) = (offset, n);
        for s in sges.iter().filter(|s| s.len > 0) {
            if left == 0 {
                break;
            }
            let len = u64::from(s.len);
            if skip >= len {
                skip -= len;
                continue;
            }
            let take = (len - skip).min(left);
            let pieces = self
                .access(s.key, pdn, s.addr.wrapping_add(skip), take, 0, mem)
                .map_err(AccessErr::local)?;
            read_pieces(mem, &pieces, &mut data).map_err(|()| wc::SEND_BOUNDS)?;
            skip = 0;
            left -= take;
        }
        Ok(data)
    }

    /// Gathers the payload of local SGEs (status on failure).
    pub(super) fn gather(
        &self,
        pdn: u32,
        sges: &[Sge],
        mem: &dyn GuestMemory,
    ) -> Result<Vec<u8>, u8> {
        let total: u64 = sges.iter().map(|s| u64::from(s.len)).sum();
        if total > MAX_MESSAGE {
            return Err(wc::GENERAL);
        }
        let mut data = Vec::with_capacity(usize::try_from(total).unwrap_or(0).min(1 << 20));
        for s in sges.iter().filter(|s| s.len > 0) {
            let pieces = self
                .access(s.key, pdn, s.addr, u64::from(s.len), 0, mem)
                .map_err(AccessErr::local)?;
            read_pieces(mem, &pieces, &mut data).map_err(|()| wc::SEND_BOUNDS)?;
        }
        Ok(data)
    }
}

impl Rdma {
    /// A fast-register WQE (§5.4): makes an FRMR valid with a new key, IOVA, length, rights.
    pub(in crate::device) fn fast_register(&mut self, pdn: u32, wqe: &[u8]) -> Result<(), u8> {
        let f = FastRegSqe::decode(wqe).ok_or(wc::SEND_FORMAT)?;
        let iova = f.iova;
        let len = u64::from(f.length);
        let npages = u64::from(f.npages);
        let mr = self
            .mrs
            .get_mut(&wire::stag_index(f.stag))
            .ok_or(wc::SEND_STAG)?;
        let Some((buf, capacity)) = mr.frmr else {
            return Err(wc::SEND_STAG);
        };
        if mr.valid {
            return Err(wc::SEND_STAG);
        }
        if mr.pdn != pdn {
            return Err(wc::SEND_PD);
        }
        if npages > capacity || iova.checked_add(len).is_none() {
            return Err(wc::SEND_FORMAT);
        }
        let s = mr.page_shift;
        let need = if len == 0 {
            0
        } else {
            ((iova + len - 1) >> s) - (iova >> s) + 1
        };
        if need > npages {
            return Err(wc::SEND_FORMAT);
        }
        mr.mtt = match f.mtt_type {
            FAST_REG_MTT_INLINE => Mtt::Direct(f.inline_pages(wqe).ok_or(wc::SEND_FORMAT)?),
            FAST_REG_MTT_BUFFER => Mtt::Indirect {
                levels: 1,
                root: buf,
                count: npages,
                page_shift: 12,
            },
            _ => return Err(wc::SEND_FORMAT),
        };
        mr.key = wire::stag_key(f.stag);
        mr.va = iova;
        mr.len = len;
        mr.access = f.access | access::LOCAL_READ;
        mr.valid = true;
        Ok(())
    }

    /// Invalidates MR `stag` (LOCAL_INV, READ_WITH_INV, SEND_WITH_INV at the responder). Only
    /// if `key_checked` must the STag's key be the region's: a READ_WITH_INV names its sink by
    /// the index alone, as the kernel's rdma_rw posts it (on iWARP, with the key the region
    /// had before the REG_MR that precedes the READ gave it the next one).
    pub(in crate::device) fn invalidate(
        &mut self,
        stag: u32,
        pdn: u32,
        key_checked: bool,
    ) -> Result<(), u8> {
        let mr = self
            .mrs
            .get_mut(&wire::stag_index(stag))
            .ok_or(wc::SEND_STAG)?;
        if (key_checked && mr.key != wire::stag_key(stag)) || mr.mr_type == MrType::Dma {
            return Err(wc::SEND_STAG);
        }
        if mr.pdn != pdn {
            return Err(wc::SEND_PD);
        }
        mr.valid = false;
        Ok(())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::caps::Caps;
    use crate::wire::RegMr;

    /// The local DMA lkey of the tests.
    pub(in crate::device::engine) const LKEY: u32 = 0xf000_0000;

    /// MR 3 (key 1) of PD 1: `va` 0x4000..0x5000 at guest-physical 0x1_0000, with `rights`;
    /// the tables also hold a DMA MR 4 (key 2) of PD 2.
    pub(in crate::device::engine) fn tables(rights: u8, mem: &dyn GuestMemory) -> Rdma {
        let mut t = Rdma::default();
        let mr = RegMr {
            valid: true,
            version: 1,
            key: 1,
            index: 3,
            pdn: 1,
            mr_type: 0,
            access: rights,
            va: 0x4000,
            len: 0x1000,
            page_shift: 12,
            mtt_page_code: 0,
            level: 0,
            count: 1,
            entries: [0x1_0000, 0, 0, 0],
        };
        let caps = Caps::default();
        assert_eq!(t.reg_mr(mr, &caps, mem), Ok((0, 0)));
        let dma = RegMr {
            key: 2,
            index: 4,
            pdn: 2,
            mr_type: 2,
            ..mr
        };
        assert_eq!(t.reg_mr(dma, &caps, mem), Ok((0, 0)));
        t
    }

    #[test]
    fn keys_check_key_pd_rights_and_bounds() {
        let mem = crate::testing::VecMemory::new(0x1_0000, 0x1000);
        let t = tables(access::REMOTE_READ, &mem);
        let keys = Keys::new(&t, Some(LKEY));
        let stag = wire::stag(3, 1);
        let ok = keys.access(stag, 1, 0x4ff0, 0x10, access::REMOTE_READ, &mem);
        assert_eq!(ok.map(|p| p[0].gpa), Ok(0x1_0ff0));
        let err = |key, pdn, addr, len, need| keys.access(key, pdn, addr, len, need, &mem).err();
        assert_eq!(
            err(wire::stag(3, 9), 1, 0x4000, 1, 0),
            Some(AccessErr::Stag)
        );
        assert_eq!(
            err(wire::stag(5, 1), 1, 0x4000, 1, 0),
            Some(AccessErr::Stag)
        );
        assert_eq!(err(stag, 2, 0x4000, 1, 0), Some(AccessErr::Pd));
        let write = access::REMOTE_WRITE;
        assert_eq!(err(stag, 1, 0x4000, 1, write), Some(AccessErr::Rights));
        assert_eq!(err(stag, 1, 0x4ff0, 0x11, 0), Some(AccessErr::Bounds));
        assert_eq!(err(stag, 1, u64::MAX, 2, 0), Some(AccessErr::Bounds));
        // The local DMA lkey and DMA MRs take physical addresses.
        let phys = keys.access(LKEY, 7, 0x9000, 4, write, &mem);
        assert_eq!(phys.map(|p| (p[0].gpa, p[0].len)), Ok((0x9000, 4)));
        let dma = keys.access(wire::stag(4, 2), 2, 0x9000, 4, 0, &mem);
        assert_eq!(dma.map(|p| p[0].gpa), Ok(0x9000));
        // Without it (a user's QP, a peer's request) the lkey is an unknown STag.
        let user = Keys::new(&t, None);
        let no = user.access(LKEY, 7, 0x9000, 4, 0, &mem);
        assert_eq!(no.err(), Some(AccessErr::Stag));
    }
}
