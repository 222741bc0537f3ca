#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# Bad requests through the raw uverbs interface (uverbs_bad.py): malformed
# driver data, out-of-range sizes, overflowing or unmapped ranges, and bad
# address handle commands (CREATE_AH, DESTROY_AH). Each fails
# with the expected errno, a well-formed request still works, the kernel log
# gains no driver line per call and no splat, and the model holds no more
# objects afterwards than before (nothing leaked). MRs of 4 KiB pages are
# described to the adapter in MTT levels 0 to 3 (as the model sees them; the
# 1 GiB one needs a guest with 2 GiB). With erdma_rs the checks the upstream
# driver does not make run too (--strict), and the adapter refuses a
# DESTROY_QP, a DEREG_MR and a DESTROY_CQ: each is reported once and counted,
# the user's call succeeds, and the memory is kept (rmmod frees it after the
# reset; KASAN and kmemleak watch). The refused commands are injected faults:
# only where the test may change the machine (see "What a test may change"
# in lib.sh); elsewhere it uses the driver bound and the adapter's own address.

. "$(dirname "$0")/lib.sh"

DRV=$ERDMA_DRIVER
NET=52
need_functions
command -v python3 >/dev/null || ksft_skip_all "python3 is missing"

# same_objects BDF BEFORE: the model holds the QPs, CQs and MRs it held before
# (the kernel's own, such as the MAD layer's QP1 and its CQ).
same_objects() {
	got=$(model_cmd "$1" "query objects") || return 1
	[ "$got" = "$2" ] || { tap_diag "the model holds: $got, before: $2"; return 1; }
}

# mr_layouts BDF IBDEV: MRs of 4 KiB pages, as many as each MTT level holds
# (4 inline; a page of 512 entries; 512 pages of them; beyond), are described
# to the adapter in the levels the adapter walks (erdma_rs_hw 6), as the model
# sees them. The regions stay registered while the model is asked.
mr_layouts() {
	rm -f /tmp/mr.go
	mkfifo /tmp/mr.go
	python3 "$(dirname "$0")/uverbs_bad.py" "$2" --mr-layouts 16384 65536 4194304 1073745920 \
		</tmp/mr.go >/tmp/mr.out 2>&1 &
	pid=$!
	exec 3>/tmp/mr.go
	wait_for 120 grep -q '^ready' /tmp/mr.out || tap_diag "registration: $(tr '\n' ';' </tmp/mr.out)"
	layout=$(model_cmd "$1" "query mrs")
	echo >&3
	exec 3>&-
	wait $pid
	for want in "4 L0" "16 L1" "1024 L2" "262145 L3"; do
		pages=${want% *} level=${want#* }
		stag=$(awk -v p="$pages" '$1 == "mr" && $3 == p { print $2 }' /tmp/mr.out)
		tap_check "$2: an MR of $pages pages of 4 KiB is described in level ${level#L}" \
			sh -c "echo '$layout' | grep -q '${stag:-none}:$level:$pages'" ||
			tap_diag "registered: $(tr '\n' ';' </tmp/mr.out) model: $layout"
	done
}

# run_tap ARGS...: uverbs_bad.py ARGS, its TAP points renumbered into this
# test's plan and named after the device (IBDEV, the first argument).
run_tap() { py_tap uverbs_bad.py "$@"; }

# py_tap SCRIPT IBDEV ARGS...: the same for another TAP-printing script.
py_tap() { py_points "$2: " "$@"; }

# teardown_failures BDF IBDEV: the adapter refuses DESTROY_QP, DEREG_MR and
# DESTROY_CQ once each.
teardown_failures() {
	klog_mark _mark
	_objects=$(model_cmd "$1" "query objects")
	_counter=/sys/class/infiniband/$2/ports/1/hw_counters/adapter_errors_cnt
	_errors=$(cat "$_counter")
	for _op in DESTROY_QP DEREG_MR DESTROY_CQ; do
		model_cmd "$1" "fail RDMA.$_op status=2 count=1" >/dev/null
	done
	run_tap "$2" --teardown
	_new=$(klog_since "$_mark" | grep -c "erdma_rs.*\(DESTROY_QP\|DEREG_MR\|DESTROY_CQ\) .* failed")
	tap_check "$2: each refused teardown command is reported once ($_new lines)" [ "$_new" -eq 3 ]
	_now=$(cat "$_counter")
	tap_check "$2: and counted once each in adapter_errors_cnt ($_errors, then $_now)" \
		[ "$_now" -eq $((_errors + 3)) ]
	# "ok objects=QPS/CQS/MRS/AHS": one more QP, CQ and MR.
	_want=$(echo "${_objects#*objects=}" | awk -F/ '{ printf "ok objects=%d/%d/%d/%d", $1 + 1, $2 + 1, $3 + 1, $4 }')
	tap_check "$2: the adapter still holds the QP, the CQ and the MR" same_objects "$1" "$_want"
	model_cmd "$1" clear >/dev/null
}

tap_header
nics_up $NET
load_driver
strict=""
[ "$DRV" = erdma_rs ] && strict=--strict

for bdf in $functions; do
	wait_for 10 is_bound "$bdf" || continue
	nd=$(netdev_of "$(mac_of "$bdf")") || continue
	wait_for 10 sh -c "rdma link show | grep -q ' netdev $nd '"
	ib=$(ibdev_of "$nd")
	[ -n "$ib" ] || continue
	klog_mark mark
	objects=$(has_test_page "$bdf" && model_cmd "$bdf" "query objects")
	run_tap "$ib" $strict
	# Address handles: both drivers make them for the kernel only (no
	# create_user_ah; the stock provider has no create_ah), so the core
	# leaves AHs out of the device's uverbs API: CREATE_AH and DESTROY_AH
	# fail with EOPNOTSUPP whatever they carry, and nothing reaches the driver.
	read -r type <"/sys/class/infiniband/$ib/node_type"
	if [ "$type" = "4: RNIC" ]; then
		tap_skip "$ib: address handle commands" "an iWARP device has no address handles"
	elif wait_for 10 find_gid "$ib" "$(ipv4_of "$nd")"; then
		run_tap "$ib" --ah "$GID"
		# The adapter's local DMA lkey is the kernel's: a user's QP that names
		# it (as a local or a remote key) is refused (keys_probe.py). Its
		# value is known where the adapter is emulated (the model's option,
		# 0xf0000000 by default).
		if is_emulated; then
			py_tap keys_probe.py "$ib" "$GID" \
				"$(adapter_opt "$(mac_of "$bdf")" local_dma_lkey 0xf0000000)"
		fi
	else
		tap_not_ok "$ib: no RoCEv2 GID for $(ipv4_of "$nd"): no AH checks"
	fi
	new=$(klog_since "$mark" | grep -iE "$DRV|erdma" | head -n 5)
	[ -z "$new" ] || tap_diag "new kernel log lines: $new"
	tap_check "$ib: bad requests leave no line in the kernel log" [ -z "$new" ]
	if has_test_page "$bdf"; then
		tap_check "$ib: the model holds no CQ, QP or MR more than before" \
			same_objects "$bdf" "$objects"
		mr_layouts "$bdf" "$ib"
		[ "$DRV" != erdma_rs ] || ! may_reconfigure || teardown_failures "$bdf" "$ib"
	fi
	break
done

unload_and_finish "$DRV"
