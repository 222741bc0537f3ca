#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# The guest half of tests/kselftest-standard.sh: the selftests run the way
# kernel developers run them, by the kselftest runner of an install made from
# the kernel's selftests tree (kselftest_install/, in the payload), in one
# guest, twice:
#
#   1. standard: run_kselftest.sh on the harness's emulated adapters (the
#      tests may change the guest, and undo it): results/kselftest.tap;
#   2. as on a real instance: the guest set up as a user's instance is (the
#      driver loaded, the NICs up with addresses of their own and the sysctls
#      two adapters of one machine need), and run_kselftest.sh without
#      anything of the harness (no adapters file, the model's test page tool
#      not on the PATH), so that the tests take the adapters for real ones
#      and may not change the machine: results/kselftest-safe.tap;
#   3. the same, with the user's opt-in (ERDMA_RECONFIGURE=1): the tests may
#      change the machine, and must leave it as they found it, the driver
#      they unloaded loaded again: results/kselftest-optin.tap.
#
# results/restore.tap checks that the standard run left the network
# configuration as it found it, and that the other two left everything as
# they found it: the addresses, links, MTUs and sysctls, the modules, the
# mounts and the adapters' drivers are the same before and after.
#
# KSFT_STANDARD_TESTS, KSFT_SAFE_TESTS and KSFT_OPTIN_TESTS name the tests of
# each run (the runner's TEST for -t rdma/erdma_rs:TEST); "all" runs the
# whole list.

K=$PWD/kselftest_install
R=${ERDMA_RESULTS:-/tmp}
STANDARD=${KSFT_STANDARD_TESTS:-all}
SAFE=${KSFT_SAFE_TESTS:-all}
OPTIN=${KSFT_OPTIN_TESTS:-kverbs.sh}

# tests_args LIST: the runner's arguments for LIST.
tests_args() {
	[ "$1" = all ] && { echo "-c rdma/erdma_rs"; return; }
	for _t in $1; do
		printf ' -t rdma/erdma_rs:%s' "$_t"
	done
}

# snapshot NET-ONLY: what a test must leave as it found it (with NET-ONLY
# set, only the network configuration). Not the interface indexes (a NIC
# unbound and bound again, as verbs.sh does, is a new interface) nor the
# queueing discipline (a NIC gets its default one the first time it is up).
snapshot() {
	ip -o addr show | sed 's/ *valid_lft.*//; s/^[0-9]*: //'
	ip -o link show | sed 's/\\ *link\/.*//; s/^[0-9]*: //; s/ qdisc [^ ]*//'
	for c in /proc/sys/net/ipv4/conf/*; do
		echo "${c##*/}: accept_local $(cat "$c/accept_local") rp_filter $(cat "$c/rp_filter")"
	done
	[ -z "$1" ] || return 0
	echo "modules: $(awk '{ print $1 }' /proc/modules | sort | tr '\n' ' ')"
	awk '{ print "mount: " $2 " " $3 }' /proc/mounts | sort
	for d in /sys/bus/pci/devices/*; do
		[ "$(cat "$d/vendor"):$(cat "$d/device")" = 0x1ded:0x107f ] || continue
		echo "${d##*/}: driver $(basename "$(readlink "$d/driver" 2>/dev/null || echo none)")"
	done
}

# same N DESCRIPTION BEFORE AFTER: TAP point N, passing when the snapshots
# BEFORE and AFTER are equal (their difference as diagnostics otherwise).
same() {
	if diff -u "$3" "$4" >/tmp/snapshot.diff; then
		echo "ok $1 $2"
	else
		echo "not ok $1 $2"
		sed 's/^/# /' /tmp/snapshot.diff
	fi
}

# run LOG TESTS [ENV...]: run_kselftest.sh on TESTS, its TAP into LOG (and
# the console); its exit status.
run() {
	_log=$1 _tests=$2
	shift 2
	echo "kselftest-standard: run_kselftest.sh $(tests_args "$_tests") $*"
	start=$(cut -d. -f1 /proc/uptime)
	# shellcheck disable=SC2046
	{
		env "$@" "$K/run_kselftest.sh" $(tests_args "$_tests") 2>&1
		echo $? >/tmp/run.rc
	} | tee "$_log"
	_rc=$(cat /tmp/run.rc)
	echo "kselftest-standard: exit $_rc after $(($(cut -d. -f1 /proc/uptime) - start)) s"
	return $_rc
}

# The runner writes to /dev/stdout, which the guest's bare devtmpfs lacks
# (a system's udev makes it).
for fd in 0:stdin 1:stdout 2:stderr; do
	[ -e "/dev/${fd#*:}" ] || ln -s "/proc/self/fd/${fd%%:*}" "/dev/${fd#*:}"
done
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd

rc=0
snapshot net >/tmp/s0
run "$R/kselftest.tap" "$STANDARD" || rc=1
snapshot net >/tmp/s1

# A user's instance: the driver bound, addresses of the NICs' own, the two
# NICs of this machine accepting each other's local addresses.
modprobe erdma_rs
ip link set lo up
n=10
for nic in /sys/class/net/*; do
	nic=${nic##*/}
	[ "$nic" = lo ] && continue
	n=$((n + 1))
	echo 1 >"/proc/sys/net/ipv4/conf/$nic/accept_local"
	echo 0 >"/proc/sys/net/ipv4/conf/$nic/rp_filter"
	ip link set "$nic" up
	ip addr add "192.168.77.$n/24" dev "$nic"
done
sleep 3
snapshot >/tmp/s2
# Nothing of the harness: no adapters file, no test page tool on the PATH.
run "$R/kselftest-safe.tap" "$SAFE" -u ERDMA_PAYLOAD -u ERDMA_RESULTS -u ERDMA_GUESTS \
	PATH=/usr/sbin:/usr/bin:/sbin:/bin || rc=1
snapshot >/tmp/s3
run "$R/kselftest-optin.tap" "$OPTIN" -u ERDMA_PAYLOAD -u ERDMA_RESULTS -u ERDMA_GUESTS \
	PATH=/usr/sbin:/usr/bin:/sbin:/bin ERDMA_RECONFIGURE=1 || rc=1
snapshot >/tmp/s4
rmmod erdma_rs

{
	echo "TAP version 13"
	same 1 "the standard run left the network configuration as it found it" /tmp/s0 /tmp/s1
	same 2 "the run as on a real instance changed nothing (network, modules, mounts, drivers)" /tmp/s2 /tmp/s3
	same 3 "the run with ERDMA_RECONFIGURE=1 there left everything as it found it" /tmp/s3 /tmp/s4
	echo "1..3"
} >"$R/restore.tap"
cat "$R/restore.tap"
grep -q '^not ok' "$R/restore.tap" && rc=1
exit $rc
