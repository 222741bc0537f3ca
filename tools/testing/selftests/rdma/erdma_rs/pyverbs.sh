#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# rdma-core's own pyverbs tests (the tests/ of the guest's rdma-core release,
# copied into the guest as $PYVERBS_TESTS) on a RoCEv2 adapter, through the
# stock provider: device, PD, CQ, MR, QP, CQ events, atomics, fork and
# relaxed-ordering RC traffic (erdma-hw.md appendix A). Each test case is a
# TAP point (pyverbs_tap.py); the cases that fail with the upstream C driver
# too, for reasons of the device or the suite, are skips with the reason.
# Runs against either driver (ERDMA_DRIVER=erdma_rs or erdma).

. "$(dirname "$0")/lib.sh"

DRV=$ERDMA_DRIVER
NET=54
TESTS=${PYVERBS_TESTS:-/mnt/payload/tests}
[ -f "$TESTS/run_tests.py" ] || ksft_skip_all "no rdma-core tests at $TESTS (scripts/setup.sh rdma-core-tests)"
python3 -c 'import pyverbs' 2>/dev/null || ksft_skip_all "pyverbs is missing"

tap_header
nics_up $NET
tap_check "modprobe $DRV" modprobe "$DRV"
roce_pair || ksft_skip_all "fewer than two RoCEv2 adapters bound"

export PYTHONDONTWRITEBYTECODE=1
timeout 1200 python3 "$(dirname "$0")/pyverbs_tap.py" "$TESTS" --dev "$IB_A" --gid "$GID_A" \
	test_device test_pd test_cq test_mr test_qp test_cq_events test_atomic test_fork \
	test_relaxed_ordering >/tmp/pyverbs.out 2>/tmp/pyverbs.err
rc=$?
while read -r line; do
	case "$line" in
	"ok - "*" # SKIP "*) d=${line#ok - }; tap_skip "${d%% # SKIP *}" "${d#* # SKIP }" ;;
	"ok - "*) tap_ok "${line#ok - }" ;;
	"not ok - "*) tap_not_ok "${line#not ok - }" ;;
	*) tap_diag "$line" ;;
	esac
done </tmp/pyverbs.out
ran=$(sed -n 's/^# pyverbs: \([0-9]*\) run.*/\1/p' /tmp/pyverbs.out)
completed() { [ "${ran:-0}" -ge 50 ] && [ $rc -le 1 ]; }
completed ||
	tap_diag "pyverbs_tap.py exited $rc after ${ran:-0} cases: $(tail -n 8 /tmp/pyverbs.err | tr '\n' ';')"
tap_check "the pyverbs run completed (${ran:-0} cases)" completed

unload_and_finish "$DRV"
