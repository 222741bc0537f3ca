#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# debian-package.sh [--all]: the module package for Debian's own kernel
# (issue 32), erdma-rs-modules-$DEBIAN_KERNEL, in out/debian-package/ (with
# --all, one for each kernel of DEBIAN_KERNELS: make package's):
#   /usr/lib/modules/K/updates/erdma-rs/erdma_rs.ko  the driver
#       (scripts/debian-module.sh), in updates/, which depmod searches first;
#   /etc/modprobe.d/erdma-rs.conf  the driver choice (as the erdma-rs
#       package of make package has it: Debian's kernels have no erdma, but
#       erdma_rs has no PCI alias of its own, so udev needs the file to load
#       it);
#   the ECS page.
# It depends on exactly the kernel package it was built for
# (linux-image-K (= DEBIAN_KERNEL_VERSION)) and conflicts with the erdma-rs
# package (the same conffile, for our own kernel). Its postinst runs depmod
# for K and says so, clearly, when the running kernel is another: the
# driver is then loaded only after a reboot into K. A new Debian kernel is a
# rebuild: DEBIAN_KERNEL=... DEBIAN_KERNEL_VERSION=... (scripts/versions.sh).
# Versioned after the tree, as make package's, with the time of its last
# commit.
#
# Signing, for instances with Secure Boot (whose lockdown refuses modules
# their keys did not sign): ERDMA_SIGNING_KEY=FILE (a PEM private key) and
# ERDMA_SIGNING_CERT=FILE (its X.509 certificate, PEM or DER; by default the
# key file, if it holds the certificate too) sign erdma_rs.ko with Debian's
# own sign-file (linux-headers-K), SHA-256, as the kernel signs its modules;
# modinfo then names the signer. The certificate is the Machine Owner Key to
# enroll (mokutil --import, erdma_rs_ecs.rst).

_step_name=debian-package
. "$(dirname "$0")/lib.sh"

# --all: a package for each kernel of DEBIAN_KERNELS (both flavours unless
# DEBIAN_KERNEL names one), as make package makes them.
if [ "${1:-}" = --all ]; then
	for k in $DEBIAN_KERNELS; do
		DEBIAN_KERNEL=$k "$0" || exit 1
	done
	exit 0
fi

OUT=${PACKAGE_OUT:-$TOP/out/debian-package}
K=$DEBIAN_KERNEL
ko=${DEBIAN_MODULE_KO:-}
[ -n "$ko" ] || ko=$("$TOP/scripts/debian-module.sh" | tail -n 1)
[ -f "$ko" ] || die "no erdma_rs.ko for $K (scripts/debian-module.sh)"
grep -q "^vermagic: *$K " "$(dirname "$ko")/modinfo.txt" ||
	die "$ko is not built for $K: $(grep '^vermagic' "$(dirname "$ko")/modinfo.txt")"
mkdir -p "$OUT"

commit=$(git -C "$TOP" rev-parse --short=12 HEAD)
count=$(git -C "$TOP" rev-list --count HEAD)
dirty=""
git -C "$TOP" diff --quiet HEAD -- 2>/dev/null || dirty=.dirty
epoch=$(git -C "$TOP" log -1 --format=%ct)
pkgver="${DEBIAN_KERNEL_VERSION%%-*}-1erdmars.$count.g$commit$dirty"
name=erdma-rs-modules-$K

pkg=$OUT/$name.tree
rm -rf "$pkg" "$OUT/${name}_"*.deb
mkdir -p "$pkg/DEBIAN" "$pkg/usr/lib/modules/$K/updates/erdma-rs" "$pkg/etc/modprobe.d" \
	"$pkg/usr/share/doc/$name"
