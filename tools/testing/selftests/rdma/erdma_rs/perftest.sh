#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# perftest between two RoCEv2 adapters of this guest, with the default
# connection setup (GIDs exchanged over TCP) and again with rdma_cm's (-R):
# ib_{write,read,send,atomic}_{bw,lat}, through the
# driver under test and the stock erdma provider. Each run must complete on
# both ends and print its result table. Iteration counts are small: the guest
# runs under TCG, and bandwidth figures belong to `make bench`.
# Runs against either driver (ERDMA_DRIVER=erdma_rs or erdma).

. "$(dirname "$0")/lib.sh"

DRV=$ERDMA_DRIVER
NET=51
functions=$(erdma_functions)
[ -n "$functions" ] || ksft_skip_all "no eRDMA function (1ded:107f) present"
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
		"$tool" -d "$IB_A" -x "$GID_A" -p "$PORT" -F "$@" -- \
		"$tool" -d "$IB_B" -x "$GID_B" -p "$PORT" -F "$@" "$IP_A" || return 1
	tap_diag "$tool $*: $(grep -A1 '#bytes' "$tmp/$tool.cli" | tail -n 1 | tr -s ' ')"
}

# perf_cm TOOL ARGS...: as perf, with the connection set up by rdma_cm (-R):
# the server binds A's address, the client B's (so the client's rdma_cm ID is
# on B), and their parameters go through rdma_cm's private data instead of TCP.
perf_cm() {
	tool=$1
	shift
	next_port
	RUN_PAIR_READY=cm_listening
	run_pair "$tool-R" "$PORT" '#bytes' \
		"$tool" -d "$IB_A" -R --bind_source_ip "$IP_A" -p "$PORT" -F "$@" -- \
		"$tool" -d "$IB_B" -R --bind_source_ip "$IP_B" -p "$PORT" -F "$@" "$IP_A"
	r=$?
	RUN_PAIR_READY=listening
	[ $r = 0 ] || return 1
	tap_diag "$tool -R $*: $(grep -A1 '#bytes' "$tmp/$tool-R.cli" | tail -n 1 | tr -s ' ')"
}

tap_header
nics_up $NET
tap_check "modprobe $DRV" modprobe "$DRV"
roce_pair || ksft_skip_all "fewer than two RoCEv2 adapters bound"

# each_tool HOW LABEL: the eight tools, their connections set up by HOW (perf,
# or perf_cm for rdma_cm), LABEL in their test points' names.
each_tool() {
	tap_check "ib_write_bw$2 64 KiB" $1 ib_write_bw -s 65536 -n 50
	tap_check "ib_write_lat$2 8 B" $1 ib_write_lat -s 8 -n 100
	tap_check "ib_read_bw$2 64 KiB" $1 ib_read_bw -s 65536 -n 50
	tap_check "ib_read_lat$2 8 B" $1 ib_read_lat -s 8 -n 100
	tap_check "ib_send_bw$2 64 KiB" $1 ib_send_bw -s 65536 -n 50
	tap_check "ib_send_lat$2 8 B" $1 ib_send_lat -s 8 -n 100
	tap_check "ib_atomic_bw$2 (fetch and add)" $1 ib_atomic_bw -n 50
	tap_check "ib_atomic_lat$2 (compare and swap)" $1 ib_atomic_lat -A CMP_AND_SWAP -n 50
}

each_tool perf ""
# The same through rdma_cm (-R), which needs the adapters' GSI QPs (UD, issue
# 10). perftest 25.01 has no data validation (--data_validation came later).
each_tool perf_cm " -R"

unload_and_finish "$DRV"
