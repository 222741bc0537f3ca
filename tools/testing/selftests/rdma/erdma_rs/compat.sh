#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# Compat mode (erdma_rs_hw 7.3, issue 31) between two iWARP adapters of this
# guest: erdma_rs loaded with compat_mode=1 shows each iWARP adapter to the
# RDMA core and to applications as a RoCEv2 device (a CA, transport
# InfiniBand, link layer Ethernet, the RoCEv2 GIDs of its netdev's addresses,
# one P_Key), and connects queue pairs the RoCE way: ibv_rc_pingpong with
# GIDs exchanged out of band, then ibv_modify_qp with an address vector and
# the peer's QPN, on a TCP 4-tuple both ends compute (no handshake). Between
# the two adapters (the larger address's QPN) and on one adapter (equal
# addresses: the smaller QPN), each receiver validating the bytes (-c).
# perftest without rdma_cm runs in perftest.sh, run after this test in the
# same scenario with the same module parameter.
# First, a base port that leaves no room for the 16 ports is refused.
# The 16 ports are held in every network namespace while compat mode is
# loaded, and free once the driver unloads or without compat mode.
# erdma_rs only (the upstream C driver has no compat mode); the adapters must
# be iWARP ones (CM_PROTO=iwarp), changed by loading the driver, so the test
# may reconfigure.

. "$(dirname "$0")/lib.sh"

DRV=$ERDMA_DRIVER
NET=53
need_functions
[ "$DRV" = erdma_rs ] || ksft_skip_all "compat mode is erdma_rs's (the upstream driver has none)"
need_reconfigure "loads the driver in compat mode"
command -v ibv_rc_pingpong >/dev/null || ksft_skip_all "ibv_rc_pingpong (ibverbs-utils) is missing"
tmp=/tmp/compat
rm -rf "$tmp"
mkdir -p "$tmp"

# looks_roce IBDEV: the device as compat mode shows it (erdma_rs_hw 7.3).
looks_roce() {
	read -r _t <"/sys/class/infiniband/$1/node_type"
	[ "$_t" = "1: CA" ] || { tap_diag "$1: node type $_t"; return 1; }
	ibv_devinfo -d "$1" >"$tmp/devinfo.$1" 2>&1
	grep -q 'transport:[[:space:]]*InfiniBand' "$tmp/devinfo.$1" &&
		grep -q 'link_layer:[[:space:]]*Ethernet' "$tmp/devinfo.$1" ||
		{ tap_diag "$1: $(tr -s ' \t' ' ' <"$tmp/devinfo.$1" | tr '\n' ';')"; return 1; }
	[ "$(ls "/sys/class/infiniband/$1/ports/1/gids" | wc -l)" = 16 ] ||
		{ tap_diag "$1: $(ls "/sys/class/infiniband/$1/ports/1/gids" | wc -l) GID entries, not 16"; return 1; }
	[ "$(cat "/sys/class/infiniband/$1/ports/1/pkeys/0")" = 0xffff ]
}

# port_free [unshare -n] PORT: a TCP socket of this user binds PORT (in a new
# network namespace with "unshare -n").
port_free() {
	_ns=""
	[ "$1" != unshare ] || { _ns="unshare -n"; shift 2; }
	$_ns python3 -c 'import socket, sys; socket.socket().bind(("0.0.0.0", int(sys.argv[1])))' "$1" 2>"$tmp/bind.err"
}

# ports_held: compat mode's 16 ports are taken, in this namespace and in a
# new one (the kernel sockets of every namespace), and the port after them is
# not.
ports_held() {
	for _p in 30608 30615 30623; do
		! port_free "$_p" || { tap_diag "port $_p is free"; return 1; }
		grep -q 'Address already in use' "$tmp/bind.err" || { tap_diag "port $_p: $(cat "$tmp/bind.err")"; return 1; }
	done
	if command -v unshare >/dev/null; then
		! port_free unshare -n 30608 || { tap_diag "port 30608 is free in a new namespace"; return 1; }
		grep -q 'Address already in use' "$tmp/bind.err" || { tap_diag "a new namespace: $(cat "$tmp/bind.err")"; return 1; }
	else
		tap_diag "no unshare: the new namespace is not tried"
	fi
	port_free 30624
}

# said_compat BDF: the driver's log says that adapter BDF is in compat mode,
# with its 16 ports from the default base.
said_compat() {
	dmesg | grep -q "$1: compat mode: a RoCEv2 device to applications, its connections on TCP ports 30608 to 30623"
}

# udp_held IP: the software GSI's socket holds IP:4791 (RoCEv2's port).
udp_held() {
	! python3 -c 'import socket, sys; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).bind((sys.argv[1], 4791))' "$1" 2>"$tmp/udp.err" &&
		grep -q 'Address already in use' "$tmp/udp.err"
}

# udp_free IP: nothing holds IP:4791.
udp_free() {
	python3 -c 'import socket, sys; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).bind((sys.argv[1], 4791))' "$1"
}

