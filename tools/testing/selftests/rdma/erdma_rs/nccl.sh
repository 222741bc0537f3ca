#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# RC queue pairs set up and driven as NCCL's IB transport does, and
# zero-byte messages, between two adapters of this guest (nccl_like.py,
# through the stock provider; one run, both workloads over the same queue
# pairs):
#   - the set-up: on RoCEv2 adapters and on iWARP adapters in compat mode
#     (erdma_rs with compat_mode=1: they show as CAs), 8 queue pairs a
#     connection (NCCL_IB_QPS_PER_CONNECTION=8), QPN, PSN and GID exchanged
#     over a TCP bootstrap connection, then ibv_modify_qp to RTS with an
#     address vector; on iWARP adapters in standard mode, 2 queue pairs that
#     rdma_cm connects, each handed to rdma_connect/rdma_accept by its number;
#   - zero-byte SEND, SEND with Immediate, RDMA Write, Write with Immediate
#     and RDMA Read, then a SEND of 64 bytes: each completes with byte_len 0,
#     the right opcode and immediate, and the receiver's memory is untouched
#     (virtualised RDMA clouds have been seen dropping such messages);
#   - NCCL's traffic: messages of 1 byte to 256 KiB split over the queue
#     pairs and written with RDMA Write with Immediate into the receiver's
#     ring once its FIFO entry (an RDMA Write into the sender's memory) names
#     the slot; every immediate and byte checked.
# NCCL_MODE=xguest: the same between two guests with one adapter each (roles
# as xguest_adapter gives them: the server's guest runs nccl_like.py's
# server, the other its client; a beacon says the server's bootstrap
# listens).
# Runs against either driver (ERDMA_DRIVER=erdma_rs or erdma; compat mode is
# erdma_rs's, ERDMA_MODPROBE_ARGS=compat_mode=1).

. "$(dirname "$0")/lib.sh"

DRV=$ERDMA_DRIVER
NET=62
need_functions
command -v python3 >/dev/null && python3 -c 'import pyverbs' 2>/dev/null ||
	ksft_skip_all "pyverbs (python3-pyverbs) is missing"
tmp=/tmp/nccl
rm -rf "$tmp"
mkdir -p "$tmp"
PORT=18900
py="python3 $(dirname "$0")/nccl_like.py"

# nccl_pair NAME SERVER_IB SERVER_GID CLIENT_IB CLIENT_GID SERVER_IP ARGS...:
# one nccl_like.py run (run_pair, on the next two ports: the bootstrap and,
# with --cm, rdma_cm's), client on CLIENT_IB; its lines go to the
# diagnostics.
nccl_pair() {
	name=$1 sib=$2 sgid=$3 cib=$4 cgid=$5 sip=$6
	shift 6
	next_port
	run_pair "$name" "$PORT" '^DONE' \
		$py server "$sib" "$sgid" "$sip" "$PORT" "$@" -- \
		$py client "$cib" "$cgid" "$sip" "$PORT" "$@" || return 1
	while read -r _line; do tap_diag "$name: $_line"; done <"$tmp/$name.cli"
	next_port
}

# passed NAME WORK: the client of run NAME said workload WORK passed.
passed() { grep -q "^$2: ok " "$tmp/$1.cli"; }

# xguest: NCCL_MODE=xguest, one adapter in each of two guests.
xguest() {
	xguest_begin $NET "$tmp" python3
	read -r type <"/sys/class/infiniband/$IB/node_type"
	if [ "$type" = "4: RNIC" ]; then
		how="2 QPs connected by rdma_cm (each handed over by its number)"
		args="--cm --src $IP --qps 2 --messages 16"
		gid=-
	else
		how="8 QPs to RTS by ibv_modify_qp, GID index $GID"
		args="--qps 8 --messages 40"
		gid=$GID
	fi
	if [ "$ROLE" = server ]; then
		$py server "$IB" "$gid" "$IP" "$PORT" $args >"$tmp/x.srv" 2>&1 &
		srv=$!
		wait_for 20 listening "$PORT" || tap_diag "the bootstrap does not listen on $PORT"
		ready_beacon "$IP" 18990 "$(ksft_within 120)" >/dev/null
		timeout "$(ksft_within 200)" sh -c "while kill -0 $srv 2>/dev/null; do sleep 1; done"
		kill "$srv" 2>/dev/null
		wait "$srv"
		rc=$?
		while read -r _line; do tap_diag "server: $_line"; done <"$tmp/x.srv"
		tap_check "server on $IB ($type): $how; it ended well (exit $rc)" [ "$rc" -eq 0 ]
	else
		await_beacon "$SERVER_IP" 18990 "$(ksft_within 120)" ||
			tap_diag "the server's beacon did not come"
		timeout "$(ksft_within 200)" $py client "$IB" "$gid" "$SERVER_IP" "$PORT" $args >"$tmp/x.cli" 2>&1
		rc=$?
		while read -r _line; do tap_diag "client: $_line"; done <"$tmp/x.cli"
		tap_check "client on $IB ($type) -> $SERVER_IP: $how; it ended well (exit $rc)" [ "$rc" -eq 0 ]
		tap_check "zero-byte SEND, SEND with Immediate, Write, Write with Immediate and Read" passed x zero
		tap_check "NCCL-style messages of 1 byte to 256 KiB written with immediate into the receiver's ring" passed x nccl
	fi
	xguest_end 18991 300
	unload_and_finish "$DRV"
}

[ "${NCCL_MODE:-local}" = xguest ] && xguest
tap_header
nics_up $NET
load_driver
if adapter_pair roce; then
	read -r type <"/sys/class/infiniband/$IB_A/node_type"
	case " ${ERDMA_MODPROBE_ARGS:-} " in
	*" compat_mode=1 "*) kind="RoCEv2 or iWARP in compat mode" ;;
	*) kind=RoCEv2 ;;
	esac
	tap_diag "$kind adapters ($type): $IB_A and $IB_B"
	how="8 QPs to RTS by ibv_modify_qp, GID index $GID_B -> $GID_A"
	tap_check "$IB_B -> $IB_A: $how" \
		nccl_pair pair "$IB_A" "$GID_A" "$IB_B" "$GID_B" "$IP_A" --qps 8 --messages 40
elif adapter_pair iwarp; then
	tap_diag "iWARP adapters in standard mode: $IB_A and $IB_B"
	how="2 QPs connected by rdma_cm (each handed over by its number)"
	tap_check "$IB_B -> $IB_A: $how" \
		nccl_pair pair "$IB_A" - "$IB_B" - "$IP_A" --cm --src "$IP_B" --qps 2 --messages 16
else
	ksft_skip_all "fewer than two adapters of one kind bound"
fi
tap_check "zero-byte SEND, SEND with Immediate, Write, Write with Immediate and Read" passed pair zero
tap_check "NCCL-style messages of 1 byte to 256 KiB written with immediate into the receiver's ring" passed pair nccl
unload_and_finish "$DRV"
