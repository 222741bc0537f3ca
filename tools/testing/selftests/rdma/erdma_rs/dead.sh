#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# A failed adapter (erdma_rs_hw 2.5), between two adapters A and B of this
# guest, under traffic from user space (a user context waiting for its
# asynchronous events on A, and ibv_rc_pingpong (RoCEv2) or rping (iWARP)
# between A and B) and, on RoCEv2, from the kernel (NVMe over RDMA: an
# nvmet-rdma target on A, the nvme-rdma host reading through B):
#   1. A reports a fatal error of its own (the model's "fatal": it drops its
#      queues and objects, and DEV_STATUS loses INIT_DONE). The driver's
#      watchdog notices; the user context hears IB_EVENT_DEVICE_FATAL; the
#      kernel's posted work completes as flushed (nvmet-rdma's queues drain);
#      the function is probed again and registered anew, and works: a new
#      user context and QP (iWARP), a new ibv_rc_pingpong, and the NVMe host
#      reconnects once the target listens again, and reads, with no reboot.
#   2. The adapters are gone, as when their model process dies: QEMU's
#      vfio-user proxy then fails every access, which the guest reads as
#      all-ones. The model's "gone" does that to each adapter (its "die", a
#      real SIGKILL of the process, is not used here: QEMU 11.1's proxy aborts
#      on an assertion of its own when the server goes away while it waits for
#      a reply, which ends the guest instead of testing the driver; see
#      erdma_rs_hw 2.5). The driver notices (registers read all-ones), the
#      user context hears IB_EVENT_DEVICE_FATAL, every adapter's RDMA device
#      goes (user contexts disassociated, the NVMe host's controller deleted
#      with it, or disconnected by hand if it was reconnecting to the target),
#      each function ends unbound in bounded time, and the module unloads.
# No kernel report at any step (the harness ends the guest on one). It must be
# the last test of its run: the adapters are gone afterwards. CM_PROTO=iwarp for
# iWARP adapters. Runs against our driver (the C driver has no recovery:
# erdma_rs_hw 2.5).

. "$(dirname "$0")/lib.sh"

need_functions
DRV=$ERDMA_DRIVER
PROTO=${CM_PROTO:-roce}
[ "$DRV" = erdma_rs ] || ksft_skip_all "the recovery is erdma_rs's"
need_reconfigure "makes the adapters fail and kills their model"
is_emulated || ksft_skip_all "the adapters are not the model's"
python3 -c 'import pyverbs' 2>/dev/null || ksft_skip_all "pyverbs (python3-pyverbs) is missing"
NVME=0
[ "$PROTO" = roce ] && command -v nvme >/dev/null && modinfo nvme_rdma >/dev/null 2>&1 && NVME=1
NET=72
NQN=nqn.2026-11.io.erdma-rs:dead
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:5b0e55c1-2f0a-4d3e-9a61-3f1c2d4b5e6f
NVMET=/sys/kernel/config/nvmet
SVC=4421
PORT=18600
tmp=/tmp/dead
rm -rf "$tmp"
mkdir -p "$tmp"

tap_header
nics_up $NET
# Looks every 200 ms: the default second would do, but the test waits less.
ERDMA_MODPROBE_ARGS="health_check_ms=200" load_driver
adapter_pair "$PROTO" || ksft_skip_all "fewer than two $PROTO adapters bound"
A=$IB_A B=$IB_B
BDF_A=$(basename "$(readlink -f "/sys/class/infiniband/$A/device")")
has_test_page "$BDF_A" || ksft_skip_all "$BDF_A has no test page"

