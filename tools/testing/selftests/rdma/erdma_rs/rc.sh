#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# RC traffic between two RoCEv2 adapters of this guest, through the driver
# under test and the stock rdma-core erdma provider: ibv_rc_pingpong with
# several message sizes (inline and not), polling and completion events.
# The out-of-band exchange runs over TCP on the adapters' netdevs; the data
# moves through the model's fabric, addressed by GID and QPN.
# Runs against either driver (ERDMA_DRIVER=erdma_rs or erdma).

. "$(dirname "$0")/lib.sh"

DRV=$ERDMA_DRIVER
NET=50
functions=$(erdma_functions)
[ -n "$functions" ] || ksft_skip_all "no eRDMA function (1ded:107f) present"
command -v ibv_rc_pingpong >/dev/null || ksft_skip_all "ibv_rc_pingpong (ibverbs-utils) is missing"
tmp=/tmp/rc
rm -rf "$tmp"
mkdir -p "$tmp"

# gid_index IBDEV IPV4: the index of the RoCEv2 GID of IPV4 on port 1.
gid_index() {
	want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' $(echo "$2" | tr . ' '))
	for g in /sys/class/infiniband/"$1"/ports/1/gids/*; do
		i=${g##*/}
		[ "$(cat "$g" 2>/dev/null)" = "$want" ] || continue
		[ "$(cat /sys/class/infiniband/"$1"/ports/1/gid_attrs/types/"$i" 2>/dev/null)" = "RoCE v2" ] &&
			{ echo "$i"; return 0; }
	done
	return 1
}

# ipv4_of NETDEV: its first IPv4 address.
ipv4_of() { ip -4 -o addr show dev "$1" | awk '{ split($4, a, "/"); print a[1]; exit }'; }

port=18515

# pingpong NAME SERVER_IB SERVER_GID CLIENT_IB CLIENT_GID SERVER_IP ARGS...:
# one ibv_rc_pingpong run; both ends must finish and report their transfer.
pingpong() {
	name=$1 sib=$2 sgid=$3 cib=$4 cgid=$5 sip=$6
	shift 6
	port=$((port + 1))
	timeout 120 ibv_rc_pingpong -d "$sib" -g "$sgid" -p "$port" "$@" >"$tmp/$name.srv" 2>&1 &
	spid=$!
	wait_for 20 grep -q 'local address' "$tmp/$name.srv" ||
		{ tap_diag "server did not start: $(tr '\n' ';' <"$tmp/$name.srv")"; kill $spid 2>/dev/null; return 1; }
	timeout 120 ibv_rc_pingpong -d "$cib" -g "$cgid" -p "$port" "$@" "$sip" >"$tmp/$name.cli" 2>&1
	crc=$?
	wait $spid
	src=$?
	if [ $crc != 0 ] || [ $src != 0 ] ||
		! grep -q 'bytes in' "$tmp/$name.cli" || ! grep -q 'bytes in' "$tmp/$name.srv"; then
		tap_diag "client (exit $crc): $(tr '\n' ';' <"$tmp/$name.cli")"
		tap_diag "server (exit $src): $(tr '\n' ';' <"$tmp/$name.srv")"
		return 1
	fi
	tap_diag "$name: $(grep 'bytes in' "$tmp/$name.cli")"
}

tap_header
nics_up $NET
tap_check "modprobe $DRV" modprobe "$DRV"

ibs="" gids="" ips=""
for bdf in $functions; do
	wait_for 10 is_bound "$bdf" || continue
	netdev=$(netdev_of "$(mac_of "$bdf")") || continue
	wait_for 10 sh -c "rdma link show | grep -q ' netdev $netdev '"
	ib=$(ibdev_of "$netdev")
	rdma dev show "$ib" | grep -q 'node_type rnic' && continue
	ip=$(ipv4_of "$netdev")
	wait_for 10 gid_index "$ib" "$ip" >/dev/null || { tap_diag "$ib: no RoCEv2 GID for $ip"; continue; }
	ibs="$ibs $ib" gids="$gids $(gid_index "$ib" "$ip")" ips="$ips $ip"
	tap_diag "$bdf: $ib on $netdev, $ip, GID index $(gid_index "$ib" "$ip")"
done
set -- $ibs
[ $# -ge 2 ] || ksft_skip_all "fewer than two RoCEv2 adapters bound"
a=$1 b=$2
set -- $gids
ga=$1 gb=$2
set -- $ips
ipa=$1

tap_check "rc_pingpong $a -> $b, 4096 bytes x 100" \
	pingpong base "$a" "$ga" "$b" "$gb" "$ipa" -s 4096 -n 100
tap_check "rc_pingpong $a -> $b, 1 byte x 100 (inline)" \
	pingpong small "$a" "$ga" "$b" "$gb" "$ipa" -s 1 -n 100
tap_check "rc_pingpong $a -> $b, 64 KiB x 20" \
	pingpong large "$a" "$ga" "$b" "$gb" "$ipa" -s 65536 -n 20
tap_check "rc_pingpong $a -> $b, 4096 bytes x 100, completion events (-e)" \
	pingpong events "$a" "$ga" "$b" "$gb" "$ipa" -s 4096 -n 100 -e
tap_check "rc_pingpong $a -> $a (loopback on one adapter), 4096 bytes x 50" \
	pingpong loop "$a" "$ga" "$a" "$ga" "$ipa" -s 4096 -n 50

tap_check "rmmod $DRV" rmmod "$DRV"
trouble=$(kernel_trouble)
[ -z "$trouble" ] || tap_diag "$trouble"
tap_check "no oops, BUG or WARNING in the kernel log" [ -z "$trouble" ]
tap_finish
