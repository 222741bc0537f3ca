#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""An SMC socket program and the kernel's SMC diagnostics, for smc.sh.

Usage:
  smc_peer.py ueid EID                  add a user EID (SMC's generic netlink)
  smc_peer.py serve IP PORT EXPECT      accept one connection, check its data
  smc_peer.py connect IP PORT EXPECT MIB  send MIB MiB, get the digest back
  smc_peer.py sink IP PORT              serve make bench: SMC on PORT, TCP on PORT+1
  smc_peer.py bench IP PORT ROUND MIB PINGS  measure both (make bench's figures)

A TCP client and server using SMC sockets (AF_INET, IPPROTO_SMC), as an
application (or the smc_run preload library) makes them: the server reads
what the client sends until the client shuts its side down, answers with the
SHA-256 of it, and both compare. While the connection is up, each end looks
itself up in the kernel's SMC diagnostics (sock_diag, AF_SMC: smc_diag) and
says whether SMC-R carries it (mode SMCR, and over which RDMA device) or it
fell back to TCP (and the reason the kernel gives). EXPECT is "smcr" or
"fallback": the mode each end must see. (The diagnostics list the
sockets of both AF_SMC and IPPROTO_SMC.)

SMC-R version 2 (RoCEv2 GIDs) is proposed only with a user EID configured
(smc_find_proposal_devices: smc_clc_ueid_count()), as smc-tools' "smcr ueid
add" sets it: "ueid" does that over SMC's generic netlink family.

Prints TAP points ("ok N - ..."); exits 1 if one failed.

"sink" and "bench" are make bench's (bench_xguest.sh): the same socket
program over SMC (IPPROTO_SMC) and over plain TCP, between two guests. The
sink serves connections one at a time until it is killed; a connection's
first byte says what it is: "B" bulk (read until the client shuts its side
down, answer with the count of bytes as 8 bytes), "P" ping-pong (echo each
byte). "bench" prints make bench's raw lines, "TRANSPORT ROUND METRIC VALUE
UNIT", for TRANSPORT rdma (SMC-R) and tcp, in an order that alternates
with the round: sock_bw (MIB MiB in 1 MiB writes, MiB/s) and sock_rtt (PINGS
round trips of one byte, TCP_NODELAY, the mean in microseconds). An SMC
connection that SMC-R does not carry (smc_diag) gets "nan" and a comment
line with the reason: its figures would be TCP's.
"""

import hashlib
import os
import socket
import struct
import sys
import time
from tap_lib import status, tap

AF_SMC = 43
IPPROTO_SMC = 256
NETLINK_GENERIC = 16
NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 1, 4, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
GENL_ID_CTRL, CTRL_CMD_GETFAMILY = 0x10, 3
CTRL_ATTR_FAMILY_ID, CTRL_ATTR_FAMILY_NAME = 1, 2
SMC_NETLINK_ADD_UEID = 10
SMC_NLA_EID_TABLE_ENTRY = 1
SMC_MAX_EID_LEN = 32
# smc_diag extensions (the request's diag_ext bit n - 1 asks for attribute n).
SMC_DIAG_LGRINFO, SMC_DIAG_FALLBACK = 2, 5
MODES = {0: "SMCR", 1: "FALLBACK_TCP", 2: "SMCD"}
# Connections serve() and connect() make at most: a second only after the race of
# lost_first_contact.
ATTEMPTS = 2


def attr(kind, data):
    n = 4 + len(data)
    return struct.pack("=HH", n, kind) + data + b"\0" * ((4 - n % 4) % 4)


def attrs(buf):
    out = {}
    while len(buf) >= 4:
        n, kind = struct.unpack("=HH", buf[:4])
        if n < 4:
            break
        out[kind & 0x3fff] = buf[4:n]
        buf = buf[(n + 3) & ~3:]
    return out


def nl_talk(proto, msg_type, flags, body):
    """Sends one request; returns the payloads of the answers (an error
    message's errno raised as OSError)."""
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, proto)
    try:
        s.bind((0, 0))
        s.sendall(struct.pack("=IHHII", 16 + len(body), msg_type, flags, 1, 0) + body)
        out = []
        while True:
            data = s.recv(65536)
            while len(data) >= 16:
                n, t, _f, _seq, _pid = struct.unpack("=IHHII", data[:16])
                payload = data[16:n]
                data = data[(n + 3) & ~3:]
                if t == NLMSG_DONE:
                    return out
                if t == NLMSG_ERROR:
                    err = struct.unpack("=i", payload[:4])[0]
                    if err:
                        raise OSError(-err, os.strerror(-err))
                    return out
                out.append((t, payload))
            if not flags & NLM_F_DUMP and not flags & NLM_F_ACK:
                return out
    finally:
        s.close()


def add_ueid(eid):
    """Adds user EID `eid` (smc-tools' "smcr ueid add"); an EID already
    there is fine."""
    name = b"SMC_GEN_NETLINK\0"
    ans = nl_talk(NETLINK_GENERIC, GENL_ID_CTRL, NLM_F_REQUEST,
                  struct.pack("=BBH", CTRL_CMD_GETFAMILY, 1, 0) + attr(CTRL_ATTR_FAMILY_NAME, name))
    fam = struct.unpack("=H", attrs(ans[0][1][4:])[CTRL_ATTR_FAMILY_ID][:2])[0]
    entry = eid.upper().encode().ljust(SMC_MAX_EID_LEN, b" ") + b"\0"
    try:
        nl_talk(NETLINK_GENERIC, fam, NLM_F_REQUEST | NLM_F_ACK,
                struct.pack("=BBH", SMC_NETLINK_ADD_UEID, 1, 0) + attr(SMC_NLA_EID_TABLE_ENTRY, entry))
    except OSError as e:
        if e.errno != 17:  # EEXIST
            raise
    return fam


def diag_of(local_port, remote_port):
    """The kernel's SMC diagnostics of the SMC socket whose TCP side has
    local port `local_port` and remote port `remote_port`: (mode, RDMA device
    or None, fallback reason or None), or None if there is none."""
    req = struct.pack("=BBBB", AF_SMC, 0, 0, 0xff) + bytes(48)
    for _t, p in nl_talk(NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, req):
        if len(p) < 64:
            continue
        _fam, _state, mode, _shut = struct.unpack("=BBBB", p[:4])
        sport, dport = struct.unpack(">HH", p[4:8])
        if (sport, dport) != (local_port, remote_port):
            continue
        a = attrs(p[64:])
        ibname = None
        if SMC_DIAG_LGRINFO in a:
            # struct smc_diag_linkinfo: link_id, ibname[64], ...
            ibname = a[SMC_DIAG_LGRINFO][1:65].split(b"\0")[0].decode() or None
        reason = None
        if SMC_DIAG_FALLBACK in a:
            reason = struct.unpack("=II", a[SMC_DIAG_FALLBACK][:8])
        return MODES.get(mode, str(mode)), ibname, reason
    return None


# SMC's CLC decline reasons (net/smc/smc_clc.h) that name the first-contact race below.
DECL_TIMEOUT_CL, DECL_PEERDECL = 0x02010000, 0x05000000


def lost_first_contact(side, got):
    """Whether the connection `got` (diag_of) fell back to TCP by the race of
    SMC's first contact: the server declines with "timeout waiting for CONFIRM
    LINK" (0x2010000), the client with "peer declined" (0x5000000, peer
    0x2010000). The client sends its CLC CONFIRM before its LLC flow waits for
    the server's CONFIRM LINK (smc_connect_rdma: smc_clc_send_confirm, then
    smc_llc_flow_initiate); a CONFIRM LINK handled in between finds no flow and
    is freed (smc_llc_event_handler), so the server's wait times out and its
    DELETE LINK is the first message the client's flow gets ("dropped
    unexpected LLC msg: msg 4 exp 1" in the client's log). It takes the
    client's vCPU held off between the two steps for the server's whole round
    trip: make check's loaded host did that in its last two runs (the same
    signature both times); 18 first contacts on an idle or a busy-looped host
    did not. The adapter delivered that CONFIRM LINK: the model logs the
    requests it loses, and its log had none."""
    if got is None or got[0] != "FALLBACK_TCP" or got[2] is None:
        return False
    reason, peer = got[2]
    if side == "server":
        return reason == DECL_TIMEOUT_CL
    return reason == DECL_PEERDECL and peer == DECL_TIMEOUT_CL


def check_mode(side, sock, expect, last=True):
    """Asks the kernel's SMC diagnostics who carries the connection of `sock`
    and makes it a TAP point; returns False instead if SMC-R was expected, the
    connection lost its first contact to the race of lost_first_contact and
    this is not the `last` attempt (the point then belongs to the next)."""
    port, peer = sock.getsockname()[1], sock.getpeername()[1]
    got = diag_of(port, peer)
    if got is None:
        tap(f"{side}: the kernel's SMC diagnostics list the connection", False,
            f"no AF_SMC socket of local port {port}")
        return True
    mode, ibname, reason = got
    detail = f"mode {mode}" + (f" over {ibname}" if ibname else "") + \
        (f", fallback reason {reason[0]:#x} (peer {reason[1]:#x})" if reason and mode != "SMCR" else "")
    if expect == "smcr" and not last and lost_first_contact(side, got):
        print(f"# {side}: {detail}: SMC's first contact lost its CONFIRM LINK to the race of "
              "the client's LLC flow (smc_peer.py lost_first_contact); a second connection")
        return False
    if expect == "smcr":
        tap(f"{side}: SMC-R carries the connection (smc_diag: mode SMCR, an RDMA device)",
            mode == "SMCR" and bool(ibname), detail)
    else:
        tap(f"{side}: the connection fell back to TCP (smc_diag: mode FALLBACK_TCP)",
            mode == "FALLBACK_TCP", detail)
    return True


def recv_exact(sock, n):
    """Up to `n` bytes from `sock`: fewer only if the peer shut its side down first."""
    answer = b""
    while len(answer) < n:
        data = sock.recv(n - len(answer))
        if not data:
            break
        answer += data
    return answer


def stream(seed, mib):
    """MIB MiB of data made from `seed`, in 64 KiB pieces."""
    block = hashlib.sha256(seed).digest() * 2048
    for i in range(mib * 16):
        yield bytes(b ^ (i & 0xff) for b in block[:64]) + block[64:]


def serve(ip, port, expect):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_SMC)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((ip, port))
    ls.listen(1)
    ls.settimeout(180)
    for attempt in range(ATTEMPTS):
        conn, peer = ls.accept()
        ls.settimeout(60)
        conn.settimeout(120)
        h = hashlib.sha256()
        total = 0
        counted = None
        while True:
            data = conn.recv(1 << 20)
            if not data:
                break
            if counted is None:
                counted = check_mode("server", conn, expect, attempt == ATTEMPTS - 1)
            h.update(data)
            total += len(data)
        conn.sendall(h.digest())
        conn.shutdown(socket.SHUT_WR)
        conn.recv(1)
        conn.close()
        if counted is not False:
            break
    ls.close()
    print(f"# server: {total} bytes from {peer[0]}")
    tap("server: the client's data arrived", total > 0, f"{total} bytes")


def connect_once(ip, port, expect, mib, last):
    """One connection of connect(); returns whether it counted (check_mode)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_SMC)
    s.settimeout(120)
    deadline = time.time() + 60
    while True:
        try:
            s.connect((ip, port))
            break
        except (ConnectionRefusedError, socket.timeout):
            if time.time() > deadline:
                raise
            time.sleep(0.5)
            s.close()
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_SMC)
            s.settimeout(120)
    h = hashlib.sha256()
    start = time.time()
    counted = None
    for piece in stream(b"erdma-rs smc", mib):
        s.sendall(piece)
        h.update(piece)
        if counted is None:
            counted = check_mode("client", s, expect, last)
    s.shutdown(socket.SHUT_WR)
    answer = recv_exact(s, 32)
    took = time.time() - start
    s.close()
    if not counted:
        if answer != h.digest():
            tap(f"client: {mib} MiB sent over TCP, the server's SHA-256 of them matches", False)
        return False
    tap(f"client: {mib} MiB sent, the server's SHA-256 of them matches", answer == h.digest(),
        f"{mib / took:.1f} MiB/s")
    return True


def connect(ip, port, expect, mib):
    for attempt in range(ATTEMPTS):
        if connect_once(ip, port, expect, mib, attempt == ATTEMPTS - 1):
            break


def sink_conn(conn):
    conn.settimeout(120)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    kind = conn.recv(1)
    if kind == b"B":
        total = 0
        while True:
            data = conn.recv(1 << 20)
            if not data:
                break
            total += len(data)
        conn.sendall(struct.pack("=Q", total))
    elif kind == b"P":
        while True:
            data = conn.recv(1)
            if not data:
                break
            conn.sendall(data)
    conn.close()


def sink(ip, port):
    import threading

    def serve_on(proto, p):
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM, proto)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((ip, p))
        ls.listen(4)
        while True:
            conn, _ = ls.accept()
            try:
                sink_conn(conn)
            except OSError as e:
                print(f"# sink: {e}", flush=True)

    threads = [threading.Thread(target=serve_on, args=a, daemon=True)
               for a in ((IPPROTO_SMC, port), (socket.IPPROTO_TCP, port + 1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def bench_conn(ip, port, proto, kind):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, proto)
    s.settimeout(120)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.connect((ip, port))
    s.sendall(kind)
    if proto == IPPROTO_SMC:
        got = diag_of(s.getsockname()[1], s.getpeername()[1])
        if got is None or got[0] != "SMCR":
            s.close()
            return None, f"SMC-R does not carry it (smc_diag: {got})"
    return s, None


def bench(ip, port, rnd, mib, pings):
    order = [("rdma", IPPROTO_SMC, port), ("tcp", socket.IPPROTO_TCP, port + 1)]
    if rnd % 2 == 0:
        order.reverse()
    buf = bytes(range(256)) * 4096
    for name, proto, p in order:
        s, why = bench_conn(ip, p, proto, b"B")
        if s is None:
            print(f"# round {rnd}: {name} bulk: {why}")
            print(f"{name} {rnd} sock_bw nan -")
        else:
            start = time.perf_counter()
            for _ in range(mib):
                s.sendall(buf)
            s.shutdown(socket.SHUT_WR)
            answer = recv_exact(s, 8)
            took = time.perf_counter() - start
            s.close()
            ok = len(answer) == 8 and struct.unpack("=Q", answer)[0] == mib << 20
            if not ok:
                print(f"# round {rnd}: {name} bulk: the server counted {answer!r}, not {mib << 20} bytes")
            print(f"{name} {rnd} sock_bw {mib / took if ok else 'nan'} MiB/s")
        s, why = bench_conn(ip, p, proto, b"P")
        if s is None:
            print(f"# round {rnd}: {name} ping-pong: {why}")
            print(f"{name} {rnd} sock_rtt nan -")
            continue
        start = time.perf_counter()
        ok = True
        for _ in range(pings):
            s.sendall(b"x")
            if s.recv(1) != b"x":
                ok = False
                break
        took = time.perf_counter() - start
        s.close()
        print(f"{name} {rnd} sock_rtt {took / pings * 1e6 if ok else 'nan'} us")
    return 0


def main():
    cmd = sys.argv[1]
    if cmd == "sink":
        sink(sys.argv[2], int(sys.argv[3]))
        return 0
    if cmd == "bench":
        return bench(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
    if cmd == "ueid":
        try:
            add_ueid(sys.argv[2])
            tap(f"user EID {sys.argv[2].upper()} added (SMC's generic netlink)", True)
        except OSError as e:
            tap(f"user EID {sys.argv[2].upper()} added (SMC's generic netlink)", False, str(e))
    elif cmd == "serve":
        serve(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    elif cmd == "connect":
        connect(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
    return status()


if __name__ == "__main__":
    sys.exit(main())
