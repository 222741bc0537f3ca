#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# run_tests.sh TEST...: runs each test script, saving its TAP output as
# $ERDMA_RESULTS/<test>.tap. Exits 1 if any test failed, else 0 (skips pass).
cd "$(dirname "$0")"
results=${ERDMA_RESULTS:-/tmp/erdma-results}
mkdir -p "$results"
rc=0
for t in "$@"; do
	name=$(basename "$t" .sh)
	echo "# selftests: erdma_rs: $name"
	{ sh "./$t"; echo $? >"$results/$name.rc"; } | tee "$results/$name.tap"
	r=$(cat "$results/$name.rc")
	case "$r" in
	0) echo "# $name: pass" ;;
	4) echo "# $name: skip" ;;
	*) echo "# $name: FAIL (exit $r)"; rc=1 ;;
	esac
done
exit $rc
