#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# RC traffic between two guests, each with one RoCEv2 adapter, through one
# model process: ibv_rc_pingpong (polling and completion events) and
# ib_write_bw. The guest whose adapter has the lower MAC serves, the other
# connects to 169.254.NET.<server MAC byte>; both run this script.
# Runs against either driver (ERDMA_DRIVER=erdma_rs or erdma). Needs the peer
# guest (ERDMA_GUESTS, set by scripts/vmrun.py) and the link-local addresses
# nics_up gives: elsewhere it skips (xguest_begin in lib.sh).

. "$(dirname "$0")/lib.sh"

DRV=$ERDMA_DRIVER
NET=53
tmp=/tmp/xguest
xguest_begin $NET "$tmp" ibv_rc_pingpong
ib=$IB gid=$GID role=$ROLE server_ip=$SERVER_IP

# xrun NAME PORT DONE CMD...: the server runs CMD; the client runs CMD with the
# server's address, retrying while the server is not listening yet.
xrun() {
	name=$1 port=$2 done=$3
	shift 3
	if [ $role = server ]; then
		timeout "$(ksft_within 240)" "$@" >"$tmp/$name" 2>&1
		rc=$?
	else
		tries=120
		while :; do
			timeout "$(ksft_within 240)" "$@" "$server_ip" >"$tmp/$name" 2>&1
			rc=$?
			[ $rc != 0 ] && grep -qi "couldn't connect\|unable to connect\|connection refused" "$tmp/$name" &&
				[ $tries -gt 0 ] && ksft_has_time 2 || break
			tries=$((tries - 1))
			sleep 1
		done
	fi
	if [ $rc != 0 ] || ! grep -q -- "$done" "$tmp/$name" || grep -qi 'invalid' "$tmp/$name"; then
		tap_diag "$role (exit $rc): $(tr '\n' ';' <"$tmp/$name" | tail -c 1500)"
		return 1
	fi
	tap_diag "$name: $(grep -- "$done" "$tmp/$name" | head -n 1)"
}

tap_check "$role: rc_pingpong across guests, 4096 bytes x 50" \
	xrun pingpong 18601 'bytes in' ibv_rc_pingpong -d "$ib" -g "$gid" -p 18601 -s 4096 -n 50 -c
tap_check "$role: rc_pingpong across guests, completion events (-e)" \
	xrun events 18602 'bytes in' ibv_rc_pingpong -d "$ib" -g "$gid" -p 18602 -s 4096 -n 50 -e -c
if [ $role = client ]; then
	tap_check "$role: ib_write_bw across guests" \
		xrun write_bw 18603 '#bytes' ib_write_bw -d "$ib" -x "$gid" -p 18603 -F -s 65536 -n 50
else
	tap_check "$role: ib_write_bw across guests" \
		xrun write_bw 18603 'RDMA_Write' ib_write_bw -d "$ib" -x "$gid" -p 18603 -F -s 65536 -n 50
fi

xguest_end 18699
unload_and_finish "$DRV"
