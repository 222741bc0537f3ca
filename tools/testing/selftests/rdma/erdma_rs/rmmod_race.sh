#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# rmmod while ib_mad polls its CQ, RACE_CYCLES times (default 8): the driver
# loads with every RoCEv2 adapter, and unloads while the MAD layer's CQ work
# runs. Every unload destroys QP1 (the GSI QP) with its posted receives, which
# the adapter flushes into the MAD CQ, so ib_core's CQ work polls that CQ while
# the QP goes; on adapters with the model's test page a background loop also
# makes the adapter post completion events for the MAD CQ throughout the
# unload, so the CQ work is queued again and again while the QP and the CQ are
# destroyed. Odd cycles unload as soon as modprobe returns, even ones once the
# RDMA devices are up. Each cycle must unload cleanly (no kernel report: the
# harness ends the guest on one), and afterwards the model holds no QP, CQ,
# MR or CEQ of the driver.
#
# The upstream C driver loses this race (an oops in erdma_poll_cq from
# ib_cq_poll_work, Documentation/infiniband/erdma-upstream-rmmod-race.rst):
# ERDMA_DRIVER=erdma RACE_CYCLES=40 run_tests.sh rmmod_race.sh reproduces it.

. "$(dirname "$0")/lib.sh"

DRV=$ERDMA_DRIVER
NET=56
CYCLES=${RACE_CYCLES:-8}
need_functions
need_reconfigure "loads and unloads the driver $CYCLES times"

# The RoCEv2 functions (as the harness made them; all, run by hand).
roce=""
for f in $functions; do
	[ -r "$ERDMA_ADAPTERS" ] && ! expected_adapters | grep -q "^$(mac_of "$f") roce " && continue
	roce="$roce $f"
done
[ -n "$roce" ] || ksft_skip_all "no RoCEv2 adapter (only RoCEv2 has the MAD layer's QP1)"
set -- $roce
nroce=$#

tap_header
nics_up $NET
rm -f /tmp/race.*

# fire PAGE...: until /tmp/race.stop exists, rings the test page doorbell of
# each PAGE, whose mailbox holds a "ceq" command; counts the rings.
fire() {
	_n=0
	while [ ! -e /tmp/race.stop ]; do
		for _p; do
			busybox devmem $((_p + 8)) 32 1 2>/dev/null
			_n=$((_n + 1))
		done
	done
	echo $_n >/tmp/race.fired
}

# ibdevs_up: the driver's RDMA devices of every RoCEv2 adapter are registered.
ibdevs_up() { [ "$(ls /sys/class/infiniband 2>/dev/null | grep -c '^erdma_')" -ge "$nroce" ]; }

# cycle N: one load and unload; fails on a failed step or a kernel report.
cycle() {
	modprobe "$DRV" || { tap_diag "modprobe failed"; return 1; }
	pages=""
	if [ $(($1 % 2)) -eq 0 ]; then
		wait_for 30 ibdevs_up || { tap_diag "RDMA devices not registered in 30 s"; return 1; }
		for f in $roce; do
			has_test_page "$f" || continue
			# The MAD layer's CQ is the only CQ right after the load.
			cqn=$(model_cmd "$f" "query cqs" | sed -n 's/.*cqs=\([0-9]*\).*/\1/p')
			eqn=$(model_cmd "$f" "query eqs" | sed -n 's/.*eqs=\([0-9]*\).*/\1/p')
			[ -n "$cqn" ] && [ -n "$eqn" ] || continue
			model_cmd "$f" "ceq eqn=$eqn cqn=$cqn" >/dev/null || continue
			pages="$pages $(($(bar0_addr "$f") + TEST_PAGE_OFFSET))"
		done
	fi
	rm -f /tmp/race.stop /tmp/race.fired
	[ -z "$pages" ] || fire $pages &
	t0=$(date +%s%N)
	rmmod "$DRV"
	rc=$?
	t1=$(date +%s%N)
	touch /tmp/race.stop
	wait
	tap_diag "cycle $1: rmmod took $(((t1 - t0) / 1000000)) ms${pages:+, $(cat /tmp/race.fired) CQ events requested meanwhile}"
	[ $rc -eq 0 ] || { tap_diag "rmmod failed"; return 1; }
	for f in $roce; do
		! is_bound "$f" || { tap_diag "$f still bound"; return 1; }
	done
	trouble=$(kernel_trouble)
	[ -z "$trouble" ] || { tap_diag "$trouble"; return 1; }
}

i=1
while [ $i -le "$CYCLES" ]; do
	if [ $((i % 2)) -eq 0 ]; then
		what="RDMA devices up, CQ events fired"
	else
		what="right after modprobe"
	fi
	tap_check "cycle $i: rmmod $DRV while ib_mad's CQ is polled ($what)" cycle $i
	i=$((i + 1))
done

# Nothing of the driver's is left in the adapters.
model_clean() {
	for f in $roce; do
		has_test_page "$f" || continue
		objs=$(model_cmd "$f" "query objects") || return 1
		eqs=$(model_cmd "$f" "query eqs") || return 1
		[ "${objs#ok }" = "objects=0/0/0/0" ] && [ "${eqs#ok }" = "eqs=" ] ||
			{ tap_diag "$f: the model holds $objs, $eqs"; return 1; }
	done
}
tap_check "the adapters hold no QP, CQ, MR or CEQ afterwards" model_clean
tap_finish