# quiet_since MARK: the driver logged nothing since MARK (hostile datagrams
# are counted, never logged).
quiet_since() {
	_lines=$(klog_since "$1" | grep -c 'erdma_rs')
	[ "$_lines" -eq 0 ] || { tap_diag "$(klog_since "$1" | grep erdma_rs | head -n 3)"; return 1; }
}

# refused_base: a base that leaves no room for the 16 ports is refused, with
# the reason.
refused_base() {
	! modprobe erdma_rs reserve_ports_base=65530 2>"$tmp/modprobe" &&
		dmesg | tail -n 20 | grep -q 'reserve_ports_base=65530: compat mode needs 16 TCP ports from it'
}

tap_header
nics_up $NET
tap_check "modprobe erdma_rs reserve_ports_base=65530 is refused, saying why" refused_base
case " ${ERDMA_MODPROBE_ARGS:-} " in
*" compat_mode=1 "*) ;;
*) ERDMA_MODPROBE_ARGS="compat_mode=1${ERDMA_MODPROBE_ARGS:+ $ERDMA_MODPROBE_ARGS}" ;;
esac
load_driver
# The parameters in sysfs, read-only: the mode chosen, the default base; a
# write is refused and changes nothing.
param_is() { [ "$(cat "/sys/module/erdma_rs/parameters/$1" 2>/dev/null)" = "$2" ]; }
param_read_only() { ! (echo N >"/sys/module/erdma_rs/parameters/$1") 2>/dev/null && param_is "$1" "$2"; }
tap_check "sysfs: compat_mode is Y, reserve_ports_base 30608, and neither can be written" \
	eval 'param_read_only compat_mode Y && param_is reserve_ports_base 30608 && param_read_only reserve_ports_base 30608'
# Compat mode changes only iWARP adapters: those whose log says so.
compat_bdfs=""
for _bdf in $(erdma_functions); do
	wait_for 10 is_bound "$_bdf" && said_compat "$_bdf" && compat_bdfs="$compat_bdfs $_bdf"
done
tap_diag "in compat mode:$compat_bdfs"
if [ "$(echo $compat_bdfs | wc -w)" -ge 2 ] && adapter_pair roce; then
	tap_check "$IB_A: compat mode shows a CA, transport InfiniBand, link layer Ethernet, 16 GIDs, P_Key 0xffff" looks_roce "$IB_A"
	tap_check "$IB_B: the same" looks_roce "$IB_B"
	tap_check "rc_pingpong $IB_A -> $IB_B, 4096 bytes x 100" \
		pingpong base "$IB_A" "$GID_A" "$IB_B" "$GID_B" "$IP_A" -s 4096 -n 100 -c
	tap_check "rc_pingpong $IB_B -> $IB_A, 1 byte x 100 (inline), completion events (-e)" \
		pingpong small "$IB_B" "$GID_B" "$IB_A" "$GID_A" "$IP_B" -s 1 -n 100 -e -c
	tap_check "rc_pingpong $IB_A -> $IB_B, 64 KiB x 20" \
		pingpong large "$IB_A" "$GID_A" "$IB_B" "$GID_B" "$IP_A" -s 65536 -n 20 -c
	tap_check "rc_pingpong $IB_A -> $IB_A (one adapter: the smaller QPN's tuple), 4096 bytes x 50" \
		pingpong loop "$IB_A" "$GID_A" "$IB_A" "$GID_A" "$IP_A" -s 4096 -n 50 -c
	# The software GSI QP (ib_cm's and rdma_cm's MADs as RoCEv2 datagrams on
	# UDP 4791): its socket, and hostile datagrams refused and counted under
	# their reasons, never logged (sgsi_bad.py); rdma_cm over it runs in
	# cm.sh, nvmeof.sh and perftest.sh of this scenario.
	tap_check "$IB_A: the software GSI holds UDP $IP_A:4791" udp_held "$IP_A"
	klog_mark sgsi_mark
	py_points "$IB_A: " sgsi_bad.py "$IB_A" "$IP_A" "$IP_B"
	tap_check "the hostile datagrams left no line in the kernel log" quiet_since "$sgsi_mark"
	# One end breaking the convention (naming a QPN its peer does not have):
	# no connection forms, the SEND fails within a bound, the peer gets
	# nothing, and a right pair works after it (compat_mismatch.py).
	py_points "" compat_mismatch.py "$IB_A" "$GID_A" "$IB_B" "$GID_B"
	udp_ip=$IP_A
else
	tap_skip "compat mode's device and connections" "fewer than two iWARP adapters in compat mode"
fi
tap_check "compat mode holds TCP ports 30608 to 30623 in every network namespace" ports_held
# Unloaded, the ports are free; loaded without compat mode, they stay free.
tap_check "rmmod erdma_rs" unload erdma_rs
tap_check "the ports are free after rmmod" port_free 30608
ERDMA_MODPROBE_ARGS=""
load_driver
tap_check "without compat mode sysfs shows compat_mode N" param_is compat_mode N
tap_check "without compat mode the ports are free" port_free 30608
[ -z "${udp_ip:-}" ] || tap_check "without compat mode nothing holds UDP $udp_ip:4791" udp_free "$udp_ip"
unload_and_finish "$DRV"
