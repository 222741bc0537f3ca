#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# fuzz.sh: `make fuzz`. Coverage-guided fuzzing of the device model
# (tools/erdma-emu/fuzz, cargo-fuzz and libFuzzer on the nightly toolchain):
#
#   mmio      BAR0, BAR2 and config-space access sequences (doorbells, test page)
#   cmdq      command bytes of every sub-module and opcode through the CMDQ
#   wire      decoders of every guest-written format; MTT walks, queue buffers
#   datapath  WQEs, RQEs, SGLs, MRs of every MTT level, keys and addresses (loopback)
#   fabric    two functions, RoCEv2 or iWARP, and arbitrary packets between them
#   control   the control language, directly and through the test page
#
#   1. cargo-fuzz $CARGO_FUZZ_VERSION into $ERDMA_CACHE/cargo-fuzz-VERSION if missing;
#   2. the targets, built into $ERDMA_CACHE/fuzz-target (release, debug assertions
#      and overflow checks on, no sanitizer: the model has no unsafe code; a limited
#      allocator in the targets takes the place of -malloc_limit_mb);
#   3. every target in turn, one process, its corpus in $ERDMA_CACHE/fuzz-corpus/TARGET
#      (seeded from tools/erdma-emu/fuzz/seeds/TARGET), logs in out/fuzz/TARGET.log;
#   4. a table: executions, exec/s, coverage (edges, features), corpus, result.
#
#   scripts/fuzz.sh              at least FUZZ_EXECS (10^7) executions in all, split
#                                over the targets by weight; at most FUZZ_MAX_SECONDS
#                                (1800) per target
#   scripts/fuzz.sh --smoke      each target for FUZZ_SMOKE_SECONDS (4) seconds (make check)
#   scripts/fuzz.sh TARGET...    only these targets
#
# Every input must finish within FUZZ_TIMEOUT (10) seconds (a hang is a crash)
# and the process stay below FUZZ_RSS_MB (2048) MiB. Any crash, hang or
# out-of-memory: the input is kept in out/fuzz/artifacts, the command that
# reproduces it is printed, and the exit status is 1.

_step_name=fuzz
set -euo pipefail
. "$(dirname "$0")/lib.sh"

SMOKE=0
TARGETS=()
for a in "$@"; do
	case $a in
	--smoke) SMOKE=1 ;;
	-h | --help)
		sed -n '3,31p' "$0"
		exit 0
		;;
	-*) die "unknown option $a (--smoke, --help)" ;;
	*) TARGETS+=("$a") ;;
	esac
done

ALL_TARGETS=(mmio cmdq wire datapath fabric control)
# Share of the executions per target (per mille): the cheap pure target gets most;
# the device targets are 15-35 thousand executions a second, the fabric about 6.
declare -A WEIGHT=([mmio]=200 [cmdq]=150 [wire]=300 [datapath]=150 [fabric]=100 [control]=100)
# Largest input per target (bytes).
declare -A MAX_LEN=([mmio]=4096 [cmdq]=4096 [wire]=4096 [datapath]=4096 [fabric]=4096 [control]=2048)
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=("${ALL_TARGETS[@]}")
for t in "${TARGETS[@]}"; do
	[ -n "${WEIGHT[$t]:-}" ] || die "unknown target '$t' (${ALL_TARGETS[*]})"
done

EXECS=${FUZZ_EXECS:-10000000}
MAX_SECONDS=${FUZZ_MAX_SECONDS:-1800}
SMOKE_SECONDS=${FUZZ_SMOKE_SECONDS:-4}
TIMEOUT=${FUZZ_TIMEOUT:-10}
RSS_MB=${FUZZ_RSS_MB:-2048}

FUZZ_DIR=$TOP/tools/erdma-emu/fuzz
CARGO_FUZZ_ROOT=$ERDMA_CACHE/cargo-fuzz-$CARGO_FUZZ_VERSION
TARGET_DIR=$ERDMA_CACHE/fuzz-target
BIN_DIR=$TARGET_DIR/x86_64-unknown-linux-gnu/release
CORPUS_DIR=$ERDMA_CACHE/fuzz-corpus
OUT=$TOP/out/fuzz
t0=$(date +%s)

# ---- 1. tools ---------------------------------------------------------------------
command -v rustup >/dev/null || die "rustup not found (it runs the fuzz targets' toolchain)"
# cargo-fuzz wants the nightly toolchain; where a machine has only its stable
# one, that one builds the targets with RUSTC_BOOTSTRAP=1 (which lets it take
# the unstable flags cargo-fuzz passes). Each toolchain has its own target
# directory, so neither rebuilds the other's.
if rustup run nightly rustc --version >/dev/null 2>&1; then
	TOOLCHAIN=nightly
else
	TOOLCHAIN=stable
	export RUSTC_BOOTSTRAP=1
	TARGET_DIR=$ERDMA_CACHE/fuzz-target-stable
	BIN_DIR=$TARGET_DIR/x86_64-unknown-linux-gnu/release
	say "no nightly toolchain: building the fuzz targets with the stable one (RUSTC_BOOTSTRAP=1)"
