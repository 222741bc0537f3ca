#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# build-rootfs.sh: the guest userland, a Debian trixie minbase tree with
# rdma-core, perftest and pyverbs, made with debootstrap into the cache,
# and the same tree as a read-only ext4 image (rootfs/current.img) that the
# guests boot from over virtio-blk (scripts/vmrun.py; any number of guests
# share it). Over 9p every open is a round trip to QEMU: in the debug
# kernel a fork and exec of /bin/true took 62 ms from the 9p tree and 43
# from memory. Prints nothing but "ok" when both are current.

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

# The image: the tree as it is now (PID 1 included), remade when either
# changes; an older image of the tree is removed.
img_key=$(key_of "$key" "$dir/sbin/erdma-init" "$(mke2fs -V 2>&1 | head -n 1)")
img=$ERDMA_CACHE/rootfs/$key-$img_key.img
if [ ! -f "$img" ]; then
	command -v mke2fs >/dev/null || die "mke2fs is missing: run scripts/setup.sh host (e2fsprogs)"
	mb=$(du -sm --apparent-size "$dir" | cut -f1)
	inodes=$(find "$dir" | wc -l)
	say "making the read-only image of the guest userland ($mb MiB, $inodes files)"
	rm -f "$ERDMA_CACHE/rootfs/$key"-*.img "$img.tmp"
	# No journal (it is never written), room for the metadata, no reserve.
	run_logged "mke2fs -d $dir" "$dir.img.log" \
		mke2fs -q -F -t ext4 -O ^has_journal -m 0 -L erdma-rootfs \
		-N $((inodes + inodes / 4 + 1024)) -d "$dir" "$img.tmp" "$((mb + mb / 4 + 64))M"
	mv "$img.tmp" "$img"
	say "guest userland image ready: $img"
fi
ln -sfn "$(basename "$img")" "$ERDMA_CACHE/rootfs/current.img"
