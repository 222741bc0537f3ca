#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Runs inside the demo guest: loads erdma_rs, shows what it found, as the
# kernel and rdma-core see it, and moves data between the two adapters with
# ibv_rc_pingpong through the stock rdma-core provider.
show() {
	echo
	echo "demo\$ $*"
	sh -c "$*"
}
show "lspci -nn -d 1ded:107f"
show "modprobe erdma_rs"
show "dmesg | grep erdma_rs"
show "grep erdma /proc/interrupts | awk '{ print \$1, \$NF }'"
show "lspci -k -d 1ded:107f"
show "ls /sys/bus/pci/drivers/erdma_rs"
show "ip -br link"
# The two NICs are wired to each other; each accepts the other's (local)
# address so that ARP, and the RDMA core's address resolution, work.
ip link set lo up
k=1
for n in $(ls /sys/class/net | grep -v '^lo$'); do
	echo 1 >"/proc/sys/net/ipv4/conf/$n/accept_local"
	ip link set "$n" up
	ip addr add "192.168.77.$k/24" dev "$n"
	k=$((k + 1))
done
sleep 2
show "rdma link show"
show "ibv_devices"
show "ibv_devinfo -v | grep -E 'hca_id|transport|fw_ver|node_guid|vendor_part_id|max_qp:|max_cqe:|max_mr_size|atomic_cap|state:|active_mtu|link_layer'"
show "rdma statistic show | head -n 3"
# The RoCEv2 GID of an address: index 1 after the link-local IPv6 one.
show "ibv_devinfo -d erdma_0 -v | grep -E 'GID\\['"
timeout 60 ibv_rc_pingpong -d erdma_0 -g 1 -s 4096 -n 1000 >/tmp/srv.out 2>&1 &
sleep 2
show "timeout 60 ibv_rc_pingpong -d erdma_1 -g 1 -s 4096 -n 1000 192.168.77.1"
wait
show "cat /tmp/srv.out"
show "rmmod erdma_rs && echo unloaded cleanly"
echo
if dmesg | grep -Eq 'Oops|BUG:|WARNING:|Call Trace:'; then
	echo "demo: the kernel reported trouble, see the log above"
	exit 1
fi
