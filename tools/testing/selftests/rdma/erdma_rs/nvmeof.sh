#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# NVMe over Fabrics (RDMA), the kernel's storage consumer of rdma_cm: an
# nvmet-rdma target exports a null_blk namespace and a RAM disk (brd) on one
# adapter, the nvme-rdma host reaches them through the other: nvme
# discover and connect (one default, one write and one poll queue), fio
# random writes verified afterwards (4 KiB and 128 KiB blocks, several jobs,
# libaio and polled I/O) on the RAM disk, a controller reset and the loss of
# the target's port in the middle of fio (the host reconnects and fio's data
# still verifies), disconnect, and every module unloaded again (nvme-rdma,
# nvmet-rdma, nvmet, null_blk, brd, then the RDMA driver) with no kernel report
# and, where the model has its test page, no QP, CQ or MR left behind.
#
# NVMEOF_MODE=local (the default): target and host are adapters A and B of
# this guest. NVMEOF_MODE=xguest: two guests with one adapter each, roles by
# MAC as in xguest.sh (the guest whose MAC ends in XGUEST_SERVER_BYTE is the
# target); the host tells the target it is done with one rping. The controller
# reset in the middle of fio runs in both modes; the port loss, which needs the
# target to act while the host's fio runs, only in local mode.
# On iWARP adapters (CM_PROTO=iwarp) the same, connected by the driver's MPA
# connection manager. In a mixed pair (XGUEST_DRIVERS="TARGET HOST", see
# xguest_driver in lib.sh) each guest runs its own driver.
# Runs against either driver (ERDMA_DRIVER=erdma_rs or erdma).
# It loads storage modules and exports a RAM disk on the adapters' network:
# only where the test may change the machine (see "What a test may change"
# in lib.sh). What it set up goes when it exits; modules that were loaded
# before it stay.

. "$(dirname "$0")/lib.sh"

need_functions
[ "${NVMEOF_MODE:-local}" = local ] || need_peer_guest
need_reconfigure "loads nvmet, nvme-rdma, null_blk and brd and exports a RAM disk on the adapters' network"
[ "${NVMEOF_MODE:-local}" = local ] || xguest_driver
DRV=$ERDMA_DRIVER
PROTO=${CM_PROTO:-roce}
NET=56
[ "$PROTO" = iwarp ] && NET=60
MODE=${NVMEOF_MODE:-local}
NQN=nqn.2026-11.io.erdma-rs:nvmeof
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:0e4d0a5c-7f63-4c1a-9d2e-45e2b1a7c0de
NVMET=/sys/kernel/config/nvmet
SVC=4420
DONE_PORT=18790
command -v nvme >/dev/null || ksft_skip_all "nvme (nvme-cli) is missing"
command -v fio >/dev/null || ksft_skip_all "fio is missing"
modinfo nvme_rdma >/dev/null 2>&1 && modinfo nvmet_rdma >/dev/null 2>&1 ||
	ksft_skip_all "the kernel has no nvme-rdma or nvmet-rdma module"
tmp=/tmp/nvmeof
rm -rf "$tmp"
mkdir -p "$tmp"

# ---- the target ---------------------------------------------------------------

# target_up IP: nvmet exports subsystem $NQN with namespace 1 on null_blk and
# namespace 2 on a 64 MiB RAM disk, on port 1 (RDMA, IP:4420).
target_up() {
	modprobe_once null_blk nr_devices=1 gb=1 && modprobe_once brd rd_nr=1 rd_size=65536 &&
		modprobe_once nvmet_rdma || return 1
	mount_once configfs /sys/kernel/config || return 1
	undo_push "target_down"
	wait_for 10 test -b /dev/nullb0 && wait_for 10 test -b /dev/ram0 ||
		{ tap_diag "no /dev/nullb0 or /dev/ram0"; return 1; }
	s=$NVMET/subsystems/$NQN
	mkdir "$s" && echo 1 >"$s/attr_allow_any_host" &&
		mkdir "$s/namespaces/1" && printf /dev/nullb0 >"$s/namespaces/1/device_path" &&
		echo 1 >"$s/namespaces/1/enable" &&
		mkdir "$s/namespaces/2" && printf /dev/ram0 >"$s/namespaces/2/device_path" &&
		echo 1 >"$s/namespaces/2/enable" || return 1
	mkdir "$NVMET/ports/1" && echo rdma >"$NVMET/ports/1/addr_trtype" &&
		echo ipv4 >"$NVMET/ports/1/addr_adrfam" && echo "$1" >"$NVMET/ports/1/addr_traddr" &&
		echo $SVC >"$NVMET/ports/1/addr_trsvcid" || return 1
	port_link
}

