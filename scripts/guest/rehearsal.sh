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
#   stock-install, stock-check (issue 32)
#            a copy of the instance, on Debian's own kernel: the module
#            package of ../stock/ (erdma-rs-modules-K, signed with the
#            rehearsal's test key) installed with apt; after the "reboot",
#            in one guest with two RoCEv2 and two iWARP adapters: udev loads
#            erdma_rs for all four, with the taint of a signed out-of-tree
#            module, the instance's own tools (nftables, overlayfs, a bridge,
#            veth, tap, a network namespace), ibv_devinfo, ibv_rc_pingpong on
#            RoCEv2 and, in compat mode, on iWARP, rping on both; NVMe over
#            RDMA is the selftests' nvmeof.sh, run next in the same boot.
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
PKGDIR=$ERDMA_PAYLOAD/package
case "$PHASE" in stock-*) PKGDIR=$ERDMA_PAYLOAD/stock ;; esac
KREL=$(cat "$PKGDIR/kernel-release")

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

# What the phases on an installed system (check, stock-check) ask.
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

# ---- stock-install, stock-check: Debian's own kernel (issue 32) --------------------
if [ "$PHASE" = stock-install ]; then
	PKG=erdma-rs-modules-$KREL
	KVER=$(cat "$PKGDIR/kernel-version")
	# (Its postinst copies the package's /usr/lib/modules/K/vmlinuz to /boot.)
	check "booted Debian's $KREL, from Debian's package linux-image-$KREL ($KVER)" \
		sh -c "[ '$(uname -r)' = '$KREL' ] && [ \"\$(dpkg-query -W -f='\${Version}' linux-image-$KREL)\" = '$KVER' ] &&
			cmp /boot/vmlinuz-$KREL /usr/lib/modules/$KREL/vmlinuz &&
			dpkg -S /usr/lib/modules/$KREL/vmlinuz | grep -E '^linux-(image|binary)-' | grep -F -- '-$KREL: '"
	check "Debian's kernel has no eRDMA driver of its own (no erdma, no erdma_rs)" \
		sh -c "! modinfo erdma >/dev/null 2>&1 && ! modinfo erdma_rs >/dev/null 2>&1"
	say "apt-get install of $(ls "$PKGDIR"/*.deb | tr '\n' ' ')"
	check "apt-get installs $PKG from the built file" \
		sh -c "cd '$PKGDIR' && DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y ./${PKG}_*.deb >/tmp/apt.out 2>&1;
			r=\$?; cat /tmp/apt.out; exit \$r"
	check "its postinst ran depmod and asked for no reboot (the running kernel is $KREL)" \
		sh -c "! grep -q 'reboot into' /tmp/apt.out &&
			[ \"\$(modinfo -F filename erdma_rs)\" = /lib/modules/$KREL/updates/erdma-rs/erdma_rs.ko ]"
	check "modinfo: erdma_rs is built for $KREL and depends on ib_core" \
		sh -c "modinfo -F vermagic erdma_rs | grep -q '^$KREL SMP' && [ \"\$(modinfo -F depends erdma_rs)\" = ib_core ]"
	SIGNER=$(cat "$PKGDIR/signer") SIG_KEY=$(cat "$PKGDIR/sig_key")
	check "modinfo: erdma_rs is signed (sha256) by \"$SIGNER\", key $SIG_KEY" \
		sh -c "modinfo erdma_rs | grep -E '^(signer|sig_key|sig_hashalgo):';
			[ \"\$(modinfo -F signer erdma_rs)\" = '$SIGNER' ] && [ \"\$(modinfo -F sig_key erdma_rs)\" = '$SIG_KEY' ] &&
			[ \"\$(modinfo -F sig_hashalgo erdma_rs)\" = sha256 ]"
	check "dpkg knows /etc/modprobe.d/erdma-rs.conf as a conffile of $PKG" \
		sh -c "dpkg-query -W -f='\${Conffiles}' $PKG | grep -q /etc/modprobe.d/erdma-rs.conf"
	tap_finish
fi
if [ "$PHASE" = stock-check ]; then
	check "booted Debian's $KREL again, with systemd as PID 1" \
		sh -c "[ '$(uname -r)' = '$KREL' ] && [ \"\$(readlink /proc/1/exe)\" = /usr/lib/systemd/systemd ]"
	check "udev loaded erdma_rs by itself: $nadapters RDMA devices within 120 s of boot" wait_for 120 all_registered
	check "every adapter ($(erdma_functions | tr '\n' ' ')) is bound to erdma_rs" held_by erdma_rs
	tap_diag "$(bindings | tr '\n' ';')"
	# Out of tree (O) and signed by a key the kernel does not hold (E: without
	# Secure Boot that is not enforced), nothing else.
	check "the kernel's taint is only O and E, and erdma_rs's is OE" \
		sh -c "t=\$(cat /proc/sys/kernel/tainted); echo tainted \$t, erdma_rs \$(cat /sys/module/erdma_rs/taint);
			[ \$((t & ~(4096 | 8192))) = 0 ] && [ \"\$(cat /sys/module/erdma_rs/taint)\" = OE ]"
	check "the kernel log has no unknown symbol, Oops, BUG or WARNING" \
		sh -c "! dmesg | grep -E 'Unknown symbol|disagrees about version|Oops|BUG:|WARNING:|Call Trace'"
	command -v udevadm >/dev/null && udevadm settle --timeout=60 || true
	# The instance's own tools: what the kernel and userland of a Debian
	# instance do, beside the driver.
	check "nftables: a table and a chain added, listed by nft list ruleset, deleted" \
		sh -c "nft add table inet rehearsal &&
			nft add chain inet rehearsal input '{ type filter hook input priority 0; policy accept; }' &&
			nft list ruleset | grep -q 'table inet rehearsal' && nft delete table inet rehearsal"
	check "overlayfs: a mount whose writes land in its upper directory" \
		sh -c "rm -rf /tmp/ovl && mkdir -p /tmp/ovl/l /tmp/ovl/u /tmp/ovl/w /tmp/ovl/m && echo lower >/tmp/ovl/l/f &&
			mount -t overlay overlay -o lowerdir=/tmp/ovl/l,upperdir=/tmp/ovl/u,workdir=/tmp/ovl/w /tmp/ovl/m &&
			grep -qx lower /tmp/ovl/m/f && echo upper >/tmp/ovl/m/f && umount /tmp/ovl/m &&
			grep -qx upper /tmp/ovl/u/f && grep -qx lower /tmp/ovl/l/f"
	# (A TCP connection to a closed port of the bridge's address, from the
	# namespace: refused, so the SYN went through the veth pair and the
	# bridge and the RST came back.)
	check "a bridge with a tap device and a veth pair into a network namespace: reached across" \
		sh -c "ip netns add rehearsal && ip link add rbr0 type bridge && ip link add rveth0 type veth peer name rveth1 &&
			ip link set rveth0 master rbr0 && ip link set rveth1 netns rehearsal && ip tuntap add mode tap rtap0 &&
			ip link set rtap0 master rbr0 && ip addr add 10.99.0.1/24 dev rbr0 && ip link set rbr0 up &&
			ip link set rveth0 up && ip -n rehearsal addr add 10.99.0.2/24 dev rveth1 &&
			ip -n rehearsal link set rveth1 up && ip -n rehearsal link set lo up &&
			timeout 10 ip netns exec rehearsal bash -c 'exec 3<>/dev/tcp/10.99.0.1/9' 2>&1 | tee /dev/stderr |
			grep -q 'Connection refused'; r=\$?; ip link del rtap0; ip link del rbr0; ip netns del rehearsal; exit \$r"
	# The RDMA devices: the selftests' addresses (nics_up, which unloads the
	# driver, as every selftest starts), then their pairs.
	nics_up 91
	check "modprobe erdma_rs (with the NICs addressed)" modprobe erdma_rs
	# (udev renames the new devices: their names are read once it is done.)
	udevadm settle --timeout=60
	check "with the NICs up, every port is ACTIVE within 30 s" wait_for 30 all_active
	tap_diag "$(rdma link show | tr '\n' ';')"
	tmp=/tmp/rehearsal
	rm -rf "$tmp" && mkdir -p "$tmp"
	PORT=18600
	# rping_on KIND: rping from IB_B to IB_A, 100 validated round trips
	# (run_pair waits for the rdma_cm listener).
	rping_on() {
		next_port
		RUN_PAIR_READY=cm_listening
		tap_check "rping $IB_B -> $IB_A ($1), 100 round trips of 1024 bytes, validated" \
			run_pair "rping-$1" "$PORT" '' rping -s -a "$IP_A" -p "$PORT" -C 100 -S 1024 -- \
			rping -c -a "$IP_A" -I "$IP_B" -p "$PORT" -C 100 -S 1024 -V
		RUN_PAIR_READY=
	}
	PROTO=roce
	if roce_pair; then
		check "ibv_devinfo: $IB_A and $IB_B (RoCEv2) are InfiniBand-transport devices with an active port" \
			sh -c "for d in $IB_A $IB_B; do ibv_devinfo -d \$d | grep -q 'transport:.*InfiniBand' &&
				ibv_devinfo -d \$d | grep -q PORT_ACTIVE || exit 1; done"
		tap_check "ibv_rc_pingpong $IB_B -> $IB_A (RoCEv2), 100 round trips of 4096 bytes, checked" \
			pingpong roce "$IB_A" "$GID_A" "$IB_B" "$GID_B" "$IP_A" -n 100 -s 4096 -c
		rping_on RoCEv2
	else
		tap_not_ok "two RoCEv2 devices of erdma_rs with GIDs"
	fi
	PROTO=iwarp
	if iwarp_pair; then
		check "ibv_devinfo: $IB_A and $IB_B (iWARP) are iWARP-transport devices with an active port" \
			sh -c "for d in $IB_A $IB_B; do ibv_devinfo -d \$d | grep -q 'transport:.*iWARP' &&
				ibv_devinfo -d \$d | grep -q PORT_ACTIVE || exit 1; done"
		rping_on iWARP
	else
		tap_not_ok "two iWARP devices of erdma_rs with addresses"
	fi
	# Compat mode: the iWARP adapters as RoCEv2 devices, their queue pairs
	# connected the RoCE way (GIDs and QPNs exchanged out of band).
	iwarp_nds=$(expected_adapters | awk '$2 == "iwarp" { print $1 }' | while read -r mac; do netdev_of "$mac"; done)
	check "erdma_rs loaded again with compat_mode=1" \
		sh -c "modprobe -r erdma_rs && modprobe erdma_rs compat_mode=1 &&
			[ \"\$(cat /sys/module/erdma_rs/parameters/compat_mode)\" = Y ]"
	wait_for 60 all_active
	udevadm settle --timeout=60
	cibs="" cgids="" cips=""
	for nd in $iwarp_nds; do
		wait_for 20 sh -c "rdma link show | grep -q ' netdev $nd '"
		ib=$(ibdev_of "$nd") ip=$(ipv4_of "$nd") GID=""
		[ -z "$ib" ] || wait_for 20 find_gid "$ib" "$ip"
		tap_diag "compat mode: $nd: ${ib:-no RDMA device}, $ip, GID index ${GID:-none}"
		cibs="$cibs $ib" cgids="$cgids $GID" cips="$cips $ip"
	done
	set -- $cibs
	cib_a=${1:-} cib_b=${2:-}
	set -- $cgids
	cgid_a=${1:-} cgid_b=${2:-}
	set -- $cips
	if [ -n "$cgid_a" ] && [ -n "$cgid_b" ]; then
		tap_check "compat mode: ibv_rc_pingpong $cib_b -> $cib_a (iWARP as RoCEv2), 100 round trips, checked" \
			pingpong compat "$cib_a" "$cgid_a" "$cib_b" "$cgid_b" "$1" -n 100 -s 4096 -c
	else
		tap_not_ok "compat mode: RoCEv2 GIDs on both iWARP adapters"
	fi
	check "erdma_rs unloads" modprobe -r erdma_rs
	tap_finish
fi

# ---- check: the installed kernel ------------------------------------------------
GI=$ERDMA_GUEST
check "booted the installed kernel $KREL with systemd as PID 1" \
	sh -c "[ '$(uname -r)' = '$KREL' ] && [ \"\$(readlink /proc/1/exe)\" = /usr/lib/systemd/systemd ]"

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
