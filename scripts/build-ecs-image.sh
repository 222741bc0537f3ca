#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# build-ecs-image.sh: the rehearsal's instance, a Debian trixie disk image as a
# stock ECS instance has it (systemd, udev, an initramfs, Debian's cloud kernel,
# the distribution's rdma-core, nftables), made with debootstrap into the cache.
# Its kernel is Debian's linux-image-$DEBIAN_KERNEL of trixie-backports (the
# 7.3 cloud kernel the module package of scripts/debian-package.sh is built
# for), installed with apt from Debian's package as an instance's owner
# installs it: no other kernel is on the image.
#   $ERDMA_CACHE/ecs-image/KEY/disk.raw   ext4, label erdma-root (the whole disk)
#   $ERDMA_CACHE/ecs-image/KEY/vmlinuz    Debian's cloud kernel and its
#   $ERDMA_CACHE/ecs-image/KEY/initrd     initramfs, which QEMU boots directly
# What the image adds to a stock instance, each for a stated reason:
#   - what a developer installs to build a module out of tree (make, clang,
#     lld and llvm $LLVM_MAJOR from trixie; the Rust compiler the kernel was
#     built with, rustc $RUSTC_VERSION, copied from this machine's rustup
#     toolchain into /usr/local: the guest has no network);
#   - erdma-payload.service: at boot it runs /mnt/payload/init.sh of a disk
#     labelled erdma-payload, if one is attached (the rehearsal's stand-in
#     for a user at the console, like cloud-init's runcmd); without that
#     disk it does nothing.
# Prints the image directory on the last line of stdout.

_step_name=ecs-image
. "$(dirname "$0")/lib.sh"

RUST_TOOLCHAIN=$(dirname "$(dirname "$(rustup which rustc 2>/dev/null || command -v rustc)")")
[ -x "$RUST_TOOLCHAIN/bin/rustc" ] || die "no Rust toolchain found (rustup which rustc)"
key=$(key_of "$GUEST_SUITE" "$ECS_PACKAGES" "$DEBIAN_KERNEL" "$DEBIAN_KERNEL_VERSION" "$(rustc -vV)" "$0" \
	"$TOP/scripts/guest/erdma-payload.service")
dir=$ERDMA_CACHE/ecs-image/$key

if stamp_ok "$dir.stamp" "$key" && [ -f "$dir/disk.raw" ]; then
	say "instance image: ok ($dir)"
	echo "$dir"
	exit 0
fi
[ "$(id -u)" = 0 ] || die "debootstrap needs root"
command -v debootstrap >/dev/null || die "debootstrap is missing: run scripts/setup.sh host"
say "building the $GUEST_SUITE instance image (debootstrap, about 5 minutes): $ECS_PACKAGES"
rm -rf "$dir" "$dir.stamp"
mkdir -p "$dir"
root=$dir/root
run_logged "debootstrap $GUEST_SUITE" "$dir/debootstrap.log" \
	debootstrap --variant=minbase --include="$ECS_PACKAGES" "$GUEST_SUITE" "$root" "$(debian_mirror)"

in_root() { chroot "$root" "$@"; }
# The instance's own configuration, as a cloud image has it.
echo "LABEL=erdma-root / ext4 rw,errors=remount-ro 0 1" >"$root/etc/fstab"
echo ecs-instance >"$root/etc/hostname"
printf 'deb %s %s main\n' "$(debian_mirror)" "$GUEST_SUITE" >"$root/etc/apt/sources.list"
printf 'deb %s %s-backports main\n' "$(debian_mirror)" "$GUEST_SUITE" >>"$root/etc/apt/sources.list"
# Debian's kernel, from trixie-backports (its postinst makes the initramfs).
cp /etc/resolv.conf "$root/etc/resolv.conf"
run_logged "apt-get install linux-image-$DEBIAN_KERNEL ($DEBIAN_KERNEL_VERSION)" "$dir/kernel.log" \
	in_buildroot "$root" sh -c "apt-get -q update && DEBIAN_FRONTEND=noninteractive apt-get -q -y \
		--no-install-recommends install -t $GUEST_SUITE-backports linux-image-$DEBIAN_KERNEL=$DEBIAN_KERNEL_VERSION"
rm -f "$root/etc/resolv.conf"
in_root passwd -d root >/dev/null # console login for whoever debugs a rehearsal
# Timers that would run apt or scrubs in the middle of a test.
for t in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer; do
	in_root systemctl disable "$t" >/dev/null 2>&1 || true
done
install -m 0644 "$TOP/scripts/guest/erdma-payload.service" "$root/etc/systemd/system/"
in_root systemctl enable erdma-payload.service >/dev/null 2>&1 ||
	die "could not enable erdma-payload.service in the image"

# The Rust compiler of the kernel build, in /usr/local as the standalone
# installer of the Rust project puts it (install.sh --prefix=/usr/local): only
# what compiling a kernel module needs, rustc and its libraries.
cp -a "$RUST_TOOLCHAIN/bin/rustc" "$root/usr/local/bin/"
cp -a "$RUST_TOOLCHAIN"/lib/*.so* "$root/usr/local/lib/"
in_root ldconfig
in_root /usr/local/bin/rustc --version >/dev/null || die "the copied rustc does not run in the image"

# Debian's cloud kernel and its initramfs (made by the kernel's postinst).
k=vmlinuz-$DEBIAN_KERNEL
[ -n "$k" ] && [ -f "$root/boot/initrd.img-${k#vmlinuz-}" ] ||
	die "the image has no kernel and initramfs in /boot; read $dir/debootstrap.log"
cp "$root/boot/$k" "$dir/vmlinuz"
cp "$root/boot/initrd.img-${k#vmlinuz-}" "$dir/initrd"
echo "${k#vmlinuz-}" >"$dir/kernel-release"

in_root apt-get clean
rm -rf "$root"/var/lib/apt/lists/*
size=$(du -sm "$root" | cut -f1)
# Room for the packages, their headers and a module build (about 1 GiB).
run_logged "mke2fs ($size MiB of files)" "$dir/mke2fs.log" \
	mke2fs -q -t ext4 -L erdma-root -d "$root" "$dir/disk.raw" "$((size + 2048))M"
rm -rf "$root"
echo "$key" >"$dir.stamp"
# Images of other keys are stale: only this one is used.
find "$ERDMA_CACHE/ecs-image" -mindepth 1 -maxdepth 1 ! -name "$key" ! -name "$key.stamp" -exec rm -rf {} +
say "instance image ready: $(cat "$dir/kernel-release"), ${size} MiB of files ($dir)"
echo "$dir"
