# SPDX-License-Identifier: GPL-2.0
#
# erdma-rs: a Rust-for-Linux driver for Alibaba's Elastic RDMA Adapter, and a
# software model of the adapter for QEMU.  See README.md.
#
#   make demo     build what is missing, boot a guest with one emulated adapter,
#                 load the Rust driver and show what it found
#   make check    every test: model unit tests and lints, kernel build, driver
#                 lints, guest tests; ends with "N passed, N failed"
#   make bench    control- and data-path figures of erdma_rs, the upstream C
#                 erdma and rdma_rxe in one guest; table in out/bench/results.txt
#   make fuzz     coverage-guided fuzzing of the device model, at least 10^7
#                 executions; table in out/fuzz/results.txt
#   make package  Debian packages for an ECS instance in out/package
#                 (Documentation/infiniband/erdma_rs_ecs.rst)
#
#   make debian-module, debian-spike, debian-package  erdma_rs for Debian's own kernel
#                 (issue 32, in progress; Documentation/infiniband/erdma_rs_ecs.rst)
#
# Pieces: setup, model, kernel, module (fast path: the erdma_rs module only),
# rootfs, vm (boot a guest: make vm RUN='cmd'), rustfmt (format our kernel
# Rust), clippy (lint it), clean.
#
# Two kernels come from the tree (scripts/build-kernel.sh): the debug kernel
# (KASAN, lockdep, UBSAN, kmemleak, ...) that make check, make demo and make vm
# use, and the release kernel of make package and make bench.  kernel, module and clippy act on
# the debug kernel unless KERNEL_FLAVOR=release is given.
#
# Everything downloaded or built lives in $(ERDMA_CACHE), outside the checkout.

HOME ?= $(shell getent passwd $$(id -u) | cut -d: -f6)
export HOME
ERDMA_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/erdma-rs
export ERDMA_CACHE
export PATH := $(or $(PATH),/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
ifeq ($(shell PATH='$(PATH)' command -v cargo),)
export PATH := $(HOME)/.cargo/bin:$(PATH)
endif

CARGO_TARGET_DIR := $(ERDMA_CACHE)/cargo-target
export CARGO_TARGET_DIR
KERNEL_FLAVOR ?= debug
export KERNEL_FLAVOR
EMU := $(CARGO_TARGET_DIR)/release/erdma-emu

.PHONY: all demo check bench fuzz package debian-module debian-spike debian-package setup model kernel module rootfs vm rustfmt clippy clean help

all: setup model kernel

help:
	@sed -n '3,27p' Makefile

setup:
	@scripts/setup.sh

model:
	@echo "==> [model] cargo build --release (tools/erdma-emu)"
	@cd tools/erdma-emu && cargo build --release --locked --quiet

kernel: setup
	@scripts/build-kernel.sh >/dev/null

# Fast path after editing the driver: rebuild only erdma_rs.ko and install it.
module:
	@scripts/build-kernel.sh --module >/dev/null

rootfs:
	@scripts/build-rootfs.sh

# Format our kernel Rust with the kernel's rustfmt configuration.
rustfmt:
	@rustfmt --edition 2021 --config-path scripts/rustfmt.toml $$(find drivers rust -name '*.rs')

# clippy on the driver crate and our kernel-crate files (needs a built kernel).
clippy:
	@scripts/build-kernel.sh --clippy

# Boot one guest with one RoCEv2 adapter and run RUN in it, e.g.
#   make vm RUN='modprobe erdma_rs && dmesg | tail'
vm: model
	@scripts/vmrun.py --run '$(RUN)'

demo: all
	@scripts/demo.sh

check:
	@tests/check.sh

# Not part of check: about 10 minutes of measurements (scripts/bench.sh).
bench:
	@scripts/bench.sh

# Not part of check (which runs scripts/fuzz.sh --smoke): the model's fuzz targets, 10^7 executions (scripts/fuzz.sh).
fuzz:
	@scripts/fuzz.sh

# Debian packages for an ECS instance in out/package (scripts/package.sh;
# Documentation/infiniband/erdma_rs_ecs.rst).
# Then the module packages for Debian 13's own kernels (both flavours;
# DEBIAN_KERNEL=K for one): make debian-package.
package:
	@scripts/package.sh
	@scripts/debian-package.sh --all

# Issue 32: erdma_rs built for Debian's own kernel
# (DEBIAN_KERNEL, 7.3.4+deb13-cloud-amd64 by default) in a trixie build root
# (scripts/debian-module.sh), and that kernel booted to load it
# (scripts/debian-spike.sh --driver). About 20 minutes cold, a minute warm.
debian-module:
	@scripts/debian-module.sh
debian-spike:
	@scripts/debian-spike.sh --driver
# The module packages erdma-rs-modules-K in out/debian-package, for K in
# 7.3.4+deb13-cloud-amd64 and 7.3.4+deb13-amd64 (DEBIAN_KERNEL=K: K alone).
debian-package:
	@scripts/debian-package.sh --all

clean:
	rm -rf out
