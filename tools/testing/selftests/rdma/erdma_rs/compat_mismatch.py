#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Compat mode's convention broken by one end: the connection never forms.

Usage: compat_mismatch.py IBDEV_A GID_A IBDEV_B GID_B

Two iWARP adapters in compat mode (erdma_rs compat_mode=1, issue 31). Each
end of a compat connection computes the TCP 4-tuple and sequence numbers from
the two addresses and QPNs (erdma_rs_hw 7.3); nothing is handshaken, so an end
that names the wrong peer computes another connection than its peer does.
Here A names a QPN B does not have (B's plus one); B names A correctly. A's
SEND must complete with an error (retries exhausted: its segments reach no
queue pair) within a bound, B must receive nothing, and a correctly named
pair on the same adapters must then work (so that the failure is the
convention's).

Prints TAP points ("ok N - ..."); exits 1 if one failed.
"""

import sys
import time

import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SendWR, SGE
from rc_attr import rc_rts_attr
from tap_lib import status, tap

PORT = 1
SIZE = 64


class End:
    def __init__(self, name, gid_index):
        self.ctx = Context(name=name)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 16)
        cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
        self.qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap))
        self.mr = MR(self.pd, SIZE, e.IBV_ACCESS_LOCAL_WRITE)
        self.gid_index = gid_index
        self.gid = self.ctx.query_gid(PORT, gid_index)

    def connect(self, peer_qpn, peer_gid):
        self.qp.to_rts(rc_rts_attr(PORT, peer_qpn, peer_gid, self.gid_index))

    def sge(self):
        return SGE(self.mr.buf, SIZE, self.mr.lkey)

    def poll(self, seconds):
        deadline = time.time() + seconds
        while time.time() < deadline:
            n, wcs = self.cq.poll(1)
            if n:
                return wcs[0]
            time.sleep(0.01)
        return None

    def close(self):
        for o in (self.qp, self.mr, self.cq, self.pd, self.ctx):
            o.close()


def pair(a_name, a_gid, b_name, b_gid, wrong):
    a, b = End(a_name, a_gid), End(b_name, b_gid)
    b.qp.post_recv(RecvWR(wr_id=2, num_sge=1, sg=[b.sge()]))
    a.connect(b.qp.qp_num + (1 if wrong else 0), b.gid)
    b.connect(a.qp.qp_num, a.gid)
    a.mr.write(b"m" * SIZE, SIZE)
    a.qp.post_send(SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1, sg=[a.sge()],
                          send_flags=e.IBV_SEND_SIGNALED))
    return a, b


def main():
    a_name, a_gid, b_name, b_gid = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    a, b = pair(a_name, a_gid, b_name, b_gid, wrong=True)
    start = time.time()
    wc = a.poll(30)
    took = time.time() - start
    tap("A names a QPN B does not have: its SEND completes in error within 30 s",
        wc is not None and wc.status != e.IBV_WC_SUCCESS,
        "no completion" if wc is None else f"status {wc.status} after {took:.1f} s")
    got = b.poll(1)
    tap("B, which named A right, received nothing", got is None,
        "" if got is None else f"a completion, status {got.status}")
    a.close()
    b.close()
    a, b = pair(a_name, a_gid, b_name, b_gid, wrong=False)
    wa, wb = a.poll(10), b.poll(10)
    tap("then a pair that names each other right on the same adapters works",
        wa is not None and wa.status == e.IBV_WC_SUCCESS and wb is not None and
        wb.status == e.IBV_WC_SUCCESS and b.mr.read(SIZE, 0) == b"m" * SIZE,
        f"send {None if wa is None else wa.status}, receive {None if wb is None else wb.status}")
    a.close()
    b.close()
    return status()


if __name__ == "__main__":
    sys.exit(main())
