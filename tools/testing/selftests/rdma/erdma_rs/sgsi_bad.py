#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Hostile datagrams at compat mode's software GSI, from an ordinary UDP socket.

Usage: sgsi_bad.py IBDEV DST_IP SRC_IP

SRC_IP is the address of another adapter in compat mode: the answer goes to
its software GSI (SRC_IP:4791), which counts it received.

The software GSI of IBDEV (erdma_rs in compat mode, issue 31) listens on
DST_IP:4791 for RoCEv2 UD packets (BTH, DETH, a MAD, ICRC). This script
sends it datagrams from SRC_IP that are each wrong in one way, built here
independently of the driver (the ICRC with zlib.crc32, as InfiniBand Annex
A17 computes it: the masked IPv4 and UDP headers after eight bytes of ones,
in the byte order of the kernel's software RoCE), and checks that each is
dropped and counted under its reason in the port's hw_counters, and that a
well-formed MAD reaches the MAD layer, whose answer (an unsupported
management class) the driver sends back from DST_IP's socket: captured on
the loopback device, its headers and ICRC are checked here the same way, so
the driver's ICRC is proven against this independent one in both
directions. A flood of bad datagrams then costs counters only.

The datagrams leave an unconnected socket with Don't Fragment set, so their
IPv4 identification is 0 and the header is known here for the ICRC.

Prints TAP points ("ok N - ..."), one per check, and exits 1 if one failed.
"""

import os
import socket
import struct
import sys
import time
import zlib
from tap_lib import status, tap

PORT = 4791
GSI_QKEY = 0x80010000
IP_MTU_DISCOVER = 10
IP_PMTUDISC_DO = 2


def counters(ibdev):
    d = f"/sys/class/infiniband/{ibdev}/ports/1/hw_counters"
    return {n: int(open(os.path.join(d, n)).read()) for n in os.listdir(d)
            if n.startswith("sgsi_")}


def icrc(src, dst, sport, body):
    """The ICRC of BTH+DETH+payload `body` from src:sport to dst:4791."""
    total = 20 + 8 + len(body) + 4
    ip = (bytes([0x45, 0xff]) + struct.pack(">H", total) +
          bytes([0, 0, 0x40, 0, 0xff, 17, 0xff, 0xff]) +
          socket.inet_aton(src) + socket.inet_aton(dst))
    udp = struct.pack(">HHH", sport, PORT, 8 + len(body) + 4) + b"\xff\xff"
    masked = bytearray(body)
    masked[4] = 0xff
    return struct.pack("<I", zlib.crc32(b"\xff" * 8 + ip + udp + bytes(masked)))


def capture():
    """A raw socket seeing every IPv4 packet on the loopback device."""
    c = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
    c.bind(("lo", 0))
    c.settimeout(0.5)
    return c


def answer_of(cap, src, dst, tid, seconds=5):
    """The first RoCEv2 datagram from src to dst:4791 carrying a MAD with
    transaction id `tid` that `cap` sees within `seconds`: (IP header, UDP
    source port, UDP payload), or None."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            pkt = cap.recv(2048)
        except socket.timeout:
            continue
        if len(pkt) < 28 or pkt[9] != 17 or pkt[12:16] != socket.inet_aton(src) or \
                pkt[16:20] != socket.inet_aton(dst):
            continue
        ihl = (pkt[0] & 0xf) * 4
        sport, dport, ulen = struct.unpack(">HHH", pkt[ihl:ihl + 6])
        body = pkt[ihl + 8:ihl + ulen]
        if dport == PORT and len(body) >= 20 + 24 and body[20 + 8:20 + 16] == tid:
            return pkt[:ihl], sport, body
    return None


def packet(src, dst, sport, opcode=0x64, tver=0, pkey=0xffff, dqpn=1,
           qkey=GSI_QKEY, sqpn=1, payload=None, bad_icrc=False):
    if payload is None:
        # A Get of a management class nobody registered (base version 1,
        # class 0x2f, class version 1, method Get), transaction id "sgsitest":
        # the MAD layer answers it with an error status.
        payload = bytes([1, 0x2f, 1, 1]) + bytes(4) + b"sgsitest" + bytes(240)
    bth = struct.pack(">BBHII", opcode, tver & 0xf, pkey, dqpn & 0xffffff, 7)
    deth = struct.pack(">II", qkey, sqpn & 0xffffff)
    body = bth + deth + payload
    crc = icrc(src, dst, sport, body)
    if bad_icrc:
        crc = bytes([crc[0] ^ 1]) + crc[1:]
    return body + crc


def ibdev_of_ip(ip):
    """The RDMA device with a GID of IPv4 address `ip`, if any."""
    want = "0000:0000:0000:0000:0000:ffff:" + "%02x%02x:%02x%02x" % tuple(socket.inet_aton(ip))
    for dev in os.listdir("/sys/class/infiniband"):
        gids = f"/sys/class/infiniband/{dev}/ports/1/gids"
        for g in os.listdir(gids):
            try:
                if open(os.path.join(gids, g)).read().strip() == want:
                    return dev
            except OSError:
                pass
    return None


def udp_drops(ip):
    """The drops the kernel counted on the UDP socket bound to ip:4791."""
    want = "%08X:%04X" % (struct.unpack("<I", socket.inet_aton(ip))[0], PORT)
    for line in open("/proc/net/udp").read().splitlines()[1:]:
        f = line.split()
        if f[1] == want:
            return int(f[-1])
    return 0


def main():
    ibdev, dst, src = sys.argv[1:4]
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
    s.bind((src, 0))
    sport = s.getsockname()[1]

    def send(data, settle=0.3):
        s.sendto(data, (dst, PORT))
        time.sleep(settle)

    def expect(name, data, counter, n=1):
        before = counters(ibdev)
        send(data)
        deadline = time.time() + 5
        while True:
            after = counters(ibdev)
            delta = {k: after[k] - before[k] for k in after if after[k] != before[k]}
            if delta.get(counter, 0) >= n or time.time() > deadline:
                break
            time.sleep(0.2)
        want = {counter: n}
        tap(name, delta == want, f"counters changed: {delta}, want {want}")

    good = dict(src=src, dst=dst, sport=sport)
    expect("a datagram shorter than BTH, DETH and ICRC is dropped (sgsi_rx_bad_length)",
           b"\x64" * 10, "sgsi_rx_bad_length")
    expect("a datagram longer than any MAD packet is dropped (sgsi_rx_bad_length)",
           packet(**good, payload=bytes(512)), "sgsi_rx_bad_length")
    expect("an RC opcode is dropped (sgsi_rx_bad_header)",
           packet(**good, opcode=0x04), "sgsi_rx_bad_header")
    expect("header version 1 is dropped (sgsi_rx_bad_header)",
           packet(**good, tver=1), "sgsi_rx_bad_header")
    expect("a wrong ICRC is dropped (sgsi_rx_bad_icrc)",
           packet(**good, bad_icrc=True), "sgsi_rx_bad_icrc")
    expect("a Q_Key that is not the GSI's is dropped (sgsi_rx_bad_key)",
           packet(**good, qkey=0x1234), "sgsi_rx_bad_key")
    expect("another partition's P_Key is dropped (sgsi_rx_bad_key)",
           packet(**good, pkey=0x8001), "sgsi_rx_bad_key")
    expect("a destination QP that is not the GSI QP is dropped (sgsi_rx_unknown_qp)",
           packet(**good, dqpn=0x1234), "sgsi_rx_unknown_qp")
    # A well-formed MAD: received, and answered.
    cap = capture()
    peer = ibdev_of_ip(src)
    before, peer_before = counters(ibdev), counters(peer) if peer else {}
    send(packet(**good))
    got = answer_of(cap, dst, src, b"sgsitest")
    time.sleep(0.5)
    after, peer_after = counters(ibdev), counters(peer) if peer else {}
    delta = {k: after[k] - before[k] for k in after if after[k] != before[k]}
    tap("a well-formed MAD, its ICRC made here, is received (sgsi_rx_packets) and answered "
        "(sgsi_tx_packets)", delta == {"sgsi_rx_packets": 1, "sgsi_tx_packets": 1},
        f"counters changed: {delta}")
    if got is None:
        tap("the answer is on the wire", False, "none captured on lo within 5 s")
    else:
        ip, asport, body = got
        crc_ok = icrc(dst, src, asport, body[:-4]) == body[-4:] and ip[4:6] == b"\0\0" and \
            ip[6] & 0x40 and len(ip) == 20
        bth0, _flags, _pkey, dqpn = struct.unpack(">BBHI", body[:8])
        qkey, sqpn = struct.unpack(">II", body[12:20])
        mad = body[20:-4]
        tap("the answer's ICRC, computed here from its IPv4 header (identification 0, DF), "
            "matches", bool(crc_ok), f"sent {body[-4:].hex()}, ip {ip.hex()}")
        tap("the answer is a UD SEND Only from QP 1 to QP 1 with the GSI Q_Key: a GetResp "
            "with an error status", bth0 == 0x64 and dqpn & 0xffffff == 1 and qkey == GSI_QKEY
            and sqpn & 0xffffff == 1 and len(mad) == 256 and mad[3] == 0x81 and
            (mad[4] or mad[5]), f"opcode {bth0:#x}, dest QP {dqpn}, Q_Key {qkey:#x}, "
            f"source QP {sqpn}, method {mad[3]:#x}, status {mad[4:6].hex()}")
    if peer:
        d = peer_after["sgsi_rx_packets"] - peer_before["sgsi_rx_packets"]
        tap(f"{peer}, {src}'s adapter, received the answer (sgsi_rx_packets)", d == 1,
            f"+{d}")

    # A flood: every datagram is refused, none reaches the log.
    flood = [b"\x00" * 30, packet(**good, bad_icrc=True), packet(**good, dqpn=9)]
    before, drops_before = counters(ibdev), udp_drops(dst)
    n = 3000
    for i in range(n):
        s.sendto(flood[i % 3], (dst, PORT))
    time.sleep(3)
    after, drops = counters(ibdev), udp_drops(dst) - drops_before
    refused = sum(after[k] - before[k] for k in after
                  if k.startswith("sgsi_rx_") and k != "sgsi_rx_packets")
    delivered = after["sgsi_rx_packets"] - before["sgsi_rx_packets"]
    # The socket's receive buffer may overflow under the flood (the kernel
    # counts those drops on the socket); every datagram that reached the
    # driver is refused, none delivered.
    tap(f"a flood of {n} bad datagrams: each one the socket took is refused, none delivered",
        refused > 0 and refused + drops == n and delivered == 0,
        f"refused {refused}, dropped by the socket {drops}, delivered {delivered}")
    return status()


if __name__ == "__main__":
    sys.exit(main())
