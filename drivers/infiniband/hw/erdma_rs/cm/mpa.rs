// SPDX-License-Identifier: GPL-2.0

//! MPA frames (erdma_rs_hw 7.1): parsing and building them, as pure functions.

use kernel::prelude::*;
use zerocopy::{
    FromBytes,
    IntoBytes, //
};

use crate::formats::{
    low32,
    MpaExt,
    MpaFlags,
    MpaHeader,
    MPA_HEADER_SIZE,
    MPA_MAX_PRIVATE_DATA,
    MPA_REVISION, //
};

/// A checked MPA frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Mpa {
    /// The reply rejects the connection.
    pub(super) reject: bool,
    pub(super) cookie: u32,
    pub(super) cc: u8,
    pub(super) pd_len: usize,
}

/// Why a frame is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Bad {
    /// Not MPA: the key is wrong.
    Key,
    /// Another revision.
    Revision(u8),
    /// Markers or CRCs asked for.
    MarkersOrCrc,
    /// More private data than MPA allows.
    TooLong(usize),
}

impl Bad {
    pub(super) fn errno(self) -> Error {
        match self {
            Bad::MarkersOrCrc => ECONNREFUSED,
            _ => EPROTO,
        }
    }
}

/// Decodes the header of a frame of key `key` at the start of `buf` (at least
/// [`MPA_HEADER_SIZE`] bytes).
pub(super) fn parse_header(buf: &[u8], key: &[u8; 16]) -> Result<Mpa, Bad> {
    let Ok((hdr, _)) = MpaHeader::read_from_prefix(buf) else {
        return Err(Bad::Key);
    };
    if hdr.key != *key {
        return Err(Bad::Key);
    }
    if hdr.revision != MPA_REVISION {
        return Err(Bad::Revision(hdr.revision));
    }
    if hdr.flags.markers() || hdr.flags.crc() {
        return Err(Bad::MarkersOrCrc);
    }
    let pd_len = usize::from(hdr.pd_len.get());
    if pd_len > MPA_MAX_PRIVATE_DATA {
        return Err(Bad::TooLong(pd_len));
    }
    Ok(Mpa {
        reject: hdr.flags.reject(),
        cookie: hdr.cookie.get(),
        // CAST: a 4-bit field.
        cc: MpaExt::from(hdr.ext.get()).cc().get() as u8,
        pd_len,
    })
}

/// Builds a frame: header of key `key`, then `pd`.
pub(super) fn build_frame(
    key: &[u8; 16],
    reject: bool,
    cookie: u32,
    cc: u8,
    pd: &[u8],
) -> Result<KVec<u8>> {
    let hdr = MpaHeader {
        key: *key,
        flags: MpaFlags::zeroed().with_reject(reject),
        revision: MPA_REVISION,
        // CAST: at most 256, checked by the callers.
        pd_len: (pd.len() as u16).into(),
        cookie: cookie.into(),
        ext: u32::from(MpaExt::zeroed().with_cc(low32(u32::from(cc)))).into(),
    };
    let mut frame = KVec::with_capacity(MPA_HEADER_SIZE + pd.len(), GFP_KERNEL)?;
    frame.extend_from_slice(hdr.as_bytes(), GFP_KERNEL)?;
    frame.extend_from_slice(pd, GFP_KERNEL)?;
    Ok(frame)
}

#[kunit_tests(erdma_rs_cm)]
pub(super) mod tests {
    use super::*;
    use crate::{
        commands::{
            ModifyQpIwarp,
            ModifyQpIwarpCfg, //
        },
        consts::IwState,
        formats::{
            MPA_KEY_REP,
            MPA_KEY_REQ, //
        },
    };

    /// A frame as erdma_rs_hw 7.1 lays it out, written by hand.
    pub(in crate::cm) fn frame(
        key: &[u8; 16],
        flags: u8,
        rev: u8,
        pd_len: u16,
        cookie: u32,
        ext: u32,
    ) -> KVec<u8> {
        let mut f = KVec::new();
        f.extend_from_slice(key, GFP_KERNEL).unwrap();
        f.extend_from_slice(&[flags, rev], GFP_KERNEL).unwrap();
        f.extend_from_slice(&pd_len.to_be_bytes(), GFP_KERNEL)
            .unwrap();
        f.extend_from_slice(&cookie.to_be_bytes(), GFP_KERNEL)
            .unwrap();
        f.extend_from_slice(&ext.to_be_bytes(), GFP_KERNEL).unwrap();
        f
    }

