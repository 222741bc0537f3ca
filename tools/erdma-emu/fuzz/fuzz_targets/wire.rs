// SPDX-License-Identifier: GPL-2.0

//! The decoders of every guest-written format, on arbitrary bytes: command headers and the
//! requests of every command, WQE headers, the fixed parts of every WQE, SGLs (inline and SGE
//! lists) and fast-register page lists, RQEs, doorbell values, CQEs and EQEs; what decodes must
//! encode back to the same thing. And address translation on its own: MTTs of every level over
//! arbitrary tables, MR ranges split into pieces, queue buffers over page lists.

#![no_main]

use arbitrary::Arbitrary;
use erdma_fuzz::cut;
use erdma_model::cmdq::{
    self, AddressVector, AllocDb, ConfDevice, ConfMtu, CreateAh, CreateEq, DestroyAh, DestroyEq,
    FreeDb, GetStats, Header, Request, SetGid,
};
use erdma_model::mtt::{mr_pieces, Mtt, QueueBuf};
use erdma_model::regs::{CqDoorbell, EqDoorbell};
use erdma_model::testing::VecMemory;
use erdma_model::wire::{
    AtomicSqe, CreateCq, CreateQp, DataCqe, DeregMr, Eqe, FastRegSqe, IwarpConnection, LocalInvSqe,
    ModifyQpIwarp, ModifyQpRoce, ReadSqe, Reflush, RegMr, RqDoorbell, Rqe, SendSqe, Sge, Sgl,
    SqDoorbell, SqeHeader, U32Arg, UdSendSqe, WriteSqe, CQE_SIZE, EQE_SIZE, RQE_SIZE,
};
use libfuzzer_sys::fuzz_target;

/// Decodes a request; what decodes must write back and decode to itself.
macro_rules! request_round_trip {
    ($bytes:expr, $($ty:ty),*) => {
        $(
            if let Ok(v) = <$ty>::decode(&Request::new($bytes)) {
                let mut again = vec![0u8; cmdq::MAX_CMD_SIZE.max($bytes.len())];
                v.write_fields(&mut again);
                assert_eq!(<$ty>::decode(&Request::new(&again)), Ok(v), stringify!($ty));
            }
        )*
    };
}

#[derive(Arbitrary, Debug)]
enum Input {
    /// A command (header and request) from the CMDQ SQ.
    Command(Vec<u8>),
    /// A WQE (up to 8 WQEBBs: what a header may claim).
    Wqe(Vec<u8>),
    /// Queue entries and doorbell values.
    Entries { value: u64, entry: [u8; 32] },
    /// MTT walks over an arbitrary table in guest memory.
    Mtt {
        table: Vec<u8>,
        levels: u8,
        root: u16,
        count: u64,
        mtt_page_shift: u8,
        probes: Vec<u64>,
        va: u64,
        page_shift: u8,
        iova: u64,
        len: u32,
    },
    /// Queue buffers over page lists.
    Queue {
        pages: Vec<u16>,
        page_shift: u8,
        offset: u64,
        size: u64,
        ops: Vec<(u64, u8, bool)>,
    },
}

