#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# rehearsal.sh: the user's side of the rehearsal of an ECS instance
# (tests/rehearsal.sh puts it beside the selftests and runs it with
# REHEARSAL_PHASE=install|check through their run_tests.sh, in QEMU guests
# booted from the instance image), as Documentation/infiniband/erdma_rs_ecs.rst
# tells a user:
#
#   install  on Debian's own kernel: the packages of ../package/ installed with
#            apt from the built files; then the guest powers off, and the
#            host boots it again from the kernel and initramfs the packages
#            put in /boot ("reboot").
#   check    on the installed kernel, in two guests with a RoCEv2 and an iWARP
#            adapter each: the adapter's driver loaded by itself (erdma_rs,
#            chosen by the erdma-rs package), rdma link, ibv_devinfo, then
#            between the guests ibv_rc_pingpong (RoCEv2) and rping (both);
#            guest 0 then builds erdma_rs out of tree against the installed
#            headers and loads it, guest 1 removes the driver choice and
#            has udev load the C driver erdma, then puts it back.
#
# The RDMA devices carry the names rdma-core's udev rule gives them (by PCI
# slot: rocep0s5, iwp0s6), as on any Debian system. TAP and helpers come from
# the selftests' lib.sh; the adapters file (index mac proto ...) says which
# NIC goes with which adapter. Every wait is bounded.

. "$(dirname "$0")/lib.sh"

PHASE=${REHEARSAL_PHASE:?install or check}
LOG=$ERDMA_RESULTS
KREL=$(cat "$ERDMA_PAYLOAD/package/kernel-release")

say() { echo "rehearsal: $*" >&2; }
# check DESCRIPTION COMMAND...: tap_check, with the end of the command's
# output as the diagnostics of a failure.
check() {
	_d=$1
	shift
	if "$@" >/tmp/check.out 2>&1; then
		tap_ok "$_d"
	else
		tail -n 25 /tmp/check.out | sed 's/^/# /'
		tap_not_ok "$_d"
	fi
}

tap_header
if [ "$PHASE" = install ]; then
	check "booted Debian's own kernel ($(uname -r)), not the new one" [ "$(uname -r)" != "$KREL" ]
	say "apt-get install of $(ls "$ERDMA_PAYLOAD"/package/*.deb | tr '\n' ' ')"
	check "apt-get installs linux-image-$KREL, linux-headers-$KREL and erdma-rs from the built files" \
		sh -c "cd '$ERDMA_PAYLOAD/package' && DEBIAN_FRONTEND=noninteractive timeout 1500 apt-get install -y ./*.deb"
	check "the kernel's postinst made /boot/vmlinuz-$KREL and /boot/initrd.img-$KREL" \
		ls -l "/boot/vmlinuz-$KREL" "/boot/initrd.img-$KREL"
	check "dpkg knows /etc/modprobe.d/erdma-rs.conf as a conffile of erdma-rs" \
		sh -c "dpkg-query -W -f='\${Conffiles}' erdma-rs | grep -q /etc/modprobe.d/erdma-rs.conf"
	check "modinfo finds erdma_rs and erdma for $KREL" \
		sh -c "modinfo -k '$KREL' -F vermagic erdma_rs && modinfo -k '$KREL' -F filename erdma"
	check "erdma_rs has no PCI alias of its own (the configuration chooses it)" \
		sh -c "! modinfo -k '$KREL' -F alias erdma_rs | grep -q ."
	tap_finish
fi

# ---- check: the installed kernel ------------------------------------------------
GI=$ERDMA_GUEST
check "booted the installed kernel $KREL with systemd as PID 1" \
	sh -c "[ '$(uname -r)' = '$KREL' ] && [ \"\$(readlink /proc/1/exe)\" = /usr/lib/systemd/systemd ]"

