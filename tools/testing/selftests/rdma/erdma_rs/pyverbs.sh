#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# rdma-core's own pyverbs tests (the tests/ of the guest's rdma-core release)
# on a RoCEv2 adapter, through the stock provider: every module of the suite,
# as run_tests.py runs them (most cases are other vendors' or need what the
# device lacks, and the suite skips them itself). Each test case is a TAP
# point (pyverbs_tap.py); a case fails unless pyverbs_tap.py's ALLOWED names
# the exception and message it fails with on this driver, with the reason
# (limits of the device, of the stock provider or of the suite; those fail
# with the upstream C driver too).
# Runs against either driver (ERDMA_DRIVER=erdma_rs or erdma).
#
# The suite must match the installed pyverbs. It is looked for in
# $PYVERBS_TESTS, then $ERDMA_PAYLOAD/tests (where the harness copies it),
# then where distributions install it with pyverbs
# (/usr/share/doc/rdma-core/tests: Fedora's python3-pyverbs; Debian's
# compresses it, and a decompressed copy in /tmp is used); without one the
# test skips. Under the kselftest runner the suite gets the time the runner
# leaves (run_kselftest.sh -o SECONDS gives more); the cases left when it
# runs out are one skip, with their number.

. "$(dirname "$0")/lib.sh"

NET=54
need_functions
DRV=$ERDMA_DRIVER

# find_suite: sets TESTS to a directory with the suite, or fails and says
# where it looked.
find_suite() {
	looked=""
	where="${ERDMA_PAYLOAD:+$ERDMA_PAYLOAD/tests} /usr/share/doc/rdma-core/tests /usr/local/share/doc/rdma-core/tests"
	for d in ${PYVERBS_TESTS:-$where}; do
		looked="$looked $d"
		[ -f "$d/run_tests.py" ] || continue
		if [ -f "$d/base.py" ]; then
			TESTS=$d
			return 0
		fi
		if [ -f "$d/base.py.gz" ]; then
			# Debian's python3-pyverbs: gzip-compressed modules.
			TESTS=/tmp/pyverbs-suite/tests
			rm -rf /tmp/pyverbs-suite
			mkdir -p /tmp/pyverbs-suite && cp -r "$d" "$TESTS" && gunzip -f "$TESTS"/*.gz && return 0
		fi
	done
	if [ -n "${PYVERBS_TESTS:-}" ]; then
		NO_SUITE="PYVERBS_TESTS=$PYVERBS_TESTS holds no rdma-core tests/ (run_tests.py, base.py)"
	else
		NO_SUITE="no rdma-core pyverbs suite (tests/ with run_tests.py) in:$looked; set PYVERBS_TESTS to the tests/ of the source of the installed rdma-core"
	fi
	return 1
}
find_suite || ksft_skip_all "$NO_SUITE"
python3 -c 'import pyverbs' 2>/dev/null || ksft_skip_all "pyverbs is missing"

tap_header
tap_diag "the suite: $TESTS"
nics_up $NET
# The suite's rdma_cm cases run their two sides as processes synchronised by
# multiprocessing, whose barriers and queues are POSIX semaphores in /dev/shm
# (the guest's /dev is a bare devtmpfs). Unmounted again at the end if
# mounted here; a machine that has none and may not be changed has its
# rdma_cm cases fail.
if may_reconfigure; then
	tap_check "/dev/shm is mounted (multiprocessing's semaphores)" mount_once tmpfs /dev/shm mode=1777
else
	tap_check "/dev/shm is mounted (multiprocessing's semaphores)" mountpoint -q /dev/shm
fi
load_driver
# The suite runs on one device, A.
adapter_pair roce 1 || ksft_skip_all "no RoCEv2 adapter with an IPv4 address bound to $DRV"

export PYTHONDONTWRITEBYTECODE=1
start=$(date +%s)
# The suite's time: under the kselftest runner what it leaves (less this
# test's last steps), which pyverbs_tap.py keeps to (--seconds), counting the
# cases it had no time for; outside it 2,400 s, all cases or a failure.
secs=$(ksft_within 2400)
budget=""
[ "${kselftest_timeout:-0}" -gt 0 ] 2>/dev/null && budget="--seconds $secs" && secs=$((secs + 30))
# The cases also go to stderr as they finish (the console shows the progress).
{
	timeout "$secs" python3 "$(dirname "$0")/pyverbs_tap.py" "$TESTS" --driver "$DRV" \
		$budget --dev "$IB_A" --gid "$GID_A" ${PYVERBS_MODULES:-} 2>/tmp/pyverbs.err
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
not_run=$(sed -n 's/^# pyverbs: .*, \([0-9]*\) not run: out of time$/\1/p' /tmp/pyverbs.out)
# rdma-core 56.1's suite has 321 cases; fewer means modules did not load.
# The whole suite has 321 cases; PYVERBS_MODULES names a subset (the A/B run
# of the upstream driver: the modules of its device, PD, CQ, MR and QP verbs).
want=300
[ -z "${PYVERBS_MODULES:-}" ] || want=1
[ -z "$not_run" ] || want=$ran
completed() { [ "${ran:-0}" -ge $want ] && [ $rc -le 1 ]; }
completed ||
	tap_diag "pyverbs_tap.py exited $rc after ${ran:-0} cases: $(tail -n 8 /tmp/pyverbs.err | tr '\n' ';')"
tap_check "the pyverbs run completed (${ran:-0} cases)" completed
[ -z "$not_run" ] ||
	tap_skip "$not_run more cases of the suite" \
		"out of the ${kselftest_timeout:-?} s the kselftest runner gives this test (run_kselftest.sh -o SECONDS for more)"

unload_and_finish "$DRV"