fuzz_target!(|input: Input| match input {
    Input::Command(bytes) => {
        let bytes = cut(&bytes, cmdq::MAX_CMD_SIZE);
        let mut h = [0u8; 8];
        erdma_fuzz::put(&mut h, 0, bytes);
        let header = Header::decode(u64::from_le_bytes(h));
        assert_eq!(Header::decode(header.encode()), header);
        request_round_trip!(
            bytes,
            CreateEq,
            DestroyEq,
            ConfMtu,
            GetStats,
            ConfDevice,
            AllocDb,
            FreeDb,
            SetGid,
            CreateAh,
            DestroyAh,
            CreateQp,
            U32Arg,
            ModifyQpRoce,
            ModifyQpIwarp,
            IwarpConnection,
            Reflush,
            CreateCq,
            RegMr,
            DeregMr
        );
        if let Ok(f) = FreeDb::decode(&Request::new(bytes)) {
            let _ = f.pages().count();
        }
        for off in [0, 8, 12, 16, 32, 37, usize::MAX] {
            let _ = AddressVector::decode_at(&Request::new(bytes), off);
        }
    }
    Input::Wqe(bytes) => {
        let wqe = cut(&bytes, 256);
        let hdr = SqeHeader::read(wqe);
        assert_eq!(SqeHeader::decode(hdr.encode()), hdr);
        for at in [16, 32, 48, 64, wqe.len(), usize::MAX] {
            if let Some(Sgl::Sges(sges)) = Sgl::decode(&hdr, wqe, at) {
                assert!(sges.len() <= 6);
            }
        }
        let _ = WriteSqe::decode(wqe);
        let _ = SendSqe::decode(wqe);
        let _ = UdSendSqe::decode(wqe);
        let _ = ReadSqe::decode(wqe);
        let _ = AtomicSqe::decode(wqe);
        let _ = LocalInvSqe::decode(wqe);
        if let Some(f) = FastRegSqe::decode(wqe) {
            if let Some(pages) = f.inline_pages(wqe) {
                assert!(pages.len() <= wqe.len() / 8);
            }
        }
        let sge = Sge::decode(wqe);
        assert_eq!(Sge::decode(&sge.encode()), sge);
    }
    Input::Entries { value, entry } => {
        let sq = SqDoorbell::decode(value);
        assert_eq!(SqDoorbell::decode(sq.encode()), sq);
        let rq = RqDoorbell::decode(value);
        assert_eq!(RqDoorbell::decode(rq.encode()), rq);
        let cq = CqDoorbell::decode(value);
        assert_eq!(CqDoorbell::decode(cq.encode()), cq);
        let eq = EqDoorbell::decode(value);
        assert_eq!(EqDoorbell::decode(eq.encode()), eq);
        let rqe_bytes: [u8; RQE_SIZE] = entry;
        let rqe = Rqe::decode(&rqe_bytes);
        assert_eq!(Rqe::decode(&rqe.encode()), rqe);
        let cqe_bytes: [u8; CQE_SIZE] = entry;
        let c = DataCqe::decode(&cqe_bytes);
        assert_eq!(DataCqe::decode(&c.encode()), c);
        let _ = cmdq::Cqe::decode(&cqe_bytes);
        let mut e = [0u8; EQE_SIZE];
        e.copy_from_slice(&entry[..EQE_SIZE]);
        let _ = (Eqe::owner(&e), Eqe::decode_ceqe(&e), Eqe::decode_aeqe(&e));
    }
    Input::Mtt {
        table,
        levels,
        root,
        count,
        mtt_page_shift,
        probes,
        va,
        page_shift,
        iova,
        len,
    } => {
        // The table: the fuzzer's bytes at guest 0x1000 (8 KiB at most).
        let table = cut(&table, 0x2000);
        let mut mem = VecMemory::new(0x1000, 0x2000);
        mem.bytes_mut()[..table.len()].copy_from_slice(table);
        let mtt = Mtt::Indirect {
            levels: 1 + levels % 3,
            root: 0x1000 + u64::from(root) % 0x2400,
            count,
            page_shift: mtt_page_shift % 24,
        };
        for &i in probes.iter().take(16) {
            let _ = mtt.entry(i, &mem);
            let _ = mtt.entry(i % 1024, &mem);
        }
        // mr_pieces' callers keep the page size at 4 KiB..1 GiB and messages at 1 GiB at most.
        let page_shift = 12 + page_shift % 19;
        let len = u64::from(len) % (1 << 20);
        if let Ok(pieces) = mr_pieces(&mtt, va, page_shift, iova, len, &mem) {
            let total: u64 = pieces.iter().map(|p| p.len).sum();
            assert_eq!(total, len, "the pieces cover the range");
        }
        let direct = Mtt::Direct(
            table
                .chunks_exact(8)
                .take(4)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
                .collect(),
        );
        let _ = mr_pieces(&direct, va, page_shift, iova, len, &mem);
    }
    Input::Queue {
        pages,
        page_shift,
        offset,
        size,
        ops,
    } => {
        let mut mem = VecMemory::new(0x10000, 0x10000);
        let pages: Vec<u64> = pages
            .iter()
            .take(64)
            .map(|&p| {
                if p == u16::MAX {
                    u64::MAX - 0x100
                } else {
                    u64::from(p) << 8
                }
            })
            .collect();
        let size = size % (1 << 24);
        if let Some(q) = QueueBuf::new(pages, page_shift, offset, size) {
            assert_eq!(q.size(), size);
            for &(off, len, write) in ops.iter().take(16) {
                let mut b = vec![0xa5u8; usize::from(len)];
                if write {
                    let _ = q.write(off, &b, &mut mem);
                } else {
                    let _ = q.read(off, &mut b, &mem);
                }
            }
        }
    }
});