# port_link / port_unlink: the subsystem appears on / disappears from port 1
# (the port listens while a subsystem is linked to it).
port_link() {
	ln -s "$NVMET/subsystems/$NQN" "$NVMET/ports/1/subsystems/$NQN" || return 1
	wait_for 20 cm_listening $SVC || { tap_diag "nvmet-rdma does not listen on $SVC"; return 1; }
}
port_unlink() { rm "$NVMET/ports/1/subsystems/$NQN"; }

# target_down: the configuration goes, in reverse (whatever of it exists).
target_down() {
	_ok=0
	[ ! -e "$NVMET/ports/1/subsystems/$NQN" ] || port_unlink || _ok=1
	[ ! -d "$NVMET/ports/1" ] || rmdir "$NVMET/ports/1" || _ok=1
	for _n in 1 2; do
		_d=$NVMET/subsystems/$NQN/namespaces/$_n
		[ -d "$_d" ] || continue
		echo 0 >"$_d/enable" && rmdir "$_d" || _ok=1
	done
	[ ! -d "$NVMET/subsystems/$NQN" ] || rmdir "$NVMET/subsystems/$NQN" || _ok=1
	return $_ok
}

# ---- the host -----------------------------------------------------------------

# discover IP HOST-IP: the discovery log lists $NQN on RDMA at IP:4420.
discover() {
	timeout "$(ksft_within 60)" nvme discover -t rdma -a "$1" -s $SVC -w "$2" -q "$HOSTNQN" >"$tmp/discover" 2>&1
	rc=$?
	grep -q "subnqn: *$NQN" "$tmp/discover" && grep -q "traddr: *$1" "$tmp/discover" &&
		[ $rc = 0 ] && return 0
	tap_diag "nvme discover (exit $rc): $(tr '\n' ';' <"$tmp/discover" | tail -c 1000)"
	return 1
}

# connect IP HOST-IP: the host connects to $NQN (one default, one write and
# one poll I/O queue; reconnect every second, give up after 60 s) and both
# namespaces appear: sets CTRL, NS_NULL and NS_RAM.
connect() {
	undo_push "[ -z \"\$(nvme_ctrls)\" ] || nvme disconnect -n '$NQN'"
	timeout "$(ksft_within 90)" nvme connect -t rdma -a "$1" -s $SVC -w "$2" -n "$NQN" -q "$HOSTNQN" \
		-i 1 -W 1 -P 1 -c 1 -l 60 >"$tmp/connect" 2>&1 ||
		{ tap_diag "nvme connect (exit $?): $(tr '\n' ';' <"$tmp/connect")"; return 1; }
	CTRL=$(nvme_ctrls)
	[ -n "$CTRL" ] || { tap_diag "no controller of $NQN: $(tr '\n' ';' <"$tmp/connect")"; return 1; }
	wait_for 30 namespaces || { tap_diag "$CTRL: namespaces: $(ls /sys/block)"; return 1; }
	tap_diag "$CTRL: $(cat /sys/class/nvme/$CTRL/address), namespace 1 $NS_NULL, namespace 2 $NS_RAM"
}

# nvme_ctrls: the controllers connected to $NQN.
nvme_ctrls() {
	for _c in /sys/class/nvme/nvme*; do
		read -r _q <"$_c/subsysnqn" 2>/dev/null && [ "$_q" = "$NQN" ] && echo "${_c##*/}"
	done
}

# namespaces: both namespaces of $CTRL have their block devices. With
# native NVMe multipath (CONFIG_NVME_MULTIPATH, as Debian's kernels have it)
# a namespace is the block device of its subsystem, nvmeXnY, over one hidden
# device per path, nvmeXcZnY (its multipath/ links): the namespace is
# $CTRL's if one of its paths is.
namespaces() {
	NS_NULL="" NS_RAM=""
	for _b in /sys/block/nvme*n*; do
		[ -r "$_b/nsid" ] || continue
		case "${_b##*/}" in nvme*c*n*) continue ;; esac
		_mine=0
		for _p in "$_b" "$_b"/multipath/*; do
			case "$(readlink -f "$_p/device")" in */"$CTRL" | */"$CTRL"/*) _mine=1 ;; esac
		done
		[ $_mine = 1 ] || continue
		read -r _id <"$_b/nsid"
		[ "$_id" = 1 ] && NS_NULL=${_b##*/}
		[ "$_id" = 2 ] && NS_RAM=${_b##*/}
	done
	[ -n "$NS_NULL" ] && [ -n "$NS_RAM" ] && [ -b "/dev/$NS_RAM" ]
}

