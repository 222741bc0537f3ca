#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Systematic allocation failures in a driver's paths (fail-nth sweeps).

Usage: failnth.py probe DRIVER BDF
       failnth.py verbs IBDEV roce|iwarp [GID_INDEX]
       failnth.py kernel MODULE IBDEV OBJECT...
       failnth.py cm ADDR roce|iwarp

The kernel's fault injection (Documentation/fault-injection) fails the n-th
allocation of the calling task that its filters let through, when n is
written to /proc/thread-self/fail-nth; reading the file back says whether the
n-th point was reached (0) or not. failnth.sh sets the filters (failslab and
fail_page_alloc, sleeping allocations included, and a stack filter that
requires the driver's code among the callers), and this script sweeps each
operation: n = 1, 2, ... until the operation completes without reaching its
n-th point. Every injected failure must end in an error the caller sees
(errno), with nothing left behind, and the next attempt must work.

  probe: the function is unbound from DRIVER and bound again through sysfs,
         the bind failing at each point; after each failure the function must
         be unbound.
  verbs: through pyverbs (the stock provider) on IBDEV: user context, PD, CQ,
         MR, RC QP, and on RoCEv2 a QP moved to RTS (by GID, to itself).
         (Address handles are the kernel's only: uverbs has no AH verbs for
         these devices.)
  kernel: a kernel consumer's objects on IBDEV, one OBJECT per sweep:
         MODULE (erdma_kverbs_test, loaded with sweep_device=IBDEV) creates
         and destroys one (dma_mr: a PD with a DMA region, cq, qp, qp_rts,
         frmr, ah) at each write of its name to the module's "sweep"
         parameter, in the writer's thread, and fails the write with the
         error met.
  cm:    rdma_cm's connection set-up towards ADDR (the adapter's own
         address): a listener, a connection resolved, requested, accepted and
         established, then disconnected, client and server in this thread on
         two event channels. A failure must come back as an errno or an event
         (rejected, unreachable, connection error) within CM_EVENT_S seconds.

