#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# Handing the adapters over between the upstream C driver erdma and ours, on
# a running system (Documentation/infiniband/erdma_rs_ecs.rst, "Switching
# drivers"): with erdma holding every adapter, loading erdma_rs fails with one
# line naming the holder and how to hand an adapter over; after an unbind it
# loads and drives the freed adapter (and says which it leaves); a second
# adapter moves over by unbind and bind, and one moves back to erdma. After
# each move an application started afresh (ibv_rc_pingpong between the two
# adapters, whichever drivers hold them) works. Needs two RoCEv2 adapters;
# runs on one CPU (the C driver's unbind races on two:
# Documentation/infiniband/erdma-upstream-rmmod-race.rst). It moves adapters
# between drivers: only where the test may change the machine (see "What a
# test may change" in lib.sh).

. "$(dirname "$0")/lib.sh"

need_functions
need_reconfigure "moves the adapters between the eRDMA drivers"
set -- $functions
[ $# -ge 2 ] || ksft_skip_all "fewer than two eRDMA functions (1ded:107f) present"
A=$1 B=$2
command -v ibv_rc_pingpong >/dev/null || ksft_skip_all "ibv_rc_pingpong (ibverbs-utils) is missing"
[ "$(grep -c '^processor' /proc/cpuinfo)" = 1 ] ||
	ksft_skip_all "more than one CPU: the C driver's unbind races there (erdma-upstream-rmmod-race.rst)"
tmp=/tmp/handover
rm -rf "$tmp"
mkdir -p "$tmp"

# holder BDF: the driver bound to BDF, or "none".
holder() {
	_l=$(readlink "/sys/bus/pci/devices/$1/driver") && echo "${_l##*/}" || echo none
}
held_by() { [ "$(holder "$1")" = "$2" ]; }
both_held_by() { held_by "$A" "$1" && held_by "$B" "$1"; }
holders() { echo "$A: $(holder "$A"), $B: $(holder "$B")"; }
# The kernel log since the mark.
log_since_mark() { dmesg | sed -n "/erdma-handover-mark-$1\$/,\$p"; }
mark() { echo "erdma-handover-mark-$1" >/dev/kmsg; }

# endpoint BDF: IB, GID and IP of BDF's RDMA device (RoCEv2), into EP_IB,
# EP_GID and EP_IP.
endpoint() {
	_nd=$(netdev_of "$(mac_of "$1")") || { tap_diag "$1: no netdev"; return 1; }
	wait_for 20 sh -c "rdma link show | grep -q ' netdev $_nd .*state ACTIVE\|state ACTIVE.* netdev $_nd'" ||
		{ tap_diag "$1: no ACTIVE RDMA link on $_nd: $(rdma link show | tr '\n' ';')"; return 1; }
	EP_IB=$(ibdev_of "$_nd") EP_IP=$(ipv4_of "$_nd")
	wait_for 10 find_gid "$EP_IB" "$EP_IP" || { tap_diag "$EP_IB: no RoCEv2 GID for $EP_IP"; return 1; }
	EP_GID=$GID
}

# pingpong: a fresh ibv_rc_pingpong from A's device to B's, whoever drives them.
pingpong() {
	endpoint "$A" || return 1
	sib=$EP_IB sgid=$EP_GID sip=$EP_IP
	endpoint "$B" || return 1
	tap_diag "$(holders): $sib ($sip) <-> $EP_IB ($EP_IP)"
	next_port
	run_pair "pp$PORT" "$PORT" 'bytes in' \
		ibv_rc_pingpong -d "$sib" -g "$sgid" -p "$PORT" -s 4096 -n 50 -c -- \
		ibv_rc_pingpong -d "$EP_IB" -g "$EP_GID" -p "$PORT" -s 4096 -n 50 -c "$sip"
}

tap_header
nics_up 53
# Both drivers start unloaded (erdma may be loaded by an earlier test).
rmmod erdma_rs 2>/dev/null
unload erdma 2>/dev/null
tap_check "modprobe erdma" modprobe erdma
tap_check "the C driver holds both adapters ($A, $B)" wait_for 10 both_held_by erdma
mark refused
tap_check "modprobe erdma_rs fails while erdma holds every adapter" sh -c '! modprobe erdma_rs'
want="erdma_rs: every eRDMA adapter is held by another driver: $A (erdma), $B (erdma); hand one over with 'echo ADDRESS > /sys/bus/pci/drivers/erdma/unbind' and load erdma_rs again"
log_since_mark refused >"$tmp/refused.log"
tap_diag "kernel log: $(grep erdma_rs "$tmp/refused.log" | tr '\n' ';')"
tap_check "the kernel log says, in one line, who holds which adapter and how to hand one over" \
	sh -c '[ "$(grep -c erdma_rs "$1")" = 1 ] && grep -qF "$2" "$1"' - "$tmp/refused.log" "$want"
tap_check "no erdma_rs module is left loaded" sh -c '! grep -q "^erdma_rs " /proc/modules'

mark first
echo "$A" >/sys/bus/pci/drivers/erdma/unbind
tap_check "after erdma lets $A go, modprobe erdma_rs loads" modprobe erdma_rs
tap_check "erdma_rs binds $A" held_by "$A" erdma_rs
log_since_mark first >"$tmp/first.log"
tap_check "it says which adapter it leaves to erdma" \
	grep -qF "leaving the eRDMA adapters another driver holds: $B (erdma)" "$tmp/first.log"
tap_check "rc_pingpong: erdma_rs on $A, erdma on $B" pingpong

echo "$B" >/sys/bus/pci/drivers/erdma/unbind
echo "$B" >/sys/bus/pci/drivers/erdma_rs/bind
tap_check "unbind from erdma, bind to erdma_rs: erdma_rs holds $B too" held_by "$B" erdma_rs
tap_check "rc_pingpong: erdma_rs on both" pingpong

echo "$A" >/sys/bus/pci/drivers/erdma_rs/unbind
echo "$A" >/sys/bus/pci/drivers/erdma/bind
tap_check "and back: unbind from erdma_rs, bind to erdma: erdma holds $A again" held_by "$A" erdma
tap_check "rc_pingpong: erdma on $A, erdma_rs on $B" pingpong

tap_check "rmmod erdma_rs" rmmod erdma_rs
tap_check "unload erdma" unload erdma
_trouble=$(kernel_trouble)
[ -z "$_trouble" ] || tap_diag "$_trouble"
tap_check "no oops, BUG or WARNING in the kernel log" [ -z "$_trouble" ]
tap_finish