fi
export PATH="$CARGO_FUZZ_ROOT/bin:$PATH"
if ! cargo-fuzz --version 2>/dev/null | grep -q " $CARGO_FUZZ_VERSION\$"; then
	say "cargo-fuzz: installing $CARGO_FUZZ_VERSION into $CARGO_FUZZ_ROOT (takes 2-4 minutes)"
	run_logged "cargo install cargo-fuzz" "$ERDMA_CACHE/cargo-fuzz-install.log" \
		env CARGO_TARGET_DIR="$ERDMA_CACHE/cargo-fuzz-build" \
		cargo install --locked --force cargo-fuzz --version "$CARGO_FUZZ_VERSION" --root "$CARGO_FUZZ_ROOT"
	rm -rf "$ERDMA_CACHE/cargo-fuzz-build"
fi

# ---- 2. build ---------------------------------------------------------------------
rm -rf "$OUT"
mkdir -p "$OUT/artifacts" "$CORPUS_DIR"
say "building the targets (log: out/fuzz/build.log)"
(cd "$FUZZ_DIR" && cargo "+$TOOLCHAIN" fuzz build -O -a -s none --target-dir "$TARGET_DIR") \
	>"$OUT/build.log" 2>&1 || {
	tail -n 30 "$OUT/build.log" >&2
	die "the fuzz targets do not build; full log: out/fuzz/build.log"
}
! grep -q '^warning' "$OUT/build.log" || {
	grep -A5 '^warning' "$OUT/build.log" | head -n 30 >&2 || true
	die "the fuzz targets build with warnings; see out/fuzz/build.log"
}
t_build=$(($(date +%s) - t0))
say "build: ok (${t_build}s)"

# ---- 3. run -----------------------------------------------------------------------
# stat NAME LOG: a final statistic of libFuzzer (-print_final_stats=1).
stat() { sed -n "s/^stat::$1: *//p" "$2" | tail -n 1; }

failed=0
rows=()
for t in "${TARGETS[@]}"; do
	bin=$BIN_DIR/$t
	log=$OUT/$t.log
	corpus=$CORPUS_DIR/$t
	mkdir -p "$corpus"
	args=(-timeout="$TIMEOUT" -rss_limit_mb="$RSS_MB" -malloc_limit_mb="$RSS_MB"
		-max_len="${MAX_LEN[$t]}" -print_final_stats=1 -artifact_prefix="$OUT/artifacts/$t-")
	[ -f "$FUZZ_DIR/dict/$t.dict" ] && args+=(-dict="$FUZZ_DIR/dict/$t.dict")
	dirs=("$corpus")
	[ -d "$FUZZ_DIR/seeds/$t" ] && dirs+=("$FUZZ_DIR/seeds/$t")
	if [ "$SMOKE" = 1 ]; then
		args+=(-max_total_time="$SMOKE_SECONDS")
		say "$t: ${SMOKE_SECONDS}s"
	else
		runs=$((EXECS * WEIGHT[$t] / 1000))
		args+=(-runs="$runs" -max_total_time="$MAX_SECONDS")
		say "$t: $runs executions (at most ${MAX_SECONDS}s)"
	fi
	start=$(date +%s)
	rc=0
	"$bin" "${args[@]}" "${dirs[@]}" >"$log" 2>&1 || rc=$?
	secs=$(($(date +%s) - start))
	execs=$(stat number_of_executed_units "$log")
	rate=$(stat average_exec_per_sec "$log")
	cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$log" | tail -n 1 |
		awk '{ print $2 " " $4 " " $6 }' || true)
	read -r edges features entries <<<"${cov:-- - -}"
	result=ok
	if [ "$rc" -ne 0 ]; then
		failed=1
		artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
		kind=$(grep -oE 'ERROR: libFuzzer: [a-z-]+|==erdma-fuzz== allocation limit|panicked at' "$log" | head -n 1 || true)
		result="FAILED (${kind:-exit $rc})"
		grep -E -A12 'panicked at|ERROR: libFuzzer|==erdma-fuzz==' "$log" | head -n 20 | sed 's/^/    /' >&2 || true
		warn "$t: ${kind:-exit status $rc}; log: $log"
		if [ -n "$artifact" ]; then
			warn "$t: input $artifact"
			warn "$t: reproduce: $bin $artifact"
			warn "$t: or: cd tools/erdma-emu/fuzz && cargo +$TOOLCHAIN fuzz run -O -a -s none $t $artifact"
		fi
	fi
	say "$t: ${execs:-?} executions in ${secs}s, ${rate:-?}/s, cov $edges, $result"
	rows+=("$(printf '%-9s %12s %9s %7s %7s %8s %6s  %s' "$t" "${execs:-?}" "${rate:-?}" \
		"$edges" "$features" "$entries" "$secs" "$result")")
done

# ---- 4. table ---------------------------------------------------------------------
total=0
for t in "${TARGETS[@]}"; do
	n=$(stat number_of_executed_units "$OUT/$t.log")
	total=$((total + ${n:-0}))
done
{
	printf '%-9s %12s %9s %7s %7s %8s %6s  %s\n' target executions exec/s cov ft corpus secs result
	printf '%s\n' "${rows[@]}"
	printf '%-9s %12s %45s\n' total "$total" "$(($(date +%s) - t0))s with the build (${t_build}s)"
} | tee "$OUT/results.txt"
say "table in out/fuzz/results.txt; corpora in $CORPUS_DIR"
if [ "$failed" != 0 ]; then
	die "crashes found (inputs in out/fuzz/artifacts); turn each into a regression test in tools/erdma-emu/model/tests/fuzz_regressions.rs"
fi
say "no crash ($(($(date +%s) - t0))s)"
