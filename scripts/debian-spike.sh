#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# debian-spike.sh: issue 32's spike. A Rust module built out of tree against
# Debian's own kernel (scripts/debian-kbuild.sh: Debian's configuration and
# Module.symvers, the kernel crate built again from the same source by the
# same rustc) must load into that kernel, unmodified: Debian's
# linux-image-$DEBIAN_KERNEL, booted under QEMU with an initramfs of
# busybox and the module. The guest loads it with modprobe (after depmod),
# then prints what the verdict needs: the module's vermagic against the
# running kernel's, the kernel's taint flags, the module's log lines, and
# every kernel log line about the module's symbols or its taint; unloads it.
#
# With --driver it also loads erdma_rs itself (scripts/debian-module.sh),
# with the RDMA core modules it depends on taken from Debian's
# linux-modules-$DEBIAN_KERNEL (decompressed here: busybox's modprobe does not
# decompress), and unloads it: the kernel's and ib_core's symbols resolve.
#
# Exits 0 only when the module loaded and unloaded, its vermagic is the
# kernel's and the only taint is out-of-tree (O) and unsigned (E). Output
# in out/debian-spike/ (console.log: the guest's console).

_step_name=debian-spike
. "$(dirname "$0")/lib.sh"

driver=0
[ "${1:-}" = --driver ] && driver=1
drv_ko=""
[ $driver = 0 ] || drv_ko=$("$TOP/scripts/debian-module.sh" | tail -n 1)
OUT=$TOP/out/debian-spike
rm -rf "$OUT" && mkdir -p "$OUT"
tree=$("$TOP/scripts/debian-kbuild.sh" | tail -n 1)
root=$("$TOP/scripts/debian-buildroot.sh" | tail -n 1)
K=$DEBIAN_KERNEL

# ---- the module, built out of tree against the prepared tree ---------------------
rm -rf "$root/build/abi_probe" && cp -r "$TOP/scripts/debian/abi_probe" "$root/build/abi_probe"
run_logged "the probe module against $K" "$OUT/module.log" in_buildroot "$root" \
	make -C "$tree" ARCH=x86 CROSS_COMPILE=x86_64-linux-gnu- CC=x86_64-linux-gnu-gcc-14 HOSTCC=gcc-14 \
	KERNELRELEASE="$K" M=/build/abi_probe modules
ko=$root/build/abi_probe/erdma_rs_abi_probe.ko
[ -f "$ko" ] || die "no module built; read $OUT/module.log"
in_buildroot "$root" modinfo /build/abi_probe/erdma_rs_abi_probe.ko >"$OUT/modinfo.txt"
say "built: $(grep '^vermagic' "$OUT/modinfo.txt" | tr -s ' ')"

# ---- Debian's kernel image and busybox, from Debian's packages ---------------------
img=$root/build/image-$DEBIAN_KERNEL_VERSION
# Debian's vmlinuz: in linux-binary-K (linux-image-K depends on it), under
# /usr/lib/modules/K.
vmlinuz=$img/usr/lib/modules/$K/vmlinuz
if [ ! -f "$vmlinuz" ] || [ ! -f "$img/usr/lib/modules/$K/modules.dep" ]; then
	rm -rf "$root/build/debs" "$img" && mkdir -p "$root/build/debs"
	run_logged "downloading linux-image-$K $DEBIAN_KERNEL_VERSION (its linux-binary) and busybox-static" "$OUT/download.log" \
		in_buildroot "$root" sh -c "cd /build/debs && apt-get -q download linux-image-$K=$DEBIAN_KERNEL_VERSION linux-binary-$K=$DEBIAN_KERNEL_VERSION linux-modules-$K=$DEBIAN_KERNEL_VERSION busybox-static"
	for d in "$root"/build/debs/*.deb; do dpkg-deb -x "$d" "$img"; done
	# The package's modules.dep is made at its installation (depmod).
	in_buildroot "$root" depmod -b "/build/${img##*/}/usr" "$K" ||
		die "depmod over Debian's linux-modules-$K failed"
fi
[ -f "$vmlinuz" ] || die "no $vmlinuz in Debian's linux-binary-$K; read $OUT/download.log"

# ---- the initramfs ----------------------------------------------------------------
ini=$OUT/initramfs
mkdir -p "$ini"/{bin,proc,sys,dev,tmp,lib/modules/"$K"/extra}
cp "$img/usr/bin/busybox" "$ini/bin/busybox"
for a in sh mount modprobe depmod rmmod cat grep dmesg poweroff sleep echo uname; do
	ln -s busybox "$ini/bin/$a"
