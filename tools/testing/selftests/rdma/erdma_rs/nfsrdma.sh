#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# NFS over RDMA (RPC-over-RDMA, the kernel's NFS client and server) on the
# adapters of this guest: the kernel NFS server exports a directory over
# RDMA (port 20049, on adapter A's address), the NFS client mounts it with
# proto=rdma (NFSv4.2; in one guest the client's connection to A's address
# is looped back through adapter A by the model), a file of random bytes is
# written, the page cache dropped and the export mounted again, and the file
# read back over RDMA must be the same bytes; /proc/self/mountstats must show
# the mount's transport as rdma. Then everything unmounts, the NFS modules
# unload and the driver with them.
# NFS_MODE=xguest: the same between two guests with one adapter each (roles
# as xguest_adapter gives them: the server's guest exports, the client's
# mounts the server's address; beacons order the steps).
# On RoCEv2 adapters (the RDMA core's rdma_cm over the GSI QP) and on iWARP
# adapters (CM_PROTO=iwarp: the driver's connection manager). Runs against
# either driver (ERDMA_DRIVER=erdma_rs or erdma). Needs the kernel's NFS
# client and server with RPC-over-RDMA (nfs, nfsd, rpcrdma) and nfs-utils
# (rpc.nfsd, rpc.mountd, exportfs, mount.nfs).

. "$(dirname "$0")/lib.sh"

DRV=$ERDMA_DRIVER
PROTO=${CM_PROTO:-roce}
NET=64
need_functions
need_reconfigure "loads the NFS client and server and exports a directory"
for _m in nfs nfsd rpcrdma; do
	modinfo "$_m" >/dev/null 2>&1 || ksft_skip_all "the kernel has no $_m module"
done
for _c in rpc.nfsd rpc.mountd exportfs mount.nfs; do
	command -v "$_c" >/dev/null || ksft_skip_all "$_c (nfs-kernel-server, nfs-common) is missing"
done
tmp=/tmp/nfsrdma
NFS_TMP=$tmp
. "$(dirname "$0")/nfs_lib.sh"
rm -rf "$tmp"
mkdir -p "$tmp/export" "$tmp/mnt"
MIB=8

# step DESCRIPTION COMMAND...: tap_check, and COMMAND's status (what needs a
# step that failed is not tried).
step() {
	_was=$_tap_failed
	tap_check "$@"
	[ "$_tap_failed" = "$_was" ]
}

# over_rdma: the mount's transport, as the NFS client reports it, is rdma.
over_rdma() {
	awk -v m="$tmp/mnt" '$1 == "device" && $5 == m { on = 1; next } $1 == "device" { on = 0 } on && $1 == "xprt:" { print; exit }' \
		/proc/self/mountstats >"$tmp/xprt"
	tap_diag "mountstats: $(cat "$tmp/xprt")"
	grep -q '^[[:space:]]*xprt:[[:space:]]*rdma ' "$tmp/xprt"
}

# write_and_read: MIB MiB of random bytes written through the mount, the
# cache dropped and the export mounted anew, read back the same.
write_and_read() {
	head -c $((MIB << 20)) /dev/urandom >"$tmp/src" || return 1
	timeout "$(ksft_within 120)" cp "$tmp/src" "$tmp/mnt/file" && sync || { tap_diag "the write failed"; return 1; }
	timeout 60 umount "$tmp/mnt" || { tap_diag "umount after the write failed"; return 1; }
	echo 3 >/proc/sys/vm/drop_caches
	nfs_mount "$1" || return 1
	timeout "$(ksft_within 120)" cmp "$tmp/src" "$tmp/mnt/file" || { tap_diag "the file read back differs"; return 1; }
	# The server's copy too, where the server is this machine.
	[ "${2:-}" = client ] || cmp "$tmp/src" "$tmp/export/file"
}

if [ "${NFS_MODE:-local}" = xguest ]; then
	xguest_begin $NET "$tmp.x" mount.nfs
	# The server's guest exports until the client says it is done; the client
	# mounts the server's address once the server says it exports.
	if [ "$ROLE" = server ]; then
		step "server: the NFS server exports over RDMA on $IP:$RDMA_PORT" nfs_server_up "$IP" &&
			ready_beacon "$IP" 18801 "$(ksft_within 120)" >/dev/null
		xguest_end 18802 300
		tap_check "server: the NFS server stopped and its modules unloaded" nfs_down server
	else
		await_beacon "$SERVER_IP" 18801 "$(ksft_within 120)" ||
			tap_diag "the server did not say it exports"
		if step "client: mount -t nfs4 -o proto=rdma $SERVER_IP:/" nfs_mount "$SERVER_IP"; then
			tap_check "client: the mount's transport is rdma" over_rdma
			tap_check "client: $MIB MiB written and, mounted anew, read back the same over RDMA" \
				write_and_read "$SERVER_IP" client
			tap_check "client: unmounted, the NFS client's modules unloaded" nfs_down client
		fi
		xguest_end 18802 300
	fi
	unload_and_finish "$DRV"
fi

tap_header
nics_up $NET
load_driver
adapter_pair "$PROTO" 1 || ksft_skip_all "no $PROTO adapter bound"
tap_diag "$IB_A ($PROTO) at $IP_A"
if step "the NFS server exports over RDMA on $IP_A:$RDMA_PORT" nfs_server_up "$IP_A"; then
	if step "mount -t nfs4 -o proto=rdma $IP_A:/" nfs_mount "$IP_A"; then
		tap_check "the mount's transport is rdma" over_rdma
		tap_check "$MIB MiB written and, mounted anew, read back the same over RDMA" write_and_read "$IP_A"
	fi
	tap_check "unmounted, the NFS server stopped, its modules and the client's unloaded" nfs_down
fi
unload_and_finish "$DRV"
