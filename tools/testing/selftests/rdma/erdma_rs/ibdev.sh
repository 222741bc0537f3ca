#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# The RDMA device a driver registers for each eRDMA function, as rdma-core
# sees it, checked against what the model was told to report:
#   - one ib_device per function, bound to the netdev with the adapter's MAC,
#     its port ACTIVE once that netdev is up (rdma dev / rdma link);
#   - ibv_devices lists it; ibv_devinfo -v reports vendor, part, hw_ver,
#     fw_ver, the node GUID (EUI-64 of the MAC), the transport of the
#     adapter's protocol, and the limits of its capabilities.
# Runs against either driver (ERDMA_DRIVER=erdma_rs or erdma). On adapters
# that are not the model's (a real instance), the values the model was told
# to report are not checked (they are the adapter's own), and the driver
# already bound is used as it is (see "What a test may change" in lib.sh).

. "$(dirname "$0")/lib.sh"

need_functions
DRV=$ERDMA_DRIVER
command -v ibv_devinfo >/dev/null || ksft_skip_all "ibv_devinfo (ibverbs-utils) is missing"
ncpus=$(grep -c '^processor' /proc/cpuinfo)
nceqs=$((ncpus < 31 ? ncpus : 31))

# EUI-64 of MAC $1 (the universal/local bit flipped, ff:fe in the middle), as
# ibv_devinfo prints GUIDs.
eui64() {
	set -- $(echo "$1" | tr : ' ')
	printf '%02x%s:%sff:fe%s:%s%s\n' $((0x$1 ^ 2)) "$2" "$3" "$4" "$5" "$6"
}

# known_netdev NETDEV: NETDEV has the MAC of an adapter the harness created
# (any MAC passes when the adapters are unknown).
known_netdev() {
	[ -n "$1" ] || return 1
	[ "$(expected_adapters | wc -l)" -eq 0 ] && return 0
	[ -n "$(expected_adapters | awk -v m="$(cat "/sys/class/net/$1/address")" '$1 == m')" ]
}

# field NAME: the value of "NAME:" in $devinfo.
field() {
	echo "$devinfo" | awk -v k="$1:" '$1 == k { $1 = ""; sub(/^ +/, ""); print; exit }'
}

expect() {
	got=$(field "$1")
	[ "$got" = "$2" ] || { tap_diag "$1 is '$got', expected '$2'"; return 1; }
}

# model_expect DESCRIPTION FIELD VALUE: a test point for a value the model
# was told to report; on other adapters a skip (the value is the adapter's).
model_expect() {
	if is_emulated; then
		tap_check "$1" expect "$2" "$3"
	else
		tap_skip "$1" "the model's value; this adapter's is '$(field "$2")'"
	fi
}

port_is_active() { rdma link show "$1/1" 2>/dev/null | grep -q 'state ACTIVE'; }

# Port 1 of $1 turns ACTIVE (the core follows the netdev; allow it 10 s).
port_active() {
	wait_for 10 port_is_active "$1" && return 0
	tap_diag "$(rdma link show "$1/1" 2>&1)"
	return 1
}

tap_header
nics_up 10
load_driver
# The kernel::rdma KUnit suite (built in) ran at boot: in the test kernel; a
# real instance's kernel, and the release kernel the C driver's reference runs
# boot, may have no KUnit (probe.sh requires it of the debug kernel), and a
# full kernel log no longer holds the boot.
if ! dmesg | head -n 1 | grep -q '^\[ *0\.0*\]'; then
	tap_skip "kernel::rdma KUnit suite passed at boot" "the kernel log no longer holds the boot"
elif [ ! -d /sys/kernel/debug/kunit ] && ! dmesg | grep -q ' rust_kernel_rdma$'; then
	tap_skip "kernel::rdma KUnit suite passed at boot" "this kernel has no KUnit ($(uname -r))"
elif is_emulated || dmesg | grep -q ' rust_kernel_rdma$'; then
	tap_check "kernel::rdma KUnit suite passed at boot" \
		sh -c "dmesg | grep -Eq '\] ok [0-9]+ rust_kernel_rdma\$'"
else
	tap_skip "kernel::rdma KUnit suite passed at boot" "no such suite in the kernel log"
fi

nbound=0
for f in $functions; do
	is_bound "$f" && nbound=$((nbound + 1))
