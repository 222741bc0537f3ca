#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Bad requests through the raw uverbs write() interface of an erdma device.

Usage: uverbs_bad.py IBDEV [--strict]
       uverbs_bad.py IBDEV --ah GID-INDEX
       uverbs_bad.py IBDEV --mr-layouts SIZE...
       uverbs_bad.py IBDEV --teardown

Opens the device's uverbs character device, gets a context and a PD, and sends
CREATE_CQ, CREATE_QP and REG_MR commands whose erdma driver data (erdma-abi.h)
or core attributes are wrong: short or oversized udata, non-zero reserved
bytes, queue buffers too small for the depth, unaligned or overflowing
ranges, unmapped memory, out-of-range depths. Each must fail with the errno
ib_core users expect; a well-formed request must then still succeed, so the
checks cannot pass by accident. --ah sends CREATE_AH and DESTROY_AH commands
(which the stock provider never sends, but any program can) with a bad PD or
AH handle, a bad port, no GRH, an SGID index out of the table or on an empty
entry, an unreachable destination, garbage driver data, short commands and no
room for the response, and destroys an AH twice. Neither the upstream C
driver (on this kernel) nor ours offers user address handles (no
create_user_ah: the stock provider has no create_ah either), so the core
leaves the AH object out of the device's uverbs API and every one of these
commands must fail with EOPNOTSUPP whatever it carries.
--strict adds the checks the upstream C
driver does not make (buffers too small for the depth, misaligned queue
buffers and doorbell records, IOVA ranges that wrap). Prints TAP lines
("ok N - ..." / "not ok N - ...") without a header; exits 1 on a failure.
"""

import ctypes
import errno
import glob
import mmap
import os
import struct
import sys

CMD_GET_CONTEXT = 0
CMD_ALLOC_PD = 3
CMD_CREATE_AH = 5
CMD_DESTROY_AH = 8
CMD_REG_MR = 9
CMD_DEREG_MR = 13
CMD_CREATE_CQ = 18
CMD_DESTROY_CQ = 20
CMD_CREATE_QP = 24
CMD_DESTROY_QP = 27
QPT_RC = 2
PAGE = 4096

ACCESS_LOCAL_WRITE = 1

results = []


def uverbs_path(ibdev):
    for d in glob.glob("/sys/class/infiniband_verbs/uverbs*"):
        with open(d + "/ibdev") as f:
            if f.read().strip() == ibdev:
                return "/dev/infiniband/" + os.path.basename(d)
    raise SystemExit(f"no uverbs device for {ibdev}")


class Uverbs:
    def __init__(self, path):
        self.fd = os.open(path, os.O_RDWR)
        self.resp = ctypes.create_string_buffer(256)

    def cmd(self, op, body, driver=b"", resp_len=0, drv_out=0):
        """One legacy write command: body starts with the response pointer
        (filled in here), driver data follows. Returns (errno, response)."""
        ctypes.memset(self.resp, 0, len(self.resp))
        if resp_len or drv_out:
            body = struct.pack("<Q", ctypes.addressof(self.resp)) + body[8:]
        payload = body + driver
        assert len(payload) % 4 == 0
        out_words = (resp_len + drv_out + 3) // 4
        hdr = struct.pack("<IHH", op, (8 + len(payload)) // 4, out_words)
        try:
            os.write(self.fd, hdr + payload)
        except OSError as e:
            return e.errno, b""
        return 0, self.resp.raw[: resp_len + drv_out]


def buffer(size):
    """Page-aligned private anonymous memory and its address (a shared mapping would be
    shmem, whose page faults cost the debug kernel about twice as much)."""
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return m, ctypes.addressof(ctypes.c_char.from_buffer(m))


def read_only_page():
    """A page of buffer() made read-only: (its mapping, to keep, and its address)."""
    m, addr = buffer(PAGE)
    if ctypes.CDLL(None, use_errno=True).mprotect(ctypes.c_void_p(addr), PAGE, mmap.PROT_READ):
        raise OSError(ctypes.get_errno(), "mprotect(PROT_READ) failed")
    return m, addr


def tap(name, got, want, show):
    """One TAP test point: `got` must equal `want`; both are shown through `show`."""
    ok = got == want
    results.append(ok)
    status = "ok" if ok else "not ok"
    print(f"{status} {len(results)} - {name}: {show(got)}" + ("" if ok else f" (expected {show(want)})"),
          flush=True)


def check(name, got, want):
    """An errno test point (0 for success)."""
    tap(name, got, want, lambda e: errno.errorcode.get(e, e))


def cq_body(cqe, vector=0):
    # response, user_handle, cqe, comp_vector, comp_channel (-1), reserved
    return struct.pack("<QQIIiI", 0, 0, cqe, vector, -1, 0)


def cq_udata(db, qbuf, qlen, reserved=0):
    return struct.pack("<QQII", db, qbuf, qlen, reserved)


def qp_body(pd, cq, sw=16, rw=16, ssge=1, rsge=1, inline=0):
    return struct.pack("<QQIIIIIIIIIBBBB", 0, 0, pd, cq, cq, 0, sw, rw, ssge, rsge,
                       inline, 0, QPT_RC, 0, 0)


def mr_layouts(uv, pd, sizes):
    """Registers MRs of `sizes` bytes whose IOVA is one page off the 2 MiB alignment
    of their memory, so that they are described in 4 KiB pages; prints "mr STAG PAGES"
    for each, then "ready", and keeps them until a line arrives on stdin."""
    keep = []
    for size in sizes:
        mem, addr = buffer(size + (2 << 20))
        # Start one page into a 2 MiB-aligned stretch, and give the IOVA the other parity.
        start = ((addr + (2 << 20) - 1) & ~((2 << 20) - 1)) + PAGE
        err, r = uv.cmd(CMD_REG_MR, struct.pack("<QQQQII", 0, start, size, start + PAGE, pd,
                                                 ACCESS_LOCAL_WRITE), resp_len=12)
        if err:
            print(f"mr error {errno.errorcode.get(err, err)} {size}", flush=True)
            continue
        _, lkey, _ = struct.unpack_from("<III", r)
        print(f"mr {lkey:#x} {size // PAGE}", flush=True)
        keep.append(mem)
    print("ready", flush=True)
    sys.stdin.readline()


def teardown(uv, pd):
    """Creates a CQ, an RC QP on it and an MR, then destroys the QP, the MR and the CQ;
    each destruction must succeed for the caller whatever the adapter answers (the test
    makes it refuse them: the driver keeps the memory and reports it)."""
    qmem, qbuf = buffer(1 << 20)
    dmem, db = buffer(PAGE)
    err, r = uv.cmd(CMD_CREATE_CQ, cq_body(64), cq_udata(db, qbuf, 4096), resp_len=8, drv_out=8)
    check("CREATE_CQ", err, 0)
    if err:
        return
    cq = struct.unpack_from("<I", r)[0]
    err, r = uv.cmd(CMD_CREATE_QP, qp_body(pd, cq), cq_udata(db + 16, qbuf + (64 << 10), 1 << 16),
                    resp_len=32, drv_out=16)
    check("CREATE_QP", err, 0)
    qp = struct.unpack_from("<I", r)[0] if err == 0 else None
    err, r = uv.cmd(CMD_REG_MR, struct.pack("<QQQQII", 0, qbuf + (512 << 10), 256 << 10,
                                            qbuf + (512 << 10), pd, ACCESS_LOCAL_WRITE),
                    resp_len=12)
    check("REG_MR of 64 pages", err, 0)
    mr = struct.unpack_from("<I", r)[0] if err == 0 else None
    if qp is not None:
        err, _ = uv.cmd(CMD_DESTROY_QP, struct.pack("<QII", 0, qp, 0), resp_len=4)
        check("DESTROY_QP", err, 0)
    if mr is not None:
        err, _ = uv.cmd(CMD_DEREG_MR, struct.pack("<I", mr))
        check("DEREG_MR", err, 0)
    err, _ = uv.cmd(CMD_DESTROY_CQ, struct.pack("<QII", 0, cq, 0), resp_len=8)
    check("DESTROY_CQ", err, 0)
    del qmem, dmem


def pinned_kib():
    """The pages this process has pinned (ib_umem_get counts them in VmPin), in KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmPin:"):
                return int(line.split()[1])
    raise SystemExit("no VmPin in /proc/self/status")