install -m 0644 "$ko" "$pkg/usr/lib/modules/$K/updates/erdma-rs/erdma_rs.ko"
signed=unsigned
if [ -n "${ERDMA_SIGNING_KEY:-}" ]; then
	cert=${ERDMA_SIGNING_CERT:-$ERDMA_SIGNING_KEY}
	[ -r "$ERDMA_SIGNING_KEY" ] || die "ERDMA_SIGNING_KEY=$ERDMA_SIGNING_KEY cannot be read"
	[ -r "$cert" ] || die "ERDMA_SIGNING_CERT=$cert cannot be read"
	root=$("$TOP/scripts/debian-buildroot.sh" | tail -n 1)
	[ -x "$root/usr/src/linux-headers-$K/scripts/sign-file" ] ||
		die "no sign-file of linux-headers-$K in the build root (scripts/debian-buildroot.sh)"
	# (In the build root, with Debian's sign-file and OpenSSL; the key is
	# there only while it signs.)
	sign=$root/build/sign
	rm -rf "$sign" && mkdir -m 0700 "$sign"
	trap 'rm -rf "$sign"' EXIT
	cp "$ERDMA_SIGNING_KEY" "$sign/key" && cp "$cert" "$sign/cert" &&
		cp "$pkg/usr/lib/modules/$K/updates/erdma-rs/erdma_rs.ko" "$sign/erdma_rs.ko"
	in_buildroot "$root" "/usr/src/linux-headers-$K/scripts/sign-file" sha256 /build/sign/key /build/sign/cert \
		/build/sign/erdma_rs.ko || die "sign-file could not sign erdma_rs.ko with $ERDMA_SIGNING_KEY"
	signer=$(in_buildroot "$root" modinfo -F signer /build/sign/erdma_rs.ko)
	[ -n "$signer" ] || die "erdma_rs.ko has no signature after sign-file"
	install -m 0644 "$sign/erdma_rs.ko" "$pkg/usr/lib/modules/$K/updates/erdma-rs/erdma_rs.ko"
	rm -rf "$sign"
	signed="signed by \"$signer\""
	say "erdma_rs.ko signed (sha256) by $signer"
fi
install -m 0644 "$TOP/scripts/package/erdma-rs.conf" "$pkg/etc/modprobe.d/erdma-rs.conf"
install -m 0644 "$TOP/Documentation/infiniband/erdma_rs_ecs.rst" "$pkg/usr/share/doc/$name/"
install -m 0644 "$TOP/scripts/package/copyright" "$pkg/usr/share/doc/$name/copyright"
echo /etc/modprobe.d/erdma-rs.conf >"$pkg/DEBIAN/conffiles"
cat >"$pkg/DEBIAN/control" <<EOF
Package: $name
Version: $pkgver
Architecture: amd64
Maintainer: The erdma-rs developers <erdma-rs@localhost>
Depends: linux-image-$K (= $DEBIAN_KERNEL_VERSION), kmod
Conflicts: erdma-rs
Section: kernel
Priority: optional
Installed-Size: $(du -sk --exclude=DEBIAN "$pkg" | cut -f1)
Description: Elastic RDMA Adapter driver erdma_rs for Debian's kernel $K
 The Rust driver erdma_rs for the Alibaba Cloud Elastic RDMA Adapter (PCI
 1ded:107f), built for Debian's own linux-image-$K ($DEBIAN_KERNEL_VERSION),
 unmodified, with the compilers that kernel was built with. udev loads it for
 the adapter (/etc/modprobe.d/erdma-rs.conf). The module is $signed: on an
 instance with Secure Boot, its key must be an enrolled Machine Owner Key
 (see /usr/share/doc/$name/erdma_rs_ecs.rst).
EOF
cat >"$pkg/DEBIAN/postinst" <<EOF
#!/bin/sh
set -e
if [ "\$1" = configure ]; then
	depmod -a $K
	if [ "\$(uname -r)" != "$K" ]; then
		echo "erdma-rs: erdma_rs is installed for the kernel $K, but \$(uname -r) is running:"
		echo "erdma-rs: reboot into $K to use it (it will not load into another kernel)."
	fi
fi
exit 0
EOF
cat >"$pkg/DEBIAN/postrm" <<EOF
#!/bin/sh
set -e
if [ "\$1" = remove ] || [ "\$1" = purge ]; then
	[ ! -d /usr/lib/modules/$K ] || depmod -a $K
fi
exit 0
EOF
chmod 0755 "$pkg/DEBIAN/postinst" "$pkg/DEBIAN/postrm"
find "$pkg" -exec touch -h -d "@$epoch" {} +
deb=$OUT/${name}_${pkgver}_amd64.deb
dpkg-deb --root-owner-group -Zxz --build "$pkg" "$deb" >/dev/null ||
	die "dpkg-deb could not build $name"
rm -rf "$pkg"
(cd "$OUT" && sha256sum ./*.deb >SHA256SUMS)
say "done: $deb ($(du -k "$deb" | cut -f1) KiB, erdma_rs.ko $signed)"
echo "$deb"
