#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# setup.sh [STEP...]: install or fetch everything erdma-rs needs on a Debian 12
# machine, without upgrading the system's glibc or base packages.
#
# Steps (all by default, in this order):
#   host       Debian 12 build packages (flex, bison, libclang-19-dev, debootstrap, ...)
#   rust-src   Debian's rust-src for exactly the installed rustc, unpacked privately
#   bindgen    bindgen-cli (pinned) built with cargo into the cache
#   qemu       QEMU 11.1.x from trixie-backports with its whole library closure in a
#              private prefix, run through that prefix's own ld.so
#   kernel-src the pinned linux-source-7.3 tarball, extracted into the cache
#   rootfs     a Debian trixie guest userland carrying rdma-core (debootstrap)
#   rdma-core-tests  the pyverbs test suite of the guest's rdma-core release
#   cmtime     cmtime of rdma-core $CMTIME_RDMA_CORE, built for the guests' iWARP tests
#
# Idempotent: a step whose cached result is current only prints "ok".

_step_name=setup
. "$(dirname "$0")/lib.sh"

step_host() {
	local missing=() p
	for p in $HOST_PACKAGES; do
		dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' ||
			missing+=("$p")
	done
	if [ ${#missing[@]} -eq 0 ]; then
		say "host packages: ok"
		return
	fi
	say "host packages: installing ${missing[*]}"
	[ "$(id -u)" = 0 ] || die "installing host packages needs root (apt-get install ${missing[*]})"
	local log=$ERDMA_CACHE/apt-host.log
	apt-get update >"$log" 2>&1 || die "apt-get update failed; see $log"
	# --no-upgrade keeps every installed package at its version.
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends --no-upgrade \
		"${missing[@]}" >>"$log" 2>&1 || die "apt-get install failed; see $log"
	say "host packages: installed"
}

step_rust_src() {
	[ -n "$RUSTC_VERSION" ] || die "rustc not found on PATH; install the Rust toolchain (rustup) first"
	if [ -f "$RUST_LIB_SRC/core/src/lib.rs" ]; then
		say "rust-src $RUSTC_VERSION: ok ($RUST_LIB_SRC)"
		return
	fi
	apt_trixie_update
	local ver
	ver=$(trixie_version rust-src "$RUSTC_VERSION+")
	if [ -z "$ver" ]; then
		die "no Debian rust-src package matches rustc $RUSTC_VERSION (found: $(trixie_versions rust-src |
			tr '\n' ' ')); install a rustc whose version Debian packages"
	fi
	say "rust-src: fetching rust-src=$ver"
	rm -rf "$RUST_SRC_DIR.tmp"
	fetch_deb_into "rust-src=$ver" "$RUST_SRC_DIR.tmp"
	[ -f "$RUST_SRC_DIR.tmp/usr/src/rustc-$RUSTC_VERSION/library/core/src/lib.rs" ] ||
		die "rust-src=$ver does not contain library/ for rustc $RUSTC_VERSION"
	rm -rf "$RUST_SRC_DIR" && mv "$RUST_SRC_DIR.tmp" "$RUST_SRC_DIR"
	say "rust-src: ok ($RUST_LIB_SRC)"
}

step_bindgen() {
	if "$BINDGEN_ROOT/bin/bindgen" --version 2>/dev/null | grep -q " $BINDGEN_VERSION\$"; then
		say "bindgen $BINDGEN_VERSION: ok"
		return
	fi
	say "bindgen: building bindgen-cli $BINDGEN_VERSION with cargo (takes 2-6 minutes)"
	run_logged "cargo install bindgen-cli" "$ERDMA_CACHE/bindgen-install.log" \
		cargo install --locked --force bindgen-cli --version "$BINDGEN_VERSION" --root "$BINDGEN_ROOT"
	"$BINDGEN_ROOT/bin/bindgen" --version >/dev/null || die "bindgen does not run; see $ERDMA_CACHE/bindgen-install.log"
}

# Prints the prefix QEMU lives in (after step_qemu).
qemu_prefix() { cat "$QEMU_PREFIX_BASE/current" 2>/dev/null; }

