#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""A hostile MPA peer for the iWARP connection manager (erdma_rs_hw 7.1).

  mpa_peer.py request HOST PORT CASE
      Connects to an iWARP listener at HOST:PORT and sends the malformed (or
      slow, or cut) MPA request CASE, then checks what comes back: a reject
      reply, or a close without a reply (with MPA_PEER_LENIENT set, either,
      as long as the connection ends; with MPA_PEER_ACCEPTS_256 too, a good
      reply to 256 bytes of private data). Prints one line, "ok CASE: ..." or
      "FAIL CASE: ...", and exits 0 or 1.

  mpa_peer.py reply HOST PORT CASE FRAME-FILE
      Listens on HOST:PORT for one connection (a driver's active side), reads
      its MPA request, writes the frame to FRAME-FILE (hex) and answers with
      the malformed (or slow, or cut) reply CASE. Exits once the connection
      is closed, or after 60 s.

The frames: a 16-byte key, flags (0x80 markers, 0x40 CRC, 0x20 reject), the
revision (129), a big-endian private-data length, the big-endian QP cookie,
a big-endian extension word (congestion control in bits 3:0), private data.
"""

import os
import socket
import struct
import sys
import time

KEY_REQ = b"MPA ID Req Frame"
KEY_REP = b"MPA ID Rep Frame"
REVISION = 129
HEADER = 28


def frame(key, flags=0, rev=REVISION, pd=b"", pd_len=None, cookie=0x1234, ext=0):
    if pd_len is None:
        pd_len = len(pd)
    return key + struct.pack(">BBHII", flags, rev, pd_len, cookie, ext) + pd


def parse(data):
    """Decodes a frame header: (key, flags, revision, pd_len, cookie, ext)."""
    key = data[:16]
    flags, rev, pd_len, cookie, ext = struct.unpack(">BBHII", data[16:HEADER])
    return key, flags, rev, pd_len, cookie, ext


def read_until_closed(sock, limit):
    """What the peer sends until it closes (or resets) the connection, within
    `limit` seconds: (bytes, how it ended: 'eof', 'reset' or 'timeout')."""
    sock.settimeout(0.5)
    data = b""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        try:
            chunk = sock.recv(4096)
        except socket.timeout:
            continue
        except ConnectionResetError:
            return data, "reset"
        if not chunk:
            return data, "eof"
        data += chunk
    return data, "timeout"


def recv_exact(sock, n, data=b""):
    """Reads until `data` is `n` bytes long, the peer closes, or the socket's
    timeout runs out; returns what it has."""
    try:
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        pass
    return data


def abort(sock):
    """Closes with a TCP reset (SO_LINGER 0)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def expect_reject_reply(data, how):
    if len(data) < HEADER:
        return f"expected a reject reply, got {len(data)} bytes then {how}"
    key, flags, rev, pd_len, _, _ = parse(data)
    if key != KEY_REP or not flags & 0x20 or rev != REVISION:
        return f"expected a reject reply, got key {key!r} flags {flags:#x} revision {rev}"
    if how == "timeout":
        return "the reject reply came but the connection stayed open"
    return None


def expect_closed_silently(data, how):
    if data:
        return f"expected the connection closed without a reply, got {data[:40]!r}"
    if how == "timeout":
        return "the connection stayed open"
    return None


def expect_ended(data, how):
    if how == "timeout":
        return f"the connection stayed open ({len(data)} bytes back)"
    return None


def expect_accepted(data, how):
    """A good reply (the listener took the request), whatever comes after."""
    if len(data) < HEADER:
        return f"expected a reply, got {len(data)} bytes then {how}"
    key, flags, rev, _, _, _ = parse(data)
    if key != KEY_REP or flags & 0x20 or rev != REVISION:
        return f"expected a good reply, got key {key!r} flags {flags:#x} revision {rev}"
    return None


# Each case: (bytes to send, per-byte delay, how long to wait, check).
REQUEST_CASES = {
    "wrong-key": (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n\0", 0, 10, expect_closed_silently),
    "reply-key": (frame(KEY_REP), 0, 10, expect_closed_silently),
    "revision-1": (frame(KEY_REQ, rev=1), 0, 10, expect_reject_reply),
    "revision-128": (frame(KEY_REQ, rev=128), 0, 10, expect_reject_reply),
    "markers": (frame(KEY_REQ, flags=0x80), 0, 10, expect_reject_reply),
    "crc": (frame(KEY_REQ, flags=0x40), 0, 10, expect_reject_reply),
    "pd-257": (frame(KEY_REQ, pd=b"x" * 257), 0, 10, expect_reject_reply),
    "pd-256": (frame(KEY_REQ, pd=b"x" * 256), 0, 10, expect_reject_reply),
    # Announces 200 bytes, sends 10, then nothing: the listener gives up
    # (after its wait for the request, 20 s or as the driver was loaded) and
    # closes.
    "pd-short": (frame(KEY_REQ, pd=b"x" * 10, pd_len=200), 0, 40, expect_closed_silently),
    # Half a header, then nothing.
    "half-header": (frame(KEY_REQ)[:13], 0, 40, expect_closed_silently),
    # A good request whose listener is destroyed while its user holds the
    # request unanswered (cm_hold.py): the listener's end rejects it, at once
    # (within 3 s: before the 5 s the user holds the request).
    "unanswered": (frame(KEY_REQ, pd=b"hello"), 0, 3, expect_reject_reply),
}


def request(host, port, case):
    if case.startswith("reset-after-"):
        # Connects, sends the first N bytes of a good request, then resets.
        n = int(case[len("reset-after-"):])
        s = socket.create_connection((host, port), 10)
        if n:
            s.sendall(frame(KEY_REQ, pd=b"hello")[:n])
        time.sleep(0.2)
        abort(s)
        print(f"ok {case}: sent {n} bytes, then a reset")
        return 0
    if case == "slow-good":
        # A good request one byte at a time: the listener answers with a good
        # reply (rping accepts anything), then we reset.
        s = socket.create_connection((host, port), 10)
        for b in frame(KEY_REQ, pd=b"hello", cookie=7, ext=0):
            s.sendall(bytes([b]))
            time.sleep(0.02)
        s.settimeout(20)
        data = recv_exact(s, HEADER)
        abort(s)
        if len(data) < HEADER:
            print(f"FAIL {case}: no reply ({len(data)} bytes)")
            return 1
        key, flags, rev, pd_len, cookie, ext = parse(data)
        if key != KEY_REP or flags & 0xe0 or rev != REVISION:
            print(f"FAIL {case}: reply key {key!r} flags {flags:#x} revision {rev}")
            return 1
        print(f"ok {case}: good reply, cookie {cookie:#x}, private data {pd_len} bytes, ext {ext:#x}")
        return 0
    payload, delay, wait, check = REQUEST_CASES[case]
    if os.environ.get("MPA_PEER_LENIENT"):
        # Another driver: a reject reply or a close, as long as it ends.
        check = expect_ended
        if case == "pd-256" and os.environ.get("MPA_PEER_ACCEPTS_256"):
            check = expect_accepted
    s = socket.create_connection((host, port), 10)
    if delay:
        for b in payload:
            s.sendall(bytes([b]))
            time.sleep(delay)
    else:
        s.sendall(payload)
    start = time.monotonic()
    data, how = read_until_closed(s, wait)
    s.close()
    why = check(data, how)
    took = time.monotonic() - start
    if why:
        print(f"FAIL {case}: {why}")
        return 1
    print(f"ok {case}: {len(data)} bytes back, then {how} after {took:.1f} s")
    return 0


REPLY_CASES = {
    "wrong-key": frame(b"MPA ID Req Frame", cookie=3),
    "revision-1": frame(KEY_REP, rev=1, cookie=3),
    "markers": frame(KEY_REP, flags=0x80, cookie=3),
    "crc": frame(KEY_REP, flags=0x40, cookie=3),
    "reject": frame(KEY_REP, flags=0x20, pd=b"go away", cookie=3),
    "pd-257": frame(KEY_REP, pd=b"y" * 257, cookie=3),
    "pd-short": frame(KEY_REP, pd=b"y" * 10, pd_len=100, cookie=3),
    "silent": b"",
    "slow-good": frame(KEY_REP, cookie=3),
}


def reply(host, port, case, out):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port))
    ls.listen(1)
    ls.settimeout(60)
    s, _ = ls.accept()
    ls.close()
    s.settimeout(20)
    req = recv_exact(s, HEADER)
    if len(req) == HEADER:
        req = recv_exact(s, HEADER + parse(req)[3], req)
    with open(out, "w") as f:
        f.write(req.hex() + "\n")
    data = REPLY_CASES[case]
    if case == "slow-good":
        for b in data:
            s.sendall(bytes([b]))
            time.sleep(0.02)
    elif data:
        s.sendall(data)
    if case == "pd-short":
        time.sleep(0.5)
        s.close()
        return 0
    # Wait for the driver to close its side (or for 60 s).
    read_until_closed(s, 60)
    s.close()
    return 0


def main():
    if len(sys.argv) >= 5 and sys.argv[1] == "request":
        return request(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    if len(sys.argv) >= 6 and sys.argv[1] == "reply":
        return reply(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