# waiter.py IBDEV: a user context with a PD, CQ and RC QP on IBDEV, which
# prints "ready", then the first asynchronous event it gets ("event N").
cat >"$tmp/waiter.py" <<'EOF'
import sys
import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.qp import QP, QPCap, QPInitAttr
ctx = Context(name=sys.argv[1])
pd = PD(ctx)
cq = CQ(ctx, 16, None, None, 0)
QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=4, max_recv_wr=4)))
print("ready", flush=True)
ev = ctx.get_async_event()
print("event", ev.event_type, flush=True)
ev.ack()
EOF
# IBV_EVENT_DEVICE_FATAL
DEVICE_FATAL=8
# waiter NAME IBDEV: starts waiter.py on IBDEV (output in $tmp/NAME), sets
# WAITER; ready NAME waits until it has its objects (Python starts slowly
# under emulation: the traffic starts meanwhile).
waiter() {
	python3 "$tmp/waiter.py" "$2" >"$tmp/$1" 2>&1 &
	WAITER=$!
}
ready() { wait_for 30 grep -q ready "$tmp/$1" || tap_diag "$1: $(tr '\n' ';' <"$tmp/$1")"; }
# heard NAME: the waiter NAME got IBV_EVENT_DEVICE_FATAL.
heard() { grep -q "^event $DEVICE_FATAL\$" "$tmp/$1"; }
# registered BDF: BDF's function has a registered RDMA device with an active
# port again: sets IBDEV.
registered() {
	for _d in /sys/bus/pci/devices/"$1"/infiniband/*; do
		[ -d "$_d" ] || return 1
		grep -q ACTIVE "$_d/ports/1/state" 2>/dev/null || return 1
		IBDEV=${_d##*/}
		return 0
	done
	return 1
}
# within SECONDS COMMAND...: COMMAND succeeds within SECONDS of the guest's
# clock (polled every 0.1 s). Unlike wait_for, which counts its polls, it
# keeps to the time when busy-polling ibv_rc_pingpong processes starve the
# shell of the guest's one CPU.
within() {
	_end=$(($(uptime) + $1))
	shift
	while :; do
		"$@" && return 0
		[ "$(uptime)" -lt "$_end" ] || return 1
		sleep 0.1
	done
}
# quietly COMMAND...: COMMAND with its output dropped (the model's "ok" reply
# would read as a TAP line).
quietly() { "$@" >/dev/null; }
# logged MARK TEXT: the kernel log has TEXT after MARK.
logged() { klog_since "$1" | grep -q -- "$2"; }
# ended PID...: none of the processes runs any more.
ended() {
	for _p in "$@"; do ! kill -0 "$_p" 2>/dev/null || return 1; done
}
# pingpongs: traffic between $A (server) and $B for a long time, in the
# background: ibv_rc_pingpong on RoCEv2, rping (rdma_cm, the driver's MPA
# connection manager) on iWARP. Sets PP_S and PP_C.
pingpongs() {
	next_port
	if [ "$PROTO" = iwarp ]; then
		rping -s -a "$IP_A" -p "$PORT" -S 4096 >"$tmp/pp.srv" 2>&1 &
		PP_S=$!
		wait_for 20 cm_listening "$PORT"
		rping -c -a "$IP_A" -p "$PORT" -C 1000000 -S 4096 >"$tmp/pp.cli" 2>&1 &
		PP_C=$!
		return
	fi
	ibv_rc_pingpong -d "$A" -g "$GID_A" -p "$PORT" -n 100000000 -s 4096 >"$tmp/pp.srv" 2>&1 &
	PP_S=$!
	wait_for 20 listening "$PORT"
	ibv_rc_pingpong -d "$B" -g "$GID_B" -p "$PORT" -n 100000000 -s 4096 "$IP_A" >"$tmp/pp.cli" 2>&1 &
	PP_C=$!
}

# ---- NVMe over RDMA: target on A, host on B ------------------------------------

