#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# rehearsal.sh: what Documentation/infiniband/erdma_rs_ecs.rst tells a user of
# an ECS instance to do, done in QEMU the way the user does it, with the
# packages of make package (out/package, or REHEARSAL_PACKAGES=DIR).
#
#   1. The instance: a Debian trixie disk image with systemd, udev, an
#      initramfs, Debian's cloud kernel and the distribution's rdma-core
#      (scripts/build-ecs-image.sh, cached). It boots Debian's kernel and
#      installs the packages with apt (scripts/guest/rehearsal.sh, run by the
#      selftests' run_tests.sh with REHEARSAL_PHASE=install).
#   2. The "reboot": the guest powers off; the kernel and initramfs the
#      packages put in its /boot are read from its disk (debugfs) and booted
#      directly, as a bootloader would boot them.
#   3. Two such instances (copies of the installed disk), each with a RoCEv2
#      and an iWARP adapter, the NICs of each protocol wired to each other:
#      the driver loads by itself, rdma link, ibv_devinfo, ibv_rc_pingpong and
#      rping between them; the out-of-tree build of erdma_rs against the
#      installed headers, loaded into the installed kernel; the driver choice
#      undone and redone (REHEARSAL_PHASE=check).
#
#   4. Debian's own kernel (issue 32): another copy of the instance, which
#      runs Debian's linux-image-K, installs the module package
#      erdma-rs-modules-K of make debian-package (out/debian-package, or
#      REHEARSAL_STOCK_PACKAGES=DIR; check.sh signs it with the test key of
#      test_signing_key) with apt (REHEARSAL_PHASE=stock-install), then boots
#      again with two RoCEv2 and two iWARP adapters: the driver loaded by
#      udev, its signature and taint, the instance's own tools, ibv_devinfo,
#      ibv_rc_pingpong (RoCEv2, and iWARP in compat mode), rping on both, and
#      the selftests' nvmeof.sh, NVMe over RDMA (REHEARSAL_PHASE=stock-check).
#      Without that package this part fails, and the rest still runs.
#      REHEARSAL_PARTS="ours stock" (the default) chooses the parts: ours is
#      steps 1 to 3, stock step 4.
#
# The guests' TAP files are in out/vm/rehearsal-PHASE/guest*/results, each
# phase's vmrun exit status in out/vm/rehearsal-PHASE.rc (PHASE: install,
# check, stock-install, stock-check).
# The disks (a few GB, sparse) live in $ERDMA_CACHE/rehearsal while it runs.

_step_name=rehearsal
. "$(dirname "$0")/../scripts/lib.sh"

PKG=${REHEARSAL_PACKAGES:-$TOP/out/package}
STOCK_PKG=${REHEARSAL_STOCK_PACKAGES:-$TOP/out/debian-package}
EMU=${CARGO_TARGET_DIR:-$ERDMA_CACHE/cargo-target}/release/erdma-emu
W=$ERDMA_CACHE/rehearsal
VMS=$TOP/out/vm

image=$("$TOP/scripts/build-ecs-image.sh" | tail -n 1)
[ -f "$image/disk.raw" ] || die "no instance image; read the output of scripts/build-ecs-image.sh above"
command -v qemu-img >/dev/null || die "qemu-img is missing (apt-get install qemu-utils)"

rm -rf "$W" "$VMS"/rehearsal-*
mkdir -p "$W/package" "$VMS"
trap 'rm -rf "$W"' EXIT
cp -r "$TOP/drivers/infiniband/hw/erdma_rs" "$W/erdma_rs-src"
# The guest's side runs beside the selftests, with their lib.sh and run_tests.sh.
cp -r "$TOP/tools/testing/selftests/rdma/erdma_rs" "$W/erdma_rs"
cp "$TOP/scripts/guest/rehearsal.sh" "$W/erdma_rs/"

# vmrun_phase NAME VMRUN-ARGS...: one boot of the rehearsal; fails the script
# with the guest's own words when it fails.
vmrun_phase() {
	local name=$1 start rc=0
	shift
	start=$(date +%s)
	say "$name: booting (console: $VMS/rehearsal-$name/guest*.console.log)"
	"$TOP/scripts/vmrun.py" --quiet --out "$VMS/rehearsal-$name" --emu "$EMU" --memory 2G \
		--copy "$W/erdma_rs" --copy "$W/package" "$@" || rc=$?
	echo $rc >"$VMS/rehearsal-$name.rc"
	say "$name: done in $(($(date +%s) - start)) s (exit $rc)"
	return $rc
}