def pin_check(name, got_kib, want_kib):
    tap(name, got_kib, want_kib, lambda k: f"{k} KiB pinned")


def shared_record_page(uv, pd, cq, qbuf, db):
    """Queues whose doorbell records share a page (as the provider places them) pin it once:
    with CQ `cq`'s record already on page `db`, 8 more CQs of one buffer page each and an RC
    QP (a send and a receive queue page) pin 10 pages, and their destruction unpins them."""
    before = pinned_kib()
    cqs = []
    for i in range(8):
        udata = cq_udata(db + 32 + 8 * i, qbuf + (256 << 10) + i * PAGE, PAGE)
        err, r = uv.cmd(CMD_CREATE_CQ, cq_body(64), udata, resp_len=8, drv_out=8)
        if err:
            check(f"CREATE_CQ {i + 2} with its record on the first CQ's page", err, 0)
            return
        cqs.append(struct.unpack_from("<I", r)[0])
    err, r = uv.cmd(CMD_CREATE_QP, qp_body(pd, cq), cq_udata(db + 96, qbuf + (512 << 10), 2 * PAGE),
                    resp_len=32, drv_out=16)
    if err:
        check("CREATE_QP with its records on the first CQ's page", err, 0)
        return
    qp = struct.unpack_from("<I", r)[0]
    pin_check("8 CQs and a QP with records on one pinned page pin only their queues",
              pinned_kib() - before, 10 * PAGE // 1024)
    err, _ = uv.cmd(CMD_DESTROY_QP, struct.pack("<QII", 0, qp, 0), resp_len=4)
    for c in cqs:
        err = err or uv.cmd(CMD_DESTROY_CQ, struct.pack("<QII", 0, c, 0), resp_len=8)[0]
    check("destroying them", err, 0)
    pin_check("and their destruction unpins exactly those pages", pinned_kib() - before, 0)


def ah_body(pd, sgid_index, dgid, port=1, is_global=1, flow_label=0, hop_limit=64,
            traffic_class=0, sl=0, static_rate=0):
    """struct ib_uverbs_create_ah: response, user_handle, pd_handle, reserved, then
    struct ib_uverbs_ah_attr (grh: dgid, flow_label, sgid_index, hop_limit,
    traffic_class, reserved; dlid, sl, src_path_bits, static_rate, is_global,
    port_num, reserved)."""
    return (struct.pack("<QQII", 0, 0, pd, 0) + dgid +
            struct.pack("<IBBBBHBBBBBB", flow_label, sgid_index, hop_limit, traffic_class, 0,
                        0, sl, 0, static_rate, is_global, port, 0))


def read_gid(ibdev, index):
    with open(f"/sys/class/infiniband/{ibdev}/ports/1/gids/{index}") as f:
        return bytes.fromhex(f.read().strip().replace(":", ""))


def gid_table(ibdev):
    """(size of port 1's GID table, the index of an empty entry or None)."""
    entries = sorted(int(g) for g in os.listdir(f"/sys/class/infiniband/{ibdev}/ports/1/gids"))
    empty = next((i for i in entries if read_gid(ibdev, i) == bytes(16)), None)
    return len(entries), empty


def ah_checks(uv, pd, ibdev, gid_index):
    """Bad CREATE_AH and DESTROY_AH commands; see the module's docstring.

    Without create_user_ah the core leaves the AH object out of the device's
    uverbs API: every command fails with EOPNOTSUPP, whatever it carries (a
    driver that offered user address handles would need the core's own errnos
    here, and a well-formed AH made and destroyed).
    """
    gid = read_gid(ibdev, gid_index)
    size, empty = gid_table(ibdev)
    # An IPv4-mapped GID of the guest's link-local network that nobody has.
    nobody = gid[:12] + bytes([gid[12], gid[13], gid[14], 250 if gid[15] != 250 else 251])

    def create(what, body, driver=b"", resp_len=4):
        err, _ = uv.cmd(CMD_CREATE_AH, body, driver, resp_len=resp_len)
        check(what, err, errno.EOPNOTSUPP)

    def destroy(what, body):
        check(what, uv.cmd(CMD_DESTROY_AH, body)[0], errno.EOPNOTSUPP)

    create("CREATE_AH with a bad PD handle", ah_body(pd + 1000, gid_index, gid))
    create("CREATE_AH on port 0", ah_body(pd, gid_index, gid, port=0))
    create("CREATE_AH on port 2 of a one-port device", ah_body(pd, gid_index, gid, port=2))
    create("CREATE_AH without a GRH on RoCE", ah_body(pd, gid_index, gid, is_global=0))
    create(f"CREATE_AH with SGID index 255 (the table has {size})", ah_body(pd, 255, gid))
    if empty is not None:
        create(f"CREATE_AH with SGID index {empty}, an empty entry", ah_body(pd, empty, gid))
    create("CREATE_AH to a destination nobody has (no neighbour)",
           ah_body(pd, gid_index, nobody))
    create("CREATE_AH with no room for the response", ah_body(pd, gid_index, gid), resp_len=0)
    create("CREATE_AH cut short (32 of 64 bytes)", ah_body(pd, gid_index, gid)[:32])
    create("CREATE_AH with 64 bytes of garbage driver data", ah_body(pd, gid_index, gid),
           b"\xff" * 64)
    create("CREATE_AH with every GRH and rate field at its maximum",
           ah_body(pd, gid_index, gid, flow_label=0xfffff, hop_limit=0, traffic_class=0xff,
                   sl=7, static_rate=0xff))
    create("CREATE_AH well-formed", ah_body(pd, gid_index, gid))
    destroy("DESTROY_AH of a handle never given out", struct.pack("<I", 0xdeadbeef))
    destroy("DESTROY_AH of the PD's handle", struct.pack("<I", pd))
    destroy("DESTROY_AH with no handle (a header alone)", b"")


def main():
    ibdev = sys.argv[1]
    strict = "--strict" in sys.argv
    uv = Uverbs(uverbs_path(ibdev))

    # A context; too little room for the driver's response is refused.
    err, _ = uv.cmd(CMD_GET_CONTEXT, struct.pack("<Q", 0), resp_len=8, drv_out=8)
    check("GET_CONTEXT with a short response buffer", err, errno.EINVAL)
    err, _ = uv.cmd(CMD_GET_CONTEXT, struct.pack("<Q", 0), resp_len=8, drv_out=40)
    check("GET_CONTEXT", err, 0)
    err, r = uv.cmd(CMD_ALLOC_PD, struct.pack("<Q", 0), resp_len=4)
    check("ALLOC_PD", err, 0)
    pd = struct.unpack_from("<I", r)[0]
    if "--mr-layouts" in sys.argv:
        mr_layouts(uv, pd, [int(a) for a in sys.argv[2:] if a.isdigit()])
        return 0
    if "--ah" in sys.argv:
        ah_checks(uv, pd, ibdev, int(sys.argv[sys.argv.index("--ah") + 1]))
        os.close(uv.fd)
        return 0 if all(results) else 1
    if "--teardown" in sys.argv:
        teardown(uv, pd)
        os.close(uv.fd)
        return 0 if all(results) else 1

    qmem, qbuf = buffer(1 << 20)
    dmem, db = buffer(PAGE)

    def create_cq(cqe, udata, vector=0):
        return uv.cmd(CMD_CREATE_CQ, cq_body(cqe, vector), udata, resp_len=8, drv_out=8)

    err, _ = create_cq(64, cq_udata(db, qbuf, 4096)[:16])
    check("CREATE_CQ with 16 of 24 bytes of driver data", err, errno.EINVAL)
    err, _ = create_cq(64, cq_udata(db, qbuf, 4096) + struct.pack("<Q", 1))
    check("CREATE_CQ with non-zero bytes beyond the driver data", err, errno.EOPNOTSUPP)
    err, _ = create_cq(1 << 30, cq_udata(db, qbuf, 1 << 20))
    check("CREATE_CQ deeper than max_cqe", err, errno.EINVAL)
    err, _ = create_cq(64, cq_udata(db, 0x10000, 4096))
    check("CREATE_CQ with an unmapped buffer", err, errno.EFAULT)
    err, _ = create_cq(64, cq_udata(db, 0xffff_ffff_ffff_ffc0, 4096))
    check("CREATE_CQ with a buffer wrapping the address space", err, errno.EINVAL)
    if strict:
        # The adapter writes completions into the ring, so it is pinned for writing: memory
        # the caller may only read is refused (the upstream C driver pins it read-only and
        # takes it).
        _ro_mapping, roaddr = read_only_page()
        err, _ = create_cq(64, cq_udata(db, roaddr, 4096))
        check("CREATE_CQ with a read-only ring", err, errno.EFAULT)
        err, _ = create_cq(64, cq_udata(db + PAGE - 4, qbuf, 4096))
        check("CREATE_CQ with a misaligned doorbell record", err, errno.EINVAL)
        err, _ = create_cq(1024, cq_udata(db, qbuf, 4096))
        check("CREATE_CQ with a buffer too small for the depth", err, errno.EINVAL)
    err, r = create_cq(64, cq_udata(db, qbuf, 4096))
    check("CREATE_CQ well-formed", err, 0)
    cq = struct.unpack_from("<I", r)[0]
    shared_record_page(uv, pd, cq, qbuf, db)

    def create_qp(udata, **kw):
        return uv.cmd(CMD_CREATE_QP, qp_body(pd, cq, **kw), udata, resp_len=32, drv_out=16)

    good = cq_udata(db + 16, qbuf + (64 << 10), 1 << 16)
    err, _ = create_qp(good[:8])
    check("CREATE_QP with 8 of 24 bytes of driver data", err, errno.EINVAL)
    err, _ = create_qp(cq_udata(db + 16, qbuf + (64 << 10), 1 << 16, reserved=0) + b"\x01" + b"\0" * 7)
    check("CREATE_QP with non-zero bytes beyond the driver data", err, errno.EOPNOTSUPP)
    err, _ = create_qp(good, sw=0)
    check("CREATE_QP with no send work requests", err, errno.EINVAL)
    err, _ = create_qp(good, sw=8193)
    check("CREATE_QP with 8193 send work requests", err, errno.EINVAL)
    err, _ = create_qp(good, ssge=7)
    check("CREATE_QP with 7 send SGEs", err, errno.EINVAL)
    err, _ = create_qp(good, rsge=2)
    check("CREATE_QP with 2 receive SGEs", err, errno.EINVAL)
    err, _ = create_qp(good, inline=97)
    check("CREATE_QP with 97 inline bytes", err, errno.EINVAL)
    if strict:
        err, _ = create_qp(cq_udata(db + PAGE - 8, qbuf + (64 << 10), 1 << 16))
        check("CREATE_QP with doorbell records crossing a page", err, errno.EINVAL)
        # 16 WRs: a 2 KiB send queue rounded to 4 KiB, then a 512-byte receive queue.
        err, _ = create_qp(cq_udata(db + 16, qbuf + (64 << 10), 4096))
        check("CREATE_QP with a buffer too small for the receive queue", err, errno.EINVAL)
        err, _ = create_qp(cq_udata(db + 16, qbuf + (64 << 10) + 64, 1 << 16))
        check("CREATE_QP with a buffer not 4 KiB aligned", err, errno.EINVAL)
    err, r = create_qp(good)
    check("CREATE_QP well-formed", err, 0)
    if err == 0:
        qp = struct.unpack_from("<I", r)[0]
        err, _ = uv.cmd(CMD_DESTROY_QP, struct.pack("<QII", 0, qp, 0), resp_len=4)
        check("DESTROY_QP", err, 0)

    def reg_mr(start, length, iova, access=ACCESS_LOCAL_WRITE):
        return uv.cmd(CMD_REG_MR, struct.pack("<QQQQII", 0, start, length, iova, pd, access),
                      resp_len=12)

    err, _ = reg_mr(qbuf, 0, qbuf)
    check("REG_MR of 0 bytes", err, errno.EINVAL)
    if strict:
        err, _ = reg_mr(qbuf, 1 << 20, 0xffff_ffff_ffff_0000)
        check("REG_MR whose IOVA range wraps", err, errno.EINVAL)
    err, _ = reg_mr(qbuf, 1 << 62, qbuf)
    check("REG_MR longer than max_mr_size", err, errno.EINVAL)
    err, _ = reg_mr(0x10000, PAGE, 0x10000)
    check("REG_MR of unmapped memory", err, errno.EFAULT)
    err, r = reg_mr(qbuf, 1 << 20, qbuf)
    check("REG_MR well-formed", err, 0)
    if err == 0:
        mr = struct.unpack_from("<I", r)[0]
        err, _ = uv.cmd(CMD_DEREG_MR, struct.pack("<I", mr))
        check("DEREG_MR", err, 0)

    err, _ = uv.cmd(CMD_DESTROY_CQ, struct.pack("<QII", 0, cq, 0), resp_len=8)
    check("DESTROY_CQ", err, 0)
    os.close(uv.fd)
    del qmem, dmem
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
