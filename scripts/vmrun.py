#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Boot QEMU guests with emulated eRDMA adapters and run a command in each.

One erdma-emu process serves every adapter of the run, one vfio-user socket
each; every adapter is paired with a virtio-net NIC carrying the same MAC.
Guests boot the test kernel with the shared guest userland as their root
file system (read-only: the ext4 image scripts/build-rootfs.sh makes, on
virtio-blk, or its directory over 9p when --rootfs names one), mount a
per-guest payload share (9p), run the command there, write their results
back into it and power off.

    vmrun.py --dev proto=roce --dev proto=iwarp --guest 0,1 --run 'sh t.sh'
    vmrun.py --dev proto=roce --dev proto=roce --guest 0 --guest 1 ...

The command runs in the payload directory with ERDMA_PAYLOAD (that
directory, holding the adapters file that marks the guest's adapters as
emulated for the selftests), ERDMA_RESULTS (its results/), ERDMA_GUEST (the
guest's index) and ERDMA_GUESTS (the number of guests of the run: the
selftests between two guests run only with a peer) in its environment.

With --disk (one per guest), a guest boots as an installed system instead
(the rehearsal of an ECS instance, tests/rehearsal.sh): its root file system is
that disk image (label erdma-root) with its own init, and --kernel/--initrd
are the kernel and initramfs to boot. The payload is then a second disk
(an ext4 image labelled erdma-payload, whose init.sh the image's
erdma-payload.service runs at boot); the guest shuts down through its init
when the command is done, and results/ is read back from that disk.

The guests boot the debug kernel (KASAN, lockdep, UBSAN, kmemleak, ...) by
default. Its reports end a guest within seconds: oopses, BUG()s, WARN()s (and
KASAN and UBSAN reports, which go through panic_on_warn=1), soft lockups and
hung tasks panic the guest (panic=-1 with -no-reboot ends QEMU at once); the
reports that do not panic (lockdep, sleeping in atomic context, RCU stalls)
are seen on the console, and the guest is killed two seconds later. The
report goes into the TAP file of the test that was running (as its last,
failing test point, with the console trace as diagnostics), and the other
guests of the run go on. At the end of each guest's command kmemleak is
scanned and any leak is a failure (kmemleak.tap); --kmemleak names the guests
that keep it (the others boot with kmemleak=off). See KERNEL_REPORT for what
counts as a report. --tolerate REGEX names a report to record and let pass
(results/tolerated-reports.txt), and nothing else: make bench uses it for one
known WARN of its outside reference, rdma_rxe. Every guest also checks that
it has the vCPUs it was given (machine.tap).

