#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# run_tests.sh TEST...: runs each test script, saving its TAP output as
# $ERDMA_RESULTS/$ERDMA_TAP_PREFIX<test>.tap. Exits 1 if any test failed, else
# 0 (skips pass). A prefix lets one boot run the tests with both drivers in turn.
cd "$(dirname "$0")"
results=${ERDMA_RESULTS:-/tmp/erdma-results}
# A library that stops loading half-way (a stray top-level return) turns
# checks into silent skips: refuse to run on one.
. ./lib.sh
[ "${ERDMA_LIB_LOADED:-}" = 1 ] || { echo "# lib.sh did not load completely"; exit 1; }
mkdir -p "$results"
# The module's KUnit suites (erdma_rs_*) run at every load of erdma_rs, about
# a second of the debug kernel, and a scenario loads it once per test or more.
# On emulated adapters they run at the first test here and in probe.sh, which
# checks their results; KUnit's filter leaves them out of the other tests'
# loads (its default comes back at the end).
kunit_glob=/sys/module/kunit/parameters/filter_glob
kunit_default=
if [ -w "$kunit_glob" ] && may_reconfigure && is_emulated; then
	kunit_default=$(cat "$kunit_glob")
	[ "$kunit_default" != "(null)" ] || kunit_default="*"
fi
kunit_suites() {
	[ -n "$kunit_default" ] || return 0
	if [ "$1" = on ]; then
		printf '%s' "$kunit_default" >"$kunit_glob"
	else
		echo "no_erdma_rs_suites_past_the_first_test" >"$kunit_glob"
	fi
}
rc=0
first=1
for t in "$@"; do
	name=${ERDMA_TAP_PREFIX:-}$(basename "$t" .sh)
	if [ $first = 1 ] || [ "$(basename "$t")" = probe.sh ]; then
		kunit_suites on
	else
		kunit_suites off
	fi
	first=0
	echo "# selftests: erdma_rs: $name"
	start=$(uptime)
	{ sh "./$t"; echo $? >"$results/$name.rc"; uptime >"$results/$name.end"; } | tee "$results/$name.tap"
	r=$(cat "$results/$name.rc")
	took="$(($(uptime) - start))s"
	# A process the test left behind with its output open keeps tee (and
	# the scenario) waiting: more than 30 s of that fails the test (a
	# backgrounded shell function killed by its subshell's PID left its
	# child so for 150 s).
	held=$(($(uptime) - $(cat "$results/$name.end")))
	if [ "$held" -gt 30 ] && [ "$r" = 0 ]; then
		echo "# $name: processes it started kept its output open $held s after it ended"
		r=1
	fi
	case "$r" in
	0) echo "# $name: pass ($took)" ;;
	4) echo "# $name: skip ($took)" ;;
	*) echo "# $name: FAIL (exit $r, $took)"; rc=1 ;;
	esac
done
kunit_suites on
# The eRDMA drivers a scenario's tests left loaded (the upstream C driver
# stays loaded from test to test, see unload_and_finish in lib.sh) unload
# here, once, as a test of their own: on emulated adapters only (elsewhere a
# test leaves the drivers as it found them; see "What a test may change" in
# lib.sh).
loaded=""
if may_reconfigure && is_emulated; then
	loaded=$(awk '$1 == "erdma" || $1 == "erdma_rs" { print $1 }' /proc/modules)
fi
if [ -n "$loaded" ]; then
	echo "# selftests: erdma_rs: ${ERDMA_TAP_PREFIX:-}unload"
	{
		tap_header
		for m in $loaded; do
			tap_check "rmmod $m at the end of the scenario" unload "$m"
		done
		_trouble=$(kernel_trouble)
		[ -z "$_trouble" ] || tap_diag "$_trouble"
		tap_check "no kernel report in the kernel log" [ -z "$_trouble" ]
		tap_finish
	} | tee "$results/${ERDMA_TAP_PREFIX:-}unload.tap"
	grep -q '^not ok' "$results/${ERDMA_TAP_PREFIX:-}unload.tap" && rc=1
fi
exit $rc
