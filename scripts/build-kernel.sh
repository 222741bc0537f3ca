#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# build-kernel.sh [--config-only | --module | --clippy | --rustfmtcheck | --rustdoc] [MAKE-TARGET...]
#
# Builds one of the two kernels of this tree, out of tree and incrementally,
# with clang/LLVM ($LLVM_MAJOR):
#   KERNEL_FLAVOR=debug (default)  every guest test in make check runs on it:
#                                  KASAN, lockdep, UBSAN, kmemleak, ...
#   KERNEL_FLAVOR=release          the kernel an ECS instance runs: make
#                                  package builds its Debian packages, make
#                                  bench measures on it, the rehearsal in
#                                  make check installs and boots it
# Both are tinyconfig + kernel/configs/erdma_rs.config; the debug kernel adds
# kernel/configs/erdma_rs_debug.config, the release kernel
# kernel/configs/erdma_rs_instance.config (what a cloud instance needs: boot,
# disks, file systems, systemd, the hypervisor's devices).  Each flavor has its own build
# directory, keyed by the toolchain, and a link to it, KERNEL_DIR/build-FLAVOR.
# Builds are serialised by a lock: a second build waits for the first.
#
# Steps:
#   1. copies the overlay (drivers/ rust/ include/ Documentation/ of this
#      repository) onto the extracted pristine tree, touching only files
#      whose content changed, and removes files a previous overlay added but
#      this one no longer has;
#   2. applies the hook edits that cannot be overlaid (scripts/kernel-hooks.sh),
#      always starting again from the pristine copy of each hooked file;
#   3. configures from tinyconfig + the flavor's fragments whenever they
#      changed (make tinyconfig erdma_rs.config ...), and checks that every
#      option of them stuck;
#   4. runs make in a build directory keyed by the toolchain (rustc, bindgen,
#      gcc, libclang), then installs the modules into BUILD/modroot.
# With MAKE-TARGETs, step 4 builds only those (e.g. modules).  --module is the
# fast path after a driver change: it rebuilds only erdma_rs.ko (a few seconds)
# and installs it into BUILD/modroot; it falls back to a full build when the
# kernel has not been built yet.  --clippy lints our Rust (the driver crate,
# and the kernel crate's files this overlay adds) with clippy-driver, using the
# exact rustc command lines of the last build, without touching the build.
# --rustfmtcheck runs the kernel's 'make rustfmtcheck' over the whole tree,
# overlay included. --rustdoc runs 'make rustdoc' (the kernel crate's HTML
# documentation in BUILD/Documentation/output/rust) and fails on any warning.
#
# Prints the build directory on the last line of stdout.

_step_name=kernel
. "$(dirname "$0")/lib.sh"

config_only=0
module_only=0
clippy_only=0
rustfmt_only=0
rustdoc_only=0
case "${1:-}" in
--config-only)
	config_only=1
	shift
	;;
--module)
	module_only=1
	shift
	;;
--clippy)
	clippy_only=1
	shift
	;;
--rustfmtcheck)
	rustfmt_only=1
	shift
	;;
--rustdoc)
	rustdoc_only=1
	shift
	;;
esac

[ -f "$KSRC/Makefile" ] || die "no kernel source in $KSRC: run 'make setup' first"
[ -f "$RUST_LIB_SRC/core/src/lib.rs" ] || die "no rust-src for rustc $RUSTC_VERSION: run 'make setup' first"
BINDGEN=$BINDGEN_ROOT/bin/bindgen
[ -x "$BINDGEN" ] || die "no bindgen in $BINDGEN_ROOT: run 'make setup' first"
[ -d "$LIBCLANG_PATH" ] || die "no libclang in $LIBCLANG_PATH: run 'make setup' first"
export PATH=$BINDGEN_ROOT/bin:$PATH
command -v "clang-$LLVM_MAJOR" >/dev/null && command -v "ld.lld-$LLVM_MAJOR" >/dev/null ||
	die "clang-$LLVM_MAJOR / lld-$LLVM_MAJOR not installed: run 'make setup' first"