# ctrl_is STATE: the controller is in STATE (live, connecting, resetting, ...).
ctrl_is() { read -r _s <"/sys/class/nvme/$CTRL/state" && [ "$_s" = "$1" ]; }

# queues: the controller runs the admin queue and three I/O queues over RDMA
# from HOST-IP (the address shows host_traddr).
queues() {
	read -r _t <"/sys/class/nvme/$CTRL/transport"
	read -r _n <"/sys/class/nvme/$CTRL/queue_count"
	read -r _a <"/sys/class/nvme/$CTRL/address"
	tap_diag "$CTRL: transport $_t, $_n queues, $_a"
	[ "$_t" = rdma ] && [ "$_n" = 4 ] && case "$_a" in *"host_traddr=$1"*) true ;; *) false ;; esac
}

# rdma_qps IBDEV: the number of QPs rdma_cm made for kernel users on IBDEV
# (resource tracking names them all "[rdma_cm]", the host's and the
# target's alike).
rdma_qps() { rdma resource show qp link "$1/1" 2>/dev/null | grep -c "comm \[rdma_cm\]"; }

# on_devices HOST-IB TARGET-IB: the host's 4 queues are QPs on HOST-IB, the
# target's 4 on TARGET-IB (so the traffic crosses from one adapter to the
# other; on one adapter, both would be on TARGET-IB).
on_devices() {
	_h=$(rdma_qps "$1") _t=$(rdma_qps "$2")
	tap_diag "rdma_cm's QPs on $1: $_h, on $2: $_t"
	[ "$_h" = 4 ] && [ "$_t" = 4 ] && return 0
	tap_diag "$(rdma resource show qp | tr '\n' ';')"
	return 1
}

# fio runs its jobs as threads of one process (--thread; a process costs
# under TCG). It needs SysV IPC all the same (its job table is a shmget
# segment: CONFIG_SYSVIPC, kernel/configs/erdma_rs.config).
# fio_verify NAME ARGS...: fio writes at random then reads everything back
# and checks it (crc32c with the block's offset in its header); any I/O or
# verification error fails it.
fio_verify() {
	_name=$1
	shift
	timeout "$(ksft_within 600)" fio --thread --name="$_name" --filename="/dev/$NS_RAM" --direct=1 --rw=randwrite \
		--verify=crc32c --verify_fatal=1 --do_verify=1 --group_reporting "$@" \
		>"$tmp/$_name" 2>&1
	_rc=$?
	if [ $_rc != 0 ] || ! grep -q 'err= 0' "$tmp/$_name" || grep -q 'verify:\|bad magic\|crc32c:' "$tmp/$_name"; then
		tap_diag "fio $_name (exit $_rc): $(grep -v '^ *$' "$tmp/$_name" | tail -n 25 | tr '\n' ';' | tail -c 1500)"
		return 1
	fi
	tap_diag "fio $_name: $(grep -E '^ *(write|read):' "$tmp/$_name" | tr -s ' ' | tr '\n' ';')"
}

# writes NS: writes completed on block device NS so far (/sys/block/NS/stat).
writes() { read -r _r1 _r2 _r3 _r4 _w _rest <"/sys/block/$1/stat"; echo "$_w"; }
# written_past N: more than N writes completed on $NS_RAM.
written_past() { read -r _r1 _r2 _r3 _r4 _w _rest <"/sys/block/$NS_RAM/stat" && [ "$_w" -gt "$1" ]; }
# written_or_gone N PID: written_past N, or process PID has ended.
written_or_gone() { written_past "$1" || ! kill -0 "$2" 2>/dev/null; }

