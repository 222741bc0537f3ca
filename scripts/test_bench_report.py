#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Unit tests of bench_report.py's verdicts (make check runs them; no guest).

    python3 -m unittest discover -s scripts -p 'test_*.py'
"""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_report  # noqa: E402
from bench_report import C, OURS, RXE, ROWS  # noqa: E402


def raw(rows, units=None):
    """A bench.raw text: every metric of ROWS gets the figures of rows[metric]
    ({driver: [value per round]}), or ours = C = rxe = 100 in every round; in
    units[metric], or 1/s."""
    rounds = 5
    lines = []
    for metric, _, _ in ROWS:
        figures = rows.get(metric, {})
        unit = (units or {}).get(metric, "1/s")
        for drv in (OURS, C, RXE):
            for r, v in enumerate(figures.get(drv, [100] * rounds)):
                lines.append(f"{drv} {r} {metric} {v} {unit}")
    return "\n".join(lines) + "\n"


def judge(text):
    with tempfile.NamedTemporaryFile("w", suffix=".raw", delete=False) as f:
        f.write(text)
    try:
        values, _ = bench_report.load(f.name)
    finally:
        os.unlink(f.name)
    return {metric: (figures, verdict) for _, metric, figures, verdict in bench_report.judge(values)}


class Verdicts(unittest.TestCase):
    def test_equal_drivers_are_ok(self):
        for figures, verdict in judge(raw({})).values():
            self.assertEqual(verdict, "ok")
            self.assertEqual(figures["oc"], 1.0)

    def test_host_drift_cancels_in_the_pairing(self):
        # Both drivers fall from round to round (a host getting busier), ours a
        # little above C in every round: the medians' spread is large, the
        # per-round ratios agree.
        c = [2000, 1800, 1600, 1400, 1200]
        ours = [x * 1.05 for x in c]
        figures, verdict = judge(raw({"cq": {OURS: ours, C: c}}))["cq"]
        self.assertEqual(verdict, "ok")
        self.assertAlmostEqual(figures["oc"], 1.05)
        self.assertAlmostEqual(figures["low"], 1.05)
        self.assertAlmostEqual(figures["high"], 1.05)
        self.assertEqual(figures["worse"], 0)

    def test_consistently_slower_is_slower_despite_drift(self):
        c = [2000, 1800, 1600, 1400, 1200]
        ours = [x * f for x, f in zip(c, (0.90, 0.88, 0.92, 0.89, 0.91))]
        figures, verdict = judge(raw({"cq": {OURS: ours, C: c}}))["cq"]
        self.assertEqual(verdict, "SLOWER")
        self.assertEqual(figures["worse"], 5)
        self.assertAlmostEqual(figures["oc"], 0.90)

    def test_scattered_ratios_are_noise(self):
        c = [100] * 5
        ours = [80, 130, 95, 110, 90]  # ratios 0.80 .. 1.30, median 0.95
        figures, verdict = judge(raw({"cq": {OURS: ours, C: c}}))["cq"]
        self.assertEqual(verdict, "ok (noise)")
        self.assertAlmostEqual(figures["oc"], 0.95)

    def test_latency_is_oriented_lower_is_better(self):
        c = [10.0] * 5
        ours = [12.0] * 5  # ours takes longer: theirs/ours = 0.83
        figures, verdict = judge(raw({"send_lat_p50": {OURS: ours, C: c}}))["send_lat_p50"]
        self.assertEqual(verdict, "SLOWER")
        self.assertAlmostEqual(figures["oc"], 10 / 12)
        _, verdict = judge(raw({"send_lat_p50": {OURS: c, C: ours}}))["send_lat_p50"]
        self.assertEqual(verdict, "ok")

    def test_failed_rounds_are_left_out_never_zero(self):
        # perftest printed 0.00 in one of ours' rounds and failed in another,
        # where C failed too.
        ours = [100, 0, 100, "nan", 100]
        c = [100, 100, 100, "x", 100]
        figures, verdict = judge(raw({"write_bw_q1": {OURS: ours, C: c}}))["write_bw_q1"]
        self.assertEqual(verdict, "ok")
        self.assertEqual(figures["ours"], 100)
        self.assertEqual(figures["paired"], 3)
        self.assertTrue(figures["partial"])

    def test_too_few_rounds_with_both_figures(self):
        # Each driver has 3 good rounds, but only 2 of them are the same rounds.
        ours = [100, 100, 100, 0, 0]
        c = [0, 100, 100, 100, 0]
        figures, verdict = judge(raw({"mr1g": {OURS: ours, C: c}}))["mr1g"]
        self.assertEqual(verdict, "TOO FEW ROUNDS")
        self.assertEqual(figures["paired"], 2)

    def test_no_figures_fails(self):
        _, verdict = judge(raw({"qp": {OURS: [0] * 5}}))["qp"]
        self.assertEqual(verdict, "FAILED")

    def test_worse_in_every_round_is_slower_whatever_the_spread(self):
        c = [100] * 5
        ours = [97, 96, 98, 60, 97]  # one round hit by host work between ours and C
        figures, verdict = judge(raw({"ctx": {OURS: ours, C: c}}))["ctx"]
        self.assertEqual(verdict, "SLOWER")
        self.assertEqual((figures["low"], figures["high"]), (0.60, 0.98))

    def test_one_better_round_of_five_is_noise(self):
        # 4 of 5 worse happens by chance 19% of the time when the drivers are equal.
        c = [100] * 5
        ours = [97, 96, 98, 101, 97]
        _, verdict = judge(raw({"read_bw_q1": {OURS: ours, C: c}}))["read_bw_q1"]
        self.assertEqual(verdict, "ok (noise)")

    def test_many_pairs_narrow_the_interval(self):
        # 20 pairs (the control rows), ours 3% behind with +-5% scatter: 17 of
        # 20 worse, the interval [x6, x15] below 1.00.
        scatter = [0.95, 1.02, 0.97, 0.99, 0.92, 1.01, 0.96, 0.98, 0.94, 0.97,
                   0.93, 0.99, 0.96, 1.00, 0.95, 0.98, 0.97, 0.94, 0.96, 0.98]
        ours = [round(100 * x, 3) for x in scatter]
        figures, verdict = judge(raw({"cq": {OURS: ours, C: [100] * 20}}))["cq"]
        self.assertEqual(figures["paired"], 20)
        self.assertEqual(figures["need"], 3)
        self.assertEqual(verdict, "SLOWER")
        self.assertEqual((figures["low"], figures["high"]), (0.95, 0.98))
        # The same scatter around 1.00 is noise.
        ours = [round(100 * (x + 0.03), 3) for x in scatter]
        _, verdict = judge(raw({"cq": {OURS: ours, C: [100] * 20}}))["cq"]
        self.assertIn(verdict, ("ok", "ok (noise)"))

    def test_median_interval_coverage(self):
        # k-th order statistics from each end: 1 up to n = 8, 6 at n = 20.
        for n, k in ((3, 1), (5, 1), (8, 1), (9, 2), (20, 6), (30, 10)):
            xs = list(range(n))
            self.assertEqual(bench_report.median_interval(xs), (k - 1, n - k), n)


class RdmaCmAndNvmeRows(unittest.TestCase):
    """The rows of issue 10 (bench.sh's cm and nvmeof): rates, higher is better,
    in the units bench.sh records them in."""

    UNITS = {"cm_conn": "conn/s", "rping": "rt/s", "nvme_rr4k": "IOPS", "nvme_sw128k": "MiB/s"}

    def test_rows_are_there_and_higher_is_better(self):
        lower = {metric: lower for metric, _, lower in ROWS}
        for metric in self.UNITS:
            self.assertIn(metric, lower)
            self.assertFalse(lower[metric], metric)

    def test_fewer_per_second_in_every_round_is_slower(self):
        c = [210.0, 190.0, 205.0, 180.0, 200.0]
        for metric in self.UNITS:
            figures, verdict = judge(raw({metric: {OURS: [x * 0.9 for x in c], C: c}}))[metric]
            self.assertEqual(verdict, "SLOWER", metric)
            self.assertAlmostEqual(figures["oc"], 0.9)
            figures, verdict = judge(raw({metric: {OURS: [x * 1.1 for x in c], C: c}}))[metric]
            self.assertEqual(verdict, "ok", metric)
            self.assertAlmostEqual(figures["oc"], 1.1)

    def test_rxe_against_ours_is_the_ratio_of_the_medians(self):
        # rxe's cmtime and rping runs are shorter (fewer connections and round
        # trips) but report the same unit: per second.
        figures, _ = judge(raw({"rping": {OURS: [5000] * 5, C: [5000] * 5, RXE: [100, 120, 80, "nan", 110]}}))["rping"]
        self.assertAlmostEqual(figures["orx"], 5000 / 105)

    def test_units_are_shown_as_recorded(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bench.raw")
            with open(path, "w") as f:
                f.write(raw({}, self.UNITS))
            p = subprocess.run([sys.executable, os.path.join(HERE, "bench_report.py"), path],
                               capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        table = {line.split("  ")[0].strip(): line for line in p.stdout.splitlines()}
        for metric, label, _ in ROWS:
            if metric in self.UNITS:
                self.assertIn(f"  {self.UNITS[metric]}  ", table[label], label)


class ExitStatus(unittest.TestCase):
    def run_report(self, text):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bench.raw")
            with open(path, "w") as f:
                f.write(text)
            return subprocess.run([sys.executable, os.path.join(HERE, "bench_report.py"), path,
                                   "--out", os.path.join(d, "results.txt")],
                                  capture_output=True, text=True)

    def test_all_ok_exits_0(self):
        p = self.run_report(raw({}))
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn(f"bench: {len(ROWS)} rows, 0 slower than C", p.stdout)

    def test_without_rxe_figures_the_verdicts_stand(self):
        # rxe's figures left out (it made kernel reports: scripts/bench.sh):
        # the rows compare ours with C as before, the rxe columns are empty.
        text = "".join(line + "\n" for line in raw({}).splitlines() if not line.startswith(RXE + " "))
        p = self.run_report(text)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn(f"bench: {len(ROWS)} rows, 0 slower than C", p.stdout)

    def test_a_slower_row_exits_1(self):
        p = self.run_report(raw({"qp": {OURS: [80] * 5}}))
        self.assertEqual(p.returncode, 1)
        self.assertIn("1 slower than C", p.stdout)

    def test_consumer_table_pairs_rdma_with_tcp(self):
        # The two-guest rows: RDMA against TCP by round, latency oriented.
        extra = "".join(f"rdma {r} nfs_read {200 + r} MiB/s\ntcp {r} nfs_read {100 + r} MiB/s\n"
                        f"rdma {r} sock_bw 300 MiB/s\ntcp {r} sock_bw 150 MiB/s\n"
                        f"rdma {r} sock_rtt 50 us\ntcp {r} sock_rtt 100 us\n" for r in range(5))
        p = self.run_report(raw({}) + extra)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("RDMA/TCP", p.stdout)
        rows = {line.split("  ")[0]: line.split() for line in p.stdout.splitlines()}
        self.assertEqual(rows["socket stream, 1 MiB writes"][-2], "2.00")
        self.assertEqual(rows["socket ping-pong, 1 B round trip"][-2], "2.00")

    def test_a_consumer_row_without_figures_exits_1(self):
        # SMC-R did not carry the connections (nan): the row has no ratio.
        extra = "".join(f"rdma {r} nfs_read 200 MiB/s\ntcp {r} nfs_read 100 MiB/s\n"
                        f"rdma {r} sock_bw nan -\ntcp {r} sock_bw 150 MiB/s\n"
                        f"rdma {r} sock_rtt 50 us\ntcp {r} sock_rtt 100 us\n" for r in range(5))
        p = self.run_report(raw({}) + extra)
        self.assertEqual(p.returncode, 1)
        self.assertIn("rows without figures: sock_bw", p.stdout)


if __name__ == "__main__":
    unittest.main()
