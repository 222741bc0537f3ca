#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# Loading, binding and unloading the driver:
#   - the module loads and its KUnit suite passes;
#   - every functional eRDMA function binds and logs its version, protocol and
#     MAC (checked against the adapters the harness created, when known), and
#     has a companion netdev with the same permanent MAC;
#   - a function whose VERSION reads 0 is refused with -ENODEV, without an oops;
#   - each bound function survives $CYCLES unbind/bind cycles through sysfs;
#   - rmmod unbinds everything, and the module loads and binds again.
# Where the test may not change the machine (a real instance: see "What a
# test may change" in lib.sh), only what can be read: the functions the
# driver already drives, their log lines, netdevs and DMA masks, and the
# KUnit results; loading, refusing, cycling and unloading are skipped.

. "$(dirname "$0")/lib.sh"

CYCLES=${CYCLES:-20}
DRV=$ERDMA_DRIVER
SYSDRV=/sys/bus/pci/drivers/$DRV

need_functions
nfunc=$(echo "$functions" | wc -l)
nexp=$(expected_adapters | wc -l)
nfunctional=$(expected_adapters | awk '$3 != "0"' | wc -l)
[ "$nexp" -gt 0 ] || nfunctional=$nfunc
nzero=$((nfunc - nfunctional))

# The info line of function $1 in the kernel log, most recent first.
info_line() {
	dmesg | grep -E "$DRV $1: eRDMA adapter version 0x[0-9a-f]+, protocol [A-Za-z0-9]+, MAC [0-9a-f:]{17}\$" | tail -n 1
}