# disrupted NAME ACTION: fio (one job, 4 KiB random writes then verify) runs
# in the background; once it has written, ACTION disrupts the connection
# while fio still runs; fio must then finish, and its data verify. Its
# writes (not its reads) are held to 400 a second (2.5 s at least for the
# 1,024): a release kernel otherwise writes them all before the disruption
# (the debug kernel under TCG writes fewer than that anyway).
disrupted() {
	_name=$1 _action=$2
	_start=$(writes "$NS_RAM")
	timeout "$(ksft_within 600)" fio --thread --name="$_name" --filename="/dev/$NS_RAM" --direct=1 --rw=randwrite \
		--ioengine=libaio --iodepth=8 --bs=4k --size=4M --offset=32M --rate_iops=,400 \
		--verify=crc32c --verify_fatal=1 --do_verify=1 >"$tmp/$_name" 2>&1 &
	_fio=$!
	wait_for 60 written_or_gone $((_start + 200)) $_fio || tap_diag "$_name: fio has not written 200 blocks in 60 s"
	_ok=0
	if kill -0 $_fio 2>/dev/null; then
		tap_diag "$_name: $_action after $(($(writes "$NS_RAM") - _start)) writes"
		$_action || _ok=1
	else
		tap_diag "$_name: fio ended before the disruption: the test proves nothing"
		_ok=1
	fi
	wait $_fio
	_rc=$?
	if [ $_rc != 0 ] || ! grep -q 'err= 0' "$tmp/$_name"; then
		tap_diag "fio $_name (exit $_rc): $(grep -v '^ *$' "$tmp/$_name" | tail -n 25 | tr '\n' ';' | tail -c 1500)"
		_ok=1
	fi
	[ $_ok = 1 ] || tap_diag "fio $_name: $(grep -E '^ *(write|read):' "$tmp/$_name" | tr -s ' ' | tr '\n' ';')"
	return $_ok
}

# do_reset: the host resets the controller (reset_controller returns once the
# queues are connected again).
do_reset() {
	echo 1 >"/sys/class/nvme/$CTRL/reset_controller" || { tap_diag "reset_controller failed"; return 1; }
	ctrl_is live || { tap_diag "$CTRL is $(cat /sys/class/nvme/$CTRL/state) after the reset"; return 1; }
}

# port_loss: the target drops the subsystem from its port (it disconnects
# the host's queues and stops listening); the host's reconnect loop fails
# until the subsystem comes back 3 s later, then reconnects.
port_loss() {
	klog_mark _mark
	port_unlink || return 1
	wait_for 30 ctrl_is connecting ||
		{ tap_diag "$CTRL is $(cat /sys/class/nvme/$CTRL/state), not connecting"; port_link; return 1; }
	sleep 3
	port_link || return 1
	wait_for 60 ctrl_is live || { tap_diag "$CTRL is $(cat /sys/class/nvme/$CTRL/state) 60 s after the port came back"; return 1; }
	_after=$(klog_since "$_mark" | grep "$CTRL: Successfully reconnected")
	tap_diag "$(echo "$_after" | tail -n 1)"
	[ -n "$_after" ]
}

# disconnect: nvme disconnect removes the controller.
disconnect() {
	timeout "$(ksft_within 60)" nvme disconnect -n "$NQN" >"$tmp/disconnect" 2>&1 &&
		grep -q 'disconnected 1 controller' "$tmp/disconnect" ||
		{ tap_diag "nvme disconnect: $(tr '\n' ';' <"$tmp/disconnect")"; return 1; }
	wait_for 30 sh -c "[ ! -e /sys/class/nvme/$CTRL ]"
}

# null_reads: random reads of the null_blk namespace complete without error.
null_reads() {
	timeout "$(ksft_within 120)" fio --thread --name=null --filename="/dev/$NS_NULL" --direct=1 --rw=randread \
		--ioengine=libaio --iodepth=8 --bs=4k --size=4M >"$tmp/null" 2>&1 && grep -q 'err= 0' "$tmp/null" ||
		{ tap_diag "fio null: $(tail -n 20 "$tmp/null" | tr '\n' ';')"; return 1; }
}

# host_tests IP HOST-IP: everything the host does, given a target at IP.
host_tests() {
	tap_check "nvme discover lists $NQN at $1 (from $2)" discover "$1" "$2"
	tap_check "nvme connect $NQN: two namespaces" connect "$1" "$2" || return 1
	tap_check "$CTRL: RDMA transport, admin and 3 I/O queues, from $2" queues "$2"
	tap_check "fio 4 KiB random writes, 2 jobs x 2 MiB, iodepth 8, verified" \
		fio_verify rand4k --ioengine=libaio --bs=4k --size=2M --offset_increment=4M --numjobs=2 --iodepth=8
	tap_check "fio 128 KiB random writes, 2 jobs x 8 MiB, iodepth 4, verified" \
		fio_verify rand128k --ioengine=libaio --bs=128k --size=8M --offset=8M --offset_increment=8M \
		--numjobs=2 --iodepth=4
	tap_check "fio 4 KiB random writes, polled (poll queue, pvsync2 --hipri), verified" \
		fio_verify poll4k --ioengine=pvsync2 --hipri --bs=4k --size=2M --offset=24M
	tap_check "fio 4 KiB random reads of the null_blk namespace, 4 MiB" null_reads
}


