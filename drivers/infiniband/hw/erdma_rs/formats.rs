// SPDX-License-Identifier: GPL-2.0

//! Wire formats of the adapter's queues: send and receive queue entries, completion and event
//! queue entries, and doorbell values (erdma_rs_hw 3.3, 4, 5). Each is declared once here, with the
//! fields and widths of erdma_rs_hw, and the driver builds and decodes them only through these
//! declarations. The command queue's commands are in [`crate::commands`].
//!
//! Entries are `#[repr(C)]` structs at the byte offsets of erdma_rs_hw; packed words are
//! [`kernel::bitfield!`]s. Everything is little-endian except the words of completion entries,
//! which are big-endian (erdma_rs_hw 5.6); the driver runs on little-endian CPUs only (`64BIT`
//! x86/arm64 hosts of the adapter), so little-endian words are native integers here.

use kernel::{
    bitfield,
    num::Bounded,
    prelude::*,
    rdma::{
        AccessFlag,
        AccessFlags, //
    },
};
use zerocopy::byteorder::big_endian::{
    U16 as Be16,
    U32 as Be32, //
};

/// `value` as a field of `N` bits, keeping its low bits: for values that fit by construction
/// and for counters that wrap at the field's width.
#[inline(always)]
pub(crate) fn low32<const N: u32>(value: u32) -> Bounded<u32, N> {
    Bounded::from_expr(value & (u32::MAX >> (32 - N)))
}

/// `value` as a field of `N` bits, keeping its low bits (see [`low32`]).
#[inline(always)]
pub(crate) fn low64<const N: u32>(value: u64) -> Bounded<u64, N> {
    Bounded::from_expr(value & (u64::MAX >> (64 - N)))
}

bitfield! {
    /// Access rights of a memory region, as REG_MR and the fast-registration WQE carry them
    /// (erdma_rs_hw 3.5, bits 5:1 of their access words).
    pub(crate) struct MrAccess(u32) {
        /// Remote writes.
        4:4 remote_write => bool;
        /// Remote reads.
        3:3 remote_read => bool;
        /// Local writes.
        2:2 local_write => bool;
        /// Local reads; always granted.
        1:1 local_read => bool;
        /// Remote atomics.
        0:0 remote_atomic => bool;
    }
}

impl MrAccess {
    /// The rights of verbs access flags; local reads are always granted.
    pub(crate) fn from_verbs(flags: AccessFlags) -> Self {
        Self::zeroed()
            .with_local_read(true)
            .with_local_write(flags.contains(AccessFlag::LocalWrite))
            .with_remote_read(flags.contains(AccessFlag::RemoteRead))
            .with_remote_write(flags.contains(AccessFlag::RemoteWrite))
            .with_remote_atomic(flags.contains(AccessFlag::RemoteAtomic))
    }

    /// Compat mode's rights (erdma_rs_hw 7.3): a locally writable region is also remotely
    /// writable, as the sink of an RDMA Read is on iWARP (the peer writes the response into
    /// it), and applications written for RoCE register their sinks with local write only.
    pub(crate) fn read_sink(self) -> Self {
        let w = self.local_write();
        self.with_remote_write(self.remote_write() || w)
    }
}

impl From<Bounded<u32, 5>> for MrAccess {
    fn from(value: Bounded<u32, 5>) -> Self {
        Self::from_raw(value.get())
    }
}

impl From<MrAccess> for Bounded<u32, 5> {
    fn from(value: MrAccess) -> Self {
        low32(value.into_raw())
    }
}

bitfield! {
    /// A memory key (STag): lkey and rkey of a region (erdma_rs_hw 6).
    pub(crate) struct Stag(u32) {
        /// The MPT index.
        31:8 index;
        /// The key a fast-registration WQE may change.
        7:0 key;
    }
}

