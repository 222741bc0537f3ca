#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Floods for an iWARP connection manager's listener (cm_flood.sh).

  cm_flood.py flood HOST PORT N SECONDS
      Opens N TCP connections to HOST:PORT as fast as they are taken
      (non-blocking), and sends on each, in turn, nothing, half an MPA
      request header, or 28 bytes of garbage; never a whole request. Prints
      "holding ..." once all are opened, then holds them SECONDS more,
      replacing each one the listener closes with one that sends nothing
      (keeping 32 such open, up to N replacements), then closes them all
      (every other one with a reset) and prints a summary. Exits 0 unless it
      could not open its sockets.

  cm_flood.py hammer HOST PORT SECONDS
      For SECONDS, keeps up to 24 connections to HOST:PORT in flight (at
      most 100 new ones a second), each
      closing or resetting at once, after half a header, after garbage, or
      after a whole good MPA request (which the listener's user accepts or
      not), within 0.4 s. Connections refused (the listener gone) are
      counted, and it goes on. Prints a summary; exits 0.

  cm_flood.py serve ADDR PORT N
  cm_flood.py connect DST SRC PORT N
      N rdma_cm connections in a row (pyverbs, RC, one queue pair each): the
      client sends a message, the server answers, the client says goodbye,
      both disconnect (the second may find the first's: EINVAL, counted) and
      close. Each side checks every message and every
      completion; prints "done N" and exits 0, or the error and exits 1.
"""

import errno
import os
import random
import resource
import selectors
import socket
import struct
import sys
import time

KEY_REQ = b"MPA ID Req Frame"
KEY_REP = b"MPA ID Rep Frame"


def mpa_request(pd=b""):
    # key, flags 0, revision 129, private data length, cookie, extension word
    return KEY_REQ + struct.pack(">BBHII", 0, 129, len(pd), 0x5eed, 0) + pd


def abort(sock):
    """Closes with a TCP reset."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def flood(host, port, n, seconds):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n + 256
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
    sel = selectors.DefaultSelector()
    kinds = ("silent", "partial", "garbage")
    payload = {"silent": b"", "partial": mpa_request()[:13], "garbage": bytes(range(28))}
    state = {}
    start = time.monotonic()

    def open_one(kind):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        rc = s.connect_ex((host, port))
        if rc in (0, errno.EINPROGRESS):
            state[s] = ["connecting", kind, 0]
            sel.register(s, selectors.EVENT_WRITE)
        else:
            state[s] = [f"connect:{errno.errorcode.get(rc, rc)}", kind, 0]
            s.close()

    def events(timeout):
        for key, ev in sel.select(timeout=timeout):
            s = key.fileobj
            st = state[s]
            if ev & selectors.EVENT_WRITE and st[0] == "connecting":
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    st[0] = f"connect:{errno.errorcode.get(err, err)}"
                    sel.unregister(s)
                    s.close()
                    continue
                st[0] = "open"
                try:
                    if payload[st[1]]:
                        s.send(payload[st[1]])
                except OSError as e:
                    st[0] = f"send:{errno.errorcode.get(e.errno, e.errno)}"
                    sel.unregister(s)
                    s.close()
                    continue
                sel.modify(s, selectors.EVENT_READ)
            elif ev & selectors.EVENT_READ:
                try:
                    data = s.recv(4096)
                except ConnectionResetError:
                    data = None
                except OSError as e:
                    st[0] = f"recv:{errno.errorcode.get(e.errno, e.errno)}"
                    sel.unregister(s)
                    s.close()
                    continue
                if data:
                    st[2] += len(data)
                    continue
                st[0] = "closed by the listener" if data == b"" else "reset by the listener"
                st.append(time.monotonic() - start)
                sel.unregister(s)
                s.close()

    # Opened as fast as the listener's side takes them, events handled between.
    for i in range(n):
        open_one(kinds[i % 3])
        if i % 16 == 15:
            events(0)
    print(f"holding: {n} connections opened in {time.monotonic() - start:.1f} s: {counts(state)}",
          flush=True)
    # Held SECONDS after the last one; every connection the listener closes
    # is replaced by a silent one, up to N more: the listener's backlog
    # stays full of connections that never send their request.
    end = time.monotonic() + seconds
    extra = 0
    while time.monotonic() < end:
        events(min(0.2, max(0, end - time.monotonic())))
        pending = sum(1 for v in state.values() if v[0] in ("open", "connecting") and v[1] == "silent")
        while pending < 32 and extra < n:
            open_one("silent")
            pending += 1
            extra += 1
    summary = counts(state)
    got = sum(v[2] for v in state.values())
    for i, (s, st) in enumerate(state.items()):
        if st[0] in ("open", "connecting"):
            sel.unregister(s)
            if i % 2:
                abort(s)
            else:
                s.close()
    closed_at = sorted(v[3] for v in state.values() if len(v) > 3)
    when = ""
    if closed_at:
        when = f"; the listener closed them {closed_at[0]:.1f} to {closed_at[-1]:.1f} s after the start"
    print(f"flood summary: {n} + {extra} replacements in {time.monotonic() - start:.0f} s: {summary}; "
          f"{got} bytes came back{when}", flush=True)
    return 0


def counts(state):
    c = {}
    for st, kind, _ in (v[:3] for v in state.values()):
        c[st] = c.get(st, 0) + 1
    open_kinds = {}
    for v in state.values():
        if v[0] == "open":
            open_kinds[v[1]] = open_kinds.get(v[1], 0) + 1
    text = ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
    if open_kinds:
        text += " (open: " + ", ".join(f"{k} {v}" for k, v in sorted(open_kinds.items())) + ")"
    return text


def hammer(host, port, seconds):
    rng = random.Random(port)
    sel = selectors.DefaultSelector()
    actions = ("close", "reset", "partial", "garbage", "good", "good")
    c = {"attempted": 0, "connected": 0, "refused": 0, "other errors": 0,
         "replies": 0, "rejects": 0, "closed by the listener": 0}
    live = {}
    end = time.monotonic() + seconds
    # At most 100 new connections a second: pressure, not a busy loop.
    next_at = time.monotonic()
    while time.monotonic() < end:
        while len(live) < 24 and time.monotonic() >= next_at:
            next_at += 0.01
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            c["attempted"] += 1
            rc = s.connect_ex((host, port))
            if rc not in (0, errno.EINPROGRESS):
                c["refused" if rc == errno.ECONNREFUSED else "other errors"] += 1
                s.close()
                time.sleep(0.02)
                continue
            live[s] = [rng.choice(actions), time.monotonic() + rng.uniform(0, 0.4), False, b""]
            sel.register(s, selectors.EVENT_WRITE)
        for key, ev in sel.select(timeout=0.05):
            s = key.fileobj
            st = live[s]
            if not st[2]:
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    c["refused" if err == errno.ECONNREFUSED else "other errors"] += 1
                    next_at = time.monotonic() + 0.02
                    del live[s]
                    sel.unregister(s)
                    s.close()
                    continue
                st[2] = True
                c["connected"] += 1
                data = {"partial": mpa_request()[:13], "garbage": b"\xff" * 28,
                        "good": mpa_request(b"hammer")}.get(st[0], b"")
                try:
                    if data:
                        s.send(data)
                except OSError:
                    pass
                sel.modify(s, selectors.EVENT_READ)
                continue
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if data:
                st[3] += data
                continue
            c["closed by the listener"] += 1
            finish(s, st, c)
            del live[s]
            sel.unregister(s)
        now = time.monotonic()
        for s in [s for s, st in live.items() if st[1] <= now]:
            st = live.pop(s)
            sel.unregister(s)
            finish(s, st, c)
            if st[0] == "reset" or rng.random() < 0.5:
                abort(s)
            else:
                s.close()
    for s, st in live.items():
        finish(s, st, c)
        abort(s)
    print("hammer summary: " + ", ".join(f"{k} {v}" for k, v in c.items()), flush=True)
    return 0


def finish(s, st, c):
    """Counts the MPA reply the connection got, if any."""
    if len(st[3]) >= 28 and st[3][:16] == KEY_REP:
        c["rejects" if st[3][16] & 0x20 else "replies"] += 1
    st[3] = b""
    try:
        s.close()
    except OSError:
        pass


def rc_attr():
    from pyverbs.qp import QPCap, QPInitAttr
    import pyverbs.enums as e
    return QPInitAttr(qp_type=e.IBV_QPT_RC,
                      cap=QPCap(max_send_wr=2, max_recv_wr=2, max_send_sge=1, max_recv_sge=1))


def check_wc(wc, what):
    import pyverbs.enums as e
    if wc is None or wc.status != e.IBV_WC_SUCCESS:
        raise RuntimeError(f"{what}: completion status {None if wc is None else wc.status}")


def disconnect(c):
    """Disconnects; 1 where the peer's disconnect came first and this one
    failed with EINVAL (rdma_cm's, where it finds the connection gone; erdma_rs
    took a stop request on a queue pair the peer had stopped as EINVAL too
    until 2026-11-28), else 0."""
    from pyverbs.pyverbs_error import PyverbsRDMAError
    try:
        c.disconnect()
    except PyverbsRDMAError as ex:
        if ex.error_code != errno.EINVAL:
            raise
        return 1
    return 0


def serve(addr, port, n):
    import pyverbs.cm_enums as ce
    from pyverbs.cmid import AddrInfo, CMID
    ai = AddrInfo(src=addr, src_service=str(port), port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE)
    listener = CMID(creator=ai, qp_init_attr=rc_attr())
    listener.listen()
    print("listening", flush=True)
    late = 0
    for i in range(n):
        c = listener.get_request()
        rmr = c.reg_msgs(64)
        smr = c.reg_msgs(64)
        c.post_recv(rmr)
        c.accept()
        check_wc(c.get_recv_comp(), f"connection {i}: the request message")
        got = rmr.read(64, 0).rstrip(b"\0")
        if got != f"storm {i}".encode():
            raise RuntimeError(f"connection {i}: got {got!r}")
        c.post_recv(rmr)
        smr.write(f"reply {i}".encode().ljust(64, b"\0"), 64)
        c.post_send(smr)
        check_wc(c.get_send_comp(), f"connection {i}: the reply")
        check_wc(c.get_recv_comp(), f"connection {i}: the goodbye")
        got = rmr.read(64, 0).rstrip(b"\0")
        if got != f"bye {i}".encode():
            raise RuntimeError(f"connection {i}: got {got!r} for the goodbye")
        late += disconnect(c)
        c.close()
    listener.close()
    print(f"done {n}; {late} disconnects found the client's first (EINVAL)", flush=True)
    return 0


def connect(dst, src, port, n):
    import pyverbs.cm_enums as ce
    from pyverbs.cmid import AddrInfo, CMID
    from pyverbs.pyverbs_error import PyverbsRDMAError
    start = time.monotonic()
    late = 0
    for i in range(n):
        where = f"connection {i}"
        ai = AddrInfo(src=src, dst=dst, dst_service=str(port), port_space=ce.RDMA_PS_TCP)
        c = CMID(creator=ai, qp_init_attr=rc_attr())
        rmr = c.reg_msgs(64)
        smr = c.reg_msgs(64)
        c.post_recv(rmr)
        try:
            c.connect()
        except PyverbsRDMAError as ex:
            raise RuntimeError(f"{where}: {ex}") from ex
        smr.write(f"storm {i}".encode().ljust(64, b"\0"), 64)
        c.post_send(smr)
        check_wc(c.get_send_comp(), f"connection {i}: the request message")
        check_wc(c.get_recv_comp(), f"connection {i}: the reply")
        got = rmr.read(64, 0).rstrip(b"\0")
        if got != f"reply {i}".encode():
            raise RuntimeError(f"connection {i}: got {got!r}")
        smr.write(f"bye {i}".encode().ljust(64, b"\0"), 64)
        c.post_send(smr)
        check_wc(c.get_send_comp(), f"connection {i}: the goodbye")
        late += disconnect(c)
        c.close()
    print(f"done {n} in {time.monotonic() - start:.1f} s; {late} disconnects found the server's "
          f"first (EINVAL)", flush=True)
    return 0


def main(argv):
    try:
        if argv[1] == "flood":
            return flood(argv[2], int(argv[3]), int(argv[4]), float(argv[5]))
        if argv[1] == "hammer":
            return hammer(argv[2], int(argv[3]), float(argv[4]))
        if argv[1] == "serve":
            return serve(argv[2], int(argv[3]), int(argv[4]))
        if argv[1] == "connect":
            return connect(argv[2], argv[3], int(argv[4]), int(argv[5]))
    except Exception as e:  # pylint: disable=broad-except
        print(f"cm_flood.py {argv[1]}: {type(e).__name__}: {e}", flush=True)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
