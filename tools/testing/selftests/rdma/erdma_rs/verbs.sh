#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# The RDMA device at work, checked against the model (test_page=on adapters):
#   - user contexts: each open context holds its own doorbell pages (ALLOC_DB),
#     released when it closes; an injected ALLOC_DB failure fails the open
#     cleanly and leaks nothing;
#   - MTU changes of the netdev reach the model (CONF_MTU) and the port's
#     active MTU; link down/up changes the port state;
#   - RoCE: IPv4 addresses of the netdev become GIDs in the model (SET_GID add)
#     and leave it again (SET_GID delete);
#   - the 11 hw counters of `rdma statistic` are the model's; a failed
#     GET_STATS is an error, not stale numbers;
#   - link down/up: port state and the core's PORT_ERR/PORT_ACTIVE events;
#   - erdma_rs only: unbinding with a context open revokes it; the netdev can
#     unregister under a bound adapter and is reattached when it returns; and
#     without its netdev the probe is deferred until the netdev appears.
# Runs against either driver (ERDMA_DRIVER=erdma_rs or erdma), on the model's
# adapters only (it changes the machine and asks the model; see "What a test
# may change" in lib.sh). What it changes is undone when it exits.

. "$(dirname "$0")/lib.sh"

need_functions
need_reconfigure "changes MTUs, addresses, links and bindings, and injects faults"
DRV=$ERDMA_DRIVER
paged=""
for f in $functions; do
	has_test_page "$f" && paged=1 && break
done
[ -n "$paged" ] || ksft_skip_all "needs an adapter with the model's test page (test_page=on): it asks the model"
command -v ibv_asyncwatch >/dev/null || ksft_skip_all "ibv_asyncwatch (ibverbs-utils) is missing"
tmp=/tmp/verbs
rm -rf "$tmp"
mkdir -p "$tmp"

# model_is BDF QUERY EXPECTED: the model's answer to "query QUERY" is EXPECTED.
model_is() {
	got=$(model_cmd "$1" "query $2") || return 1
	[ "${got#ok }" = "$3" ]
}

expect_model() {
	wait_for 10 model_is "$1" "$2" "$3" && return 0
	tap_diag "$1: the model says '$(model_cmd "$1" "query $2")', expected '$3'"
	return 1
}

port_state_is() { rdma link show "$1/1" | grep -q "state $2 "; }

active_mtu_is() { ibv_devinfo -d "$1" | grep -q "active_mtu:.*($2)"; }

# watch_start IBDEV NAME: ibv_asyncwatch on IBDEV in the background, holding a
# user context open; its output goes to $tmp/NAME. Returns once it listens.
watch_start() {
	ibv_asyncwatch -d "$1" >"$tmp/$2" 2>&1 &
	echo $! >"$tmp/$2.pid"
	wait_for 20 saw_event "$2" "async event FD" ||
		{ tap_diag "ibv_asyncwatch did not start: $(cat "$tmp/$2")"; return 1; }
}

watch_stop() {
	kill "$(cat "$tmp/$1.pid")" 2>/dev/null
	wait "$(cat "$tmp/$1.pid")" 2>/dev/null
	return 0
}

saw_event() { grep -q "$2" "$tmp/$1"; }

contexts_follow_opens() {
	bdf=$1 ibdev=$2
	expect_model "$bdf" dbs dbs=0 || return 1
	watch_start "$ibdev" ctx1
	watch_start "$ibdev" ctx2
	expect_model "$bdf" dbs dbs=2 || { watch_stop ctx1; watch_stop ctx2; return 1; }
	watch_stop ctx1
	watch_stop ctx2
	expect_model "$bdf" dbs dbs=0
}

alloc_db_failure() {
	bdf=$1 ibdev=$2
	model_cmd "$bdf" "fail COMMON.ALLOC_DB status=2 count=1" >/dev/null || return 1
	if ibv_devinfo -d "$ibdev" >"$tmp/devinfo.fail" 2>&1; then
		tap_diag "ibv_devinfo succeeded despite the failed ALLOC_DB"
		return 1
	fi
	ibv_devinfo -d "$ibdev" >/dev/null 2>&1 || { tap_diag "the next open failed too"; return 1; }
	expect_model "$bdf" dbs dbs=0
}

mtu_reaches_model() {
	bdf=$1 ibdev=$2 netdev=$3
	mtu_set "$netdev" 2000 || return 1
	expect_model "$bdf" mtu mtu=2000 || return 1
	wait_for 5 active_mtu_is "$ibdev" 3 || { tap_diag "active_mtu not 1024 at MTU 2000"; return 1; }
	mtu_set "$netdev" 4200 || return 1
	expect_model "$bdf" mtu mtu=4200 || return 1
	wait_for 5 active_mtu_is "$ibdev" 5 || { tap_diag "active_mtu not 4096 at MTU 4200"; return 1; }
	mtu_set "$netdev" 1500 || return 1
	expect_model "$bdf" mtu mtu=1500
}

