#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Runs inside the demo guest: loads erdma_rs and shows what it found, as the
# kernel and rdma-core see it.
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
for n in $(ls /sys/class/net | grep -v '^lo$'); do ip link set "$n" up; done
sleep 1
show "rdma link show"
show "ibv_devices"
show "ibv_devinfo -v | grep -E 'hca_id|transport|fw_ver|node_guid|vendor_part_id|max_qp:|max_cqe:|max_mr_size|atomic_cap|state:|active_mtu|link_layer'"
show "rdma statistic show | head -n 3"
show "rmmod erdma_rs && echo unloaded cleanly"
echo
if dmesg | grep -Eq 'Oops|BUG:|WARNING:|Call Trace:'; then
	echo "demo: the kernel reported trouble, see the log above"
	exit 1
fi
