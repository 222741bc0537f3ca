#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Where a running test guest spends its time: samples the instruction pointer
of every vCPU over the guest's QMP socket and counts the kernel functions hit.

    scripts/guest-profile.py out/vm/data-path/guest0.qmp 60

Every guest scripts/vmrun.py boots has one (RUN_DIRECTORY/guestN.qmp), so a
scenario of make check can be profiled while it runs. Kernel addresses are
named from the System.map of the debug kernel (--map for another); module
code shows as [module] (modules load at addresses only the guest knows) and
user space as [user]. Sampling goes through QEMU's monitor ("info registers"),
about 50 samples a second; it slows the guest a little.
"""

import argparse
import bisect
import collections
import json
import re
import socket
import sys
import time
from pathlib import Path

from vmrun import debug_kernel_dir

REGS = re.compile(r"RIP=([0-9a-f]{16}).*?\nCS =([0-9a-f]{4})", re.S)
# x86-64 MODULES_VADDR without KASLR (the test kernels have no RANDOMIZE_BASE)
MODULES_START = 0xffffffffa0000000


def load_map(path):
    """Text symbols of a System.map, sorted by address."""
    syms = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[1] in "tTwW":
                syms.append((int(parts[0], 16), parts[2]))
    syms.sort()
    return [a for a, _ in syms], [n for _, n in syms]


class Qmp:
    """A QMP client: one command at a time, events skipped."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX)
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("qmp", help="the guest's QMP socket (RUN_DIRECTORY/guestN.qmp)")
    ap.add_argument("seconds", type=float, help="how long to sample")
    ap.add_argument("--map", help="System.map of the guest's kernel (default: the debug kernel's)")
    ap.add_argument("--top", type=int, default=40, help="functions to show")
    a = ap.parse_args()
    kmap = Path(a.map) if a.map else debug_kernel_dir() / "System.map"
    if not kmap.exists():
        sys.exit(f"guest-profile: no {kmap}; build the kernel (scripts/build-kernel.sh) or pass --map")
    addrs, names = load_map(kmap)
    try:
        qmp = Qmp(a.qmp)
    except OSError as e:
        sys.exit(f"guest-profile: cannot connect to {a.qmp}: {e} (is the guest running?)")
    hits = collections.Counter()
    samples = 0
    end = time.monotonic() + a.seconds
    while time.monotonic() < end:
        try:
            regs = qmp.command("human-monitor-command", **{"command-line": "info registers -a"})
        except (OSError, EOFError, ValueError) as e:
            print(f"guest-profile: the guest went away ({e}); what was sampled until then:")
            break
        for m in REGS.finditer(regs):
            rip, cs = int(m.group(1), 16), int(m.group(2), 16)
            if cs & 3:
                name = "[user]"
            elif rip >= MODULES_START:
                name = "[module]"
            else:
                i = bisect.bisect_right(addrs, rip) - 1
                name = names[i] if i >= 0 else f"[{rip:#x}]"
            hits[name] += 1
            samples += 1
        time.sleep(0.01)
    if not samples:
        sys.exit("guest-profile: no samples")
    for name, n in hits.most_common(a.top):
        print(f"{100.0 * n / samples:6.2f}% {n:7d}  {name}")
    print(f"{samples} samples (all vCPUs) in {a.seconds:.0f} s, kernel map {kmap}")


if __name__ == "__main__":
    main()
