#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# Random user verbs from an unprivileged user (issue 30, trust boundaries):
# uverbs_random.py, run as nobody (uid 65534, no groups, no capabilities:
# RLIMIT_MEMLOCK binds what it may pin), drives every RoCEv2 and iWARP
# adapter at once for UVERBS_RANDOM_S seconds (30 by default) with worker
# processes that open and close user contexts, PDs, CQs of random sizes
# (invalid ones too), MRs with random access flags, lengths and addresses
# (bad ones too), QPs of random types and capabilities, modify_qp with
# random states, attributes and masks (and transitions to RTS between their
# own QPs, so that random work requests move data), post_send and post_recv
# of random work requests, poll and req_notify, resize_cq, AHs, MWs and
# queries; each worker closes everything, exits without closing, or is
# killed in the middle. The seed is fixed (SEED=N for another) and printed.
# Every error must reach the process as an errno (a clean exception), no
# process may crash or hang, and the kernel must make no report (the
# harness ends the guest on one). Afterwards the model holds no more
# objects than before, and each adapter still works (context, PD, CQ, MR, QP
# as root). The device files are opened to all for the run and get their
# modes back afterwards.
# Runs against either driver. On a real instance it leaves out what changes
# the machine (see "What a test may change" in lib.sh): it needs the device
# files opened to nobody, so it skips there unless ERDMA_RECONFIGURE=1.

. "$(dirname "$0")/lib.sh"

NET=72
need_functions
DRV=$ERDMA_DRIVER
need_reconfigure "opens /dev/infiniband/uverbs* to every user for the run"
command -v python3 >/dev/null && python3 -c 'import pyverbs' 2>/dev/null ||
	ksft_skip_all "pyverbs (python3-pyverbs) is missing"
command -v setpriv >/dev/null || ksft_skip_all "setpriv (util-linux) is missing"
SEED=${SEED:-30}
SECS=${UVERBS_RANDOM_S:-30}
tmp=/tmp/uverbs_random
rm -rf "$tmp"
mkdir -p "$tmp"
chmod 755 "$tmp"
# Where nobody can read it (the payload's directory may be closed to it).
cp "$(dirname "$0")/uverbs_random.py" "$tmp/"
chmod 644 "$tmp/uverbs_random.py"

tap_header
nics_up $NET
load_driver

# The adapters: every RoCEv2 one with its GID index, every iWARP one.
devs=""
if adapter_pair roce 1; then
	devs="$IB_A:roce:$GID_A"
fi
if adapter_pair iwarp 1; then
	devs="$devs $IB_A:iwarp"
fi
[ -n "$devs" ] || ksft_skip_all "no RoCEv2 or iWARP adapter bound"
tap_diag "devices: $devs; seed $SEED (SEED=N to change), $SECS s"
objects=$(model_objects)

# The device files, open to all for the run; their modes come back at exit.
# (ib_uverbs makes them 0666; a udev rule may close them.) rmmod removes
# them: a file gone needs no undoing.
for f in /dev/infiniband/uverbs*; do
	[ -c "$f" ] || continue
	mode=$(stat -c %a "$f")
	[ "$mode" != 666 ] || continue
	undo_push "[ ! -e '$f' ] || chmod $mode '$f'"
	chmod 666 "$f"
done

tap_diag "RLIMIT_MEMLOCK (of nobody too): $(ulimit -l) KiB"
klog_mark mark
# Bounded: the workers' own time, then 60 s for the hung ones it kills.
timeout "$(ksft_within $((SECS + 90)))" setpriv --reuid=65534 --regid=65534 --clear-groups \
	--inh-caps=-all env HOME=/ python3 -B "$tmp/uverbs_random.py" run --seed "$SEED" \
	--seconds "$SECS" $devs >"$tmp/out" 2>&1
rc=$?
tap_points "$tmp/out"
tap_check "uverbs_random.py ended by itself (exit $rc; 124: its timeout)" [ "$rc" != 124 ]
grep -q '^ok \|^not ok ' "$tmp/out" || tap_not_ok "uverbs_random.py reported on no device"
lines=$(klog_since "$mark" | grep -c "$DRV\|erdma")
tap_diag "the kernel log gained $lines lines of the driver during the run"
klog_since "$mark" | grep "$DRV\|erdma" | head -n 5 | while read -r l; do tap_diag "$l"; done
for f in /dev/infiniband/uverbs*; do
	tap_diag "$f: $(stat -c '%a %U' "$f")"
done

# same_objects: the model holds what it held before (quietly: polled).
same_objects() { [ "$(model_objects)" = "$objects" ]; }
if [ -n "$objects" ]; then
	wait_for 10 same_objects
	tap_check "the model holds no more objects than before: $objects" model_no_more "$objects"
fi

for d in $devs; do
	ib=${d%%:*}
	tap_check "$ib: still works (context, PD, CQ, MR, QP)" verbs_smoke "$ib"
done
unload_and_finish "$DRV" $functions