# unload MODULE... : modprobe -r each (with the modules only it used) that
# was not loaded before the test.
unload_mods() {
	for _m in "$@"; do
		grep -q "^$_m " /proc/modules || continue
		case " $mods_before " in *" $_m "*) continue ;; esac
		modprobe -r "$_m" || { tap_diag "modprobe -r $_m: $(grep "^$_m " /proc/modules)"; return 1; }
	done
}

# The storage modules loaded before the test: they stay.
mods_before=$(awk '$1 ~ /^(nvme_rdma|nvmet_rdma|nvmet|null_blk|brd)$/ { printf "%s ", $1 }' /proc/modules)
tap_header
nics_up $NET
load_driver
mount_once configfs /sys/kernel/config

role=""
if [ "$MODE" = local ]; then
	adapter_pair "$PROTO" || ksft_skip_all "fewer than two $PROTO adapters bound"
	role=both
else
	xguest_adapter $NET || ksft_skip_all "no adapter bound"
	[ $ROLE = server ] && role=target || role=host
	# This test's own addresses (a NIC keeps those of the tests before).
	ib=$IB server_ip=$SERVER_IP my_ip=$MY_IP
fi
objects=$(model_objects)
tap_check "modprobe nvme_rdma" modprobe_once nvme_rdma

case $role in
both)
	tap_check "nvmet-rdma target on $IB_A ($IP_A:$SVC): null_blk and brd namespaces" target_up "$IP_A"
	host_tests "$IP_A" "$IP_B"
	if [ -n "${CTRL:-}" ]; then
		tap_check "$CTRL: host queues on $IB_B, target queues on $IB_A" on_devices "$IB_B" "$IB_A"
		tap_check "fio with a controller reset in the middle: finishes and verifies" disrupted reset4k do_reset
		tap_check "fio with the target's port gone for 3 s: the host reconnects, fio verifies" \
			disrupted portloss4k port_loss
		tap_check "nvme disconnect $NQN" disconnect
	fi
	tap_check "nvmet configuration removed" target_down
	;;
target)
	tap_check "nvmet-rdma target on $ib ($server_ip:$SVC): null_blk and brd namespaces" target_up "$server_ip"
	# The host says it is done (or gave up) with one rping.
	timeout "$(ksft_within 900)" rping -s -a "$server_ip" -p $DONE_PORT -C 1 >"$tmp/done" 2>&1
	tap_check "the host reported the end of its tests" [ $? = 0 ]
	tap_check "nvmet configuration removed" target_down
	;;
host)
	# The target guest may still be setting up: discover until it answers.
	tries=40
	until timeout "$(ksft_within 30)" nvme discover -t rdma -a "$server_ip" -s $SVC -w "$my_ip" -q "$HOSTNQN" >/dev/null 2>&1 ||
		[ $tries = 0 ] || ! ksft_has_time 10; do
		tries=$((tries - 1))
		sleep 5
	done
	host_tests "$server_ip" "$my_ip"
	if [ -n "${CTRL:-}" ]; then
		tap_check "fio with a controller reset in the middle: finishes and verifies" disrupted reset4k do_reset
		tap_check "nvme disconnect $NQN" disconnect
	fi
	tries=30
	until timeout "$(ksft_within 20)" rping -c -a "$server_ip" -I "$my_ip" -p $DONE_PORT -C 1 >"$tmp/done" 2>&1 ||
		[ $tries = 0 ] || ! ksft_has_time 5; do
		tries=$((tries - 1))
		sleep 2
	done
	[ $tries != 0 ] || tap_diag "the target did not take the end-of-tests rping: $(tr '\n' ';' <"$tmp/done")"
	;;
esac

tap_check "unload nvme-rdma, nvmet-rdma, nvmet, null_blk and brd" \
	unload_mods nvme_rdma nvmet_rdma nvmet null_blk brd
[ -z "$objects" ] ||
	tap_check "the model holds no more objects than before: $objects" model_no_more "$objects" pool
unload_and_finish "$DRV" $functions