link_down_up() {
	ibdev=$1 netdev=$2
	watch_start "$ibdev" events || { watch_stop events; return 1; }
	ip link set "$netdev" down
	wait_for 10 port_state_is "$ibdev" DOWN || {
		tap_diag "port not DOWN"
		ip link set "$netdev" up
		watch_stop events
		return 1
	}
	ip link set "$netdev" up
	wait_for 10 port_state_is "$ibdev" ACTIVE || { tap_diag "port not ACTIVE again"; watch_stop events; return 1; }
	ok=0
	wait_for 10 saw_event events IBV_EVENT_PORT_ERR &&
		wait_for 10 saw_event events IBV_EVENT_PORT_ACTIVE && ok=1
	watch_stop events
	[ $ok = 1 ] || tap_diag "asyncwatch saw: $(tr '\n' ';' <"$tmp/events")"
	[ $ok = 1 ]
}

# The IPv4-mapped GID of 169.254.30.N, as the model prints GIDs.
gid_hex() { printf '00000000000000000000ffffa9fe1e%02x' "$1"; }

gid_in_model() { model_cmd "$1" "query gids" | grep -q "$2"; }

gid_not_in_model() { ! gid_in_model "$1" "$2"; }

gids_follow_addresses() {
	bdf=$1 netdev=$2 host=$3
	gid=$(gid_hex "$host")
	ip addr add "169.254.30.$host/16" dev "$netdev" 2>"$tmp/ip.err" ||
		{ tap_diag "ip addr add: $(cat "$tmp/ip.err")"; return 1; }
	wait_for 10 gid_in_model "$bdf" "$gid" || {
		tap_diag "GID $gid not in the model: $(model_cmd "$bdf" "query gids")"
		ip addr del "169.254.30.$host/16" dev "$netdev"
		return 1
	}
	ip addr del "169.254.30.$host/16" dev "$netdev" || return 1
	wait_for 10 gid_not_in_model "$bdf" "$gid" || {
		tap_diag "GID $gid still in the model: $(model_cmd "$bdf" "query gids")"
		return 1
	}
}

STATS="tx_reqs=11 tx_packets=22 tx_bytes=33 tx_disable_drop=44 tx_bps_limit_drop=55 \
tx_pps_limit_drop=66 rx_packets=77 rx_bytes=88 rx_disable_drop=99 rx_bps_limit_drop=111 \
rx_pps_limit_drop=122"