nadapters=$(expected_adapters | wc -l)
all_registered() { [ "$(rdma link show 2>/dev/null | grep -c '^link ')" -ge "$nadapters" ]; }
all_active() { [ "$(rdma link show 2>/dev/null | grep -c 'state ACTIVE')" -ge "$nadapters" ]; }
# held_by DRIVER: every adapter is bound to DRIVER.
held_by() {
	for _p in $(erdma_functions); do
		[ "$(basename "$(readlink "/sys/bus/pci/devices/$_p/driver" 2>/dev/null)")" = "$1" ] || return 1
	done
}
# bound DRIVER: held_by DRIVER, and the other driver not loaded.
bound() {
	_other=erdma
	[ "$1" = erdma ] && _other=erdma_rs
	held_by "$1" && ! grep -q "^$_other " /proc/modules
}
bindings() { for _p in $(erdma_functions); do echo "$_p: $(readlink "/sys/bus/pci/devices/$_p/driver")"; done; }

check "udev loaded the adapters' driver by itself: $nadapters RDMA devices within 120 s of boot" \
	wait_for 120 all_registered
check "every adapter ($(erdma_functions | tr '\n' ' ')) is bound to erdma_rs, and erdma is not loaded" \
	bound erdma_rs
tap_diag "$(bindings | tr '\n' ';')"

# Guest 0: the developer's loop (its checks are at the end). The build of
# erdma_rs against the installed headers (make -C /lib/modules/$(uname -r)/build
# M=..., as the documentation says) starts now, beside the traffic tests: it
# takes minutes of one vCPU, and they mostly wait on the other guest.
src=/root/erdma_rs
if [ "$GI" = 0 ]; then
	rm -rf "$src" && cp -r "$ERDMA_PAYLOAD/erdma_rs-src" "$src"
	say "building erdma_rs out of tree against /lib/modules/$KREL/build (in the background)"
	build_start=$(date +%s)
	{
		timeout 1500 make -C "/lib/modules/$KREL/build" M="$src" LLVM=-19 modules >"$LOG/build.log" 2>&1
		echo $? >"$LOG/build.rc"
		date +%s >"$LOG/build.end"
	} &
	build_pid=$!
fi

# udev may still be renaming the RDMA devices (rdma-core's naming rule: rocep0s5
# and the like): the names are read once it is done (make check at 57851e0 had
# a client read erdma_0 just before its rename, then not find it).
command -v udevadm >/dev/null && udevadm settle --timeout=60 || true
# Addresses: 10.91.1.x on the RoCEv2 network, 10.91.2.x on the iWARP one
# (x = guest + 1), as the instance's DHCP would give.
while read -r mac proto _rest; do
	nd=$(netdev_of "$mac")
	net=1
	[ "$proto" = iwarp ] && net=2
	ip addr add "10.91.$net.$((GI + 1))/24" dev "$nd" && ip link set "$nd" up
	eval "${proto}_ib=$(ibdev_of "$nd")"
done <<EOF
$(expected_adapters)
EOF
check "with the NICs up, every port is ACTIVE within 30 s" wait_for 30 all_active
tap_diag "$(rdma link show | tr '\n' ';')"
check "ibv_devinfo: $roce_ib (RoCEv2) is an InfiniBand-transport device with an active port" \
	sh -c "ibv_devinfo -d '$roce_ib' | grep -q 'transport:.*InfiniBand' && ibv_devinfo -d '$roce_ib' | grep -q PORT_ACTIVE"
check "ibv_devinfo: $iwarp_ib (iWARP) is an iWARP-transport device with an active port" \
	sh -c "ibv_devinfo -d '$iwarp_ib' | grep -q 'transport:.*iWARP' && ibv_devinfo -d '$iwarp_ib' | grep -q PORT_ACTIVE"

GID=""
wait_for 20 find_gid "$roce_ib" "10.91.1.$((GI + 1))"
tap_diag "RoCEv2 GID index of 10.91.1.$((GI + 1)) on $roce_ib: ${GID:-none}"

