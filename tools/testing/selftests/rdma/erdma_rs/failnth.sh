#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# Allocation failures everywhere in the driver's probe, its user verbs, a
# kernel consumer's objects and rdma_cm's connection set-up,
# one at a time (failnth.py: the kernel's fail-nth, Documentation/
# fault-injection): failslab and fail_page_alloc fail sleeping allocations
# too, and only where the driver's module is among the callers (the stack
# filter; genirq's /proc/irq registration is left out: it tolerates a
# failure and then WARNs at its removal, a core kernel matter written up in
# Documentation/infiniband/erdma_rs_selftests.rst). Each failure must reach
# the caller as an error and leave nothing behind: after the sweeps the
# model holds the objects it held before, the adapters work, and the kernel
# has no report (the harness ends the guest on one; kmemleak runs after the
# test in the scenario's guest).
# Needs a kernel with CONFIG_FAULT_INJECTION_STACKTRACE_FILTER (the debug
# kernel of make check); skips elsewhere, and on adapters it may not
# reconfigure.

. "$(dirname "$0")/lib.sh"

need_functions
DRV=$ERDMA_DRIVER
may_reconfigure || ksft_skip_all "the sweeps rebind the adapters: $ERDMA_SAFE_WHY"
mount_once debugfs /sys/kernel/debug || ksft_skip_all "debugfs cannot be mounted"
fi=/sys/kernel/debug
[ -d $fi/failslab ] && [ -d $fi/fail_page_alloc ] ||
	ksft_skip_all "this kernel has no failslab and fail_page_alloc (CONFIG_FAILSLAB, CONFIG_FAIL_PAGE_ALLOC, CONFIG_FAULT_INJECTION_DEBUG_FS)"
[ -e $fi/failslab/require-start ] ||
	ksft_skip_all "this kernel has no stack filter for fault injection (CONFIG_FAULT_INJECTION_STACKTRACE_FILTER)"
command -v python3 >/dev/null && python3 -c 'import pyverbs' 2>/dev/null ||
	ksft_skip_all "pyverbs (python3-pyverbs) is missing"

# Addresses on the NICs for RoCEv2 GIDs (this unloads the eRDMA drivers).
nics_up 70
load_driver

