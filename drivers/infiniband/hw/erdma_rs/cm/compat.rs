// SPDX-License-Identifier: GPL-2.0

//! Compat mode's connection, made up from what the two ends exchanged out of band (erdma_rs_hw
//! 7.3): an iWARP queue pair brought to RTS the RoCE way, by `modify_qp` with an address vector
//! and the peer's QPN, with a TCP 4-tuple and sequence numbers nobody handshook.
//!
//! Both ends compute the same connection from the same four facts (the two IPv4 addresses and
//! the two QPNs), each seeing it from its own side, so that one's source port is the other's
//! destination port and one's next sequence number to send the other's next to receive. The
//! rules are the out-of-tree driver's, to the bit, so that a node running this driver and a node
//! running Alibaba's connect.

use kernel::{
    net::{
        namespace::{
            Net,
            PernetId,
            PernetOps, //
        },
        tcp::{
            SocketAddrV4,
            TcpSocket, //
        },
    },
    prelude::*, //
};

use super::machine::Link;

/// Bit 30 of the cookie field: the field names the peer's QPN (compat mode), not a cookie from
/// its MPA frame.
pub(crate) const COMPAT_COOKIE: u32 = 1 << 30;

/// The QPN bits both ends take the ports from.
const QPN_MASK: u32 = 0xf_ffff;

/// How many TCP ports from the reserved base compat connections use: one per value of a QPN's
/// bits 19:16.
pub(crate) const RESERVED_PORTS: u16 = 16;

/// One end of a compat connection, as the local side knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CompatEnd {
    /// The IPv4 address, `[10, 0, 0, 1]` for 10.0.0.1.
    pub(crate) ip: [u8; 4],
    /// The queue pair's number.
    pub(crate) qpn: u32,
}

/// Whether `a` is the larger address as the out-of-tree driver compares them: the address's
/// bytes in network order read as an integer of a little-endian host, so that the last octet
/// weighs most (erdma_rs_hw 7.3).
fn larger(a: [u8; 4], b: [u8; 4]) -> bool {
    u32::from_le_bytes(a) > u32::from_le_bytes(b)
}

/// The initial sequence number of the direction that leaves from `port`: the port's bytes in
/// network order read as a little-endian integer, times 4 (erdma_rs_hw 7.3).
fn isn(port: u16) -> u32 {
    u32::from(port.swap_bytes()) * 4
}

/// The connection `local` has with `remote`, handed to the adapter at RTS: ports from `base`
/// (the reserved range) and the QPN both ends choose, sequence numbers from the ports, the
/// remote QPN as the cookie, and the adapter's congestion-control algorithm `cc` (both ends
/// run the same adapter).
///
/// Both ends choose the QPN of the side with the larger address or, with equal addresses (one
/// host), the smaller QPN (of their low 20 bits; a queue pair connected to itself takes the
/// remote side's). With q that QPN's low 20 bits, the side whose QPN it is sends from port
/// `q & 0xffff` to port `base + (q >> 16)`, the other the reverse.
pub(crate) fn compat_link(local: CompatEnd, remote: CompatEnd, base: u16, cc: u8) -> Link {
    let (lq, rq) = (local.qpn & QPN_MASK, remote.qpn & QPN_MASK);
    let ours = if local.ip == remote.ip {
        lq < rq
    } else {
        larger(local.ip, remote.ip)
    };
    let q = if ours { lq } else { rq };
    // CAST: the low 16 bits; the high four (0 to 15) pick one of the reserved ports.
    let low = (q & 0xffff) as u16;
    let high = base.wrapping_add((q >> 16) as u16);
    let (sport, dport) = if ours { (low, high) } else { (high, low) };
    Link {
        local: SocketAddrV4::new(local.ip, sport),
        remote: SocketAddrV4::new(remote.ip, dport),
        peer_cookie: (remote.qpn & QPN_MASK) | COMPAT_COOKIE,
        cc,
        snd_nxt: isn(sport),
        rcv_nxt: isn(dport),
    }
}

/// The storage of [`ReservedPorts`] in every network namespace.
static RESERVED: PernetId = PernetId::new();

/// Compat mode's TCP ports, [`RESERVED_PORTS`] from the module's base, held by kernel sockets
/// bound to them in every network namespace, so that the host's TCP never uses them for
/// connections of its own (erdma_rs_hw 7.3); released when the module unloads.
pub(crate) struct ReservedPorts;

