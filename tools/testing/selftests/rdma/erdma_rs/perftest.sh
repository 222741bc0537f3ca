#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# perftest between two RoCEv2 adapters of this guest, with the default
# connection setup (GIDs exchanged over TCP) and again with rdma_cm's (-R):
# ib_{write,read,send,atomic}_{bw,lat}, through the
# driver under test and the stock erdma provider. Each run must complete on
# both ends and print its result table. Iteration counts are small: the guest
# runs under TCG, and bandwidth figures belong to `make bench`.
# On iWARP adapters (CM_PROTO=iwarp) only rdma_cm can connect a QP (erdma_rs_hw
# 7.1: RTS comes from the driver's connection manager alone): the -R runs, the
# atomics only where the adapters report atomic support.
# Runs against either driver (ERDMA_DRIVER=erdma_rs or erdma). On a real
# instance, between the adapters' own addresses, with the driver bound (see
# "What a test may change" in lib.sh).

. "$(dirname "$0")/lib.sh"

DRV=$ERDMA_DRIVER
PROTO=${CM_PROTO:-roce}
NET=51
[ "$PROTO" = iwarp ] && NET=52
need_functions
command -v ib_write_bw >/dev/null || ksft_skip_all "perftest is missing"
tmp=/tmp/perftest
rm -rf "$tmp"
mkdir -p "$tmp"

# perf TOOL ARGS...: TOOL from $IB_A (server) to $IB_B (client).
perf() {
	tool=$1
	shift
	next_port
	run_pair "$tool" "$PORT" '#bytes' \
		stdbuf -oL "$tool" -d "$IB_A" -x "$GID_A" -p "$PORT" -F "$@" -- \
		stdbuf -oL "$tool" -d "$IB_B" -x "$GID_B" -p "$PORT" -F "$@" "$IP_A" || return 1
	tap_diag "$tool $*: $(grep -A1 '#bytes' "$tmp/$tool.cli" | tail -n 1 | tr -s ' ')"
}

# perf_cm TOOL ARGS...: as perf, with the connection set up by rdma_cm (-R):
# the server binds A's address, the client B's (so the client's rdma_cm ID is
# on B). With -R perftest's own channel (its parameters, its syncs) is an
# rdma_cm connection too, on the same port: the client connects twice, first
# for that channel, then for the test's QP, to a listener the server creates
# only after the first sync. Their output is line-buffered, so that a run that
# hangs shows how far it got; a run still going after 90 s (they take
# seconds) has the QPs, as the RDMA core and the model see them, shown with
# its failure.
#
# perftest's race: the client starts its second connection as soon as the
# sync over the first is done; when it gets to the server before the server's
# new listener, nobody listens and it is rejected (reason 8, invalid service
# ID, on RoCEv2; -111, a TCP reset, on iWARP). perftest means to retry (10
# tries, 100 ms apart), but its retry crashes in 25.01, the version of the
# guests (perftest 3d9d8d0, "Fix crashes and logical flaws in RDMA CM
# connection retry", first in 26.04): the client dies, and the server waits
# for it. Seen with either driver on either protocol (the C driver on RoCEv2
# once in five runs, ours on iWARP twice in three runs of iwarp-cm; the
# model's log has the first connection's QPs in RTS, its data exchanged, the
# client's QP closed 0.35 s later, the reject after). Such a run runs once
# more on a fresh port and its diagnostics say so; a second one fails the
# test.
perf_cm() {
	tool=$1
	shift
	_again=1
	while :; do
		perf_cm_once "$tool" "$@" && return 0
		[ -n "$_again" ] && grep -q 'RDMA_CM_EVENT_REJECTED; error: \(8\|-111\)\.' "$tmp/$tool-R.cli" || return 1
		tap_diag "$tool -R: the client's second connection was rejected as by nobody listening ($(grep -o 'RDMA_CM_EVENT_REJECTED; error: [-0-9]*' "$tmp/$tool-R.cli" | head -n 1)), perftest's race with its server's second listener (and its crashing retry); one more run on a fresh port"
		_again=""
	done
}

perf_cm_once() {
	tool=$1
	shift
	next_port
	RUN_PAIR_READY=cm_listening
	rm -f "$tmp/$tool-R.qps" "$tmp/$tool-R.done"
	snapshot_at 90 "$tmp/$tool-R" &
	_snap=$!
	RUN_PAIR_ON_STOP="eval qp_snapshot >$tmp/$tool-R.qps 2>&1" run_pair "$tool-R" "$PORT" '#bytes' \
		stdbuf -oL "$tool" -d "$IB_A" -R --bind_source_ip "$IP_A" -p "$PORT" -F "$@" -- \
		stdbuf -oL "$tool" -d "$IB_B" -R --bind_source_ip "$IP_B" -p "$PORT" -F "$@" "$IP_A"
	r=$?
	touch "$tmp/$tool-R.done"
	wait $_snap
	RUN_PAIR_READY=listening
	[ ! -s "$tmp/$tool-R.qps" ] || tap_diag "QPs (90 s in, or when the server was stopped): $(tr -s ' ' <"$tmp/$tool-R.qps" | tr '\n' ';')"
	[ $r = 0 ] || return 1
	tap_diag "$tool -R $*: $(grep -A1 '#bytes' "$tmp/$tool-R.cli" | tail -n 1 | tr -s ' ')"
}