nvme_ctrl() {
	for _c in /sys/class/nvme/nvme*; do
		read -r _q <"$_c/subsysnqn" 2>/dev/null && [ "$_q" = "$NQN" ] && echo "${_c##*/}"
	done
}
ctrl_is() { read -r _s <"/sys/class/nvme/$CTRL/state" 2>/dev/null && [ "$_s" = "$1" ]; }
reads() { read -r _r _rest <"/sys/block/$NS/stat" 2>/dev/null && echo "$_r"; }
read_past() { _n=$(reads) && [ "$_n" -gt "$1" ]; }
live_again() { ctrl_is live && read_past "$1"; }
no_ctrl() { [ -z "$(nvme_ctrl)" ]; }
# namespace: $CTRL's namespace 1 has its block device: sets NS.
namespace() {
	NS=""
	for _b in /sys/block/nvme*n*; do
		[ -r "$_b/nsid" ] || continue
		case "$(readlink -f "$_b/device")" in */"$CTRL" | */"$CTRL"/*) ;; *) continue ;; esac
		read -r _id <"$_b/nsid"
		[ "$_id" = 1 ] && NS=${_b##*/}
	done
	[ -n "$NS" ] && [ -b "/dev/$NS" ]
}
nvme_up() {
	modprobe null_blk nr_devices=1 gb=1 && modprobe nvmet_rdma && modprobe nvme_rdma || return 1
	grep -q ' /sys/kernel/config ' /proc/mounts || mount -t configfs configfs /sys/kernel/config || return 1
	wait_for 10 test -b /dev/nullb0 || return 1
	_s=$NVMET/subsystems/$NQN
	mkdir "$_s" && echo 1 >"$_s/attr_allow_any_host" && mkdir "$_s/namespaces/1" &&
		printf /dev/nullb0 >"$_s/namespaces/1/device_path" && echo 1 >"$_s/namespaces/1/enable" &&
		mkdir "$NVMET/ports/2" && echo rdma >"$NVMET/ports/2/addr_trtype" &&
		echo ipv4 >"$NVMET/ports/2/addr_adrfam" && echo "$IP_A" >"$NVMET/ports/2/addr_traddr" &&
		echo $SVC >"$NVMET/ports/2/addr_trsvcid" &&
		ln -s "$_s" "$NVMET/ports/2/subsystems/$NQN" || return 1
	wait_for 20 cm_listening $SVC || { tap_diag "nvmet-rdma does not listen"; return 1; }
	# Reconnect every 5 s, give up after 120 s. (Not every second: a
	# reconnect attempt under way on an RDMA device that goes meets
	# nvme-rdma's use-after-free, see step 2.)
	timeout "$(ksft_within 90)" nvme connect -t rdma -a "$IP_A" -s $SVC -w "$IP_B" -n "$NQN" \
		-q "$HOSTNQN" -i 1 -c 5 -l 120 >"$tmp/connect" 2>&1 ||
		{ tap_diag "nvme connect: $(tr '\n' ';' <"$tmp/connect")"; return 1; }
	CTRL=$(nvme_ctrl)
	[ -n "$CTRL" ] || return 1
	wait_for 30 namespace || { tap_diag "no namespace block device of $CTRL ($(ls /sys/block))"; return 1; }
	tap_diag "$CTRL: $(cat /sys/class/nvme/$CTRL/address), namespace $NS"
}
# relisten: the port listens again, on the adapter now registered for its
# address (nvmet-rdma drops a listener whose device goes, and listens again
# only when the port is enabled anew).
relisten() {
	rm "$NVMET/ports/2/subsystems/$NQN" && ln -s "$NVMET/subsystems/$NQN" "$NVMET/ports/2/subsystems/$NQN" &&
		wait_for 20 cm_listening $SVC
}
# reader: reads the namespace until the test ends it, through failures (the
# controller reconnecting).
reader() {
	while [ ! -e "$tmp/stop" ]; do
		dd if="/dev/$NS" of=/dev/null bs=64k count=64 iflag=direct 2>/dev/null || sleep 0.5
	done
}
nvme_down() {
	rm -f "$NVMET/ports/2/subsystems/$NQN"
	rmdir "$NVMET/ports/2" "$NVMET/subsystems/$NQN/namespaces/1" "$NVMET/subsystems/$NQN" 2>/dev/null
	rmmod nvme_rdma nvme_fabrics 2>/dev/null
	rmmod nvmet_rdma nvmet null_blk
}

if [ $NVME = 1 ]; then
	tap_check "NVMe over RDMA: target on $A, host on $B, connected" nvme_up
	reader &
	READER=$!
fi

# ---- 1. a fatal error of the adapter's own, and the recovery -------------------

waiter user.1 "$A"
pingpongs
PIDS="$WAITER $PP_S $PP_C"
ready user.1
[ $NVME = 1 ] && before=$(reads)
tap_check "traffic before the failure" sh -c "kill -0 ${PIDS% } ${READER:-}"