Prints TAP points ("ok N - ..."), one per operation, with the number of
points swept; exits 1 if one failed. A kernel report ends the guest (the
harness's panic_on_warn), which fails the scenario.
"""

import errno
import os
import re
import signal
import sys
import time

from rc_attr import rc_rts_attr

# Every sweep stops here at the latest: an operation with more points than
# this is reported as not finished (a loop in the driver, or a new path).
MAX_POINTS = int(os.environ.get("FAILNTH_MAX_POINTS", "400"))
# Sampled sweeps (the probe, rdma_cm) also sweep each of the last TAIL points.
TAIL = 16
# The probe: every point up to here, then every PROBE_STRIDE-th.
PROBE_DENSE = 80
PROBE_STRIDE = 48

# rdma_cm's set-up: every point up to here, then every CM_STRIDE-th.
# (FAILNTH_CM_SAMPLE="DENSE STRIDE" samples more coarsely, for a driver whose
# set-up has thousands of points in the caller's thread.)
CM_DENSE, CM_STRIDE = (int(x) for x in os.environ.get("FAILNTH_CM_SAMPLE", "60 32").split())
# The longest wait for an rdma_cm event: a failure must come back sooner.
CM_EVENT_S = 15

results = []


# FAILNTH_KNOWN (a regular expression): the failures a reference run expects
# of the driver under test (the upstream C driver's, written up in
# Documentation/infiniband/erdma_rs_selftests.rst). A failing point whose text
# it matches passes, saying so; any other fails.
KNOWN = os.environ.get("FAILNTH_KNOWN")


def tap(name, ok, detail):
    text = f"{name}: {detail}"
    if not ok and KNOWN and re.search(KNOWN, text):
        ok = True
        text += " (a known failure of this driver: FAILNTH_KNOWN)"
    results.append(ok)
    print(f"{'ok' if ok else 'not ok'} {len(results)} - {text}", flush=True)


class FailNth:
    """The calling thread's fail-nth file."""

    def __init__(self):
        self.fd = os.open("/proc/thread-self/fail-nth", os.O_RDWR)

    def arm(self, n):
        os.pwrite(self.fd, str(n).encode(), 0)

    def reached(self):
        """Whether the armed point was reached (and failed); disarms."""
        left = int(os.pread(self.fd, 32, 0).decode().strip() or "0")
        if left:
            os.pwrite(self.fd, b"0", 0)
        return left == 0


def progress(text):
    """A line in the kernel log (the guest's console shows how far a long
    sweep has come)."""
    try:
        with open("/dev/kmsg", "w") as f:
            f.write(f"failnth.py: {text}\n")
    except OSError:
        pass


def ordinal(n):
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def sweep(name, attempt, after_failure=None, dense=None, stride=1):
    """Runs `attempt()` with the n-th point failing, n = 1, 2, ... until the
    operation completes without reaching its n-th point; `attempt` raises
    (OSError or a pyverbs error) on failure and cleans up what it made on
    success. With `dense`: every point up to `dense`, then every `stride`-th
    until a step passes the end, then a bisection for the end, then every
    point of the last TAIL before it (so the operation's own first and last
    points are all swept, and the middle is sampled). Prints a TAP point."""
    fn = FailNth()
    failures = {}
    swept = 0
    reached = 0  # the highest point that failed
    tried = set()
    start = time.monotonic()

    def run(n):
        """One attempt failing point n: None if n was past the end, True if
        it failed there cleanly, or a TAP failure's text."""
        nonlocal swept, reached
        if swept and swept % 50 == 0:
            progress(f"{name}: {swept} points swept in {time.monotonic() - start:.0f} s, up to {reached}")
        tried.add(n)
        fn.arm(n)
        err = None
        try:
            attempt()
        except Exception as ex:  # pyverbs raises its own error types
            err = ex
        hit = fn.reached()
        swept += 1
        if not hit:
            return f"failed without an injected fault at point {n}: {err}" if err is not None else None
        reached = max(reached, n)
        if err is None:
            # The failure was absorbed (a retry, a fallback): allowed, the
            # operation worked.
            failures["absorbed"] = failures.get("absorbed", 0) + 1
        else:
            code = getattr(err, "errno", None) or getattr(err, "error_code", None)
            key = errno.errorcode.get(abs(code), str(code)) if isinstance(code, int) else type(err).__name__
            key = getattr(err, "key", key)
            failures[key] = failures.get(key, 0) + 1
        if after_failure is not None:
            problem = after_failure(err)
            if problem:
                return f"after the failure at point {n}: {problem}"
        return True

    def done():
        how = f"{sum(failures.values())} points failed cleanly ({summary(failures)})"
        if dense is not None and reached > dense:
            how += (f" of {reached}: every one to {dense}, every {ordinal(stride)} after, "
                    f"and the last {TAIL}")
        tap(name, True, how + ", then it worked")

    # Every point while dense (all of them without `dense`).
    n = 1
    while dense is None or n <= dense:
        if swept >= MAX_POINTS:
            break
        r = run(n)
        if r is None:
            return done()
        if r is not True:
            return tap(name, False, r)
        n += 1
    # Steps of `stride` until one passes the end.
    lo, hi = n - 1, None
    while hi is None and swept < MAX_POINTS:
        n = lo + stride
        r = run(n)
        if r is None:
            hi = n
        elif r is not True:
            return tap(name, False, r)
        else:
            lo = n
    # The end, between lo (reached) and hi (not), by bisection.
    while hi is not None and hi - lo > 1 and swept < MAX_POINTS:
        mid = (lo + hi) // 2
        r = run(mid)
        if r is None:
            hi = mid
        elif r is not True:
            return tap(name, False, r)
        else:
            lo = mid
    # The last points before it, each.
    if hi is not None:
        for n in range(max(dense + 1, hi - TAIL), hi):
            if n in tried:
                continue
            if swept >= MAX_POINTS:
                break
            r = run(n)
            if r is None:
                break
            if r is not True:
                return tap(name, False, r)
        else:
            return done()
        if swept < MAX_POINTS:
            return done()
    tap(name, False, f"still reaching new points after {MAX_POINTS} attempts (up to point {reached}: "
                     f"{summary(failures)})")


def summary(failures):
    return ", ".join(f"{k} {v}" for k, v in sorted(failures.items())) or "none"


def sweep_probe(driver, bdf):
    drv = f"/sys/bus/pci/drivers/{driver}"
    dev = f"{drv}/{bdf}"

    def unbind():
        if os.path.exists(dev):
            with open(f"{drv}/unbind", "w") as f:
                f.write(bdf)

    def bind():
        # The write is the probe: it runs in this thread.
        fd = os.open(f"{drv}/bind", os.O_WRONLY)
        try:
            os.write(fd, bdf.encode())
        finally:
            os.close(fd)

    def attempt():
        unbind()
        bind()

    def after_failure(err):
        if err is not None and os.path.exists(dev):
            return f"the bind failed ({err}) but {bdf} is bound"
        return None

    # The RDMA core's registration has hundreds of points (sysfs, counters, the
    # MAD layer): sampled, after every point of the driver's own start.
    sweep(f"probe of {bdf} by {driver}", attempt, after_failure, dense=PROBE_DENSE, stride=PROBE_STRIDE)
    if not os.path.exists(dev):
        bind()


def sweep_verbs(ibdev, proto, gid_index):
    import pyverbs.enums as e
    from pyverbs.cq import CQ
    from pyverbs.device import Context
    from pyverbs.mr import MR
    from pyverbs.pd import PD
    from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr

    port = 1
    sweep(f"{ibdev}: user context", lambda: Context(name=ibdev).close())
    ctx = Context(name=ibdev)
    sweep(f"{ibdev}: PD", lambda: PD(ctx).close())
    pd = PD(ctx)
    sweep(f"{ibdev}: CQ", lambda: CQ(ctx, 64, None, None, 0).close())
    cq = CQ(ctx, 64, None, None, 0)
    access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    sweep(f"{ibdev}: MR of 64 KiB", lambda: MR(pd, 64 * 1024, access).close())
    cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)
    init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)
    sweep(f"{ibdev}: RC QP", lambda: QP(pd, init).close())
    if proto == "roce":
        gid = ctx.query_gid(port, gid_index)

        def to_rts():
            qp = QP(pd, init, QPAttr(port_num=port))
            try:
                qp.to_rts(rc_rts_attr(port, qp.qp_num, gid, gid_index))
            finally:
                qp.close()
        # The points of the QP's creation come first (swept above as well),
        # then those of its moves.
        sweep(f"{ibdev}: RC QP created and moved to RTS", to_rts)
    for o in (cq, pd, ctx):
        o.close()


