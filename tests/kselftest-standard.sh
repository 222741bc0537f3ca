#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# kselftest-standard.sh: the selftests the way kernel developers run them
# (Documentation/infiniband/erdma_rs_selftests.rst):
#
#   1. A kselftest install made from the kernel's own selftests tree: the
#      kernel source's tools/testing/selftests (its Makefile, lib.mk, runner,
#      run_kselftest.sh) is copied to out/kselftest-standard/ (the kernel
#      source is shared with the kernel builds and stays untouched), our
#      rdma/erdma_rs directory put in it, and
#        make -C tools/testing/selftests TARGETS=rdma/erdma_rs \
#             KSFT_INSTALL_PATH=... install
#      (what the kernel's "make kselftest-install" runs) writes
#      kselftest_install/ with run_kselftest.sh and kselftest-list.txt.
#   2. One guest (the debug kernel, one vCPU, two RoCEv2 adapters with the
#      model's test page) runs the installed run_kselftest.sh twice
#      (scripts/guest/kselftest-standard.sh): on the emulated adapters as the
#      harness has them; then set up as a user's instance is and without
#      anything of the harness (as on a real instance, where the tests may
#      not change the machine); then there again with the user's opt-in
#      (ERDMA_RECONFIGURE=1); and checks that the first run undid what it
#      changed in the network configuration and that the other two left
#      everything as they found it.
#
# vmrun counts the runner's TAP lines (ok / not ok per test; a skip is a
# SKIP) and restore.tap's. KSFT_STANDARD_TESTS, KSFT_SAFE_TESTS and
# KSFT_OPTIN_TESTS name the tests of each run ("all": the whole list). The
# defaults keep this at about 3 minutes under TCG: the standard run has
# pyverbs.sh (one module of the suite, found where the system has it) and the
# tests that skip on one machine (the two-guest tests, iwarp_mpa.sh on
# RoCEv2): what the runner does with each kind of test, where every test's own
# checks run in the other scenarios (ibdev.sh and rc.sh left it for that:
# 60 s; probe.sh, which the run as on a real instance has, 50 s); the run as on
# a real instance the tests that run there without
# changing anything (probe.sh, ctrlq.sh, rc.sh, pyverbs.sh) and those that
# skip there; the opted-in run kverbs.sh (it unloads the user's driver, loads
# its own test module, and must put both back). (The whole list, the first
# two ways: 20 and 7 minutes.) KSFT_STANDARD_TIMEOUT: the guest's time, 900 s
# by default. The guest boots the debug kernel without kmemleak
# (KSFT_STANDARD_KMEMLEAK=all keeps it): every test here runs in make check's
# other scenarios with kmemleak, and kmemleak made this run about a third
# longer.
# Results in out/vm/kselftest-standard/guest0/results/, the install's log in
# out/kselftest-standard/install.log.

_step_name=kselftest-standard
. "$(dirname "$0")/../scripts/lib.sh"

EMU=${CARGO_TARGET_DIR:-$ERDMA_CACHE/cargo-target}/release/erdma-emu
W=$TOP/out/kselftest-standard
OUT=${KSFT_STANDARD_OUT:-$TOP/out/vm/kselftest-standard}
SEL=tools/testing/selftests
# The subsets (see above): the standard run, then the safe one.
: "${KSFT_STANDARD_TESTS:=pyverbs.sh xguest.sh xguest_cm.sh xguest_stop.sh iwarp_mpa.sh}"
: "${KSFT_SAFE_TESTS:=probe.sh ctrlq.sh verbs.sh abdiff.sh rc.sh xguest.sh pyverbs.sh rmmod_race.sh nvmeof.sh handover.sh}"
: "${KSFT_OPTIN_TESTS:=kverbs.sh}"
# pyverbs.sh finds the guest's rdma-core suite where Debian installs it; one
# module of it here (the whole suite runs in make check's data-path).
: "${PYVERBS_MODULES:=test_pd}"

[ -f "$KSRC/$SEL/Makefile" ] && [ -f "$KSRC/$SEL/run_kselftest.sh" ] ||
	die "no selftests tree in the kernel source $KSRC: run 'make setup' first"

# 1. The install, from a copy of the kernel's selftests framework.
rm -rf "$W"
mkdir -p "$W/src/$SEL/rdma" "$W/src/scripts"
cp "$KSRC/scripts/subarch.include" "$W/src/scripts/"
for f in Makefile lib.mk run_kselftest.sh kselftest_install.sh kselftest.h kselftest; do
	cp -r "$KSRC/$SEL/$f" "$W/src/$SEL/"
done
cp -r "$KSRC/$SEL/rdma/." "$W/src/$SEL/rdma/"
cp -r "$TOP/$SEL/rdma/erdma_rs" "$W/src/$SEL/rdma/"
rm -rf "$W/src/$SEL/rdma/erdma_rs/__pycache__"
say "make -C $SEL TARGETS=rdma/erdma_rs install (log: $W/install.log)"
make -C "$W/src/$SEL" TARGETS=rdma/erdma_rs KSFT_INSTALL_PATH="$W/kselftest_install" install \
	>"$W/install.log" 2>&1 || { tail -n 20 "$W/install.log" >&2; die "the kselftest install failed"; }
list=$W/kselftest_install/kselftest-list.txt
[ -s "$list" ] && [ -x "$W/kselftest_install/rdma/erdma_rs/probe.sh" ] ||
	die "the install has no rdma/erdma_rs tests: read $W/install.log"
say "installed: $(wc -l <"$list") tests in $list"

# 2. One guest runs the installed runner.
start=$(date +%s)
rc=0
"$TOP/scripts/vmrun.py" --quiet --out "$OUT" --emu "$EMU" --smp 1 --memory 2G --timeout "${KSFT_STANDARD_TIMEOUT:-900}" \
	--kmemleak "${KSFT_STANDARD_KMEMLEAK:-none}" \
	--dev proto=roce,test_page=on --dev proto=roce,test_page=on \
	--copy "$W/kselftest_install" --copy "$TOP/scripts/guest/kselftest-standard.sh" \
	--run "KSFT_STANDARD_TESTS='$KSFT_STANDARD_TESTS' KSFT_SAFE_TESTS='$KSFT_SAFE_TESTS' KSFT_OPTIN_TESTS='$KSFT_OPTIN_TESTS' PYVERBS_MODULES='$PYVERBS_MODULES' sh kselftest-standard.sh" ||
	rc=$?
say "the guest: exit $rc in $(($(date +%s) - start)) s; TAP in $OUT/guest0/results/"
exit $rc
