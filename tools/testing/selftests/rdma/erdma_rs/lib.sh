# SPDX-License-Identifier: GPL-2.0
# Helpers for the erdma_rs selftests: kselftest TAP output and adapter lookup.
# Source it from a test; it needs only a POSIX shell, kmod and sysfs.

KSFT_PASS=0
KSFT_FAIL=1
KSFT_SKIP=4

# The driver under test: erdma_rs (ours) or erdma (the upstream C driver).
# Where a test may not change the machine (see "What a test may change"
# below), the driver already bound to the adapters, unless this names one.
_erdma_driver_given=${ERDMA_DRIVER:+1}
ERDMA_DRIVER=${ERDMA_DRIVER:-erdma_rs}
# Optional list of the adapters the harness created: "index mac proto version".
ERDMA_ADAPTERS=${ERDMA_ADAPTERS:-${ERDMA_PAYLOAD:-/nonexistent}/adapters}

_tap_n=0
_tap_failed=0

# The plan is printed last (TAP 13 allows it), so that the number of test
# points may depend on what the test finds.
tap_header() {
	echo "TAP version 13"
	_tap_last=
	_tap_took
}

tap_diag() { echo "# $*"; }

# _tap_took: after a test point, how long it (and the work since the point
# before) took, when that is 3 s or more: where a scenario's time goes.
_tap_last=
_tap_took() {
	read -r _tap_up _tap_idle </proc/uptime
	_tap_up=${_tap_up%.*}
	[ -z "$_tap_last" ] || [ $((_tap_up - _tap_last)) -lt 3 ] ||
		echo "# took $((_tap_up - _tap_last)) s"
	_tap_last=$_tap_up
}
_tap_took

tap_ok() {
	_tap_n=$((_tap_n + 1))
	echo "ok $_tap_n $*"
	_tap_took
}

tap_not_ok() {
	_tap_n=$((_tap_n + 1))
	_tap_failed=$((_tap_failed + 1))
	echo "not ok $_tap_n $*"
	_tap_took
}

tap_skip() {
	_tap_n=$((_tap_n + 1))
	echo "ok $_tap_n $1 # SKIP $2"
	_tap_took
}

# tap_check DESCRIPTION COMMAND...: one test point, passing when COMMAND does.
tap_check() {
	_desc=$1
	shift
	if "$@"; then
		tap_ok "$_desc"
	else
		tap_not_ok "$_desc"
	fi
}

tap_finish() {
	echo "1..$_tap_n"
	[ "$_tap_failed" -eq 0 ] && exit $KSFT_PASS
	tap_diag "$_tap_failed of $_tap_n tests failed"
	exit $KSFT_FAIL
}

ksft_skip_all() {
	echo "TAP version 13"
	echo "1..0 # SKIP $*"
	exit $KSFT_SKIP
}

# Every process costs about 0.3 s on the debug kernel under TCG:
# the helpers below read sysfs with the shell's read, not with cat, and do
# their arithmetic in the shell.

# PCI addresses of every eRDMA function (1ded:107f).
erdma_functions() {
	for _d in /sys/bus/pci/devices/*; do
		read -r _v <"$_d/vendor" && read -r _p <"$_d/device" &&
			[ "$_v" = 0x1ded ] && [ "$_p" = 0x107f ] && echo "${_d##*/}"
	done
	return 0
}

# True when PCI function $1 is bound to the driver under test (no fork: this
# runs in loops, and every process costs under TCG).
is_bound() { [ -e "/sys/bus/pci/drivers/$ERDMA_DRIVER/$1" ]; }

# Expected adapters as "mac proto version options" lines (version "-" = model
# default; options "k=v,..." as given to the model, "-" = none).
expected_adapters() {
	[ -r "$ERDMA_ADAPTERS" ] || return 0
	# Shell builtins only: a process costs about 0.1 s in a debug-kernel guest.
	while read -r _ea_i _ea_mac _ea_proto _ea_ver _ea_opts; do
		case "$_ea_i" in "#"* | "") continue ;; esac
		echo "$_ea_mac $_ea_proto $_ea_ver ${_ea_opts:--}"
	done <"$ERDMA_ADAPTERS"
	return 0
}

# adapter_opt MAC KEY DEFAULT: the model option KEY of the adapter with MAC.
adapter_opt() {
	_ao_v=$3
	[ -r "$ERDMA_ADAPTERS" ] || { echo "$_ao_v"; return 0; }
	while read -r _ao_i _ao_mac _ao_proto _ao_ver _ao_opts; do
		[ "$_ao_mac" = "$1" ] || continue
		_ao_ifs=$IFS
		IFS=,
		for _ao_kv in $_ao_opts; do
			case "$_ao_kv" in "$2="*) _ao_v=${_ao_kv#*=} ;; esac
		done
		IFS=$_ao_ifs
	done <"$ERDMA_ADAPTERS"
	echo "$_ao_v"
}

# klog_mark VAR: writes a line of its own to the kernel log and sets VAR to
# it; klog_since MARK: the kernel log after that line (empty once the log
# has no room left for it). Counting lines of the whole log goes wrong once
# it is full: new lines push old ones out.
_klog_n=0
klog_mark() {
	_klog_n=$((_klog_n + 1))
	_km="erdma selftests mark $$.$_klog_n"
	echo "$_km" >/dev/kmsg 2>/dev/null
	eval "$1=\$_km"
}
klog_since() { dmesg | sed -n "/$1\$/,\$p" | tail -n +2; }

# bind_fails BDF PATTERN [ERRNO-TEXT]: binding BDF to the driver under test
# fails (with ERRNO-TEXT, e.g. "No such device", if given), BDF stays unbound,
# and the kernel log gains exactly one line matching PATTERN.
bind_fails() {
	klog_mark _bf_mark
	# /bin/echo reports the errno; the shell builtin says "I/O error" for all.
	if err=$(/bin/echo "$1" 2>&1 >"/sys/bus/pci/drivers/$ERDMA_DRIVER/bind"); then
		tap_diag "binding $1 succeeded"
		return 1
	fi
	case "$err" in
	*"${3:-}"*) ;;
	*) tap_diag "binding $1 failed with '$err', expected '$3'"; return 1 ;;
	esac
	! is_bound "$1" || { tap_diag "$1 is bound"; return 1; }
	_bf_new=$(klog_since "$_bf_mark" | grep -c "$2")
	[ "$_bf_new" -eq 1 ] || { tap_diag "$_bf_new new '$2' lines in the kernel log, expected 1"; return 1; }
}