# snapshot_at SECONDS BASE: unless BASE.done appears first, writes the QPs of
# the RDMA core and, where the model has its test page, of the model to
# BASE.qps after SECONDS.
snapshot_at() {
	_i=0
	while [ $_i -lt "$1" ]; do
		[ ! -e "$2.done" ] || return 0
		sleep 1
		_i=$((_i + 1))
	done
	qp_snapshot >"$2.qps" 2>&1
}

# qp_snapshot: the QPs of the RDMA core and, where the model has its test
# page, of the model.
qp_snapshot() {
	rdma resource show qp
	for _f in $functions; do
		! has_test_page "$_f" || echo "$_f: $(model_cmd "$_f" query queues)"
	done
}

tap_header
nics_up $NET
load_driver
adapter_pair "$PROTO" || ksft_skip_all "fewer than two $PROTO adapters bound"

# loop_hang NAME: both ends of run NAME stopped inside the latency loop: each
# printed the result table's header and nothing after it until the timeout.
loop_hang() {
	for _f in "$tmp/$1.cli" "$tmp/$1.srv"; do
		tail -n 1 "$_f" | grep -q '^ *#bytes' || return 1
	done
}

# once_more_on_hang HOW TOOL ARGS...: HOW TOOL ARGS (perf or perf_cm); if it
# failed because ib_write_lat hung in its latency loop, once more. That hang
# is known and not understood yet (2026-11-26: in 2 of 4 fresh-clone make
# checks, ib_write_lat -R with ours, and about 1 in 40 loops of 3,000
# iterations; see the README): this excuses it once, and nothing else.
once_more_on_hang() {
	"$@" && return 0
	_run=$2
	[ "$1" = perf ] || _run=$2-R
	[ "$2" = ib_write_lat ] && loop_hang "$_run" || return 1
	tap_diag "$2 hung in its latency loop (a known hang, not understood yet): once more"
	"$@"
}

# each_tool HOW LABEL: the eight tools, their connections set up by HOW (perf,
# or perf_cm for rdma_cm), LABEL in their test points' names.
each_tool() {
	tap_check "ib_write_bw$2 64 KiB" $1 ib_write_bw -s 65536 -n 50
	tap_check "ib_write_lat$2 8 B" once_more_on_hang $1 ib_write_lat -s 8 -n 100
	tap_check "ib_read_bw$2 64 KiB" $1 ib_read_bw -s 65536 -n 50
	tap_check "ib_read_lat$2 8 B" $1 ib_read_lat -s 8 -n 100
	tap_check "ib_send_bw$2 64 KiB" $1 ib_send_bw -s 65536 -n 50
	tap_check "ib_send_lat$2 8 B" $1 ib_send_lat -s 8 -n 100
	if [ -n "$NO_ATOMICS" ]; then
		tap_skip "ib_atomic_bw$2 (fetch and add)" "$NO_ATOMICS"
		tap_skip "ib_atomic_lat$2 (compare and swap)" "$NO_ATOMICS"
		return 0
	fi
	tap_check "ib_atomic_bw$2 (fetch and add)" $1 ib_atomic_bw -n 50
	tap_check "ib_atomic_lat$2 (compare and swap)" $1 ib_atomic_lat -A CMP_AND_SWAP -n 50
}

NO_ATOMICS=""
for _ib in "$IB_A" "$IB_B"; do
	has_atomics "$_ib" || NO_ATOMICS="$_ib reports no atomic support (atomic_cap ATOMIC_NONE)"
done
if [ "$PROTO" = iwarp ]; then
	tap_skip "perftest without rdma_cm" "an iWARP QP reaches RTS only through the connection manager"
else
	each_tool perf ""
fi
# The same through rdma_cm (-R), which needs the adapters' GSI QPs (UD, issue
# 10). perftest 25.01 has no data validation (--data_validation came later).
# In compat mode (iWARP adapters as RoCEv2 devices) rdma_cm's MADs go
# through the driver's software GSI QP.
each_tool perf_cm " -R"
# Every tool at its largest messages through the model: its memory held.
model_memory_check

unload_and_finish "$DRV"
