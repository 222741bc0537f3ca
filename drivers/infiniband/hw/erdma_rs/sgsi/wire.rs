// SPDX-License-Identifier: GPL-2.0

//! The datagrams of compat mode's software GSI (erdma_rs_hw 7.3): RoCEv2 UD SEND Only packets
//! (InfiniBand Annex A17), the payload of a UDP datagram to port 4791 over IPv4:
//!
//! ```text
//!   BTH (12 bytes) | DETH (8) | MAD (at most 256) | ICRC (4)
//! ```
//!
//! The ICRC is a CRC-32 over the IPv4 header, the UDP header and the packet, with the fields
//! that routers change masked to ones (the IPv4 type of service, time to live and checksum, the
//! UDP checksum, the BTH's reserved byte), seeded as if eight bytes of ones (the masked LRH of
//! InfiniBand) came first; it is sent in the byte order of the CRC's value on a little-endian
//! CPU, as the kernel's software RoCE sends it. Each header word is declared once here and
//! packets are built and checked only here: [`parse`] refuses anything a sender got wrong or
//! made up, saying what ([`Refused`]).

use kernel::{
    bitfield,
    prelude::*, //
};
use zerocopy::{
    byteorder::big_endian::U32 as Be32,
    FromBytes,
    IntoBytes, //
};

use crate::{
    consts::multiple_of,
    formats::low32, //
};

/// The UDP port of RoCEv2.
pub(crate) const ROCE_PORT: u16 = 4791;
/// The length of the BTH and DETH.
pub(crate) const HEADERS_LEN: usize = size_of::<UdHeaders>();
/// The length of the ICRC.
pub(crate) const ICRC_LEN: usize = 4;
/// The largest payload: a MAD of RoCE (256 bytes).
pub(crate) const MAX_PAYLOAD: usize = 256;
/// The largest packet, headers and ICRC included.
pub(crate) const MAX_PACKET: usize = HEADERS_LEN + MAX_PAYLOAD + ICRC_LEN;
/// The BTH opcode of a UD SEND Only.
pub(crate) const UD_SEND_ONLY: u8 = 0x64;
/// The default P_Key, full membership; its low 15 bits are the partition.
pub(crate) const DEFAULT_PKEY: u16 = 0xffff;
/// The well-known Q_Key of the GSI QP.
pub(crate) const GSI_QKEY: u32 = 0x8001_0000;
/// The length of the IPv4 header the ICRC covers (no options).
pub(crate) const IPV4_LEN: usize = 20;
/// The UDP header's length.
const UDP_LEN: usize = 8;
/// The ICRC's seed: the CRC of eight bytes of ones from an all-ones start (checked by KUnit).
const ICRC_SEED: u32 = 0xdebb_20e3;

bitfield! {
    /// The first word of the BTH.
    pub(crate) struct Bth0(u32) {
        /// The operation.
        31:24 opcode;
        /// Solicited event.
        23:23 solicited => bool;
        /// Migration request.
        22:22 mig_req => bool;
        /// Pad bytes at the end of the payload.
        21:20 pad;
        /// Transport header version (0).
        19:16 tver;
        /// The partition key.
        15:0 pkey;
    }
}

bitfield! {
    /// The second word of the BTH: the destination queue pair (bits 31:24 are reserved, masked
    /// in the ICRC).
    pub(crate) struct Bth1(u32) {
        /// The destination queue pair.
        23:0 dest_qpn;
    }
}

bitfield! {
    /// The third word of the BTH.
    pub(crate) struct Bth2(u32) {
        /// Acknowledge request (never on UD).
        31:31 ack_req => bool;
        /// The packet sequence number.
        23:0 psn;
    }
}

bitfield! {
    /// The second word of the DETH.
    pub(crate) struct Deth1(u32) {
        /// The source queue pair.
        23:0 src_qpn;
    }
}

/// The BTH and DETH of a UD packet, in network byte order.
#[repr(C)]
#[derive(IntoBytes, FromBytes, zerocopy_derive::Immutable, zerocopy_derive::KnownLayout)]
pub(crate) struct UdHeaders {
    bth0: Be32,
    bth1: Be32,
    bth2: Be32,
    qkey: Be32,
    deth1: Be32,
}