FLAVOR=${KERNEL_FLAVOR:-debug}
case "$FLAVOR" in
debug) fragments=(erdma_rs.config erdma_rs_debug.config) ;;
release) fragments=(erdma_rs.config erdma_rs_instance.config) ;;
*) die "KERNEL_FLAVOR is '$FLAVOR': debug or release" ;;
esac
# KERNEL_EXTRA_CONFIG=FILE: one more fragment, last (make package uses it for
# module signing with the user's key); such a kernel has a build directory of
# its own, keyed by the fragment.
extra_key=""
if [ -n "${KERNEL_EXTRA_CONFIG:-}" ]; then
	[ -f "$KERNEL_EXTRA_CONFIG" ] || die "KERNEL_EXTRA_CONFIG: no file $KERNEL_EXTRA_CONFIG"
	cp "$KERNEL_EXTRA_CONFIG" "$KSRC/kernel/configs/erdma_rs_extra.config"
	fragments+=(erdma_rs_extra.config)
	extra_key=-$(key_of "$KERNEL_EXTRA_CONFIG")
fi

# One kernel build at a time: builds share the source tree, and two at once
# would also starve the two cores.
exec 9>"$KERNEL_DIR/build.lock"
if ! flock -n 9; then
	say "waiting for another kernel build to finish (lock: $KERNEL_DIR/build.lock)"
	flock 9
fi

toolkey=$(key_of "$KERNEL_PKG_VERSION" "$(rustc -vV)" "$("$BINDGEN" --version)" \
	"$("clang-$LLVM_MAJOR" --version | head -1)" "$LLVM_MAJOR")
KOUT=${KOUT:-$KERNEL_DIR/build-$FLAVOR-$toolkey$extra_key}
mkdir -p "$KOUT"

# ---- 1. overlay -------------------------------------------------------------
manifest=$KERNEL_DIR/overlay.manifest
new_manifest=$(mktemp)
trap 'rm -f "$new_manifest"' EXIT
(cd "$TOP" && for d in drivers rust include kernel Documentation; do
	[ -d "$d" ] && find "$d" -type f ! -name '*.orig' ! -name '*~'
done | LC_ALL=C sort) >"$new_manifest"
changed=0
while read -r f; do
	if [ -e "$KSRC/$f" ] && ! grep -qxF "$f" "$manifest" 2>/dev/null &&
		! cmp -s "$TOP/$f" "$KSRC/$f"; then
		die "overlay file $f would replace a file of the pristine kernel; change it with a hook edit in scripts/kernel-hooks.sh instead"
	fi
	if ! cmp -s "$TOP/$f" "$KSRC/$f"; then
		mkdir -p "$(dirname "$KSRC/$f")"
		cp "$TOP/$f" "$KSRC/$f"
		changed=$((changed + 1))
	fi
done <"$new_manifest"
if [ -f "$manifest" ]; then
	comm -23 "$manifest" "$new_manifest" | while read -r f; do
		rm -f "$KSRC/$f"
		say "overlay: removed $f"
	done
fi
cp "$new_manifest" "$manifest"
say "overlay: $(wc -l <"$new_manifest") files, $changed updated"

# ---- 2. hook edits ----------------------------------------------------------
. "$TOP/scripts/kernel-hooks.sh"
apply_kernel_hooks

# ---- 3. configuration -------------------------------------------------------
kmake() {
	make -C "$KSRC" O="$KOUT" LLVM="-$LLVM_MAJOR" LOCALVERSION= BINDGEN="$BINDGEN" \
		RUST_LIB_SRC="$RUST_LIB_SRC" "$@"
}

cfgfiles=()
for f in "${fragments[@]}"; do
	# As overlaid (step 1), or copied there (KERNEL_EXTRA_CONFIG).
	cfgfiles+=("$KSRC/kernel/configs/$f")