klog_mark mark
t0=$(uptime)
tap_check "$BDF_A: the model fails the function ('fatal')" quietly model_cmd "$BDF_A" fatal
tap_check "$A: the driver notices within 5 s" within 5 logged "$mark" 'reports a fatal error'
tap_check "$A: its user context hears IB_EVENT_DEVICE_FATAL" within 10 heard user.1
tap_check "$BDF_A: probed again and registered within 30 s" within 30 registered "$BDF_A"
tap_diag "$BDF_A: registered as $IBDEV $(($(uptime) - t0)) s after the failure ($(klog_since "$mark" | grep -c .) kernel log lines)"
A=$IBDEV
# The old processes were disassociated: they end when told to.
kill $PIDS 2>/dev/null
tap_check "the old processes on the failed adapter end when killed" within 10 ended $PIDS
wait $PIDS 2>/dev/null
tap_check "$A: a user context, PD, CQ, MR and QP again" verbs_smoke "$A"
if [ "$PROTO" = roce ]; then
	find_a() { GID_A=$(gid_index "$A" "$IP_A"); }
	wait_for 20 find_a || tap_diag "$A: no RoCEv2 GID for $IP_A yet"
	next_port
	tap_check "a new ibv_rc_pingpong $A <-> $B works" run_pair pp "$PORT" 'bytes in' \
		ibv_rc_pingpong -d "$A" -g "$GID_A" -p "$PORT" -s 4096 -n 100 -c -- \
		ibv_rc_pingpong -d "$B" -g "$GID_B" -p "$PORT" -s 4096 -n 100 -c "$IP_A"
fi
if [ $NVME = 1 ]; then
	tap_check "NVMe: the target's port listens again on $A" relisten
	tap_check "NVMe: the host reconnected to the recovered target and reads again" within 60 live_again "$before"
fi

# ---- 2. the adapters are gone -------------------------------------------------------

waiter user.2 "$A"
pingpongs
PIDS="$WAITER $PP_S $PP_C"
ready user.2
klog_mark mark
t0=$(uptime)
# B first, the NVMe host's adapter, while its controller is connected: its
# removal deletes the controller. Were A (the target's) first, the host would
# be reconnecting through B when B went, and nvme-rdma's removal reads the
# device of a reconnecting controller after its teardown freed it (a
# use-after-free of nvme-rdma's, that then hangs the removal; written up in
# Documentation/infiniband/erdma_rs_selftests.rst, "A failed adapter").
BDF_B=$(basename "$(readlink -f "/sys/class/infiniband/$B/device")")
! has_test_page "$BDF_B" || model_cmd "$BDF_B" gone >/dev/null
for _f in $functions; do
	[ "$_f" = "$BDF_B" ] || ! has_test_page "$_f" || model_cmd "$_f" gone >/dev/null
done
tap_diag "the adapters are gone"
none_bound() {
	for _f in $functions; do ! is_bound "$_f" || return 1; done
	for _d in /sys/class/infiniband/*; do ! [ -e "$_d" ] || return 1; done
}
tap_check "every adapter's RDMA device goes and its function ends unbound within 30 s" within 30 none_bound
tap_diag "unbound $(($(uptime) - t0)) s after the adapters went"
tap_check "the driver said why" logged "$mark" 'does not answer'
tap_check "$A: its user context heard IB_EVENT_DEVICE_FATAL" heard user.2
kill $PIDS 2>/dev/null
tap_check "the processes on the dead adapters end when killed" within 10 ended $PIDS
wait $PIDS 2>/dev/null
if [ $NVME = 1 ]; then
	# The host's controller goes with its device if it was connected through it; if it
	# was reconnecting (the target went first), it has no device and would retry until
	# its controller loss timeout: then it is disconnected, as an administrator would.
	gone_ctrl() {
		within 20 no_ctrl && return 0
		tap_diag "$CTRL: $(cat "/sys/class/nvme/$CTRL/state" 2>/dev/null), disconnected by hand"
		timeout 30 nvme disconnect -n "$NQN" >/dev/null 2>&1
		within 30 no_ctrl
	}
	tap_check "NVMe: the host's controller goes (with its device, or disconnected)" gone_ctrl
	touch "$tmp/stop"
	tap_check "NVMe: the reader ends" within 20 ended "$READER"
	wait "$READER" 2>/dev/null
	tap_check "nvme-rdma, nvmet-rdma and null_blk unload" nvme_down
fi
tap_check "rmmod $DRV within 10 s" timeout 10 rmmod "$DRV"
_trouble=$(kernel_trouble)
[ -z "$_trouble" ] || tap_diag "$_trouble"
tap_check "no oops, BUG or WARNING in the kernel log" [ -z "$_trouble" ]
tap_finish
