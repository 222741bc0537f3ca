#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Random user verbs against erdma devices (uverbs_random.sh), through pyverbs.

  uverbs_random.py run --seed SEED --seconds S DEV:KIND[:GID] ...
      For S seconds, on every device DEV (KIND roce or iwarp; GID, the index
      of its RoCEv2 GID) at the same time, runs worker processes one after
      another, each for 6 to 12 s (after its imports) with a seed drawn from
      SEED. A worker ends in one of three ways, in turn: this process kills
      it (SIGKILL) in the middle of its work, it exits without closing
      anything (os._exit), or it closes everything and exits. Prints TAP
      points ("ok N - ...") without a header or plan, and diagnostics: how
      many operations ran, how many failed with which errno, per operation. A worker that dies of
      a signal other than the SIGKILL sent to it (a crash), exits with an
      error of its own, or outlives its time by 30 s (a hang) fails its
      device's point. Exits 1 on a failure.

  uverbs_random.py worker DEV KIND GID SEED SECONDS STATS-FILE END
      One worker: random operations for SECONDS: user contexts, PDs, CQs of
      random sizes (invalid ones too) and completion vectors, completion
      channels, MRs of random lengths, access flags and addresses (unmapped,
      read-only, PROT_NONE, kernel, overflowing ones too), QPs of random
      types and capabilities, modify_qp with random states, attributes and
      masks (and sensible transitions to RTS between its own QPs, so that
      traffic flows), query_qp, post_send and post_recv of random work
      requests, poll_cq, req_notify_cq, resize_cq, AHs, MWs, device, port,
      GID and P_Key queries, and random closes. Every error must be an
      exception; counts go to STATS-FILE (JSON) every second and at the end.
