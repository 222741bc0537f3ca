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
# Also: posting to a QP in ERROR from the CQ's completion handler (softirq)
# and under a spinlock completes everything flushed, with no wait for a
# command there (the debug kernel's atomic-sleep checks and lockdep watch).
# On iWARP adapters (CM_PROTO=iwarp) only that test runs (atomic_post_only=1),
# as an iWARP QP reaches RTS only through the connection manager.
# Runs against either driver (ERDMA_DRIVER=erdma_rs or erdma). The test
# module is this test's own: it is loaded and unloaded on a real instance too
# (with the driver bound and the adapters' own addresses: see "What a test
# may change" in lib.sh).

. "$(dirname "$0")/lib.sh"

NET=55
need_functions
DRV=$ERDMA_DRIVER
modinfo erdma_kverbs_test >/dev/null 2>&1 || ksft_skip_all "the erdma_kverbs_test module is not installed"

PROTO=${CM_PROTO:-roce}
tap_header
nics_up $NET
load_driver
if [ "$PROTO" = iwarp ]; then
	iwarp_pair || ksft_skip_all "fewer than two iWARP adapters bound"
	PARAMS=atomic_post_only=1
	MIN_CHECKS=2
else
	roce_pair || ksft_skip_all "fewer than two RoCEv2 adapters bound"
	PARAMS=
	MIN_CHECKS=16
fi

# Where the model has its test page, it holds every REFLUSH completion back
# for a second while the test runs: a post to a QP in ERROR must still return
# at once (a driver that waited for the command in its post path would take
# the second), so the test bounds the longest post at 250 ms.
slow=""
for f in $functions; do
	has_test_page "$f" || continue
	model_cmd "$f" "delay RDMA.REFLUSH ms=1000 count=forever" >/dev/null && slow="$slow $f"
done
for f in $slow; do
	undo_push "model_cmd $f clear >/dev/null"
done
[ -z "$slow" ] || PARAMS="$PARAMS max_post_us=250000"
PARAMS=${PARAMS# }
klog_mark mark
undo_push "! grep -q '^erdma_kverbs_test ' /proc/modules || rmmod erdma_kverbs_test"
tap_check "modprobe erdma_kverbs_test${PARAMS:+ $PARAMS}" timeout "$(ksft_within 300)" modprobe erdma_kverbs_test $PARAMS
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
	sh -c "echo '$summary' | grep -q ' 0 failed' && [ \$(echo '$summary' | cut -d' ' -f2) -ge $MIN_CHECKS ]"
tap_check "rmmod erdma_kverbs_test" rmmod erdma_kverbs_test
for f in $slow; do
	model_cmd "$f" clear >/dev/null
done

unload_and_finish "$DRV"
