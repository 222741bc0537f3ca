#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Turns the guest's raw `make bench` figures into the results table.

Usage: bench_report.py RAW [--out FILE] [--note LINE]...

RAW holds "DRIVER ROUND METRIC VALUE UNIT" lines (bench.sh in the guest;
VALUE "nan" for a failed measurement). A round whose figure is missing, not a
number, zero or negative failed: no rate, bandwidth or latency of a working
run is zero (perftest prints 0.00 MiB/s when its run broke down), so such a
round is shown as "failed" and left out, never averaged in as a zero.

The figures of the table are medians over the rounds that did not fail. The
comparison with C is paired by round: the guest measures ours and C at the
same time (the control rows: both bound at once, alternating) or back to back
(the other rows), so each round gives one ratio ours/C measured under the
same host load, and the drift of a busy host over the run (both drivers'
rates falling from round to round) cancels out of it. A row may have more
rounds than another (the control rows have bench.sh's pairs). ours/C is the
median of those ratios; its confidence interval is the distribution-free one
of a median (order statistics; about 95%, and never narrower than the range
of all rounds at 5 rounds or fewer, which is 94% at 5). A row is SLOWER when
the whole interval is below 1.00: ours worse than C beyond the noise; "ok
(noise)" when ours/C is below 1.00 but the interval reaches it. A row with
fewer than MIN_ROUNDS rounds in which both ours and C have figures (at most
the rounds run for that row) has no verdict but TOO FEW ROUNDS, and fails the
run. Ratios are oriented so that >= 1.00 always means ours is at least as
good: ours/theirs for rates and bandwidths, theirs/ours for latencies.
ours/rxe, an outside reference, is the ratio of the medians.

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
# Ours in compat mode (issue 31), measured in the iWARP boot's rounds right
# after ours in standard mode: its rows compare the two, not ours with C.
COMPAT = "erdma_rs_compat"
COMPAT_ROWS = [
    ("iw_write_lat_p50", "ib_write_lat 8 B median", True),
    ("iw_write_lat_p99", "ib_write_lat 8 B p99", True),
    ("iw_write_bw_q1", "ib_write_bw 64 KiB, 1 QP", False),
]

# What the kernel's RDMA consumers buy over TCP (issue 31), measured between
# two guests with one iWARP adapter each, ours (bench_xguest.sh): the same
# workload over RDMA (NFS proto=rdma; SMC-R, in compat mode) and over TCP,
# paired by round. Their "drivers" are the transports.
RDMA, TCP = "rdma", "tcp"
CONSUMER_ROWS = [
    ("nfs_read", "NFS sequential read (cold cache)", False),
    ("sock_bw", "socket stream, 1 MiB writes", False),
    ("sock_rtt", "socket ping-pong, 1 B round trip", True),
]

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
    ("cm_conn", "rdma_cm connect+disconnect (cmtime)", False),
    ("rping", "rping round trips, 64 B", False),
    ("nvme_rr4k", "NVMe/RDMA 4 KiB randread, QD32", False),
    ("nvme_sw128k", "NVMe/RDMA 128 KiB seq write, QD8", False),
    ("iw_cm_conn", "iWARP rdma_cm connect+disconnect (cmtime)", False),
    ("iw_rping", "iWARP rping round trips, 64 B", False),
    ("iw_write_lat_p50", "iWARP ib_write_lat -R 8 B median", True),
    ("iw_write_lat_p99", "iWARP ib_write_lat -R 8 B p99", True),
    ("iw_write_bw_q1", "iWARP ib_write_bw -R 64 KiB, 1 QP", False),
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
    """{metric: {driver: [(round, value)]}}, {metric: unit}."""
    values = defaultdict(lambda: defaultdict(list))
    units = {}
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
            if unit != "-":
                units[metric] = unit
    return values, units


def median(samples):
    """(median of the good values, how many there are)."""
    good = [v for _, v in samples if not math.isnan(v)]
    return (statistics.median(good) if good else math.nan), len(good)


def ratio(ours, theirs, lower_is_better):
    if math.isnan(ours) or math.isnan(theirs) or ours <= 0 or theirs <= 0:
        return math.nan
    return theirs / ours if lower_is_better else ours / theirs


def per_round(ours, theirs, lower_is_better):
    """{round: ratio} over the rounds in which both have a figure."""
    o = {r: v for r, v in ours if not math.isnan(v)}
    t = {r: v for r, v in theirs if not math.isnan(v)}
    return {r: ratio(o[r], t[r], lower_is_better) for r in o.keys() & t.keys()}


def median_interval(ratios):
    """The distribution-free confidence interval of the median of the sorted
    `ratios`: (the k-th smallest, the k-th largest), k the largest with
    P(Binomial(n, 1/2) < k) <= 2.5%, and at least 1."""
    n = len(ratios)
    k = 1
    while k < (n + 1) // 2 and sum(math.comb(n, i) for i in range(k + 1)) / 2**n <= 0.025:
        k += 1
    return ratios[k - 1], ratios[n - k]


def paired(ours, theirs, lower_is_better):
    """Ours against theirs round by round: (median of the per-round ratios,
    its confidence interval (low, high), how many rounds have both figures,
    in how many of them ours is worse)."""
    ratios = sorted(per_round(ours, theirs, lower_is_better).values())
    if not ratios:
        return math.nan, (math.nan, math.nan), 0, 0
    worse = sum(1 for x in ratios if x < 1.0)
    return statistics.median(ratios), median_interval(ratios), len(ratios), worse


def rounds_of(values, metric):
    """The rounds in which ours or C has a line for `metric`."""
    return sorted({r for drv in (OURS, C) for r, _ in values[metric][drv]})


def judge(values):
    """One result per row of ROWS: (label, metric, figures, verdict)."""
    out = []
    for metric, label, lower in ROWS:
        rounds = rounds_of(values, metric)
        need = min(MIN_ROUNDS, len(rounds)) if rounds else 1
        o, o_n = median(values[metric][OURS])
        c, c_n = median(values[metric][C])
        r, _ = median(values[metric][RXE])
        oc, (lo, hi), n, worse = paired(values[metric][OURS], values[metric][C], lower)
        if math.isnan(oc):
            verdict = "FAILED"
        elif n < need:
            verdict = "TOO FEW ROUNDS"
        elif round(oc, 2) >= 1.0:  # as printed: "1.00" is never SLOWER
            verdict = "ok"
        elif round(hi, 2) >= 1.0:
            verdict = "ok (noise)"
        else:
            verdict = "SLOWER"
        figures = {"ours": o, "c": c, "rxe": r, "oc": oc, "orx": ratio(o, r, lower), "low": lo, "high": hi,
                   "paired": n, "worse": worse, "need": need,
                   "partial": o_n < len(rounds) or c_n < len(rounds)}
        out.append((label, metric, figures, verdict))
    return out


def side_table(lines, values, units, rows, new, base, head, intro):
    """Appends to `lines` a table of `new` against `base` (two "drivers" of
    the raw figures) for `rows`, paired by round, when any row has figures
    of `new`; returns the metrics of the rows without a ratio."""
    if not any(values[m][new] for m, _, _ in rows):
        return []
    missing = []
    out = []
    for metric, label, lower in rows:
        b_med, _ = median(values[metric][base])
        n_med, _ = median(values[metric][new])
        r, (lo, hi), _n, _w = paired(values[metric][new], values[metric][base], lower)
        if math.isnan(r):
            missing.append(metric)
        out.append([label, units.get(metric, "-"), num(b_med), num(n_med),
                    "-" if math.isnan(r) else f"{r:.2f}",
                    "-" if math.isnan(lo) else f"{lo:.2f}-{hi:.2f}"])
    w = [max(len(str(x)) for x in col) for col in zip(head, *out)]
    lines += [""] + intro + ["  ".join(str(x).ljust(k) for x, k in zip(head, w)).rstrip(),
                             "  ".join("-" * k for k in w)]
    lines += ["  ".join(str(x).ljust(k) for x, k in zip(r, w)).rstrip() for r in out]
    return missing


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw")
    ap.add_argument("--out")
    ap.add_argument("--note", action="append", default=[], help="a line for the header (repeatable)")
    args = ap.parse_args()

    values, units = load(args.raw)
    head = ["metric", "unit", "ours", "C", "rxe", "ours/C", "worse", "interval", "ours/rxe", "verdict"]
    results = judge(values)
    rows = []
    for label, metric, f, verdict in results:
        rows.append([label + (" *" if f["partial"] else ""), units.get(metric, "-"),
                     num(f["ours"]), num(f["c"]), num(f["rxe"]),
                     "-" if math.isnan(f["oc"]) else f"{f['oc']:.2f}",
                     f"{f['worse']}/{f['paired']}" if f["paired"] else "-",
                     "-" if math.isnan(f["low"]) else f"{f['low']:.2f}-{f['high']:.2f}",
                     "-" if math.isnan(f["orx"]) else f"{f['orx']:.2f}", verdict])
    slower = [r for r in results if r[3] == "SLOWER"]
    missing = [r for r in results if r[3] == "FAILED"]
    few = [r for r in results if r[3] == "TOO FEW ROUNDS"]

    per_metric = {metric: len(rounds_of(values, metric)) for metric, _, _ in ROWS}
    common = statistics.mode(per_metric.values())
    counts = "; ".join([f"{n} for {' '.join(m for m, k in per_metric.items() if k == n)}"
                        for n in sorted(set(per_metric.values()) - {common}, reverse=True)]
                       + [f"{common} for {'the others' if len(set(per_metric.values())) > 1 else 'every row'}"])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    right = {2, 3, 4, 5, 6, 7, 8}

    def fmt(row):
        return "  ".join(str(x).rjust(w) if i in right else str(x).ljust(w)
                         for i, (x, w) in enumerate(zip(row, widths))).rstrip()

    lines = [
        "erdma_rs benchmark: ours = erdma_rs, C = the upstream C erdma driver (same model adapters, same boot),",
        "rxe = rdma_rxe on the adapters' twin virtio-net NICs (outside reference).",
        "Figures: medians of the rounds (drivers interleaved; the order changes every round).",
        f"Rounds: {counts}.",
        "Ratios: >= 1.00 means ours is at least as good (latencies: theirs/ours; rates and bandwidths: ours/theirs).",
        "ours/C: the median of the per-round ratios (ours and C measured at the same time or back to back in",
        "  each round, so host drift cancels); worse: the rounds in which ours was worse than C, of those with",
        "  figures for both; interval: the ~95% distribution-free confidence interval of ours/C (order",
        "  statistics; at 5 rounds, the range of all of them: 94%). ours/rxe: the ratio of the medians.",
        "  Verdict: ok (ours/C >= 1.00), ok (noise) (below 1.00, the interval reaching it), SLOWER (the whole",
        "  interval below 1.00).",
    ] + args.note + ["", fmt(head), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows]
    if any(r[0].endswith(" *") for r in rows):
        lines.append("* some rounds failed for ours or C: the median is over the rounds that did not")
        lines.append(f"  (a row needs {MIN_ROUNDS} rounds, or every round run, with figures for both for a verdict;"
                     " see every round below)")
    # What compat mode costs: the same adapters, ours in compat mode (QPs
    # connected by ibv_modify_qp, no -R) against standard mode (-R).
    compat_missing = side_table(
        lines, values, units, COMPAT_ROWS, COMPAT, OURS,
        ["iWARP, ours", "unit", "standard (-R)", "compat (no -R)", "compat/standard", "interval"],
        ["Compat mode (erdma_rs compat_mode=1) against standard mode on the same iWARP adapters,",
         "paired by round (>= 1.00: compat at least as good; the data path is the adapter's iWARP in both):"])
    # What the kernel's consumers buy: RDMA against TCP between two guests.
    compat_missing += side_table(
        lines, values, units, CONSUMER_ROWS, RDMA, TCP,
        ["iWARP, ours, two guests", "unit", "TCP", "RDMA", "RDMA/TCP", "interval"],
        ["The kernel's RDMA consumers against TCP between two guests, one iWARP adapter each, ours: NFS over",
         "RDMA (standard mode) and over TCP; one socket program over SMC-R (compat mode; smc_diag showed SMC-R",
         "carry each connection) and over TCP; paired by round (>= 1.00: RDMA at least as good):"])
    verdict = (f"bench: {len(rows)} rows, {len(slower)} slower than C, {len(missing)} without figures, "
               f"{len(few)} with too few good rounds"
               + (f", compat or consumer rows without figures: {' '.join(compat_missing)}"
                  if compat_missing else ""))
    lines += ["", verdict]
    table = "\n".join(lines) + "\n"
    print(table, end="")

    if args.out:
        detail = ["", "Every round (value per round, in round order; failed = no figure, or zero):"]
        for metric, label, lower in ROWS:
            for drv in (OURS, C, RXE):
                samples = sorted(values[metric][drv])
                detail.append(f"  {metric:<14} {drv:<8} " + " ".join(num(v) if not math.isnan(v) else "failed"
                                                                 for _, v in samples))
            by_round = per_round(values[metric][OURS], values[metric][C], lower)
            detail.append(f"  {metric:<14} {'ours/C':<8} " + " ".join(f"{by_round[r]:.2f}" if r in by_round else "-"
                                                                for r in rounds_of(values, metric)))
        with open(args.out, "w") as f:
            f.write(table + "\n".join(detail) + "\n")
    return 1 if slower or missing or few or compat_missing else 0


if __name__ == "__main__":
    sys.exit(main())
