#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# demo.sh: boots one guest with one emulated RoCEv2 adapter (and its twin
# virtio-net NIC), loads the Rust driver and shows what it found.
# Run through 'make demo', which builds whatever is missing first.
_step_name=demo
. "$(dirname "$0")/lib.sh"
say "booting a QEMU guest (TCG) with two emulated eRDMA adapters; the guest console follows"
exec "$TOP/scripts/vmrun.py" --out "$TOP/out/demo" --timeout 300 \
	--emu "${CARGO_TARGET_DIR:-$ERDMA_CACHE/cargo-target}/release/erdma-emu" \
	--dev proto=roce,mac=52:54:00:12:34:56 --dev proto=roce,mac=52:54:00:12:34:57 \
	--copy "$TOP/scripts/guest/demo.sh" --run 'sh demo.sh' --append quiet