done
cfgkey=$(key_of "$FLAVOR" "${cfgfiles[@]}" "$TOP/Kconfig" "$TOP/drivers/infiniband/hw/erdma_rs/Kconfig")
if [ ! -f "$KOUT/.config" ] || ! stamp_ok "$KOUT/.fragment.key" "$cfgkey"; then
	say "configuring the $FLAVOR kernel: tinyconfig + ${fragments[*]} ($(cat "${cfgfiles[@]}" | grep -c '^CONFIG_') options)"
	if ! kmake rustavailable >"$KOUT/rustavailable.log" 2>&1; then
		cat "$KOUT/rustavailable.log" >&2
		die "the kernel does not accept this Rust toolchain (see above); CONFIG_RUST would be dropped"
	fi
	kmake tinyconfig "${fragments[@]}" >"$KOUT/config.log" 2>&1 ||
		die "make tinyconfig ${fragments[*]} failed; see $KOUT/config.log"
	# Every option as the last fragment that names it sets it (a later fragment
	# overrides an earlier one, as in the kernel's merge_config.sh) must stick.
	declare -A want=() from=()
	for frag in "${cfgfiles[@]}"; do
		while read -r line; do
			case "$line" in
			CONFIG_*=*) opt=${line%%=*} ;;
			"# CONFIG_"*" is not set")
				opt=${line#\# }
				opt=${opt%% *}
				;;
			*) continue ;;
			esac
			want[$opt]=$line from[$opt]=$(basename "$frag")
		done <"$frag"
	done
	bad=0
	for opt in "${!want[@]}"; do
		line=${want[$opt]}
		case "$line" in
		CONFIG_*=*)
			grep -qxF "$line" "$KOUT/.config" || {
				warn "${from[$opt]}: $line did not stick (now: $(grep "^$opt=" "$KOUT/.config" || echo unset))"
				bad=1
			}
			;;
		*)
			! grep -q "^$opt=" "$KOUT/.config" || {
				warn "${from[$opt]}: $opt should be unset"
				bad=1
			}
			;;
		esac
	done
	[ $bad = 0 ] || die "the configuration does not match ${fragments[*]}; inspect dependencies with: make -C $KSRC O=$KOUT LLVM=-$LLVM_MAJOR menuconfig"
	echo "$cfgkey" >"$KOUT/.fragment.key"
fi
[ $config_only = 0 ] || {
	echo "$KOUT"
	exit 0
}

if [ $rustfmt_only = 1 ]; then
	kmake -s rustfmtcheck || die "rustfmt wants changes (above); run 'make rustfmt' to apply them"
	say "rustfmtcheck: clean"
	exit 0
