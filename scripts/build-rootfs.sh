#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# build-rootfs.sh: the guest userland, a Debian trixie minbase tree with
# rdma-core, perftest and pyverbs, made with debootstrap into the cache.
# The guest mounts it read-only over 9p; two guests can share it.
# Prints nothing but "ok" when the cached tree is current.

_step_name=rootfs
. "$(dirname "$0")/lib.sh"

key=$(key_of "$GUEST_SUITE" "$GUEST_PACKAGES" "$RDMA_CORE_SERIES")
dir=$ERDMA_CACHE/rootfs/$key

if ! stamp_ok "$dir.stamp" "$key"; then
	[ "$(id -u)" = 0 ] || die "debootstrap needs root"
	command -v debootstrap >/dev/null || die "debootstrap is missing: run scripts/setup.sh host"
	say "building the $GUEST_SUITE guest userland with $GUEST_PACKAGES (about 2 minutes)"
	rm -rf "$dir" "$dir.tmp" "$dir.stamp"
	mkdir -p "$(dirname "$dir")"
	run_logged "debootstrap $GUEST_SUITE" "$dir.log" \
		debootstrap --variant=minbase --include="$GUEST_PACKAGES" \
		"$GUEST_SUITE" "$dir.tmp" "$(debian_mirror)"
	ver=$(chroot "$dir.tmp" dpkg-query -W -f='${Version}' rdma-core 2>/dev/null || true)
	case "$ver" in
	"$RDMA_CORE_SERIES"*) ;;
	*) die "the guest has rdma-core '$ver', expected $RDMA_CORE_SERIES.x" ;;
	esac
	chroot "$dir.tmp" apt-get clean
	rm -rf "$dir.tmp"/var/lib/apt/lists/*
	mkdir -p "$dir.tmp/mnt/payload" "$dir.tmp/usr/lib/modules"
	echo erdma-guest >"$dir.tmp/etc/hostname"
	mv "$dir.tmp" "$dir"
	echo "$key" >"$dir.stamp"
	say "guest userland ready: rdma-core $ver, $(du -sh "$dir" | cut -f1)"
else
	say "guest userland: ok ($dir)"
fi

# The guest's PID 1 is small and changes more often than the package set:
# refresh it in place.
if ! cmp -s "$TOP/scripts/guest/erdma-init" "$dir/sbin/erdma-init"; then
	install -m 0755 "$TOP/scripts/guest/erdma-init" "$dir/sbin/erdma-init"
fi
ln -sfn "$key" "$ERDMA_CACHE/rootfs/current"
