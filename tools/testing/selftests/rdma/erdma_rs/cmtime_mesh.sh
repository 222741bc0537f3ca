#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# cmtime_mesh.sh present
# cmtime_mesh.sh serve IP OOB-PORT N
# cmtime_mesh.sh connect SERVER-IP MY-IP OOB-PORT N
#
# cmtime in a mesh of three peers: one listener (serve) and two connecting
# peers (connect runs both, at once), each making N connections with RC QPs
# to the listener, step by step, and reporting its step totals. This is how
# cmtime runs on iWARP. The guest's own cmtime (rdma-core 56.1) cannot: its
# out-of-band TCP socket listens on the rdma_cm listener's port, which an
# iWARP listener holds as a TCP port itself (EADDRINUSE). The newer cmtime
# used here (rdma-core $CMTIME_RDMA_CORE of scripts/versions.sh, built by
# scripts/setup.sh cmtime) gives the out-of-band socket a port of its own
# (OOB-PORT) and its listener a free one; but with two peers it also times
# connections without QPs, which iw_cm cannot make (iw_cm_connect needs the
# QP), so it runs with three, where it does not.
#
# The listener must listen on OOB-PORT before the connecting peers start (the
# first to bind SERVER-IP:OOB-PORT leads the mesh). connect prints each
# peer's output after a line "== peer K (exit RC)" and fails if either did.
# present succeeds if the binary is there. CMTIME_MESH overrides its path.

CMTIME=${CMTIME_MESH:-/mnt/payload/cmtime-61.0/cmtime}
[ -x "$CMTIME" ] || { echo "no cmtime at $CMTIME (scripts/setup.sh cmtime)"; exit 2; }

case "$1" in
present) ;;
serve)
	[ $# = 4 ] || { echo "usage: $0 serve IP OOB-PORT N"; exit 2; }
	exec "$CMTIME" -L -P 3 -b "$2" -C "$2" -p "$3" -c "$4"
	;;
connect)
	[ $# = 5 ] || { echo "usage: $0 connect SERVER-IP MY-IP OOB-PORT N"; exit 2; }
	out=$(mktemp -d)
	"$CMTIME" -P 3 -b "$3" -C "$2" -p "$4" -c "$5" >"$out/1" 2>&1 &
	p1=$!
	"$CMTIME" -P 3 -b "$3" -C "$2" -p "$4" -c "$5" >"$out/2" 2>&1 &
	p2=$!
	wait $p1
	r1=$?
	wait $p2
	r2=$?
	echo "== peer 1 (exit $r1)"
	cat "$out/1"
	echo "== peer 2 (exit $r2)"
	cat "$out/2"
	rm -rf "$out"
	[ $r1 = 0 ] && [ $r2 = 0 ]
	;;
*)
	echo "usage: $0 serve IP OOB-PORT N | connect SERVER-IP MY-IP OOB-PORT N"
	exit 2
	;;
esac