step_qemu() {
	local cur
	cur=$(qemu_prefix || true)
	if [ -n "$cur" ] && [ -x "$cur/bin/qemu-system-x86_64" ] &&
		"$cur/bin/qemu-system-x86_64" --version 2>/dev/null | grep -q "version $QEMU_SERIES\."; then
		say "qemu: ok ($("$cur/bin/qemu-system-x86_64" --version | head -1))"
		return
	fi
	apt_trixie_update
	local ver prefix
	ver=$(trixie_version qemu-system-x86 "1:$QEMU_SERIES.")
	[ -n "$ver" ] || die "no qemu-system-x86 $QEMU_SERIES.x found in trixie-backports"
	prefix=$QEMU_PREFIX_BASE/$(printf '%s' "$ver" | tr ':~+' '___')
	say "qemu: resolving qemu-system-x86=$ver and its library closure into $prefix"
	rm -rf "$prefix" "$APT_DIR/archives"/*.deb
	mkdir -p "$prefix"
	apt_trixie -y --download-only -t trixie-backports install "qemu-system-x86=$ver" \
		>"$prefix.download.log" 2>&1 || die "qemu download failed; see $prefix.download.log"
	local d n=0
	for d in "$APT_DIR"/archives/*.deb; do
		dpkg-deb -x "$d" "$prefix"
		dpkg-deb --showformat='${Package} ${Version}\n' -W "$d"
		n=$((n + 1))
	done >"$prefix/PACKAGES.txt"
	rm -f "$APT_DIR"/archives/*.deb
	# Absolute symlinks in the packages would point into the host: make them
	# relative to the prefix.
	find "$prefix" -type l | while read -r l; do
		t=$(readlink "$l")
		case "$t" in
		/*) ln -sfn "$(realpath -m --relative-to="$(dirname "$l")" "$prefix$t")" "$l" ;;
		esac
	done
	[ -e "$prefix/usr/lib64/ld-linux-x86-64.so.2" ] || die "the QEMU closure has no ld.so"
	mkdir -p "$prefix/bin"
	cat >"$prefix/bin/qemu-system-x86_64" <<-'EOF'
		#!/bin/sh
		# Runs the private QEMU through the prefix's own dynamic loader and glibc.
		P=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
		L=$P/usr/lib/x86_64-linux-gnu
		export QEMU_MODULE_DIR="$L/qemu"
		exec "$P/usr/lib64/ld-linux-x86-64.so.2" --inhibit-cache --library-path "$L" \
		     --argv0 "$0" "$P/usr/bin/qemu-system-x86_64" \
		     -L "$P/usr/share/qemu" -L "$P/usr/share/seabios" "$@"
	EOF
	chmod +x "$prefix/bin/qemu-system-x86_64"
	"$prefix/bin/qemu-system-x86_64" --version | grep -q "version $QEMU_SERIES\." ||
		die "the private QEMU does not run; try: $prefix/bin/qemu-system-x86_64 --version"
	echo "$prefix" >"$QEMU_PREFIX_BASE/current"
	say "qemu: ok, $n packages ($("$prefix/bin/qemu-system-x86_64" --version | head -1))"
}

step_kernel_src() {
	if stamp_ok "$KERNEL_DIR/pristine.stamp" "$KERNEL_PKG=$KERNEL_PKG_VERSION" && [ -f "$KSRC/Makefile" ]; then
		say "kernel source $KERNEL_PKG_VERSION: ok ($KSRC)"
		return
	fi
	apt_trixie_update
	say "kernel source: fetching $KERNEL_PKG=$KERNEL_PKG_VERSION"
	rm -rf "$KERNEL_DIR"
	mkdir -p "$KERNEL_DIR"
	fetch_deb_into "$KERNEL_PKG=$KERNEL_PKG_VERSION" "$KERNEL_DIR/deb"
	local tarball
	tarball=$(ls "$KERNEL_DIR"/deb/usr/src/linux-source-*.tar.* | head -1)
	[ -f "$tarball" ] || die "no source tarball in $KERNEL_PKG"
	say "kernel source: extracting $(basename "$tarball") (1.8 GB)"
	mkdir -p "$KERNEL_DIR/x"
	tar -C "$KERNEL_DIR/x" -xf "$tarball"
	mv "$KERNEL_DIR"/x/linux-source-* "$KSRC"
	rm -rf "$KERNEL_DIR/x" "$KERNEL_DIR/deb"
	echo "$KERNEL_PKG=$KERNEL_PKG_VERSION" >"$KERNEL_DIR/pristine.stamp"
	say "kernel source: ok ($(make -s -C "$KSRC" kernelversion))"
}

step_rootfs() {
	"$TOP/scripts/build-rootfs.sh"
}

# The pyverbs test suite of rdma-core (tests/ of the upstream source, the
# release the guest's rdma-core comes from), run in the guest with the stock
# provider.
step_rdma_core_tests() {
	local dir=$ERDMA_CACHE/rdma-core-$RDMA_CORE_SERIES
	if stamp_ok "$dir.stamp" "$RDMA_CORE_SERIES" && [ -f "$dir/tests/run_tests.py" ]; then
		say "rdma-core $RDMA_CORE_SERIES tests: ok ($dir/tests)"
		return
	fi
	local url
	url="$(debian_mirror)/pool/main/r/rdma-core/rdma-core_$RDMA_CORE_SERIES.orig.tar.gz"
	say "rdma-core $RDMA_CORE_SERIES tests: fetching $url"
	rm -rf "$dir" "$dir.tmp"
	mkdir -p "$dir.tmp"
	curl -sSfL --retry 3 "$url" | tar -C "$dir.tmp" -xz --strip-components=1 --wildcards '*/tests/*' ||
		die "could not fetch $url"
	mkdir -p "$dir"
	mv "$dir.tmp/tests" "$dir/tests"
	rm -rf "$dir.tmp"
	echo "$RDMA_CORE_SERIES" >"$dir.stamp"
	say "rdma-core $RDMA_CORE_SERIES tests: ok ($(ls "$dir/tests" | wc -l) files)"
}

# cmtime of rdma-core $CMTIME_RDMA_CORE (librdmacm/examples: cmtime.c and
# common.c), built here against Debian 12's librdmacm (its ABI is a subset of
# the guest's 56.1) into $ERDMA_CACHE/cmtime-$CMTIME_RDMA_CORE/cmtime, which
# the guests get as /mnt/payload/cmtime-$CMTIME_RDMA_CORE/cmtime. Unlike the
# guest's own cmtime it runs on iWARP: its out-of-band socket has a port of
# its own, and in a mesh of three peers it connects only with QPs (see
# cmtime_mesh.sh in the selftests).
step_cmtime() {
	local dir=$ERDMA_CACHE/cmtime-$CMTIME_RDMA_CORE key
	key=$(key_of "$CMTIME_URL" "$CMTIME_SHA256" "$(declare -f step_cmtime)" "$(gcc --version | head -n 1)")
	if stamp_ok "$dir.stamp" "$key" && [ -x "$dir/cmtime" ]; then
		say "cmtime $CMTIME_RDMA_CORE: ok ($dir/cmtime)"
		return
	fi
	say "cmtime $CMTIME_RDMA_CORE: fetching $CMTIME_URL"
	local src=$dir.src
	rm -rf "$dir" "$src"
	mkdir -p "$src"
	curl -sSfL --retry 3 -o "$src/rdma-core.tar.gz" "$CMTIME_URL" || die "could not fetch $CMTIME_URL"
	echo "$CMTIME_SHA256  $src/rdma-core.tar.gz" | sha256sum -c --quiet - >/dev/null 2>&1 ||
		die "$CMTIME_URL does not have the pinned digest $CMTIME_SHA256 (scripts/versions.sh)"
	tar -C "$src" -xzf "$src/rdma-core.tar.gz" --strip-components=1 --wildcards \
		'*/librdmacm/examples/cmtime.c' '*/librdmacm/examples/common.[ch]' '*/ccan/*.h' ||
		die "$CMTIME_URL lacks librdmacm/examples/cmtime.c"
	# ccan's headers want the build's config.h: the compiler features they test.
	printf '#define HAVE_TYPEOF 1\n#define HAVE_STATEMENT_EXPR 1\n#define HAVE_BUILTIN_TYPES_COMPATIBLE_P 1\n' \
		>"$src/config.h"
	mkdir -p "$dir"
	gcc -O2 -std=gnu11 -Wall -I"$src" -I"$src/ccan/.." -o "$dir/cmtime" \
		"$src/librdmacm/examples/cmtime.c" "$src/librdmacm/examples/common.c" \
		-lrdmacm -libverbs -lpthread >"$src/build.log" 2>&1 ||
		die "building cmtime failed; see $src/build.log"
	rm -rf "$src"
	echo "$key" >"$dir.stamp"
	say "cmtime $CMTIME_RDMA_CORE: ok ($dir/cmtime)"
}

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(host rust-src bindgen qemu kernel-src rootfs rdma-core-tests cmtime)
for s in "${steps[@]}"; do
	case "$s" in
	host) step_host ;;
	rust-src) step_rust_src ;;
	bindgen) step_bindgen ;;
	qemu) step_qemu ;;
	kernel-src) step_kernel_src ;;
	rootfs) step_rootfs ;;
	rdma-core-tests) step_rdma_core_tests ;;
	cmtime) step_cmtime ;;
	*) die "unknown step '$s' (host rust-src bindgen qemu kernel-src rootfs rdma-core-tests cmtime)" ;;
	esac
done
