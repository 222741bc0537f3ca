#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Runs rdma-core's pyverbs tests on an erdma device and prints TAP points.

Usage: pyverbs_tap.py TESTS_DIR --driver erdma_rs|erdma [--seconds S] --dev IBDEV --gid N [MODULE...]

TESTS_DIR is the tests/ directory of the rdma-core release the guest's
libraries come from. Without MODULEs every test module of the suite runs, as
run_tests.py runs them (their own skips, e.g. of other vendors' tests, stay
skips). Each test case is one TAP point ("ok - ..." without a number, header or
plan, for the calling shell script to number): a pass or a skip of the suite's
own is ok.

A case fails unless ALLOWED names it together with the exception type and a
pattern of the message it fails with (and, where the exception is the suite's
generic one for a failure in a child process, a pattern of what the child
printed: each case's output, its children's included, is captured and shown
when it fails), and the driver under test (some limits
are the device's or the stock provider's and hold for both drivers; a few are
our driver's, named with the issue that lifts them). Such a failure is a skip
that gives the reason. A listed case that fails any other way is a failure, and
one that passes is ok with a diagnostic saying so (its entry is stale).
Exits 1 if any case failed or errored other than as allowed.

With --seconds S the run ends within S seconds: no case starts with less than
MIN_CASE_S left, a case gets at most what is left, and the cases that did not
run are counted in the last line ("N not run: out of time"). pyverbs.sh
passes the time the kselftest runner leaves it.
"""

import fnmatch
import os
import re
import signal
import sys
import tempfile
import time
import unittest
from dataclasses import dataclass

# How long one case may take before it is failed (a hung case must not eat the
# whole run's time); the slowest pass in well under a minute on a TCG guest.
CASE_TIMEOUT_S = 120
# Cases slower than this are named, with their time.
SLOW_CASE_S = 10
# With --seconds, no case starts with less time than this left.
MIN_CASE_S = 15
# The end of the run (time.monotonic()), with --seconds.
DEADLINE = None

BOTH = ("erdma_rs", "erdma")
# Whether erdma_rs runs in compat mode (iWARP adapters as RoCEv2 devices).
COMPAT = "compat_mode=1" in os.environ.get("ERDMA_MODPROBE_ARGS", "").split()


@dataclass(frozen=True)
class Allowed:
    names: tuple        # test ids (module.Class.method), fnmatch patterns allowed
    exc: str            # the exception's type name
    msg: str            # a regular expression the message must match (re.search)
    reason: str
    drivers: tuple = BOTH
    output: str = ""    # a regular expression the case's output must match (re.M), if set
    compat: bool = False  # only in compat mode

    def covers(self, name, driver):
        return driver in self.drivers and (COMPAT or not self.compat) and \
            any(fnmatch.fnmatchcase(name, n) for n in self.names)


ALLOWED = [
    # random_qp_cap() draws send SGEs from 1..max_sge/2; the device has one
    # receive SGE, so libibverbs reports max_sge = 1 and the range is empty.
    Allowed(("test_qp.QPTest.test_create_*_qp_*_attr", "test_qp.QPTest.test_query_*_qp",
             "test_qp.QPTest.test_query_data_in_order", "test_qp.QPTest.test_modify_ud_qp",
             "test_qp.QPTest.test_create_raw_qp_ex_with_illegal_caps_*"),
            "ValueError", r"^empty range", "suite needs max_sge >= 2"),
    # User UD: both drivers create UD QPs (issue 10 gave ours UD), but the stock
    # provider has no create_ah (erdma_rs_hw 8), so the suite's UD traffic
    # cannot address anyone.
    Allowed(("test_cq_events.CqEventsTestCase.test_cq_events_ud",
             "test_relaxed_ordering.RoTestCase.test_ro_ud_traffic"),
            "PyverbsRDMAError", r"^Failed to create AH\. Errno: 95",
            "the stock provider has no create_ah"),
    # rdma_cm's ACK timeout option (qp_timeout=21): the suite queries the QP's
    # IBV_QP_TIMEOUT after connecting and asserts it is 21, but the upstream
    # driver's query_qp does not report the timeout (it reads 0: the adapter does
    # not take it and that driver does not keep it; ours keeps it for queries).
    # The assert has no message, so each
    # child prints "Player <side> got: " and nothing more, and the suite raises
    # its generic exception. (The other rdma_cm cases pass with both drivers;
    # the UDP one is skipped by the suite: no user AH, so no user UD traffic.)
    Allowed(("test_rdmacm.CMTestCase.test_rdmacm_async_traffic",),
            "Exception", r"^Exception in active/passive side occurred$",
            "query_qp does not report the ACK timeout", drivers=("erdma",),
            output=r"^Player (active|passive) got: $"),
    # The stock provider turns the refusal of a CQ deeper than max_cqe into
    # EIO (the C driver and ours both refuse it).
    Allowed(("test_cq.CQAPITest.test_create_cq_bad_flow",),
            "AssertionError", r"^5 != 22", "max_cqe + 1 comes back as EIO, not EINVAL"),
    # Compat mode carries RoCE's verbs on the adapter's iWARP (erdma_rs_hw
    # 7.3), which has no RNR retry: a Send that finds no receive posted ends
    # the connection (the model: "incoming Send finds no receive WQE posted").
    # The external-QP case's client posts its receive only once its own send
    # has completed, so the server's reply may come first (RoCE answers with
    # an RNR NAK and retries): then the client's poll times out, and the
    # server's next completion is in error (the connection ended).
    Allowed(("test_rdmacm.CMTestCase.test_rdmacm_async_traffic_external_qp",),
            "Exception", r"^Exception in active/passive side occurred$",
            "iWARP has no RNR retry (compat mode)", drivers=("erdma_rs",), compat=True,
            output=r"^Player active got: Got timeout on polling"),
    # RoCE QP access flags never reach the device; access is checked per MR
    # (erdma_rs_hw 10.15).
    Allowed(("test_atomic.AtomicTest.test_atomic_invalid_qp_access",),
            "AssertionError", r"^PyverbsRDMAError not raised", "device ignores QP access flags"),
]


class CaseTimeout(Exception):
    pass


def on_alarm(_signum, _frame):
    raise CaseTimeout(f"the case took more than {case_seconds()} s")


def time_left():
    return None if DEADLINE is None else DEADLINE - time.monotonic()


def case_seconds():
    """The time a case may take: CASE_TIMEOUT_S, or what is left of the run."""
    left = time_left()
    return CASE_TIMEOUT_S if left is None else max(1, min(CASE_TIMEOUT_S, int(left)))


def first_line(exc):
    text = str(exc)
    return text.splitlines()[0] if text else ""


class TapResult(unittest.TestResult):
    def __init__(self, driver):
        super().__init__()
        self.driver = driver
        self.saved = None
        self.output = ""
        self.name_now = ""
        self.passed = self.allowed = self.bad = 0

    @staticmethod
    def name(test):
        return test.id().removeprefix("tests.")

    def emit(self, test, ok, skip=""):
        line = f"{'ok' if ok else 'not ok'} - pyverbs {self.name(test)}"
        print(line + (f" # SKIP {skip}" if skip else ""), flush=True)

    def startTest(self, test):
        super().startTest(test)
        self.started = time.monotonic()
        self.capture()
        signal.alarm(case_seconds())

    def capture(self):
        """Sends what the case and its child processes print to a file."""
        sys.stdout.flush()
        sys.stderr.flush()
        self.captured = tempfile.TemporaryFile()
        self.saved = (os.dup(1), os.dup(2))
        os.dup2(self.captured.fileno(), 1)
        os.dup2(self.captured.fileno(), 2)
        self.output = ""

    def release(self):
        """Ends capture(): the case's output goes to self.output."""
        if self.saved is None:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        for fd in self.saved:
            os.close(fd)
        self.saved = None
        self.captured.seek(0)
        self.output = self.captured.read().decode(errors="replace")
        self.captured.close()

    def show_output(self):
        for line in self.output.splitlines()[-20:]:
            print(f"# {self.name_now}: output: {line}")

    def stopTest(self, test):
        signal.alarm(0)
        self.release()
        took = time.monotonic() - self.started
        if took >= SLOW_CASE_S:
            print(f"# {self.name(test)} took {took:.0f} s")
        super().stopTest(test)
        left = time_left()
        if left is not None and left < MIN_CASE_S:
            self.shouldStop = True

    def entry(self, test):
        name = self.name(test)
        return next((a for a in ALLOWED if a.covers(name, self.driver)), None)

    def addSuccess(self, test):
        self.release()
        super().addSuccess(test)
        self.passed += 1
        a = self.entry(test)
        if a:
            print(f"# {self.name(test)}: allowed to fail ({a.reason}) but passed: the entry is stale")
        self.emit(test, True)

    def addSkip(self, test, reason):
        self.release()
        super().addSkip(test, reason)
        self.emit(test, True, reason.replace("\n", " "))

    def _fail(self, test, err):
        self.release()
        self.name_now = self.name(test)
        self.show_output()
        exc_type, exc = err[0].__name__, err[1]
        msg = first_line(exc)
        a = self.entry(test)
        if a and exc_type == a.exc and re.search(a.msg, str(exc)) and \
                (not a.output or re.search(a.output, self.output, re.M)):
            self.allowed += 1
            self.emit(test, True, f"allowed failure: {a.reason} ({exc_type}: {msg[:120]})")
            return
        self.bad += 1
        if a:
            print(f"# {self.name(test)}: allowed only to fail with {a.exc} matching {a.msg!r}"
                  + (f" and output matching {a.output!r}" if a.output else "") + f" ({a.reason})")
        print(f"# {self.name(test)}: {exc_type}: {msg}")
        self.emit(test, False)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._fail(test, err)

    def addError(self, test, err):
        super().addError(test, err)
        self._fail(test, err)

    def addExpectedFailure(self, test, err):
        self.release()
        super().addExpectedFailure(test, err)
        self.passed += 1
        self.emit(test, True)

    def addUnexpectedSuccess(self, test):
        self.release()
        super().addUnexpectedSuccess(test)
        self.bad += 1
        self.emit(test, False)


def main():
    argv = sys.argv[1:]
    tests_dir = argv.pop(0)
    driver = "erdma_rs"
    if "--driver" in argv:
        i = argv.index("--driver")
        driver = argv[i + 1]
        del argv[i:i + 2]
    if driver not in BOTH:
        sys.exit(f"pyverbs_tap.py: --driver must be one of {BOTH}")
    global DEADLINE
    if "--seconds" in argv:
        i = argv.index("--seconds")
        DEADLINE = time.monotonic() + int(argv[i + 1])
        del argv[i:i + 2]
    modules = [a for a in argv if a.startswith("test_")]
    sys.argv = [sys.argv[0]] + [a for a in argv if not a.startswith("test_")]
    # args_parser is imported as a top-level module by the suite, the test
    # modules as the package "tests" (whose __init__ imports every module).
    sys.path.insert(0, tests_dir)
    sys.path.insert(0, os.path.dirname(os.path.abspath(tests_dir)))
    from args_parser import parser
    parser.parse_args()
    import importlib
    tests = importlib.import_module(os.path.basename(os.path.abspath(tests_dir)))
    loader = unittest.TestLoader()
    suite = unittest.TestSuite()
    for mod in tests.__test_modules__:
        if not modules or mod.__name__.rsplit(".", 1)[-1] in modules:
            suite.addTests(loader.loadTestsFromModule(mod))
    signal.signal(signal.SIGALRM, on_alarm)
    result = TapResult(driver)
    start = time.monotonic()
    left = time_left()
    if left is not None and left < MIN_CASE_S:
        result.shouldStop = True
    total = suite.countTestCases()
    suite.run(result)
    not_run = total - result.testsRun
    print(f"# pyverbs: {result.testsRun} run, {result.passed} passed, {len(result.skipped)} "
          f"skipped by the suite, {result.allowed} allowed failures, {result.bad} failed, "
          f"in {time.monotonic() - start:.0f} s ({driver})"
          + (f", {not_run} not run: out of time" if not_run else ""))
    return 1 if result.bad else 0


if __name__ == "__main__":
    sys.exit(main())
