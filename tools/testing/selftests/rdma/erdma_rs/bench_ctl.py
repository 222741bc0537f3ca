#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Control-path rates of one RDMA device, for `make bench` (bench.sh).

Usage: bench_ctl.py --dev IBDEV --gid N [--seconds S] [--versus IBDEV:N --pairs K] [METRIC...]

Each metric is a loop of verbs through pyverbs and the stock provider, timed
for about S seconds (and at least a few iterations), after one untimed
iteration that warms up the provider's and the kernel's caches. It prints one
line per metric, "METRIC VALUE UNIT":

  qp      RC QP create, modify INIT -> RTR -> RTS (to itself, by GID), destroy, per second
  cq      CQ create + destroy, per second
  mr4k    MR register + deregister of a 4 KiB region, MB/s (10^6 bytes registered per second)
  mr2m    the same for 2 MiB
  mr1g    the same for 1 GiB
  ctx     user context (device) open + close, per second

With --versus, each metric is measured K times on each of the two devices,
alternating (the first device first in even pairs, the second first in odd
ones), and each measurement is printed as "PAIR WHICH METRIC VALUE UNIT" with
WHICH "a" (--dev) or "b" (--versus): make bench compares two drivers, each
bound to an adapter of its own, under the same host load at the same moment.

The MR regions are allocated and written once, before any timing, so that the
loops measure registration (pinning, DMA mapping, the device's translation
tables and commands), not page faults. Python's own cost per iteration is the
same whatever the driver, so ratios between drivers are conservative (closer
to 1.00 than the drivers' own costs would be).
"""

import argparse
import ctypes
import mmap
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr

PORT = 1
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
MR_ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


def timed(step, seconds, min_iters):
    """Runs step() once untimed, then for `seconds` and `min_iters` at least:
    returns (iterations, elapsed seconds)."""
    step()
    n = 0
    start = time.perf_counter()
    while True:
        step()
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and n >= min_iters:
            return n, elapsed


class Bench:
    def __init__(self, dev, gid_index, seconds, buffers=None):
        self.dev = dev
        self.seconds = seconds
        self.ctx = Context(name=dev)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 64, None, None, 0)
        gid = self.ctx.query_gid(PORT, gid_index)
        # RTR needs a remote: the QP itself, at the device's own GID (like
        # rdma-core's RCResources), so the loop needs no peer.
        self.rts = QPAttr(port_num=PORT)
        self.rts.path_mtu = e.IBV_MTU_1024
        self.rts.max_dest_rd_atomic = 1
        self.rts.max_rd_atomic = 1
        self.rts.min_rnr_timer = 12
        self.rts.timeout = 14
        self.rts.retry_cnt = 7
        self.rts.rnr_retry = 7
        self.rts.rq_psn = 0
        self.rts.sq_psn = 0
        self.rts.ah_attr = AHAttr(port_num=PORT, is_global=1,
                                  gr=GlobalRoute(dgid=gid, sgid_index=gid_index))
        # Shareable between two Bench objects: one 1 GiB buffer, not two.
        self.buffers = {} if buffers is None else buffers

    def qp_cycle(self):
        init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq,
                          cap=QPCap(max_send_wr=64, max_recv_wr=64, max_send_sge=1, max_recv_sge=1))

        def step():
            qp = QP(self.pd, init, QPAttr(port_num=PORT))  # created and moved to INIT
            self.rts.dest_qp_num = qp.qp_num
            qp.to_rts(self.rts)  # INIT -> RTR -> RTS
            qp.close()
        n, t = timed(step, self.seconds, 5)
        return n / t, "ops/s"

    def cq_cycle(self):
        def step():
            CQ(self.ctx, 64, None, None, 0).close()
        n, t = timed(step, self.seconds, 5)
        return n / t, "ops/s"

    def buffer(self, size):
        """An anonymous, page-aligned, written buffer of `size` bytes: its address."""
        if size not in self.buffers:
            m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
            ctypes.memset(addr, 0x5a, size)  # fault every page in now, not in the loop
            self.buffers[size] = (m, addr)
        return self.buffers[size][1]

    def mr(self, size, min_iters):
        addr = self.buffer(size)

        def step():
            MR(self.pd, size, MR_ACCESS, address=addr).close()
        n, t = timed(step, self.seconds, min_iters)
        return n * size / t / 1e6, "MB/s"

    def ctx_open(self):
        def step():
            Context(name=self.dev).close()
        n, t = timed(step, self.seconds, 5)
        return n / t, "ops/s"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dev", required=True)
    ap.add_argument("--gid", type=int, required=True, help="RoCEv2 GID index of the device's IPv4 address")
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--versus", metavar="IBDEV:N", help="a second device and its GID index")
    ap.add_argument("--pairs", type=int, default=1, help="measurements of each metric on each device")
    ap.add_argument("metrics", nargs="*", default=["qp", "cq", "mr4k", "mr2m", "mr1g", "ctx"])
    args = ap.parse_args()

    benches = {"a": Bench(args.dev, args.gid, args.seconds)}
    if args.versus:
        dev, _, gid = args.versus.rpartition(":")
        if not dev or not gid.isdigit():
            ap.error(f"--versus wants IBDEV:GID_INDEX, not {args.versus!r}")
        benches["b"] = Bench(dev, int(gid), args.seconds, benches["a"].buffers)
    runs = {which: {
        "qp": b.qp_cycle,
        "cq": b.cq_cycle,
        "mr4k": lambda b=b: b.mr(4 * KiB, 20),
        "mr2m": lambda b=b: b.mr(2 * MiB, 5),
        "mr1g": lambda b=b: b.mr(1 * GiB, 2),
        "ctx": b.ctx_open,
    } for which, b in benches.items()}
    for m in args.metrics:
        if m not in runs["a"]:
            ap.error(f"unknown metric {m!r}")
    for m in args.metrics:
        if not args.versus:
            value, unit = runs["a"][m]()
            print(f"{m} {value:.6g} {unit}", flush=True)
            continue
        for i in range(args.pairs):
            for which in ("a", "b") if i % 2 == 0 else ("b", "a"):
                value, unit = runs[which][m]()
                print(f"{i} {which} {m} {value:.6g} {unit}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
