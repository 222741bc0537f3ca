#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Unit tests of vmrun.py's console watch: what counts as a kernel report,
and that --tolerate forgives exactly the report it names (make check runs
them; no guest).

    python3 -m unittest discover -s scripts -p 'test_*.py'
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vmrun  # noqa: E402

RXE = r"WARNING: drivers/infiniband/sw/rxe/rxe_comp\.c:[0-9]+ at rxe_completer\+"
CUT = "[  553.664713] ------------[ cut here ]------------"
RXE_WARN = ("[  553.664858] WARNING: drivers/infiniband/sw/rxe/rxe_comp.c:827 at "
            "rxe_completer+0x722/0x730 [rdma_rxe], CPU#3: kworker/u16:6/602")
TRACE = ["[  553.698655] Modules linked in: rdma_rxe ip6_udp_tunnel udp_tunnel",
         "[  553.701913] RIP: 0010:rxe_completer+0x722/0x730 [rdma_rxe]",
         "[  553.751852] Call Trace:",
         "[  553.837407]  ? ret_from_fork_asm+0x11/0x20"]
OURS_WARN = ("[  600.100000] WARNING: drivers/infiniband/hw/erdma_rs/cq.rs:120 at "
             "erdma_rs::cq::poll+0x10/0x20 [erdma_rs], CPU#0: kworker/0:1/12")


def console(tolerate=()):
    return vmrun.Console(None, os.devnull, tolerate)


def feed(con, lines):
    for line in lines:
        con.feed(line)
    return con


class ReportTest(unittest.TestCase):
    def test_warn_is_a_report_without_tolerate(self):
        con = feed(console(), ["# selftests: erdma_rs: bench.sh", CUT, RXE_WARN] + TRACE)
        self.assertEqual(con.report[0], CUT)
        self.assertEqual(con.report[1], RXE_WARN)
        self.assertEqual(con.report_test, "bench.sh")
        self.assertEqual(con.tolerated, [])
        self.assertTrue(con.should_end(con.report_at + vmrun.REPORT_MAX_S))

    def test_tolerated_warn_is_recorded_and_the_guest_goes_on(self):
        con = feed(console([RXE]), [CUT, RXE_WARN] + TRACE + ["bench: rxe round 4: done"])
        self.assertEqual(con.report, [])
        self.assertIsNone(con.report_at)
        self.assertEqual(con.tolerated, [vmrun.strip_stamp(RXE_WARN)])
        self.assertFalse(con.should_end(10**9))

    def test_a_warn_message_between_cut_here_and_the_headline(self):
        msg = "[  553.664800] rxe: unexpected completion state"
        con = feed(console([RXE]), [CUT, msg, RXE_WARN] + TRACE)
        self.assertEqual(con.report, [])
        self.assertEqual(len(con.tolerated), 1)

    def test_another_warn_still_ends_the_guest(self):
        con = feed(console([RXE]), [CUT, OURS_WARN] + TRACE)
        self.assertEqual(con.report[1], OURS_WARN)
        self.assertEqual(con.tolerated, [])
        self.assertTrue(con.should_end(con.report_at + vmrun.REPORT_MAX_S))

    def test_a_report_after_a_tolerated_one_still_counts(self):
        bug = "[  700.000000] BUG: KASAN: slab-use-after-free in erdma_rs::qp::destroy+0x1/0x2"
        con = feed(console([RXE]), [CUT, RXE_WARN] + TRACE + ["# selftests: erdma_rs: rc.sh", bug])
        self.assertEqual(con.report, [bug])
        self.assertEqual(con.report_test, "rc.sh")
        self.assertEqual(len(con.tolerated), 1)

    def test_the_pattern_names_the_headline_not_the_trace(self):
        # A report of ours whose trace passes through rxe is not forgiven.
        bug = "[  700.000000] BUG: kernel NULL pointer dereference, address: 0000000000000008"
        con = feed(console([r"rxe_completer"]), [bug, TRACE[1]])
        self.assertEqual(con.report[0], bug)
        self.assertEqual(con.tolerated, [])

    def test_panic_on_warn_only_without_tolerate(self):
        self.assertIn("panic_on_warn=1", vmrun.panic_args([]))
        self.assertIn("panic_on_warn=0", vmrun.panic_args([RXE]))
        self.assertNotIn("panic_on_warn=1", vmrun.panic_args([RXE]))


class WiringTest(unittest.TestCase):
    """--dev link=N wires two NICs of a run of more than two adapters."""

    def run_of(self, out="/tmp/vmrun-test"):
        args = type("Args", (), {})()
        args.out = out
        return vmrun.Run(args)

    def test_link_pairs_the_named_nics(self):
        ads = [vmrun.parse_dev(i, s) for i, s in
               enumerate(["proto=roce,link=2", "proto=iwarp,link=3", "proto=roce,link=0", "proto=iwarp,link=1"])]
        self.assertEqual([a.link for a in ads], [2, 3, 0, 1])
        self.assertNotIn("link", ads[0].extra)  # not passed to the model
        argv = vmrun.netdev_args(self.run_of(), ads[1], ads)
        self.assertIn("local.path=/tmp/vmrun-test/nic1.sock", argv[1])
        self.assertIn("remote.path=/tmp/vmrun-test/nic3.sock", argv[1])

    def test_without_link_more_than_two_nics_reach_nothing(self):
        ads = [vmrun.parse_dev(i, "proto=roce") for i in range(3)]
        self.assertTrue(vmrun.netdev_args(self.run_of(), ads[0], ads)[1].startswith("user,"))

    def test_link_needs_an_index(self):
        with self.assertRaises(SystemExit):
            vmrun.parse_dev(0, "link=x")


class KmemleakTest(unittest.TestCase):
    """--kmemleak names the guests that keep kmemleak; the others boot without."""

    def test_all_none_and_a_list(self):
        self.assertEqual(vmrun.kmemleak_guests("all", 2), {0, 1})
        self.assertEqual(vmrun.kmemleak_guests("none", 2), set())
        self.assertEqual(vmrun.kmemleak_guests("1", 2), {1})

    def test_a_guest_that_does_not_exist_is_refused(self):
        for spec in ("2", "x", "", "0,-1"):
            with self.assertRaises(SystemExit, msg=spec):
                vmrun.kmemleak_guests(spec, 2)

    def test_the_check_skips_only_on_the_harness_word(self):
        # The guest's check keys on the exact parameter the harness appends.
        self.assertIn(f"grep -qw '{vmrun.KMEMLEAK_OFF}' /proc/cmdline", vmrun.KMEMLEAK_SH)
        self.assertEqual(vmrun.KMEMLEAK_OFF, "kmemleak=off")


if __name__ == "__main__":
    unittest.main()
