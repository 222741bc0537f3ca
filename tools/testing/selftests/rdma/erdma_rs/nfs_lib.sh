# SPDX-License-Identifier: GPL-2.0
#
# The kernel's NFS server and client for a test or a benchmark, sourced
# after lib.sh (nfsrdma.sh, bench_xguest.sh). NFS_TMP is the directory of
# the run: the export is NFS_TMP/export (a tmpfs of NFS_EXPORT_SIZE, 64m by
# default), the mount point NFS_TMP/mnt, and nfs-utils' output goes there
# too. What these set up is undone when the caller exits (undo_push).

RDMA_PORT=20049

# nfs_server_up IP: the kernel NFS server (NFSv4 only) serves NFS_TMP/export
# as the root of its pseudo file system to IP's subnet, over RDMA on
# RDMA_PORT and over TCP (port 2049, which nfsd always opens).
nfs_server_up() {
	modprobe_once nfsd || return 1
	modprobe_once rpcrdma || return 1
	mount_once nfsd /proc/fs/nfsd || return 1
	mkdir -p "$NFS_TMP/export" "$NFS_TMP/mnt"
	# nfs-utils' state (/var/lib is a tmpfs of the test guest, empty).
	mkdir -p /var/lib/nfs/v4recovery /var/lib/nfs/rpc_pipefs
	touch /var/lib/nfs/etab /var/lib/nfs/rmtab
	# tmpfs has no UUID: the export names its file system (fsid=0: the root).
	mountpoint -q "$NFS_TMP/export" ||
		mount -t tmpfs -o "size=${NFS_EXPORT_SIZE:-64m}" tmpfs "$NFS_TMP/export" || return 1
	undo_push "! mountpoint -q '$NFS_TMP/export' || umount '$NFS_TMP/export'"
	rpc.mountd --no-nfs-version 3 --no-udp >"$NFS_TMP/mountd.log" 2>&1 || return 1
	undo_push "! pgrep -x rpc.mountd >/dev/null || pkill -x rpc.mountd"
	exportfs -o rw,fsid=0,no_root_squash,no_subtree_check,insecure "${1%.*}.0/24:$NFS_TMP/export" ||
		return 1
	undo_push "! mountpoint -q /proc/fs/nfsd || exportfs -ua"
	# The shortest lease and grace period (10 s): a new server refuses
	# opens in its grace period (90 s by default). (Without client tracking,
	# nfsdcld or the legacy one, the grace period cannot be ended early.)
	echo 10 >/proc/fs/nfsd/nfsv4leasetime && echo 10 >/proc/fs/nfsd/nfsv4gracetime || return 1
	rpc.nfsd --no-nfs-version 3 --no-udp 4 >"$NFS_TMP/nfsd.log" 2>&1 ||
		{ tap_diag "rpc.nfsd: $(cat "$NFS_TMP/nfsd.log")"; return 1; }
	undo_push "! mountpoint -q /proc/fs/nfsd || rpc.nfsd 0"
	echo "rdma $RDMA_PORT" >/proc/fs/nfsd/portlist || return 1
	grep -q "^rdma $RDMA_PORT\$" /proc/fs/nfsd/portlist ||
		{ tap_diag "portlist: $(tr '\n' ';' </proc/fs/nfsd/portlist)"; return 1; }
}

# nfs_mount IP [tcp]: the export mounted on NFS_TMP/mnt over RDMA (over TCP
# with "tcp").
nfs_mount() {
	_nm_opts="proto=rdma,port=$RDMA_PORT"
	[ "${2:-rdma}" = tcp ] && _nm_opts="proto=tcp,port=2049"
	mkdir -p "$NFS_TMP/mnt"
	timeout "$(ksft_within 60)" mount -t nfs4 -o "$_nm_opts,vers=4.2" "$1:/" "$NFS_TMP/mnt" \
		>"$NFS_TMP/mount.log" 2>&1 || { tap_diag "mount: $(tr '\n' ';' <"$NFS_TMP/mount.log")"; return 1; }
	undo_push "! mountpoint -q '$NFS_TMP/mnt' || umount -f '$NFS_TMP/mnt'"
}

# nfs_down [server|client]: what this machine ran of NFS stops (both, by
# default): the mount goes (if it is there), the server stops, and the NFS modules unload
# (rpcrdma, the client's and the server's, let go of the adapters).
nfs_down() {
	if [ "${1:-}" != server ] && mountpoint -q "$NFS_TMP/mnt"; then
		timeout 60 umount "$NFS_TMP/mnt" || return 1
	fi
	if [ "${1:-}" != client ]; then
		rpc.nfsd 0 && exportfs -ua && pkill -x rpc.mountd
		umount /proc/fs/nfsd && umount "$NFS_TMP/export" || return 1
	fi
	for _m in nfsv4 nfs rpcrdma nfsd; do
		! grep -q "^$_m " /proc/modules || modprobe -r "$_m" || { tap_diag "modprobe -r $_m failed"; return 1; }
	done
}
