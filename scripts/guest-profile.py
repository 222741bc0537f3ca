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
import collections
import sys
import time
from pathlib import Path

from vmrun import KernelMap, Qmp, debug_kernel_dir, vcpu_functions


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
    kernel = KernelMap(kmap)
    try:
        qmp = Qmp(a.qmp)
    except OSError as e:
        sys.exit(f"guest-profile: cannot connect to {a.qmp}: {e} (is the guest running?)")
    hits = collections.Counter()
    samples = 0
    end = time.monotonic() + a.seconds
    while time.monotonic() < end:
        try:
            names = vcpu_functions(qmp, kernel)
        except (OSError, EOFError, ValueError) as e:
            print(f"guest-profile: the guest went away ({e}); what was sampled until then:")
            break
        hits.update(names)
        samples += len(names)
        time.sleep(0.01)
    if not samples:
        sys.exit("guest-profile: no samples")
    for name, n in hits.most_common(a.top):
        print(f"{100.0 * n / samples:6.2f}% {n:7d}  {name}")
    print(f"{samples} samples (all vCPUs) in {a.seconds:.0f} s, kernel map {kmap}")


if __name__ == "__main__":
    main()
