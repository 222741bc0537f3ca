#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# The two-guest half of `make bench` (scripts/bench.sh), issue 31: what the
# kernel's RDMA consumers buy over TCP on iWARP adapters driven by ours,
# between two guests with one adapter each (both run this script; roles as
# xguest_adapter gives them, beacons order the phases):
#
#   NFS (standard mode): the server's guest exports a file of
#     BENCH_NFS_MIB MiB (random bytes, in a tmpfs) over RDMA and TCP; the
#     client, in each round, mounts it over RDMA (proto=rdma) and over TCP
#     (proto=tcp), in an order that alternates with the round, and reads it
#     sequentially with a cold cache (dd, 1 MiB reads): nfs_read, MiB/s;
#   sockets (compat mode, in which the adapters are RoCEv2 devices that
#     SMC-R takes): the same socket program (smc_peer.py sink and bench) over
#     SMC (IPPROTO_SMC; smc_diag must show SMC-R carry it) and over plain
#     TCP: a stream of BENCH_SOCK_MIB MiB (sock_bw, MiB/s) and
#     BENCH_SOCK_PINGS one-byte round trips (sock_rtt, µs).
#
# The client writes "TRANSPORT ROUND METRIC VALUE UNIT" lines (TRANSPORT
# rdma or tcp; VALUE nan for a failed measurement) to
# $ERDMA_RESULTS/bench.raw; the server writes none. Exits 1 if a
# measurement failed or the kernel reported trouble.

. "$(dirname "$0")/lib.sh"

may_reconfigure || { echo "bench_xguest.sh: $ERDMA_SAFE_WHY" >&2; exit 4; }

ROUNDS=${BENCH_ROUNDS:-5}
NFS_MIB=${BENCH_NFS_MIB:-64}
SOCK_MIB=${BENCH_SOCK_MIB:-64}
PINGS=${BENCH_SOCK_PINGS:-2000}
NET=71
SMC_PORT=18960
HERE=$(cd "$(dirname "$0")" && pwd)
RESULTS=${ERDMA_RESULTS:-/tmp/erdma-results}
RAW=$RESULTS/bench.raw
NFS_TMP=/tmp/bench-nfs
NFS_EXPORT_SIZE=$((NFS_MIB + 8))m
. "$HERE/nfs_lib.sh"
mkdir -p "$RESULTS"
: >"$RAW"
failures=0

say() { echo "bench: $*"; }
record() {
	echo "$*" >>"$RAW"
	case $4 in nan) failures=$((failures + 1)) ;; esac
}

[ "${ERDMA_GUESTS:-1}" -ge 2 ] || { say "FAILED: needs a peer guest (scripts/vmrun.py with two --guest)"; exit 1; }
for t in rpc.nfsd mount.nfs python3 dd; do
	command -v $t >/dev/null || { say "FAILED: $t is missing"; exit 1; }
done

# up [ARGS]: erdma_rs loaded (with module parameters ARGS) and this guest's
# adapter found; sets ROLE, IP, SERVER_IP.
up() {
	! grep -q '^erdma_rs ' /proc/modules || rmmod erdma_rs || return 1
	modprobe erdma_rs "$@" && xguest_adapter $NET
}

nics_up $NET
up || { say "FAILED: erdma_rs found no adapter"; exit 1; }
say "$ROLE: $IB at $IP; $ROUNDS rounds; NFS read of $NFS_MIB MiB; SMC and TCP: $SOCK_MIB MiB, $PINGS round trips"

# nfs_read ROUND TRANSPORT: the file read once over a fresh mount.
nfs_read() {
	if ! nfs_mount "$SERVER_IP" "$2"; then
		record "$2 $1 nfs_read nan -"
		return
	fi
	echo 3 >/proc/sys/vm/drop_caches
	# dd's summary: "N bytes (...) copied, SECONDS s, RATE".
	_s=$(timeout 300 dd if="$NFS_TMP/mnt/file" of=/dev/null bs=1M 2>&1 |
		sed -n 's/.* copied, \([0-9.]*\) s,.*/\1/p')
	timeout 60 umount "$NFS_TMP/mnt" || say "round $1: umount ($2) failed"
	if [ -n "$_s" ]; then
		record "$2 $1 nfs_read $(awk -v m="$NFS_MIB" -v s="$_s" 'BEGIN { print m / s }') MiB/s"
	else
		record "$2 $1 nfs_read nan -"
	fi
}

