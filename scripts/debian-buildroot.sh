#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# debian-buildroot.sh: the build root for erdma_rs on Debian's own kernel
# (issue 32): a trixie minbase tree in the cache with the compilers Debian
# built linux-image-$DEBIAN_KERNEL with (rustc, rust-src and libstd-rust-dev
# $DEBIAN_RUSTC_VERSION, gcc-14, bindgen and libclang of trixie), the kernel's
# headers package (its .config and Module.symvers) and the kernel's source
# (linux-source-7.3 of the same version: the kernel crate is built again
# from it). Made with debootstrap and the tree's own apt (nothing is
# installed on the host); keyed by everything above, so a new Debian kernel
# version (DEBIAN_KERNEL, DEBIAN_KERNEL_VERSION) makes a new one. Prints the
# build root's path last.

_step_name=debian-buildroot
. "$(dirname "$0")/lib.sh"

key=$(key_of "$GUEST_SUITE" "$DEBIAN_BUILDROOT_PACKAGES" "$DEBIAN_RUSTC_VERSION" "$DEBIAN_KERNEL" \
	"$DEBIAN_KERNEL_VERSION" "$0")
dir=$ERDMA_CACHE/debian-buildroot/$key

if ! stamp_ok "$dir.stamp" "$key"; then
	[ "$(id -u)" = 0 ] || die "debootstrap and chroot need root"
	command -v debootstrap >/dev/null || die "debootstrap is missing: run scripts/setup.sh host"
	mirror=$(debian_mirror)
	say "building the trixie build root for $DEBIAN_KERNEL (debootstrap and apt, about 5 minutes)"
	rm -rf "$dir" "$dir.tmp" "$dir.stamp"
	mkdir -p "$(dirname "$dir")"
	run_logged "debootstrap $GUEST_SUITE" "$dir.log" \
		debootstrap --variant=minbase --include="$DEBIAN_BUILDROOT_PACKAGES" \
		"$GUEST_SUITE" "$dir.tmp" "$mirror"
	echo "deb $mirror trixie-backports main" >"$dir.tmp/etc/apt/sources.list.d/backports.list"
	cp /etc/resolv.conf "$dir.tmp/etc/resolv.conf"
	pkgs="rustc=$DEBIAN_RUSTC_VERSION rust-src=$DEBIAN_RUSTC_VERSION libstd-rust-dev=$DEBIAN_RUSTC_VERSION"
	pkgs="$pkgs linux-headers-$DEBIAN_KERNEL=$DEBIAN_KERNEL_VERSION"
	pkgs="$pkgs linux-source-$(echo "$DEBIAN_KERNEL" | cut -d. -f1-2)=$DEBIAN_KERNEL_VERSION"
	run_logged "apt-get install (rustc $DEBIAN_RUSTC_VERSION, the kernel's headers and source)" "$dir.apt.log" \
		chroot "$dir.tmp" sh -c "apt-get -q update && DEBIAN_FRONTEND=noninteractive apt-get -q -y \
			--no-install-recommends install $pkgs"
	chroot "$dir.tmp" rustc --version | grep -q "^rustc ${DEBIAN_RUSTC_VERSION%%+*} " ||
		die "the build root's rustc is $(chroot "$dir.tmp" rustc --version), not ${DEBIAN_RUSTC_VERSION%%+*}"
	chroot "$dir.tmp" apt-get clean
	mv "$dir.tmp" "$dir"
	echo "$key" >"$dir.stamp"
	say "build root ready: $(chroot "$dir" rustc --version), $(chroot "$dir" gcc-14 --version | head -n 1), $(du -sh "$dir" | cut -f1)"
else
	say "build root: ok ($dir)"
fi
ln -sfn "$key" "$ERDMA_CACHE/debian-buildroot/current"
echo "$dir"
