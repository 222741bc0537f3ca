#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Runs inside the demo guest: loads erdma_rs and shows what it found.
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
show "rmmod erdma_rs && echo unloaded cleanly"
echo
if dmesg | grep -Eq 'Oops|BUG:|WARNING:|Call Trace:'; then
	echo "demo: the kernel reported trouble, see the log above"
	exit 1
fi
