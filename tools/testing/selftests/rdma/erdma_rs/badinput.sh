#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# Bad requests through the raw uverbs interface (uverbs_bad.py): malformed
# driver data, out-of-range sizes, overflowing or unmapped ranges. Each fails
# with the expected errno, a well-formed request still works, the kernel log
# gains no driver line per call and no splat, and the model holds no object
# afterwards (nothing leaked). With erdma_rs the checks the upstream driver
# does not make run too (--strict).

. "$(dirname "$0")/lib.sh"

DRV=$ERDMA_DRIVER
NET=52
functions=$(erdma_functions)
[ -n "$functions" ] || ksft_skip_all "no eRDMA function (1ded:107f) present"
command -v python3 >/dev/null || ksft_skip_all "python3 is missing"

# no_objects BDF: the model holds no CQ, QP or MR for BDF.
no_objects() {
	got=$(model_cmd "$1" "query objects") || return 1
	case "$got" in
	*"objects=0/0/0"*) return 0 ;;
	*) tap_diag "the model holds: $got"; return 1 ;;
	esac
}

tap_header
nics_up $NET
tap_check "modprobe $DRV" modprobe "$DRV"
strict=""
[ "$DRV" = erdma_rs ] && strict=--strict

for bdf in $functions; do
	wait_for 10 is_bound "$bdf" || continue
	nd=$(netdev_of "$(mac_of "$bdf")") || continue
	wait_for 10 sh -c "rdma link show | grep -q ' netdev $nd '"
	ib=$(ibdev_of "$nd")
	[ -n "$ib" ] || continue
	before=$(dmesg | wc -l)
	python3 "$(dirname "$0")/uverbs_bad.py" "$ib" $strict | sed "s/^\(\(not \)\{0,1\}ok\) [0-9]* - /\1 - $ib: /" >/tmp/badinput.out
	# Renumber the script's points into this test's plan.
	while read -r line; do
		case "$line" in
		"ok - "*) tap_ok "${line#ok - }" ;;
		"not ok - "*) tap_not_ok "${line#not ok - }" ;;
		*) tap_diag "$line" ;;
		esac
	done </tmp/badinput.out
	new=$(dmesg | tail -n +$((before + 1)) | grep -iE "$DRV|erdma" | head -n 5)
	[ -z "$new" ] || tap_diag "new kernel log lines: $new"
	tap_check "$ib: bad requests leave no line in the kernel log" [ -z "$new" ]
	if has_test_page "$bdf"; then
		tap_check "$ib: the model holds no CQ, QP or MR afterwards" no_objects "$bdf"
	fi
	break
done

tap_check "rmmod $DRV" rmmod "$DRV"
trouble=$(kernel_trouble)
[ -z "$trouble" ] || tap_diag "$trouble"
tap_check "no oops, BUG or WARNING in the kernel log" [ -z "$trouble" ]
tap_finish
