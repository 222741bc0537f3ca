#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# The control plane: MSI-X vectors and their names, the command queue in
# polling and interrupt mode, and the driver's behaviour when the adapter
# misbehaves. Faults are injected through the model's test page (adapters
# started with test_page=on); without one those tests are skipped.
#
#   - one common vector and min(online CPUs, 31) CEQ vectors per function,
#     named erdma-common@pci:<bdf> and erdma-ceq<k>@pci:<bdf>;
#   - commands complete by interrupt once probe is done;
#   - a failed command at each probe step fails the probe cleanly, and the
#     next probe succeeds;
#   - a command that never completes disables the queue after 15 s; the
#     next probe succeeds;
#   - an asynchronous event the driver cannot dispatch is logged.
# Where the test may not change the machine (a real instance: see "What a
# test may change" in lib.sh), only the vectors and the interrupts of the
# functions the driver already drives are checked.

. "$(dirname "$0")/lib.sh"

DRV=$ERDMA_DRIVER
SYSDRV=/sys/bus/pci/drivers/$DRV

need_functions
ncpus=$(grep -c '^processor' /proc/cpuinfo)
nceqs=$((ncpus < 31 ? ncpus : 31))

# Interrupts of IRQ line named $1, summed over CPUs.
irq_count() {
	awk -v name="$1" '$NF == name { n = 0; for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+$/) n += $i; print n }' \
		/proc/interrupts
}

# The common vector and CEQ vectors 0..nceqs-1 of function $1, each once, and
# no other CEQ vector (one pass over /proc/interrupts: at 32 vCPUs under TCG
# every read of it costs seconds).
irq_names_ok() {
	awk -v bdf="$1" -v n="$nceqs" '
		$NF == "erdma-common@pci:" bdf { common++ }
		$NF ~ "^erdma-ceq[0-9]+@pci:" {
			name = $NF
			sub(/^erdma-ceq/, "", name)
			split(name, p, "@pci:")
			if (p[2] != bdf) next
			ceqs++
			if (p[1] + 0 >= n || seen[p[1] + 0]++) { print "# unexpected " $NF; bad = 1 }
		}
		END {
			if (common != 1) { print "# " common + 0 " erdma-common@pci:" bdf " vectors, expected 1"; bad = 1 }
			if (ceqs != n) { print "# " ceqs + 0 " CEQ vectors, expected " n; bad = 1 }
			exit bad
		}' /proc/interrupts
}

interrupt_driven() {
	n=$(irq_count "erdma-common@pci:$1")
	tap_diag "$1: common vector fired ${n:-0} times"
	[ "${n:-0}" -gt 0 ]
}

reports_ceqs() {
	dmesg | grep -q "$DRV $1: firmware [0-9]*\.[0-9]*, $nceqs CEQs on $((nceqs + 1)) vectors"
}


bind_ok() {
	echo "$1" >"$SYSDRV/bind" && is_bound "$1"
}

# probe_survives_fault BDF OP [RULE...]: with OP failing, probe fails cleanly;
# the next probe succeeds.
probe_survives_fault() {
	bdf=$1
	op=$2
	shift 2
	echo "$bdf" >"$SYSDRV/unbind" || return 1
	model_cmd "$bdf" "fail $op status=2 $*" >/dev/null || { tap_diag "model refused the fault"; return 1; }
	bind_fails "$bdf" "$DRV $bdf: command .* failed with status 0x2" || return 1
	bind_ok "$bdf" || { tap_diag "rebinding $bdf failed"; return 1; }
}

timeout_disables_queue() {
	bdf=$1
	echo "$bdf" >"$SYSDRV/unbind" || return 1
	# 45 s: the driver must give up well before the completion arrives, even when
	# TCG guests' timers run late.
	model_cmd "$bdf" "delay COMMON.QUERY_FW_INFO ms=45000" >/dev/null || return 1
	start=$(date +%s)
	bind_fails "$bdf" "$DRV $bdf: command timed out after 15 s: the command queue is disabled" || return 1
	took=$(($(date +%s) - start))
	tap_diag "$bdf: probe gave up after ${took} s"
	[ "$took" -ge 14 ] && [ "$took" -le 40 ] || return 1
	bind_ok "$bdf" || { tap_diag "rebinding $bdf failed"; return 1; }
}

