#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Unit tests of the guest's mpa_sniff.py (tools/testing/selftests/rdma/erdma_rs):
that it finds MPA frames in the Ethernet frames a packet socket returns, and that
its comparison of two drivers' frames ignores the QP cookie and nothing else
(make check runs them; no guest).

    python3 -m unittest discover -s scripts -p 'test_*.py'
"""

import os
import socket
import struct
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                "testing", "selftests", "rdma", "erdma_rs"))
import mpa_sniff  # noqa: E402


def mpa(key, cookie, ext=0, pd=b"", flags=0, rev=129):
    return key + struct.pack(">BBHII", flags, rev, len(pd), cookie, ext) + pd


REQ = b"MPA ID Req Frame"
REP = b"MPA ID Rep Frame"


def ethernet(src, dst, sport, dport, seq, payload):
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 5 << 4, 0x18, 65535, 0, 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0, 0, 64, 6, 0,
                     socket.inet_aton(src), socket.inet_aton(dst)) + tcp
    return b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip


class FakeSocket:
    def __init__(self, packets):
        self.packets = list(packets)

    def settimeout(self, _t):
        pass

    def recv(self, _n):
        if not self.packets:
            raise socket.timeout
        return self.packets.pop(0)


class Frames(unittest.TestCase):
    def write(self, lines):
        f = tempfile.NamedTemporaryFile("w", suffix=".frames", delete=False)
        f.write("".join(line + "\n" for line in lines))
        f.close()
        self.addCleanup(os.unlink, f.name)
        return f.name

    def test_segments_parse_tcp_payload(self):
        pkt = ethernet("169.254.59.2", "169.254.59.1", 45713, 18801, 7, mpa(REQ, 5))
        got = list(mpa_sniff.segments(FakeSocket([b"\x00" * 20, pkt]), time.monotonic() + 5))
        self.assertEqual(got, [("169.254.59.2:45713", "169.254.59.1:18801", 45713, 18801, 7,
                                mpa(REQ, 5))])

    def test_alike_but_for_the_cookie(self):
        a = self.write([f"req a b {mpa(REQ, 1).hex()}", f"rep b a {mpa(REP, 2).hex()}"])
        b = self.write([f"req a b {mpa(REQ, 9).hex()}", f"rep b a {mpa(REP, 8).hex()}"])
        self.assertEqual(mpa_sniff.compare(a, b), 0)

    def test_any_other_byte_differs(self):
        a = self.write([f"req a b {mpa(REQ, 1).hex()}", f"rep b a {mpa(REP, 2).hex()}"])
        for other in (mpa(REP, 2, ext=1), mpa(REP, 2, flags=0x20), mpa(REP, 2, pd=b"x")):
            b = self.write([f"req a b {mpa(REQ, 1).hex()}", f"rep b a {other.hex()}"])
            self.assertEqual(mpa_sniff.compare(a, b), 1, other.hex())

    def test_a_missing_frame_fails(self):
        a = self.write([f"req a b {mpa(REQ, 1).hex()}", f"rep b a {mpa(REP, 2).hex()}"])
        b = self.write([f"req a b {mpa(REQ, 1).hex()}"])
        self.assertEqual(mpa_sniff.compare(a, b), 1)


if __name__ == "__main__":
    unittest.main()