Exit status: 0 when every guest ran its command with exit status 0, made no
kernel report, and every TAP file it wrote has no failure; 1 otherwise; 2 on
bad usage or missing artifacts.
"""

import argparse
import bisect
import collections
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("ERDMA_CACHE",
                            Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "erdma-rs"))

# The first line of a kernel report: the guest kernel is broken, whatever the
# tests say. Only kernel lines count: a printk timestamp, then the headline at
# once (anywhere in a console line, as the console interleaves the kernel's
# lines with the tests' output; a test that quotes dmesg can only quote a
# report the console showed first, as every headline below is printed at
# KERN_WARNING or above). Only the checkers' own headlines count: BUG()/BUG:
# (oopses, page faults, KASAN, sleeping in atomic context, soft lockups,
# workqueue lockups, bad page state), WARNING: (WARN*(), lockdep, suspicious RCU usage), the
# "cut here" line that precedes a WARN()'s message, Oops, general protection
# faults, panics, UBSAN, hung tasks, RCU stalls, hard lockups, lockdep's
# non-static key report, SLUB's object reports and Rust panics. Device errors
# that tests provoke on purpose are driver messages (dev_warn, dev_err) and do
# not match. "Call Trace:" alone does not count: dump_stack() prints it
# without anything being wrong (sysrq, debugging aids), and every real report
# has its own headline above its trace. kmemleak's "suspected memory leaks"
# line does not count here either: the guest scans on purpose at the end and
# reports the leaks as a TAP failure (kmemleak.tap).
# The line a WARN() prints first; its headline proper (WARNING: ...) follows.
CUT_HERE = re.compile(r"-+\[ cut here \]-+")
KERNEL_REPORT = re.compile(
    r"\[\s*\d+\.\d+\](?:\[\s*[TC]\d+\])? (?:watchdog: |rcu: )?"
    r"(BUG: |BUG \S+ \(.*\): |kernel BUG at |WARNING: |" + CUT_HERE.pattern + r"|Oops|"
    r"general protection fault|Kernel panic|UBSAN: |INFO: task .+ blocked|"
    r"INFO: rcu\w* (?:self-)?detected (?:stall|expedited stall)|"
    r"INFO: trying to register non-static key|Watchdog detected hard LOCKUP|"
    r"\w+: panicked at )")
# A kernel console line (for the trace that follows a report's headline).
KERNEL_LINE = re.compile(r"\[\s*\d+\.\d+\]")
# run_tests.sh names each test before it runs it.
TEST_START = re.compile(r"# selftests: erdma_rs: (\S+)")
# After the first line of a report: how long the guest may go on printing (its
# trace) before it is killed, unless it panics and ends itself first; and how
# long at most, if the console never goes quiet.
REPORT_GRACE_S = 2.0
REPORT_MAX_S = 10.0
REPORT_MAX_LINES = 400
TAP_LINE = re.compile(r"^(not ok|ok)\b(?:\s+\d+)?\s*-?\s*([^#]*)(?:#\s*(\w+)\s*(.*))?$")


def pinned(name):
    """A pin from scripts/versions.sh (the single place versions are set)."""
    m = re.search(rf"^{name}=(\S+)$", (TOP / "scripts" / "versions.sh").read_text(), re.M)
    if not m:
        die(f"{name} is not set in scripts/versions.sh")
    return m.group(1)


def die(msg, code=2):
    print(f"vmrun: error: {msg}", file=sys.stderr)
    sys.exit(code)


def default_path(*parts):
    return CACHE.joinpath(*parts)


def debug_kernel_dir():
    """The build directory of the debug kernel (scripts/build-kernel.sh)."""
    return default_path("linux-" + pinned("KERNEL_PKG_VERSION"), "build-debug")


@dataclass
class Adapter:
    index: int
    proto: str = "roce"
    mac: str = ""
    version: str = ""
    link: int = -1        # the adapter whose NIC this one's is wired to (-1: by default)
    extra: dict = field(default_factory=dict)

    def emu_arg(self, sock):
        parts = [f"socket={sock}", f"mac={self.mac}", f"proto={self.proto}"]
        if self.version:
            parts.append(f"version={self.version}")
        parts += [f"{k}={v}" for k, v in self.extra.items()]
        return ",".join(parts)


def parse_dev(index, spec):
    a = Adapter(index=index, mac=f"52:54:00:e1:00:{index + 1:02x}")
    for item in filter(None, spec.split(",")):
        k, sep, v = item.partition("=")
        if not sep:
            die(f"--dev {spec!r}: expected key=value, got {item!r}")
        if k == "proto":
            if v not in ("roce", "iwarp"):
                die(f"--dev {spec!r}: proto must be roce or iwarp")
            a.proto = v
        elif k == "mac":
            if not re.fullmatch(r"([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}", v):
                die(f"--dev {spec!r}: bad MAC {v!r}")
            a.mac = v.lower()
        elif k == "version":
            a.version = v
        elif k == "link":
            if not v.isdigit():
                die(f"--dev {spec!r}: link is the index of another adapter")
            a.link = int(v)
        else:
            a.extra[k] = v
    return a


class Run:
    """Owns every process of one run and tears them all down."""

    def __init__(self, args):
        self.args = args
        self.procs = []
        self.lock = threading.Lock()
        self.out = Path(args.out).resolve()

    def spawn(self, name, argv, **kw):
        p = subprocess.Popen(argv, start_new_session=True, **kw)
        with self.lock:
            self.procs.append((name, p))
        return p

    def stop_all(self):
        with self.lock:
            procs = list(reversed(self.procs))
        for _, p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 5
        for name, p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"vmrun: {name} ignored SIGTERM; killing it", file=sys.stderr)
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()


def start_emu(run, adapters):
    emu_log = run.out / "emu.log"
    argv = [str(run.args.emu)]
    for a in adapters:
        argv += ["--device", a.emu_arg(run.out / f"dev{a.index}.sock")]
    with open(run.out / "emu.cmdline", "w") as f:
        f.write(shlex.join(argv) + "\n")
    log = open(emu_log, "w")
    p = run.spawn("erdma-emu", argv, stdout=subprocess.PIPE, stderr=log, text=True)
    ready = threading.Event()

    def watch():
        for line in p.stdout:
            if line.startswith("erdma-emu: ready"):
                ready.set()
    threading.Thread(target=watch, daemon=True).start()
    if not ready.wait(15):
        die(f"erdma-emu did not get ready in 15 s; read {emu_log}", 1)
    print(f"vmrun: erdma-emu serving {len(adapters)} adapter(s) (log: {emu_log})", file=sys.stderr)
    return p


def netdev_args(run, a, all_adapters):
    """Every NIC needs a backend. Two NICs in the whole run are wired to each
    other (so traffic can flow between the two adapters' netdevs, in one guest
    or across two guests), and so are two that name each other (link=N);
    otherwise each NIC gets a restricted user-mode backend, which reaches
    nothing outside the guest."""
    nid = f"net{a.index}"
    peer = None
    if a.link >= 0:
        peer = all_adapters[a.link]
    elif len(all_adapters) == 2:
        peer = all_adapters[1 - all_adapters.index(a)]
    if peer is not None:
        return ["-netdev",
                f"dgram,id={nid},local.type=unix,local.path={run.out}/nic{a.index}.sock,"
                f"remote.type=unix,remote.path={run.out}/nic{peer.index}.sock"]
    return ["-netdev", f"user,id={nid},restrict=on,ipv6=off"]


# The end of every guest's command: kmemleak looks for unreferenced objects
# (objects younger than 5 s are not reported). A scan of a guest's memory
# takes about half a minute on the debug kernel under TCG, so a second scan,
# which Documentation/dev-tools/kmemleak.rst suggests against transient false
# positives (a pointer only in a register or in flight between CPUs during the
# scan), runs only when the first reports something; what the second still
# reports is a failure in results/kmemleak.tap with kmemleak's report. The
# kernel does not scan on its own (no DEBUG_KMEMLEAK_AUTO_SCAN), so the only
# scans are these. A kernel without kmemleak (the release kernel) is a skip,
# and so is a guest that --kmemleak left out (booted with kmemleak=off).
#
# kmemleak is the debug kernel's most expensive checker under TCG: it tracks
# every allocation (its stack trace and a tree of objects under its own lock,
# which lockdep checks too). With it off, a fork and exec of /bin/true took
# 42 ms instead of 63, modprobe erdma_rs 1.0 s instead of 1.9, and a boot with
# a short command 25 s instead of 46 (2026-11-27). A scenario that repeats
# paths of the driver that another scenario runs with kmemleak can leave it
# out (tests/check.sh says which).
KMEMLEAK_OFF = "kmemleak=off"
KMEMLEAK_SH = r"""kmemleak_check() {
	k=/sys/kernel/debug/kmemleak t=results/kmemleak.tap
	echo "TAP version 13" >$t
	if grep -qw '""" + KMEMLEAK_OFF + r"""' /proc/cmdline; then
		echo "ok 1 no kmemleak reports # SKIP booted with """ + KMEMLEAK_OFF + r""" (vmrun --kmemleak: this scenario's paths run with kmemleak in another)" >>$t
	elif [ ! -e $k ]; then
		echo "ok 1 no kmemleak reports # SKIP this kernel has no kmemleak ($(uname -r))" >>$t
	elif ! echo scan >$k 2>/dev/null; then
		echo "not ok 1 no kmemleak reports: kmemleak is off (it disables itself on an internal error)" >>$t
		dmesg | grep -i kmemleak | tail -n 5 | sed 's/^/# /' >>$t
	else
		s=$(date +%s)
		cat $k >results/kmemleak.log
		n=$(grep -c '^unreferenced object' results/kmemleak.log)
		echo "# one scan, read $(($(date +%s) - s)) s after it: $n unreferenced objects" >>$t
		if [ "$n" -ne 0 ] && echo scan >$k 2>/dev/null; then
			cat $k >results/kmemleak.log
			n=$(grep -c '^unreferenced object' results/kmemleak.log)
			echo "# a second scan: $n still unreferenced" >>$t
		fi
		if [ "$n" -eq 0 ]; then
			echo "ok 1 no kmemleak reports" >>$t
		else
			echo "not ok 1 no kmemleak reports: $n unreferenced objects" >>$t
			head -n 200 results/kmemleak.log | sed 's/^/# /' >>$t
		fi
	fi
	echo "1..1" >>$t
	cat $t
}"""


def write_payload(run, gi, adapters, command):
    payload = run.out / f"guest{gi}"
    if payload.exists():
        shutil.rmtree(payload)
    (payload / "results").mkdir(parents=True)
    (payload / "bin").mkdir()
    shutil.copy(run.args.testpage, payload / "bin")
    for src in run.args.copy:
        src = Path(src)
        dst = payload / src.name
        if src.is_dir():
            shutil.copytree(src, dst, symlinks=False)
        else:
            shutil.copy(src, dst)
    with open(payload / "adapters", "w") as f:
        f.write("# index mac proto version(- = model default) options(k=v,...; - = none)\n")
        for a in adapters:
            opts = ",".join(f"{k}={v}" for k, v in a.extra.items()) or "-"
            f.write(f"{a.index} {a.mac} {a.proto} {a.version or '-'} {opts}\n")
    disk = bool(run.args.disk)
    # A guest booted from a disk is an installed system: its modules are its
    # own, its init mounted the rest, and it shuts down through its init.
    modules = "" if disk else "mount -t 9p -o trans=virtio,version=9p2000.L,ro modules /lib/modules\n"
    power_off = "systemctl --no-block poweroff" if disk else "busybox poweroff -f"
    init = f"""#!/bin/sh
# Generated by scripts/vmrun.py: runs the test command of guest {gi}.
export PATH=/mnt/payload/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb
export ERDMA_GUEST={gi} ERDMA_GUESTS={len(run.args.guest) or 1} ERDMA_PAYLOAD=/mnt/payload ERDMA_RESULTS=/mnt/payload/results
{modules}mountpoint -q /sys/kernel/debug || mount -t debugfs debugfs /sys/kernel/debug
# POSIX shared memory (shm_open; rdma-core's rdma_cm tests need it).
mountpoint -q /dev/shm || {{ mkdir -p /dev/shm && mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm; }}
hostname guest{gi}
cd /mnt/payload
{KMEMLEAK_SH}
# The guest is the machine it was asked to be: every vCPU online (the tests
# size what they check by the CPUs they find: one CEQ per CPU).
n=$(grep -c '^processor' /proc/cpuinfo)
{{ echo "TAP version 13"
  if [ "$n" -eq {run.args.smp} ]; then echo "ok 1 {run.args.smp} vCPUs online"
  else echo "not ok 1 {run.args.smp} vCPUs online: the kernel found $n"; fi
  echo "1..1"; }} >results/machine.tap
echo "vmrun-guest: running command.sh: $(head -c 200 command.sh)"
{{ sh command.sh; echo $? > results/exit-status; }} 2>&1 | tee results/output.log
echo "vmrun-guest: kmemleak"
kmemleak_check
dmesg > results/dmesg.log
echo "vmrun-guest: done, exit status $(cat results/exit-status)"
sync
{power_off}
"""
    (payload / "init.sh").write_text(init)
    (payload / "command.sh").write_text(command + "\n")
    if disk:
        make_payload_disk(payload)
    return payload


def payload_disk(payload):
    return payload.parent / f"{payload.name}.payload.img"


def make_payload_disk(payload):
    """The payload as a disk (ext4, label erdma-payload), with room for results."""
    size_mb = sum(f.stat().st_size for f in payload.rglob("*") if f.is_file()) // 2**20 * 2 + 256
    img = payload_disk(payload)
    img.unlink(missing_ok=True)
    r = subprocess.run(["mke2fs", "-q", "-t", "ext4", "-L", "erdma-payload", "-d", str(payload),
                        str(img), f"{size_mb}M"], capture_output=True, text=True)
    if r.returncode != 0:
        die(f"mke2fs of the payload disk {img} failed: {r.stderr.strip()}", 1)


def read_back_results(payload):
    """Copies results/ from a guest's payload disk back into its payload directory."""
    tmp = payload.parent / f"{payload.name}.results"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    r = subprocess.run(["debugfs", "-R", f"rdump /results {tmp}", str(payload_disk(payload))],
                       capture_output=True, text=True)
    if r.returncode != 0 or not (tmp / "results").is_dir():
        print(f"vmrun: could not read results back from {payload_disk(payload)}: {r.stderr.strip()[-300:]}",
              file=sys.stderr)
        return
    shutil.rmtree(payload / "results")
    shutil.move(str(tmp / "results"), str(payload / "results"))
    tmp.rmdir()


# Every report of the debug kernel that can panic does (see the module doc);
# with -no-reboot, panic=-1 ends QEMU at once. Some repeat what the debug
# configuration says; on the release kernel (make bench) a WARN ends the
# guest as well.
PANIC_ARGS = "panic=-1 panic_on_warn=1 softlockup_panic=1 sysctl.kernel.hung_task_panic=1"


def panic_args(tolerate):
    """PANIC_ARGS, but a WARN() cannot end the guest before its headline is
    read when some are tolerated (vmrun then ends it on every other report)."""
    return PANIC_ARGS.replace("panic_on_warn=1", "panic_on_warn=0") if tolerate else PANIC_ARGS


# 4-level paging: with the 5-level paging of QEMU's "-cpu max" the debug
# kernel (7.3.4, KASAN) reports a wild-memory-access in do_raw_spin_lock from
# an interrupt during identify_cpu at boot, and panics.
PAGING_ARGS = "no5lvl"


def kmemleak_guests(spec, n):
    """The guests --kmemleak SPEC keeps kmemleak in (all, none or I,J) of N."""
    if spec == "all":
        return set(range(n))
    if spec == "none":
        return set()
    try:
        keep = {int(x) for x in spec.split(",")}
    except ValueError:
        keep = None
    if not keep or not keep <= set(range(n)):
        die(f"--kmemleak {spec}: all, none or guest indexes below {n}")
    return keep


def qemu_argv(run, gi, adapters, all_adapters, payload):
    a = run.args
    mem = a.memory
    if a.disk:
        root = "root=LABEL=erdma-root ro erdma_payload=1 "
    elif a.rootfs.is_file():
        # The userland image: the first virtio-blk disk, never written.
        root = "root=/dev/vda rootfstype=ext4 ro init=/sbin/erdma-init "
    else:
        root = ("root=/dev/root rootfstype=9p "
                "rootflags=trans=virtio,version=9p2000.L,cache=loose,msize=262144 ro "
                "init=/sbin/erdma-init ")
    extra = a.append if gi in a.kmemleak_guests else f"{a.append} {KMEMLEAK_OFF}"
    append = ("console=ttyS0 " + root + " ".join((panic_args(a.tolerate), PAGING_ARGS, extra))).strip()
    argv = [str(a.qemu),
            "-machine", "q35,memory-backend=mem", "-accel", "tcg", "-cpu", "max",
            "-smp", str(a.smp), "-m", mem,
            "-object", f"memory-backend-memfd,id=mem,size={mem},share=on",
            "-nodefaults", "-display", "none", "-no-reboot", "-serial", "stdio",
            # for scripts/guest-profile.py (where a running guest spends its time)
            "-qmp", f"unix:{payload}.qmp,server=on,wait=off",
            "-kernel", str(a.kernel), "-append", append]
    if a.disk:
        disk = Path(a.disk[gi])
        fmt = "qcow2" if disk.suffix == ".qcow2" else "raw"
        # cache=unsafe: the disks are a run's throwaway copies, read back only
        # after QEMU exits, so the guest's flushes (dpkg syncs every file it
        # unpacks) need not reach the host's disk.
        argv += ["-initrd", str(a.initrd),
                 "-drive", f"file={disk},if=virtio,format={fmt},cache=unsafe",
                 "-drive", f"file={payload_disk(payload)},if=virtio,format=raw,cache=unsafe"]
    else:
        if a.rootfs.is_file():
            argv += ["-drive", f"file={a.rootfs},if=none,id=rootfs,format=raw,readonly=on",
                     "-device", "virtio-blk-pci,drive=rootfs"]
        else:
            argv += ["-virtfs", f"local,id=rootfs,path={a.rootfs},mount_tag=/dev/root,security_model=none,"
                     "readonly=on"]
        argv += ["-virtfs", f"local,id=payload,path={payload},mount_tag=payload,security_model=none",
                 "-virtfs", f"local,id=modules,path={run.out / 'modules'},mount_tag=modules,security_model=none,"
                 "readonly=on"]
    for ad in adapters:
        argv += netdev_args(run, ad, all_adapters)
        argv += ["-device", f"virtio-net-pci,netdev=net{ad.index},mac={ad.mac}"]
        argv += ["-device", json.dumps({"driver": "vfio-user-pci",
                                        "socket": {"type": "unix", "path": str(run.out / f"dev{ad.index}.sock")},
                                        "x-msg-timeout": a.msg_timeout_ms})]
    return argv


class Console:
    """One guest's console: logged, echoed with a prefix (unless None), and
    watched for kernel reports and for the test that is running."""

    def __init__(self, prefix, logpath, tolerate=()):
        self.prefix = prefix
        self.logpath = logpath
        self.tolerate = [re.compile(t) for t in tolerate]
        self.tolerated = []       # headlines of the reports --tolerate names
        self.lock = threading.Lock()
        self.test = None          # the test run_tests.sh started last
        self.report = []          # the report's kernel lines, first the headline
        self.report_test = None   # the test that was running at the headline
        self.report_at = None     # monotonic time of the headline
        self.last_line_at = time.monotonic()

    def feed(self, line):
        """Take one console line (without its newline)."""
        now = time.monotonic()
        with self.lock:
            self.last_line_at = now
            if self.report_at is None:
                m = KERNEL_REPORT.search(line)
                if m:
                    self.report_at = now
                    self.report_test = self.test
                    self.report.append(line[m.start():])
                    self._forgive()
                    return
                t = TEST_START.search(line)
                if t:
                    self.test = t.group(1)
                elif line.startswith("vmrun-guest: "):
                    # init.sh's own steps (kmemleak, the end) are no test's.
                    self.test = None
            elif len(self.report) < REPORT_MAX_LINES:
                k = KERNEL_LINE.search(line)
                if k:
                    self.report.append(line[k.start():])
                    if len(self.report) <= 3:
                        self._forgive()

    def _forgive(self):
        """Drops the report being read if --tolerate names its headline (the
        caller holds the lock). A WARN()'s headline is not its "cut here"
        line but the WARNING line one or two lines below (after the WARN's
        message, if it has one)."""
        head = next((ln for ln in self.report if not CUT_HERE.search(ln) and KERNEL_REPORT.search(ln)), None)
        if head is None or not any(t.search(strip_stamp(head)) for t in self.tolerate):
            return
        self.tolerated.append(strip_stamp(head))
        self.report, self.report_at, self.report_test = [], None, None

    def stream(self, proc):
        with open(self.logpath, "w") as log:
            for raw in proc.stdout:
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                log.write(line + "\n")
                log.flush()
                self.feed(line)
                if self.prefix is not None:
                    print(f"{self.prefix} {line}", flush=True)

    def should_end(self, now=None):
        """True once a report has had its time to finish printing."""
        now = time.monotonic() if now is None else now
        with self.lock:
            if self.report_at is None:
                return False
            return (now - self.report_at >= REPORT_MAX_S or
                    (now - self.report_at >= REPORT_GRACE_S and now - self.last_line_at >= 1.0))


def strip_stamp(line):
    """A kernel line without its printk timestamp."""
    return re.sub(r"^\[\s*\d+\.\d+\](?:\[\s*[TC]\d+\])? ", "", line)


def record_report(results, test, report):
    """Writes a kernel report as the last, failing test point of TEST's TAP
    file in RESULTS (plan moved after it), or of kernel-report.tap when no test
    was running. Returns the file."""
    headline = strip_stamp(report[0])
    diag = [f"# {line}" for line in report]
    if test:
        tap = results / f"{test}.tap"
        what = f"kernel report: {headline}"
    else:
        tap = results / "kernel-report.tap"
        what = f"kernel report outside any test: {headline}"
    lines = tap.read_text(errors="replace").splitlines() if tap.exists() else ["TAP version 13"]
    lines = [ln for ln in lines if not re.match(r"^1\.\.\d+", ln)]
    n = sum(1 for ln in lines if TAP_LINE.match(ln)) + 1
    lines += [f"not ok {n} {what}"] + diag + [f"1..{n}"]
    tap.write_text("\n".join(lines) + "\n")
    return tap


# A guest's test writes this file (results/stop-request, a line saying why) to have
# its guest killed, as a host stops a VM, after writing its exit status itself.
STOP_REQUEST = "stop-request"


def print_console_tail(logpath, n=15):
    """Prints the last N lines of a guest's console, for a failure with no kernel report: what
    the guest was doing when it stopped answering or died."""
    try:
        lines = Path(logpath).read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return
    print(f"vmrun:   (the last {len(lines)} lines of {logpath})", file=sys.stderr)
    for line in lines:
        print(f"vmrun:   {line[:200]}", file=sys.stderr)


# x86-64 MODULES_VADDR without KASLR (the test kernels have no RANDOMIZE_BASE)
MODULES_START = 0xffffffffa0000000
VCPU_REGS = re.compile(r"RIP=([0-9a-f]{16}).*?\nCS =([0-9a-f]{4})", re.S)


class Qmp:
    """A QMP client: one command at a time, events skipped."""

    def __init__(self, path, timeout=10):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self.file = self.sock.makefile("rw")
        self.file.readline()  # the greeting
        self.command("qmp_capabilities")

    def command(self, name, **arguments):
        self.file.write(json.dumps({"execute": name, "arguments": arguments}) + "\n")
        self.file.flush()
        while True:
            line = self.file.readline()
            if not line:
                raise EOFError("QEMU closed the socket")
            reply = json.loads(line)
            if "error" in reply:
                raise RuntimeError(reply["error"].get("desc", reply["error"]))
            if "return" in reply:
                return reply["return"]

    def close(self):
        self.sock.close()


class KernelMap:
    """Names kernel text addresses from a System.map."""

    def __init__(self, path):
        syms = []
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[1] in "tTwW":
                    syms.append((int(parts[0], 16), parts[2]))
        syms.sort()
        self.addrs = [a for a, _ in syms]
        self.names = [n for _, n in syms]

    def name(self, rip, cs):
        """The function at `rip`: module code shows as [module], user space as [user]."""
        if cs & 3:
            return "[user]"
        if rip >= MODULES_START:
            return "[module]"
        i = bisect.bisect_right(self.addrs, rip) - 1
        return self.names[i] if i >= 0 else f"[{rip:#x}]"


def vcpu_functions(qmp, kmap):
    """One sample: the function each vCPU is in (QEMU's "info registers -a")."""
    regs = qmp.command("human-monitor-command", **{"command-line": "info registers -a"})
    return [kmap.name(int(m.group(1), 16), int(m.group(2), 16)) for m in VCPU_REGS.finditer(regs)]


def examine_hung_guest(qmp_path, con, logpath, kmap_path):
    """A guest that did not power off in time, before it is killed: where its vCPUs are (20
    samples of each one's instruction pointer), then the kernel's own view, which goes to the
    console log: sysrq w (the blocked tasks) and sysrq l (a backtrace of every CPU). Returns a
    summary for the failure line: the test that was running, the last console line before,
    the hottest functions, the blocked tasks."""
    try:
        before = Path(logpath).read_text(errors="replace").splitlines()
    except OSError:
        before = []
    last = next((strip_stamp(line).strip() for line in reversed(before) if line.strip()), "")
    parts = [f"running: {con.test or 'no test'}", f"last console line: {last[:160]!r}"]
    try:
        qmp = Qmp(qmp_path)
    except (OSError, ValueError, RuntimeError, EOFError) as e:
        parts.append(f"QMP unreachable ({e})")
        return "; ".join(parts)
    try:
        if kmap_path.exists():
            kmap = KernelMap(kmap_path)
            hits = collections.Counter()
            for _ in range(20):
                hits.update(vcpu_functions(qmp, kmap))
                time.sleep(0.05)
            total = sum(hits.values()) or 1
            parts.append("vCPUs in: " + ", ".join(f"{n} {100 * c // total}%" for n, c in hits.most_common(5)))
        for key in ("w", "l"):
            qmp.command("send-key", keys=[{"type": "qcode", "data": k} for k in ("alt", "sysrq", key)])
            # Until the console has been quiet for 3 s, 30 s at most.
            end = time.monotonic() + 30
            time.sleep(1)
            while time.monotonic() < end and time.monotonic() - con.last_line_at < 3:
                time.sleep(0.5)
    except (OSError, ValueError, RuntimeError, EOFError) as e:
        parts.append(f"QMP failed ({e})")
    finally:
        qmp.close()
    try:
        after = Path(logpath).read_text(errors="replace").splitlines()[len(before):]
    except OSError:
        after = []
    blocked = [m.group(1) for m in map(re.compile(r"task:(\S+)\s+state:D").search, after) if m]
    parts.append(f"blocked tasks (sysrq w): {', '.join(blocked[:8]) or 'none'}")
    return "; ".join(parts)


def parse_tap(path):
    passed = failed = skipped = 0
    failures = []
    plan = None
    for line in path.read_text(errors="replace").splitlines():
        if re.match(r"^1\.\.(\d+)", line):
            plan = int(line[3:].split()[0])
            continue
        m = TAP_LINE.match(line)
        if not m:
            continue
        status, desc, directive = m.group(1), m.group(2).strip(), (m.group(3) or "").upper()
        if directive == "SKIP":
            skipped += 1
        elif status == "ok" or directive == "TODO":
            passed += 1
        else:
            failed += 1
            failures.append(desc)
    if plan is not None and passed + failed + skipped != plan:
        failed += 1
        failures.append(f"{path.name}: planned {plan} tests, ran {passed + failed + skipped}")
    return passed, failed, skipped, failures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dev", action="append", default=[], metavar="SPEC",
                    help="an adapter: proto=roce|iwarp,mac=..,version=N,... (repeatable; default one RoCEv2)")
    ap.add_argument("--guest", action="append", default=[], metavar="I,J",
                    help="a guest and the indexes of its adapters (repeatable; default: one guest with all)")
    ap.add_argument("--run", required=True, help="shell command each guest runs in its payload directory")
    ap.add_argument("--copy", action="append", default=[], metavar="PATH",
                    help="file or directory copied into every guest's payload (repeatable)")
    ap.add_argument("--out", default=str(TOP / "out" / "vm"), help="run directory (logs, sockets, payloads)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds before every guest is killed")
    ap.add_argument("--smp", type=int, default=2)
    ap.add_argument("--memory", default="1G")
    ap.add_argument("--append", default="", help="extra kernel command line")
    ap.add_argument("--kmemleak", default="all", metavar="all|none|I,J",
                    help="the guests whose kernel keeps kmemleak (default all); the others boot "
                    "with kmemleak=off and their kmemleak check is a skip")
    ap.add_argument("--tolerate", action="append", default=[], metavar="REGEX",
                    help="a kernel report whose headline (without its timestamp) matches REGEX is "
                    "recorded, not a failure, and the guest goes on; the guests then boot with "
                    "panic_on_warn=0, and any other report ends its guest as always (repeatable)")
    ap.add_argument("--msg-timeout-ms", type=int, default=20000, help="vfio-user message timeout")
    ap.add_argument("--quiet", action="store_true", help="do not echo guest consoles")
    ap.add_argument("--kernel", default=str(debug_kernel_dir() / "arch" / "x86" / "boot" / "bzImage"),
                    help="guest kernel (default: the debug kernel; make bench passes the release one)")
    ap.add_argument("--modules", default=None, help="lib/modules directory of the test kernel")
    ap.add_argument("--disk", action="append", default=[], metavar="IMAGE",
                    help="boot guest N (the Nth --disk) from this disk image, raw or .qcow2, as an "
                    "installed system (see above); needs --initrd")
    ap.add_argument("--initrd", default=None, help="the initramfs of --kernel (with --disk)")
    ap.add_argument("--rootfs", default=None,
                    help="the guest userland: an ext4 image (booted over virtio-blk) or a directory "
                    "(over 9p); default: rootfs/current.img, else rootfs/current (make rootfs)")
    ap.add_argument("--qemu", default=None)
    ap.add_argument("--emu", default=str(default_path("cargo-target", "release", "erdma-emu")))
    args = ap.parse_args()

    args.kernel = Path(args.kernel)
    if args.rootfs is None:
        image = default_path("rootfs", "current.img")
        args.rootfs = str(image if image.exists() else default_path("rootfs", "current"))
    if args.modules is None:
        args.modules = args.kernel.parents[3] / "modroot" / "lib" / "modules"
    if args.qemu is None:
        try:
            args.qemu = Path((CACHE / "qemu" / "current").read_text().strip()) / "bin" / "qemu-system-x86_64"
        except OSError:
            args.qemu = Path("/nonexistent/qemu (run make setup)")
    # The model's test-page tool (tools/erdma-emu/testpage), built beside
    # erdma-emu: every payload gets it in bin/, on the guest's PATH.
    args.testpage = Path(args.emu).parent / "erdma-testpage"
    needs = [("kernel", args.kernel), ("qemu", args.qemu), ("erdma-emu", args.emu), ("erdma-testpage", args.testpage)]
    if args.disk:
        needs += [("initrd", args.initrd or "/nonexistent (give --initrd)")] + [("disk", d) for d in args.disk]
    else:
        init = Path(args.rootfs) if Path(args.rootfs).is_file() else Path(args.rootfs) / "sbin" / "erdma-init"
        needs += [("modules", args.modules), ("rootfs", init)]
    for what, p in needs:
        if not Path(p).exists():
            die(f"{what} not found at {p}: run 'make' (or make setup / make kernel / make model)")
    args.rootfs = Path(args.rootfs).resolve()
    args.modules = Path(args.modules).resolve()

    adapters = [parse_dev(i, s) for i, s in enumerate(args.dev or ["proto=roce"])]
    guests = [[int(x) for x in g.split(",") if x != ""] for g in args.guest] or [[a.index for a in adapters]]
    args.kmemleak_guests = kmemleak_guests(args.kmemleak, len(guests))
    guest_of = {}
    for gi, idxs in enumerate(guests):
        for i in idxs:
            if i >= len(adapters) or i in guest_of:
                die(f"--guest {args.guest[gi]}: adapter {i} does not exist or is already in a guest")
            guest_of[i] = gi
    if args.disk and len(args.disk) != len(guests):
        die(f"{len(args.disk)} --disk for {len(guests)} guests: give one each")
    for a in adapters:
        if a.link >= len(adapters) or a.link == a.index or (a.link >= 0 and adapters[a.link].link != a.index):
            die(f"adapter {a.index}: link={a.link} must name another adapter that links back to it")

    run = Run(args)
    if run.out.exists():
        shutil.rmtree(run.out)
    run.out.mkdir(parents=True)

    def on_signal(signum, _frame):
        print(f"vmrun: signal {signum}: stopping every process", file=sys.stderr)
        run.stop_all()
        sys.exit(128 + signum)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    # The guests read a copy of the modules (a few MB): a kernel or module
    # build replaces the modules directory, which would vanish under a
    # running guest.
    if not args.disk:
        shutil.copytree(args.modules, run.out / "modules", symlinks=True)

    ok = True
    totals = [0, 0, 0]
    try:
        start_emu(run, adapters)
        vms = []
        for gi, idxs in enumerate(guests):
            gads = [adapters[i] for i in idxs]
            payload = write_payload(run, gi, gads, args.run)
            argv = qemu_argv(run, gi, gads, adapters, payload)
            (run.out / f"guest{gi}.cmdline").write_text(shlex.join(argv) + "\n")
            p = run.spawn(f"qemu guest{gi}", argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)
            logpath = run.out / f"guest{gi}.console.log"
            con = Console(None if args.quiet else f"[guest{gi}]", logpath, args.tolerate)
            t = threading.Thread(target=con.stream, args=(p,), daemon=True)
            t.start()
            print(f"vmrun: guest{gi} booting with adapters {idxs} (console: {logpath})", file=sys.stderr)
            vms.append((gi, p, t, con, payload, logpath))

        # Wait for every guest to power off; end a guest whose kernel made a
        # report once the report is printed, and every guest at the deadline.
        deadline = time.monotonic() + args.timeout
        ended = {}
        while len(ended) < len(vms):
            for gi, p, _t, con, payload, logpath in vms:
                if gi in ended:
                    continue
                if p.poll() is not None:
                    ended[gi] = ("off", time.monotonic())
                elif (payload / "results" / STOP_REQUEST).exists():
                    # A test stops its own guest as a host would: the VM is gone at once,
                    # with no shutdown (no FIN, no RST, its adapter's client gone).
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
                    ended[gi] = ("stopped", time.monotonic())
                    print(f"vmrun: guest{gi} stopped at its own request "
                          f"({(payload / 'results' / STOP_REQUEST).read_text().strip()})", file=sys.stderr)
                elif con.should_end():
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
                    ended[gi] = ("killed", time.monotonic())
                elif time.monotonic() >= deadline:
                    print_console_tail(logpath)
                    why = examine_hung_guest(Path(f"{payload}.qmp"), con, logpath,
                                             Path(args.kernel).resolve().parents[3] / "System.map")
                    print(f"vmrun: FAIL guest{gi}: no power-off within {args.timeout} s; killed ({why}). "
                          f"Read {logpath} (its end: sysrq w and l)", file=sys.stderr)
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
                    ended[gi] = ("timeout", time.monotonic())
                    ok = False
            time.sleep(0.2)
        for gi, p, t, con, payload, logpath in vms:
            t.join(5)
            if args.disk:
                read_back_results(payload)
            if con.tolerated:
                (payload / "results" / "tolerated-reports.txt").write_text("\n".join(con.tolerated) + "\n")
            for headline in con.tolerated:
                print(f"vmrun: guest{gi}: tolerated kernel report (--tolerate): {headline}", file=sys.stderr)
            if con.report:
                tap = record_report(payload / "results", con.report_test, con.report)
                print(f"vmrun: FAIL guest{gi}: kernel report during "
                      f"{con.report_test or 'no test'}: {strip_stamp(con.report[0])!r}; the guest "
                      f"{'ended itself' if ended[gi][0] == 'off' else 'was killed'} "
                      f"{ended[gi][1] - con.report_at:.1f} s after it ({len(con.report)} lines "
                      f"in {tap}; console: {logpath})", file=sys.stderr)
                for line in con.report[:60]:
                    print(f"vmrun:   {line}", file=sys.stderr)
                ok = False
            status_file = payload / "results" / "exit-status"
            status = status_file.read_text().strip() if status_file.exists() else None
            if status != "0" and not con.report:
                print(f"vmrun: FAIL guest{gi}: command exit status {status or 'unknown (guest died?)'}; "
                      f"read {logpath}", file=sys.stderr)
                if ended[gi][0] != "timeout":
                    print_console_tail(logpath)
                ok = False
            elif status != "0":
                ok = False
            for tap in sorted((payload / "results").glob("*.tap")):
                pa, fa, sk, failures = parse_tap(tap)
                totals[0] += pa
                totals[1] += fa
                totals[2] += sk
                for f in failures:
                    print(f"vmrun: FAIL guest{gi} {tap.name}: {f}", file=sys.stderr)
                if fa:
                    ok = False
    finally:
        run.stop_all()
    (run.out / "totals").write_text(f"{totals[0]} {totals[1]} {totals[2]}\n")
    counts = (f"{totals[0]} passed, {totals[1]} failed, {totals[2]} skipped" if any(totals)
              else "no TAP results")
    print(f"vmrun: {'PASS' if ok else 'FAIL'}: {counts} (run directory: {run.out})", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