# Kernel reports: the headlines of scripts/vmrun.py's KERNEL_REPORT (which
# says why these and not, e.g., "Call Trace:" alone), in the kernel log. The
# harness ends a guest on any of them; tests check too, to say which of their
# steps made one when the guest lives on (a kernel run by hand).
KERNEL_REPORT_ERE='^\[ *[0-9]+\.[0-9]+\] ((watchdog|rcu): )?(BUG: |BUG [^ ]+ \(.*\): |kernel BUG at |WARNING: |-+\[ cut here \]-+|Oops|general protection fault|Kernel panic|UBSAN: |INFO: task .+ blocked|INFO: rcu[a-z_]* (self-)?detected (stall|expedited stall)|INFO: trying to register non-static key|Watchdog detected hard LOCKUP|[a-z_0-9]+: panicked at )'
# Where the test may not change the machine, only what the kernel logged
# since the test started counts (need_functions marks the log): a real
# instance's log may hold older reports.
kernel_reports() {
	if [ -n "$_klog_mark" ]; then
		dmesg | sed -n "/$_klog_mark\$/,\$p" | grep -E "$KERNEL_REPORT_ERE"
	else
		dmesg | grep -E "$KERNEL_REPORT_ERE"
	fi
}
# ERDMA_KNOWN_REPORTS (an ERE of report headlines): what a reference run
# expects of the driver under test (the upstream C driver's own bugs, written
# up in Documentation/infiniband/erdma_rs_selftests.rst). Those are listed
# (kernel_known) and do not count; every other report does. The harness
# must be told the same (vmrun.py --tolerate), or the first ends the guest.
kernel_trouble() {
	if [ -n "${ERDMA_KNOWN_REPORTS:-}" ]; then
		kernel_reports | grep -Ev "$ERDMA_KNOWN_REPORTS"
	else
		kernel_reports
	fi
}
kernel_known() {
	[ -z "${ERDMA_KNOWN_REPORTS:-}" ] ||
		kernel_reports | grep -E "$ERDMA_KNOWN_REPORTS" | sed 's/^\[ *[0-9.]*\] //' | sort | uniq -c
}
_klog_mark=

# ---- the model's test page ------------------------------------------------------
# erdma-emu adapters started with test_page=on expose a test page in the last
# 4 KiB of BAR0: a mailbox for the model's fault-injection and inspection
# commands (see tools/erdma-emu/README.md). This is the model's, not the
# adapter's: real hardware has no such page.
TEST_PAGE_OFFSET=$((0x3ff000))

# BAR0's physical address of PCI function $1.
bar0_addr() {
	read -r start _ <"/sys/bus/pci/devices/$1/resource"
	echo $((start))
}

# True when function $1 has the model's test page: erdma-testpage (the
# model's tool, on the PATH only where the harness put it) finds the page in a
# BAR0 large enough to hold it (nothing is read beyond a smaller BAR0, such as
# a real adapter's).
has_test_page() {
	command -v erdma-testpage >/dev/null || return 1
	read -r _tp_start _tp_end _tp_flags <"/sys/bus/pci/devices/$1/resource" || return 1
	[ $((_tp_end - _tp_start + 1)) -ge $((TEST_PAGE_OFFSET + 4096)) ] || return 1
	erdma-testpage --probe "$1"
}

# model_cmd BDF COMMAND...: runs COMMAND in the model for function BDF and
# prints its reply; fails if the model rejected it. erdma-testpage (the
# model's tool, tools/erdma-emu/testpage; scripts/vmrun.py puts it on the
# guest's PATH) drives the mailbox in one process.
model_cmd() {
	_bdf=$1
	shift
	erdma-testpage "$_bdf" "$*"
}

# nics_up NET: brings every NIC up with a link-local IPv4 address
# 169.254.NET.<last byte of its MAC> (iWARP ports need one; the MACs of a run
# differ, so addresses differ across guests too), and unloads the eRDMA
# drivers, so that a test starts from no RDMA device: all but the upstream C
# driver when it is the one under test, which stays loaded from test to test
# (see unload_and_finish). Two NICs of one guest are
# wired to each other: each accepts packets from the other's (local) address,
# so that ARP, and with it the RDMA core's address resolution, works between
# them. What it changes is undone when the test exits (undo_push).
# Where the test may not change the machine (may_reconfigure), nothing: the
# NICs keep their own addresses and the driver stays.
nics_up() {
	if ! may_reconfigure; then
		tap_diag "the NICs keep their own configuration and the driver stays loaded: $ERDMA_SAFE_WHY"
		return 0
	fi
	undo_start
	# Traffic between two local addresses goes through the loopback device.
	# (Up, it gets 127.0.0.1, which stays when it goes down.)
	read -r _lof </sys/class/net/lo/flags
	if [ $((_lof & 1)) = 0 ] && [ -z "$(ip -4 -o addr show dev lo)" ]; then
		undo_push "ip addr del 127.0.0.1/8 dev lo"
	fi
	link_up lo
	for _nic in /sys/class/net/*; do
		_nic=${_nic##*/}
		[ "$_nic" = lo ] && continue
		read -r _mac <"/sys/class/net/$_nic/address"
		sysctl_set "net/ipv4/conf/$_nic/accept_local" 1
		sysctl_set "net/ipv4/conf/$_nic/rp_filter" 0
		link_up "$_nic"
		addr_add "169.254.$1.$((0x${_mac##*:}))/16" "$_nic"
	done
	if [ "$ERDMA_DRIVER" = erdma ]; then
		rmmod erdma_rs 2>/dev/null
	else
		rmmod erdma_rs erdma 2>/dev/null
	fi
	return 0
}

# sysctl_set NAME VALUE: /proc/sys/NAME is VALUE until the test exits.
sysctl_set() {
	# (A sysctl reads as EOF past its first read: read's status says EOF.)
	_sv=
	read -r _sv <"/proc/sys/$1"
	[ -n "$_sv" ] || return 1
	[ "$_sv" = "$2" ] && return 0
	echo "$2" >"/proc/sys/$1" || return 1
	undo_push "echo '$_sv' >'/proc/sys/$1'"
}

# link_up NETDEV: NETDEV is up until the test exits (IFF_UP in its flags).
link_up() {
	read -r _lf <"/sys/class/net/$1/flags" || return 1
	[ $((_lf & 1)) = 1 ] && return 0
	ip link set "$1" up || return 1
	undo_push "ip link set '$1' down"
}