# The model's live CEQs for function $1 are exactly EQNs $2 (a comma list).
model_eqs() {
	got=$(model_cmd "$1" "query eqs") || return 1
	got=${got#ok }
	[ "$got" = "eqs=$2" ] || { tap_diag "$1: the model has $got, expected eqs=$2"; return 1; }
}

aeq_event_logged() {
	bdf=$1
	model_cmd "$bdf" "aeq type=0 data0=7" >/dev/null || return 1
	i=0
	while [ $i -lt 50 ]; do
		dmesg | grep -q "$DRV $bdf: async event 0.0: error on QP 7, which does not exist" && return 0
		sleep 0.1
		i=$((i + 1))
	done
	tap_diag "$bdf: the async event was not logged within 5 s"
	return 1
}

tap_header
may_reconfigure && rmmod "$DRV" 2>/dev/null
load_driver
bound=""
for f in $functions; do
	is_bound "$f" && bound="$bound $f"
done
tap_check "some function bound" [ -n "$bound" ]
for f in $bound; do
	tap_check "$f: 1 common and $nceqs CEQ vectors, named by function" irq_names_ok "$f"
	tap_check "$f: commands complete by interrupt" interrupt_driven "$f"
	if [ "$DRV" = erdma_rs ] && ! may_reconfigure && ! reports_ceqs "$f" &&
		! dmesg | grep -q "$DRV $f: firmware "; then
		tap_skip "$f: probe reports $nceqs CEQs" "the kernel log no longer holds the probe's lines"
	elif [ "$DRV" = erdma_rs ]; then
		tap_check "$f: probe reports $nceqs CEQs" reports_ceqs "$f"
	else
		tap_skip "$f: probe reports $nceqs CEQs" "$DRV logs no such line"
	fi
done

# The fault tests match erdma_rs's log messages, and rebind the function.
target=""
for f in $bound; do
	if [ "$DRV" = erdma_rs ] && may_reconfigure && has_test_page "$f"; then
		target=$f
		break
	fi
done
# An adapter the harness started with the test page must have one: skipping
# would hide a broken harness.
wanted=$(expected_adapters | awk '$4 ~ /(^|,)test_page=on(,|$)/' | wc -l)
if [ "$DRV" = erdma_rs ] && may_reconfigure && [ "$wanted" -gt 0 ]; then
	tap_check "the model's test page is reachable" [ -n "$target" ]
fi
steps="COMMON.CREATE_EQ RDMA.QUERY_DEVICE COMMON.QUERY_FW_INFO COMMON.CONF_DEVICE"
all_eqns=$(seq -s, 1 "$nceqs")
if [ -n "$target" ]; then
	tap_check "$target: the adapter has CEQs $all_eqns" model_eqs "$target" "$all_eqns"
fi
# CTRLQ_FAULTS=0 leaves out the fault cases (for big, slow guests).
if [ -n "$target" ] && [ "${CTRLQ_FAULTS:-1}" = 0 ]; then
	tap_skip "fault cases" "CTRLQ_FAULTS=0"
elif [ -n "$target" ]; then
	for op in $steps; do
		tap_check "$target: failing $op fails the probe cleanly; the next probe works" \
			probe_survives_fault "$target" "$op"
	done
	tap_check "$target: failing the last CREATE_EQ unwinds the earlier CEQs" \
		probe_survives_fault "$target" COMMON.CREATE_EQ "skip=$((nceqs - 1))"
	tap_check "$target: an undispatchable async event is logged" aeq_event_logged "$target"
	tap_check "$target: a command that never completes disables the queue after 15 s" \
		timeout_disables_queue "$target"
else
	why="needs erdma_rs and the model's test page"
	may_reconfigure || why="injects faults and rebinds: $ERDMA_SAFE_WHY"
	for op in $steps; do
		tap_skip "failing $op" "$why"
	done
	tap_skip "failing the last CREATE_EQ" "$why"
	tap_skip "async event" "$why"
	tap_skip "command timeout" "$why"
fi

if may_reconfigure; then
	tap_check "rmmod $DRV" unload "$DRV"
else
	tap_skip "rmmod $DRV" "the driver stays loaded: $ERDMA_SAFE_WHY"
fi
if [ -n "$target" ]; then
	tap_check "$target: after rmmod the adapter has no CEQ left" model_eqs "$target" ""
fi
trouble=$(kernel_trouble)
[ -z "$trouble" ] || tap_diag "$trouble"
tap_check "no oops, BUG or WARNING in the kernel log" [ -z "$trouble" ]
tap_finish
