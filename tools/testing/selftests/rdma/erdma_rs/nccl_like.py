#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""RC queue pairs set up and driven as NCCL's IB transport does, through the stock provider.

Usage:
  nccl_like.py server IBDEV GID_INDEX IP PORT [options]
  nccl_like.py client IBDEV GID_INDEX IP PORT [options]

IP and PORT are the server's. Both ends open IBDEV, create --qps RC queue
pairs on one CQ (NCCL_IB_QPS_PER_CONNECTION), register a ring of receive
slots and a FIFO of "clear to send" entries, and exchange over a TCP bootstrap
connection what NCCL exchanges: each queue pair's number and first PSN, the
GID at GID_INDEX (NCCL_IB_GID_INDEX) and the MTU, the regions' addresses and
keys. Then each queue pair goes INIT, RTR (an address vector with the peer's
GID, the peer's QPN and PSN) and RTS by ibv_modify_qp alone: no rdma_cm, as on
RoCEv2 and on iWARP adapters in compat mode (erdma_rs_hw 7.3). With --cm
(standard iWARP, whose queue pairs reach RTS only through a connection
manager) each queue pair is connected by rdma_cm instead, passing its QPN in
the connection parameters (the "external QP" of rdma_connect/rdma_accept);
GID_INDEX is then unused (give -).

Workloads (--work, in turn; both by default):
  nccl   The client sends --messages messages of assorted sizes (1 byte to a
         whole slot) into the server's ring as NCCL's sender does: it waits
         for the receiver's FIFO entry (an RDMA Write into the sender's memory
         naming the slot's address and key), splits the message over the
         queue pairs in 128-byte-aligned parts, and writes each part with RDMA
         Write with Immediate (the immediate: the message's size), a
         zero-byte one where a part is empty. The receiver counts one
         completion per queue pair (receives without buffers), checks every
         immediate and every byte of the slot, and hands the slot back with
         the next FIFO entry; up to --slots messages are in flight.
  zero   Zero-byte messages on the first queue pair: SEND and SEND with
         Immediate without SGEs, RDMA Write and Write with Immediate without
         SGEs, RDMA Read into an SGE of length 0; each completes with status
         success, byte_len 0, the right opcode and immediate, and no byte of
         the server's ring changes; then a 64-byte SEND arrives intact.

Every wait is bounded (--timeout; around rdma_cm's blocking calls a watchdog
thread ends the process with its stack). Each end prints "WORK: ok (...)" for
each workload that passed, the client "DONE" at the end, and both exit 0 when
every check held; an end exits 1 with what failed otherwise.
"""

import argparse
import faulthandler
import json
import random
import socket
import struct
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import GID
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR
from rc_attr import rc_rts_attr

PORT_NUM = 1
# NCCL's alignment of the parts a message is split into over its queue pairs.
ALIGN = 128
# A FIFO entry: the slot's address, its rkey, its size, and last (written
# last, read first) the sequence number + 1.
FIFO_ENTRY = struct.Struct("<QIIQ")
FIFO_STRIDE = 32
# Receives kept posted per queue pair beyond the slots in flight.
SPARE_RECVS = 2
ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
# What the zero workload finds in the server's ring: nothing may overwrite it.
SENTINEL = 0xA5


class Failure(Exception):
    """A check that did not hold: the message says which and what was seen."""


def say(msg):
    print(msg, flush=True)


def recv_wr(wr_id, sge=None):
    """A receive of one SGE, or of none (pyverbs builds a WR with at least
    one: it is given a placeholder and then told it has none)."""
    wr = RecvWR(wr_id=wr_id, num_sge=1, sg=[sge if sge is not None else SGE(0, 0, 0)])
    if sge is None:
        wr.num_sge = 0
    return wr


def send_wr(wr_id, opcode, sge=None, imm=0, raddr=None, rkey=0):
    """A signalled work request of one SGE or none, to raddr/rkey if given."""
    wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[sge if sge is not None else SGE(0, 0, 0)],
                imm_data=imm, send_flags=e.IBV_SEND_SIGNALED)
    if sge is None:
        wr.num_sge = 0
    if raddr is not None:
        wr.set_wr_rdma(rkey, raddr)
    return wr


class Bootstrap:
    """The out-of-band TCP connection: one JSON object a line."""

    def __init__(self, sock, timeout):
        sock.settimeout(timeout)
        self.sock = sock
        self.rfile = sock.makefile("r")

    def send(self, obj):
        self.sock.sendall((json.dumps(obj) + "\n").encode())

    def recv(self):
        try:
            line = self.rfile.readline()
        except socket.timeout:
            raise Failure("the peer said nothing on the bootstrap connection in time") from None
        if not line:
            raise Failure("the peer closed the bootstrap connection")
        return json.loads(line)


class Endpoint:
    """One side: the device, its queue pairs on one CQ, the ring and the FIFO."""

    def __init__(self, args):
        self.args = args
        self.ctx = Context(name=args.ibdev)
        self.pd = PD(self.ctx)
        depth = args.slots + SPARE_RECVS
        self.cq = CQ(self.ctx, 2 * args.qps * depth + 16, None, None, 0)
        cap = QPCap(max_send_wr=depth, max_recv_wr=depth, max_send_sge=1, max_recv_sge=1)
        init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap, sq_sig_all=0)
        self.depth = depth
        self.qps = []
        for _ in range(args.qps):
            # Created and moved to INIT with remote access (pyverbs' QP with a QPAttr).
            attr = QPAttr(port_num=PORT_NUM)
            attr.qp_access_flags = ACCESS
            self.qps.append(QP(self.pd, init, attr))
        self.qp_index = {qp.qp_num: q for q, qp in enumerate(self.qps)}
        self.psns = [random.getrandbits(24) for _ in self.qps]
        self.ring = MR(self.pd, args.slots * args.slot, ACCESS)
        self.fifo = MR(self.pd, args.slots * FIFO_STRIDE, ACCESS)
        # The sender's staging copy of its messages; the receiver's FIFO entries.
        self.stage = MR(self.pd, args.slots * max(args.slot, FIFO_STRIDE), ACCESS)
        self.cm_ids = []
        self.channel = None
        self.listener = None
        # Signalled work requests not yet completed, a queue pair.
        self.outstanding = [0] * args.qps
        self.on_recv = self.unexpected_recv

    def unexpected_recv(self, wc):
        raise Failure(f"a receive completion (wr_id {wc.wr_id}, opcode {wc.opcode}) where none was due")

    def describe(self):
        gid = None if self.args.cm else str(self.ctx.query_gid(PORT_NUM, int(self.args.gid)))
        return {
            "gid": gid,
            "mtu": int(self.ctx.query_port(PORT_NUM).active_mtu),
            "qpns": [qp.qp_num for qp in self.qps],
            "psns": self.psns,
            "ring": [self.ring.buf, self.ring.rkey],
            "fifo": [self.fifo.buf, self.fifo.rkey],
        }

    def connect_oob(self, peer):
        """INIT, RTR and RTS by ibv_modify_qp with the peer's GID, QPN and PSN."""
        mtu = min(int(self.ctx.query_port(PORT_NUM).active_mtu), peer["mtu"])
        for qp, psn, pqpn, ppsn in zip(self.qps, self.psns, peer["qpns"], peer["psns"]):
            qp.to_rts(rc_rts_attr(PORT_NUM, pqpn, GID(peer["gid"]), int(self.args.gid), path_mtu=mtu,
                                  sq_psn=psn, rq_psn=ppsn, access=ACCESS))

    def cm_event(self, want, what):
        from pyverbs.cmid import CMEvent
        # rdma_get_cm_event blocks: a watchdog thread ends the process, with
        # this stack, if no event comes in time.
        faulthandler.dump_traceback_later(self.args.timeout, exit=True)
        ev = CMEvent(self.channel)
        faulthandler.cancel_dump_traceback_later()
        got = ev.event_type
        if got != want:
            name = ev.event_str()
            ev.ack_cm_event()
            raise Failure(f"{what}: rdma_cm event {name} ({got}), not {want}")
        return ev

    def cm_listen(self):
        """Listens with rdma_cm on IP:PORT+1 (the server, --cm)."""
        import pyverbs.cm_enums as ce
        from pyverbs.cmid import CMID, AddrInfo, CMEventChannel
        self.channel = CMEventChannel()
        self.listener = CMID(creator=self.channel)
        self.listener.bind_addr(AddrInfo(src=self.args.ip, src_service=str(self.args.port + 1),
                                         port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE))
        self.listener.listen()

    def cm_accept_all(self):
        """Accepts one connection a queue pair, in the order the client makes them."""
        import pyverbs.cm_enums as ce
        from pyverbs.cmid import CMID, ConnParam
        for qp in self.qps:
            ev = self.cm_event(ce.RDMA_CM_EVENT_CONNECT_REQUEST, "waiting for a connection request")
            cid = CMID(creator=ev, listen_id=self.listener)
            ev.ack_cm_event()
            self.cm_ids.append(cid)
            cid.accept(ConnParam(qp_num=qp.qp_num))
            self.cm_event(ce.RDMA_CM_EVENT_ESTABLISHED, f"accepting QP {qp.qp_num}").ack_cm_event()

    def cm_connect_all(self, my_ip):
        """Connects each queue pair to the server's listener (the client, --cm)."""
        import pyverbs.cm_enums as ce
        from pyverbs.cmid import CMID, AddrInfo, CMEventChannel, ConnParam
        self.channel = CMEventChannel()
        for qp in self.qps:
            cid = CMID(creator=self.channel)
            self.cm_ids.append(cid)
            cid.resolve_addr(AddrInfo(src=my_ip, dst=self.args.ip, dst_service=str(self.args.port + 1),
                                      port_space=ce.RDMA_PS_TCP))
            self.cm_event(ce.RDMA_CM_EVENT_ADDR_RESOLVED, "resolving the address").ack_cm_event()
            cid.resolve_route()
            self.cm_event(ce.RDMA_CM_EVENT_ROUTE_RESOLVED, "resolving the route").ack_cm_event()
            cid.connect(ConnParam(qp_num=qp.qp_num))
            self.cm_event(ce.RDMA_CM_EVENT_ESTABLISHED, f"connecting QP {qp.qp_num}").ack_cm_event()

    def post_recv(self, q, wr_id, sge=None):
        self.qps[q].post_recv(recv_wr(wr_id, sge))

    def post(self, q, wr):
        """Posts a signalled work request on queue pair q, reaping completions
        while its send queue is full."""
        while self.outstanding[q] >= self.depth:
            self.reap(f"room in QP {self.qps[q].qp_num}'s send queue")
        self.qps[q].post_send(wr)
        self.outstanding[q] += 1

    def reap(self, what):
        """Polls one completion (within --timeout) and returns it: a send's must be
        a success and is counted off; a receive's goes to self.on_recv."""
        end = time.monotonic() + self.args.timeout
        while True:
            n, wcs = self.cq.poll()
            if n:
                wc = wcs[0]
                if wc.status != e.IBV_WC_SUCCESS:
                    raise Failure(f"{what}: completion of wr_id {wc.wr_id} on QP {wc.qp_num} "
                                  f"with status {wc.status} (opcode {wc.opcode})")
                if wc.opcode & e.IBV_WC_RECV:
                    self.on_recv(wc)
                else:
                    self.outstanding[self.qp_index[wc.qp_num]] -= 1
                return wc
            if time.monotonic() > end:
                raise Failure(f"no completion within {self.args.timeout} s waiting for {what}")
            time.sleep(0.0005)

    def drain(self):
        while any(self.outstanding):
            self.reap("the last send completions")

    def close(self):
        for cid in self.cm_ids:
            try:
                cid.disconnect()
            except Exception:
                pass
        for qp in self.qps:
            qp.close()
        for cid in self.cm_ids:
            cid.close()
        if self.listener is not None:
            self.listener.close()
        if self.channel is not None:
            self.channel.close()
        for mr in (self.ring, self.fifo, self.stage):
            mr.close()
        self.cq.close()
        self.pd.close()
        self.ctx.close()


def message_sizes(args):
    """The nccl workload's sizes: the edges first, then seeded random ones."""
    edges = [1, 7, ALIGN - 1, ALIGN * args.qps, ALIGN * args.qps + 1, 4096, 65536 + 3, args.slot]
    rnd = random.Random(args.seed)
    sizes = [s for s in edges if s <= args.slot]
    while len(sizes) < args.messages:
        sizes.append(rnd.randint(1, args.slot))
    return sizes[:args.messages]


def payload(seq, size, seed):
    return random.Random(seed * 1000003 + seq).randbytes(size)


def parts(size, nqps):
    """NCCL's split of a message over its queue pairs: 128-byte-aligned parts,
    the last ones possibly empty."""
    part = -(-size // nqps)
    part = -(-part // ALIGN) * ALIGN
    return [(q * part, max(0, min(part, size - q * part))) for q in range(nqps)]


def nccl_receiver(ep, peer):
    args = ep.args
    sizes = message_sizes(args)
    for q in range(args.qps):
        for i in range(args.slots + SPARE_RECVS):
            ep.post_recv(q, q)
    got = {}            # seq -> [completions, immediate]
    per_qp = [0] * args.qps
    done = 0

    def cts(seq):
        slot = seq % args.slots
        entry = FIFO_ENTRY.pack(ep.ring.buf + slot * args.slot, ep.ring.rkey, args.slot, seq + 1)
        ep.stage.write(entry, len(entry), slot * FIFO_STRIDE)
        ep.post(0, send_wr(1 << 32 | seq, e.IBV_WR_RDMA_WRITE,
                           SGE(ep.stage.buf + slot * FIFO_STRIDE, FIFO_ENTRY.size, ep.stage.lkey),
                           raddr=peer["fifo"][0] + slot * FIFO_STRIDE, rkey=peer["fifo"][1]))

    def on_recv(wc):
        q = ep.qp_index[wc.qp_num]
        seq = per_qp[q]
        per_qp[q] += 1
        if wc.opcode != e.IBV_WC_RECV_RDMA_WITH_IMM or not wc.wc_flags & e.IBV_WC_WITH_IMM:
            raise Failure(f"message {seq}, QP {wc.qp_num}: opcode {wc.opcode}, flags {wc.wc_flags}, "
                          "not a write with immediate")
        entry = got.setdefault(seq, [0, wc.imm_data])
        if entry[1] != wc.imm_data:
            raise Failure(f"message {seq}: immediates {entry[1]:#x} and {wc.imm_data:#x} differ between QPs")
        entry[0] += 1
        ep.post_recv(q, q)

    ep.on_recv = on_recv
    for seq in range(min(args.slots, len(sizes))):
        cts(seq)
    while done < len(sizes):
        while got.get(done, [0])[0] < args.qps:
            ep.reap(f"message {done}'s writes")
        size = sizes[done]
        imm = got.pop(done)[1]
        want_imm = struct.unpack("=I", struct.pack(">I", size))[0]
        if imm != want_imm:
            raise Failure(f"message {done}: immediate {imm:#x}, not the size {size} ({want_imm:#x})")
        slot = done % args.slots
        data = ep.ring.read(size, slot * args.slot)
        want = payload(done, size, args.seed)
        if data != want:
            at = next(i for i in range(size) if data[i] != want[i])
            raise Failure(f"message {done} ({size} bytes): byte {at} is {data[at]:#x}, not {want[at]:#x}")
        done += 1
        if done - 1 + args.slots < len(sizes):
            cts(done - 1 + args.slots)
    ep.drain()
    return sum(sizes)


def nccl_sender(ep, peer):
    args = ep.args
    sizes = message_sizes(args)
    for seq, size in enumerate(sizes):
        slot = seq % args.slots
        end = time.monotonic() + args.timeout
        while True:
            addr, rkey, room, want_seq = FIFO_ENTRY.unpack(ep.fifo.read(FIFO_ENTRY.size, slot * FIFO_STRIDE))
            if want_seq == seq + 1:
                break
            if time.monotonic() > end:
                raise Failure(f"message {seq}: no FIFO entry within {args.timeout} s (slot {slot} holds "
                              f"entry {want_seq - 1})")
            # Send completions are reaped while waiting, as NCCL's test() does.
            if any(ep.outstanding):
                ep.reap(f"message {seq}'s FIFO entry")
            else:
                time.sleep(0.0005)
        if room < size:
            raise Failure(f"message {seq}: the receiver offers {room} bytes for {size}")
        data = payload(seq, size, args.seed)
        ep.stage.write(data, size, slot * args.slot)
        imm = struct.unpack("=I", struct.pack(">I", size))[0]
        for q, (off, length) in enumerate(parts(size, args.qps)):
            sge = SGE(ep.stage.buf + slot * args.slot + off, length, ep.stage.lkey) if length else None
            ep.post(q, send_wr(seq, e.IBV_WR_RDMA_WRITE_WITH_IMM, sge, imm, addr + off, rkey))
    ep.drain()
    return sum(sizes)


def expect_recv(ep, what, opcode, imm=None, length=0):
    """The server's next completion: a receive of `opcode` with byte_len `length`
    and, if given, immediate `imm`."""
    seen = []
    ep.on_recv = seen.append
    ep.reap(what)
    ep.on_recv = ep.unexpected_recv
    if not seen:
        raise Failure(f"{what}: a send completion where a receive was expected")
    wc = seen[0]
    has_imm = bool(wc.wc_flags & e.IBV_WC_WITH_IMM)
    if wc.opcode != opcode or wc.byte_len != length or has_imm != (imm is not None) or \
            (imm is not None and wc.imm_data != imm):
        raise Failure(f"{what}: opcode {wc.opcode} byte_len {wc.byte_len} flags {wc.wc_flags} "
                      f"imm {wc.imm_data:#x}; wanted opcode {opcode} byte_len {length}"
                      + (f" imm {imm:#x}" if imm is not None else " and no immediate"))
    return f"{what}: opcode {wc.opcode}, byte_len {wc.byte_len}" + (f", imm {wc.imm_data:#x}" if has_imm else "")


ZERO_STEPS = (
    # (name, work request opcode, with an immediate, the server sees a receive)
    ("SEND of 0 bytes", e.IBV_WR_SEND, False, e.IBV_WC_RECV),
    ("SEND with Immediate of 0 bytes", e.IBV_WR_SEND_WITH_IMM, True, e.IBV_WC_RECV),
    ("RDMA Write of 0 bytes", e.IBV_WR_RDMA_WRITE, False, None),
    ("RDMA Write with Immediate of 0 bytes", e.IBV_WR_RDMA_WRITE_WITH_IMM, True, e.IBV_WC_RECV_RDMA_WITH_IMM),
    ("RDMA Read of 0 bytes", e.IBV_WR_RDMA_READ, False, None),
)


def zero_server(ep, boot):
    """Receives with a whole slot of room each, and checks what each step brought."""
    ep.ring.write(bytes([SENTINEL]) * ep.args.slot, ep.args.slot, 0)
    # One receive for each step that takes one, and for the SEND after them:
    # none left over for the next workload.
    takers = sum(1 for step in ZERO_STEPS if step[3] is not None) + 1
    for i in range(takers):
        ep.post_recv(0, i, SGE(ep.ring.buf, ep.args.slot, ep.ring.lkey))
    boot.send({"ready": True})
    results = []
    for i, (name, _, imm, recv_opcode) in enumerate(ZERO_STEPS):
        step = boot.recv()
        if recv_opcode is not None:
            results.append(expect_recv(ep, name, recv_opcode, 0x10203040 + i if imm else None))
        boot.send({"step": step["step"]})
    results.append(expect_recv(ep, "SEND of 64 bytes after them", e.IBV_WC_RECV, length=64))
    data = ep.ring.read(ep.args.slot, 0)
    if data[:64] != payload(99, 64, ep.args.seed):
        raise Failure("the 64-byte SEND after the zero-byte messages arrived changed")
    if any(b != SENTINEL for b in data[64:]):
        raise Failure("a zero-byte message changed the receiver's memory")
    return results


def zero_client(ep, peer, boot):
    boot.recv()
    results = []
    raddr, rkey = peer["ring"]
    for i, (name, opcode, imm, _) in enumerate(ZERO_STEPS):
        # A read needs its sink: an SGE of length 0; the others have none.
        sge = SGE(ep.stage.buf, 0, ep.stage.lkey) if opcode == e.IBV_WR_RDMA_READ else None
        remote = opcode in (e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_WRITE_WITH_IMM, e.IBV_WR_RDMA_READ)
        ep.post(0, send_wr(i, opcode, sge, 0x10203040 + i if imm else 0, raddr if remote else None, rkey))
        wc = ep.reap(name)
        if wc.byte_len != 0 and opcode == e.IBV_WR_RDMA_READ:
            raise Failure(f"{name}: the requester's completion has byte_len {wc.byte_len}")
        results.append(f"{name}: requester's completion opcode {wc.opcode}")
        boot.send({"step": i})
        boot.recv()
    data = payload(99, 64, ep.args.seed)
    ep.stage.write(data, 64, 0)
    ep.post(0, send_wr(99, e.IBV_WR_SEND, SGE(ep.stage.buf, 64, ep.stage.lkey)))
    ep.drain()
    return results


def run(args):
    random.seed()
    ep = Endpoint(args)
    try:
        if args.role == "server":
            if args.cm:
                ep.cm_listen()
            lsock = socket.create_server((args.ip, args.port))
            lsock.settimeout(args.timeout)
            try:
                sock, _ = lsock.accept()
            except socket.timeout:
                raise Failure(f"no client within {args.timeout} s") from None
            lsock.close()
        else:
            sock = socket.create_connection((args.ip, args.port), timeout=args.timeout)
        boot = Bootstrap(sock, args.timeout)
        boot.send(ep.describe())
        peer = boot.recv()
        if len(peer["qpns"]) != args.qps:
            raise Failure(f"the peer has {len(peer['qpns'])} queue pairs, not {args.qps}")
        t0 = time.monotonic()
        if args.cm:
            if args.role == "server":
                ep.cm_accept_all()
            else:
                ep.cm_connect_all(args.src)
        else:
            ep.connect_oob(peer)
        # Both ends at RTS before the first message, as NCCL's connect handshake ends.
        boot.send({"rts": True})
        boot.recv()
        setup = time.monotonic() - t0
        mode = "rdma_cm" if args.cm else "ibv_modify_qp (GID index %s)" % args.gid
        say(f"{args.qps} QPs connected by {mode} in {setup:.2f} s")
        for work in args.work.split(","):
            t1 = time.monotonic()
            if work == "zero":
                results = zero_server(ep, boot) if args.role == "server" else zero_client(ep, peer, boot)
                summary = "; ".join(results)
            else:
                moved = (nccl_receiver if args.role == "server" else nccl_sender)(ep, peer)
                summary = f"{args.messages} messages, {moved} bytes over {args.qps} QPs"
            # Each end's workload ends before the other's next one starts.
            boot.send({"done": work})
            boot.recv()
            say(f"{work}: ok ({time.monotonic() - t1:.2f} s): {summary}")
        if args.role == "client":
            say("DONE")
        return 0
    except Failure as f:
        say(f"FAILED ({args.role}): {f}")
        return 1
    finally:
        ep.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("role", choices=("server", "client"))
    p.add_argument("ibdev")
    p.add_argument("gid", help="the GID index (NCCL_IB_GID_INDEX); - with --cm")
    p.add_argument("ip", help="the server's address")
    p.add_argument("port", type=int, help="the server's bootstrap TCP port (rdma_cm: PORT + 1)")
    p.add_argument("--qps", type=int, default=8, help="queue pairs per connection (default 8)")
    p.add_argument("--slots", type=int, default=8, help="messages in flight (NCCL_STEPS, default 8)")
    p.add_argument("--slot", type=int, default=1 << 18, help="bytes per slot (default 256 KiB)")
    p.add_argument("--messages", type=int, default=40)
    p.add_argument("--seed", type=int, default=31)
    p.add_argument("--work", default="zero,nccl", help="workloads in turn: zero, nccl or both (the default)")
    p.add_argument("--cm", action="store_true", help="connect by rdma_cm (standard iWARP)")
    p.add_argument("--src", help="with --cm, the client's own address (its adapter's)")
    p.add_argument("--timeout", type=int, default=30, help="seconds for any one wait")
    args = p.parse_args()
    if not args.cm and args.gid == "-":
        p.error("a GID index is needed without --cm")
    if args.cm and args.role == "client" and not args.src:
        p.error("the client needs --src with --cm")
    if not args.work or set(args.work.split(",")) - {"zero", "nccl"}:
        p.error(f"--work {args.work}: a list of zero and nccl")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
