#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# check.sh: every test of erdma-rs, from the bottom of the pyramid up.
#
#   1. set-up (installs what is missing)
#   2. the model's release build
#   3. the test kernel (incremental)
#   4. guest tests under QEMU (kselftest TAP), one scenario per VM run, in
#      two lanes; one of them starts with the lints and unit tests: the
#      model's rustfmt, clippy and cargo test, the host scripts' unit tests
#      (scripts/test_*.py), rustfmt and clippy on our kernel Rust
#
# Each step's output goes to out/check/<step>.log; a failing step prints its
# tail and where the full log is.  The last line is "check: N passed, N failed",
# counting cargo's tests, TAP test points and the lint/build steps.

_step_name=check
. "$(dirname "$0")/../scripts/lib.sh"

LOGS=$TOP/out/check
rm -rf "$LOGS"
mkdir -p "$LOGS"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ERDMA_CACHE/cargo-target}
EMU=$CARGO_TARGET_DIR/release/erdma-emu
# rdma-core's pyverbs suite (scripts/setup.sh rdma-core-tests), for pyverbs.sh.
PYVERBS_TESTS=$ERDMA_CACHE/rdma-core-$RDMA_CORE_SERIES/tests
# The newer cmtime the iWARP tests run (scripts/setup.sh cmtime), in every
# guest as /mnt/payload/cmtime-$CMTIME_RDMA_CORE/cmtime (cmtime_mesh.sh).
CMTIME_DIR=$ERDMA_CACHE/cmtime-$CMTIME_RDMA_CORE

passed=0
failed=0
failures=()
t0=$(date +%s)

pass() { passed=$((passed + ${2:-1})); }
fail() {
	failed=$((failed + ${2:-1}))
	failures+=("$1")
}

# step NAME COMMAND...: one counted step; its output goes to out/check/NAME.log.
step() {
	local name=$1 log=$LOGS/$1.log start rc=0
	shift
	start=$(date +%s)
	say "$name ..."
	"$@" >"$log" 2>&1 || rc=$?
	if [ $rc -eq 0 ]; then
		say "$name: ok ($(($(date +%s) - start))s)"
		pass "$name"
	else
		tail -n 30 "$log" | sed 's/^/    /' >&2
		say "$name: FAILED (exit $rc, $(($(date +%s) - start))s); full log: $log"
		fail "$name"
	fi
	return $rc
}

finish() {
	local f
	say "done in $(($(date +%s) - t0))s; logs in $LOGS"
	for f in "${failures[@]}"; do
		say "failed: $f"
	done
	echo "check: $passed passed, $failed failed"
	[ "$failed" -eq 0 ]
	exit
}

# ---- 1. set-up ----------------------------------------------------------------
if ! step setup "$TOP/scripts/setup.sh"; then
	say "nothing else can run without the set-up; see $LOGS/setup.log"
	finish
fi

# ---- 2. the model and 3. the kernel ----------------------------------------------
# What the guests need comes first: the model's release build and the test
# kernel (incremental). The lints and the unit tests (the model's rustfmt,
# clippy and cargo test, the host scripts' tests, rustfmt and clippy on our
# kernel Rust) run at the start of lane_rest, beside the first guest of
# lane_ours (they took about 35 s of one core before it).
step model-build sh -c "cd '$TOP/tools/erdma-emu' && cargo build --locked --release" || true
if ! step kernel-build "$TOP/scripts/build-kernel.sh"; then
	say "no kernel, so no guest tests"
	finish
fi
host_tests() {
	cd "$TOP/tools/erdma-emu"
	step model-fmt cargo fmt --all -- --check || true
	step model-clippy cargo clippy --locked --workspace --all-targets -- -D warnings || true
	local log=$LOGS/model-test.log rc np nf
	say "model-test ..."
	if cargo test --locked --workspace >"$log" 2>&1; then rc=0; else rc=$?; fi
	np=$(grep -E '^test result:' "$log" | sed -E 's/.* ([0-9]+) passed.*/\1/' | paste -sd+ | bc)
	nf=$(grep -E '^test result:' "$log" | sed -E 's/.* ([0-9]+) failed.*/\1/' | paste -sd+ | bc)
	np=${np:-0}
	nf=${nf:-0}
	if [ $rc -ne 0 ] && [ "$nf" -eq 0 ]; then
		nf=1 # it did not even build
	fi
	pass model-test "$np"
	[ "$nf" -eq 0 ] || {
		tail -n 30 "$log" | sed 's/^/    /' >&2
		fail "model-test ($nf failed; see $log)" "$nf"
	}
	say "model-test: $np passed, $nf failed"
	cd "$TOP"
	# The model's fuzz targets, two seconds each (make fuzz runs them long).
	step model-fuzz env FUZZ_SMOKE_SECONDS=2 "$TOP/scripts/fuzz.sh" --smoke || true
	# The host scripts' own unit tests (the bench table's verdicts).
	step scripts-test python3 -m unittest discover -s "$TOP/scripts" -p 'test_*.py' -v || true
	step kernel-rustfmtcheck "$TOP/scripts/build-kernel.sh" --rustfmtcheck || true
	step kernel-clippy "$TOP/scripts/build-kernel.sh" --clippy || true
}
# ---- 4. guest tests ---------------------------------------------------------------
SELFTESTS=$TOP/tools/testing/selftests/rdma/erdma_rs