# addr_add ADDRESS/LEN NETDEV: NETDEV has the address until the test exits
# (an address it had already stays; undoing fails only if the address is
# still there: a NIC unbound and bound again has lost it).
addr_add() {
	ip addr add "$1" dev "$2" 2>/dev/null || return 0
	undo_push "ip addr del '$1' dev '$2' 2>/dev/null || ! ip -o addr show dev '$2' 2>/dev/null | grep -q ' ${1%/*}/'"
}

# mtu_set NETDEV MTU: sets NETDEV's MTU; the first one it had comes back
# when the test exits.
_mtu_saved=
mtu_set() {
	case " $_mtu_saved " in
	*" $1 "*) ;;
	*)
		read -r _mtu <"/sys/class/net/$1/mtu" || return 1
		undo_push "ip link set '$1' mtu '$_mtu'"
		_mtu_saved="$_mtu_saved $1"
		;;
	esac
	ip link set "$1" mtu "$2"
}

# wait_for SECONDS COMMAND...: polls COMMAND every 0.1 s until it succeeds.
wait_for() {
	_ticks=$(($1 * 10))
	shift
	while [ $_ticks -gt 0 ]; do
		"$@" && return 0
		sleep 0.1
		_ticks=$((_ticks - 1))
	done
	return 1
}

# mac_of BDF: the adapter's MAC: where the driver gave its RDMA device the
# function as parent (ours) and the device has its netdev, that netdev's;
# else from the adapter's NETDEV_MAC registers (busybox devmem: /dev/mem,
# which a kernel with IO_STRICT_DEVMEM closes to a BAR a driver holds).
# Without busybox (the rehearsal's instance), only the first way.
mac_of() {
	if ! is_emulated || ! command -v busybox >/dev/null; then
		for _mo in /sys/bus/pci/devices/"$1"/infiniband/*; do
			[ -d "$_mo" ] || break
			_mo=$(rdma link show "${_mo##*/}/1" 2>/dev/null | sed -n 's/.* netdev \([^ ]*\).*/\1/p')
			[ -n "$_mo" ] && read -r _mo <"/sys/class/net/$_mo/address" && { echo "$_mo"; return 0; }
		done
	fi
	command -v busybox >/dev/null || return 1
	bar=$(bar0_addr "$1")
	lo=$(($(busybox devmem $((bar + 0x18)) 32)))
	hi=$(($(busybox devmem $((bar + 0x1c)) 32)))
	printf '%02x:%02x:%02x:%02x:%02x:%02x\n' $(((hi >> 8) & 255)) $((hi & 255)) \
		$(((lo >> 24) & 255)) $(((lo >> 16) & 255)) $(((lo >> 8) & 255)) $((lo & 255))
}

# netdev_of MAC: the netdev with that address.
netdev_of() {
	for _nd in /sys/class/net/*; do
		read -r _a <"$_nd/address" && [ "$_a" = "$1" ] && { echo "${_nd##*/}"; return 0; }
	done
	return 1
}

# ibdev_of NETDEV: the RDMA device on that netdev.
ibdev_of() {
	rdma link show 2>/dev/null | awk -v n="$1" '$0 ~ " netdev " n "( |$)" { split($2, a, "/"); print a[1]; exit }'
}

# gid_index IBDEV IPV4: the index of the RoCEv2 GID of IPV4 on port 1.
# ib_of BDF: the RDMA device of BDF, once registered.
ib_of() {
	_io_nd=$(netdev_of "$(mac_of "$1")") || return 1
	wait_for 10 sh -c "rdma link show | grep -q ' netdev $_io_nd '" || return 1
	ibdev_of "$_io_nd"
}
gid_index() { find_gid "$1" "$2" && echo "$GID"; }

# find_gid IBDEV IPV4: as gid_index, into $GID (no subshell).
find_gid() {
	for _g in /sys/class/infiniband/"$1"/ports/1/gids/*; do
		read -r _gid <"$_g" 2>/dev/null || continue
		# An IPv4-mapped GID: ::ffff:AABB:CCDD is AA.BB.CC.DD.
		_v4=${_gid#0000:0000:0000:0000:0000:ffff:}
		[ "$_v4" != "$_gid" ] || continue
		_hi=$((0x${_v4%:*})) _lo=$((0x${_v4#*:}))
		[ "$((_hi >> 8)).$((_hi & 255)).$((_lo >> 8)).$((_lo & 255))" = "$2" ] || continue
		_i=${_g##*/}
		read -r _type <"/sys/class/infiniband/$1/ports/1/gid_attrs/types/$_i" 2>/dev/null &&
			[ "$_type" = "RoCE v2" ] && { GID=$_i; return 0; }
	done
	return 1
}

# ipv4_of NETDEV: its first IPv4 address.
ipv4_of() { ip -4 -o addr show dev "$1" | awk '{ split($4, a, "/"); print a[1]; exit }'; }