# Checks function $1's info line against the adapter with the same MAC.
info_matches() {
	line=$(info_line "$1")
	[ -n "$line" ] || { tap_diag "$1: no info line in the kernel log"; return 1; }
	mac=${line##*MAC }
	version=${line#*version }
	version=${version%%,*}
	proto=${line#*protocol }
	proto=${proto%%,*}
	tap_diag "$1: version $version, protocol $proto, MAC $mac"
	[ "$nexp" -gt 0 ] || return 0
	exp=$(expected_adapters | awk -v m="$mac" '$1 == m')
	[ -n "$exp" ] || { tap_diag "$1: MAC $mac is not one the harness created"; return 1; }
	set -- $exp
	case "$2" in
	roce) [ "$proto" = RoCEv2 ] || { tap_diag "expected RoCEv2"; return 1; } ;;
	iwarp) [ "$proto" = iWARP ] || { tap_diag "expected iWARP"; return 1; } ;;
	esac
	[ "$3" = - ] || [ $(($3)) -eq $(($version)) ] || { tap_diag "expected version $3"; return 1; }
}

# A netdev whose permanent MAC (or, lacking one, current MAC) equals function $1's.
has_twin_netdev() {
	mac=$(info_line "$1")
	mac=${mac##*MAC }
	for n in /sys/class/net/*; do
		[ "$(cat "$n/address" 2>/dev/null)" = "$mac" ] && return 0
	done
	tap_diag "$1: no netdev with MAC $mac"
	return 1
}

# The driver core logs -ENODEV only at debug level ("rejects match"), but a
# sysfs bind attempt returns the probe's errno: it must be ENODEV, with the
# driver's reason logged once more.
refused_nonfunctional() {
	msg="$DRV $1: VERSION reads 0: non-functional function"
	! is_bound "$1" || { tap_diag "$1 is bound"; return 1; }
	dmesg | grep -q "$msg" || { tap_diag "$1: no '$msg' in the kernel log"; return 1; }
	bind_fails "$1" "$msg" "No such device"
}

cycle() {
	klog_mark cycle_mark
	i=0
	while [ $i -lt "$CYCLES" ]; do
		echo "$1" >"$SYSDRV/unbind" || { tap_diag "unbind $1 failed (cycle $i)"; return 1; }
		! is_bound "$1" || { tap_diag "$1 still bound after unbind (cycle $i)"; return 1; }
		echo "$1" >"$SYSDRV/bind" || { tap_diag "bind $1 failed (cycle $i)"; return 1; }
		is_bound "$1" || { tap_diag "$1 not bound after bind (cycle $i)"; return 1; }
		i=$((i + 1))
	done
	n=$(klog_since "$cycle_mark" | grep -c "$DRV $1: eRDMA adapter version")
	[ "$n" -eq "$CYCLES" ] ||
		{ tap_diag "$1: $n probes logged for $CYCLES binds"; return 1; }
}

# Every KUnit suite of the module (erdma_rs_*) ran and passed, and so did the
# kernel crate's suites of kernel::rdma (rust_kernel_rdma*, run at boot).
kunit_passed() {
	suites=""
	for prefix in erdma_rs_ rust_kernel_rdma; do
		found=$(ls -d /sys/kernel/debug/kunit/$prefix* 2>/dev/null)
		[ -n "$found" ] || { tap_diag "no $prefix* KUnit suite in debugfs"; return 1; }
		suites="$suites $found"
	done
	for d in $suites; do
		grep -Eq "^ok [0-9]+ ${d##*/}\$" "$d/results" || { tap_diag "${d##*/} did not pass"; return 1; }
	done
	tap_diag "KUnit suites passed: $(echo $suites | sed 's|/sys/kernel/debug/kunit/||g')"
}

all_unbound() {
	for f in $functions; do
		! is_bound "$f" || return 1
	done
	! grep -q "^$DRV " /proc/modules
}

functional=""
nonfunctional=""
classify() {
	functional=""
	nonfunctional=""
	for f in $functions; do
		if is_bound "$f"; then
			functional="$functional $f"
		else
			nonfunctional="$nonfunctional $f"
		fi
	done
}

rmmod_unbinds() {
	rmmod "$DRV" && all_unbound
}

reload_binds() {
	modprobe "$DRV" || return 1
	n=$(ls -d "$SYSDRV"/0000:* 2>/dev/null | wc -l)
	rmmod "$DRV" || return 1
	[ "$n" -eq "$nfunctional" ] || { tap_diag "$n functions bound after reload"; return 1; }
}

tap_header
if may_reconfigure; then
	rmmod "$DRV" 2>/dev/null
	tap_check "modprobe $DRV" modprobe "$DRV"
else
	load_driver
fi
# A real instance's kernel may have no KUnit, or no debugfs mounted.
if [ "$DRV" != erdma_rs ]; then
	tap_skip "the module's KUnit suites pass" "the suites are erdma_rs's; $DRV drives the adapters"
elif [ ! -d /sys/kernel/debug/kunit ] && ! is_emulated; then
	tap_skip "the module's KUnit suites pass" "no KUnit results in debugfs (no CONFIG_KUNIT, or debugfs not mounted)"
else
	tap_check "the module's KUnit suites pass" kunit_passed
fi
classify
nbound=$(echo $functional | wc -w)
if may_reconfigure; then
	tap_check "$nbound of $nfunc functions bound, $nfunctional expected" [ "$nbound" -eq "$nfunctional" ]
else
	tap_diag "$nbound of $nfunc functions bound to $DRV"
fi
for f in $functional; do
	# A real instance's log may no longer hold the probe's lines.
	if may_reconfigure || [ -n "$(info_line "$f")" ]; then
		tap_check "$f: logs the expected version, protocol and MAC" info_matches "$f"
		tap_check "$f: has a companion netdev with the same MAC" has_twin_netdev "$f"
	else
		tap_skip "$f: logs the expected version, protocol and MAC" "the kernel log no longer holds the probe's lines"
		tap_skip "$f: has a companion netdev with the same MAC" "the kernel log no longer holds the probe's lines"
	fi
	tap_check "$f: 64-bit DMA mask" [ "$(cat "/sys/bus/pci/devices/$f/dma_mask_bits")" = 64 ]
done
if may_reconfigure; then
	for f in $nonfunctional; do
		tap_check "$f: VERSION 0 refused with -ENODEV" refused_nonfunctional "$f"
	done
	for f in $functional; do
		tap_check "$f: $CYCLES unbind/bind cycles" cycle "$f"
	done
	tap_check "rmmod $DRV unbinds every function" rmmod_unbinds
	tap_check "modprobe $DRV again binds $nfunctional functions" reload_binds
else
	tap_skip "binding refused for a non-functional function, unbind/bind cycles, rmmod and modprobe" \
		"$ERDMA_SAFE_WHY"
fi
trouble=$(kernel_trouble)
[ -z "$trouble" ] || tap_diag "$trouble"
tap_check "no oops, BUG or WARNING in the kernel log" [ -z "$trouble" ]
tap_finish