bitfield! {
    /// The first 8 bytes of a send-queue entry (erdma_rs_hw 5.2), written last.
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct SqeHeader(u64) {
        /// Number of SGEs, or of inline bytes with `inline`.
        63:56 sgl_len;
        /// Basic blocks of the entry, less one.
        54:52 wqebbs_minus_one;
        /// The queue pair.
        51:32 qpn;
        /// The opcode ([`crate::consts::opcode`]).
        31:27 opcode;
        /// The entry is also pushed through the doorbell (unused by the driver).
        26:26 direct => bool;
        /// The payload is inline after the fixed part.
        25:25 inline => bool;
        /// Wait for earlier reads and atomics.
        24:24 fence => bool;
        /// Solicited event.
        23:23 solicited => bool;
        /// Generate a completion.
        22:22 signaled => bool;
        /// The producer index after this entry, in basic blocks.
        15:0 wqebb_index;
    }
}

/// A scatter/gather entry of a send-queue entry (erdma_rs_hw 5.4).
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sge {
    /// @0: the address.
    pub(crate) addr: u64,
    /// @8: the length in bytes.
    pub(crate) length: u32,
    /// @12: the key of the region.
    pub(crate) key: u32,
}

/// WRITE and WRITE_WITH_IMM: 32 bytes, then SGEs or inline data (erdma_rs_hw 5.4).
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct WriteSqe {
    /// @0: the header.
    pub(crate) hdr: SqeHeader,
    /// @8: the immediate, as the verb passes it (network order in memory).
    pub(crate) imm: u32,
    /// @12: the payload length.
    pub(crate) length: u32,
    /// @16: the remote key.
    pub(crate) rkey: u32,
    /// @20: the remote address, low half.
    pub(crate) raddr_lo: u32,
    /// @24: the remote address, high half.
    pub(crate) raddr_hi: u32,
    pub(crate) reserved: u32,
}

/// SEND, SEND_WITH_IMM and SEND_WITH_INV on an RC QP: 16 bytes, then SGEs or inline data
/// (erdma_rs_hw 5.4).
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct SendSqe {
    /// @0: the header.
    pub(crate) hdr: SqeHeader,
    /// @8: the immediate (network order in memory) or the key to invalidate.
    pub(crate) imm_or_inv: u32,
    /// @12: the payload length.
    pub(crate) length: u32,
}

/// SEND and SEND_WITH_IMM on a UD or GSI QP: 32 bytes, then SGEs or inline data
/// (erdma_rs_hw 5.4).
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct UdSendSqe {
    /// @0: the header.
    pub(crate) hdr: SqeHeader,
    /// @8: the immediate (network order in memory).
    pub(crate) imm: u32,
    /// @12: the payload length.
    pub(crate) length: u32,
    /// @16: the Q_Key.
    pub(crate) qkey: u32,
    /// @20: the destination QPN.
    pub(crate) dst_qpn: u32,
    /// @24: the address handle.
    pub(crate) ahn: u32,
    pub(crate) reserved: u32,
}

/// READ and READ_WITH_INV: 48 bytes, one local SGE (erdma_rs_hw 5.4).
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct ReadSqe {
    /// @0: the header (its SGL length stays 0).
    pub(crate) hdr: SqeHeader,
    /// @8: the key to invalidate (READ_WITH_INV).
    pub(crate) inv_key: u32,
    /// @12: the length.
    pub(crate) length: u32,
    /// @16: the key of the local sink.
    pub(crate) sink_lkey: u32,
    /// @20: the sink address, low half.
    pub(crate) sink_addr_lo: u32,
    /// @24: the sink address, high half.
    pub(crate) sink_addr_hi: u32,
    pub(crate) reserved: u32,
    /// @32: the remote source.
    pub(crate) remote: Sge,
}

/// ATOMIC_CAS and ATOMIC_FAA: 64 bytes (erdma_rs_hw 5.4).
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct AtomicSqe {
    /// @0: the header.
    pub(crate) hdr: SqeHeader,
    pub(crate) reserved: u64,
    /// @16: the swap value (CAS) or the value to add (FAA).
    pub(crate) swap_or_add: u64,
    /// @24: the compare value (CAS).
    pub(crate) compare: u64,
    /// @32: the remote operand.
    pub(crate) remote: Sge,
    /// @48: where the original value is returned.
    pub(crate) local: Sge,
}