# pair NAME COMMAND...: guest 0 serves (300 s at most for its one client),
# guest 1 connects, trying for 180 s (the server may not be listening yet).
pair() {
	_name=$1
	shift
	if [ "$GI" = 0 ]; then
		timeout 300 "$@" >"$LOG/$_name.log" 2>&1
		return
	fi
	_end=$(($(date +%s) + 180))
	until timeout 60 "$@" >"$LOG/$_name.log" 2>&1; do
		_rc=$?
		[ "$(date +%s)" -lt "$_end" ] || return $_rc
		sleep 3
	done
}
# paired DESCRIPTION NAME COMMAND...: a test point of pair, with its log on failure.
paired() {
	_d=$1
	shift
	if pair "$@" && ! grep -qi mismatch "$LOG/$1.log"; then
		tap_ok "$_d"
	else
		tail -n 25 "$LOG/$1.log" | sed 's/^/# /'
		tap_not_ok "$_d"
	fi
}
role=server server=""
[ "$GI" = 0 ] || role=client server=10.91.1.1
if [ -n "$GID" ]; then
	paired "$role: ibv_rc_pingpong on $roce_ib (RoCEv2), 100 round trips of 4096 bytes" pingpong \
		ibv_rc_pingpong -d "$roce_ib" -g "$GID" -p 18515 -n 100 -s 4096 $server
else
	tap_not_ok "$role: ibv_rc_pingpong on $roce_ib (RoCEv2): no RoCEv2 GID for 10.91.1.$((GI + 1))"
fi
tap_skip "$role: ibv_rc_pingpong on $iwarp_ib (iWARP)" \
	"an iWARP queue pair connects only through the connection manager (rdma_cm); rping covers iWARP"
for proto in roce iwarp; do
	net=1 port=7174 dev=$roce_ib
	[ $proto = iwarp ] && net=2 port=7175 dev=$iwarp_ib
	if [ "$GI" = 0 ]; then
		paired "$role: rping on $dev ($proto), 100 round trips of 1024 bytes" "rping-$proto" \
			rping -s -a "10.91.$net.1" -p $port -C 100 -S 1024 -v
	else
		paired "$role: rping on $dev ($proto), 100 round trips of 1024 bytes, validated" "rping-$proto" \
			rping -c -a "10.91.$net.1" -p $port -C 100 -S 1024 -V -v
	fi
done

if [ "$GI" = 1 ]; then
	# The driver choice, as a boot makes it (udev's coldplug: an "add" event
	# for each adapter), without the file and with it again.
	conf=/etc/modprobe.d/erdma-rs.conf
	# udev reads the modprobe configuration again (a boot starts a fresh one).
	coldplug() {
		for _m in erdma_rs erdma; do
			! grep -q "^$_m " /proc/modules || unload "$_m" || tap_diag "rmmod $_m failed"
		done
		udevadm control --reload
		for _p in $(erdma_functions); do
			echo add >"/sys/bus/pci/devices/$_p/uevent"
		done
		udevadm settle --timeout=60
	}
	mv "$conf" /root/erdma-rs.conf.away
	coldplug
	check "without $conf, udev loads the C driver erdma for every adapter (and not erdma_rs)" \
		wait_for 60 bound erdma
	tap_diag "$(bindings | tr '\n' ';')"
	check "erdma's ports come up ACTIVE" wait_for 60 all_active
	mv /root/erdma-rs.conf.away "$conf"
	coldplug
	check "with $conf back, udev loads erdma_rs again" wait_for 60 bound erdma_rs
	tap_diag "$(bindings | tr '\n' ';')"
	check "erdma_rs's ports come up ACTIVE" wait_for 60 all_active
	tap_finish
fi

# Guest 0: the developer's loop, whose build started above.
wait "$build_pid"
check "make -C /lib/modules/$KREL/build M=$src LLVM=-19 modules builds erdma_rs.ko" \
	sh -c "tail -n 25 '$LOG/build.log'; [ \"\$(cat '$LOG/build.rc')\" = 0 ]"
tap_diag "the build took $(($(cat "$LOG/build.end" 2>/dev/null || date +%s) - build_start)) s"
check "its vermagic is the installed kernel's" \
	sh -c "[ \"\$(modinfo -F vermagic '$src/erdma_rs.ko')\" = \"\$(modinfo -F vermagic erdma_rs)\" ]"
modprobe -r erdma_rs
check "insmod of the out-of-tree erdma_rs.ko loads into the installed kernel" insmod "$src/erdma_rs.ko"
check "the out-of-tree erdma_rs brings every port up ACTIVE" wait_for 60 all_active
check "the module loaded is the out-of-tree one (its taint is O)" \
	sh -c "cat /sys/module/erdma_rs/taint; [ \"\$(cat /sys/module/erdma_rs/taint)\" = O ]"
tap_finish
