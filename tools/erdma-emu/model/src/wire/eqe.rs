// SPDX-License-Identifier: GPL-2.0

//! Owner bits (§4.1, §5.6) and event queue entries (§4.2).

use super::{bits, le32};

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
}
