#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Records the MPA frames of iWARP connections as they cross this guest's NICs.

  mpa_sniff.py PORT OUT SECONDS
      Watches every IPv4 TCP segment to or from PORT on every interface (a
      packet socket, so both what this guest sends and what it receives) for
      SECONDS, or until it has seen one MPA request and one MPA reply, and
      writes each frame it sees once to OUT, a line each:
          req|rep SRC-IP:PORT DST-IP:PORT HEX
      HEX is the frame: the 28-byte header (erdma_rs_hw 7.1) and its private
      data, as far as this segment carries it. Prints "ready" once the
      socket is open (start the traffic after that), and exits 0, or 1 if it
      saw no frame.

  mpa_sniff.py compare FILE-A FILE-B
      Compares the request of FILE-A with the request of FILE-B and the reply
      with the reply, byte for byte but for the sender's QP cookie (bytes
      20-23, a per-QP value); prints what differs and exits 1 if anything
      does, or if a frame is missing.
"""

import signal
import socket
import struct
import sys
import time

ETH_P_ALL = 0x0003
KEYS = {b"MPA ID Req Frame": "req", b"MPA ID Rep Frame": "rep"}
HEADER = 28
COOKIE = slice(20, 24)


def segments(sock, deadline):
    """Yields (src, dst, src port, dst port, seq, payload) of the IPv4 TCP segments seen."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        sock.settimeout(left)
        try:
            pkt = sock.recv(65535)
        except socket.timeout:
            return
        # Ethernet frames on NICs; the loopback device has a zeroed Ethernet header too.
        if len(pkt) < 14 + 20 or struct.unpack("!H", pkt[12:14])[0] != 0x0800:
            continue
        ip = pkt[14:]
        ihl = (ip[0] & 15) * 4
        if ip[9] != 6 or len(ip) < ihl + 20:
            continue
        total = struct.unpack("!H", ip[2:4])[0]
        tcp = ip[ihl:total]
        sport, dport, seq = struct.unpack("!HHI", tcp[:8])
        off = (tcp[12] >> 4) * 4
        src = f"{socket.inet_ntoa(ip[12:16])}:{sport}"
        dst = f"{socket.inet_ntoa(ip[16:20])}:{dport}"
        yield src, dst, sport, dport, seq, tcp[off:]


class Stopped(Exception):
    pass


def stop(_signum, _frame):
    raise Stopped


def sniff(port, out, seconds):
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    # Killed (SIGTERM), it still writes what it saw.
    signal.signal(signal.SIGTERM, stop)
    print("ready", flush=True)
    seen = {}
    kinds = set()
    try:
        for src, dst, sport, dport, seq, payload in segments(sock, time.monotonic() + seconds):
            if port not in (sport, dport) or len(payload) < 16:
                continue
            kind = KEYS.get(payload[:16])
            # A segment seen leaving and arriving (loopback) counts once.
            if kind is None or (src, dst, seq) in seen:
                continue
            seen[(src, dst, seq)] = f"{kind} {src} {dst} {payload.hex()}"
            kinds.add(kind)
            if kinds == {"req", "rep"}:
                break
    except Stopped:
        pass
    with open(out, "w") as f:
        for line in seen.values():
            f.write(line + "\n")
    return 0 if seen else 1


def frames(path):
    got = {}
    with open(path) as f:
        for line in f:
            kind, _src, _dst, hexed = line.split()
            got.setdefault(kind, bytes.fromhex(hexed))
    return got


def masked(frame):
    return frame[:COOKIE.start] + b"\0" * 4 + frame[COOKIE.stop:]


def compare(a_path, b_path):
    a, b = frames(a_path), frames(b_path)
    bad = 0
    for kind in ("req", "rep"):
        if kind not in a or kind not in b:
            print(f"{kind}: missing in {a_path if kind not in a else b_path}")
            bad += 1
            continue
        if masked(a[kind]) != masked(b[kind]):
            print(f"{kind}: {a_path}: {a[kind].hex()} != {b_path}: {b[kind].hex()}")
            bad += 1
        else:
            print(f"{kind}: {len(a[kind])} bytes alike (cookies {a[kind][COOKIE].hex()}, "
                  f"{b[kind][COOKIE].hex()}): {masked(a[kind]).hex()}")
    return 1 if bad else 0


def main(argv):
    if len(argv) == 4 and argv[1] == "compare":
        return compare(argv[2], argv[3])
    if len(argv) == 4:
        return sniff(int(argv[1]), argv[2], float(argv[3]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