bitfield! {
    /// The attribute word of a fast-registration WQE (erdma_rs_hw 5.4).
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct RegMrSqeAttrs(u32) {
        /// Number of pages.
        31:12 npages;
        /// Where the page list is ([`crate::consts::frmr_mtt`]).
        7:6 mtt_type;
        /// The access rights.
        5:1 access => MrAccess;
    }
}

/// REG_MR (fast registration): 32 bytes, then up to four inline page addresses
/// (erdma_rs_hw 5.4).
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct RegMrSqe {
    /// @0: the header.
    pub(crate) hdr: SqeHeader,
    /// @8: the region's IOVA.
    pub(crate) iova: u64,
    /// @16: its length, low 32 bits.
    pub(crate) length: u32,
    /// @20: its new key.
    pub(crate) stag: u32,
    /// @24: the attributes.
    pub(crate) attrs: RegMrSqeAttrs,
    pub(crate) reserved: u32,
    /// @32: the page addresses, when inline.
    pub(crate) pages: [u64; 4],
}

/// LOCAL_INV: one basic block (erdma_rs_hw 5.4).
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct LocalInvSqe {
    /// @0: the header.
    pub(crate) hdr: SqeHeader,
    pub(crate) reserved0: [u32; 3],
    /// @20: the key to invalidate.
    pub(crate) key: u32,
    pub(crate) reserved1: [u32; 2],
}

bitfield! {
    /// An SQ doorbell value (erdma_rs_hw 5.8).
    pub(crate) struct SqDoorbell(u64) {
        /// The queue pair.
        51:32 qpn;
        /// The new producer index, in basic blocks.
        15:0 pi;
    }
}

bitfield! {
    /// An RQ doorbell value: also the first 8 bytes of a receive-queue entry (erdma_rs_hw 5.5).
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct RqDoorbell(u64) {
        /// The queue pair.
        63:32 qpn;
        /// The producer index after this entry.
        15:0 pi;
    }
}

/// A receive-queue entry (erdma_rs_hw 5.5).
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct Rqe {
    /// @0: what the doorbell also carries; written last.
    pub(crate) head: RqDoorbell,
    pub(crate) reserved: u64,
    /// @16: the buffer (length 0 for a request without one).
    pub(crate) sge: Sge,
}

bitfield! {
    /// A CQ doorbell value (erdma_rs_hw 4.4), also used to arm the command queue's completions.
    pub(crate) struct CqDoorbell(u64) {
        /// Arm sequence number.
        63:56 seq;
        /// CQ number (0 for the command queue).
        55:32 cqn;
        /// Request a completion event.
        31:31 arm => bool;
        /// Only for solicited (or error) completions.
        30:30 solicited => bool;
        /// Number of completion events consumed, modulo 4.
        29:28 cmdsn;
        /// The driver's consumer index.
        23:0 ci;
    }
}

bitfield! {
    /// An event-queue doorbell value (erdma_rs_hw 4.1).
    pub(crate) struct EqDoorbell(u64) {
        /// Re-arm: raise the queue's interrupt for the next event.
        31:31 arm => bool;
        /// The driver's consumer index.
        23:0 ci;
    }
}

bitfield! {
    /// The command queue's submission doorbell value (erdma_rs_hw 3.2).
    pub(crate) struct CmdqSqDoorbell(u64) {
        /// The new producer index, in basic blocks.
        15:0 pi;
    }
}

bitfield! {
    /// The first word of a completion entry, of the command queue's too (erdma_rs_hw 3.3, 5.6).
    pub(crate) struct CqeHeader(u32) {
        /// The owner bit.
        31:31 owner => bool;
        /// The opcode ([`crate::consts::opcode`]).
        23:16 opcode;
        /// Which queue completed ([`crate::consts::cqe_queue`]).
        15:8 queue;
        /// The status (erdma_rs_hw 5.7), 0 for success.
        7:0 status;
    }
}

bitfield! {
    /// The last word of a receive completion of a UD or GSI QP (erdma_rs_hw 5.6).
    pub(crate) struct CqeUdInfo(u32) {
        /// The datagram came over IPv6 (else IPv4).
        31:31 ipv6 => bool;
        /// The service level.
        27:20 sl;
        /// The sender's QPN.
        19:0 src_qpn;
    }
}