done
# RDMA devices appear asynchronously; the upstream driver registers them without
# a parent device, so they are matched to adapters through their netdev's MAC.
ibdevs=""
i=0
while [ $i -lt 50 ]; do
	ibdevs=$(ls /sys/class/infiniband 2>/dev/null | grep '^erdma_')
	[ "$(echo $ibdevs | wc -w)" -ge "$nbound" ] && break
	sleep 0.1
	i=$((i + 1))
done
tap_check "one RDMA device per bound function ($nbound): $(echo $ibdevs)" \
	[ "$(echo $ibdevs | wc -w)" -eq "$nbound" -a "$nbound" -gt 0 ]

for ibdev in $ibdevs; do

	netdev=$(rdma link show "$ibdev/1" | sed -n 's/.* netdev \([^ ]*\).*/\1/p')
	mac=$(cat "/sys/class/net/$netdev/address" 2>/dev/null)
	known=$(expected_adapters | awk -v m="$mac" '$1 == m')
	tap_check "$ibdev: bound to netdev ${netdev:-?} with an adapter's MAC ${mac:-?}" \
		known_netdev "$netdev"
	tap_check "$ibdev: port 1 ACTIVE" port_active "$ibdev"

	proto=$(echo "$known" | awk '{ print $2 }')
	case "$proto" in
	iwarp) node_type=rnic ;;
	*) node_type=ca ;;
	esac
	if is_emulated; then
		tap_check "$ibdev: rdma dev shows node_type $node_type" \
			sh -c "rdma dev show $ibdev | grep -q 'node_type $node_type '"
	else
		tap_skip "$ibdev: rdma dev shows node_type $node_type" "the protocol the model was told"
	fi
	qp_blocks=$(adapter_opt "$mac" qp_blocks 4)
	max_cqe=$(adapter_opt "$mac" max_cqe 22)
	max_mr=$(adapter_opt "$mac" max_mr_size 40)
	atomic=$(adapter_opt "$mac" atomic on)
	fw=$(($(adapter_opt "$mac" fw_version 0x10000)))
	guid=$(eui64 "$mac")

	tap_check "$ibdev: listed by ibv_devices with GUID $guid" \
		sh -c "ibv_devices | grep -Eq '^[[:space:]]+$ibdev[[:space:]]+$(echo "$guid" | tr -d :)'"
	devinfo=$(ibv_devinfo -v -d "$ibdev" 2>&1)
	tap_check "$ibdev: vendor_id 0x1ded" expect vendor_id 0x1ded
	tap_check "$ibdev: vendor_part_id 4223" expect vendor_part_id 4223
	model_expect "$ibdev: hw_ver 0x1" hw_ver 0x1
	model_expect "$ibdev: fw_ver from QUERY_FW_INFO" \
		fw_ver "$((fw >> 32)).$(((fw >> 16) & 0xffff)).$((fw & 0xffff))"
	tap_check "$ibdev: node_guid is the EUI-64 of the MAC" expect node_guid "$guid"
	tap_check "$ibdev: sys_image_guid too" expect sys_image_guid "$guid"
	case "$proto" in
	iwarp) transport="iWARP (1)" ;;
	*) transport="InfiniBand (0)" ;;
	esac
	model_expect "$ibdev: transport $transport" transport "$transport"
	model_expect "$ibdev: max_qp from the QP blocks" max_qp $((1024 * qp_blocks - 1))
	model_expect "$ibdev: max_cqe" max_cqe $((1 << max_cqe))
	model_expect "$ibdev: max_mr_size" max_mr_size "$(printf '0x%x' $((1 << max_mr)))"
	if [ "$atomic" = on ]; then
		model_expect "$ibdev: atomic_cap" atomic_cap "ATOMIC_GLOB (2)"
	else
		model_expect "$ibdev: atomic_cap" atomic_cap "ATOMIC_NONE (0)"
	fi
	model_expect "$ibdev: page_size_cap" page_size_cap 0x7ffff000
	model_expect "$ibdev: max_pd" max_pd 131072
	model_expect "$ibdev: num_comp_vectors = $nceqs CEQs" num_comp_vectors "$nceqs"
	tap_check "$ibdev: phys_port_cnt" expect phys_port_cnt 1
done

unload_and_finish "$DRV"