# scenario NAME COMMAND...: one guest scenario, whose VM run is out/vm/NAME;
# its output goes to out/check/guest-NAME.log, its exit status to
# out/check/guest-NAME.rc (vmrun writes its TAP totals to out/vm/NAME/totals).
scenario() {
	local name=$1 rc=0 start
	shift
	start=$(date +%s)
	say "guest-$name: booting (console: $TOP/out/vm/$name/guest*.console.log)"
	"$@" >"$LOGS/guest-$name.log" 2>&1 || rc=$?
	echo $rc >"$LOGS/guest-$name.rc"
	say "guest-$name: finished in $(($(date +%s) - start))s (exit $rc)"
}

# guest NAME VMRUN-ARGS...: a scenario of one VM run with the selftests.
guest() {
	local name=$1
	shift
	scenario "$name" "$TOP/scripts/vmrun.py" --quiet --out "$TOP/out/vm/$name" --emu "$EMU" \
		--copy "$SELFTESTS" --copy "$CMTIME_DIR" "$@"
}

# tap_failures DIR: each failing TAP test point under DIR, one line each: the
# file, the point, and the diagnostics printed for it (the "# " lines before
# it, without the timings).
tap_failures() {
	awk 'FNR == 1 { d = "" }
		/^# took [0-9]+ s$/ { next }
		/^# / { d = d (d == "" ? "" : " | ") substr($0, 3); next }
		/^not ok / { print FILENAME ": " $0 (d == "" ? "" : " [" d "]") }
		/^(not )?ok / { d = "" }' "$1"/guest*/results/*.tap 2>/dev/null | sed "s|^$1/||"
}

