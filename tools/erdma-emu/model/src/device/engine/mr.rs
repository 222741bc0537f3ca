// SPDX-License-Identifier: GPL-2.0

//! Key and memory-region access: the MR checks of local SGEs and remote keys (the status
//! codes of each side), gathering SGEs, fast-register and invalidate, and moving data across
//! translated guest-memory pieces.

use super::MAX_MESSAGE;
use crate::device::Device;
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

/// Reads the pieces into one buffer.
pub(super) fn read_pieces(
    mem: &dyn GuestMemory,
    pieces: &[Piece],
    out: &mut Vec<u8>,
) -> Result<(), ()> {
    for p in pieces {
        let n = usize::try_from(p.len).map_err(|_| ())?;
        let start = out.len();
        out.resize(start.checked_add(n).ok_or(())?, 0);
        mem.read(p.gpa, &mut out[start..]).map_err(|_| ())?;
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

impl Device {
    /// Checks `[addr, addr + len)` under `key` for PD `pdn` with `need` access bits, and
    /// translates it.
    pub(super) fn mr_access(
        &self,
        key: u32,
        pdn: u32,
        addr: u64,
        len: u64,
        need: u8,
        mem: &dyn GuestMemory,
    ) -> Result<Vec<Piece>, AccessErr> {
        let end = addr.checked_add(len).ok_or(AccessErr::Bounds)?;
        if key == self.config.caps.local_dma_lkey {
            return Ok(if len == 0 {
                Vec::new()
            } else {
                vec![Piece { gpa: addr, len }]
            });
        }
        let mr = self
            .func
            .rdma
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
                .mr_access(s.key, pdn, s.addr, u64::from(s.len), 0, mem)
                .map_err(AccessErr::local)?;
            read_pieces(mem, &pieces, &mut data).map_err(|()| wc::SEND_BOUNDS)?;
        }
        Ok(data)
    }

    /// A fast-register WQE (§5.4): makes an FRMR valid with a new key, IOVA, length, rights.
    pub(super) fn fast_register(&mut self, pdn: u32, wqe: &[u8]) -> Result<(), u8> {
        let f = FastRegSqe::decode(wqe).ok_or(wc::SEND_FORMAT)?;
        let iova = f.iova;
        let len = u64::from(f.length);
        let npages = u64::from(f.npages);
        let mr = self
            .func
            .rdma
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
    pub(super) fn invalidate(&mut self, stag: u32, pdn: u32, key_checked: bool) -> Result<(), u8> {
        let mr = self
            .func
            .rdma
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