    #[test]
    fn request_image() {
        let built = build_frame(&MPA_KEY_REQ, false, 0x0102_0304, 1, b"hello").unwrap();
        let mut want = frame(b"MPA ID Req Frame", 0, 129, 5, 0x0102_0304, 1);
        want.extend_from_slice(b"hello", GFP_KERNEL).unwrap();
        assert_eq!(&built[..], &want[..]);
    }

    #[test]
    fn reject_image() {
        let built = build_frame(&MPA_KEY_REP, true, 7, 3, &[]).unwrap();
        assert_eq!(
            &built[..],
            &frame(b"MPA ID Rep Frame", 0x20, 129, 0, 7, 3)[..]
        );
    }

    #[test]
    fn good_reply_decodes() {
        let f = frame(
            b"MPA ID Rep Frame",
            0x20,
            129,
            256,
            0xdead_beef,
            0xffff_fff2,
        );
        let m = parse_header(&f, &MPA_KEY_REP).unwrap();
        assert!(m.reject);
        assert_eq!((m.cookie, m.cc, m.pd_len), (0xdead_beef, 2, 256));
    }

    #[test]
    fn hostile_headers_are_refused() {
        let req = &MPA_KEY_REQ;
        let cases: [(KVec<u8>, Bad); 6] = [
            (frame(b"MPA ID Rep Frame", 0, 129, 0, 1, 0), Bad::Key),
            (frame(b"GET / HTTP/1.1\r\n", 0, 129, 0, 1, 0), Bad::Key),
            (frame(b"MPA ID Req Frame", 0, 1, 0, 1, 0), Bad::Revision(1)),
            (
                frame(b"MPA ID Req Frame", 0x80, 129, 0, 1, 0),
                Bad::MarkersOrCrc,
            ),
            (
                frame(b"MPA ID Req Frame", 0x40, 129, 0, 1, 0),
                Bad::MarkersOrCrc,
            ),
            (
                frame(b"MPA ID Req Frame", 0, 129, 257, 1, 0),
                Bad::TooLong(257),
            ),
        ];
        for (f, bad) in cases.iter() {
            assert_eq!(parse_header(f, req).err(), Some(*bad));
        }
        // Too short to be a header at all.
        assert_eq!(parse_header(&[0u8; 27], req).err(), Some(Bad::Key));
        assert_eq!(Bad::MarkersOrCrc.errno(), ECONNREFUSED);
        assert_eq!(Bad::Revision(1).errno(), EPROTO);
    }

    #[test]
    fn modify_qp_rts_image() {
        // erdma_rs_hw 3.5: @8 state 31:24, CC 23:20, QPN 19:0; @12 cookie; @16 BE daddr;
        // @20 BE saddr; @24 BE sport; @26 BE dport; @28 SND.NXT; @32 RCV.NXT.
        let cmd = ModifyQpIwarp {
            cfg: ModifyQpIwarpCfg::zeroed()
                .with_state(low32(IwState::Rts.to_raw()))
                .with_cc(low32(1))
                .with_qpn(low32(0x12345)),
            cookie: 0xaabb_ccdd,
            daddr: 0xa9fe_3801u32.into(),
            saddr: 0xa9fe_3802u32.into(),
            sport: 0x1234u16.into(),
            dport: 0x4567u16.into(),
            snd_nxt: 0x0102_0304,
            rcv_nxt: 0x0506_0708,
            reserved: 0,
        };
        let b = cmd.as_bytes();
        assert_eq!(&b[0..4], &0x0211_2345u32.to_le_bytes());
        assert_eq!(&b[4..8], &0xaabb_ccddu32.to_le_bytes());
        assert_eq!(&b[8..16], &[169, 254, 56, 1, 169, 254, 56, 2]);
        assert_eq!(&b[16..20], &[0x12, 0x34, 0x45, 0x67]);
        assert_eq!(&b[20..28], &[4, 3, 2, 1, 8, 7, 6, 5]);
    }
}
