#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# package.sh: Debian packages for an ECS instance (issue 12; WORK IN PROGRESS),
# in out/package/:
#   linux-image-KREL, linux-headers-KREL  the release kernel of this tree
#                      (make bindeb-pkg); the headers carry what an
#                      out-of-tree Rust module build needs (rust/*.rmeta,
#                      rust/*.so: the hook in scripts/kernel-hooks.sh)
#   erdma-rs           erdma_rs.ko for that kernel in /lib/modules/KREL/updates
#                      and /etc/modprobe.d/erdma-rs.conf (not yet: the driver
#                      choice of issue 12)
# Versioned after the tree (VERSION-1erdmars.COMMITS.gHASH[.dirty]), and
# reproducible: the build's timestamp, user and host come from the tree's last
# commit, so the same tree gives the same package contents.
#
# Still to do (issue 12): the configuration an instance needs (a fragment
# derived from Debian's cloud configuration), the module package and its
# modprobe configuration, signing, the rehearsal in QEMU.

_step_name=package
. "$(dirname "$0")/lib.sh"

OUT=$TOP/out/package
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

say "packages $pkgver (tree $commit$dirty, timestamp $(date -u -d "@$epoch" +%FT%TZ))"
KOUT=$(KERNEL_FLAVOR=release "$TOP/scripts/build-kernel.sh" bindeb-pkg \
	KDEB_PKGVERSION="$pkgver" KDEB_CHANGELOG_DIST="$GUEST_SUITE" | tail -n 1)
# make bindeb-pkg writes the packages next to the build directory.
for p in linux-image linux-headers; do
	f=$(ls "$(dirname "$KOUT")"/"$p"-*_"$pkgver"_amd64.deb 2>/dev/null | head -n 1)
	[ -n "$f" ] || die "make bindeb-pkg left no $p package for $pkgver; read $KOUT/build.log"
	mv "$f" "$OUT/"
done
rm -f "$(dirname "$KOUT")"/*_"$pkgver"_*.{deb,buildinfo,changes}
(cd "$OUT" && sha256sum ./*.deb >SHA256SUMS)
say "done: $(cd "$OUT" && ls ./*.deb | tr '\n' ' ')(checksums: $OUT/SHA256SUMS)"