# count NAME: counts the TAP test points of a guest run and shows its failures.
count() {
	local name=$1 out=$TOP/out/vm/$1 rc totals
	rc=$(cat "$LOGS/guest-$name.rc" 2>/dev/null || echo 1)
	totals=$(cat "$out/totals" 2>/dev/null || echo "0 0 0")
	set -- $totals
	pass "guest-$name" "$1"
	# CI shows the end of the output: the failure line carries the failing
	# test points themselves (the first three, with their TAP file and the
	# end of their diagnostics).
	[ "$2" -eq 0 ] || fail "guest-$name: $2 TAP failures: $(tap_failures "$out" | head -n 3 |
		awk '{ print (length($0) > 700 ? substr($0, 1, 150) " ... " substr($0, length($0) - 540) : $0) }' |
		paste -sd';' -)" "$2"
	# CI shows only the end of the output: the line names vmrun's own reasons
	# (a timeout, a guest that died, a command's exit status).
	if [ "$rc" -ne 0 ] && [ "$2" -eq 0 ]; then
		fail "guest-$name: the VM run failed (exit $rc): $(grep -h '^vmrun: FAIL guest' "$LOGS/guest-$name.log" 2>/dev/null |
			head -n 2 | cut -c1-900 | paste -sd';' -)"
	fi
	if [ "$rc" -ne 0 ]; then
		grep -E '^vmrun: FAIL|^vmrun:   |not ok' "$LOGS/guest-$name.log" "$out"/guest*/results/*.tap 2>/dev/null |
			head -n 60 | sed 's/^/    /' >&2
		say "guest-$name: FAILED; read $LOGS/guest-$name.log and $out/guest*.console.log"
	else
		say "guest-$name: $1 passed, $3 skipped"
	fi
}

# The scenarios run in two lanes, side by side: a TCG guest keeps about one of
# the two cores busy, so two at a time finish sooner than one after the other.
# Most guests have one vCPU: two guests of two vCPUs each on two host cores ran
# the same tests 1.7 times slower than two of one (vCPUs wait for lock holders
# the host descheduled). Each lane is a sequence; the counts are taken
# afterwards, in a fixed order. lane_ours (in the background) has most of our
# driver's scenarios; lane_rest (in this shell, so its steps count) makes the
# packages first, then runs the C driver's reference runs on their release
# kernel, the control plane, the two-guest iWARP and RoCEv2 scenarios, the
# kernel developers' kselftest run, the rehearsal, two-guests-one-model and
# the doctests;
# the two are balanced by their measured times (the per-scenario table in
# Documentation/infiniband/erdma_rs_performance.rst).
#
# Every test of our driver runs on the debug kernel. The upstream C driver's
# reference runs (A/B), which prove the model's fidelity, boot the release
# kernel of the packages instead (unpacked from linux-image, the kernel a user
# installs): its own reports on the debug kernel are written up already
# (Documentation/infiniband/erdma-upstream-rmmod-race.rst), and there it runs
# several times faster. Without the packages they fall back to the debug
# kernel. The C driver runs every test that applies to it: its ctrlq.sh,
# ibdev.sh, verbs.sh and abdiff.sh, rc.sh, nccl.sh, perftest.sh, badinput.sh (without
# the checks it lacks), kverbs.sh, cm.sh and nvmeof.sh (rdma_cm, issue 10), the
# pyverbs modules of its device, PD, CQ, MR and QP verbs and of rdma_cm, and
# the tests between two guests; on iWARP cm.sh, nccl.sh, perftest.sh and nvmeof.sh
# (iwarp_mpa.sh proves a connection manager, not the model: see below); ERDMA_CHECK_AB=part keeps for a quick run its
# device attributes, the field-by-field comparison, RC traffic and every kernel
# opcode. handover.sh (the two adapters handed over between erdma and erdma_rs
# on the running system, issue 12) drives ours too: it runs in data-path.
# Between two guests: RC traffic (xguest.sh), rdma_cm's tools and perftest
# -R (xguest_cm.sh), NCCL's QP set-up and traffic (nccl.sh with
# NCCL_MODE=xguest), NVMe over RDMA (nvmeof.sh with NVMEOF_MODE=xguest), NFS
# over RDMA (nfsrdma.sh) and SMC-R (smc.sh: SMC sockets over the adapters,
# the kernel's SMC diagnostics showing SMC-R carry them; on iWARP in standard
# mode, their fallback to TCP).
XGUEST_TESTS="xguest.sh xguest_cm.sh nccl.sh nvmeof.sh nfsrdma.sh smc.sh"
IWARP_TESTS="cm.sh nccl.sh perftest.sh nvmeof.sh iwarp_mpa.sh"
# The C driver's iWARP reference leaves out iwarp_mpa.sh: a hostile MPA peer
# meets the driver's connection manager over the guest's TCP, not the model
# (81 s of the C driver's fixed 10 and 20 s waits); its MPA frames are
# compared with ours byte for byte on the wire in the mixed pairs of
# two-guests-iwarp.
C_IWARP_TESTS="cm.sh nccl.sh perftest.sh nvmeof.sh"
IWARP_XGUEST_TESTS="xguest_cm.sh nccl.sh nvmeof.sh nfsrdma.sh smc.sh"
if [ "${ERDMA_CHECK_AB:-full}" = full ] || [ "$ERDMA_CHECK_AB" = all ]; then
	C_CTL_TESTS="ctrlq.sh ibdev.sh verbs.sh abdiff.sh"
	C_DP_TESTS="rc.sh nccl.sh perftest.sh badinput.sh kverbs.sh cm.sh nvmeof.sh pyverbs.sh"
	C_XGUEST=$XGUEST_TESTS
	C_IWARP=$C_IWARP_TESTS
	# The C driver on both ends between two iWARP guests is left out: what it
	# proved of the model (its streams between guests, with the C driver's
	# MPA frames) the mixed pairs of two-guests-iwarp prove with the C driver
	# at either end (serving, then connecting), its frames compared byte for
	# byte with ours, and the C driver's NVMe over RDMA on iWARP runs in
	# iwarp-cm-c-driver (61 to 128 s, and the pair that hit the C driver's
	# own MPA reply race most: it failed in 2 of the 3 checks of 11-25 and
	# 11-26, which then ran it once more). ERDMA_CHECK_AB=all brings it back.
	C_IWARP_XGUEST=""
elif [ "$ERDMA_CHECK_AB" = part ]; then
	C_CTL_TESTS="ibdev.sh abdiff.sh"
	C_DP_TESTS="rc.sh kverbs.sh"
	C_XGUEST=""
	C_IWARP=""
	C_IWARP_XGUEST=""
else
	die "ERDMA_CHECK_AB is '$ERDMA_CHECK_AB': full (the default), all or part"
fi
[ "${ERDMA_CHECK_AB:-full}" != all ] || C_IWARP_XGUEST=$IWARP_XGUEST_TESTS
# The release kernel for the C driver's runs: the packages' linux-image,
# unpacked (a few seconds).
RELEASE=$TOP/out/release-kernel
release_kernel() {
	local deb
	deb=$(ls "$TOP"/out/package/linux-image-*.deb 2>/dev/null | grep -v dbg | head -n 1)
	[ -n "$deb" ] || { echo "no linux-image package in $TOP/out/package"; return 1; }
	rm -rf "$RELEASE" && mkdir -p "$RELEASE" && dpkg-deb -x "$deb" "$RELEASE" || return 1
	ls "$RELEASE"/boot/vmlinuz-* && ls -d "$RELEASE"/lib/modules/*/kernel
}
C_KERNEL=()
# packages: make package, its reproducibility, and the release kernel
# unpacked for the C driver's runs (in lane_rest, before those).
packages() {
	# The Debian packages of the release kernel and the driver choice (make
	# package), for the rehearsal of an ECS instance at the end.
	step package "$TOP/scripts/package.sh" || true
	# Reproducible: built again from the same tree, the packages are the same bytes.
	package_again() {
		PACKAGE_OUT=$TOP/out/package-again "$TOP/scripts/package.sh" &&
			(cd "$TOP/out/package" && sha256sum -c "$TOP/out/package-again/SHA256SUMS") &&
			cmp "$TOP/out/package/SHA256SUMS" "$TOP/out/package-again/SHA256SUMS"
	}
	[ ! -f "$TOP/out/package/SHA256SUMS" ] || step package-reproducible package_again || true
	# make rustdoc (about a minute; it only writes the HTML documentation, so
	# it runs here, beside lane_ours' guests).
	step kernel-rustdoc "$TOP/scripts/build-kernel.sh" --rustdoc || true
	if [ -f "$TOP/out/package/SHA256SUMS" ] && step release-kernel release_kernel; then
		C_KERNEL=(--kernel "$(ls "$RELEASE"/boot/vmlinuz-* | head -n 1)" --modules "$RELEASE/lib/modules")
		touch "$RELEASE.ok"
	else
		say "the C driver's reference runs boot the debug kernel (no release kernel: see $LOGS/package.log)"
	fi
	# lane_ours' C reference run waits for this.
	touch "$RELEASE.done"
}
# c_guest NAME VMRUN-ARGS...: a scenario of the C driver's reference on the
# release kernel (the debug kernel without it).
c_guest() {
	local name=$1
	shift
	guest "$name" "${C_KERNEL[@]}" "$@"
}
# The mixed pair on iWARP: each guest runs its own driver (XGUEST_DRIVERS, see
# xguest_driver in lib.sh).
# The pair's interoperation is the connection manager's (MPA, its frames
# compared byte for byte) and every rdma_cm tool's traffic: xguest_cm.sh. NVMe
# over RDMA takes the same connection path, proven with each driver on both
# ends in its own pair, so it does not run again in the mixed pairs.
MIXED="; XGUEST_DRIVERS='erdma_rs erdma' ERDMA_TAP_PREFIX=mix1- erdma_rs/run_tests.sh xguest_cm.sh || r=1"
MIXED="$MIXED; XGUEST_DRIVERS='erdma erdma_rs' ERDMA_TAP_PREFIX=mix2- erdma_rs/run_tests.sh xguest_cm.sh || r=1"
# Compat mode on iWARP adapters (issue 31): the device and its software GSI
# (compat.sh, hostile datagrams included), NCCL's QP set-up (nccl.sh), every
# perftest tool with and without rdma_cm, librdmacm's tools, NVMe over RDMA
# and the pyverbs suite's modules that run on the device, rdma_cm's MADs on
# the software GSI QP.
COMPAT="CM_PROTO=roce ERDMA_MODPROBE_ARGS=compat_mode=1 PYVERBS_MODULES='test_device test_pd test_cq test_mr test_qp test_cq_events test_atomic test_relaxed_ordering test_rdmacm' ERDMA_TAP_PREFIX=compat- erdma_rs/run_tests.sh compat.sh nccl.sh perftest.sh cm.sh nvmeof.sh pyverbs.sh"
# Compat mode between two guests, each with one iWARP adapter: QPs connected
# the RoCE way (xguest.sh), then rdma_cm's tools and NVMe over RDMA over the
# software GSI.
COMPAT_XGUEST="ERDMA_MODPROBE_ARGS=compat_mode=1 ERDMA_TAP_PREFIX=compat- erdma_rs/run_tests.sh xguest.sh || r=1; CM_PROTO=roce ERDMA_MODPROBE_ARGS=compat_mode=1 ERDMA_TAP_PREFIX=compat- erdma_rs/run_tests.sh xguest_cm.sh nccl.sh nvmeof.sh smc.sh"
lane_ours() {
	# Every guest boots the debug kernel (KASAN, lockdep, kmemleak, ...): a kernel
	# report ends the guest and fails the test that was running; time limits are
	# set for that kernel under TCG.
	# The RC data path (RoCEv2) between two adapters of one guest, through the
	# stock provider: ibv_rc_pingpong (rc.sh), queue pairs set up and driven
	# as NCCL's IB transport does and zero-byte messages (nccl.sh), perftest with and without
	# rdma_cm (perftest.sh), bad requests through raw uverbs (badinput.sh) and
	# rdma-core's pyverbs suite (pyverbs.sh), kernel consumers posting every
	# opcode (kverbs.sh), librdmacm's tools (cm.sh), NVMe over RDMA
	# (nvmeof.sh) and NFS over RDMA (nfsrdma.sh: the kernel's NFS server
	# and client, proto=rdma), and the adapters handed over between the drivers
	# (handover.sh). Ours runs all of rdma-core's suite. Last, the adapters
	# fail under traffic, user and NVMe over RDMA (dead.sh: a fatal error the
	# driver recovers from, then both adapters gone).
	guest data-path --smp 1 --timeout 3600 --memory 2G --copy "$PYVERBS_TESTS" \
		--dev proto=roce,test_page=on --dev proto=roce,test_page=on \
		--run 'erdma_rs/run_tests.sh rc.sh nccl.sh perftest.sh badinput.sh kverbs.sh cm.sh nvmeof.sh nfsrdma.sh pyverbs.sh handover.sh dead.sh'
	# rdma_cm on iWARP (issue 11): librdmacm's tools, perftest -R and NVMe over
	# RDMA between two iWARP adapters of one guest, connected by the driver's
	# own connection manager (MPA over the guest's TCP), a hostile MPA peer on
	# both sides of a connection and rmmod with connections in use
	# (iwarp_mpa.sh); and a kernel QP in ERROR posted to from softirq and
	# under a spinlock (kverbs.sh). Floods of half-open connections, listeners
	# killed under connection attempts, connect/disconnect storms
	# (cm_flood.sh). Zero-byte messages and NCCL's traffic over queue pairs
	# rdma_cm connects by number (nccl.sh). Last, the adapters fail
	# (dead.sh). Compat mode has its own guest (compat, next).
	guest iwarp-cm --smp 1 --timeout 1800 --memory 2G \
		--dev proto=iwarp,test_page=on --dev proto=iwarp,test_page=on \
		--run "r=0; export CM_PROTO=iwarp CM_FLOOD_STORM=20; erdma_rs/run_tests.sh $IWARP_TESTS kverbs.sh cm_flood.sh || r=1; erdma_rs/run_tests.sh dead.sh || r=1; exit \$r"
	# Compat mode (issue 31): two iWARP adapters of one guest shown as RoCEv2
	# devices, their queue pairs connected the RoCE way, rdma_cm over the
	# software GSI QP ($COMPAT above). (In this lane: in lane_rest, at 71c9078,
	# it made that lane end about 20 minutes after this one on a slow machine.)
	guest compat --smp 1 --timeout 2400 --memory 2G --copy "$PYVERBS_TESTS" \
		--dev proto=iwarp,test_page=on --dev proto=iwarp,test_page=on \
		--run "$COMPAT"
	# RoCEv2 between two guests (xguest.sh, rdma_cm, NCCL's set-up, NVMe and
	# NFS over RDMA, SMC-R). (In this lane since the rehearsal's parts on
	# Debian's kernel: lane_rest ended about 170 s after this one.)
	guest two-guests-data-path --smp 1 --timeout 2400 --memory 2G --kmemleak none \
		--dev proto=roce --dev proto=roce --guest 0 --guest 1 \
		--run "export NVMEOF_MODE=xguest NFS_MODE=xguest NCCL_MODE=xguest; erdma_rs/run_tests.sh $XGUEST_TESTS"
	# Binding: three adapters (RoCEv2, iWARP and a VERSION 0 one to refuse),
	# 20 unbind/bind cycles. (Back in lane_ours since the guests boot their
	# userland from an image: lane_rest ended 196 s after this lane, 53 s.)
	guest three-adapters --smp 1 --timeout 1200 \
		--dev proto=roce --dev proto=iwarp --dev proto=roce,version=0 \
		--run 'erdma_rs/run_tests.sh probe.sh'
	# A/B: the upstream C erdma driver on the same model. Its RDMA devices must show
	# exactly the attributes the model was told to report (ibdev.sh), the portable
	# checks of ctrlq.sh and verbs.sh apply to it too, and abdiff.sh loads both
	# drivers in turn and compares ibv_devinfo -v and rdma dev/link field for field.
	# (Last in this lane, which balances the lanes: its release kernel is the
	# one lane_rest unpacked from its packages long before; this lane, a
	# subshell, looks for it itself.)
	local waited=0
	while [ ! -e "$RELEASE.done" ] && [ $waited -lt 3600 ]; do
		[ $((waited % 300)) != 0 ] || say "upstream-c-driver waits for lane_rest's packages (release kernel)"
		sleep 5
		waited=$((waited + 5))
	done
	[ ! -e "$RELEASE.ok" ] ||
		C_KERNEL=(--kernel "$(ls "$RELEASE"/boot/vmlinuz-* | head -n 1)" --modules "$RELEASE/lib/modules")
	c_guest upstream-c-driver --smp 2 --timeout 2400 \
		--dev proto=roce,test_page=on \
		--dev proto=iwarp,qp_blocks=2,atomic=off,fw_version=0x20003,test_page=on \
		--run "ERDMA_DRIVER=erdma CTRLQ_FAULTS=0 erdma_rs/run_tests.sh $C_CTL_TESTS"
	# The C driver's rdma_cm on iWARP (here too, for the lanes' balance).
	[ -z "$C_IWARP" ] || c_guest iwarp-cm-c-driver --smp 1 --timeout 1800 --memory 2G \
		--dev proto=iwarp,test_page=on --dev proto=iwarp,test_page=on \
		--run "export CM_PROTO=iwarp ERDMA_DRIVER=erdma ERDMA_TAP_PREFIX=c-; erdma_rs/run_tests.sh $C_IWARP"
}
lane_rest() {
	host_tests
	# The packages first: the C driver's runs boot their release kernel.
	packages
	# The C driver's reference, on the release kernel: the RC data path and
	# rdma_cm between two adapters of one guest (RoCEv2).
	c_guest data-path-c-driver --smp 1 --timeout 3600 --memory 2G --copy "$PYVERBS_TESTS" \
		--dev proto=roce,test_page=on --dev proto=roce,test_page=on \
		--run "ERDMA_DRIVER=erdma PYVERBS_MODULES='test_device test_pd test_cq test_mr test_qp test_cq_events test_atomic test_fork test_relaxed_ordering test_rdmacm' erdma_rs/run_tests.sh $C_DP_TESTS"
	# The C driver between two guests, on the release kernel: RoCEv2, then
	# iWARP.
	[ -z "$C_XGUEST" ] || c_guest two-guests-data-path-c-driver --smp 1 --timeout 2400 --memory 2G \
		--dev proto=roce --dev proto=roce --guest 0 --guest 1 \
		--run "export NVMEOF_MODE=xguest NFS_MODE=xguest NCCL_MODE=xguest ERDMA_DRIVER=erdma ERDMA_TAP_PREFIX=c-; erdma_rs/run_tests.sh $C_XGUEST"
	[ -z "$C_IWARP_XGUEST" ] || c_guest two-guests-iwarp-c-driver --smp 1 --timeout 2400 --memory 2G \
		--dev proto=iwarp,test_page=on --dev proto=iwarp,test_page=on --guest 0 --guest 1 \
		--run "export CM_PROTO=iwarp NVMEOF_MODE=xguest NFS_MODE=xguest NCCL_MODE=xguest ERDMA_DRIVER=erdma ERDMA_TAP_PREFIX=c-; erdma_rs/run_tests.sh $C_IWARP_XGUEST"
	# The control plane, both protocols, 2 vCPUs (so 2 CEQs per adapter); faults are
	# injected through the model's test page.
	# The RDMA device on top: attributes (ibdev.sh), contexts, MTU, GIDs, counters,
	# port events, revocation, netdev loss and deferred probe (verbs.sh). And
	# rmmod while ib_mad polls its CQ, on two CPUs (rmmod_race.sh). Then the
	# trust boundary with the device: allocation failures one at a time in the
	# iWARP adapter's probe and in both adapters' user verbs, a kernel
	# consumer's objects and rdma_cm's connection set-up (failnth.sh; the
	# RoCEv2 probe adds the RDMA core's GID and MAD registration, not the
	# driver's), an adapter that lies (hostile.sh), and random user verbs from
	# an unprivileged user on both adapters at once (uverbs_random.sh). (At
	# 5802da7 make check took 1548 s, 48 over its budget: 3 race cycles, not 4,
	# 20 s of random verbs, 20 connections in cm_flood.sh's storm and 2 s per
	# fuzz target pay for this issue's tests.)
	# Last, the upstream C driver's same sweeps, the reference for ours, on
	# the debug kernel (in this guest, after ours: a boot less; its rdma_cm
	# set-up, on iWARP 2,200 points in the caller's thread against ours' 200,
	# is sampled every 128th point after the first 30). What they
	# find of the C driver is named exactly (the harness's --tolerate, the
	# tests' ERDMA_KNOWN_REPORTS and FAILNTH_KNOWN), written up in
	# Documentation/infiniband/erdma_rs_selftests.rst and not fixed; any other
	# report or failure fails.
	guest control-plane --smp 2 --timeout 1800 --tolerate "$C_FAILNTH_REPORTS" \
		--dev proto=roce,test_page=on --dev proto=iwarp,test_page=on \
		--run "r=0; RACE_CYCLES=3 UVERBS_RANDOM_S=20 FAILNTH_PROBE=iwarp erdma_rs/run_tests.sh ctrlq.sh ibdev.sh verbs.sh rmmod_race.sh failnth.sh hostile.sh uverbs_random.sh || r=1; ERDMA_DRIVER=erdma FAILNTH_PROBE=iwarp FAILNTH_CM_SAMPLE='30 128' ERDMA_KNOWN_REPORTS='$C_FAILNTH_REPORTS' FAILNTH_KNOWN='$C_FAILNTH_FAILURES' ERDMA_TAP_PREFIX=c- erdma_rs/run_tests.sh failnth.sh || r=1; exit \$r"
	# rdma_cm on iWARP between two guests (issue 11): the connection manager's
	# MPA over the guests' TCP, then the adapters' streams through one model
	# process: rdma_cm's tools, every perftest tool with -R and NVMe over RDMA,
	# ours, then the mixed pair both ways (ours serving and the C driver
	# connecting, then the other way round: rdma_cm's tools), whose MPA
	# frames are compared byte for byte on the wire (with the C pair's, when it ran before in this
	# run's guests: not any more, so the comparison is between the two mixed
	# pairs); then compat mode across the two guests (issue 31: xguest.sh's
	# ibv_rc_pingpong and ib_write_bw, QPs connected the RoCE way); last, the
	# serving guest stops in the middle of a connection
	# (xguest_stop.sh: vmrun kills it) and ours, in the other, must see the
	# connection end and clean up.
	guest two-guests-iwarp --smp 1 --timeout 2400 --memory 2G --kmemleak 1 \
		--dev proto=iwarp,test_page=on --dev proto=iwarp,test_page=on --guest 0 --guest 1 \
		--run "r=0; export CM_PROTO=iwarp NVMEOF_MODE=xguest NFS_MODE=xguest NCCL_MODE=xguest; erdma_rs/run_tests.sh $IWARP_XGUEST_TESTS || r=1 $MIXED; $COMPAT_XGUEST || r=1; ERDMA_STATUS_SO_FAR=\$r erdma_rs/run_tests.sh xguest_stop.sh || r=1; exit \$r"
	# RC traffic, rdma_cm and NVMe over RDMA between two guests through one
	# model process.
	# (Both in lane_rest since 3487d6c put compat in lane_ours: by the times
	# of 7eb2cbf's check, lane_ours then ran about 1,300 s longer than this
	# lane; with these two here (695 s) the lanes end within about 100 s.)
	# The selftests the kernel developers' way (issue 12,
	# tests/kselftest-standard.sh): a kselftest install from the kernel's own
	# selftests tree, run by its run_kselftest.sh in one guest: as the harness
	# has the adapters, as on a real instance (nothing may change), and opted in.
	scenario kselftest-standard "$TOP/tests/kselftest-standard.sh"
	# The rehearsal of an ECS instance (issue 12, tests/rehearsal.sh): the
	# packages installed with apt on a Debian trixie instance booted from its disk
	# (systemd, udev, an initramfs, Debian's kernel), the reboot into the installed
	# kernel, then two such instances with a RoCEv2 and an iWARP adapter each:
	# the driver loading by itself, rdma link, ibv_devinfo, ibv_rc_pingpong and
	# rping between them, the out-of-tree module build, the driver choice undone
	# and redone; then Debian's own kernel with the module package (issue 32):
	# installed with apt, udev loading the signed module, the instance's own
	# tools, RDMA traffic on both personalities and NVMe over RDMA. Last in
	# its lane but two short scenarios (its second boot runs two guests).
	# Its last part (issue 32) installs the module package for Debian's own
	# cloud kernel (make debian-package, which builds the generic kernel's
	# too), signed with a test key: built in a trixie
	# build root, about 20 minutes cold, cached by its inputs (a driver
	# change rebuilds the module alone, about a minute).
	step debian-package env ERDMA_SIGNING_KEY="$(test_signing_key)" "$TOP/scripts/debian-package.sh" --all || true
	# The other kernels' modules (the generic -amd64) load into those kernels,
	# booted from Debian's packages with Debian's ib_core (make debian-spike:
	# vermagic, symbols, taint only O and E; about 15 s).
	for k in $DEBIAN_KERNELS; do
		[ "$k" = "$DEBIAN_KERNEL" ] ||
			step "debian-load-${k#*deb13-}" env DEBIAN_KERNEL="$k" "$TOP/scripts/debian-spike.sh" --driver || true
	done
	if [ -f "$LOGS/package.log" ] && ls "$TOP"/out/package/erdma-rs_*.deb >/dev/null 2>&1; then
		step rehearsal "$TOP/tests/rehearsal.sh" || true
		for phase in install check stock-install stock-check; do
			[ -f "$TOP/out/vm/rehearsal-$phase.rc" ] || continue
			cp "$TOP/out/vm/rehearsal-$phase.rc" "$LOGS/guest-rehearsal-$phase.rc"
			ln -sf rehearsal.log "$LOGS/guest-rehearsal-$phase.log"
			rehearsed+=("rehearsal-$phase")
		done
	else
		fail "rehearsal: no packages (the package step failed; see $LOGS/package.log)"
	fi
	# (In lane_rest again, with the doctests, after the rehearsal: at 4e5089f
	# lane_ours ran about 350 s longer on a slow machine, its data-path and
	# iwarp-cm with the new tests of issue 31.)
	# Two TCG guests share the two cores: fewer bind cycles here, the 20 cycles
	# of the issue run in three-adapters. (Repetition counts here and in
	# rmmod_race.sh are cut for the debug kernel's time: 3 and 4 cycles.)
	guest two-guests-one-model --smp 1 --timeout 1200 --kmemleak none \
		--dev proto=roce --dev proto=iwarp --guest 0 --guest 1 \
		--run 'CYCLES=3 erdma_rs/run_tests.sh probe.sh'
	# The kernel crate's doctests (its `# Examples`, ours of kernel::rdma and
	# kernel::net included), which boots leave out by default
	# (kernel/configs/erdma_rs_debug.config): this boot runs them alone,
	# without debugobjects (an upstream example's stack timer is "not
	# annotated" there).
	guest doctests --smp 1 --timeout 600 \
		--append "kunit.filter_glob=rust_doctests_kernel no_debug_objects" \
		--dev proto=roce --run 'erdma_rs/run_tests.sh doctests.sh'
}
# What the C driver's fail-nth sweeps are known to meet (control-plane): a
# failed probe leaves its event queue's interrupt live over the queue's freed
# memory (a KASAN report); and an iWARP rdma_disconnect whose TCP FIN the
# injected failure drops (the C driver closes its socket in the caller's
# thread, and tcp_send_fin gives up on a failed allocation), so the peer
# hears of no close.
C_FAILNTH_REPORTS='BUG: KASAN: (slab-)?use-after-free in (erdma_aeq_event_handler|erdma_polling_cmd_completions)\+'
C_FAILNTH_FAILURES='^rdma_cm on [0-9.]+ \(iwarp\): .*: no rdma_cm event within [0-9]+ s \(server disconnected\)$'
rehearsed=()
rm -f "$RELEASE.done" "$RELEASE.ok"
lane_ours &
ours_pid=$!
lane_rest
wait $ours_pid || true
# The most CEQs an adapter can have: 32 vCPUs give 31 CEQs (one per vector after
# vector 0), brought up and torn down (the model is asked which are live).
# 32 vCPU threads on 2 host cores: a vCPU can wait more than 20 s for a
# lock holder the host descheduled, which the soft lockup detector took for
# a kernel bug (here: CPU#16 stuck for 23 s, before any test; CI's smp32
# failure was likely the same); its threshold is raised from 20 to 120 s
# for this scenario. RCU's stall warning (21 s) is raised to 120 s for the
# same reason: with tickless idle, a boot here had CPUs 0, 14 and 15 spin
# 26 s in rcu_report_qs_rdp on an RCU node lock whose holder the host had
# descheduled. With queued spinlocks a later run spun 125 s there (each
# waiter hands the lock to the next, whatever the host runs); the kernel
# now takes test-and-set locks on a hypervisor (CONFIG_PARAVIRT, see
# kernel/configs/erdma_rs.config). One TCG thread for all 32 vCPUs
# (-accel tcg,thread=single) was tried: the boot alone took minutes.
# CI at 3173b70: no power-off within 1800 s, cause unknown (CI keeps no
# console log; here, beside another guest, it powers off after 75 s of guest
# time). It runs alone now, after both lanes, with both host cores, and
# within 900 s; vmrun names what a guest that does not power off was doing
# (its vCPUs' functions, its blocked tasks) in the failure line.
guest smp32 --smp 32 --memory 2G --timeout 900 --kmemleak none \
	--append "watchdog_thresh=60 rcupdate.rcu_cpu_stall_timeout=120" \
	--dev proto=roce,test_page=on \
	--run 'CTRLQ_FAULTS=0 erdma_rs/run_tests.sh ctrlq.sh'
c_scenarios=(upstream-c-driver data-path-c-driver)
[ -z "$C_IWARP" ] || c_scenarios+=(iwarp-cm-c-driver)
[ -z "$C_XGUEST" ] || c_scenarios+=(two-guests-data-path-c-driver)
[ -z "$C_IWARP_XGUEST" ] || c_scenarios+=(two-guests-iwarp-c-driver)
for name in three-adapters doctests control-plane smp32 data-path two-guests-data-path iwarp-cm two-guests-iwarp \
	two-guests-one-model kselftest-standard "${c_scenarios[@]}" "${rehearsed[@]}"; do
	count "$name"
done

finish
