#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# Kernel consumers: the erdma_kverbs_test module (built with the driver)
# creates RC QPs between two RoCEv2 adapters from inside the kernel and posts
# every opcode a kernel user can post (sends with 1 and 6 SGEs, inline, with
# immediate and with invalidate, RDMA Write with and without immediate, RDMA
# Read, both atomics, local invalidate), checking bytes and completions, and
# remote access errors (wrong rkey, another PD, missing rights, outside the
# region, an invalidated key) on both sides. Its lines become TAP points here.
# Runs against either driver (ERDMA_DRIVER=erdma_rs or erdma). The test
# module is this test's own: it is loaded and unloaded on a real instance too
# (with the driver bound and the adapters' own addresses: see "What a test
# may change" in lib.sh).

. "$(dirname "$0")/lib.sh"

NET=55
need_functions
DRV=$ERDMA_DRIVER
modinfo erdma_kverbs_test >/dev/null 2>&1 || ksft_skip_all "the erdma_kverbs_test module is not installed"

tap_header
nics_up $NET
load_driver
roce_pair || ksft_skip_all "fewer than two RoCEv2 adapters bound"

klog_mark mark
undo_push "! grep -q '^erdma_kverbs_test ' /proc/modules || rmmod erdma_kverbs_test"
tap_check "modprobe erdma_kverbs_test" timeout "$(ksft_within 300)" modprobe erdma_kverbs_test
klog_since "$mark" | sed -n 's/^\[[^]]*\] erdma_kverbs_test: //p' >/tmp/kverbs.out
while read -r line; do
	case "$line" in
	"ok "*) d=${line#ok }; tap_ok "${d#* - }" ;;
	"not ok "*) d=${line#not ok }; tap_not_ok "${d#* - }" ;;
	*) tap_diag "$line" ;;
	esac
done </tmp/kverbs.out
summary=$(grep '^summary:' /tmp/kverbs.out)
tap_check "the kernel test ran to its end ($summary)" \
	sh -c "echo '$summary' | grep -q ' 0 failed' && [ \$(echo '$summary' | cut -d' ' -f2) -ge 15 ]"
tap_check "rmmod erdma_kverbs_test" rmmod erdma_kverbs_test

unload_and_finish "$DRV"
