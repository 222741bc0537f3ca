#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# An adapter that lies (the model's hostile mode, through its test page;
# tools/erdma-emu/README.md, "A hostile adapter"). For each adapter with the
# test page:
#   - capabilities at their extremes: every field at its bit-width maximum
#     (probe clamps each one, reports it, and the adapter works) and every
#     field 0 (no queue pairs: the probe fails cleanly, the function unbound);
#   - ALLOC_DB answering the register page, pages beyond BAR0 and the
#     kernel's shared doorbell page: opening a user context fails with EIO
#     and a report, and works again once the adapter answers right;
#   - a command completion for a command not in flight, event storms for
#     objects that do not exist, and on RoCEv2 completions in the GSI QP's
#     CQ for work it never posted: reported (rate-limited), dropped, and the
#     adapter works on;
#   - asynchronous events for queue pairs and CQs being destroyed.
# Every step ends without a kernel report (the harness ends the guest on
# one) and with the adapter's error counter (adapter_errors_cnt) counting
# what was reported. Runs against our driver (the C driver's reactions are
# its own: see Documentation/infiniband/erdma_rs_hw.rst, "A hostile adapter").

. "$(dirname "$0")/lib.sh"

need_functions
DRV=$ERDMA_DRIVER
may_reconfigure || ksft_skip_all "the test rebinds the adapters: $ERDMA_SAFE_WHY"
is_emulated || ksft_skip_all "the adapters are not the model's"
command -v python3 >/dev/null && python3 -c 'import pyverbs' 2>/dev/null ||
	ksft_skip_all "pyverbs (python3-pyverbs) is missing"
nics_up 70
load_driver

# context_fails IBDEV: opening a user context on IBDEV fails with EIO.
context_fails() {
	python3 - "$1" <<'EOF'
import sys
from pyverbs.device import Context
try:
    Context(name=sys.argv[1]).close()
except Exception as ex:
    sys.exit(0 if "Input/output error" in str(ex) or getattr(ex, "error_code", 0) == 5 else f"{ex}")
sys.exit("the context opened")
EOF
}

errors() { cat "/sys/class/infiniband/$1/ports/1/hw_counters/adapter_errors_cnt"; }
# more_errors IBDEV BEFORE: the error counter went up.
more_errors() { [ "$(errors "$1")" -gt "$2" ] || { tap_diag "adapter_errors_cnt stayed at $2"; return 1; }; }
# logged MARK PATTERN: the kernel log gained a line matching PATTERN.
logged() { klog_since "$1" | grep -q -- "$2" || { tap_diag "no '$2' in the kernel log"; return 1; }; }
# counted_and_works IBDEV BEFORE: more_errors, and the device works (smoke).
counted_and_works() { more_errors "$1" "$2" && verbs_smoke "$1"; }
rebind() {
	! is_bound "$1" || echo "$1" >"/sys/bus/pci/drivers/$DRV/unbind"
	echo "$1" >"/sys/bus/pci/drivers/$DRV/bind"
}

for bdf in $functions; do
	has_test_page "$bdf" || { tap_skip "$bdf: a hostile adapter" "no test page"; continue; }
	wait_for 10 is_bound "$bdf" || { tap_not_ok "$bdf: bound to $DRV"; continue; }

	# Capabilities at their bit-width maxima: clamped, reported, working.
	klog_mark mark
	model_cmd "$bdf" "hostile caps max" >/dev/null
	tap_check "$bdf: probe with every capability at its maximum" rebind "$bdf"
	ib=$(ib_of "$bdf")
	tap_check "$bdf: each capability out of range is reported" logged "$mark" "out of range: using"
	tap_check "$ib: works with the clamped capabilities" verbs_smoke "$ib"
	max_cqe=$(ibv_devinfo -v -d "$ib" | awk '$1 == "max_cqe:" { print $2 }')
	tap_check "$ib: max_cqe is the clamped 2^22 (got $max_cqe)" [ "$max_cqe" = 4194304 ]
	# Every field 0: no queue pairs, no adapter.
	echo "$bdf" >"/sys/bus/pci/drivers/$DRV/unbind"
	model_cmd "$bdf" "hostile caps zero" >/dev/null
	tap_check "$bdf: probe fails cleanly without queue pairs" bind_fails "$bdf" "reported no queue pairs" "No such device"
	model_cmd "$bdf" "hostile caps off" >/dev/null
	echo "$bdf" >"/sys/bus/pci/drivers/$DRV/bind"
	ib=$(ib_of "$bdf")
	tap_check "$bdf: bound again with its true capabilities" [ -n "$ib" ]
	[ -n "$ib" ] || continue

	# ALLOC_DB answering pages no user may map.
	for mode in zero beyond kernel; do
		klog_mark mark
		before=$(errors "$ib")
		model_cmd "$bdf" "hostile alloc_db $mode" >/dev/null
		tap_check "$ib: ALLOC_DB $mode: no user context (EIO)" context_fails "$ib"
		tap_check "$ib: ALLOC_DB $mode: reported" logged "$mark" "which no user may map"
		tap_check "$ib: ALLOC_DB $mode: counted" more_errors "$ib" "$before"
	done
	model_cmd "$bdf" "hostile alloc_db off" >/dev/null
	tap_check "$ib: works once ALLOC_DB answers right" verbs_smoke "$ib"

	# A completion for a command not in flight.
	klog_mark mark
	before=$(errors "$ib")
	model_cmd "$bdf" "cmd-cqe index=0x7ff0" >/dev/null
	tap_check "$ib: a command completion for no command is reported" wait_for 5 logged "$mark" "which is not in flight"
	tap_check "$ib: ... counted, and commands work on" counted_and_works "$ib" "$before"

	# Completions in the GSI QP's CQ for work it never posted (RoCEv2: the
	# RDMA core's MAD layer has a kernel QP 1 and its CQ at all times).
	# Before the storms: those spend the reports' rate limit (a burst of 10
	# in 5 s), and a report made within its window is counted, not logged.
	read -r type <"/sys/class/infiniband/$ib/node_type"
	if [ "$type" != "4: RNIC" ]; then
		cqs=$(model_cmd "$bdf" "query cqs")
		cq=${cqs#ok cqs=}
		cq=${cq%%,*}
		klog_mark mark
		before=$(errors "$ib")
		model_cmd "$bdf" "cqe cqn=$cq qpn=1 queue=rq index=0x7777 count=4" >/dev/null
		model_cmd "$bdf" "cqe cqn=$cq qpn=1 queue=sq index=0x7777 byte_len=0x100000" >/dev/null
		tap_check "$ib: completions for no posted work are reported" wait_for 5 logged "$mark" "for no posted work"
		tap_check "$ib: ... and counted" more_errors "$ib" "$before"
	fi

	# Event storms for objects that do not exist: rate-limited, harmless.
	klog_mark mark
	model_cmd "$bdf" "aeq type=0 data0=0xffff0 count=2000" >/dev/null
	model_cmd "$bdf" "ceq eqn=1 cqn=0xffff0 count=2000" >/dev/null
	sleep 2
	lines=$(klog_since "$mark" | grep -c "$bdf")
	tap_check "$ib: 4000 events for nothing log at most 30 lines (logged $lines)" [ "$lines" -le 30 ]
	tap_check "$ib: works after the storms" verbs_smoke "$ib"

	# Events for objects being destroyed.
	model_cmd "$bdf" "hostile aeq-on-destroy on" >/dev/null
	tap_check "$ib: queue pairs and CQs destroyed under their own events" verbs_smoke "$ib"
	model_cmd "$bdf" "hostile off" >/dev/null
done
unload_and_finish "$DRV" $functions