# ---- NFS over RDMA and over TCP (standard mode) --------------------------------
if [ "$ROLE" = server ]; then
	if nfs_server_up "$IP" && head -c $((NFS_MIB << 20)) /dev/urandom >"$NFS_TMP/export/file"; then
		# A new server refuses opens in its grace period (10 s).
		sleep 11
		ready_beacon "$IP" 18811 600 >/dev/null || say "the client did not come for NFS"
	else
		say "FAILED: the NFS server did not start"
	fi
	ready_beacon "$IP" 18812 1800 >/dev/null || say "the client did not say NFS was done"
	nfs_down server || say "the NFS server did not stop"
else
	await_beacon "$SERVER_IP" 18811 600 || say "the server did not say it exports"
	round=1
	while [ $round -le "$ROUNDS" ]; do
		order="rdma tcp"
		[ $((round % 2)) = 0 ] && order="tcp rdma"
		for t in $order; do
			nfs_read $round $t
		done
		say "round $round/$ROUNDS: NFS read $(grep " $round nfs_read " "$RAW" | awk '{ printf "%s %s %s; ", $1, $4, $5 }')"
		round=$((round + 1))
	done
	await_beacon "$SERVER_IP" 18812 600 || say "the server did not hear that NFS was done"
	nfs_down client || say "the NFS client did not stop"
fi

# ---- SMC-R and TCP (compat mode) -----------------------------------------------
up compat_mode=1 || { say "FAILED: erdma_rs in compat mode found no adapter"; exit 1; }
modprobe smc && modprobe smc_diag && python3 "$HERE/smc_peer.py" ueid ERDMA-RS-BENCH >/dev/null || say "the user EID was not added"
if [ "$ROLE" = server ]; then
	python3 "$HERE/smc_peer.py" sink "$IP" $SMC_PORT >"$RESULTS/smc_sink.out" 2>&1 &
	sink=$!
	wait_for 20 listening $((SMC_PORT + 1)) || say "the socket sink does not listen"
	ready_beacon "$IP" 18813 600 >/dev/null || say "the client did not come for SMC"
	ready_beacon "$IP" 18814 1800 >/dev/null || say "the client did not say SMC was done"
	kill $sink 2>/dev/null
	wait $sink 2>/dev/null
else
	await_beacon "$SERVER_IP" 18813 600 || say "the server did not say its sink listens"
	# Not measured: the first SMC connection sets up SMC-R's link group (its
	# QPs and buffers, about a second here), which later ones reuse.
	timeout 300 python3 "$HERE/smc_peer.py" bench "$SERVER_IP" $SMC_PORT 0 1 10 >"$RESULTS/smc_bench.0" 2>&1 ||
		say "the warm-up connections failed: $(tail -n 1 "$RESULTS/smc_bench.0")"
	round=1
	while [ $round -le "$ROUNDS" ]; do
		timeout 600 python3 "$HERE/smc_peer.py" bench "$SERVER_IP" $SMC_PORT $round "$SOCK_MIB" "$PINGS" \
			>"$RESULTS/smc_bench.$round" 2>&1
		grep '^#' "$RESULTS/smc_bench.$round" | sed 's/^# /bench: /'
		for t in rdma tcp; do
			for m in sock_bw sock_rtt; do
				_l=$(grep "^$t $round $m " "$RESULTS/smc_bench.$round")
				record "${_l:-$t $round $m nan -}"
			done
		done
		say "round $round/$ROUNDS: sockets $(grep -v '^#' "$RESULTS/smc_bench.$round" | awk '{ printf "%s %s %.4g %s; ", $1, $3, $4, $5 }')"
		round=$((round + 1))
	done
	await_beacon "$SERVER_IP" 18814 600 || say "the server did not hear that SMC was done"
fi

bench_end "$RAW" "$failures" "($ROLE)"