# Addresses are compared as the 16-digit hex strings of /proc/kallsyms (the
# shell's arithmetic is signed 64-bit). sorted_text: every code symbol,
# "ADDRESS NAME MODULE", in address order.
sorted_text() {
	awk '$2 == "t" || $2 == "T" || $2 == "w" || $2 == "W" { print $1, $3, $4 }' /proc/kallsyms | sort
}
# code_of MODULE: where MODULE's code starts and where the next code after
# its last function starts (or, with nothing after it, 64 KiB past its start:
# longer than any of its functions).
code_of() {
	sorted_text | awk -v m="[$1]" '
		$3 == m { if (start == "") start = $1; lastfn = $1; inside = 1; next }
		inside { end = $1; inside = 0 }
		END { if (start != "") print start, (end != "" ? end : "+" lastfn) }'
}
# plus_64k ADDRESS: ADDRESS (16 hex digits) + 64 KiB, in the low 32 bits (the
# shell's arithmetic is signed 64-bit; module code lies below 0xffffffffff000000).
plus_64k() {
	_p_hi=${1%????????} _p_lo=${1#????????}
	printf '%s%08x\n' "$_p_hi" $((0x$_p_lo + 0x10000))
}

# functions_around FIRST LAST: from where function FIRST starts to where the
# code after function LAST starts (LAST after FIRST).
functions_around() {
	sorted_text | awk -v a="$1" -v b="$2" '
		$2 == a { start = $1 }
		stop { end = $1; exit }
		$2 == b { stop = 1 }
		END { if (start && end && start < end) print start, end }'
}

set -- $(code_of "$DRV")
if [ $# -ne 2 ]; then
	tap_not_ok "the code of $DRV in /proc/kallsyms"
	tap_finish
fi
code_start=0x$1
case $2 in
+*) code_end=0x$(plus_64k "${2#+}") ;;
*) code_end=0x$2 ;;
esac
# genirq's /proc/irq entries (kernel/irq/proc.c keeps them together).
set -- $(functions_around register_irq_proc register_handler_proc)
[ $# -eq 2 ] || set -- $(functions_around register_handler_proc register_irq_proc)
reject_start=0 reject_end=0
[ $# -ne 2 ] || { reject_start=0x$1 reject_end=0x$2; }
tap_diag "injecting under $DRV's code $code_start..$code_end, not under $reject_start..$reject_end"

knobs_set() {
	for _a in failslab fail_page_alloc; do
		echo N >$fi/$_a/ignore-gfp-wait
		echo 0 >$fi/$_a/probability
		echo N >$fi/$_a/task-filter
		echo 0 >$fi/$_a/verbose
		echo 64 >$fi/$_a/stacktrace-depth
		echo "$code_start" >$fi/$_a/require-start
		echo "$code_end" >$fi/$_a/require-end
		echo "$reject_start" >$fi/$_a/reject-start
		echo "$reject_end" >$fi/$_a/reject-end
	done
	echo N >$fi/fail_page_alloc/ignore-gfp-highmem
}
knobs_reset() {
	for _a in failslab fail_page_alloc; do
		echo Y >$fi/$_a/ignore-gfp-wait
		echo 0 >$fi/$_a/require-start
		echo 0xffffffffffffffff >$fi/$_a/require-end
		echo 0 >$fi/$_a/reject-start
		echo 0 >$fi/$_a/reject-end
	done
}
knobs_set
undo_push knobs_reset

# Which adapters' probes are swept: FAILNTH_PROBE=roce, iwarp or all. A probe
# has the RDMA core's registration in it: about 1,500 points on iWARP and
# more on RoCEv2 (GID table, MAD layer), sampled after the first 120.
probe_protos=${FAILNTH_PROBE:-all}
# Which sweeps run on each adapter (all by default): verbs, kernel, cm.
sweeps=" ${FAILNTH_SWEEPS:-verbs kernel cm} "
have_kverbs=0
! modinfo erdma_kverbs_test >/dev/null 2>&1 || have_kverbs=1
before=$(model_objects)
for bdf in $functions; do
	wait_for 10 is_bound "$bdf" || { tap_not_ok "$bdf: bound to $DRV"; continue; }
	ib=$(ib_of "$bdf")
	[ -n "$ib" ] || { tap_not_ok "$bdf: an RDMA device"; continue; }
	read -r type <"/sys/class/infiniband/$ib/node_type"
	proto=roce
	[ "$type" != "4: RNIC" ] || proto=iwarp
	case " $probe_protos " in
	*" all "* | *" $proto "*)
		py_points "" failnth.py probe "$DRV" "$bdf"
		wait_for 10 is_bound "$bdf" || { tap_not_ok "$bdf: bound to $DRV after the sweep"; continue; }
		ib=$(ib_of "$bdf")
		[ -n "$ib" ] || { tap_not_ok "$bdf: an RDMA device after the sweep"; continue; }
		;;
	*) tap_skip "probe of $bdf by $DRV" "FAILNTH_PROBE=$probe_protos" ;;
	esac
	ip=$(ipv4_of "$(netdev_of "$(mac_of "$bdf")")")
	# (A QP's sweep covers its CQ's creation, and qp_rts the QP's.)
	kernel_objects="dma_mr frmr qp"
	gid=
	if [ $proto = roce ]; then
		if wait_for 10 find_gid "$ib" "$ip"; then
			gid=$GID
			kernel_objects="dma_mr frmr qp_rts ah"
		else
			tap_not_ok "$ib: no RoCEv2 GID"
		fi
	fi
	case $sweeps in *" verbs "*) py_points "" failnth.py verbs "$ib" $proto $gid ;; esac
	# A kernel consumer's objects (address handles and DMA and fast-registration
	# regions are the kernel's only), and rdma_cm's set-up of a connection.
	case $sweeps in
	*" kernel "*)
		if [ $have_kverbs = 1 ] && modprobe erdma_kverbs_test sweep_device="$ib"; then
			py_points "" failnth.py kernel erdma_kverbs_test "$ib" $kernel_objects
			rmmod erdma_kverbs_test || tap_not_ok "rmmod erdma_kverbs_test"
		elif [ $have_kverbs = 1 ]; then
			tap_not_ok "$ib: modprobe erdma_kverbs_test sweep_device=$ib"
		else
			tap_skip "$ib: a kernel consumer's objects" "the erdma_kverbs_test module is not installed"
		fi
		;;
	esac
	case $sweeps in *" cm "*) py_points "" failnth.py cm "$ip" $proto ;; esac
done
knobs_reset
tap_check "the model holds the objects it held before the sweeps" model_no_more "$before"
unload_and_finish "$DRV" $functions
