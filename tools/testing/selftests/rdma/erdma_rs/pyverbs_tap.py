#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Runs rdma-core's pyverbs tests on an erdma device and prints TAP points.

Usage: pyverbs_tap.py TESTS_DIR --dev IBDEV --gid N MODULE...

TESTS_DIR is the tests/ directory of the rdma-core release the guest's
libraries come from. Each test case is one TAP point ("ok N - ..." without a
header or plan, for the calling shell script to number): a pass or a skip of
the suite's own is ok. The cases in KNOWN fail on this device with the upstream
C driver too, for the reasons given (limits of the device or of the suite's
assumptions, erdma-hw.md appendix A): they are reported as skips with that
reason, and pass or fail as they will otherwise. Exits 1 if any other case
failed or errored.
"""

import os
import sys
import unittest

KNOWN = {
    # random_qp_cap() draws send SGEs from 1..max_sge/2; the device has one
    # receive SGE, so libibverbs reports max_sge = 1 and the range is empty.
    "test_qp.QPTest.test_create_rc_qp_no_attr": "suite needs max_sge >= 2",
    "test_qp.QPTest.test_create_rc_qp_with_attr": "suite needs max_sge >= 2",
    "test_qp.QPTest.test_create_rc_qp_ex_no_attr": "suite needs max_sge >= 2",
    "test_qp.QPTest.test_create_rc_qp_ex_with_attr": "suite needs max_sge >= 2",
    "test_qp.QPTest.test_query_rc_qp": "suite needs max_sge >= 2",
    "test_qp.QPTest.test_create_uc_qp_no_attr": "suite needs max_sge >= 2",
    "test_qp.QPTest.test_create_uc_qp_with_attr": "suite needs max_sge >= 2",
    "test_qp.QPTest.test_create_uc_qp_ex_no_attr": "suite needs max_sge >= 2",
    "test_qp.QPTest.test_create_uc_qp_ex_with_attr": "suite needs max_sge >= 2",
    "test_qp.QPTest.test_query_uc_qp": "suite needs max_sge >= 2",
    "test_qp.QPTest.test_create_ud_qp_no_attr": "suite needs max_sge >= 2",
    "test_qp.QPTest.test_create_ud_qp_with_attr": "suite needs max_sge >= 2",
    "test_qp.QPTest.test_create_ud_qp_ex_no_attr": "suite needs max_sge >= 2",
    "test_qp.QPTest.test_create_ud_qp_ex_with_attr": "suite needs max_sge >= 2",
    "test_qp.QPTest.test_query_ud_qp": "suite needs max_sge >= 2",
    "test_qp.QPTest.test_query_data_in_order": "suite needs max_sge >= 2",
    "test_qp.QPTest.test_create_raw_qp_no_attr": "suite needs max_sge >= 2",
    "test_qp.QPTest.test_create_raw_qp_with_attr": "suite needs max_sge >= 2",
    "test_qp.QPTest.test_create_raw_qp_ex_no_attr": "suite needs max_sge >= 2",
    "test_qp.QPTest.test_create_raw_qp_ex_with_attr": "suite needs max_sge >= 2",
    "test_qp.QPTest.test_query_raw_qp": "suite needs max_sge >= 2",
    "test_qp.QPTest.test_create_raw_qp_ex_with_illegal_caps_max_recv_sge":
        "suite needs max_sge >= 2",
    "test_qp.QPTest.test_create_raw_qp_ex_with_illegal_caps_max_recv_wr":
        "suite needs max_sge >= 2",
    "test_qp.QPTest.test_create_raw_qp_ex_with_illegal_caps_max_send_sge":
        "suite needs max_sge >= 2",
    "test_qp.QPTest.test_create_raw_qp_ex_with_illegal_caps_max_send_wr":
        "suite needs max_sge >= 2",
    # UD: the stock provider has no create_ah (erdma-hw.md 8).
    "test_qp.QPTest.test_modify_ud_qp": "no user UD (provider lacks create_ah)",
    "test_cq_events.CqEventsTestCase.test_cq_events_ud": "no user UD (provider lacks create_ah)",
    "test_relaxed_ordering.RoTestCase.test_ro_ud_traffic": "no user UD (provider lacks create_ah)",
    # The stock provider turns the refusal of a CQ deeper than max_cqe into
    # EIO (the C driver and ours both refuse it).
    "test_cq.CQAPITest.test_create_cq_bad_flow": "max_cqe + 1 comes back as EIO, not EINVAL",
    # RoCE QP access flags never reach the device; access is checked per MR
    # (erdma-hw.md 10.15).
    "test_atomic.AtomicTest.test_atomic_invalid_qp_access": "device ignores QP access flags",
}


class TapResult(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.bad = 0

    @staticmethod
    def name(test):
        return test.id().removeprefix("tests.")

    def emit(self, test, ok, note=""):
        line = f"{'ok' if ok else 'not ok'} - pyverbs {self.name(test)}"
        print(line + (f" # SKIP {note}" if note else ""), flush=True)

    def addSuccess(self, test):
        super().addSuccess(test)
        self.emit(test, True)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.emit(test, True, reason.replace("\n", " "))

    def _fail(self, test, err):
        known = KNOWN.get(self.name(test))
        if known:
            self.emit(test, True, f"fails with the upstream driver too: {known}")
            return
        self.bad += 1
        print(f"# {self.name(test)}: {err[0].__name__}: {str(err[1]).splitlines()[0] if str(err[1]) else ''}")
        self.emit(test, False)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._fail(test, err)

    def addError(self, test, err):
        super().addError(test, err)
        self._fail(test, err)


def main():
    tests_dir = sys.argv[1]
    modules = [a for a in sys.argv[2:] if a.startswith("test_")]
    sys.argv = [sys.argv[0]] + [a for a in sys.argv[2:] if not a.startswith("test_")]
    # args_parser is imported as a top-level module by the suite, the test
    # modules as the package "tests".
    sys.path.insert(0, tests_dir)
    sys.path.insert(0, os.path.dirname(os.path.abspath(tests_dir)))
    from args_parser import parser
    parser.parse_args()
    import importlib
    suite = unittest.TestSuite()
    loader = unittest.TestLoader()
    for m in modules:
        suite.addTests(loader.loadTestsFromModule(importlib.import_module("tests." + m)))
    result = TapResult()
    suite.run(result)
    print(f"# pyverbs: {result.testsRun} run, {len(result.skipped)} skipped, {result.bad} failed")
    return 1 if result.bad else 0


if __name__ == "__main__":
    sys.exit(main())