done
cp "$ko" "$ini/lib/modules/$K/extra/"
cp "$img/usr/lib/modules/$K/modules.builtin"* "$ini/lib/modules/$K/" 2>/dev/null || true
grep '^vermagic' "$OUT/modinfo.txt" | sed 's/^vermagic: *//' >"$ini/vermagic"
# erdma_rs and, from Debian's modules.dep, every module it needs.
mods=$img/usr/lib/modules/$K
if [ -n "$drv_ko" ]; then
	cp "$drv_ko" "$ini/lib/modules/$K/extra/erdma_rs.ko"
	need=$(sed -n 's/^depends: *//p' "$(dirname "$drv_ko")/modinfo.txt" | tr ',' ' ')
	done_list=" "
	for m in $need; do
		# "insmod PATH" for the module and every one it needs, in load order.
		in_buildroot "$root" modprobe -d "/build/${img##*/}/usr" -S "$K" --show-depends "$m" >"$OUT/deps-$m.txt" ||
			die "no module $m in Debian's linux-modules-$K"
		for f in $(awk '$1 == "insmod" { print $2 }' "$OUT/deps-$m.txt"); do
			f=${f#/build/"${img##*/}"/usr/lib/modules/"$K"/}
			case "$done_list" in *" $f "*) continue ;; esac
			done_list="$done_list$f "
			mkdir -p "$ini/lib/modules/$K/$(dirname "$f")"
			case $f in
			*.xz) xz -dc "$mods/$f" >"$ini/lib/modules/$K/${f%.xz}" ;;
			*.zst) zstd -qdc "$mods/$f" >"$ini/lib/modules/$K/${f%.zst}" ;;
			*) cp "$mods/$f" "$ini/lib/modules/$K/$f" ;;
			esac
		done
	done
	say "erdma_rs and the modules it needs from Debian's linux-modules-$K:$done_list"
fi
cat >"$ini/init" <<'INIT'
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev
echo "spike: kernel $(uname -r), $(cat /proc/version)"
echo "spike: module vermagic: $(cat /vermagic)"
echo "spike: taint before: $(cat /proc/sys/kernel/tainted)"
depmod
if modprobe erdma_rs_abi_probe; then
	echo "spike: modprobe: ok"
else
	echo "spike: modprobe: FAILED ($?)"
fi
echo "spike: taint after: $(cat /proc/sys/kernel/tainted)"
if [ -f /lib/modules/$(uname -r)/extra/erdma_rs.ko ]; then
	if modprobe erdma_rs; then echo "spike: modprobe erdma_rs: ok"; else echo "spike: modprobe erdma_rs: FAILED"; fi
	echo "spike: erdma_rs: $(grep '^erdma_rs ' /proc/modules)"
	dmesg | grep -e erdma_rs -e 'Unknown symbol' -e 'BUG:' -e 'WARNING:' -e 'Oops' | grep -v abi_probe |
		sed 's/^/spike: dmesg: /'
	if rmmod erdma_rs; then echo "spike: rmmod erdma_rs: ok"; else echo "spike: rmmod erdma_rs: FAILED"; fi
fi
echo "spike: loaded: $(grep erdma_rs_abi_probe /proc/modules)"
dmesg | grep -i "erdma_rs_abi_probe\|unknown symbol\|disagrees\|version magic\|taint" | sed 's/^/spike: dmesg: /'
if rmmod erdma_rs_abi_probe; then echo "spike: rmmod: ok"; else echo "spike: rmmod: FAILED"; fi
dmesg | grep "erdma_rs_abi_probe: unloaded" | sed 's/^/spike: dmesg: /'
echo "spike: end"
poweroff -f
INIT
chmod +x "$ini/init"
(cd "$ini" && find . | cpio -o -H newc 2>/dev/null | gzip -1) >"$OUT/initramfs.cpio.gz"

# ---- the boot ---------------------------------------------------------------------
qemu=$(cat "$ERDMA_CACHE/qemu/current")/bin/qemu-system-x86_64
say "booting Debian's linux-image-$K (TCG; console: $OUT/console.log)"
timeout 600 "$qemu" -machine q35 -accel tcg -cpu max -smp 1 -m 1G -nodefaults -display none \
	-no-reboot -serial "file:$OUT/console.log" -kernel "$vmlinuz" \
	-initrd "$OUT/initramfs.cpio.gz" -append "console=ttyS0 panic=-1 quiet loglevel=4" ||
	die "QEMU failed or timed out; read $OUT/console.log"
grep -a '^spike: ' "$OUT/console.log" | sed 's/^/    /'
kver=$(grep -a '^spike: kernel ' "$OUT/console.log" | awk '{ print $3 }' | tr -d ,)
[ "$kver" = "$K" ] || die "the guest did not run $K (it ran '$kver'); read $OUT/console.log"
grep -aq '^spike: modprobe: ok' "$OUT/console.log" || die "the module did not load; read $OUT/console.log"
grep -aq '^spike: rmmod: ok' "$OUT/console.log" || die "the module did not unload; read $OUT/console.log"
if [ -n "$drv_ko" ]; then
	grep -aq '^spike: modprobe erdma_rs: ok' "$OUT/console.log" || die "erdma_rs did not load; read $OUT/console.log"
	grep -aq '^spike: rmmod erdma_rs: ok' "$OUT/console.log" || die "erdma_rs did not unload; read $OUT/console.log"
	! grep -aq '^spike: dmesg: .*\(BUG:\|WARNING:\|Oops\|Unknown symbol\)' "$OUT/console.log" || die "the kernel reported trouble; read $OUT/console.log"
fi
grep -aq "^spike: module vermagic: $K " "$OUT/console.log" || die "the module's vermagic is not the kernel's"
taint=$(grep -a '^spike: taint after: ' "$OUT/console.log" | awk '{ print $4 }' | tr -d '\r')
# O (out-of-tree) is bit 12, E (unsigned) bit 13: nothing else.
[ -n "$taint" ] && [ $((taint & ~(4096 | 8192))) -eq 0 ] ||
	die "the kernel is tainted $taint: more than out-of-tree and unsigned (bits 12, 13)"
say "the spike's verdict: the module loads into Debian's own $K (taint $taint: out-of-tree, unsigned)"