/// A completion entry: big-endian words, except the immediate (erdma_rs_hw 5.6).
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct Cqe {
    /// @0: a [`CqeHeader`].
    pub(crate) hdr: Be32,
    /// @4: the index of the completed entry: the first basic block of a send-queue entry, the
    /// position of a receive-queue entry.
    pub(crate) wqe_index: Be32,
    /// @8: the queue pair.
    pub(crate) qpn: Be32,
    /// @12: the immediate, the big-endian wire value stored as a little-endian word; or the
    /// invalidated key, big-endian.
    pub(crate) imm_or_inv: [u8; 4],
    /// @16: the byte count.
    pub(crate) byte_len: Be32,
    pub(crate) reserved: [u32; 2],
    /// @28: source QPN, SL and network type of UD completions.
    pub(crate) ud_info: Be32,
}

impl Cqe {
    /// The first word.
    pub(crate) fn header(&self) -> CqeHeader {
        CqeHeader::from_raw(self.hdr.get())
    }

    /// The immediate, as the verbs pass it (network order in memory).
    pub(crate) fn imm(&self) -> u32 {
        u32::from_ne_bytes(u32::from_le_bytes(self.imm_or_inv).to_be_bytes())
    }

    /// The invalidated key.
    pub(crate) fn invalidated_key(&self) -> u32 {
        u32::from_be_bytes(self.imm_or_inv)
    }

    /// The datagram word (receive completions of UD and GSI QPs).
    pub(crate) fn ud_info(&self) -> CqeUdInfo {
        CqeUdInfo::from_raw(self.ud_info.get())
    }
}

/// A completion entry of the command queue: big-endian words (erdma_rs_hw 3.3).
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct CmdqCqe {
    /// @0: a [`CqeHeader`].
    pub(crate) hdr: Be32,
    /// @4: the submission-ring index of the command's first basic block.
    pub(crate) sq_index: Be32,
    /// @8: the response, four words.
    pub(crate) resp: [Be32; 4],
    pub(crate) reserved: [u32; 2],
}

impl CmdqCqe {
    /// The first word.
    pub(crate) fn header(&self) -> CqeHeader {
        CqeHeader::from_raw(self.hdr.get())
    }

    /// The two 64-bit response words: each is two of the words, low one first.
    pub(crate) fn response(&self) -> [u64; 2] {
        let w = self.resp.map(|w| u64::from(w.get()));
        [w[0] | (w[1] << 32), w[2] | (w[3] << 32)]
    }
}

bitfield! {
    /// The first word of every event-queue entry (erdma_rs_hw 4.1).
    pub(crate) struct EqeWord0(u32) {
        /// The owner bit.
        31:31 owner => bool;
    }
}

bitfield! {
    /// A completion event: the first 8 bytes of a CEQ entry (erdma_rs_hw 4.2).
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct Ceqe(u64) {
        /// Unused by the driver.
        63:63 db => bool;
        /// Unused by the driver.
        55:32 pi;
        /// The owner bit.
        31:31 owner => bool;
        /// The completion queue.
        19:0 cqn;
    }
}

/// The kinds of asynchronous events (erdma_rs_hw 4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AsyncEvent {
    /// A QP failed.
    QpFatal,
    /// A QP's receive queue failed.
    QpRqError,
    /// An access error on a QP.
    QpAccessError,
    /// A CQ failed.
    CqError,
    /// Another error on a QP.
    QpOther,
}

impl TryFrom<Bounded<u32, 8>> for AsyncEvent {
    /// The unknown kind.
    type Error = u32;

    fn try_from(value: Bounded<u32, 8>) -> Result<Self, u32> {
        match value.get() {
            0 => Ok(Self::QpFatal),
            1 => Ok(Self::QpRqError),
            2 => Ok(Self::QpAccessError),
            3 => Ok(Self::CqError),
            4 => Ok(Self::QpOther),
            n => Err(n),
        }
    }
}

