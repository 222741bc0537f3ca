#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# A/B: the upstream C erdma driver and erdma_rs, loaded one after the other on
# the same model in the same boot, must report the same RDMA device for every
# adapter: `ibv_devinfo -v` output equal field for field, and the same
# `rdma dev`/`rdma link` lines. Devices are matched through their netdev's MAC.
#
# Allowed differences (removed before comparing):
#   - none in ibv_devinfo -v;
#   - `rdma dev`: the index the core gives each registration, which grows with
#     every load.
# It loads and unloads both drivers: only where the test may change the
# machine (see "What a test may change" in lib.sh).

. "$(dirname "$0")/lib.sh"

need_functions
need_reconfigure "loads and unloads both eRDMA drivers"
command -v ibv_devinfo >/dev/null || ksft_skip_all "ibv_devinfo (ibverbs-utils) is missing"
nfunc=$(echo $functions | wc -w)
out=/tmp/abdiff
rm -rf "$out"
mkdir -p "$out"

# ports_up N: N erdma_* devices exist and all their ports are ACTIVE.
ports_up() {
	devs=$(ls /sys/class/infiniband 2>/dev/null | grep '^erdma_')
	[ "$(echo $devs | wc -w)" -eq "$1" ] &&
		! rdma link show 2>/dev/null | grep '^link erdma_' | grep -qv 'state ACTIVE'
}

wait_ports() {
	wait_for 10 ports_up "$1" && return 0
	tap_diag "devices: $(echo $devs); $(rdma link show 2>&1 | tr '\n' ';')"
	return 1
}

# capture DRIVER: saves each device's views under $out/DRIVER/<mac>.
capture() {
	mkdir -p "$out/$1"
	for ibdev in $(ls /sys/class/infiniband | grep '^erdma_'); do
		netdev=$(rdma link show "$ibdev/1" | sed -n 's/.* netdev \([^ ]*\).*/\1/p')
		mac=$(cat "/sys/class/net/$netdev/address" 2>/dev/null || echo unknown)
		ibv_devinfo -v -d "$ibdev" >"$out/$1/$mac.devinfo" 2>&1 || return 1
		# A real report, not an error both drivers could share.
		grep -q "^hca_id:[[:space:]]*$ibdev" "$out/$1/$mac.devinfo" &&
			grep -q 'max_qp:' "$out/$1/$mac.devinfo" &&
			grep -q 'active_mtu:' "$out/$1/$mac.devinfo" || return 1
		rdma dev show "$ibdev" | sed 's/^[0-9]*: //' >"$out/$1/$mac.dev"
		rdma link show "$ibdev/1" >"$out/$1/$mac.link"
	done
}

tap_header
nics_up 20

for drv in erdma erdma_rs; do
	tap_check "$drv: loads, $nfunc devices with ACTIVE ports" \
		sh -c "modprobe $drv && exit 0; exit 1" && wait_ports "$nfunc"
	tap_check "$drv: ibv_devinfo -v and rdma dev/link captured" capture "$drv"
	tap_check "$drv: unloads" unload "$drv"
done

for f in "$out"/erdma/*.devinfo; do
	mac=$(basename "$f" .devinfo)
	for view in devinfo dev link; do
		tap_check "$mac: $view identical under erdma and erdma_rs" \
			sh -c "diff -u '$out/erdma/$mac.$view' '$out/erdma_rs/$mac.$view' >'$out/$mac.$view.diff'" ||
			sed 's/^/# /' "$out/$mac.$view.diff" | head -n 40
	done
done

trouble=$(kernel_trouble)
[ -z "$trouble" ] || tap_diag "$trouble"
tap_check "no oops, BUG or WARNING in the kernel log" [ -z "$trouble" ]
tap_finish