/// What a packet carries, besides its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ud {
    pub(crate) dest_qpn: u32,
    pub(crate) src_qpn: u32,
    pub(crate) qkey: u32,
    pub(crate) pkey: u16,
    pub(crate) psn: u32,
    pub(crate) solicited: bool,
}

/// Why [`parse`] refused a datagram: each is counted apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Shorter than the headers and ICRC, longer than the largest packet, or an IPv4 header with
    /// options; or a UDP datagram of a length that disagrees with the IP header's.
    Length,
    /// Another opcode than UD SEND Only, another header version, or pad bytes.
    Header,
    /// The ICRC does not match.
    Icrc,
}

/// The CRC-32 table of the reflected polynomial 0xedb88320.
const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        // CAST: below 256.
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// Continues a CRC-32 (reflected, without the final inversion) over `data`.
fn crc32(mut crc: u32, data: &[u8]) -> u32 {
    for &b in data {
        crc = CRC_TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    crc
}

/// The ICRC of `packet` (headers and payload, not the ICRC) sent with IPv4 header `ip` and UDP
/// ports `sport` and `dport`.
pub(crate) fn icrc(ip: &[u8; IPV4_LEN], sport: u16, dport: u16, packet: &[u8]) -> u32 {
    let mut ip = *ip;
    // Type of service, time to live and header checksum: masked.
    ip[1] = 0xff;
    ip[8] = 0xff;
    ip[10] = 0xff;
    ip[11] = 0xff;
    // CAST: a packet is at most MAX_PACKET bytes (checked by the callers).
    let udp_len = (UDP_LEN + packet.len() + ICRC_LEN) as u16;
    let mut udp = [0xffu8; UDP_LEN];
    udp[0..2].copy_from_slice(&sport.to_be_bytes());
    udp[2..4].copy_from_slice(&dport.to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    let mut crc = crc32(ICRC_SEED, &ip);
    crc = crc32(crc, &udp);
    let (bth, rest) = packet.split_at(packet.len().min(8));
    let mut first = [0u8; 8];
    first[..bth.len()].copy_from_slice(bth);
    // The BTH's reserved byte (before the destination QPN): masked.
    if bth.len() > 4 {
        first[4] = 0xff;
    }
    crc = crc32(crc, &first[..bth.len()]);
    !crc32(crc, rest)
}

/// The IPv4 header a datagram from `src` to `dst` carrying a packet of `packet_len` bytes (ICRC
/// included) leaves with from a kernel UDP socket that sets Don't Fragment and is not connected:
/// identification 0 (`UdpSocket::set_dont_fragment`), no options; the masked fields zero.
pub(crate) fn sent_ipv4_header(src: [u8; 4], dst: [u8; 4], packet_len: usize) -> [u8; IPV4_LEN] {
    let mut ip = [0u8; IPV4_LEN];
    ip[0] = 0x45;
    // CAST: at most MAX_PACKET plus the headers.
    ip[2..4].copy_from_slice(&((IPV4_LEN + UDP_LEN + packet_len) as u16).to_be_bytes());
    // Don't Fragment, offset 0.
    ip[6] = 0x40;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src);
    ip[16..20].copy_from_slice(&dst);
    ip
}

/// Writes the UD SEND Only packet of `ud` and `payload` into `out`, its ICRC computed for IPv4
/// header `ip` and ports `sport`/`dport`; returns its length. `EMSGSIZE` for a payload longer
/// than [`MAX_PAYLOAD`] or not a multiple of 4 bytes (MADs are).
pub(crate) fn build(
    ud: &Ud,
    payload: &[u8],
    ip: &[u8; IPV4_LEN],
    sport: u16,
    dport: u16,
    out: &mut [u8; MAX_PACKET],
) -> Result<usize> {
    if payload.len() > MAX_PAYLOAD || !multiple_of(payload.len() as u64, 4) {
        return Err(EMSGSIZE);
    }
    let hdr = UdHeaders {
        bth0: Be32::new(
            Bth0::zeroed()
                .with_opcode(low32(UD_SEND_ONLY.into()))
                .with_solicited(ud.solicited)
                .with_pkey(low32(ud.pkey.into()))
                .into_raw(),
        ),
        bth1: Be32::new(Bth1::zeroed().with_dest_qpn(low32(ud.dest_qpn)).into_raw()),
        bth2: Be32::new(Bth2::zeroed().with_psn(low32(ud.psn)).into_raw()),
        qkey: Be32::new(ud.qkey),
        deth1: Be32::new(Deth1::zeroed().with_src_qpn(low32(ud.src_qpn)).into_raw()),
    };
    let end = HEADERS_LEN + payload.len();
    out[..HEADERS_LEN].copy_from_slice(hdr.as_bytes());
    out[HEADERS_LEN..end].copy_from_slice(payload);
    let crc = icrc(ip, sport, dport, &out[..end]);
    out[end..end + ICRC_LEN].copy_from_slice(&crc.to_le_bytes());
    Ok(end + ICRC_LEN)
}

/// Checks the UDP payload `packet` that arrived with IPv4 header `ip` from port `sport` to
/// `dport`, of `udp_len` bytes on the wire (more than `packet` holds if it was truncated): a
/// UD SEND Only of the right length, header version and ICRC. Returns what it carries and the
/// range of its payload; the P_Key, Q_Key and QPNs are the receiver's to check.
pub(crate) fn parse(
    ip: &[u8; IPV4_LEN],
    sport: u16,
    dport: u16,
    packet: &[u8],
    udp_len: usize,
) -> core::result::Result<(Ud, core::ops::Range<usize>), Refused> {
    let ip_total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    if ip[0] != 0x45
        || udp_len != packet.len()
        || packet.len() < HEADERS_LEN + ICRC_LEN
        || packet.len() > MAX_PACKET
        || ip_total != IPV4_LEN + UDP_LEN + packet.len()
    {
        return Err(Refused::Length);
    }
    let (hdr, _) = UdHeaders::read_from_prefix(packet).map_err(|_| Refused::Length)?;
    let bth0 = Bth0::from_raw(hdr.bth0.get());
    if bth0.opcode().get() != u32::from(UD_SEND_ONLY)
        || bth0.tver().get() != 0
        || bth0.pad().get() != 0
    {
        return Err(Refused::Header);
    }
    let body = packet.len() - ICRC_LEN;
    let mut sent = [0u8; ICRC_LEN];
    sent.copy_from_slice(&packet[body..]);
    if icrc(ip, sport, dport, &packet[..body]) != u32::from_le_bytes(sent) {
        return Err(Refused::Icrc);
    }
    // CAST: 16-bit fields.
    let ud = Ud {
        dest_qpn: Bth1::from_raw(hdr.bth1.get()).dest_qpn().get(),
        src_qpn: Deth1::from_raw(hdr.deth1.get()).src_qpn().get(),
        qkey: hdr.qkey.get(),
        pkey: bth0.pkey().get() as u16,
        psn: Bth2::from_raw(hdr.bth2.get()).psn().get(),
        solicited: bth0.solicited(),
    };
    Ok((ud, HEADERS_LEN..body))
}

#[kunit_tests(erdma_rs_sgsi_wire)]
mod tests {
    use super::*;

    const A: [u8; 4] = [10, 0, 2, 15];
    const B: [u8; 4] = [10, 0, 3, 15];

    fn ud() -> Ud {
        Ud {
            dest_qpn: 1,
            src_qpn: 1,
            qkey: GSI_QKEY,
            pkey: DEFAULT_PKEY,
            psn: 0x12_3456,
            solicited: false,
        }
    }

    fn packet(payload: &[u8]) -> ([u8; IPV4_LEN], [u8; MAX_PACKET], usize) {
        let mut out = [0u8; MAX_PACKET];
        let ip = sent_ipv4_header(A, B, HEADERS_LEN + payload.len() + ICRC_LEN);
        let n = build(&ud(), payload, &ip, ROCE_PORT, ROCE_PORT, &mut out).unwrap();
        (ip, out, n)
    }

    /// The seed is the CRC of the masked LRH: eight bytes of ones.
    #[test]
    fn the_seed_is_the_masked_lrh() {
        assert_eq!(crc32(!0, &[0xff; 8]), ICRC_SEED);
        // The check value of CRC-32.
        assert_eq!(!crc32(!0, b"123456789"), 0xcbf4_3926);
    }

    /// A MAD sent from A to B, as the rules above make it, computed apart (Python's
    /// zlib.crc32 over the masked headers after eight bytes of ones): pins byte order and masks.
    #[test]
    fn a_mad_has_the_icrc_the_rules_give() {
        let mad: [u8; 256] = core::array::from_fn(|i| i as u8);
        let (_, out, n) = packet(&mad);
        assert_eq!(n, 280);
        assert_eq!(
            out[..HEADERS_LEN],
            [
                0x64, 0x00, 0xff, 0xff, 0, 0, 0, 1, 0, 0x12, 0x34, 0x56, 0x80, 0x01, 0, 0, 0, 0, 0,
                1
            ]
        );
        assert_eq!(out[n - 4..n], [0xa2, 0x5f, 0xc3, 0xa2]);
    }

    /// What routers change is masked: the ICRC holds across TTL, TOS and checksum changes, and
    /// the BTH's reserved byte.
    #[test]
    fn masked_fields_do_not_count() {
        let (mut ip, mut out, n) = packet(&[7; 64]);
        ip[1] = 0x2e;
        ip[8] = 3;
        ip[10] = 0x12;
        ip[11] = 0x34;
        out[4] = 0x5a;
        let (got, range) = parse(&ip, ROCE_PORT, ROCE_PORT, &out[..n], n).unwrap();
        assert_eq!(got, ud());
        assert_eq!(range, HEADERS_LEN..HEADERS_LEN + 64);
    }

    /// Everything else counts: each byte of the headers, the payload, the addresses, the IP
    /// identification, the ports.
    #[test]
    fn every_covered_byte_counts() {
        let (ip, out, n) = packet(&[7; 32]);
        for i in (0..n).filter(|&i| i != 4) {
            let mut bad = out;
            bad[i] ^= 0x01;
            assert!(parse(&ip, ROCE_PORT, ROCE_PORT, &bad[..n], n).is_err());
        }
        for i in [4usize, 5, 6, 7, 9, 12, 15, 16, 19] {
            let mut bad = ip;
            bad[i] ^= 0x01;
            assert!(parse(&bad, ROCE_PORT, ROCE_PORT, &out[..n], n).is_err());
        }
        assert_eq!(
            parse(&ip, ROCE_PORT + 1, ROCE_PORT, &out[..n], n),
            Err(Refused::Icrc)
        );
    }

    /// Lengths: too short, too long, truncated, disagreeing with the IP header, IP options.
    #[test]
    fn lengths_are_checked() {
        let (ip, out, n) = packet(&[7; 32]);
        let short = HEADERS_LEN + ICRC_LEN - 1;
        let ip_short = sent_ipv4_header(A, B, short);
        assert_eq!(
            parse(&ip_short, ROCE_PORT, ROCE_PORT, &out[..short], short),
            Err(Refused::Length)
        );
        assert_eq!(
            parse(&ip, ROCE_PORT, ROCE_PORT, &out[..n - 4], n),
            Err(Refused::Length)
        );
        assert_eq!(
            parse(&ip, ROCE_PORT, ROCE_PORT, &out[..n - 4], n - 4),
            Err(Refused::Length)
        );
        let mut opts = ip;
        opts[0] = 0x46;
        assert_eq!(
            parse(&opts, ROCE_PORT, ROCE_PORT, &out[..n], n),
            Err(Refused::Length)
        );
        assert_eq!(
            build(
                &ud(),
                &[0; 257],
                &ip,
                ROCE_PORT,
                ROCE_PORT,
                &mut [0; MAX_PACKET]
            ),
            Err(EMSGSIZE)
        );
    }

    /// Other opcodes, header versions and pad counts are refused before the ICRC is looked at.
    #[test]
    fn headers_are_checked() {
        let (ip, out, n) = packet(&[7; 32]);
        for (byte, value) in [(0usize, 0x04u8), (0, 0x65), (1, 0x01), (1, 0x10)] {
            let mut bad = out;
            bad[byte] = value;
            assert_eq!(
                parse(&ip, ROCE_PORT, ROCE_PORT, &bad[..n], n),
                Err(Refused::Header)
            );
        }
    }
}