def sweep_kernel(module, ibdev, objects):
    """The module (erdma_kverbs_test) is loaded for IBDEV; each write of an
    object's name to its "sweep" parameter creates and destroys that object
    in this thread and fails with the error met."""
    param = f"/sys/module/{module}/parameters/sweep"
    for what in objects:
        def attempt():
            fd = os.open(param, os.O_WRONLY)
            try:
                os.write(fd, what.encode())
            finally:
                os.close(fd)

        sweep(f"{ibdev}: kernel {what}", attempt)


class CmEventError(Exception):
    """An rdma_cm event other than the one awaited: a clean failure."""

    def __init__(self, what, event):
        super().__init__(f"{what}: event {event}")
        self.key = f"event {event}"


class CmTimeout(Exception):
    pass


def sweep_cm(addr, proto):
    import pyverbs.cm_enums as ce
    import pyverbs.enums as e
    from pyverbs.cmid import AddrInfo, CMEvent, CMEventChannel, CMID, ConnParam
    from pyverbs.pyverbs_error import PyverbsRDMAError
    from pyverbs.qp import QPCap, QPInitAttr

    waiting = [""]

    def alarm(_sig, _frame):
        raise CmTimeout(f"no rdma_cm event within {CM_EVENT_S} s ({waiting[0]})")

    signal.signal(signal.SIGALRM, alarm)
    port = [7400]
    tcp = ce.RDMA_PS_TCP

    def expect(channel, want, what):
        waiting[0] = what
        signal.setitimer(signal.ITIMER_REAL, CM_EVENT_S)
        try:
            ev = CMEvent(channel)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if ev.event_type != want:
            got = ev.event_type
            ev.ack_cm_event()
            raise CmEventError(what, got)
        return ev

    def init():
        cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
        return QPInitAttr(qp_type=e.IBV_QPT_RC, cap=cap)

    def attempt():
        port[0] += 1
        made = []  # closed in reverse order
        try:
            ch_s = CMEventChannel()
            made.append(ch_s)
            ch_c = CMEventChannel()
            made.append(ch_c)
            listener = CMID(creator=ch_s, port_space=tcp)
            made.append(listener)
            listener.bind_addr(AddrInfo(src=addr, src_service=str(port[0]), port_space=tcp,
                                        flags=ce.RAI_PASSIVE))
            listener.listen()
            client = CMID(creator=ch_c, port_space=tcp)
            made.append(client)
            client.resolve_addr(AddrInfo(src=addr, dst=addr, dst_service=str(port[0]),
                                         port_space=tcp))
            expect(ch_c, ce.RDMA_CM_EVENT_ADDR_RESOLVED, "address").ack_cm_event()
            client.resolve_route()
            expect(ch_c, ce.RDMA_CM_EVENT_ROUTE_RESOLVED, "route").ack_cm_event()
            client.create_qp(init())
            client.connect(ConnParam())
            ev = expect(ch_s, ce.RDMA_CM_EVENT_CONNECT_REQUEST, "request")
            server = CMID(creator=ev, listen_id=listener)
            ev.ack_cm_event()
            made.append(server)
            server.create_qp(init())
            server.accept(ConnParam())
            expect(ch_c, ce.RDMA_CM_EVENT_ESTABLISHED, "client established").ack_cm_event()
            expect(ch_s, ce.RDMA_CM_EVENT_ESTABLISHED, "server established").ack_cm_event()
            client.disconnect()
            expect(ch_s, ce.RDMA_CM_EVENT_DISCONNECTED, "server disconnected").ack_cm_event()
            # The server's answer (RoCEv2's DREP); on iWARP the connection is
            # gone already, and rdma_cm may say so (EINVAL).
            try:
                server.disconnect()
            except PyverbsRDMAError:
                pass
            expect(ch_c, ce.RDMA_CM_EVENT_DISCONNECTED, "client disconnected").ack_cm_event()
        finally:
            for o in reversed(made):
                o.close()

    def after_failure(err):
        if isinstance(err, CmTimeout):
            return str(err)
        return None

    # How many points an attempt reaches varies with timing (socket backlogs
    # processed in this thread): ours about 170 to 300 on iWARP, more the
    # first time; the C driver's about 2,200. Sampled like the probe.
    sweep(f"rdma_cm on {addr} ({proto}): listen, connect, accept, disconnect", attempt, after_failure,
          dense=CM_DENSE, stride=CM_STRIDE)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "probe":
        sweep_probe(sys.argv[2], sys.argv[3])
    elif len(sys.argv) in (4, 5) and sys.argv[1] == "verbs" and sys.argv[3] in ("roce", "iwarp"):
        sweep_verbs(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) == 5 else 0)
    elif len(sys.argv) >= 5 and sys.argv[1] == "kernel":
        sweep_kernel(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif len(sys.argv) == 4 and sys.argv[1] == "cm" and sys.argv[3] in ("roce", "iwarp"):
        sweep_cm(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
    # Work the kernel deferred (freeing after RCU, ...) settles before the
    # caller checks for leaks.
    time.sleep(1)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