counters_match() {
	bdf=$1 ibdev=$2
	model_cmd "$bdf" "stats $STATS" >/dev/null || return 1
	sleep 0.1
	rdma statistic show link "$ibdev/1" >"$tmp/stats" 2>&1 || { cat "$tmp/stats"; return 1; }
	for kv in $STATS; do
		name=${kv%=*}_cnt
		want=${kv#*=}
		got=$(tr ' ' '\n' <"$tmp/stats" | awk -v k="$name" 'found { print; exit } $0 == k { found = 1 }')
		[ "$got" = "$want" ] || { tap_diag "$name is '$got', expected $want"; return 1; }
	done
	[ "$(cat "/sys/class/infiniband/$ibdev/ports/1/hw_counters/rx_bytes_cnt")" = 88 ]
}

get_stats_failure() {
	bdf=$1 ibdev=$2
	model_cmd "$bdf" "fail COMMON.GET_STATS status=2 count=1" >/dev/null || return 1
	sleep 0.1
	if cat "/sys/class/infiniband/$ibdev/ports/1/hw_counters/tx_reqs_cnt" >/dev/null 2>&1; then
		tap_diag "reading a counter succeeded despite the failed GET_STATS"
		return 1
	fi
	sleep 0.1
	[ "$(cat "/sys/class/infiniband/$ibdev/ports/1/hw_counters/tx_reqs_cnt")" = 11 ]
}

unbind_with_context_open() {
	bdf=$1 ibdev=$2
	watch_start "$ibdev" revoke || { watch_stop revoke; return 1; }
	wait_for 10 model_is "$bdf" dbs dbs=1 || { watch_stop revoke; return 1; }
	timeout 30 sh -c "echo $bdf >/sys/bus/pci/drivers/$DRV/unbind" ||
		{ tap_diag "unbind did not finish in 30 s"; watch_stop revoke; return 1; }
	# The context is revoked: ibv_asyncwatch learns the device is gone.
	ok=0
	wait_for 10 saw_event revoke IBV_EVENT_DEVICE_FATAL && ok=1
	[ $ok = 1 ] || tap_diag "asyncwatch saw: $(tr '\n' ';' <"$tmp/revoke")"
	watch_stop revoke
	[ $ok = 1 ] || return 1
	echo "$bdf" >"/sys/bus/pci/drivers/$DRV/bind" || return 1
	wait_for 10 is_bound "$bdf"
}

# virtio_back DEVICE: virtio device DEVICE (a NIC the test unbinds) is bound
# to virtio_net again when the test exits, should the test not have done it.
virtio_back() {
	undo_push "[ -e /sys/bus/virtio/drivers/virtio_net/$1 ] || echo $1 >/sys/bus/virtio/drivers/virtio_net/bind"
}

# Loading the driver while the netdev of function BDF is gone defers that
# function's probe; the netdev's return completes it. (A bind through sysfs is
# not retried by the driver core: the module load is the path that defers.)
probe_waits_for_netdev() {
	bdf=$1 netdev=$2
	mac=$(mac_of "$bdf")
	virtio=$(basename "$(readlink "/sys/class/net/$netdev/device")")
	virtio_back "$virtio"
	rmmod "$DRV" || return 1
	echo "$virtio" >/sys/bus/virtio/drivers/virtio_net/unbind || return 1
	modprobe "$DRV" || return 1
	if is_bound "$bdf"; then
		tap_diag "bound without its netdev"
		return 1
	fi
	dmesg | grep -q "$DRV $bdf: waiting for the network device with MAC $mac" ||
		{ tap_diag "no deferral message"; return 1; }
	echo "$virtio" >/sys/bus/virtio/drivers/virtio_net/bind || return 1
	wait_for 20 is_bound "$bdf" || { tap_diag "not bound after the netdev came back"; return 1; }
	nd=$(netdev_of "$mac") && ip link set "$nd" up || return 1
	wait_for 10 sh -c "rdma link show | grep -q ' netdev $nd '"
}

# Unregistering the netdev of a bound function detaches it from the port (or
# it could never go); registering it again reattaches it.
netdev_goes_and_returns() {
	bdf=$1 netdev=$2 ibdev=$3
	virtio=$(basename "$(readlink "/sys/class/net/$netdev/device")")
	virtio_back "$virtio"
	timeout 30 sh -c "echo $virtio >/sys/bus/virtio/drivers/virtio_net/unbind" ||
		{ tap_diag "the netdev could not unregister"; return 1; }
	wait_for 10 port_state_is "$ibdev" DOWN || { tap_diag "port not DOWN"; return 1; }
	echo "$virtio" >/sys/bus/virtio/drivers/virtio_net/bind || return 1
	nd=$(netdev_of "$(mac_of "$bdf")") && ip link set "$nd" up || return 1
	wait_for 10 port_state_is "$ibdev" ACTIVE || { tap_diag "port not ACTIVE again"; return 1; }
	rdma link show "$ibdev/1" | grep -q " netdev $nd"
}

tap_header
nics_up 40
load_driver

n=0
for bdf in $functions; do
	has_test_page "$bdf" || continue
	wait_for 10 is_bound "$bdf" || continue
	n=$((n + 1))
	mac=$(mac_of "$bdf")
	netdev=$(netdev_of "$mac")
	wait_for 10 sh -c "rdma link show | grep -q ' netdev $netdev '"
	ibdev=$(ibdev_of "$netdev")
	proto=$(rdma dev show "$ibdev" | grep -q 'node_type rnic' && echo iwarp || echo roce)
	tap_diag "$bdf: $ibdev ($proto) on $netdev ($mac)"
	[ -n "$ibdev" ] || { tap_not_ok "$bdf: an RDMA device on $netdev"; continue; }

	tap_check "$ibdev: each open context holds doorbell pages, released at close" \
		contexts_follow_opens "$bdf" "$ibdev"
	tap_check "$ibdev: a failed ALLOC_DB fails the open, leaks nothing" \
		alloc_db_failure "$bdf" "$ibdev"
	tap_check "$ibdev: MTU changes reach the model and active_mtu" \
		mtu_reaches_model "$bdf" "$ibdev" "$netdev"
	tap_check "$ibdev: link down/up: port DOWN/ACTIVE, PORT_ERR/PORT_ACTIVE events" \
		link_down_up "$ibdev" "$netdev"
	if [ "$proto" = roce ]; then
		tap_check "$ibdev: an IPv4 address becomes a GID in the model and leaves it" \
			gids_follow_addresses "$bdf" "$netdev" "$n"
	fi
	tap_check "$ibdev: rdma statistic shows the model's 11 counters" counters_match "$bdf" "$ibdev"
	tap_check "$ibdev: a failed GET_STATS is an error, then counters read again" \
		get_stats_failure "$bdf" "$ibdev"
	if [ "$DRV" = erdma_rs ]; then
		tap_check "$ibdev: unbinding with a context open revokes it" \
			unbind_with_context_open "$bdf" "$ibdev"
		ibdev=$(ibdev_of "$netdev")
		# iWARP: the core's GID cache keeps a reference to the netdev for as long
		# as the RDMA device is registered (the upstream driver has the same
		# limit): unbind the adapter before its netdev.
		if [ "$proto" = roce ]; then
			tap_check "$ibdev: its netdev can unregister, and is reattached when back" \
				netdev_goes_and_returns "$bdf" "$netdev" "$ibdev"
			netdev=$(netdev_of "$mac")
		fi
		tap_check "$bdf: without its netdev the probe waits, and binds when it appears" \
			probe_waits_for_netdev "$bdf" "$netdev"
	fi
done
tap_check "adapters with a test page found ($n)" [ "$n" -gt 0 ]

unload_and_finish "$DRV"
