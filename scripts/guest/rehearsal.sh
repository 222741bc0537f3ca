#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# rehearsal.sh install|check: the user's side of the rehearsal of an ECS
# instance (tests/rehearsal.sh runs it in QEMU guests booted from the
# instance image), as Documentation/infiniband/erdma_rs_ecs.rst tells a user:
#
#   install  on Debian's own kernel: the packages of package/ installed with
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
# slot: rocep0s5, iwp0s6), as on any Debian system.
# Writes results/rehearsal-PHASE.tap. The adapters file (index mac proto ...)
# says which NIC goes with which adapter. Every wait is bounded.

PHASE=${1:?install or check}
T=$ERDMA_RESULTS/rehearsal-$PHASE.tap
LOG=$ERDMA_RESULTS
n=0
failed=0
echo "TAP version 13" >"$T"

say() { echo "rehearsal: $*"; }
diag() { printf '%s\n' "$@" | sed 's/^/# /' | tee -a "$T"; }
# result OK DESCRIPTION [DIAGNOSTIC FILE]
result() {
	n=$((n + 1))
	if [ "$1" = 0 ]; then
		echo "ok $n $2" | tee -a "$T"
	else
		failed=$((failed + 1))
		[ -z "${3:-}" ] || tail -n 25 "$3" | sed 's/^/# /' >>"$T"
		echo "not ok $n $2" | tee -a "$T"
	fi
}
# check DESCRIPTION COMMAND...: one test point; the command's output is its diagnostic.
check() {
	_d=$1
	shift
	"$@" >/tmp/check.out 2>&1
	result $? "$_d" /tmp/check.out
}
skip() {
	n=$((n + 1))
	echo "ok $n $1 # SKIP $2" | tee -a "$T"
}
finish() {
	echo "1..$n" >>"$T"
	say "$PHASE: $n test points, $failed failed"
	[ "$failed" = 0 ]
	exit
}
# wait_for SECONDS COMMAND...: until COMMAND succeeds, SECONDS at most.
wait_for() {
	_end=$(($(date +%s) + $1))
	shift
	until "$@"; do
		[ "$(date +%s)" -lt "$_end" ] || return 1
		sleep 1
	done
}

KREL=$(cat package/kernel-release)