impl From<AsyncEvent> for Bounded<u32, 8> {
    fn from(value: AsyncEvent) -> Self {
        let n: u8 = match value {
            AsyncEvent::QpFatal => 0,
            AsyncEvent::QpRqError => 1,
            AsyncEvent::QpAccessError => 2,
            AsyncEvent::CqError => 3,
            AsyncEvent::QpOther => 4,
        };
        n.into()
    }
}

bitfield! {
    /// The first word of an AEQ entry (erdma_rs_hw 4.2).
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct AeqeHeader(u32) {
        /// The owner bit.
        31:31 owner => bool;
        /// What happened.
        23:16 event ?=> AsyncEvent;
        /// Unused by the driver.
        7:0 subtype;
    }
}

/// An asynchronous event (erdma_rs_hw 4.2).
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct Aeqe {
    /// @0: what happened.
    pub(crate) hdr: AeqeHeader,
    /// @4: the QPN or CQN it happened to.
    pub(crate) object: u32,
    /// @8: unused by the driver.
    pub(crate) data1: u32,
    pub(crate) reserved: u32,
}

#[kunit_tests(erdma_rs_formats)]
mod tests {
    use super::*;

    /// `bytes` at offset `at` of `image`.
    fn at<'a>(image: &'a [u8], at: usize, len: usize) -> &'a [u8] {
        &image[at..at + len]
    }

    #[test]
    fn sqe_header_image() {
        // erdma_rs_hw 5.2: index 15:0, CE 22, SE 23, FENCE 24, INLINE 25, opcode 31:27,
        // QPN 51:32, WQEBBs-1 54:52, SGL length 63:56.
        let h = SqeHeader::zeroed()
            .with_wqebb_index(0x1234u16)
            .with_signaled(true)
            .with_solicited(true)
            .with_fence(true)
            .with_inline(true)
            .with_opcode(low64(9))
            .with_qpn(low64(0xabcde))
            .with_wqebbs_minus_one(low64(3))
            .with_sgl_len(0x60u8);
        assert_eq!(
            h.as_bytes(),
            &[0x34, 0x12, 0xc0, 0x4b, 0xde, 0xbc, 0x3a, 0x60]
        );
        let d = SqeHeader::read_from_bytes(&[0, 0, 0, 0x08, 0x07, 0, 0x10, 0x02][..]).ok();
        let d = d.map(|d| (d.opcode().get(), d.qpn().get(), d.wqebbs_minus_one().get()));
        assert_eq!(d, Some((1, 7, 1)));
        assert!(!SqeHeader::from_raw(0x0400_0000).inline());
        assert!(SqeHeader::from_raw(0x0400_0000).direct());
    }

    #[test]
    fn write_and_send_images() {
        let w = WriteSqe {
            hdr: SqeHeader::zeroed(),
            imm: u32::from_ne_bytes([0x11, 0x22, 0x33, 0x44]),
            length: 0x100,
            rkey: 0xaabb_ccdd,
            raddr_lo: 0x2345_6789,
            raddr_hi: 0x1,
            reserved: 0,
        };
        let b = w.as_bytes();
        assert_eq!(b.len(), 32);
        assert_eq!(at(b, 8, 4), &[0x11, 0x22, 0x33, 0x44]);
        assert_eq!(at(b, 12, 4), &[0, 1, 0, 0]);
        assert_eq!(at(b, 16, 4), &[0xdd, 0xcc, 0xbb, 0xaa]);
        assert_eq!(at(b, 20, 8), &[0x89, 0x67, 0x45, 0x23, 1, 0, 0, 0]);
        let s = SendSqe {
            hdr: SqeHeader::zeroed(),
            imm_or_inv: 0x0102_0304,
            length: 5,
        };
        assert_eq!(s.as_bytes()[8..], [4, 3, 2, 1, 5, 0, 0, 0]);
        let sge = Sge {
            addr: 0x0807_0605_0403_0201,
            length: 0x10,
            key: 0x20,
        };
        assert_eq!(
            sge.as_bytes(),
            &[1, 2, 3, 4, 5, 6, 7, 8, 0x10, 0, 0, 0, 0x20, 0, 0, 0]
        );
    }

    #[test]
    fn ud_send_image_and_ud_cqe_word() {
        let u = UdSendSqe {
            hdr: SqeHeader::zeroed(),
            imm: u32::from_ne_bytes([1, 2, 3, 4]),
            length: 0x100,
            qkey: 0x8001_0000,
            dst_qpn: 0x12345,
            ahn: 0x77,
            reserved: 0,
        };
        let b = u.as_bytes();
        // @8 immediate, @12 length, @16 Q_Key, @20 destination QPN, @24 AHN; SGL at 32.
        assert_eq!(b.len(), 32);
        assert_eq!(at(b, 8, 8), &[1, 2, 3, 4, 0, 1, 0, 0]);
        assert_eq!(
            at(b, 16, 12),
            &[0, 0, 1, 0x80, 0x45, 0x23, 1, 0, 0x77, 0, 0, 0]
        );
        // erdma_rs_hw 5.6: network type 31, SL 27:20, source QPN 19:0.
        let w = CqeUdInfo::from_raw(0x8350_0001);
        assert_eq!((w.ipv6(), w.sl().get(), w.src_qpn().get()), (true, 0x35, 1));
        assert!(!CqeUdInfo::from_raw(0x0000_0002).ipv6());
    }

    #[test]
    fn read_and_atomic_images() {
        let r = ReadSqe {
            hdr: SqeHeader::zeroed(),
            inv_key: 0x0a0b_0c0d,
            length: 0x40,
            sink_lkey: 0x77,
            sink_addr_lo: 0x1000,
            sink_addr_hi: 0x2,
            reserved: 0,
            remote: Sge {
                addr: 0x9000,
                length: 0x40,
                key: 0x55,
            },
        };
        let b = r.as_bytes();
        assert_eq!(b.len(), 48);
        assert_eq!(at(b, 8, 4), &[0x0d, 0x0c, 0x0b, 0x0a]);
        assert_eq!(at(b, 16, 12), &[0x77, 0, 0, 0, 0, 0x10, 0, 0, 2, 0, 0, 0]);
        assert_eq!(at(b, 32, 8), &[0, 0x90, 0, 0, 0, 0, 0, 0]);
        assert_eq!(at(b, 40, 8), &[0x40, 0, 0, 0, 0x55, 0, 0, 0]);
        let a = AtomicSqe {
            hdr: SqeHeader::zeroed(),
            reserved: 0,
            swap_or_add: 0x11,
            compare: 0x22,
            remote: Sge {
                addr: 0x33,
                length: 8,
                key: 0x44,
            },
            local: Sge {
                addr: 0x55,
                length: 8,
                key: 0x66,
            },
        };
        let b = a.as_bytes();
        assert_eq!(b.len(), 64);
        assert_eq!(
            (b[16], b[24], b[32], b[40], b[44]),
            (0x11, 0x22, 0x33, 8, 0x44)
        );
        assert_eq!((b[48], b[56], b[60]), (0x55, 8, 0x66));
    }

    #[test]
    fn reg_mr_and_local_inv_images() {
        let access = MrAccess::from_verbs(
            AccessFlag::LocalWrite | AccessFlag::RemoteRead | AccessFlag::RemoteWrite,
        );
        // Local read is always granted: bits LR 1, LW 2, RR 3, RW 4.
        assert_eq!(access.into_raw(), 0b11110);
        let attrs = RegMrSqeAttrs::zeroed()
            .with_access(access)
            .with_npages(low32(5))
            .with_mtt_type(low32(1));
        let r = RegMrSqe {
            hdr: SqeHeader::zeroed(),
            iova: 0x1122_3344_5566_7788,
            length: 0x3000,
            stag: 0x0000_0105,
            attrs,
            reserved: 0,
            pages: [0xa000, 0, 0, 0],
        };
        let b = r.as_bytes();
        assert_eq!(b.len(), 64);
        assert_eq!(
            at(b, 8, 8),
            &[0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]
        );
        assert_eq!(at(b, 16, 8), &[0, 0x30, 0, 0, 5, 1, 0, 0]);
        // 31:12 pages, 7:6 MTT type, 5:1 access.
        assert_eq!(at(b, 24, 4), &[0x7c, 0x50, 0, 0]);
        assert_eq!(at(b, 32, 2), &[0, 0xa0]);
        let l = LocalInvSqe {
            hdr: SqeHeader::zeroed(),
            reserved0: [0; 3],
            key: 0x1234_5678,
            reserved1: [0; 2],
        };
        let b = l.as_bytes();
        assert_eq!(b.len(), 32);
        assert_eq!(at(b, 16, 8), &[0, 0, 0, 0, 0x78, 0x56, 0x34, 0x12]);
    }

    #[test]
    fn rqe_image() {
        let rqe = Rqe {
            head: RqDoorbell::zeroed().with_pi(0x10u16).with_qpn(0x12345u32),
            reserved: 0,
            sge: Sge {
                addr: 0x4000,
                length: 0x200,
                key: 0x99,
            },
        };
        let b = rqe.as_bytes();
        assert_eq!(b.len(), 32);
        // @0 index, @4 QPN, @16 address, @24 length, @28 lkey.
        assert_eq!(at(b, 0, 8), &[0x10, 0, 0, 0, 0x45, 0x23, 0x01, 0]);
        assert_eq!(
            at(b, 16, 16),
            &[0, 0x40, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0x99, 0, 0, 0]
        );
    }

    #[test]
    fn doorbell_values() {
        let sq = SqDoorbell::zeroed()
            .with_qpn(low64(0x12345))
            .with_pi(0x20u16);
        assert_eq!(sq.into_raw(), 0x0001_2345_0000_0020);
        let cq = CqDoorbell::zeroed()
            .with_seq(0xabu8)
            .with_cqn(low64(0x12_3456))
            .with_arm(true)
            .with_solicited(true)
            .with_cmdsn(low64(2))
            .with_ci(low64(0x65_4321));
        assert_eq!(cq.into_raw(), 0xab12_3456_e065_4321);
        let eq = EqDoorbell::zeroed().with_arm(true).with_ci(0x1234u16);
        assert_eq!(eq.into_raw(), 0x8000_1234);
        assert_eq!(CmdqSqDoorbell::zeroed().with_pi(0x200u16).into_raw(), 0x200);
    }

    #[test]
    fn cqe_decoding() {
        let mut image = [0u8; 32];
        // Big-endian words: owner, opcode 5 (RECV_IMM), queue 1 (RQ), status 15.
        image[0..4].copy_from_slice(&[0x80, 0x05, 0x01, 0x0f]);
        image[4..8].copy_from_slice(&[0, 0, 0x12, 0x34]);
        image[8..12].copy_from_slice(&[0, 0x01, 0x23, 0x45]);
        // The immediate 0xdeadbeef as a little-endian word.
        image[12..16].copy_from_slice(&[0xef, 0xbe, 0xad, 0xde]);
        image[16..20].copy_from_slice(&[0, 0, 0x10, 0]);
        let cqe = Cqe::read_from_bytes(&image[..]);
        assert!(cqe.is_ok());
        let Ok(cqe) = cqe else {
            return;
        };
        let h = cqe.header();
        assert!(h.owner());
        assert_eq!(
            (h.opcode().get(), h.queue().get(), h.status().get()),
            (5, 1, 15)
        );
        assert_eq!(cqe.wqe_index.get(), 0x1234);
        assert_eq!(cqe.qpn.get(), 0x12345);
        assert_eq!(cqe.imm().to_ne_bytes(), [0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(cqe.invalidated_key(), 0xefbe_adde);
        assert_eq!(cqe.byte_len.get(), 0x1000);
    }

    #[test]
    fn cmdq_cqe_decoding() {
        let mut image = [0u8; 32];
        image[0..4].copy_from_slice(&[0x80, 0, 0x02, 0x03]);
        image[4..8].copy_from_slice(&[0, 0, 0, 8]);
        image[8..24].copy_from_slice(&[
            0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0, 0, 0, 1, 0, 0, 0, 2,
        ]);
        let cqe = CmdqCqe::read_from_bytes(&image[..]);
        assert!(cqe.is_ok());
        let Ok(cqe) = cqe else {
            return;
        };
        let h = cqe.header();
        assert!(h.owner());
        assert_eq!((h.queue().get(), h.status().get()), (2, 3));
        assert_eq!(cqe.sq_index.get(), 8);
        // Each response word is two big-endian words, low one first.
        assert_eq!(cqe.response(), [0x5566_7788_1122_3344, 0x2_0000_0001]);
    }

    #[test]
    fn event_entries_decoding() {
        let ceqe = Ceqe::read_from_bytes(&[0x45, 0x23, 0x01, 0x80, 0x77, 0, 0, 0x80][..]).ok();
        let ceqe = ceqe.map(|c| (c.cqn().get(), c.owner(), c.pi().get(), c.db()));
        assert_eq!(ceqe, Some((0x12345, true, 0x77, true)));
        assert!(EqeWord0::from_raw(0x8000_0000).owner());
        let image = [0x02, 0x00, 0x03, 0x80, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let aeqe = Aeqe::read_from_bytes(&image[..]);
        assert!(aeqe.is_ok());
        let Ok(aeqe) = aeqe else {
            return;
        };
        assert!(aeqe.hdr.owner());
        assert_eq!(aeqe.hdr.event(), Ok(AsyncEvent::CqError));
        assert_eq!(aeqe.hdr.subtype().get(), 2);
        assert_eq!(aeqe.object, 7);
        assert_eq!(AeqeHeader::from_raw(0x0009_0000).event(), Err(9));
        let built = AeqeHeader::zeroed().with_event(AsyncEvent::QpOther);
        assert_eq!(built.into_raw(), 0x0004_0000);
    }

    #[test]
    fn stag_fields() {
        let s = Stag::zeroed().with_index(low32(0x1234)).with_key(0x56u8);
        assert_eq!(s.into_raw(), 0x0012_3456);
    }
}

/// The key of an MPA request (erdma_rs_hw 7.1).
pub(crate) const MPA_KEY_REQ: [u8; 16] = *b"MPA ID Req Frame";
/// The key of an MPA reply.
pub(crate) const MPA_KEY_REP: [u8; 16] = *b"MPA ID Rep Frame";
/// The MPA revision of erdma adapters: revision 1 extended with the cookie and the
/// congestion-control word.
pub(crate) const MPA_REVISION: u8 = 129;
/// The most private data an MPA frame carries.
pub(crate) const MPA_MAX_PRIVATE_DATA: usize = 256;

bitfield! {
    /// The flags byte of an MPA frame.
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct MpaFlags(u8) {
        /// The sender wants markers (refused: the adapter has none).
        7:7 markers => bool;
        /// The sender wants CRCs (refused: the adapter has none).
        6:6 crc => bool;
        /// A reply that rejects the connection.
        5:5 reject => bool;
    }
}

bitfield! {
    /// The extension word of an erdma MPA frame.
    #[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
    pub(crate) struct MpaExt(u32) {
        /// The sender's congestion-control algorithm.
        3:0 cc;
    }
}

/// The 28-byte header of an MPA request or reply, followed on the wire by `pd_len` bytes of
/// private data (erdma_rs_hw 7.1). Big-endian words.
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable)]
pub(crate) struct MpaHeader {
    /// [`MPA_KEY_REQ`] or [`MPA_KEY_REP`].
    pub(crate) key: [u8; 16],
    pub(crate) flags: MpaFlags,
    /// [`MPA_REVISION`].
    pub(crate) revision: u8,
    /// The length of the private data.
    pub(crate) pd_len: Be16,
    /// The sender's QP cookie (from CREATE_QP).
    pub(crate) cookie: Be32,
    /// Big-endian [`MpaExt`].
    pub(crate) ext: Be32,
}

/// The size of [`MpaHeader`].
pub(crate) const MPA_HEADER_SIZE: usize = 28;
const _: () = assert!(size_of::<MpaHeader>() == MPA_HEADER_SIZE);
