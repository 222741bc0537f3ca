#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Turns the guest's raw `make bench` figures into the results table.

Usage: bench_report.py RAW [--out FILE] [--note LINE]...

RAW holds "DRIVER ROUND METRIC VALUE UNIT" lines (bench.sh in the guest;
VALUE "nan" for a failed measurement). A round whose figure is missing, not a
number, zero or negative failed: no rate, bandwidth or latency of a working
run is zero (perftest prints 0.00 MiB/s when its run broke down), so such a
round is shown as "failed" and left out of the median, never averaged in as
a zero. Each figure of the table is the median over the rounds that did not
fail; a row with fewer than MIN_ROUNDS good rounds of ours or C (at most the
rounds run) has no verdict but TOO FEW ROUNDS, and fails the run. Ratios are oriented so that >= 1.00 always means ours is at
least as good: ours/theirs for rates and bandwidths, theirs/ours for
latencies. The noise of a row is the larger of ours' and C's half-range over
the rounds (from 5 rounds on, without each one's highest and lowest round),
as a percentage of the median; a row is SLOWER when ours/C is below 1.00 by
more than that noise.

Prints the table (and writes it, with every round's figures, to FILE).
Exit status: 0 when every row has figures for ours and C and none is SLOWER;
1 otherwise.
"""

import argparse
import math
import statistics
import sys
from collections import defaultdict

OURS, C, RXE = "erdma_rs", "erdma", "rxe"

# Good rounds a row needs, of ours and of C, for a verdict.
MIN_ROUNDS = 3

# metric, label, lower is better
ROWS = [
    ("qp", "QP create+RTS+destroy", False),
    ("cq", "CQ create+destroy", False),
    ("mr4k", "MR reg+dereg 4 KiB", False),
    ("mr2m", "MR reg+dereg 2 MiB", False),
    ("mr1g", "MR reg+dereg 1 GiB", False),
    ("ctx", "ucontext open+close", False),
    ("kcq", "kernel CQ completions, 4 QPs/CEQs", False),
    ("write_lat_p50", "ib_write_lat 8 B median", True),
    ("write_lat_p99", "ib_write_lat 8 B p99", True),
    ("send_lat_p50", "ib_send_lat 8 B median", True),
    ("send_lat_p99", "ib_send_lat 8 B p99", True),
    ("write_bw_q1", "ib_write_bw 64 KiB, 1 QP", False),
    ("write_bw_q4", "ib_write_bw 64 KiB, 4 QPs", False),
    ("read_bw_q1", "ib_read_bw 64 KiB, 1 QP", False),
    ("read_bw_q4", "ib_read_bw 64 KiB, 4 QPs", False),
]


def num(v):
    """A figure with about four significant digits."""
    if v is None or math.isnan(v):
        return "-"
    if v >= 1000:
        return f"{v:.0f}"
    if v >= 100:
        return f"{v:.1f}"
    if v >= 10:
        return f"{v:.2f}"
    return f"{v:.3f}"


def load(path):
    """{metric: {driver: [values by round]}}, {metric: unit}, rounds seen."""
    values = defaultdict(lambda: defaultdict(list))
    units = {}
    rounds = set()
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 5:
                continue
            drv, rnd, metric, value, unit = parts
            try:
                v = float(value)
            except ValueError:
                v = math.nan
            if not v > 0:  # also catches nan and inf-nan comparisons
                v = math.nan
            values[metric][drv].append((int(rnd), v))
            rounds.add(int(rnd))
            if unit != "-":
                units[metric] = unit
    return values, units, sorted(rounds)


def summary(samples):
    """(median of the good values, their half-range as a fraction of it, how many)."""
    good = sorted(v for _, v in samples if not math.isnan(v))
    if not good:
        return math.nan, math.nan, 0
    med = statistics.median(good)
    n = len(good)
    # One odd round (a burst of other work on the host) should not decide
    # the noise of a row: with 5 rounds or more, leave out the extremes.
    if n >= 5:
        good = good[1:-1]
    return med, ((good[-1] - good[0]) / 2 / med if med > 0 else math.nan), n


def ratio(ours, theirs, lower_is_better):
    if math.isnan(ours) or math.isnan(theirs) or ours <= 0 or theirs <= 0:
        return math.nan
    return theirs / ours if lower_is_better else ours / theirs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw")
    ap.add_argument("--out")
    ap.add_argument("--note", action="append", default=[], help="a line for the header (repeatable)")
    args = ap.parse_args()

    values, units, rounds = load(args.raw)
    head = ["metric", "unit", "ours", "C", "rxe", "ours/C", "ours/rxe", "noise", "verdict"]
    rows = []
    slower, missing, few = [], [], []
    need = min(MIN_ROUNDS, len(rounds)) if rounds else 1
    for metric, label, lower in ROWS:
        o, o_spread, o_n = summary(values[metric][OURS])
        c, c_spread, c_n = summary(values[metric][C])
        r, _, _ = summary(values[metric][RXE])
        oc = ratio(o, c, lower)
        orx = ratio(o, r, lower)
        noise = max((x for x in (o_spread, c_spread) if not math.isnan(x)), default=math.nan)
        if math.isnan(oc):
            verdict = "FAILED"
            missing.append(label)
        elif min(o_n, c_n) < need:
            verdict = "TOO FEW ROUNDS"
            few.append(label)
        elif round(oc, 2) >= 1.0:  # as printed: "1.00" is never SLOWER
            verdict = "ok"
        elif not math.isnan(noise) and oc >= 1.0 - noise:
            verdict = "ok (noise)"
        else:
            verdict = "SLOWER"
            slower.append(label)
        partial = o_n < len(rounds) or c_n < len(rounds)
        rows.append([label + (" *" if partial else ""), units.get(metric, "-"), num(o), num(c), num(r),
                     "-" if math.isnan(oc) else f"{oc:.2f}", "-" if math.isnan(orx) else f"{orx:.2f}",
                     "-" if math.isnan(noise) else f"±{noise * 100:.0f}%", verdict])

    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    right = {2, 3, 4, 5, 6, 7}

    def fmt(row):
        return "  ".join(str(x).rjust(w) if i in right else str(x).ljust(w)
                         for i, (x, w) in enumerate(zip(row, widths))).rstrip()

    lines = [
        "erdma_rs benchmark: ours = erdma_rs, C = the upstream C erdma driver (same model adapters, same boot),",
        "rxe = rdma_rxe on the adapters' twin virtio-net NICs (outside reference).",
        f"Figures: medians of {len(rounds)} round{'' if len(rounds) == 1 else 's'} (drivers interleaved; the order changes every round).",
        "Ratios: >= 1.00 means ours is at least as good (latencies: theirs/ours; rates and bandwidths: ours/theirs).",
        "Noise: the larger of ours' and C's half-range over the rounds (from 5 rounds on, without each one's",
        "  highest and lowest round), as % of the median. Verdict: ok (ours/C >= 1.00), ok (noise) (below",
        "  1.00 by less than the noise), SLOWER (below by more).",
    ] + args.note + ["", fmt(head), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows]
    if any(r[0].endswith(" *") for r in rows):
        lines.append("* some rounds failed for ours or C: the median is over the rounds that did not")
        lines.append(f"  (a row needs {need} good rounds of each for a verdict; see every round below)")
    verdict = (f"bench: {len(rows)} rows, {len(slower)} slower than C, {len(missing)} without figures, "
               f"{len(few)} with too few good rounds")
    lines += ["", verdict]
    table = "\n".join(lines) + "\n"
    print(table, end="")

    if args.out:
        detail = ["", "Every round (value per round, in round order; failed = no figure, or zero):"]
        for metric, label, _ in ROWS:
            for drv in (OURS, C, RXE):
                samples = sorted(values[metric][drv])
                detail.append(f"  {metric:<14} {drv:<8} " + " ".join(num(v) if not math.isnan(v) else "failed"
                                                                 for _, v in samples))
        with open(args.out, "w") as f:
            f.write(table + "\n".join(detail) + "\n")
    return 1 if slower or missing or few else 0


if __name__ == "__main__":
    sys.exit(main())
