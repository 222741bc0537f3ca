#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# The kernel crate's doctests (every `# Examples` of rust/kernel, ours of
# kernel::rdma, kernel::net, kernel::pci ... included), built by
# CONFIG_RUST_KERNEL_DOCTESTS as the KUnit suite rust_doctests_kernel, ran at
# this boot and passed:
#   - the suite's result line is "ok";
#   - no case failed, and ours ran (rust_doctest_kernel_rdma_*, _net_*).
# The suite runs only where the boot asked for it: the debug kernel of make
# check leaves it out by default (CONFIG_KUNIT_DEFAULT_FILTER_GLOB, it adds 14 s
# to a boot under TCG) and one scenario boots with
# kunit.filter_glob=rust_doctests_kernel. Elsewhere this test
# skips.

. "$(dirname "$0")/lib.sh"

SUITE=rust_doctests_kernel

if ! dmesg | head -n 1 | grep -q '^\[ *0\.0*\]'; then
	ksft_skip_all "the kernel log no longer holds the boot"
fi
dmesg | grep -q "# Subtest: $SUITE\$" ||
	ksft_skip_all "no $SUITE at this boot (CONFIG_RUST_KERNEL_DOCTESTS, or the boot's kunit.filter left it out)"
tap_header
summary=$(dmesg | sed -n "s/^\[[^]]*\] *# $SUITE: //p" | tail -n 1)
tap_diag "$SUITE: ${summary:-no summary line}"
tap_check "the kernel crate's doctests passed at boot" \
	sh -c "dmesg | grep -Eq '\\] ok [0-9]+ $SUITE\$'"
failed=$(dmesg | sed -n 's/.*not ok [0-9]* \(rust_doctest_kernel_[a-z0-9_]*\).*/\1/p' | tr '\n' ' ')
[ -z "$failed" ] || tap_diag "failed: $failed"
tap_check "no doctest failed" [ -z "$failed" ]
# Our files' doctests: rust/kernel/rdma.rs, rdma/*, net/device.rs, net/tcp.rs,
# pci/{holder,resource,vectors}.rs, irq/named.rs, ratelimit.rs, capability.rs
# cpu/online.rs and workqueue/owned.rs.
ours=$(dmesg | grep -Ec '\] +ok [0-9]+ rust_doctest_kernel_(rdma|net_device|net_namespace|net_sock|net_tcp|net_udp|pci_holder|pci_resource|pci_vectors|irq_named|ratelimit|capability|cpu_online|workqueue_owned)_')
tap_diag "doctests of our additions that passed: $ours"
tap_check "the doctests of kernel::rdma, kernel::net and the other additions ran (at least 146)" \
	[ "$ours" -ge 146 ]
tap_finish