fi
# --rustdoc: make rustdoc (the kernel crate's documentation, ours included),
# which must come out without a warning (a broken link, a private item linked).
# Its inputs are the kernel's rust/ tree (the overlay and the hook edits
# applied), the generated bindings of the last build, the configuration and
# the toolchain: a run whose inputs hash to the key of the last clean run
# (KOUT/rustdoc.clean) is that run again, and is not redone (about 75 s of a
# core; RUSTDOC_FORCE=1 redoes it).
if [ $rustdoc_only = 1 ]; then
	doc_inputs() {
		(cd "$KSRC" && find rust -type f ! -name '*.orig' | LC_ALL=C sort | xargs -d '\n' sha256sum)
		(cd "$KOUT" && sha256sum .config rust/bindings/*_generated.rs rust/uapi/*_generated.rs)
	}
	dockey=$(key_of "$toolkey" "$(doc_inputs | sha256sum)")
	if [ "${RUSTDOC_FORCE:-0}" != 1 ] && stamp_ok "$KOUT/rustdoc.clean" "$dockey"; then
		say "rustdoc: clean (the same inputs as the last clean run, key $dockey; RUSTDOC_FORCE=1 redoes it)"
		exit 0
	fi
	rm -f "$KOUT/rustdoc.clean"
	kmake rustdoc >"$KOUT/rustdoc.log" 2>&1 || {
		tail -n 30 "$KOUT/rustdoc.log" >&2
		die "make rustdoc failed; full log: $KOUT/rustdoc.log"
	}
	if grep -q '^warning' "$KOUT/rustdoc.log"; then
		grep -A8 '^warning' "$KOUT/rustdoc.log" | head -n 80
		die "make rustdoc: $(grep -c '^warning' "$KOUT/rustdoc.log") warning(s); full log: $KOUT/rustdoc.log"
	fi
	echo "$dockey" >"$KOUT/rustdoc.clean"
	say "rustdoc: clean"
	exit 0
fi

# ---- clippy -----------------------------------------------------------------
# clippy OBJ: re-runs the recorded rustc command of OBJ through clippy-driver,
# emitting only metadata into a scratch directory.  Prints the diagnostics
# about files of this repository; fails if there is any.
clippy() {
	local obj=$1 cmdfile scratch cmd out ours
	cmdfile=$KOUT/$(dirname "$obj")/.$(basename "$obj").cmd
	[ -f "$cmdfile" ] || die "no $cmdfile: build the kernel first (make kernel)"
	scratch=$KOUT/clippy/$(dirname "$obj")
	mkdir -p "$scratch"
	cmd=$(sed -n "s/^savedcmd_[^ ]* := //p" "$cmdfile")
	cmd=${cmd%%;*}
	cmd=$(printf '%s' "$cmd" | sed -E "s/ rustc / clippy-driver /; s/ --emit=[^ ]+//g; s/ --out-dir [^ ]+//")
	# Crates other than the kernel crate see the kernel crate as just checked, so that
	# the lint reflects the tree, not the last build.
	if [ "$obj" != rust/kernel.o ] && [ -f "$KOUT/clippy/rust/libkernel.rmeta" ]; then
		rm -rf "$KOUT/clippy/deps" && mkdir -p "$KOUT/clippy/deps"
		ln -s "$KOUT"/rust/*.rmeta "$KOUT"/rust/*.so "$KOUT/clippy/deps/"
		ln -sf "$KOUT/clippy/rust/libkernel.rmeta" "$KOUT/clippy/deps/libkernel.rmeta"
		cmd=$(printf '%s' "$cmd" | sed -E "s| -L ?\./rust/?| -L $KOUT/clippy/deps|")
	fi
	cmd="$cmd --out-dir $scratch --emit=metadata"
	case "$cmd" in *clippy-driver*) ;; *) die "unexpected command line in $cmdfile" ;; esac
	# The kernel build exports RUSTC_BOOTSTRAP=1 (it uses -Z options); so do we.
	out=$(cd "$KOUT" && RUSTC_BOOTSTRAP=1 eval "$cmd" 2>&1) || {
		echo "$out"
		return 1
	}
	# Diagnostics are attributed to a file by their "--> path:line" line.
	ours=$(printf '%s\n' "$out" | awk -v src="$KSRC/" -v manifest="$manifest" '
		BEGIN { while ((getline f < manifest) > 0) own[src f] = 1 }
		/^(warning|error)/ { msg = $0; next }
		/^ *--> / { split($2, p, ":"); if (msg != "" && (p[1] in own)) print msg " at " $2; msg = "" }')
	if [ -n "$ours" ]; then
		echo "$out"
		echo "clippy: $(printf '%s\n' "$ours" | wc -l) diagnostics in our files:"
		echo "$ours"
		return 1
	fi
	say "clippy $obj: clean"
}

if [ $clippy_only = 1 ]; then
	command -v clippy-driver >/dev/null || die "clippy-driver is not installed (rustup component add clippy)"
	rc=0
	clippy rust/kernel.o || rc=1
	clippy drivers/infiniband/hw/erdma_rs/erdma_rs.o || rc=1
	exit $rc
fi

# ---- 4. build ---------------------------------------------------------------
MODDIR=drivers/infiniband/hw/erdma_rs
if [ $module_only = 1 ] && [ -f "$KOUT/Module.symvers" ] && [ -d "$KOUT/modroot/lib/modules" ]; then
	start=$(date +%s)
	kmake -j"$(nproc)" "$MODDIR/erdma_rs.ko" "$MODDIR/erdma_kverbs_test.ko" >"$KOUT/module.log" 2>&1 || {
		tail -n 40 "$KOUT/module.log" >&2
		die "building the modules of $MODDIR failed; full log: $KOUT/module.log"
	}
	for ko in erdma_rs.ko erdma_kverbs_test.ko; do
		dst=$(find "$KOUT/modroot/lib/modules" -name $ko | head -1)
		[ -n "$dst" ] || die "$ko is not installed in $KOUT/modroot yet: run a full build (make kernel)"
		cp "$KOUT/$MODDIR/$ko" "$dst"
	done
	say "erdma_rs.ko and erdma_kverbs_test.ko rebuilt and installed in $(($(date +%s) - start))s"
	echo "$KOUT"
	exit 0
fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(all)
run_logged "make ${targets[*]} (log: $KOUT/build.log)" "$KOUT/build.log" kmake -j"$(nproc)" "${targets[@]}"
if [ "${targets[*]}" = all ] || [ "${targets[*]}" = modules ]; then
	rm -rf "$KOUT/modroot.new"
	kmake INSTALL_MOD_PATH="$KOUT/modroot.new" modules_install >"$KOUT/modules_install.log" 2>&1 ||
		die "modules_install failed; see $KOUT/modules_install.log"
	rm -rf "$KOUT/modroot" && mv "$KOUT/modroot.new" "$KOUT/modroot"
fi
[ -n "$extra_key" ] || ln -sfn "$(basename "$KOUT")" "$KERNEL_DIR/build-$FLAVOR"
echo "$KOUT"
