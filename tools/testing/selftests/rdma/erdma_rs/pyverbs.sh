#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# rdma-core's own pyverbs tests (the tests/ of the guest's rdma-core release,
# copied into the guest as $PYVERBS_TESTS) on a RoCEv2 adapter, through the
# stock provider: every module of the suite, as run_tests.py runs them (most
# cases are other vendors' or need what the device lacks, and the suite skips
# them itself). Each test case is a TAP point (pyverbs_tap.py); a case fails
# unless pyverbs_tap.py's ALLOWED names the exception and message it fails
# with on this driver, with the reason (limits of the device, of the stock
# provider or of the suite; those fail with the upstream C driver too).
# Runs against either driver (ERDMA_DRIVER=erdma_rs or erdma).

. "$(dirname "$0")/lib.sh"

DRV=$ERDMA_DRIVER
NET=54
TESTS=${PYVERBS_TESTS:-/mnt/payload/tests}
[ -f "$TESTS/run_tests.py" ] || ksft_skip_all "no rdma-core tests at $TESTS (scripts/setup.sh rdma-core-tests)"
python3 -c 'import pyverbs' 2>/dev/null || ksft_skip_all "pyverbs is missing"

tap_header
nics_up $NET
# The suite's rdma_cm cases run their two sides as processes synchronised by
# multiprocessing, whose barriers and queues are POSIX semaphores in /dev/shm
# (the guest's /dev is a bare devtmpfs).
mountpoint -q /dev/shm || { mkdir -p /dev/shm && mount -t tmpfs -o mode=1777 tmpfs /dev/shm; }
tap_check "/dev/shm is mounted (multiprocessing's semaphores)" mountpoint -q /dev/shm
tap_check "modprobe $DRV" modprobe "$DRV"
roce_pair || ksft_skip_all "fewer than two RoCEv2 adapters bound"

export PYTHONDONTWRITEBYTECODE=1
start=$(date +%s)
# The cases also go to stderr as they finish (the console shows the progress).
{
	timeout 2400 python3 "$(dirname "$0")/pyverbs_tap.py" "$TESTS" --driver "$DRV" --dev "$IB_A" \
		--gid "$GID_A" ${PYVERBS_MODULES:-} 2>/tmp/pyverbs.err
	echo $? >/tmp/pyverbs.rc
} | tee /tmp/pyverbs.out >&2
rc=$(cat /tmp/pyverbs.rc)
tap_diag "pyverbs_tap.py took $(($(date +%s) - start)) s"
while read -r line; do
	case "$line" in
	"ok - "*" # SKIP "*) d=${line#ok - }; tap_skip "${d%% # SKIP *}" "${d#* # SKIP }" ;;
	"ok - "*) tap_ok "${line#ok - }" ;;
	"not ok - "*) tap_not_ok "${line#not ok - }" ;;
	*) tap_diag "${line#\# }" ;;
	esac
done </tmp/pyverbs.out
ran=$(sed -n 's/^# pyverbs: \([0-9]*\) run.*/\1/p' /tmp/pyverbs.out)
# rdma-core 56.1's suite has 321 cases; fewer means modules did not load.
# The whole suite has 321 cases; PYVERBS_MODULES names a subset (the A/B run
# of the upstream driver: the modules of its device, PD, CQ, MR and QP verbs).
want=300
[ -z "${PYVERBS_MODULES:-}" ] || want=1
completed() { [ "${ran:-0}" -ge $want ] && [ $rc -le 1 ]; }
completed ||
	tap_diag "pyverbs_tap.py exited $rc after ${ran:-0} cases: $(tail -n 8 /tmp/pyverbs.err | tr '\n' ';')"
tap_check "the pyverbs run completed (${ran:-0} cases)" completed

unload_and_finish "$DRV"