if [ "$PHASE" = install ]; then
	check "booted Debian's own kernel ($(uname -r)), not the new one" \
		sh -c "[ '$(uname -r)' != '$KREL' ]"
	say "apt-get install of $(ls package/*.deb | tr '\n' ' ')"
	(cd package && DEBIAN_FRONTEND=noninteractive timeout 1500 apt-get install -y ./*.deb) \
		>"$LOG/apt.log" 2>&1
	result $? "apt-get installs linux-image-$KREL, linux-headers-$KREL and erdma-rs from the built files" "$LOG/apt.log"
	check "the kernel's postinst made /boot/vmlinuz-$KREL and /boot/initrd.img-$KREL" \
		ls -l "/boot/vmlinuz-$KREL" "/boot/initrd.img-$KREL"
	check "dpkg knows /etc/modprobe.d/erdma-rs.conf as a conffile of erdma-rs" \
		sh -c "dpkg-query -W -f='\${Conffiles}' erdma-rs | grep -q /etc/modprobe.d/erdma-rs.conf"
	check "modinfo finds erdma_rs and erdma for $KREL" \
		sh -c "modinfo -k '$KREL' -F vermagic erdma_rs && modinfo -k '$KREL' -F filename erdma"
	check "erdma_rs has no PCI alias of its own (the configuration chooses it)" \
		sh -c "! modinfo -k '$KREL' -F alias erdma_rs | grep -q ."
	finish
fi

# ---- check: the installed kernel ------------------------------------------------
GI=$ERDMA_GUEST
check "booted the installed kernel $KREL with systemd as PID 1" \
	sh -c "[ '$(uname -r)' = '$KREL' ] && [ \"\$(readlink /proc/1/exe)\" = /usr/lib/systemd/systemd ]"

# The adapters of this guest, in PCI order, and their NICs (by MAC).
adapters() { grep -v '^#' adapters; }
netdev_of() { for _n in /sys/class/net/*; do [ "$(cat "$_n/address")" = "$1" ] && basename "$_n"; done; }
pci_adapters() {
	for _d in /sys/bus/pci/devices/*; do
		[ "$(cat "$_d/vendor")" = 0x1ded ] && [ "$(cat "$_d/device")" = 0x107f ] && basename "$_d"
	done
}
nadapters=$(adapters | wc -l)
# ib_of NETDEV: the RDMA device whose link is NETDEV.
ib_of() { rdma link show 2>/dev/null | awk -v nd="$1" '$NF == nd { split($2, a, "/"); print a[1] }'; }
all_active() { [ "$(rdma link show 2>/dev/null | grep -c 'state ACTIVE')" -ge "$nadapters" ]; }
all_registered() { [ "$(rdma link show 2>/dev/null | grep -c '^link ')" -ge "$nadapters" ]; }
bound_to() {
	for _p in $(pci_adapters); do
		[ "$(basename "$(readlink "/sys/bus/pci/devices/$_p/driver" 2>/dev/null)")" = "$1" ] || return 1
	done
}

if wait_for 120 all_registered; then r=0; else r=1; fi
{ lsmod | grep -E '^erdma'; rdma link show; journalctl -k -b --no-pager | grep -iE 'erdma' | tail -n 20; } >/tmp/boot.out 2>&1
result $r "udev loaded the adapters' driver by itself: $nadapters RDMA devices within 120 s of boot" /tmp/boot.out
if bound_to erdma_rs && ! grep -q '^erdma ' /proc/modules; then r=0; else r=1; fi
{ for p in $(pci_adapters); do echo "$p: $(readlink /sys/bus/pci/devices/$p/driver)"; done; lsmod | grep erdma; } >/tmp/bind.out 2>&1
result $r "every adapter ($(pci_adapters | tr '\n' ' ')) is bound to erdma_rs, and erdma is not loaded" /tmp/bind.out
# Addresses: 10.91.1.x on the RoCEv2 network, 10.91.2.x on the iWARP one
# (x = guest + 1), as the instance's DHCP would give.
roce_ib="" iwarp_ib=""
while read -r _i mac proto _rest; do
	nd=$(netdev_of "$mac")
	ib=$(ib_of "$nd")
	net=1
	[ "$proto" = iwarp ] && net=2
	ip addr add "10.91.$net.$((GI + 1))/24" dev "$nd" && ip link set "$nd" up
	eval "${proto}_ib=$ib ${proto}_nd=$nd"
done <<EOF
$(adapters)
EOF
check "with the NICs up, every port is ACTIVE within 30 s" wait_for 30 all_active
rdma link show >"$LOG/rdma-link.txt" 2>&1
diag "$(cat "$LOG/rdma-link.txt")"
ibv_devinfo >"$LOG/ibv_devinfo.txt" 2>&1
check "ibv_devinfo: $roce_ib (RoCEv2) is an InfiniBand-transport device with an active port" \
	sh -c "ibv_devinfo -d '$roce_ib' | grep -q 'transport:.*InfiniBand' && ibv_devinfo -d '$roce_ib' | grep -q PORT_ACTIVE"
check "ibv_devinfo: $iwarp_ib (iWARP) is an iWARP-transport device with an active port" \
	sh -c "ibv_devinfo -d '$iwarp_ib' | grep -q 'transport:.*iWARP' && ibv_devinfo -d '$iwarp_ib' | grep -q PORT_ACTIVE"

# gid_of IBDEV IPV4: the index of the RoCEv2 GID of IPV4.
gid_of() {
	_want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' $(echo "$2" | tr . ' '))
	for _g in /sys/class/infiniband/$1/ports/1/gids/*; do
		_i=$(basename "$_g")
		[ "$(cat "$_g" 2>/dev/null)" = "$_want" ] || continue
		[ "$(cat "/sys/class/infiniband/$1/ports/1/gid_attrs/types/$_i" 2>/dev/null)" = "RoCE v2" ] &&
			echo "$_i" && return 0
	done
	return 1
}
gid=""
for _t in $(seq 20); do gid=$(gid_of "$roce_ib" "10.91.1.$((GI + 1))") && break; sleep 1; done
diag "RoCEv2 GID index of 10.91.1.$((GI + 1)) on $roce_ib: ${gid:-none}"

# serve NAME COMMAND... (guest 0) / connect NAME COMMAND... (guest 1): the
# client tries for 180 s (the server may not be listening yet); the server
# waits 300 s at most for its one client.
pair() {
	_name=$1
	shift
	if [ "$GI" = 0 ]; then
		timeout 300 "$@" >"$LOG/$_name.log" 2>&1
	else
		_end=$(($(date +%s) + 180))
		while :; do
			timeout 60 "$@" >"$LOG/$_name.log" 2>&1 && return 0
			_rc=$?
			[ "$(date +%s)" -lt "$_end" ] || return $_rc
			sleep 3
		done
	fi
}
role=server
[ "$GI" = 0 ] || role=client
if [ -n "$gid" ]; then
	if [ "$GI" = 0 ]; then
		pair pingpong ibv_rc_pingpong -d "$roce_ib" -g "$gid" -p 18515 -n 100 -s 4096
	else
		pair pingpong ibv_rc_pingpong -d "$roce_ib" -g "$gid" -p 18515 -n 100 -s 4096 10.91.1.1
	fi
	result $? "$role: ibv_rc_pingpong on $roce_ib (RoCEv2), 100 round trips of 4096 bytes" "$LOG/pingpong.log"
else
	result 1 "$role: ibv_rc_pingpong on $roce_ib (RoCEv2): no RoCEv2 GID for 10.91.1.$((GI + 1))"
fi
skip "$role: ibv_rc_pingpong on $iwarp_ib (iWARP)" \
	"an iWARP queue pair connects only through the connection manager (rdma_cm); rping covers iWARP"
for proto in roce iwarp; do
	net=1 port=7174 dev=$roce_ib
	[ $proto = iwarp ] && net=2 port=7175 dev=$iwarp_ib
	if [ "$GI" = 0 ]; then
		pair "rping-$proto" rping -s -a "10.91.$net.1" -p $port -C 100 -S 1024 -v
	else
		pair "rping-$proto" rping -c -a "10.91.$net.1" -p $port -C 100 -S 1024 -V -v
	fi
	r=$?
	[ $r != 0 ] || ! grep -qi 'mismatch' "$LOG/rping-$proto.log" || r=1
	result $r "$role: rping on $dev ($proto), 100 round trips of 1024 bytes$([ "$GI" = 0 ] || echo ', validated')" \
		"$LOG/rping-$proto.log"
done

if [ "$GI" = 1 ]; then
	# The driver choice, as a boot makes it (udev's coldplug: an "add" event
	# for each adapter), without the file and with it again.
	conf=/etc/modprobe.d/erdma-rs.conf
	coldplug() {
		modprobe -r erdma_rs erdma >/dev/null 2>&1
		for _p in $(pci_adapters); do
			echo add >"/sys/bus/pci/devices/$_p/uevent"
		done
		udevadm settle --timeout=60
	}
	mv "$conf" /root/erdma-rs.conf.away
	coldplug
	if wait_for 60 bound_to erdma && ! grep -q '^erdma_rs ' /proc/modules; then r=0; else r=1; fi
	{ for p in $(pci_adapters); do echo "$p: $(readlink /sys/bus/pci/devices/$p/driver)"; done; lsmod | grep erdma; } >/tmp/choice.out 2>&1
	result $r "without $conf, udev loads the C driver erdma for every adapter (and not erdma_rs)" /tmp/choice.out
	check "erdma's ports come up ACTIVE" wait_for 60 all_active
	mv /root/erdma-rs.conf.away "$conf"
	coldplug
	if wait_for 60 bound_to erdma_rs && ! grep -q '^erdma ' /proc/modules; then r=0; else r=1; fi
	{ for p in $(pci_adapters); do echo "$p: $(readlink /sys/bus/pci/devices/$p/driver)"; done; lsmod | grep erdma; } >/tmp/choice.out 2>&1
	result $r "with $conf back, udev loads erdma_rs again" /tmp/choice.out
	check "erdma_rs's ports come up ACTIVE" wait_for 60 all_active
	finish
fi

# Guest 0: the developer's loop. Build erdma_rs against the installed headers
# (make -C /lib/modules/$(uname -r)/build M=...), as the documentation says.
src=/root/erdma_rs
rm -rf "$src" && cp -r erdma_rs-src "$src"
say "building erdma_rs out of tree against /lib/modules/$KREL/build"
s=$(date +%s)
timeout 1500 make -C "/lib/modules/$KREL/build" M="$src" LLVM=-19 modules >"$LOG/oot-build.log" 2>&1
result $? "make -C /lib/modules/$KREL/build M=$src LLVM=-19 modules builds erdma_rs.ko ($(($(date +%s) - s)) s)" \
	"$LOG/oot-build.log"
check "its vermagic is the installed kernel's" \
	sh -c "[ \"\$(modinfo -F vermagic '$src/erdma_rs.ko')\" = \"\$(modinfo -F vermagic erdma_rs)\" ] && modinfo -F vermagic '$src/erdma_rs.ko'"
modprobe -r erdma_rs
insmod "$src/erdma_rs.ko" >/tmp/insmod.out 2>&1
result $? "insmod of the out-of-tree erdma_rs.ko loads into the installed kernel" /tmp/insmod.out
check "the out-of-tree erdma_rs brings every port up ACTIVE" wait_for 60 all_active
check "the module loaded is the out-of-tree one (its taint is O)" \
	sh -c "cat /sys/module/erdma_rs/taint; [ \"\$(cat /sys/module/erdma_rs/taint)\" = O ]"
finish
