#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# debian-module.sh: erdma_rs built for Debian's own kernel (issue 32),
# linux-image-$DEBIAN_KERNEL, unmodified. In the build root
# (scripts/debian-buildroot.sh), against our kernel tree for that kernel
# (scripts/debian-kbuild.sh --ours: Debian's source and configuration, our
# kernel crate additions), as an out-of-tree module whose object links three
# parts:
#   - the driver (drivers/infiniband/hw/erdma_rs, its crate root renamed
#     erdma_rs_main.rs: the module erdma_rs is the link of the three);
#   - our kernel crate (rust/kernel.o of that tree: upstream's kernel crate
#     with kernel::rdma, kernel::net's sockets and the rest of our
#     abstractions), which Debian's vmlinux does not have;
#   - our C helpers (rust/helpers of that tree, compiled here as part of a
#     module).
# The module's own copies of the kernel crate's functions are the ones its
# code calls; what they call in turn (C functions, core, ib_core's exports) is
# resolved against Debian's Module.symvers by modpost and against the running
# kernel and ib_core by the module loader.
#
# Writes out/debian-module/erdma_rs.ko (debug information stripped) and
# erdma_kverbs_test.ko, and prints the first's path last. Cached by its
# inputs in $ERDMA_CACHE/debian-module/K/KEY (one build kept per kernel K):
# the prepared tree's key (the build root, Debian's kernel, our kernel
# crate), the driver's files and these scripts.

_step_name=debian-module
. "$(dirname "$0")/lib.sh"

OUT=$TOP/out/debian-module
rm -rf "$OUT" && mkdir -p "$OUT"
tree=$("$TOP/scripts/debian-kbuild.sh" --ours | tail -n 1)
root=$("$TOP/scripts/debian-buildroot.sh" | tail -n 1)
K=$DEBIAN_KERNEL
mkey=$(key_of "$(cat "$root$tree.stamp")" "$0" "$TOP/scripts/debian/kernel_crate_link.py" \
	"$(cd "$TOP" && find drivers/infiniband/hw/erdma_rs -type f | LC_ALL=C sort | xargs sha256sum)")
# One build kept per kernel (make package builds for each of DEBIAN_KERNELS).
cache=$ERDMA_CACHE/debian-module/$K/$mkey
if stamp_ok "$cache.stamp" "$mkey" && [ -f "$cache/erdma_rs.ko" ]; then
	cp "$cache"/* "$OUT/"
	say "erdma_rs for $K: ok, built before ($cache)"
	echo "$OUT/erdma_rs.ko"
	exit 0
fi
mod=$root/build/erdma_rs
rm -rf "$mod" && mkdir -p "$mod"
cp -r "$TOP/drivers/infiniband/hw/erdma_rs/." "$mod/"
rm -f "$mod/Makefile" "$mod/Kconfig"
mv "$mod/erdma_rs.rs" "$mod/erdma_rs_main.rs"
cp "$root$tree/rust/kernel.o" "$mod/erdma_rs_kernel.o"
# The C helpers are compiled here, as part of a module (MODULE defined: a
# built-in object reaches static-call keys and other symbols a module cannot).
cp -r "$root$tree/rust/helpers" "$mod/erdma_rs_helpers"
# (Prebuilt objects, copied in: kbuild's *_shipped rule does not match an
# external module's unprefixed object names.)
cat >"$mod/Kbuild" <<'KBUILD'
# SPDX-License-Identifier: GPL-2.0
# erdma_rs for Debian's own kernel (scripts/debian-module.sh).
obj-m := erdma_rs.o erdma_kverbs_test.o
erdma_rs-y := erdma_rs_main.o erdma_rs_kernel.o erdma_rs_helpers/helpers.o
ccflags-y += -DERDMA_RS_KERNEL_IN_MODULE
KBUILD
kmake() {
	in_buildroot "$root" make -C "$tree" ARCH=x86 CROSS_COMPILE=x86_64-linux-gnu- CC=x86_64-linux-gnu-gcc-14 \
		HOSTCC=gcc-14 KERNELRELEASE="$K" M=/build/erdma_rs "$@"
}
# Our kernel crate's functions that call what a module may not are left to
# vmlinux's exported copies (scripts/debian/kernel_crate_link.py), against
# Debian's Module.symvers and the helpers' object (built first).
run_logged "the C helpers for $K" "$OUT/helpers.log" kmake erdma_rs_helpers/helpers.o
in_buildroot "$root" x86_64-linux-gnu-objcopy --strip-debug /build/erdma_rs/erdma_rs_kernel.o \
	/build/erdma_rs/kernel.stripped.o
python3 "$TOP/scripts/debian/kernel_crate_link.py" "$mod/kernel.stripped.o" "$mod/kernel.patched.o" \
	"$root$tree/Module.symvers" "$mod/erdma_rs_helpers/helpers.o" >"$OUT/left-to-vmlinux.txt" ||
	die "our kernel crate cannot be linked into a module for $K (above)"
# The C symbols nothing names any more leave the symbol table (modpost
# checks every undefined symbol of it).
strip=()
for c in $(sed -n 's/.*(calls \(.*\))$/\1/p' "$OUT/left-to-vmlinux.txt" | sort -u); do
	strip+=(--strip-symbol="$c")
done
in_buildroot "$root" x86_64-linux-gnu-objcopy "${strip[@]}" /build/erdma_rs/kernel.patched.o \
	/build/erdma_rs/erdma_rs_kernel.o
rm -f "$mod/kernel.stripped.o" "$mod/kernel.patched.o"
# Nothing in the crate may reach those dead bodies but through their (now
# undefined) symbols: no call or jump to them without a relocation.
in_buildroot "$root" x86_64-linux-gnu-objdump -dr /build/erdma_rs/erdma_rs_kernel.o >"$OUT/kernel.dis"
while read -r f _; do
	if grep -E "(call|jmp) +[0-9a-f]+ <$f(\+0x[0-9a-f]+)?>\$" "$OUT/kernel.dis" | grep -q .; then
		die "our kernel crate calls $f directly (no relocation): it cannot be left to vmlinux"
	fi
done <"$OUT/left-to-vmlinux.txt"
say "our kernel crate: $(wc -l <"$OUT/left-to-vmlinux.txt") functions left to vmlinux's exported copies"
run_logged "erdma_rs for $K" "$OUT/build.log" kmake modules
for m in erdma_rs erdma_kverbs_test; do
	[ -f "$mod/$m.ko" ] || die "no $m.ko; read $OUT/build.log"
	in_buildroot "$root" x86_64-linux-gnu-strip --strip-debug -o "/build/erdma_rs/$m.stripped.ko" \
		"/build/erdma_rs/$m.ko"
	cp "$mod/$m.stripped.ko" "$OUT/$m.ko"
done
in_buildroot "$root" modinfo /build/erdma_rs/erdma_rs.ko >"$OUT/modinfo.txt"
say "erdma_rs for $K: $(du -k "$OUT/erdma_rs.ko" | cut -f1) KiB; $(grep '^vermagic\|^depends' "$OUT/modinfo.txt" | tr -s ' ' | tr '\n' ';')"
# Only this key's build is kept.
rm -rf "$ERDMA_CACHE/debian-module/$K" && mkdir -p "$cache"
cp "$OUT"/erdma_rs.ko "$OUT"/erdma_kverbs_test.ko "$OUT"/modinfo.txt "$OUT"/left-to-vmlinux.txt "$cache/"
echo "$mkey" >"$cache.stamp"
echo "$OUT/erdma_rs.ko"
