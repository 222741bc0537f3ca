#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# SMC-R (issue 31) between two guests with one adapter each: the kernel's
# SMC sockets (AF_INET, IPPROTO_SMC, as applications or smc-tools' preload
# library make them) between the guests' addresses, the data verified end to
# end (smc_peer.py: 16 MiB, the server's SHA-256 of them compared), and the
# kernel's SMC diagnostics (smc_diag) of each end asked, while the connection
# is up, who carries it:
#   - a RoCEv2 adapter, or an iWARP one in compat mode (a CA with RoCEv2
#     GIDs): SMC-R, over the adapter (SMC_EXPECT=smcr, the default);
#   - an iWARP adapter in standard mode (an RNIC, which SMC does not take):
#     SMC falls back to TCP, as upstream SMC does (SMC_EXPECT=fallback, set
#     here from the adapter's node type).
# SMC-R version 2 (RoCEv2 GIDs, no RoCE v1 GID needed) is proposed only with
# a user EID configured on both ends: smc_peer.py adds one over SMC's
# generic netlink family (smc-tools' "smcr ueid add"; smc-tools is not in
# Debian). Roles as xguest_adapter gives them; beacons order the steps.
# Runs against either driver (ERDMA_DRIVER=erdma_rs or erdma; the upstream
# C driver has no compat mode, so its iWARP adapters are RNICs and SMC falls
# back).

. "$(dirname "$0")/lib.sh"

DRV=$ERDMA_DRIVER
NET=63
PORT=18951
tmp=/tmp/smc
xguest_begin $NET "$tmp" python3
modprobe smc 2>/dev/null
modprobe smc_diag 2>/dev/null
[ -d /sys/module/smc ] || ksft_skip_all "no SMC in this kernel (CONFIG_SMC)"
read -r _type <"/sys/class/infiniband/$IB/node_type"
if [ "$_type" = "4: RNIC" ]; then
	EXPECT=fallback
	tap_diag "$IB is an iWARP RNIC (standard mode): SMC must fall back to TCP"
else
	EXPECT=smcr
fi
py_points "" smc_peer.py ueid ERDMA-RS-SMC
if [ "$ROLE" = server ]; then
	python3 "$(dirname "$0")/smc_peer.py" serve "$IP" "$PORT" "$EXPECT" >"$tmp/serve.out" 2>&1 &
	srv=$!
	wait_for 20 listening "$PORT" || tap_diag "the SMC server does not listen on $PORT"
	ready_beacon "$IP" 18950 "$(ksft_within 120)" >/dev/null
	_waited=0
	while kill -0 "$srv" 2>/dev/null && [ $_waited -lt 200 ]; do
		sleep 1
		_waited=$((_waited + 1))
	done
	kill "$srv" 2>/dev/null
	wait "$srv"
	_rc=$?
	tap_points "$tmp/serve.out"
	tap_check "the SMC server ended well (exit $_rc)" [ "$_rc" -eq 0 ]
	xguest_end 18952 300
else
	await_beacon "$SERVER_IP" 18950 "$(ksft_within 120)" ||
		tap_diag "the server's beacon did not come"
	py_points "" smc_peer.py connect "$SERVER_IP" "$PORT" "$EXPECT" 16
	xguest_end 18952 300
fi
unload_and_finish "$DRV"