# ours: steps 1 to 3, our kernel and driver packages.
ours() {
	local deb krel
	deb=$(ls "$PKG"/linux-image-*_amd64.deb 2>/dev/null | grep -v dbg | head -n 1)
	[ -n "$deb" ] || { say "FAILED: no linux-image package in $PKG: run make package first"; return 1; }
	krel=$(basename "$deb" | sed -E 's/^linux-image-(.*)_[^_]+_amd64\.deb$/\1/')
	cp "$PKG"/linux-image-"$krel"_*.deb "$PKG"/linux-headers-"$krel"_*.deb "$PKG"/erdma-rs_*.deb "$W/package/"
	echo "$krel" >"$W/package/kernel-release"
	# 1. Install, on Debian's own kernel.
	qemu-img create -q -f qcow2 -b "$image/disk.raw" -F raw "$W/install.qcow2"
	vmrun_phase install --smp 2 --timeout 1800 --disk "$W/install.qcow2" \
		--kernel "$image/vmlinuz" --initrd "$image/initrd" \
		--dev proto=roce --run 'REHEARSAL_PHASE=install erdma_rs/run_tests.sh rehearsal.sh' ||
		{ say "FAILED: installing the packages failed; read $VMS/rehearsal-install/guest0/results/"; return 1; }

	# 2. The kernel and initramfs the packages installed, from the disk.
	say "reading /boot/vmlinuz-$krel and /boot/initrd.img-$krel from the installed disk"
	qemu-img convert -O raw "$W/install.qcow2" "$W/installed.raw"
	rm -f "$W/install.qcow2"
	for f in "vmlinuz-$krel" "initrd.img-$krel"; do
		debugfs -R "dump /boot/$f $W/$f" "$W/installed.raw" >/dev/null 2>&1
		[ -s "$W/$f" ] || { say "FAILED: the installed disk has no /boot/$f"; return 1; }
	done

	# 3. Two instances on the installed kernel.
	for g in 0 1; do
		qemu-img create -q -f qcow2 -b "$W/installed.raw" -F raw "$W/instance$g.qcow2"
	done
	vmrun_phase check --smp 1 --timeout 2400 \
		--disk "$W/instance0.qcow2" --disk "$W/instance1.qcow2" \
		--kernel "$W/vmlinuz-$krel" --initrd "$W/initrd.img-$krel" \
		--dev proto=roce,link=2 --dev proto=iwarp,link=3 --dev proto=roce,link=0 --dev proto=iwarp,link=1 \
		--guest 0,1 --guest 2,3 --copy "$W/erdma_rs-src" --run 'REHEARSAL_PHASE=check erdma_rs/run_tests.sh rehearsal.sh' ||
		{ say "FAILED: the installed instances failed; read $VMS/rehearsal-check/guest*/results/"; return 1; }
	rm -f "$W"/instance*.qcow2 "$W/installed.raw"
	say "our packages passed: kernel $krel installed, booted and used in two instances"
}

# stock: step 4, Debian's own kernel and the module package.
stock() {
	local sdeb k
	k=$(cat "$image/kernel-release")
	sdeb=$(ls "$STOCK_PKG"/erdma-rs-modules-"$k"_*_amd64.deb 2>/dev/null | head -n 1)
	[ -n "$sdeb" ] || { say "FAILED: no erdma-rs-modules-$k package in $STOCK_PKG: make debian-package first"; return 1; }
	mkdir -p "$W/stock"
	cp "$sdeb" "$W/stock/"
	echo "$k" >"$W/stock/kernel-release"
	echo "$DEBIAN_KERNEL_VERSION" >"$W/stock/kernel-version"
	# What modinfo must show of the signature: the test key's subject and
	# serial number (colon-separated bytes, as kmod prints them).
	openssl x509 -in "$(test_signing_key)" -noout -subject -nameopt multiline |
		sed -n 's/^ *commonName *= *//p' >"$W/stock/signer"
	openssl x509 -in "$(test_signing_key)" -noout -serial | sed 's/^serial=//; s/../&:/g; s/:$//' >"$W/stock/sig_key"
	qemu-img create -q -f qcow2 -b "$image/disk.raw" -F raw "$W/stock.qcow2"
	vmrun_phase stock-install --smp 1 --timeout 900 --disk "$W/stock.qcow2" \
		--kernel "$image/vmlinuz" --initrd "$image/initrd" --copy "$W/stock" \
		--dev proto=roce --run 'REHEARSAL_PHASE=stock-install erdma_rs/run_tests.sh rehearsal.sh' ||
		{ say "FAILED: installing the module package failed; read $VMS/rehearsal-stock-install/guest0/results/"; return 1; }
	# (The package leaves the kernel and its initramfs as they were: the
	# "reboot" boots the same ones.)
	vmrun_phase stock-check --smp 1 --timeout 1200 --disk "$W/stock.qcow2" \
		--kernel "$image/vmlinuz" --initrd "$image/initrd" --copy "$W/stock" \
		--dev proto=roce,link=1 --dev proto=roce,link=0 --dev proto=iwarp,link=3 --dev proto=iwarp,link=2 \
		--run 'REHEARSAL_PHASE=stock-check ERDMA_DRIVER=erdma_rs erdma_rs/run_tests.sh rehearsal.sh nvmeof.sh' ||
		{ say "FAILED: Debian's kernel with the module package failed; read $VMS/rehearsal-stock-check/guest0/results/"; return 1; }
	say "the module package passed: erdma-rs-modules-$k installed on Debian's $k and used"
}

rc=0
for part in ${REHEARSAL_PARTS:-ours stock}; do
	case "$part" in
	ours | stock) "$part" || rc=1 ;;
	*) die "REHEARSAL_PARTS: '$part' is neither ours nor stock" ;;
	esac
done
[ $rc = 0 ] || die "the rehearsal failed (above)"
say "the rehearsal passed"