impl PernetOps for ReservedPorts {
    type State = KVec<TcpSocket>;
    fn id() -> &'static PernetId {
        &RESERVED
    }

    fn init(net: &Net) -> Result<KVec<TcpSocket>> {
        let base = crate::module_parameters::reserve_ports_base.value();
        let mut held = KVec::with_capacity(RESERVED_PORTS.into(), GFP_KERNEL)?;
        for port in (0..RESERVED_PORTS).map(|i| base.wrapping_add(i)) {
            let sock = TcpSocket::new_in(net)?;
            if let Err(e) = sock.bind(SocketAddrV4::new([0; 4], port)) {
                pr_err!(
                    "compat mode: TCP port {port} is in use (error {}); free it or choose \
                     another reserve_ports_base\n",
                    e.to_errno()
                );
                return Err(e);
            }
            held.push(sock, GFP_KERNEL)?;
        }
        Ok(held)
    }
}

#[kunit_tests(erdma_rs_cm_compat)]
mod tests {
    use super::*;

    const BASE: u16 = 0x7790;

    fn end(ip: [u8; 4], qpn: u32) -> CompatEnd {
        CompatEnd { ip, qpn }
    }

    /// What the other end computes, seen from this end: the mirror of `link`.
    fn mirrored(link: &Link) -> (SocketAddrV4, SocketAddrV4, u32, u32) {
        (link.remote, link.local, link.rcv_nxt, link.snd_nxt)
    }

    #[test]
    fn larger_address_gives_its_qpn() {
        // 10.0.0.2 is larger than 10.0.1.1: the last octet weighs most.
        let a = end([10, 0, 0, 2], 0x1_2345);
        let b = end([10, 0, 1, 1], 0x3_0007);
        let at_a = compat_link(a, b, BASE, 0);
        // A's QPN: A sends from its low 16 bits to the base plus its bits 19:16.
        assert_eq!(at_a.local, SocketAddrV4::new([10, 0, 0, 2], 0x2345));
        assert_eq!(at_a.remote, SocketAddrV4::new([10, 0, 1, 1], BASE + 1));
        let at_b = compat_link(b, a, BASE, 0);
        assert_eq!(at_b.local, SocketAddrV4::new([10, 0, 1, 1], BASE + 1));
        assert_eq!(at_b.remote, SocketAddrV4::new([10, 0, 0, 2], 0x2345));
        assert_eq!(
            mirrored(&at_a),
            (at_b.local, at_b.remote, at_b.snd_nxt, at_b.rcv_nxt)
        );
    }

    #[test]
    fn equal_addresses_give_the_smaller_qpn() {
        let ip = [192, 168, 7, 1];
        let a = end(ip, 0x8_0011);
        let b = end(ip, 0x2_0022);
        let at_a = compat_link(a, b, BASE, 0);
        let at_b = compat_link(b, a, BASE, 0);
        // B's is smaller: B sends from 0x0022 to base + 2.
        assert_eq!((at_b.local.port(), at_b.remote.port()), (0x0022, BASE + 2));
        assert_eq!((at_a.local.port(), at_a.remote.port()), (BASE + 2, 0x0022));
        assert_eq!(
            mirrored(&at_b),
            (at_a.local, at_a.remote, at_a.snd_nxt, at_a.rcv_nxt)
        );
    }

    #[test]
    fn sequence_numbers_from_the_ports_bytes() {
        // Port 0x7790 in network order read little-endian is 0x9077; times 4.
        let a = end([10, 0, 0, 9], 0x0_0400);
        let b = end([10, 0, 0, 1], 5);
        let at_a = compat_link(a, b, BASE, 0);
        assert_eq!((at_a.local.port(), at_a.remote.port()), (0x0400, BASE));
        assert_eq!(at_a.snd_nxt, 0x0004 * 4);
        assert_eq!(at_a.rcv_nxt, 0x241dc);
        let at_b = compat_link(b, a, BASE, 0);
        assert_eq!((at_b.snd_nxt, at_b.rcv_nxt), (0x241dc, 0x0004 * 4));
    }

    #[test]
    fn cookie_is_the_remote_qpn_with_bit_30() {
        let a = end([10, 0, 0, 1], 0x1);
        let b = end([10, 0, 0, 2], 0xf_fffe);
        assert_eq!(compat_link(a, b, BASE, 3).peer_cookie, 0x400f_fffe);
        assert_eq!(compat_link(b, a, BASE, 3).peer_cookie, 0x4000_0001);
        assert_eq!(compat_link(b, a, BASE, 3).cc, 3);
    }

    #[test]
    fn only_the_low_20_bits_count() {
        let a = end([10, 0, 0, 2], 0xff_2345);
        let b = end([10, 0, 0, 1], 0x10);
        let at_a = compat_link(a, b, BASE, 0);
        assert_eq!((at_a.local.port(), at_a.remote.port()), (0x2345, BASE + 15));
    }
}
