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
# With --ours it then makes /build/linux-erdma: the same tree with this
# repository's kernel overlay (rust/, drivers/) and hook edits
# (scripts/kernel-hooks.sh), prepared with the cfg erdma_rs_kernel_in_module
# (Rust) and ERDMA_RS_KERNEL_IN_MODULE (C): its kernel crate, with our
# abstractions (kernel::rdma, kernel::net's sockets, ...), and its C helpers
# are linked into the erdma_rs module (scripts/debian-module.sh), which so
# carries what Debian's vmlinux does not have; kernel::rdma is built there
# though Debian's ib_core is a module, whose exports the module then uses.
#
# Prints the prepared tree's path inside the build root last (/build/linux,
# or /build/linux-erdma with --ours). Cached by the build root, this script
# and (--ours) the content of the overlay's kernel crate, the hooks and the
# Kconfig files.

_step_name=debian-kbuild
. "$(dirname "$0")/lib.sh"

ours=0
[ "${1:-}" = --ours ] && ours=1
root=$("$TOP/scripts/debian-buildroot.sh" | tail -n 1)
[ -d "$root" ] || die "no build root (scripts/debian-buildroot.sh)"
# The recipe's version: bump it when the steps of /build/kbuild.sh change.
key=$(key_of "$root" "debian-kbuild 1")
stamp=$root/build/linux.stamp

# ours_tree: /build/linux-erdma from the prepared /build/linux.
ours_tree() {
	local t=$root/build/linux-erdma okey f
	# (What modules_prepare reads of ours: rust/, the hooks, and the Kconfig
	# files they source; the driver's code is the module's, built by
	# scripts/debian-module.sh, and an edit of it does not prepare again.)
	okey=$(key_of "$key" "$TOP/scripts/kernel-hooks.sh" "$TOP/Kconfig" \
		"$(cd "$TOP" && find rust scripts/kernel-hooks drivers -type f \( -path 'rust/*' -o -path 'scripts/*' \
			-o -name Kconfig -o -name Makefile \) | LC_ALL=C sort | xargs sha256sum)")
	if stamp_ok "$t.stamp" "$okey"; then
		say "our kernel tree for $DEBIAN_KERNEL, prepared: ok ($t)"
		echo /build/linux-erdma
		return 0
	fi
	rm -rf "$t" "$t.stamp" "$root/build/hooks"
	cp -a "$root/build/linux" "$t"
	(cd "$TOP" && find rust -type f && find drivers -type f \( -name Kconfig -o -name Makefile \)) | while read -r f; do
		[ ! -e "$t/$f" ] || die "overlay file $f would replace a file of Debian's kernel"
		mkdir -p "$(dirname "$t/$f")"
		cp "$TOP/$f" "$t/$f"
	done
	(
		KSRC=$t KERNEL_DIR=$root/build/hooks
		. "$TOP/scripts/kernel-hooks.sh"
		apply_kernel_hooks
	)
	run_logged "our kernel tree for $DEBIAN_KERNEL: modules_prepare (the kernel crate with our abstractions)" \
		"$root/build/kbuild-erdma.log" in_buildroot "$root" make -C /build/linux-erdma ARCH=x86 \
		CROSS_COMPILE=x86_64-linux-gnu- CC=x86_64-linux-gnu-gcc-14 HOSTCC=gcc-14 KERNELRELEASE="$DEBIAN_KERNEL" \
		KRUSTFLAGS="--cfg erdma_rs_kernel_in_module" KCFLAGS="-DERDMA_RS_KERNEL_IN_MODULE" -j"$(nproc)" modules_prepare
	nm "$t/rust/kernel.o" | grep -q '6kernel4rdma' || die "our kernel crate for $DEBIAN_KERNEL has no kernel::rdma; read $root/build/kbuild-erdma.log"
	echo "$okey" >"$t.stamp"
	echo /build/linux-erdma
}

if stamp_ok "$stamp" "$key"; then
	say "Debian's kernel tree, prepared: ok ($root/build/linux)"
	[ $ours = 1 ] && ours_tree && exit 0
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
mine=$(nm "$root/build/linux/rust/kernel.o" | awk '$2 == "T" && $3 ~ /^_RNv.*6kernel5print11call_printk$/ { print $3 }')
[ -n "$mine" ] || die "no kernel::print::call_printk in the rebuilt kernel crate ($root/build/linux/rust/kernel.o)"
grep -q "^0x[0-9a-f]*	$mine	vmlinux	" "$root/build/linux/Module.symvers" ||
	die "the rebuilt kernel crate's symbols are not Debian's: $mine is not in Debian's Module.symvers" \
		"($(grep -o '_R[^	]*6kernel5print11call_printk' "$root/build/linux/Module.symvers"))"
say "the rebuilt kernel crate's symbols are those of Debian's vmlinux ($mine)"
echo "$key" >"$stamp"
[ $ours = 1 ] && ours_tree && exit 0
echo /build/linux
