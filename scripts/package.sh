#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# package.sh: Debian packages for an ECS instance, in out/package/:
#   linux-image-KREL   the release kernel of this tree (make bindeb-pkg), with
#                      erdma_rs and the C erdma as modules: a Rust module loads
#                      only into a kernel built by the same compiler, so the
#                      driver ships with the kernel it was built with
#   linux-headers-KREL what an out-of-tree module build needs, Rust included
#                      (rust/*.rmeta and rust/*.so: the hook in
#                      scripts/kernel-hooks.sh)
#   erdma-rs           the driver choice: /etc/modprobe.d/erdma-rs.conf makes
#                      erdma_rs, not erdma, the driver udev loads for the
#                      adapter (removing that file restores erdma), and the
#                      page Documentation/infiniband/erdma_rs_ecs.rst
# Versioned after the tree (VERSION-1erdmars.COMMITS.gHASH[.dirty]), and
# reproducible: the build's timestamp, user and host come from the tree's last
# commit, so the same tree gives the same package contents (make check builds
# them twice and compares). PACKAGE_OUT=DIR writes them there instead.
#
# ERDMA_SIGNING_KEY=FILE (a PEM file with the user's private key and X.509
# certificate, Documentation/infiniband/erdma_rs_ecs.rst "Module signing"):
# the kernel is built with CONFIG_MODULE_SIG and that certificate, and every
# module is signed with the key (a build directory of its own).

_step_name=package
. "$(dirname "$0")/lib.sh"

OUT=${PACKAGE_OUT:-$TOP/out/package}
rm -rf "$OUT"
mkdir -p "$OUT"

commit=$(git -C "$TOP" rev-parse --short=12 HEAD)
count=$(git -C "$TOP" rev-list --count HEAD)
dirty=""
git -C "$TOP" diff --quiet HEAD -- 2>/dev/null || dirty=.dirty
epoch=$(git -C "$TOP" log -1 --format=%ct)
kver=${KERNEL_PKG_VERSION%%-*}
pkgver="$kver-1erdmars.$count.g$commit$dirty"

# Everything that would otherwise put the time, the user or the machine into
# the kernel and the packages.
export SOURCE_DATE_EPOCH=$epoch
export KBUILD_BUILD_TIMESTAMP="@$epoch" KBUILD_BUILD_USER=erdma-rs KBUILD_BUILD_HOST=erdma-rs
export KBUILD_BUILD_VERSION=1

signing=()
if [ -n "${ERDMA_SIGNING_KEY:-}" ]; then
	key=$(readlink -f "$ERDMA_SIGNING_KEY")
	grep -q 'PRIVATE KEY-----' "$key" 2>/dev/null && grep -q 'BEGIN CERTIFICATE' "$key" ||
		die "ERDMA_SIGNING_KEY=$ERDMA_SIGNING_KEY is not a PEM file with a private key and a certificate"
	frag=$ERDMA_CACHE/signing-$(key_of "$key").config
	printf '%s\n' CONFIG_MODULE_SIG=y CONFIG_MODULE_SIG_ALL=y CONFIG_MODULE_SIG_SHA256=y \
		"CONFIG_MODULE_SIG_KEY=\"$key\"" >"$frag"
	signing=(KERNEL_EXTRA_CONFIG="$frag")
	pkgver=$pkgver.signed
	say "modules signed with $key"
fi

say "packages $pkgver (tree $commit$dirty, timestamp $(date -u -d "@$epoch" +%FT%TZ))"
# The kernel's packages are compressed with zstd (dpkg reads it since 1.21.18;
# trixie has 1.22): xz took 37 s of the two cores for the 242 MB of
# linux-headers (its Rust metadata), zstd under a second (62 MB, not 44), and
# make check builds the packages twice.
KOUT=$(env "${signing[@]}" KERNEL_FLAVOR=release KDEB_COMPRESS=zstd "$TOP/scripts/build-kernel.sh" bindeb-pkg \
	KDEB_PKGVERSION="$pkgver" KDEB_CHANGELOG_DIST="$GUEST_SUITE" | tail -n 1)
# make bindeb-pkg writes the packages next to the build directory.
for p in linux-image linux-headers; do
	f=$(ls "$(dirname "$KOUT")"/"$p"-*_"$pkgver"_amd64.deb 2>/dev/null | head -n 1)
	[ -n "$f" ] || die "make bindeb-pkg left no $p package for $pkgver; read $KOUT/build.log"
	mv "$f" "$OUT/"
done
rm -f "$(dirname "$KOUT")"/*_"$pkgver"_*.{deb,buildinfo,changes}
krel=$(cat "$KOUT/include/config/kernel.release")

# erdma-rs: the driver choice and its documentation.
pkg=$OUT/erdma-rs.tree
mkdir -p "$pkg/DEBIAN" "$pkg/etc/modprobe.d" "$pkg/usr/share/doc/erdma-rs"
install -m 0644 "$TOP/scripts/package/erdma-rs.conf" "$pkg/etc/modprobe.d/erdma-rs.conf"
install -m 0644 "$TOP/Documentation/infiniband/erdma_rs_ecs.rst" "$pkg/usr/share/doc/erdma-rs/"
install -m 0644 "$TOP/scripts/package/copyright" "$pkg/usr/share/doc/erdma-rs/copyright"
echo /etc/modprobe.d/erdma-rs.conf >"$pkg/DEBIAN/conffiles"
cat >"$pkg/DEBIAN/control" <<EOF
Package: erdma-rs
Version: $pkgver
Architecture: amd64
Maintainer: The erdma-rs developers <erdma-rs@localhost>
Depends: linux-image-$krel (= $pkgver)
Section: kernel
Priority: optional
Installed-Size: $(du -sk --exclude=DEBIAN "$pkg" | cut -f1)
Description: Elastic RDMA Adapter: use the Rust driver erdma_rs
 Makes erdma_rs (in linux-image-$krel, built from the same tree) the driver
 that binds the Alibaba Cloud Elastic RDMA Adapter (PCI 1ded:107f) at boot,
 instead of the in-tree C driver erdma. Removing
 /etc/modprobe.d/erdma-rs.conf (or this package) and rebooting restores erdma.
 See /usr/share/doc/erdma-rs/erdma_rs_ecs.rst.
EOF
find "$pkg" -exec touch -h -d "@$epoch" {} +
dpkg-deb --root-owner-group -Zxz --build "$pkg" "$OUT/erdma-rs_${pkgver}_amd64.deb" >/dev/null ||
	die "dpkg-deb could not build the erdma-rs package"
rm -rf "$pkg"

(cd "$OUT" && sha256sum ./*.deb >SHA256SUMS)
say "done: $(cd "$OUT" && ls ./*.deb | tr '\n' ' ')(checksums: $OUT/SHA256SUMS)"