# adapter_pair KIND [N]: finds two RDMA devices of KIND (roce: RoCEv2, each
# with the RoCEv2 GID of its netdev's IPv4 address; iwarp: RNICs whose netdev
# has an IPv4 address) bound to the driver under test, and sets IB_A/IB_B,
# IP_A/IP_B and (RoCEv2) GID_A/GID_B, the GID indices. Fails if there are
# fewer than two (fewer than N, if given: adapter_pair roce 1 is content with
# one, IB_A).
adapter_pair() {
	_ibs="" _gids="" _ips=""
	# Where udev renames RDMA devices (rdma-core's rule, on an instance), the
	# names are read once it is done.
	! command -v udevadm >/dev/null || udevadm settle --timeout=30
	for _bdf in $(erdma_functions); do
		wait_for 10 is_bound "$_bdf" || continue
		_nd=$(netdev_of "$(mac_of "$_bdf")") || continue
		wait_for 10 sh -c "rdma link show | grep -q ' netdev $_nd '"
		_ib=$(ibdev_of "$_nd")
		[ -n "$_ib" ] || continue
		read -r _type <"/sys/class/infiniband/$_ib/node_type"
		[ "$_type" = "4: RNIC" ] && _k=iwarp || _k=roce
		[ "$_k" = "$1" ] || continue
		_ip=$(ipv4_of "$_nd")
		[ -n "$_ip" ] || { tap_diag "$_ib: $_nd has no IPv4 address"; continue; }
		if [ "$1" = roce ]; then
			wait_for 10 find_gid "$_ib" "$_ip" || { tap_diag "$_ib: no RoCEv2 GID for $_ip"; continue; }
			tap_diag "$_bdf: $_ib on $_nd, $_ip, GID index $GID"
		else
			GID=-
			tap_diag "$_bdf: $_ib (iWARP) on $_nd, $_ip"
		fi
		_ibs="$_ibs $_ib" _gids="$_gids $GID" _ips="$_ips $_ip"
	done
	_want=${2:-2}
	set -- $_ibs
	[ $# -ge "$_want" ] || return 1
	IB_A=$1 IB_B=${2:-}
	set -- $_gids
	GID_A=$1 GID_B=${2:-}
	set -- $_ips
	IP_A=$1 IP_B=${2:-}
}

# roce_pair, iwarp_pair: adapter_pair of RoCEv2 or iWARP adapters.
roce_pair() { adapter_pair roce; }
iwarp_pair() { adapter_pair iwarp; }

# stop_this_guest WHY: finishes the test's TAP as tap_finish does, records
# the scenario's exit status (1 if a test failed here, else
# ERDMA_STATUS_SO_FAR, the status of what the scenario ran before, 0 by
# default), then ends this guest as a host stops a VM: vmrun kills it at once
# (no shutdown, no TCP FIN or RST, its adapters' client gone). Only as the
# last test of a scenario.
stop_this_guest() {
	echo "1..$_tap_n"
	_st=${ERDMA_STATUS_SO_FAR:-0}
	[ "$_tap_failed" -eq 0 ] || { tap_diag "$_tap_failed of $_tap_n tests failed"; _st=1; }
	sleep 1
	echo $_st >"$ERDMA_RESULTS/exit-status"
	sync
	echo "$1" >"$ERDMA_RESULTS/stop-request"
	sleep 120
	echo "# stop_this_guest: vmrun did not stop this guest in 120 s" >&2
	exit 1
}

# xguest_begin NET DIR TOOL: the start of a test between two guests: an
# eRDMA function and a peer guest present, and the test allowed to change the
# machine (it addresses the peer by the link-local addresses nics_up gives),
# else the whole test skips; DIR made empty, TOOL present (else the whole test
# skips), the TAP header, the NICs up on 169.254.NET/16, the driver loaded and
# this guest's adapter found (xguest_adapter; the whole test skips without
# one).
xguest_begin() {
	need_functions
	need_peer_guest
	need_reconfigure "gives the NICs the link-local addresses the two guests find each other by"
	rm -rf "$2"
	mkdir -p "$2"
	command -v "$3" >/dev/null || ksft_skip_all "$3 is missing"
	tap_header
	nics_up "$1"
	load_driver
	xguest_adapter "$1" || ksft_skip_all "no adapter bound"
}

# need_peer_guest: the whole test skips unless another guest runs it at the
# same time: scripts/vmrun.py exports ERDMA_GUESTS, the number of guests of
# its run (--guest 0 --guest 1: 2). One machine alone has no peer.
need_peer_guest() {
	[ "${ERDMA_GUESTS:-1}" -ge 2 ] ||
		ksft_skip_all "needs a peer guest running this test at the same time (scripts/vmrun.py with two --guest sets ERDMA_GUESTS=2); this machine is alone"
	busybox nc --help >/dev/null 2>&1 ||
		ksft_skip_all "busybox's nc is missing (the beacons between the guests)"
}

# xguest_end PORT: the end of a test between two guests: the client tells the
# server (a beacon on PORT of SERVER_IP) that it is done, and the server waits
# for that (at most SECONDS, default 200) before it exits, and with it undoes
# its addresses: the client's last steps may still need them.
xguest_end() {
	if [ "$ROLE" = server ]; then
		ready_beacon "$SERVER_IP" "$1" "$(ksft_within "${2:-200}")" >/dev/null ||
			tap_diag "the client did not say it was done"
	else
		await_beacon "$SERVER_IP" "$1" "$(ksft_within "${2:-200}")" ||
			tap_diag "the server did not hear that this client was done"
	fi
}

# has_atomics IB: RDMA device IB reports atomic support (atomic_cap not
# ATOMIC_NONE).
has_atomics() { ! ibv_devinfo -v -d "$1" | grep -q 'atomic_cap:[[:space:]]*ATOMIC_NONE'; }

# uptime: seconds since boot (the guest's clock; no process forked).
uptime() { read -r _up _idle </proc/uptime; echo "${_up%.*}"; }

# xguest_driver: in a test between two guests with XGUEST_DRIVERS="SERVER
# CLIENT" set (a mixed pair, issue 11: the guest that serves runs SERVER, the
# other CLIENT), sets ERDMA_DRIVER to this guest's driver, chosen as
# xguest_adapter chooses the role: the server's adapter's MAC ends in
# XGUEST_SERVER_BYTE, and so does the MAC of the NIC it belongs to (read here,
# before any driver is loaded). Without XGUEST_DRIVERS, nothing.
xguest_driver() {
	[ -n "${XGUEST_DRIVERS:-}" ] || return 0
	set -- $XGUEST_DRIVERS
	ERDMA_DRIVER=$2
	for _nic in /sys/class/net/*; do
		[ "${_nic##*/}" = lo ] && continue
		read -r _mac <"$_nic/address"
		[ $((0x${_mac##*:})) = "${XGUEST_SERVER_BYTE:-1}" ] && ERDMA_DRIVER=$1
	done
	return 0
}

# xguest_adapter NET: in a test between two guests (each with one RoCEv2
# adapter, both running the test), finds this guest's bound adapter and sets
# IB, IP, GID (its RoCEv2 GID index) and MAC; ROLE is server in the guest whose
# adapter's MAC ends in $XGUEST_SERVER_BYTE (1), client in the other.
# SERVER_IP and MY_IP are the addresses 169.254.NET.<MAC's last byte>
# nics_up NET gave the server's NIC and this guest's. Fails if no adapter is
# bound.
xguest_adapter() {
	_sb=${XGUEST_SERVER_BYTE:-1}
	for _bdf in $(erdma_functions); do
		wait_for 10 is_bound "$_bdf" || continue
		MAC=$(mac_of "$_bdf")
		_nd=$(netdev_of "$MAC") || continue
		wait_for 10 sh -c "rdma link show | grep -q ' netdev $_nd '"
		IB=$(ibdev_of "$_nd")
		IP=$(ipv4_of "$_nd")
		read -r _type <"/sys/class/infiniband/$IB/node_type"
		if [ "$_type" = "4: RNIC" ]; then
			[ -n "$IP" ] || continue
			GID=-
		else
			wait_for 10 find_gid "$IB" "$IP" || continue
		fi
		[ $((0x${MAC##*:})) = "$_sb" ] && ROLE=server || ROLE=client
		SERVER_IP=169.254.$1.$_sb
		MY_IP=169.254.$1.$((0x${MAC##*:}))
		tap_diag "$_bdf: $IB on $_nd, $IP, GID index $GID: $ROLE"
		return 0
	done
	return 1
}

PORT=18515
# next_port: a fresh TCP port for the next client/server pair in $PORT.
next_port() { PORT=$((PORT + 1)); }

# listening PORT: a TCP socket listens on PORT (IPv4 or IPv6). Read from
# /proc/net/tcp* by the shell: run_pair polls this.
listening() {
	for _t in /proc/net/tcp /proc/net/tcp6; do
		[ -r "$_t" ] || continue
		# Fields: sl local_address (ADDR:PORT, hex) rem_address st ...; st 0A
		# is LISTEN. The header line's st is "st".
		while read -r _sl _local _rem _st _rest; do
			[ "$_st" = 0A ] && [ $((0x${_local##*:})) -eq "$1" ] && return 0
		done <"$_t"
	done
	return 1
}

# cm_listening PORT: an rdma_cm ID listens on PORT (any address, any RDMA
# device), as the RDMA core's resource tracking shows it (rdma resource show
# cm_id: "... state LISTEN ... src-addr 169.254.55.1:7174 ..."), and, on
# iWARP (PROTO=iwarp), the driver's TCP socket listens on it too: rdma_listen
# marks the ID LISTEN before it asks the driver to listen, so a client let go
# in between met no listener (a TCP reset: RDMA_CM_EVENT_REJECTED, error
# -111; make check at f2c9f31, ib_write_lat -R).
cm_listening() {
	rdma resource show cm_id 2>/dev/null | grep -q "state LISTEN .*src-addr [^ ]*:$1\( \|\$\)" &&
		{ [ "${PROTO:-}" != iwarp ] || listening "$1"; }
}

# The beacons between two guests are busybox's nc (which the harness's guests
# have; need_peer_guest asks for it): a python3 for each costs the debug
# kernel under TCG about 0.7 s, and a test between two guests opens two or
# three beacons a test point.

# ready_beacon IP PORT SECONDS: accepts one TCP connection on PORT (of every
# address: busybox's nc binds no other), or gives up after SECONDS: tells a
# client in another guest, which cannot see this guest's rdma_cm listeners,
# that a server here is ready. Prints the word the client sent, if it sent one
# (await_beacon's WORD). (IP is the address the client comes to.)
ready_beacon() {
	timeout "$3" busybox nc -l -p "$2" </dev/null
}
# await_beacon IP PORT SECONDS [WORD]: waits (SECONDS at most) until IP:PORT
# accepts a TCP connection, the ready_beacon of a server in another guest,
# and says WORD to it.
await_beacon() {
	timeout "$3" sh -c 'until printf "%s" "$3" | busybox nc -w 2 "$1" "$2" >/dev/null 2>&1; do
		sleep 0.5
	done' sh "$1" "$2" "${4:+$4
}"
}

# run_pair NAME PORT DONE SERVER-CMD... -- CLIENT-CMD...: starts the server,
# waits (20 s) until it listens on TCP port PORT (or, with RUN_PAIR_READY set
# to cm_listening, until an rdma_cm ID listens on it), runs the client, and
# waits for both (RUN_PAIR_TIMEOUT, 120 s, each, at most what ksft_within
# leaves). Both must exit 0, and the
# client must print DONE. Output goes to $tmp/NAME.srv and $tmp/NAME.cli, and
# into the TAP diagnostics on failure.
run_pair() {
	_name=$1 _port=$2 _done=$3
	shift 3
	_srv=""
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		_srv="$_srv '$1'"
		shift
	done
	shift
	eval "timeout $(ksft_within "${RUN_PAIR_TIMEOUT:-120}") $_srv" >"$tmp/$_name.srv" 2>&1 &
	_spid=$!
	if ! wait_for 20 "${RUN_PAIR_READY:-listening}" "$_port"; then
		tap_diag "server did not start: $(tr '\n' ';' <"$tmp/$_name.srv")"
		kill $_spid 2>/dev/null
		wait $_spid 2>/dev/null
		return 1
	fi
	timeout "$(ksft_within "${RUN_PAIR_TIMEOUT:-120}")" "$@" >"$tmp/$_name.cli" 2>&1
	_crc=$?
	# A server whose client failed may wait for it to its timeout (perftest's
	# server for the client that crashed): 10 s after a failed client, the
	# server still running is stopped, and its run fails as the client's.
	_i=0
	while [ $_crc != 0 ] && [ $_i -lt 10 ] && kill -0 $_spid 2>/dev/null; do
		sleep 1
		_i=$((_i + 1))
	done
	if [ $_crc != 0 ] && kill -0 $_spid 2>/dev/null; then
		[ -z "${RUN_PAIR_ON_STOP:-}" ] || $RUN_PAIR_ON_STOP
		tap_diag "the client failed (exit $_crc) and its server still ran 10 s later: stopped"
		kill_tree $_spid
	fi
	wait $_spid
	_src=$?
	# (An empty DONE asks for nothing: rping's client may exit, 0, before its
	# rdma_cm thread prints the disconnect, its only word on success; grep's
	# empty pattern matches no line of an empty file.)
	if [ $_crc != 0 ] || [ $_src != 0 ] ||
		{ [ -n "$_done" ] && ! grep -q -- "$_done" "$tmp/$_name.cli"; }; then
		tap_diag "client (exit $_crc): $(tr '\n' ';' <"$tmp/$_name.cli" | tail -c 1500)"
		tap_diag "server (exit $_src): $(tr '\n' ';' <"$tmp/$_name.srv" | tail -c 1500)"
		return 1
	fi
}

# pingpong NAME SERVER_IB SERVER_GID CLIENT_IB CLIENT_GID SERVER_IP ARGS...:
# one ibv_rc_pingpong run (run_pair, on the next port); both ends must finish
# and report their transfer, with no corrupted data (with -c each side checks
# the bytes it received).
pingpong() {
	name=$1 sib=$2 sgid=$3 cib=$4 cgid=$5 sip=$6
	shift 6
	next_port
	run_pair "$name" "$PORT" 'bytes in' \
		ibv_rc_pingpong -d "$sib" -g "$sgid" -p "$PORT" "$@" -- \
		ibv_rc_pingpong -d "$cib" -g "$cgid" -p "$PORT" "$@" "$sip" || return 1
	grep -q 'bytes in' "$tmp/$name.srv" || { tap_diag "server: $(tr '\n' ';' <"$tmp/$name.srv")"; return 1; }
	! grep -qi 'invalid' "$tmp/$name.srv" "$tmp/$name.cli" ||
		{ tap_diag "corrupted data: $(grep -hi invalid "$tmp/$name.srv" "$tmp/$name.cli" | head -n 3)"; return 1; }
	tap_diag "$name: $(grep 'bytes in' "$tmp/$name.cli")"
}

# kill_tree PID: PID and every process below it get TERM (the shell's
# background job of a timeout, and the timeout's command).
kill_tree() {
	for _s in /proc/[0-9]*/stat; do
		read -r _p _c _st _pp _rest <"$_s" 2>/dev/null || continue
		[ "$_pp" != "$1" ] || kill_tree "$_p"
	done
	kill "$1" 2>/dev/null
}

# unload MODULE: rmmod MODULE. The upstream C driver is unloaded with every
# CPU but CPU 0 offline: its removal has two races
# (Documentation/infiniband/erdma-upstream-rmmod-race.rst) that need a second
# CPU. Its command-queue interrupt handler wakes the command's waiter and then
# goes on reading the command queue, which the woken rmmod frees on another
# CPU (KASAN: use-after-free in erdma_polling_cmd_completions); and ib_mad's CQ
# polling work looks up a QP that rmmod is destroying. On one CPU the handler
# finishes before the waiter runs. The CPUs come back online afterwards.
unload() {
	if [ "$1" != erdma ]; then
		rmmod "$1"
		return
	fi
	_cpus=""
	for _c in /sys/devices/system/cpu/cpu[1-9]*/online; do
		[ "$(cat "$_c")" = 1 ] || continue
		echo 0 >"$_c" && _cpus="$_cpus $_c"
	done
	taskset -c 0 rmmod erdma
	_urc=$?
	for _c in $_cpus; do
		echo 1 >"$_c"
	done
	return $_urc
}

# model_objects: "BDF=QPS/CQS/MRS/AHS ..." for every eRDMA function bound to
# the driver under test that has the model's test page (empty without one).
model_objects() {
	for _f in $(erdma_functions); do
		is_bound "$_f" && has_test_page "$_f" || continue
		_o=$(model_cmd "$_f" "query objects") || continue
		printf '%s ' "$_f=${_o#ok objects=}"
	done
}

# model_memory_check: the model process's peak resident memory (query
# memory) stayed under the sum of the documented ceilings of the adapters this
# guest sees (tools/erdma-emu/README.md, "Limits"). For a guest alone with its
# model process: one serving other guests' adapters has their ceilings too.
model_memory_check() {
	_mm_sum=0 _mm_hwm=
	for _f in $(erdma_functions); do
		has_test_page "$_f" || continue
		_mm=$(model_cmd "$_f" "query memory") || continue
		_mm_c=$(echo "$_mm" | sed -n 's/.*ceiling=\([0-9]*\).*/\1/p')
		_mm_h=$(echo "$_mm" | sed -n 's/.*hwm=\([0-9]*\).*/\1/p')
		[ -n "$_mm_c" ] || continue
		_mm_sum=$((_mm_sum + _mm_c))
		[ -z "$_mm_h" ] || _mm_hwm=$_mm_h
	done
	if [ "$_mm_sum" = 0 ] || [ -z "$_mm_hwm" ]; then
		tap_skip "the model's memory under its ceiling" "no adapter reports it (query memory)"
		return 0
	fi
	tap_diag "the model's peak resident memory: $((_mm_hwm >> 20)) MiB; ceilings: $((_mm_sum >> 20)) MiB"
	tap_check "the model's peak resident memory is under its adapters' ceilings" [ "$_mm_hwm" -le "$_mm_sum" ]
}

# model_no_more BEFORE [pool]: every function of BEFORE (model_objects) holds
# the QPs, CQs, MRs and AHs it held then. With "pool", CQs may have been
# added: the RDMA core's CQ pool (ib_cq_pool_get, used by nvme-rdma and
# nvmet-rdma) keeps its CQs until the device is unregistered.
model_no_more() {
	for _o in $1; do
		_f=${_o%%=*} _b=${_o#*=}
		_n=$(model_cmd "$_f" "query objects") || return 1
		_n=${_n#ok objects=}
		if [ "${2:-}" = pool ]; then
			[ "${_n%%/*}" = "${_b%%/*}" ] && [ "${_n#*/*/}" = "${_b#*/*/}" ] &&
				[ "$(echo "$_n" | cut -d/ -f2)" -ge "$(echo "$_b" | cut -d/ -f2)" ] && continue
		else
			[ "$_n" = "$_b" ] && continue
		fi
		tap_diag "$_f: the model holds QPs/CQs/MRs/AHs $_n, before: $_b"
		return 1
	done
}

# model_clean BDF...: the functions with the test page hold no QP, CQ, MR or
# AH (after the driver unloaded).
model_clean() {
	for _f in "$@"; do
		has_test_page "$_f" || continue
		_n=$(model_cmd "$_f" "query objects") || return 1
		[ "$_n" = "ok objects=0/0/0/0" ] || { tap_diag "$_f: the model holds $_n"; return 1; }
	done
}

# unload_and_finish DRIVER [BDF...]: the last test points of a test: DRIVER
# unloads (and, for ours, the adapters BDF... hold no object afterwards), and
# the kernel log has no kernel report; then the plan.
# The upstream C driver is not unloaded here: its removal races with ib_mad's
# CQ polling and can oops (Documentation/infiniband/erdma-upstream-rmmod-race.rst),
# so a scenario unloads it once, at its end (run_tests.sh), rather than after
# every test; ours unloads after every test (and rmmod_race.sh repeats it).
unload_and_finish() {
	if ! may_reconfigure; then
		tap_skip "rmmod $1" "the driver stays loaded: $ERDMA_SAFE_WHY"
		shift
	elif [ "$1" = erdma ]; then
		tap_diag "erdma stays loaded; run_tests.sh unloads it at the end of the scenario"
	else
		tap_check "rmmod $1" unload "$1"
		_drv=$1
		shift
		[ $# = 0 ] || tap_check "the adapters hold no QP, CQ, MR or AH after rmmod $_drv" model_clean "$@"
	fi
	_trouble=$(kernel_trouble)
	[ -z "$_trouble" ] || tap_diag "$_trouble"
	_known=$(kernel_known)
	[ -z "$_known" ] || tap_diag "known reports of $ERDMA_DRIVER (ERDMA_KNOWN_REPORTS), not counted: $_known"
	tap_check "no oops, BUG or WARNING in the kernel log" [ -z "$_trouble" ]
	tap_finish
}

# ---- what a test may change ------------------------------------------------------
# The rule (Documentation/infiniband/erdma_rs_selftests.rst, "On a real
# instance"): a test changes the machine -- loads, unloads or switches the
# eRDMA drivers, unbinds adapters, gives NICs addresses, brings links up or
# down, changes MTUs and sysctls, loads storage modules, injects faults --
# only
#   - on emulated adapters: the harness's adapters file exists
#     ($ERDMA_ADAPTERS: scripts/vmrun.py writes $ERDMA_PAYLOAD/adapters), or
#     an eRDMA function has the model's test page (real hardware has none);
#   - or when the user opts in: ERDMA_RECONFIGURE=1.
# ERDMA_RECONFIGURE=0 forbids it even on emulated adapters. Otherwise (a real
# instance) a test checks for an eRDMA function first, then uses what it
# finds: the driver already bound to the adapters (the driver under test,
# unless ERDMA_DRIVER names another, and then the test skips), the NICs' own
# IPv4 addresses; what would change the machine it skips, with the reason.
# Whatever a test changes it undoes when it exits (undo_push): addresses,
# links, MTUs, sysctls, mounts, the modules it loaded; and where the user
# opted in on a real instance, the eRDMA driver modules it found loaded or
# not. On emulated adapters the drivers' modules are the scenario's: each test
# starts from no RDMA device and unloads ours at its end; the C driver stays
# loaded from test to test and run_tests.sh unloads it at the end.

ERDMA_EMULATED=0
if [ -r "$ERDMA_ADAPTERS" ]; then
	ERDMA_EMULATED=1
else
	for _f in $(erdma_functions); do
		has_test_page "$_f" && ERDMA_EMULATED=1 && break
	done
fi
case "${ERDMA_RECONFIGURE:-}" in
1)
	ERDMA_MAY_RECONFIGURE=1
	ERDMA_SAFE_WHY=
	;;
0)
	ERDMA_MAY_RECONFIGURE=0
	ERDMA_SAFE_WHY="ERDMA_RECONFIGURE=0 forbids changing this machine"
	;;
*)
	ERDMA_MAY_RECONFIGURE=$ERDMA_EMULATED
	ERDMA_SAFE_WHY="the adapters are not emulated (no harness, no model test page), so nothing on this machine is changed; ERDMA_RECONFIGURE=1 allows it"
	;;
esac

# is_emulated: the adapters are the model's (the harness's or with a test page).
is_emulated() { [ "$ERDMA_EMULATED" = 1 ]; }
# may_reconfigure: the test may change the machine (the rule above).
may_reconfigure() { [ "$ERDMA_MAY_RECONFIGURE" = 1 ]; }

# need_reconfigure WHAT: the whole test skips unless it may change the
# machine; WHAT says what it would change.
need_reconfigure() {
	may_reconfigure || ksft_skip_all "this test $1: $ERDMA_SAFE_WHY"
}

# The driver bound to the first eRDMA function that has one (erdma_rs or
# erdma), or empty. Where a test may not change the machine, it is the driver
# under test unless ERDMA_DRIVER names one.
ERDMA_BOUND_DRIVER=
for _f in $(erdma_functions); do
	for _d in erdma_rs erdma; do
		[ -e "/sys/bus/pci/drivers/$_d/$_f" ] && ERDMA_BOUND_DRIVER=$_d
	done
	[ -z "$ERDMA_BOUND_DRIVER" ] || break
done
if ! may_reconfigure && [ -z "$_erdma_driver_given" ] && [ -n "$ERDMA_BOUND_DRIVER" ]; then
	ERDMA_DRIVER=$ERDMA_BOUND_DRIVER
fi

# need_functions: the first step of every test: the whole test skips without
# an eRDMA function and, where it may not change the machine, unless the
# driver under test drives one already. Sets functions. Where the test may
# not change the machine, also marks the kernel log (kernel_trouble reads from
# the mark).
need_functions() {
	functions=$(erdma_functions)
	[ -n "$functions" ] || ksft_skip_all "no eRDMA function (1ded:107f) present"
	may_reconfigure && return 0
	_klog_mark="erdma_rs selftests: ${0##*/} starts ($$)"
	echo "$_klog_mark" >/dev/kmsg 2>/dev/null || _klog_mark=
	for _f in $functions; do
		is_bound "$_f" && return 0
	done
	[ -z "$ERDMA_BOUND_DRIVER" ] ||
		ksft_skip_all "the eRDMA adapters are driven by $ERDMA_BOUND_DRIVER, not ERDMA_DRIVER=$ERDMA_DRIVER, and switching drivers changes the machine: $ERDMA_SAFE_WHY"
	ksft_skip_all "no driver drives the eRDMA adapters, and loading one changes the machine: load erdma or erdma_rs first; $ERDMA_SAFE_WHY"
}

# load_driver: a test point: the driver under test is loaded (modprobe, with
# the module parameters in ERDMA_MODPROBE_ARGS), or,
# where the test may not change the machine, the one already bound is used.
load_driver() {
	if may_reconfigure; then
		tap_check "modprobe $ERDMA_DRIVER${ERDMA_MODPROBE_ARGS:+ $ERDMA_MODPROBE_ARGS}" \
			modprobe "$ERDMA_DRIVER" ${ERDMA_MODPROBE_ARGS:-}
	else
		tap_skip "modprobe $ERDMA_DRIVER" "$ERDMA_DRIVER drives the adapters already and stays: $ERDMA_SAFE_WHY"
	fi
}

# verbs_smoke IBDEV: a user context, PD, CQ, MR and RC QP on IBDEV, made and
# closed (pyverbs): the adapter works.
verbs_smoke() {
	python3 - "$1" <<'EOF'
import sys
import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPCap, QPInitAttr
with Context(name=sys.argv[1]) as ctx, PD(ctx) as pd, CQ(ctx, 16, None, None, 0) as cq:
    MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE).close()
    cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
    QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)).close()
EOF
}

# py_points PREFIX SCRIPT ARGS...: runs the Python script SCRIPT (beside this
# library) with ARGS and turns each TAP point it prints ("ok N - ...", "not
# ok N - ...") into one of this test, named PREFIX and its description; any
# other line it prints becomes a diagnostic.
py_points() {
	_pp_prefix=$1 _pp_script=$2
	shift 2
	python3 "$(dirname "$0")/$_pp_script" "$@" >/tmp/erdma-py-points.$$ 2>&1
	tap_points /tmp/erdma-py-points.$$ "$_pp_prefix"
	rm -f /tmp/erdma-py-points.$$
}

# tap_points FILE [PREFIX]: each TAP point in FILE ("ok N - ...", "not ok N -
# ...") becomes one of this test, named PREFIX and its description; any other
# line becomes a diagnostic.
tap_points() {
	while read -r _tp_line; do
		case "$_tp_line" in
		"ok "[0-9]*" - "*) tap_ok "${2:-}${_tp_line#ok * - }" ;;
		"not ok "[0-9]*" - "*) tap_not_ok "${2:-}${_tp_line#not ok * - }" ;;
		*) tap_diag "$_tp_line" ;;
		esac
	done <"$1"
}

# ---- undoing what a test changed -----------------------------------------------
# undo_push COMMAND: COMMAND (a shell command line) runs when the test exits,
# by exit, a skip, or TERM or INT (the kselftest runner's timeout): the last
# pushed first. Functions that change the machine push what undoes it
# (sysctl_set, link_up, addr_add, mtu_set, mount_once, modprobe_once).
_undo_file=
undo_start() {
	[ -z "$_undo_file" ] || return 0
	_undo_file=/tmp/erdma-undo.$$
	: >"$_undo_file"
	trap _undo_run EXIT
	trap '_undo_run; trap - EXIT; exit 143' TERM
	trap '_undo_run; trap - EXIT; exit 130' INT
	# On a real instance that opted in, the eRDMA drivers come back as found
	# (run last: pushed first).
	if ! is_emulated; then
		_undo_mods=$(awk '$1 == "erdma" || $1 == "erdma_rs" { printf "%s ", $1 }' /proc/modules)
		undo_push "_undo_modules '$_undo_mods'"
	fi
}
undo_push() {
	undo_start
	printf '%s\n' "$1" >>"$_undo_file"
}
_undo_run() {
	[ -n "$_undo_file" ] && [ -f "$_undo_file" ] || return 0
	_undo_list=$(sed -n '1!G;h;$p' "$_undo_file")
	rm -f "$_undo_file"
	_undo_file=
	echo "$_undo_list" | while IFS= read -r _undo_cmd; do
		[ -z "$_undo_cmd" ] || eval "$_undo_cmd" >/dev/null 2>&1 ||
			echo "# undo failed: $_undo_cmd"
	done
	return 0
}
# _undo_modules "MODULES": the eRDMA drivers loaded are MODULES again.
_undo_modules() {
	for _m in erdma_rs erdma; do
		case " $1 " in *" $_m "*) continue ;; esac
		! grep -q "^$_m " /proc/modules || unload "$_m"
	done
	for _m in $1; do
		grep -q "^$_m " /proc/modules || modprobe "$_m"
	done
}

# mount_once TYPE DIR [OPTIONS]: DIR is a mount point (mounted here, with
# TYPE, unless it is one already) until the test exits.
mount_once() {
	mountpoint -q "$2" && return 0
	mkdir -p "$2" && mount -t "$1" ${3:+-o "$3"} "$1" "$2" || return 1
	undo_push "! mountpoint -q '$2' || umount '$2'"
}

# modprobe_once MODULE [PARAMS...]: MODULE is loaded (here, unless it was),
# and unloaded again when the test exits if it was loaded here.
modprobe_once() {
	grep -q "^$1 " /proc/modules && return 0
	modprobe "$@" || return 1
	undo_push "! grep -q '^$1 ' /proc/modules || modprobe -r '$1'"
}

# bench_end RAW FAILURES [WHO]: the end of a guest half of make bench
# (bench.sh, bench_xguest.sh): exits 1 if the kernel reported trouble (but
# what BENCH_TOLERATE, an extended regular expression, names: printed as
# tolerated) or FAILURES measurements failed; else says how many figures RAW
# has. A WARN()'s "cut here" line is left out: its WARNING line, which
# follows, says whose it is (and is what BENCH_TOLERATE names).
bench_end() {
	_be_trouble=$(kernel_trouble | grep -vF -e '[ cut here ]' || true)
	if [ -n "${BENCH_TOLERATE:-}" ]; then
		echo "$_be_trouble" | grep -E "$BENCH_TOLERATE" | sed 's/^/bench: tolerated: /'
		_be_trouble=$(echo "$_be_trouble" | grep -vE "$BENCH_TOLERATE" || true)
	fi
	if [ -n "$_be_trouble" ]; then
		echo "bench: FAILED: the kernel reported trouble:"
		echo "$_be_trouble" | head -n 20
		exit 1
	fi
	if [ "$2" -ne 0 ]; then
		echo "bench: FAILED: $2 measurements failed (nan in $1)"
		exit 1
	fi
	echo "bench: done${3:+ $3}: $(wc -l <"$1") measurements in $1"
}

# ---- time ----------------------------------------------------------------------
# run_kselftest.sh kills a test after the "timeout" of settings (or its -o
# SECONDS), which it exports as kselftest_timeout; the harness's run_tests.sh
# sets none. A test must end by itself before that: its long waits are
# bounded by ksft_within SECONDS, which prints SECONDS or, under the runner,
# the seconds left before its timeout less KSFT_MARGIN (60: the test's last
# steps, unloading the driver and undoing its changes), whichever is less (at
# least 1).
KSFT_START=$(uptime)
ksft_within() {
	[ "${kselftest_timeout:-0}" -gt 0 ] 2>/dev/null || { echo "$1"; return 0; }
	_kw=$((KSFT_START + kselftest_timeout - ${KSFT_MARGIN:-60} - $(uptime)))
	[ "$_kw" -ge 1 ] || _kw=1
	[ "$_kw" -lt "$1" ] || _kw=$1
	echo "$_kw"
}
# ksft_has_time SECONDS: at least SECONDS are left (always, outside the runner).
ksft_has_time() { [ "$(ksft_within "$1")" = "$1" ]; }

# Last line: tests check it to know the whole library loaded.
ERDMA_LIB_LOADED=1
