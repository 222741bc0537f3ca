#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# RC traffic between two RoCEv2 adapters of this guest, through the driver
# under test and the stock rdma-core erdma provider: ibv_rc_pingpong with
# several message sizes (inline and not), polling and completion events, each
# receiver validating the bytes (-c).
# The out-of-band exchange runs over TCP on the adapters' netdevs; the data
# moves through the model's fabric, addressed by GID and QPN.
# Runs against either driver (ERDMA_DRIVER=erdma_rs or erdma). On a real
# instance, between the adapters' own addresses, with the driver bound (see
# "What a test may change" in lib.sh).

. "$(dirname "$0")/lib.sh"

DRV=$ERDMA_DRIVER
NET=50
need_functions
command -v ibv_rc_pingpong >/dev/null || ksft_skip_all "ibv_rc_pingpong (ibverbs-utils) is missing"
tmp=/tmp/rc
rm -rf "$tmp"
mkdir -p "$tmp"

tap_header
nics_up $NET
load_driver
roce_pair || ksft_skip_all "fewer than two RoCEv2 adapters bound"

tap_check "rc_pingpong $IB_A -> $IB_B, 4096 bytes x 100" \
	pingpong base "$IB_A" "$GID_A" "$IB_B" "$GID_B" "$IP_A" -s 4096 -n 100 -c
tap_check "rc_pingpong $IB_A -> $IB_B, 1 byte x 100 (inline)" \
	pingpong small "$IB_A" "$GID_A" "$IB_B" "$GID_B" "$IP_A" -s 1 -n 100 -c
tap_check "rc_pingpong $IB_A -> $IB_B, 64 KiB x 20" \
	pingpong large "$IB_A" "$GID_A" "$IB_B" "$GID_B" "$IP_A" -s 65536 -n 20 -c
tap_check "rc_pingpong $IB_A -> $IB_B, 4096 bytes x 100, completion events (-e)" \
	pingpong events "$IB_A" "$GID_A" "$IB_B" "$GID_B" "$IP_A" -s 4096 -n 100 -e -c
tap_check "rc_pingpong $IB_A -> $IB_A (loopback on one adapter), 4096 bytes x 50" \
	pingpong loop "$IB_A" "$GID_A" "$IB_A" "$GID_A" "$IP_A" -s 4096 -n 50 -c

unload_and_finish "$DRV"
