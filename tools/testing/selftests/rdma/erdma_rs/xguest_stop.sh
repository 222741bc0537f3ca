#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# A peer guest stopped in the middle of a connection, as a host stops a VM:
# two guests with one adapter each (roles by MAC as in xguest_cm.sh); rping
# runs between them, validating its data, and once the server has answered 20
# pings its guest has vmrun kill it (stop_this_guest: no shutdown, no TCP FIN
# or RST). The model resets the adapter whose client went away, which ends
# its connections (on iWARP a Terminate reaches the survivor's QP, which
# errs). The client must hear of it within a bounded time (the driver's
# connection manager reports the connection closed: rdma_cm's DISCONNECTED)
# and not hang; a new connection to the stopped guest must fail, not hang;
# then no rdma_cm ID or QP is left, the driver unloads and the model holds
# nothing of this guest's. The server's guest ends here: this runs last in a
# scenario. The client's driver is ERDMA_DRIVER; the server's does not
# matter (it is gone). Adapters of either protocol. Only under
# scripts/vmrun.py with two guests (the harness stops the guest; elsewhere the
# test skips).

. "$(dirname "$0")/lib.sh"

DRV=$ERDMA_DRIVER
NET=61
PORT=18900
tmp=/tmp/xguest_stop
need_functions
[ -r "$ERDMA_ADAPTERS" ] && [ -d "${ERDMA_RESULTS:-/nonexistent}" ] ||
	ksft_skip_all "the server's guest is stopped by scripts/vmrun.py (results/stop-request): runs only there"
xguest_begin $NET "$tmp" rping
functions=$(erdma_functions)

# pings FILE: how many round trips rping printed (-v) in FILE.
pings() { grep -c 'ping data: rdma-ping-' "$1"; }

if [ "$ROLE" = server ]; then
	timeout "$(ksft_within 300)" rping -s -a "$SERVER_IP" -p $PORT -S 64 -C 1000000 -v >"$tmp/srv" 2>&1 &
	wait_for 60 cm_listening $PORT && ready_beacon "$SERVER_IP" $((PORT + 100)) "$(ksft_within 200)" ||
		tap_diag "no client came to the beacon"
	tap_check "server: 20 round trips served before this guest stops" \
		wait_for 120 sh -c "[ \$(grep -c 'ping data: rdma-ping-' $tmp/srv) -ge 20 ]"
	tap_diag "server: $(pings "$tmp/srv") round trips; stopping this guest"
	stop_this_guest "xguest_stop.sh: the server stops in the middle of its rping connection"
fi

await_beacon "$SERVER_IP" $((PORT + 100)) "$(ksft_within 200)" || tap_diag "the server's beacon did not answer in 200 s"
start=$(uptime)
timeout "$(ksft_within 240)" stdbuf -oL rping -c -a "$SERVER_IP" -I "$MY_IP" -p $PORT -S 64 -C 1000000 -V -v >"$tmp/cli" 2>&1
rc=$?
took=$(($(uptime) - start))
n=$(pings "$tmp/cli")
tap_diag "client: rping exit $rc after $took s and $n round trips; its last words: $(tail -n 3 "$tmp/cli" | tr '\n' ';')"
tap_check "client: the connection carried data (>= 20 round trips)" [ "$n" -ge 20 ]
# rping's client ends on a failed completion or on rdma_cm's DISCONNECTED,
# exiting 0 or not: it must end, by neither its timeout nor a million pings.
tap_check "client: rping ends once the peer is gone, without hanging (exit $rc, not a timeout)" \
	sh -c "[ $rc != 124 ] && [ $rc != 137 ] && [ $n -lt 1000000 ] &&
		grep -q 'DISCONNECT EVENT\|completion failed\|error' $tmp/cli"
tap_check "client: no data mismatch" sh -c "! grep -qi 'mismatch' $tmp/cli"

# A new connection to the stopped guest: nobody answers (no TCP on iWARP, no
# CM MAD on RoCEv2); rdma_cm gives up by its timers.
start=$(uptime)
timeout "$(ksft_within 120)" rping -c -a "$SERVER_IP" -I "$MY_IP" -p $PORT -C 1 >"$tmp/again" 2>&1
rc=$?
tap_diag "rping to the stopped guest: exit $rc after $(($(uptime) - start)) s: $(tr '\n' ';' <"$tmp/again" | tail -c 300)"
tap_check "client: a connection to the stopped guest fails, without hanging" \
	sh -c "[ $rc != 0 ] && [ $rc != 124 ]"

tap_check "client: no rdma_cm ID is left" sh -c '[ -z "$(rdma resource show cm_id 2>&1)" ]'
tap_check "client: no QP of a process is left" sh -c '! rdma resource show qp 2>&1 | grep -q "comm rping"'
unload_and_finish "$DRV" $functions
