#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# debian-kbuild.sh: Debian's own kernel, prepared for out-of-tree Rust
# modules (issue 32). Debian's linux-headers package has no rust/*.rmeta
# and no libmacros.so, so an out-of-tree Rust module cannot be built against
# it; this makes them. In the build root of scripts/debian-buildroot.sh it
# unpacks linux-source of the same version, gives it the flavour's .config
# from the headers package (unchanged: olddefconfig with Debian's compilers
# must not change a line), runs modules_prepare (which builds the kernel
# crate, its bindings and its macros with Debian's rustc and bindgen) and
# puts Debian's Module.symvers beside it, so that modpost checks a module's
# symbols against what Debian's vmlinux exports. The kernel crate so built
# must be the one in Debian's vmlinux: the names of its symbols (their crate
# hash comes from the crate's name and the compiler's version) are checked
# against Debian's Module.symvers.
#
# Prints the prepared tree's path inside the build root last (/build/linux).
# Cached: a second run with the same build root and this script does nothing.

_step_name=debian-kbuild
. "$(dirname "$0")/lib.sh"

root=$("$TOP/scripts/debian-buildroot.sh" | tail -n 1)
[ -d "$root" ] || die "no build root (scripts/debian-buildroot.sh)"
key=$(key_of "$root" "$0")
stamp=$root/build/linux.stamp
if stamp_ok "$stamp" "$key"; then
	say "Debian's kernel tree, prepared: ok ($root/build/linux)"
	echo /build/linux
	exit 0
fi

mkdir -p "$root/build"
cat >"$root/build/kbuild.sh" <<INNER
set -eu
K=$DEBIAN_KERNEL
H=/usr/src/linux-headers-\$K
cd /build
rm -rf linux linux-source-*
echo "unpacking /usr/src/linux-source-*.tar.xz"
tar -xf /usr/src/linux-source-*.tar.xz
mv linux-source-* linux
cp "\$H/.config" linux/.config
mk() {
	make -C /build/linux ARCH=x86 CROSS_COMPILE=x86_64-linux-gnu- CC=x86_64-linux-gnu-gcc-14 \
		HOSTCC=gcc-14 KERNELRELEASE=\$K "\$@"
}
mk olddefconfig
if ! diff -u "\$H/.config" linux/.config; then
	echo "olddefconfig changed Debian's configuration (above): the compilers differ from Debian's"
	exit 1
fi
mk -j\$(nproc) modules_prepare
cp "\$H/Module.symvers" linux/Module.symvers
INNER

run_logged "Debian's kernel tree: unpack, configure, modules_prepare (the kernel crate with rustc 1.85.1)" \
	"$root/build/kbuild.log" in_buildroot "$root" bash /build/kbuild.sh

# The kernel crate is the one in Debian's vmlinux: its symbols' crate hash.
ours=$(nm "$root/build/linux/rust/kernel.o" | awk '$2 == "T" && $3 ~ /^_RNv.*6kernel5print11call_printk$/ { print $3 }')
[ -n "$ours" ] || die "no kernel::print::call_printk in the rebuilt kernel crate ($root/build/linux/rust/kernel.o)"
grep -q "^0x[0-9a-f]*	$ours	vmlinux	" "$root/build/linux/Module.symvers" ||
	die "the rebuilt kernel crate's symbols are not Debian's: $ours is not in Debian's Module.symvers" \
		"($(grep -o '_R[^	]*6kernel5print11call_printk' "$root/build/linux/Module.symvers"))"
say "the rebuilt kernel crate's symbols are those of Debian's vmlinux ($ours)"
echo "$key" >"$stamp"
echo /build/linux