"""

import ctypes
import errno
import json
import mmap
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

PAGE = 4096
# What an operation returns when it found nothing to work on (not counted).
SKIP = "skip"


def errname(ex):
    """What an exception says: an errno's name, or the exception's type."""
    code = getattr(ex, "error_code", None)
    if isinstance(code, int) and code not in (-1, 0):
        return errno.errorcode.get(abs(code), f"errno{abs(code)}")
    if isinstance(ex, OSError) and ex.errno:
        return errno.errorcode.get(ex.errno, f"errno{ex.errno}")
    return "py:" + type(ex).__name__


class Worker:
    def __init__(self, dev, kind, gid, seed, stats_file):
        import pyverbs.enums as e
        self.e = e
        self.dev, self.kind, self.gid = dev, kind, gid
        self.rng = random.Random(seed)
        self.stats_file = stats_file
        self.stats = {"uid": os.geteuid(), "ops": 0, "failed": 0, "by_op": {}}
        self.ctxs = []  # each: dict(ctx, pds, cqs, chans, mrs, qps, gid)
        # Memory to register: read-write, read-only, inaccessible.
        self.rw = mmap.mmap(-1, 1 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.rw_addr = ctypes.addressof(ctypes.c_char.from_buffer(self.rw))
        self.ro = mmap.mmap(-1, 4 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.ro_addr = ctypes.addressof(ctypes.c_char.from_buffer(self.ro))
        self.none = mmap.mmap(-1, 4 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.none_addr = ctypes.addressof(ctypes.c_char.from_buffer(self.none))
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mprotect(ctypes.c_void_p(self.ro_addr), 4 * PAGE, mmap.PROT_READ)
        libc.mprotect(ctypes.c_void_p(self.none_addr), 4 * PAGE, 0)  # PROT_NONE

    # ---- bookkeeping ------------------------------------------------------------
    def record(self, op, ex=None):
        s = self.stats
        s["ops"] += 1
        o = s["by_op"].setdefault(op, {"ok": 0})
        if ex is None:
            o["ok"] += 1
        else:
            s["failed"] += 1
            n = errname(ex)
            o[n] = o.get(n, 0) + 1

    def save(self):
        tmp = self.stats_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.stats, f)
        os.replace(tmp, self.stats_file)

    def value(self, typical, edges):
        """A random value: mostly typical(), sometimes one of the edges."""
        if self.rng.random() < 0.25:
            return self.rng.choice(edges)
        return typical()

    def pick(self, what):
        c = self.pick_ctx()
        if c is None or not c[what]:
            return None, None
        return c, self.rng.choice(c[what])

    def pick_ctx(self):
        return self.rng.choice(self.ctxs) if self.ctxs else None

    # ---- operations ---------------------------------------------------------------
    def op_open_ctx(self):
        from pyverbs.device import Context
        if len(self.ctxs) >= 2:
            return self.record_op("close_ctx") or SKIP
        ctx = Context(name=self.dev)
        gid = None
        if self.kind == "roce":
            gid = ctx.query_gid(1, self.gid)
        self.ctxs.append({"ctx": ctx, "pds": [], "cqs": [], "chans": [], "mrs": [], "qps": [],
                          "gid": gid})

    def op_close_ctx(self):
        c = self.pick_ctx()
        if c is None:
            return self.record_op("open_ctx") or SKIP
        self.ctxs.remove(c)
        for q in c["qps"]:
            q["qp"].close()
        c["ctx"].close()

    def op_alloc_pd(self):
        from pyverbs.pd import PD
        c = self.pick_ctx()
        if c is None or len(c["pds"]) >= 3:
            return self.record_op("dealloc_pd") or SKIP
        c["pds"].append(PD(c["ctx"]))

    def op_dealloc_pd(self):
        c, pd = self.pick("pds")
        if pd is None:
            return SKIP
        c["pds"].remove(pd)
        for q in [q for q in c["qps"] if q["pd"] is pd]:
            c["qps"].remove(q)
            q["qp"].close()
        for m in [m for m in c["mrs"] if m["pd"] is pd]:
            c["mrs"].remove(m)
            m["mr"].close()
        pd.close()

    def op_create_cq(self):
        from pyverbs.cq import CQ, CompChannel
        c = self.pick_ctx()
        if c is None or len(c["cqs"]) >= 6:
            return self.record_op("destroy_cq") or SKIP
        cqe = self.value(lambda: self.rng.randint(1, 4096),
                         [0, -1, 1, 65535, 65536, 1 << 20, (1 << 22) + 1, (1 << 31) - 1, -(1 << 31)])
        vec = self.value(lambda: 0, [1, 2, 31, 32, 1000, -1])
        chan = None
        if self.rng.random() < 0.2:
            chan = CompChannel(c["ctx"])
            c["chans"].append(chan)
        c["cqs"].append(CQ(c["ctx"], cqe, None, chan, vec))

    def op_destroy_cq(self):
        c, cq = self.pick("cqs")
        if cq is None:
            return SKIP
        c["cqs"].remove(cq)
        for q in [q for q in c["qps"] if q["scq"] is cq or q["rcq"] is cq]:
            c["qps"].remove(q)
            q["qp"].close()
        cq.close()

    def op_resize_cq(self):
        _, cq = self.pick("cqs")
        if cq is None:
            return SKIP
        cq.resize(self.value(lambda: self.rng.randint(1, 8192), [0, -1, 1 << 30]))

    def op_poll_cq(self):
        _, cq = self.pick("cqs")
        if cq is None:
            return SKIP
        cq.poll(self.rng.randint(1, 32))

    def op_req_notify(self):
        _, cq = self.pick("cqs")
        if cq is None:
            return SKIP
        cq.req_notify(self.rng.random() < 0.3)

    def access(self):
        e = self.e
        valid = [0, e.IBV_ACCESS_LOCAL_WRITE,
                 e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ,
                 e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_ATOMIC | e.IBV_ACCESS_REMOTE_WRITE,
                 e.IBV_ACCESS_REMOTE_READ]
        if self.rng.random() < 0.7:
            return self.rng.choice(valid)
        # Random bits, without HUGETLB (pyverbs would map huge pages itself).
        return self.rng.getrandbits(self.rng.choice((8, 16, 31))) & ~e.IBV_ACCESS_HUGETLB

    def op_reg_mr(self):
        from pyverbs.mr import MR
        c, pd = self.pick("pds")
        if pd is None:
            return self.record_op("alloc_pd") or SKIP
        if len(c["mrs"]) >= 8:
            return self.record_op("dereg_mr") or SKIP
        r = self.rng.random()
        acc = self.access()
        if r < 0.4:
            length = self.value(lambda: self.rng.randint(1, 256 * 1024), [0, 1, PAGE, 1 << 22])
            mr = MR(pd, length, acc)
            buf, size = mr.buf, max(length, 0)
        else:
            # A user address: inside the read-write area, read-only,
            # inaccessible, unmapped, the kernel's, the top of the address space.
            where = self.rng.choice(["rw", "rw", "rw", "ro", "none", "unmapped", "kernel", "top", "wrap"])
            if where == "rw":
                off = self.rng.randrange(0, 1 << 20)
                addr = self.rw_addr + off
                length = self.value(lambda: self.rng.randint(1, (1 << 20) - off),
                                    [0, (1 << 20) - off + 1, 1 << 30, (1 << 64) - 1 - addr])
            elif where == "ro":
                addr, length = self.ro_addr + self.rng.randrange(0, PAGE), self.rng.randint(1, 3 * PAGE)
            elif where == "none":
                addr, length = self.none_addr, self.rng.randint(1, 4 * PAGE)
            elif where == "unmapped":
                addr, length = 0x1000 * self.rng.randint(1, 15), self.rng.randint(1, 8 * PAGE)
            elif where == "kernel":
                addr, length = 0xffff888000000000 + PAGE * self.rng.randint(0, 1024), PAGE
            elif where == "top":
                addr, length = 0x7ffffffff000, self.rng.choice([PAGE, 2 * PAGE])
            else:
                addr, length = 0xfffffffffffff000, 2 * PAGE
            mr = MR(pd, length, acc, address=addr)
            buf, size = (addr, length) if where == "rw" else (None, 0)
        c["mrs"].append({"mr": mr, "pd": pd, "buf": buf, "size": size})

    def op_dereg_mr(self):
        c, m = self.pick("mrs")
        if m is None:
            return SKIP
        c["mrs"].remove(m)
        m["mr"].close()

    def op_rereg_mr(self):
        _, m = self.pick("mrs")
        if m is None:
            return SKIP
        m["mr"].rereg(self.rng.randint(0, 15), None, 0, self.rng.randint(0, 1 << 16), self.access())

    def op_alloc_mw(self):
        from pyverbs.mr import MW
        _, pd = self.pick("pds")
        if pd is None:
            return SKIP
        MW(pd, self.rng.choice([self.e.IBV_MW_TYPE_1, self.e.IBV_MW_TYPE_2, 0, 7])).close()

    def op_create_ah(self):
        from pyverbs.addr import AH, AHAttr, GlobalRoute, GID
        c, pd = self.pick("pds")
        if pd is None:
            return SKIP
        dgid = c["gid"] if c["gid"] is not None and self.rng.random() < 0.5 else \
            GID(":".join(f"{self.rng.getrandbits(16):04x}" for _ in range(8)))
        gr = GlobalRoute(dgid=dgid, sgid_index=self.value(lambda: self.gid or 0, [1, 2, 15, 16, 255]))
        attr = AHAttr(port_num=self.value(lambda: 1, [0, 2, 255]), is_global=self.rng.choice([1, 1, 0]),
                      gr=gr, dlid=self.rng.getrandbits(16))
        AH(pd, attr=attr).close()

    def op_query(self):
        ctx = self.pick_ctx()
        if ctx is None:
            return SKIP
        ctx = ctx["ctx"]
        what = self.rng.randrange(4)
        port = self.value(lambda: 1, [0, 2, 255])
        if what == 0:
            ctx.query_device()
        elif what == 1:
            ctx.query_port(port)
        elif what == 2:
            ctx.query_gid(port, self.value(lambda: self.rng.randint(0, 15), [16, 255, 1023]))
        else:
            ctx.query_pkey(port, self.value(lambda: 0, [1, 2, 255, 65535]))

    def op_create_qp(self):
        from pyverbs.qp import QP, QPCap, QPInitAttr
        e = self.e
        c, pd = self.pick("pds")
        if pd is None or not c["cqs"]:
            return self.record_op("create_cq" if c is not None else "open_ctx") or SKIP
        if len(c["qps"]) >= 8:
            return self.record_op("destroy_qp") or SKIP
        qpt = self.rng.choice([e.IBV_QPT_RC] * 6 + [e.IBV_QPT_UC, e.IBV_QPT_UD, e.IBV_QPT_RAW_PACKET, 0, 99])
        if self.rng.random() < 0.7:
            # Within what an erdma adapter takes (one receive SGE), so that
            # queue pairs exist to modify and post to.
            cap = QPCap(max_send_wr=self.rng.randint(1, 128), max_recv_wr=self.rng.randint(1, 128),
                        max_send_sge=self.rng.randint(1, 2), max_recv_sge=1,
                        max_inline_data=self.rng.choice([0, 32, 64]))
        else:
            wr = lambda: self.value(lambda: self.rng.randint(1, 256),
                                    [0, 1, 4096, 16384, 65536, 1 << 20, (1 << 31) - 1])
            sge = lambda: self.value(lambda: self.rng.randint(1, 6), [0, 7, 8, 64, 1 << 16])
            cap = QPCap(max_send_wr=wr(), max_recv_wr=wr(), max_send_sge=sge(), max_recv_sge=sge(),
                        max_inline_data=self.value(lambda: self.rng.choice([0, 32, 64, 96]),
                                                   [97, 256, 4096, 1 << 20]))
        scq, rcq = self.rng.choice(c["cqs"]), self.rng.choice(c["cqs"])
        init = QPInitAttr(qp_type=qpt, scq=scq, rcq=rcq, cap=cap, sq_sig_all=self.rng.randint(0, 1))
        qp = QP(pd, init)
        c["qps"].append({"qp": qp, "pd": pd, "scq": scq, "rcq": rcq, "type": qpt})

    def op_destroy_qp(self):
        c, q = self.pick("qps")
        if q is None:
            return SKIP
        c["qps"].remove(q)
        q["qp"].close()

    def op_query_qp(self):
        _, q = self.pick("qps")
        if q is None:
            return SKIP
        q["qp"].query(self.rng.getrandbits(26))

    def ah_attr(self, c):
        from pyverbs.addr import AHAttr, GlobalRoute, GID
        if c["gid"] is not None and self.rng.random() < 0.8:
            dgid = c["gid"]
        else:
            dgid = GID(":".join(f"{self.rng.getrandbits(16):04x}" for _ in range(8)))
        gr = GlobalRoute(dgid=dgid, sgid_index=self.value(lambda: self.gid or 0, [1, 15, 255]),
                         hop_limit=self.rng.choice([1, 64, 255]))
        return AHAttr(port_num=self.value(lambda: 1, [0, 2]), is_global=1, gr=gr)

    def op_modify_qp(self):
        from pyverbs.qp import QPAttr
        e = self.e
        c, q = self.pick("qps")
        if q is None:
            return SKIP
        qp = q["qp"]
        attr = QPAttr()
        if self.rng.random() < 0.6:
            # The next step towards RTS (or back to RESET or ERR).
            state = qp.qp_state
            others = [o["qp"].qp_num for o in c["qps"]]
            if state == e.IBV_QPS_RESET:
                attr.qp_state = e.IBV_QPS_INIT
                attr.pkey_index, attr.port_num = 0, 1
                if q["type"] == e.IBV_QPT_UD:
                    attr.qkey = self.rng.getrandbits(31)
                    mask = e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_QKEY
                else:
                    attr.qp_access_flags = self.access() & 0xf
                    mask = e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS
            elif state == e.IBV_QPS_INIT:
                attr.qp_state = e.IBV_QPS_RTR
                mask = e.IBV_QP_STATE
                if q["type"] != e.IBV_QPT_UD:
                    attr.path_mtu = self.rng.choice([e.IBV_MTU_256, e.IBV_MTU_1024, e.IBV_MTU_4096])
                    attr.dest_qp_num = self.rng.choice(others + [self.rng.getrandbits(24)])
                    attr.rq_psn = self.rng.getrandbits(24)
                    attr.max_dest_rd_atomic = self.rng.choice([0, 1, 8, 16])
                    attr.min_rnr_timer = self.rng.randint(0, 31)
                    attr.ah_attr = self.ah_attr(c)
                    mask |= (e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN |
                             e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
            elif state == e.IBV_QPS_RTR:
                attr.qp_state = e.IBV_QPS_RTS
                attr.sq_psn = self.rng.getrandbits(24)
                mask = e.IBV_QP_STATE | e.IBV_QP_SQ_PSN
                if q["type"] != e.IBV_QPT_UD:
                    attr.timeout = self.rng.randint(1, 14)
                    attr.retry_cnt = self.rng.randint(0, 3)
                    attr.rnr_retry = self.rng.randint(0, 3)
                    attr.max_rd_atomic = self.rng.choice([0, 1, 8, 16])
                    mask |= e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY | e.IBV_QP_MAX_QP_RD_ATOMIC
            else:
                attr.qp_state = self.rng.choice([e.IBV_QPS_RESET, e.IBV_QPS_ERR, e.IBV_QPS_SQD])
                mask = e.IBV_QP_STATE
        else:
            attr.qp_state = self.rng.randint(0, 8)
            attr.cur_qp_state = self.rng.randint(0, 8)
            attr.path_mtu = self.rng.randint(0, 7)
            attr.qkey = self.rng.getrandbits(32)
            attr.rq_psn = self.rng.getrandbits(32)
            attr.sq_psn = self.rng.getrandbits(32)
            attr.dest_qp_num = self.rng.getrandbits(32)
            attr.qp_access_flags = self.rng.getrandbits(16)
            attr.pkey_index = self.rng.choice([0, 1, 65535])
            attr.port_num = self.rng.choice([0, 1, 2, 255])
            attr.max_rd_atomic = self.rng.getrandbits(8)
            attr.max_dest_rd_atomic = self.rng.getrandbits(8)
            attr.min_rnr_timer = self.rng.getrandbits(8)
            attr.timeout = self.rng.getrandbits(8)
            attr.retry_cnt = self.rng.getrandbits(8)
            attr.rnr_retry = self.rng.getrandbits(8)
            attr.sq_draining = self.rng.getrandbits(8)
            attr.en_sqd_async_notify = self.rng.getrandbits(1)
            if self.rng.random() < 0.5:
                attr.ah_attr = self.ah_attr(c)
            mask = self.rng.getrandbits(26)
        qp.modify(attr, mask)

    def sges(self, c, n, inline=False):
        """n scatter/gather entries: over registered memory with its lkey, or
        random. Inline data is read by the provider, so only from memory."""
        from pyverbs.wr import SGE
        out = []
        mrs = [m for m in c["mrs"] if m["buf"] is not None and m["size"] > 0]
        for _ in range(n):
            if mrs and (inline or self.rng.random() < 0.7):
                m = self.rng.choice(mrs)
                off = self.rng.randrange(0, m["size"])
                length = self.rng.randint(0, min(m["size"] - off, 64 if inline else 1 << 16))
                lkey = m["mr"].lkey if self.rng.random() < 0.9 else self.rng.getrandbits(32)
                out.append(SGE(m["buf"] + off, length, lkey))
            elif inline:
                return None
            else:
                out.append(SGE(self.rng.getrandbits(64), self.rng.getrandbits(self.rng.choice((8, 16, 32))),
                               self.rng.getrandbits(32)))
        return out

    def op_post_recv(self):
        from pyverbs.wr import RecvWR
        c, q = self.pick("qps")
        if q is None:
            return SKIP
        n = self.rng.choice([0, 1, 1, 1, 2])
        sg = self.sges(c, n)
        q["qp"].post_recv(RecvWR(wr_id=self.rng.getrandbits(64), num_sge=n, sg=sg or None))

    def op_post_send(self):
        from pyverbs.wr import SendWR
        e = self.e
        c, q = self.pick("qps")
        # (A UD work request names an AH, which users cannot make here.)
        if q is None or q["type"] not in (e.IBV_QPT_RC, e.IBV_QPT_UC):
            return SKIP
        ops = [e.IBV_WR_SEND] * 3 + [e.IBV_WR_SEND_WITH_IMM, e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_WRITE,
                                     e.IBV_WR_RDMA_WRITE_WITH_IMM, e.IBV_WR_RDMA_READ, e.IBV_WR_RDMA_READ,
                                     e.IBV_WR_ATOMIC_CMP_AND_SWP, e.IBV_WR_ATOMIC_FETCH_AND_ADD,
                                     e.IBV_WR_SEND_WITH_INV, e.IBV_WR_LOCAL_INV, e.IBV_WR_BIND_MW, 99]
        for _ in range(self.rng.randint(1, 4)):
            op = self.rng.choice(ops)
            flags = self.rng.choice([0, e.IBV_SEND_SIGNALED, e.IBV_SEND_SIGNALED, e.IBV_SEND_SOLICITED,
                                     e.IBV_SEND_FENCE | e.IBV_SEND_SIGNALED, e.IBV_SEND_INLINE,
                                     e.IBV_SEND_INLINE | e.IBV_SEND_SIGNALED])
            inline = bool(flags & e.IBV_SEND_INLINE)
            # READ and atomics always name their local buffer (the provider
            # reads the first entry).
            n = self.rng.choice([1, 1, 1, 2, 3, 0]) if op not in (
                e.IBV_WR_RDMA_READ, e.IBV_WR_ATOMIC_CMP_AND_SWP, e.IBV_WR_ATOMIC_FETCH_AND_ADD) else 1
            if op in (e.IBV_WR_RDMA_READ, e.IBV_WR_ATOMIC_CMP_AND_SWP, e.IBV_WR_ATOMIC_FETCH_AND_ADD):
                inline, flags = False, flags & ~e.IBV_SEND_INLINE
            sg = self.sges(c, n, inline)
            if sg is None:
                inline, flags = False, flags & ~e.IBV_SEND_INLINE
                sg = self.sges(c, n)
            wr = SendWR(wr_id=self.rng.getrandbits(64), opcode=op, num_sge=n, sg=sg or None,
                        send_flags=flags, imm_data=self.rng.getrandbits(32))
            targets = [m for m in c["mrs"] if m["buf"] is not None and m["size"] > 0]
            if targets and self.rng.random() < 0.7:
                m = self.rng.choice(targets)
                rkey, raddr = m["mr"].rkey, m["buf"] + self.rng.randrange(0, m["size"]) // 8 * 8
            else:
                rkey, raddr = self.rng.getrandbits(32), self.rng.getrandbits(64)
            if op in (e.IBV_WR_ATOMIC_CMP_AND_SWP, e.IBV_WR_ATOMIC_FETCH_AND_ADD):
                wr.set_wr_atomic(rkey, raddr, self.rng.getrandbits(64), self.rng.getrandbits(64))
            else:
                wr.set_wr_rdma(rkey, raddr)
            q["qp"].post_send(wr)

    OPS = {
        "open_ctx": 2, "close_ctx": 1, "alloc_pd": 3, "dealloc_pd": 1, "create_cq": 4, "destroy_cq": 2,
        "resize_cq": 1, "poll_cq": 6, "req_notify": 3, "reg_mr": 8, "dereg_mr": 4, "rereg_mr": 1,
        "alloc_mw": 1, "create_ah": 2, "query": 3, "create_qp": 8, "destroy_qp": 3, "query_qp": 2,
        "modify_qp": 12, "post_recv": 8, "post_send": 10,
    }

    def run(self, seconds):
        names = list(self.OPS)
        weights = [self.OPS[n] for n in names]
        end = time.monotonic() + seconds
        self.save()
        saved = time.monotonic()
        self.record_op("open_ctx")
        while time.monotonic() < end:
            self.record_op(self.rng.choices(names, weights)[0])
            if time.monotonic() - saved > 1:
                self.save()
                saved = time.monotonic()

    def record_op(self, name):
        try:
            if getattr(self, "op_" + name)() == SKIP:
                return
        except Exception as ex:  # pylint: disable=broad-except
            self.record(name, ex)
        else:
            self.record(name)

    def close_all(self):
        for c in self.ctxs:
            for q in c["qps"]:
                q["qp"].close()
            c["ctx"].close()
        self.ctxs = []


def worker(argv):
    dev, kind, gid, seed, seconds, stats_file, end_mode = argv
    w = Worker(dev, kind, int(gid), int(seed), stats_file)
    w.run(float(seconds))
    if end_mode == "exit":
        # Everything still open: the kernel cleans up after the process.
        w.save()
        os._exit(0)
    try:
        w.close_all()
    except Exception as ex:  # pylint: disable=broad-except
        w.record("close_all", ex)
    w.save()
    return 0


def run(argv):
    seed, seconds, devs = None, 40.0, []
    i = 0
    while i < len(argv):
        if argv[i] == "--seed":
            seed = int(argv[i + 1])
            i += 2
        elif argv[i] == "--seconds":
            seconds = float(argv[i + 1])
            i += 2
        else:
            devs.append(argv[i])
            i += 1
    rng = random.Random(seed)
    tmpdir = tempfile.mkdtemp(prefix="uverbs_random.")
    print(f"seed {seed}, {seconds:.0f} s, uid {os.geteuid()}, gid {os.getegid()}, "
          f"groups {os.getgroups()}", flush=True)
    state = {}
    for i, d in enumerate(devs):
        dev, kind, gid = (d.split(":") + ["0"])[:3]
        state[d] = {"index": i, "dev": dev, "kind": kind, "gid": gid, "rng": random.Random(rng.getrandbits(64)),
                    "proc": None, "n": 0, "ends": {}, "problems": [], "ops": 0, "failed": 0,
                    "hist": {}, "by_op": {}, "uids": set()}
    start = time.monotonic()
    deadline = start + seconds
    while True:
        now = time.monotonic()
        busy = False
        for d, s in state.items():
            p = s["proc"]
            if p is not None:
                busy = True
                if p.poll() is None:
                    if s["kill_at"] is None:
                        # Its time runs from its first stats (after its imports).
                        if os.path.exists(s["stats"]):
                            s["kill_at"] = now + s["secs"]
                        elif now > s["spawned"] + 60:
                            s["kill_at"] = now
                        continue
                    if s["end"] == "kill" and now >= s["kill_at"]:
                        p.send_signal(signal.SIGKILL)
                        s["killed"] = True
                    elif now > s["kill_at"] + 30:
                        s["problems"].append(f"worker {s['n']} (seed {s['seed']}) hung: killed")
                        p.send_signal(signal.SIGKILL)
                        s["killed"] = True
                    continue
                collect(s, p)
                s["proc"] = None
            if now < deadline - 4:
                spawn(s, tmpdir, min(s["rng"].uniform(6, 12), deadline - now - 2))
                busy = True
        if not busy and now >= deadline - 4:
            break
        time.sleep(0.1)
    took = time.monotonic() - start
    failed = 0
    n = 0
    for d, s in state.items():
        n += 1
        ok = not s["problems"]
        if s["uids"] != {os.geteuid()} or os.geteuid() == 0:
            s["problems"].append(f"workers ran as uid {sorted(s['uids'])}, not an unprivileged user's")
            ok = False
        if s["ops"] == 0:
            s["problems"].append("no operation ran")
            ok = False
        for p in s["problems"][:3]:
            print(f"{s['dev']}: {p}")
        if len(s["problems"]) > 3:
            print(f"{s['dev']}: and {len(s['problems']) - 3} more problems")
        hist = ", ".join(f"{k} {v}" for k, v in sorted(s["hist"].items(), key=lambda kv: -kv[1]))
        ends = ", ".join(f"{k} {v}" for k, v in sorted(s["ends"].items()))
        print(f"{s['dev']} ({s['kind']}): {s['n']} workers ({ends}); {s['ops']} operations, "
              f"{s['failed']} failed: {hist or 'none'}")
        for op, o in sorted(s["by_op"].items()):
            errs = ", ".join(f"{k} {v}" for k, v in sorted(o.items()) if k != "ok")
            print(f"  {s['dev']} {op}: {o.get('ok', 0)} ok" + (f"; {errs}" if errs else ""))
        status = "ok" if ok else "not ok"
        if not ok:
            failed += 1
        print(f"{status} {n} - {s['dev']} ({s['kind']}): {s['ops']} random operations by "
              f"{s['n']} unprivileged processes in {took:.0f} s, {s['failed']} failed cleanly (errno), "
              f"no crash, no hang", flush=True)
    return 1 if failed else 0


def spawn(s, tmpdir, secs):
    s["n"] += 1
    s["seed"] = s["rng"].getrandbits(32)
    # The ends in turn, each device starting elsewhere in the cycle: a short
    # run still kills one worker, lets one exit and one close.
    s["end"] = ("kill", "exit", "close")[(2 * s["index"] + s["n"] - 1) % 3]
    s["stats"] = os.path.join(tmpdir, f"{s['dev']}.{s['n']}.json")
    s["err"] = open(os.path.join(tmpdir, f"{s['dev']}.{s['n']}.err"), "w+")
    run_for = secs + (30 if s["end"] == "kill" else 0)
    s["secs"] = secs
    s["spawned"] = time.monotonic()
    s["kill_at"] = None
    s["killed"] = False
    s["proc"] = subprocess.Popen(
        [sys.executable, "-B", os.path.abspath(__file__), "worker", s["dev"], s["kind"], s["gid"],
         str(s["seed"]), f"{run_for:.2f}", s["stats"], s["end"]],
        stdout=s["err"], stderr=subprocess.STDOUT)


def collect(s, p):
    rc = p.returncode
    how = s["end"]
    if rc < 0 and s["killed"] and how == "kill":
        what = "killed"
    elif rc == 0 and how in ("close", "exit"):
        what = "closed" if how == "close" else "exited without closing"
    else:
        s["err"].seek(0)
        out = s["err"].read()[-800:].replace("\n", ";")
        sig = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit {rc}"
        s["problems"].append(f"worker {s['n']} (seed {s['seed']}, end {how}) ended by {sig}: {out}")
        what = "failed"
    s["ends"][what] = s["ends"].get(what, 0) + 1
    s["err"].close()
    try:
        with open(s["stats"]) as f:
            st = json.load(f)
    except (OSError, ValueError):
        return
    s["uids"].add(st["uid"])
    s["ops"] += st["ops"]
    s["failed"] += st["failed"]
    for op, o in st["by_op"].items():
        mine = s["by_op"].setdefault(op, {})
        for k, v in o.items():
            mine[k] = mine.get(k, 0) + v
            if k != "ok":
                s["hist"][k] = s["hist"].get(k, 0) + v


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        return worker(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "run":
        return run(sys.argv[2:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
