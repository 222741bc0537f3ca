#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Keys a user's queue pair must not be able to use, through the stock provider.

Usage: keys_probe.py IBDEV GID_INDEX LOCAL_DMA_LKEY

The adapter's local DMA lkey (QUERY_DEVICE, exported to kernel consumers as
ib_device.local_dma_lkey) names raw bus addresses with no PD, rights or
bounds: it is the kernel's. A user knows or guesses its value (0xf0000000 on
the model by default) and writes it into a work request of its own queue
pair; the adapter must refuse it there, as a local key (gather, receive
buffer, read sink) and as a remote key (RDMA Write and Read), and the same
work request with a registered MR must still work (so that a refusal is the
key's). Each check uses a fresh pair of RC queue pairs on this device,
connected to each other by GID (loopback through the adapter); a refused work
request completes in error and breaks its pair.

Prints TAP points ("ok N - ..."), one per check, and exits 1 if one failed.
"""

import ctypes
import mmap
import sys
import time

import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SendWR, SGE
from rc_attr import rc_rts_attr

PORT = 1
SIZE = 4096
# An address the guest surely has: the low megabyte of its physical memory.
PHYS = 0x10000
ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE |
          e.IBV_ACCESS_REMOTE_READ)
results = []


def tap(name, ok, detail):
    results.append(ok)
    print(f"{'ok' if ok else 'not ok'} {len(results)} - {name}: {detail}", flush=True)


WC_NAMES = {0: "SUCCESS", 1: "LOC_LEN_ERR", 2: "LOC_QP_OP_ERR", 4: "LOC_PROT_ERR",
            5: "WR_FLUSH_ERR", 8: "LOC_ACCESS_ERR", 9: "REM_INV_REQ_ERR",
            10: "REM_ACCESS_ERR", 11: "REM_OP_ERR", 12: "RETRY_EXC_ERR", 13: "RNR_RETRY_EXC_ERR",
            21: "GENERAL_ERR"}


def wc_name(status):
    return WC_NAMES.get(status, str(status))


class Pair:
    """Two RC QPs of one CQ each, connected to each other, and a registered
    buffer for each."""

    def __init__(self, ctx, pd, gid_index):
        self.cqs = [CQ(ctx, 16, None, None, 0) for _ in range(2)]
        cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
        self.qps = [QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap),
                       QPAttr(port_num=PORT)) for cq in self.cqs]
        gid = ctx.query_gid(PORT, gid_index)
        for qp, peer in zip(self.qps, reversed(self.qps)):
            # One retry, a short timeout: a refused request breaks the pair at once.
            qp.to_rts(rc_rts_attr(PORT, peer.qp_num, gid, gid_index, retries=1, timeout=10))
        self.bufs = []
        for _ in range(2):
            m = mmap.mmap(-1, SIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
            ctypes.memset(addr, 0x5a, SIZE)
            self.bufs.append((m, addr, MR(pd, SIZE, ACCESS, address=addr)))

    def addr(self, i):
        return self.bufs[i][1]

    def mr(self, i):
        return self.bufs[i][2]

    def recv(self, i, sge):
        self.qps[i].post_recv(RecvWR(wr_id=i, num_sge=1, sg=[sge]))

    def send(self, opcode, sge, raddr=0, rkey=0):
        wr = SendWR(wr_id=7, opcode=opcode, num_sge=1, sg=[sge],
                    send_flags=e.IBV_SEND_SIGNALED)
        if raddr or rkey:
            wr.set_wr_rdma(rkey, raddr)
        self.qps[0].post_send(wr)

    def poll(self, i, seconds=10.0):
        """The first completion of QP i's CQ (None after `seconds`)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            n, wcs = self.cqs[i].poll()
            if n:
                return wcs[0]
            time.sleep(0.01)
        return None

    def close(self):
        for qp in self.qps:
            qp.close()
        for _, _, mr in self.bufs:
            mr.close()
        for cq in self.cqs:
            cq.close()


def check_pair(ctx, pd, gid, name, run, want_ok):
    """Runs run(pair) on a fresh pair -> (QP index, what): the first completion of
    that QP's CQ decides, and must be a success exactly when want_ok."""
    p = Pair(ctx, pd, gid)
    try:
        which, what = run(p)
        wc = p.poll(which)
    finally:
        p.close()
    if wc is None:
        tap(name, False, f"no {what} completion within 10 s")
    else:
        tap(name, (wc.status == e.IBV_WC_SUCCESS) == want_ok, f"{what} completion {wc_name(wc.status)}")


def main():
    ibdev, gid, lkey = sys.argv[1], int(sys.argv[2]), int(sys.argv[3], 0)
    ctx = Context(name=ibdev)
    pd = PD(ctx)
    mine = (lambda p: (p.addr(0), p.mr(0).lkey), "a registered MR")
    peers = (lambda p: (p.addr(1), p.mr(1).rkey), "the peer MR's rkey")
    kernels = (lambda p: (PHYS, lkey), f"the local DMA lkey {lkey:#x}")

    def send(p, key_of):
        addr, key = key_of(p)
        p.recv(1, SGE(p.addr(1), SIZE, p.mr(1).lkey))
        p.send(e.IBV_WR_SEND, SGE(addr, 64, key))
        return 0, "send"

    def recv(p, key_of):
        addr, key = key_of(p)
        p.recv(1, SGE(addr, SIZE, key))
        p.send(e.IBV_WR_SEND, SGE(p.addr(0), 64, p.mr(0).lkey))
        return 1, "receive"

    def remote(opcode):
        def run(p, key_of):
            p.send(opcode, SGE(p.addr(0), 64, p.mr(0).lkey), *key_of(p))
            return 0, "requester"
        return run

    def read_into(p, key_of):
        addr, key = key_of(p)
        p.send(e.IBV_WR_RDMA_READ, SGE(addr, 64, key), p.addr(1), p.mr(1).rkey)
        return 0, "requester"

    checks = (
        ("SEND gathering from {} completes", send, mine, True),
        ("SEND gathering with {} is refused", send, kernels, False),
        ("a receive buffer under {} takes a SEND", recv, mine, True),
        ("a receive buffer under {} is refused", recv, kernels, False),
        ("RDMA Write under {} completes", remote(e.IBV_WR_RDMA_WRITE), peers, True),
        ("RDMA Write naming {} as rkey is refused", remote(e.IBV_WR_RDMA_WRITE), kernels, False),
        ("RDMA Read under {} completes", remote(e.IBV_WR_RDMA_READ), peers, True),
        ("RDMA Read naming {} as rkey is refused", remote(e.IBV_WR_RDMA_READ), kernels, False),
        ("an RDMA Read into {} is refused", read_into, kernels, False),
    )
    for name, run, (key_of, key_name), want_ok in checks:
        check_pair(ctx, pd, gid, name.format(key_name), lambda p: run(p, key_of), want_ok)
    pd.close()
    ctx.close()
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
