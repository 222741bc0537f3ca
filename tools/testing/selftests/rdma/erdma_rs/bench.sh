#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# The guest half of `make bench` (scripts/bench.sh): measures the control path
# and the data path of erdma_rs (ours), of the upstream C erdma driver on the
# same model adapters, and of rdma_rxe on the adapters' twin netdevs (an
# outside reference), all in this one boot.
#
#   control path (bench_ctl.py, pyverbs): QP create + INIT/RTR/RTS + destroy,
#     CQ create + destroy, MR register + deregister of 4 KiB, 2 MiB and 1 GiB,
#     user context open + close;
#   kernel completions (erdma_kverbs_test's bench mode): completions per
#     second of BENCH_KCQ_QPS kernel RC QPs, each with its CQ on a completion
#     vector of its own, polled by the RDMA core from the CQ interrupts;
#   data path (perftest, server on adapter A, client on adapter B):
#     ib_write_lat and ib_send_lat at 8 bytes (median and 99th percentile),
#     ib_write_bw and ib_read_bw at 64 KiB with one and four QPs;
#   rdma_cm (rdmacm-utils, server on A, client bound to B's address):
#     connections set up and torn down per second (cmtime, with RC QPs) and
#     rping round trips per second;
#   NVMe over RDMA (an nvmet-rdma target on A exporting a null_blk device,
#     the nvme-rdma host on B, fio through it): 4 KiB random read IOPS at
#     queue depth 32 and 128 KiB sequential write MiB/s.
#
# With BENCH_PROTO=iwarp, in a guest whose two adapters speak iWARP (a boot of
# its own: scripts/bench.sh), it measures ours and C only, connected by each
# driver's MPA connection manager: rping as above and ib_write_lat (median,
# p99) and ib_write_bw (1 QP) with -R (rdma_cm: on iWARP there is no other
# way), and rdma_cm connections per second with cmtime_mesh.sh's cmtime (the
# guest's cannot run on iWARP), recorded as iw_*. Then, in each round, ours
# again with compat_mode=1 (issue 31: the adapters as RoCEv2 devices, their
# queue pairs connected the RoCE way): ib_write_lat and ib_write_bw without
# -R, recorded as driver erdma_rs_compat, against ours' standard-mode -R
# figures of the same round.
#
# The control path of ours and C is measured first, in BENCH_PAIRS pairs: both
# drivers bound at once, each to an adapter of its own (driver_override), and
# bench_ctl.py alternating short loops (BENCH_PAIR_SECONDS) between them, so
# that each pair compares the two under the same host load at the same moment;
# halfway through, the drivers swap adapters. (Measured one driver after the
# other, minutes apart, the CQ row's ratio moved by 10% from run to run.)
#
# Everything else is repeated BENCH_ROUNDS times. A round loads each driver in
# turn, measures once and unloads it. Ours and C always run back to back, in
# alternating order, with rxe before or after them every other pair of rounds:
# slow drift of the host (other work on its cores) then hits both sides of the
# comparison alike, no driver always goes first, and the spread of the rounds
# shows the run's noise. rxe's control path is measured in its rounds.
#
# Writes "DRIVER ROUND METRIC VALUE UNIT" lines to $ERDMA_RESULTS/bench.raw
# (VALUE "nan" when a measurement failed) and each tool's output under
# $ERDMA_RESULTS/bench/. Exits 1 if a measurement of erdma_rs or erdma failed
# (rxe's failures are counted and shown: it is only a reference), or the
# kernel reported trouble other than what BENCH_TOLERATE (an extended regular
# expression, scripts/bench.sh's) names. Needs a guest
# with two RoCEv2 adapters whose NICs are wired to each other, and enough
# memory for a 1 GiB MR (3 GiB), and rdmacm-utils, nvme-cli, fio and the
# kernel's nvme-rdma, nvmet-rdma and null_blk modules.

. "$(dirname "$0")/lib.sh"

# It loads and unloads every driver, and sets up NICs and rdma_rxe: only
# where a test may change the machine ("What a test may change" in lib.sh).
may_reconfigure || { echo "bench.sh: $ERDMA_SAFE_WHY" >&2; exit 4; }

ROUNDS=${BENCH_ROUNDS:-5}
PROTO=${BENCH_PROTO:-roce}
# What the figures' names start with: iWARP's rows are rows of their own.
MP=""
[ "$PROTO" = iwarp ] && MP=iw_
if [ "$PROTO" = iwarp ]; then
	DRIVERS=${BENCH_DRIVERS:-erdma_rs erdma}
else
	DRIVERS=${BENCH_DRIVERS:-erdma_rs erdma rxe}
fi
# Long enough runs to average over the host's scheduling hiccups: a 64 KiB
# bandwidth run of a few hundred iterations lasts milliseconds and lands in
# one of them or not, which made bandwidth bimodal from one run to the next.
CTL_SECONDS=${BENCH_CTL_SECONDS:-2}
CTL_METRICS="qp cq mr4k mr2m mr1g ctx"
PAIRS=${BENCH_PAIRS:-20}
PAIR_SECONDS=${BENCH_PAIR_SECONDS:-0.3}
# The vCPU the paired control loops run on (taskset; "any" lets the scheduler
# place them). Both drivers' command interrupts go to one CPU (vector 0 of each
# adapter); where the loop runs decides whether a command's completion wakes
# it there or through another vCPU, whose host thread a busy host may not run
# for milliseconds. Unpinned, whole rounds of one driver or the other ran 3 to
# 6 times slower on a busy host (2026-11-27, Documentation/infiniband/
# erdma_rs_performance.rst, "Under host contention"); pinned, one device per
# process, the two drivers matched under the same load. (Pinning does not
# close the gap of these loops on a busy host: see the same section.)
CTL_CPU=${BENCH_CTL_CPU:-1}
LAT_ITERS=${BENCH_LAT_ITERS:-10000}
# rxe takes about 1 ms a round trip here (30 times the model), and much more
# on a busy host: fewer iterations keep it inside run_pair's 120 s.
RXE_LAT_ITERS=${BENCH_RXE_LAT_ITERS:-1000}
BW_SECONDS=${BENCH_BW_SECONDS:-2}
KCQ_SECONDS=${BENCH_KCQ_SECONDS:-2}
KCQ_QPS=${BENCH_KCQ_QPS:-4}
# rdma_cm: connections of one cmtime run (its QP test; it then runs as many
# without QPs, which the figure leaves out; the same number for every
# driver), rping round trips of RPING_SIZE bytes (fewer for rxe, whose round
# trips take two to three times as long).
CM_CONNS=${BENCH_CM_CONNS:-50}
RPING_COUNT=${BENCH_RPING_COUNT:-500}
RXE_RPING_COUNT=${BENCH_RXE_RPING_COUNT:-100}
RPING_SIZE=${BENCH_RPING_SIZE:-64}
# NVMe over RDMA: seconds per fio job (time-based: the same for every driver).
FIO_SECONDS=${BENCH_FIO_SECONDS:-3}
# Every figure a round records (control ones aside), in order: what a driver
# that did not load gets "nan" for.
ROUND_METRICS="kcq write_lat_p50 write_lat_p99 send_lat_p50 send_lat_p99 write_bw_q1 write_bw_q4
	read_bw_q1 read_bw_q4 cm_conn rping nvme_rr4k nvme_sw128k"
[ "$PROTO" = iwarp ] && ROUND_METRICS="iw_cm_conn iw_rping iw_write_lat_p50 iw_write_lat_p99 iw_write_bw_q1"
NET=70
HERE=$(cd "$(dirname "$0")" && pwd)
RESULTS=${ERDMA_RESULTS:-/tmp/erdma-results}
RAW=$RESULTS/bench.raw
tmp=$RESULTS/bench # run_pair keeps each tool's output here
mkdir -p "$tmp"
: >"$RAW"
failures=0
ref_failures=0

say() { echo "bench: $*"; }

# listed WORD LIST: WORD is one of LIST's words.
listed() {
	case " $2 " in
	*" $1 "*) return 0 ;;
	esac
	return 1
}

# record DRIVER ROUND METRIC VALUE UNIT
record() {
	set -- $*
	echo "$*" >>"$RAW"
	if [ "$4" = nan ]; then
		if [ "$1" = rxe ]; then
			ref_failures=$((ref_failures + 1))
		else
			failures=$((failures + 1))
		fi
	fi
}

command -v ib_write_lat >/dev/null || { say "FAILED: perftest is missing"; exit 1; }
for t in cmtime rping nvme fio; do
	command -v $t >/dev/null || { say "FAILED: $t is missing (rdmacm-utils, nvme-cli, fio)"; exit 1; }
done
python3 -c 'import pyverbs' 2>/dev/null || { say "FAILED: pyverbs is missing"; exit 1; }

# The netdevs twinned with the eRDMA functions, in PCI order: the same two
# ports for every driver (rxe runs on them too).
NETDEVS=""
for bdf in $(erdma_functions); do
	NETDEVS="$NETDEVS $(netdev_of "$(mac_of "$bdf")")"
done
set -- $NETDEVS
[ $# -ge 2 ] || { say "FAILED: need two eRDMA adapters with twin NICs, found: $NETDEVS"; exit 1; }
ND_A=$1 ND_B=$2
set -- $(erdma_functions)
BDF_A=$1 BDF_B=$2

# pair_ready: the RDMA devices on ND_A and ND_B exist and have the RoCEv2 GID
# of their netdev's IPv4 address (on iWARP: their netdevs have addresses);
# sets IB_A/IB_B, GID_A/GID_B, IP_A/IP_B.
pair_ready() {
	IB_A=$(ibdev_of "$ND_A") IB_B=$(ibdev_of "$ND_B")
	[ -n "$IB_A" ] && [ -n "$IB_B" ] || return 1
	IP_A=$(ipv4_of "$ND_A") IP_B=$(ipv4_of "$ND_B")
	if [ "$PROTO" = iwarp ] && [ "${COMPAT_NOW:-0}" = 0 ]; then
		GID_A=- GID_B=-
		[ -n "$IP_A" ] && [ -n "$IP_B" ]
		return
	fi
	GID_A=$(gid_index "$IB_A" "$IP_A") && GID_B=$(gid_index "$IB_B" "$IP_B")
}

# load DRIVER: loads it on both ports and waits (20 s) for the pair.
load() {
	case $1 in
	rxe)
		modprobe rdma_rxe || return 1
		rdma link add rxe_a type rxe netdev "$ND_A" && rdma link add rxe_b type rxe netdev "$ND_B" ||
			return 1
		;;
	*) modprobe "$1" || return 1 ;;
	esac
	wait_for 20 pair_ready || { say "$1: no RDMA devices on $ND_A and $ND_B ready (addresses, RoCEv2 GIDs)"; return 1; }
}

# unload_driver DRIVER: removes it; nothing of it may stay (20 s). The eRDMA
# drivers go through lib.sh's unload, as in the check scenarios: it removes the
# upstream C driver with every CPU but CPU 0 offline, as its removal races with
# ib_mad's CQ polling on a second CPU
# (Documentation/infiniband/erdma-upstream-rmmod-race.rst), and this guest has
# four; a bench run that unloaded it on all four oopsed in erdma_poll_cq.
unload_driver() {
	case $1 in
	rxe)
		rdma link delete rxe_a 2>/dev/null
		rdma link delete rxe_b 2>/dev/null
		wait_for 20 rmmod rdma_rxe 2>/dev/null
		;;
	*) wait_for 20 unload "$1" 2>/dev/null ;;
	esac
}

# control DRIVER ROUND: the control-path loops, on adapter A.
control() {
	log=$tmp/$1-r$2-ctl.log
	timeout 600 python3 "$HERE/bench_ctl.py" --dev "$IB_A" --gid "$GID_A" --seconds "$CTL_SECONDS" \
		$CTL_METRICS >"$log" 2>&1
	rc=$?
	for m in $CTL_METRICS; do
		line=$(grep "^$m " "$log")
		if [ -n "$line" ]; then
			record "$1 $2 $line"
		else
			record "$1 $2 $m nan -"
		fi
	done
	[ $rc -eq 0 ] || say "$1 round $2: bench_ctl.py exited $rc; read $log"
	say "$1 round $2: $(awk 'NF == 3 && $2 ~ /^[0-9.e+]+$/ { printf "%s %s %s; ", $1, $2, $3 }' "$log")"
}

# vector0_cpus: "BDF=CPU" for each adapter's vector 0 (commands and events).
vector0_cpus() {
	awk '/erdma-common@/ { sub(":", "", $1); print $1, $NF }' /proc/interrupts |
		while read -r irq name; do
			printf '%s=%s ' "${name##*@pci:}" "$(cat "/proc/irq/$irq/effective_affinity_list" 2>/dev/null)"
		done
}

# paired HALF FIRST N: N pairs (rounds FIRST+1 .. FIRST+N) of the control loops
# with ours and C bound at once: ours on adapter A and C on B for HALF 0, the
# other way round for HALF 1.
paired() {
	if [ "$1" -eq 0 ]; then
		O_BDF=$BDF_A O_ND=$ND_A T_BDF=$BDF_B T_ND=$ND_B
	else
		O_BDF=$BDF_B O_ND=$ND_B T_BDF=$BDF_A T_ND=$ND_A
	fi
	# pair_ready finds the devices by port: ours is A's in half 0, B's in half 1.
	log=$tmp/paired-$1.log
	out=$tmp/paired-$1.raw
	: >"$log"
	echo erdma_rs >"/sys/bus/pci/devices/$O_BDF/driver_override" &&
		echo erdma >"/sys/bus/pci/devices/$T_BDF/driver_override" &&
		modprobe erdma_rs && modprobe erdma && wait_for 20 pair_ready
	if [ $? -eq 0 ]; then
		if [ "$1" -eq 0 ]; then
			IB_O=$IB_A GID_O=$GID_A IB_T=$IB_B GID_T=$GID_B
		else
			IB_O=$IB_B GID_O=$GID_B IB_T=$IB_A GID_T=$GID_A
		fi
		pin=""
		[ "$CTL_CPU" = any ] || [ ! -d "/sys/devices/system/cpu/cpu$CTL_CPU" ] || pin="taskset -c $CTL_CPU"
		say "paired $1: ours $IB_O on $O_ND ($O_BDF), C $IB_T on $T_ND ($T_BDF): $3 pairs of $CTL_METRICS${pin:+, on CPU $CTL_CPU}; command interrupts on CPUs $(vector0_cpus)"
		timeout 900 $pin python3 "$HERE/bench_ctl.py" --dev "$IB_O" --gid "$GID_O" --versus "$IB_T:$GID_T" \
			--pairs "$3" --seconds "$PAIR_SECONDS" $CTL_METRICS >"$log" 2>&1 ||
			say "paired $1: bench_ctl.py exited $?; read $log"
	else
		say "paired $1: ours on $O_ND and C on $T_ND did not both come up; read the console log"
	fi
	# One line per expected figure: "nan" where bench_ctl.py gave none.
	awk -v first="$2" -v n="$3" -v metrics="$CTL_METRICS" '
		NF == 5 { v[$1, $2, $3] = $4; u[$3] = $5 }
		END {
			split(metrics, ms, " ")
			for (i = 0; i < n; i++)
				for (k in ms)
					for (w = 1; w <= 2; w++) {
						side = w == 1 ? "a" : "b"
						val = ((i, side, ms[k]) in v) ? v[i, side, ms[k]] : "nan"
						print (w == 1 ? "erdma_rs" : "erdma"), first + i + 1, ms[k], val, \
							(ms[k] in u ? u[ms[k]] : "-")
					}
		}' "$log" >"$out"
	while read -r line; do record "$line"; done <"$out"
	unload_driver erdma_rs || say "paired $1: erdma_rs did not unload"
	unload_driver erdma || say "paired $1: erdma did not unload"
	echo >"/sys/bus/pci/devices/$O_BDF/driver_override"
	echo >"/sys/bus/pci/devices/$T_BDF/driver_override"
	say "paired $1, means of ours and C: $(awk -v metrics="$CTL_METRICS" '$4 != "nan" { s[$1, $3] += $4; c[$1, $3]++ }
		END {
			n = split(metrics, ms, " ")
			for (k = 1; k <= n; k++) {
				m = ms[k]
				o = c["erdma_rs", m] ? sprintf("%.4g", s["erdma_rs", m] / c["erdma_rs", m]) : "nan"
				t = c["erdma", m] ? sprintf("%.4g", s["erdma", m] / c["erdma", m]) : "nan"
				printf "%s %s %s; ", m, o, t
			}
		}' "$out")"
}

# kcq DRIVER ROUND: kernel CQ completions per second (the module prints
# "bench: cq_completions N per_s"; only this run's lines of the log count).
kcq() {
	log=$tmp/$1-r$2-kcq.log
	before=$(dmesg | wc -l)
	timeout 120 modprobe erdma_kverbs_test bench_seconds="$KCQ_SECONDS" bench_qps="$KCQ_QPS"
	rc=$?
	dmesg | tail -n +$((before + 1)) | grep 'erdma_kverbs_test: bench:' >"$log"
	wait_for 20 rmmod erdma_kverbs_test 2>/dev/null
	v=$(sed -n 's/.*bench: cq_completions \([0-9]*\) per_s.*/\1/p' "$log" | tail -n 1)
	record "$1 $2 kcq ${v:-nan} ops/s"
	[ -n "$v" ] || say "$1 round $2: the kernel CQ measurement failed (modprobe exit $rc); read $log"
	say "$1 round $2: kernel CQ completions ${v:-nan}/s ($(head -n 1 "$log" | sed 's/.*bench: //'))"
}

# perf DRIVER ROUND NAME TOOL ARGS...: one perftest run, server on A and client
# on B; its output is in $tmp/DRIVER-rROUND-NAME.cli (and .srv). Each side is
# pinned to a vCPU of its own: perftest times with the TSC, and under TCG the
# vCPUs' TSCs do not agree, so a process that migrated reported "inf". On
# iWARP rdma_cm connects them (-R, each side bound to its address).
perf() {
	_drv=$1 _round=$2 _name=$3 _tool=$4
	shift 4
	next_port
	if [ "$PROTO" = iwarp ] && [ "${COMPAT_NOW:-0}" = 0 ]; then
		RUN_PAIR_READY=cm_listening
		run_pair "$_drv-r$_round-$_name" "$PORT" '#bytes' \
			taskset -c 1 "$_tool" -d "$IB_A" -R --bind_source_ip "$IP_A" -p "$PORT" -F "$@" -- \
			taskset -c 2 "$_tool" -d "$IB_B" -R --bind_source_ip "$IP_B" -p "$PORT" -F "$@" "$IP_A"
		_r=$?
		RUN_PAIR_READY=listening
		return $_r
	fi
	run_pair "$_drv-r$_round-$_name" "$PORT" '#bytes' \
		taskset -c 1 "$_tool" -d "$IB_A" -x "$GID_A" -p "$PORT" -F "$@" -- \
		taskset -c 2 "$_tool" -d "$IB_B" -x "$GID_B" -p "$PORT" -F "$@" "$IP_A"
}

# field NAME FILE: from perftest's result table in FILE, the value of the
# column whose header starts with NAME (headers with spaces are joined first).
field() {
	grep -A1 '#bytes' "$2" | tail -n 2 |
		sed -e 's/99\.9% percentile/p99.9/; s/99% percentile/p99/; s/BW peak/BW_peak/; s/BW average/BW_average/' |
		awk -v want="$1" 'NR == 1 { for (i = 1; i <= NF; i++) if (index($i, want) == 1) col = i; next }
			col && $col ~ /^[0-9.]+$/ { print $col; exit }'
}

# uncalibrated DRIVER ROUND NAME: perftest could not calibrate its TSC clock
# in that run (a fit of r^2 < 0.9 on a busy host; it then reports "inf").
uncalibrated() { grep -qs 'Correlation coefficient r^2' "$tmp/$1-r$2-$3.cli" "$tmp/$1-r$2-$3.srv"; }

# lat DRIVER ROUND TOOL: median (t_typical) and 99th percentile at 8 bytes.
# A run whose clock perftest could not calibrate is the tool's failure, not a
# measurement: it is run again (up to twice), and said so.
lat() {
	name=$MP${3#ib_}
	p50="" p99="" iters=$LAT_ITERS try=1
	[ "$1" != rxe ] || iters=$RXE_LAT_ITERS
	while :; do
		if perf "$1" "$2" "$name" "$3" -s 8 -n "$iters"; then
			p50=$(field t_typical "$tmp/$1-r$2-$name.cli")
			p99=$(field 'p99[' "$tmp/$1-r$2-$name.cli")
		fi
		[ -z "$p50" ] && [ $try -lt 3 ] && uncalibrated "$1" "$2" "$name" || break
		say "$1 round $2: $3 could not calibrate its clock (try $try of 3); again"
		try=$((try + 1))
	done
	record "$1 $2 ${name}_p50 ${p50:-nan} us"
	record "$1 $2 ${name}_p99 ${p99:-nan} us"
	[ -n "$p50" ] || say "$1 round $2: $3 failed; read $tmp/$1-r$2-$name.cli and .srv"
	summary="$summary$name ${p50:-nan}/${p99:-nan} us; "
}

# bw DRIVER ROUND TOOL QPS: average bandwidth at 64 KiB with QPS QPs, over
# BW_SECONDS (perftest's duration mode, the same time for every driver).
bw() {
	name=$MP${3#ib_}_q$4
	v="" unit=MiB/s
	if perf "$1" "$2" "$name" "$3" -s 65536 -D "$BW_SECONDS" -q "$4"; then
		v=$(field BW_average "$tmp/$1-r$2-$name.cli")
		# perftest states its unit in the header: MiB/sec (or MB/sec).
		unit=$(sed -n 's/.*BW average\[\([^]]*\)\].*/\1/p' "$tmp/$1-r$2-$name.cli" | head -n 1 | sed 's/sec$/s/')
	fi
	record "$1 $2 $name ${v:-nan} ${unit:-MiB/s}"
	[ -n "$v" ] || say "$1 round $2: $3 -q $4 failed; read $tmp/$1-r$2-$name.cli and .srv"
	summary="$summary$name ${v:-nan} ${unit:-MiB/s}; "
}

# data DRIVER ROUND: the perftest rows.
data() {
	summary=""
	lat "$1" "$2" ib_write_lat
	lat "$1" "$2" ib_send_lat
	bw "$1" "$2" ib_write_bw 1
	bw "$1" "$2" ib_write_bw 4
	bw "$1" "$2" ib_read_bw 1
	bw "$1" "$2" ib_read_bw 4
	say "$1 round $2: $summary"
}

# ---- rdma_cm --------------------------------------------------------------------
# The client binds B's address (IP_B), so that its rdma_cm IDs are on adapter
# B and connect to A; the connection manager's MADs travel on both adapters'
# GSI QPs (UD).

# cm_rate DRIVER ROUND: rdma_cm connections set up and torn down per second.
# cmtime's client makes N connections with RC QPs to its server, step by step
# (all N IDs created, then bound, addresses resolved, routes resolved, QPs
# created and moved to INIT, connected, up to ESTABLISHED on the client:
# the server's accept with its QP's INIT, RTR and RTS is inside that), then
# disconnects them and destroys the QPs and IDs; it reports each step's total
# time. The figure is N over the sum of its client's totals of that QP test:
# "full connect" (everything up to the last ESTABLISHED), "disconnect",
# "destroy qp" and "destroy id". (Its warm-up connection and its second test,
# with no QPs, are not counted.) On iWARP, where the guest's cmtime cannot
# run, cmtime_mesh.sh's newer one: two clients of N/2 connections each at
# once, and the figure is N over the larger of their two such sums.
cm_rate() {
	_drv=$1 _round=$2 n=$CM_CONNS
	name=$1-r$2-${MP}cmtime
	v=""
	next_port
	# cmtime's server listens on rdma_cm, then opens its TCP port for the
	# client's out-of-band sync: run_pair waits for the latter.
	RUN_PAIR_READY=listening
	if [ "$PROTO" = iwarp ]; then
		set -- sh "$HERE/cmtime_mesh.sh" serve "$IP_A" "$PORT" $((n / 2)) -- \
			sh "$HERE/cmtime_mesh.sh" connect "$IP_A" "$IP_B" "$PORT" $((n / 2))
		n=$((n / 2 * 2))
	else
		set -- cmtime -b "$IP_A" -p "$PORT" -c "$n" -- \
			cmtime -s "$IP_A" -b "$IP_B" -p "$PORT" -c "$n"
	fi
	if run_pair "$name" "$PORT" '^full connect' "$@"; then
		# Step lines: NAME (one or two words) avg/iter total(us) us/conn sum
		# max min; a peer's output (iWARP) starts with "== peer".
		v=$(awk -v n="$n" '/^== peer/ { p++ } /QPs test/ { on = 1; next } /no QPs/ { on = 0 }
			on && /^(full connect|disconnect|destroy qp|destroy id) / { us[p] += $(NF - 4); k++ }
			END { for (i in us) if (us[i] > m) m = us[i]
				if (k == 4 * (p ? p : 1) && m > 0) printf "%.1f", n * 1e6 / m }' "$tmp/$name.cli")
	fi
	record "$_drv $_round ${MP}cm_conn ${v:-nan} conn/s"
	[ -n "$v" ] || say "$_drv round $_round: cmtime failed; read $tmp/$name.cli and .srv"
	summary="${summary}cmtime $n: ${v:-nan} conn/s; "
}

# rping_rate DRIVER ROUND: rping round trips per second: COUNT round trips of
# RPING_SIZE bytes, the client on B, the server on A. A round trip is the
# client's SEND of its buffer's address, the server's RDMA READ of it and its
# SEND, the client's SEND of its second buffer's address, the server's RDMA
# WRITE into it and its SEND; each side waits for its completions through the
# completion channel (CQ interrupts). The client prints each round trip (-v,
# line-buffered), and the shell that reads it takes the time at the first and
# at the last: the figure is COUNT - 1 over that time (connection set-up and
# teardown are left out).
rping_rate() {
	n=$RPING_COUNT
	[ "$1" != rxe ] || n=$RXE_RPING_COUNT
	name=$1-r$2-${MP}rping
	v=""
	next_port
	RUN_PAIR_READY=cm_listening
	# shellcheck disable=SC2016 # expanded by the client's shell
	if run_pair "$name" "$PORT" '^pings ' \
		rping -s -a "$IP_A" -p "$PORT" -S "$RPING_SIZE" -C "$n" -- \
		sh -c 'stdbuf -oL rping -c -v -a "$1" -I "$2" -p "$3" -S "$4" -C "$5" 2>&1 | {
			k=0 s=0 e=0
			while read -r l; do
				case $l in
				"ping data: "*)
					k=$((k + 1))
					if [ $k = 1 ]; then s=$(date +%s%N); elif [ $k = "$5" ]; then e=$(date +%s%N); fi
					;;
				*) echo "$l" ;;
				esac
			done
			echo "pings $k first_to_last_ns $((e - s))"
		}' rping "$IP_A" "$IP_B" "$PORT" "$RPING_SIZE" "$n"; then
		v=$(awk -v n="$n" '$1 == "pings" && $2 == n && n > 1 && $4 > 0 { printf "%.1f", (n - 1) * 1e9 / $4 }' \
			"$tmp/$name.cli")
	fi
	RUN_PAIR_READY=listening
	record "$1 $2 ${MP}rping ${v:-nan} rt/s"
	[ -n "$v" ] || say "$1 round $2: rping failed; read $tmp/$name.cli and .srv"
	summary="${summary}rping ${n}x${RPING_SIZE} B: ${v:-nan} rt/s; "
}

# cm DRIVER ROUND: the rdma_cm rows.
cm() {
	summary=""
	cm_rate "$1" "$2"
	rping_rate "$1" "$2"
	say "$1 round $2: $summary"
}

# ---- NVMe over RDMA ---------------------------------------------------------------
NQN=nqn.2026-11.io.erdma-rs:bench
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:6b1f3c2e-0d4a-4f7e-9a55-3c8e2b9d7f10
NVMET=/sys/kernel/config/nvmet
SVC=4420

# nvme_prepare: once, before the rounds: null_blk, nvmet-rdma and nvme-rdma
# loaded; subsystem $NQN with namespace 1 on /dev/nullb0 and port 1 (RDMA,
# IP_A:4420), not yet linked: the port listens (on whichever RDMA device has
# IP_A then) while the subsystem is linked to it, in each driver's turn.
nvme_prepare() {
	modprobe null_blk nr_devices=1 gb=1 && modprobe nvmet_rdma && modprobe nvme_rdma || return 1
	mountpoint -q /sys/kernel/config || mount -t configfs configfs /sys/kernel/config || return 1
	wait_for 10 test -b /dev/nullb0 || return 1
	_s=$NVMET/subsystems/$NQN
	mkdir "$_s" && echo 1 >"$_s/attr_allow_any_host" && mkdir "$_s/namespaces/1" &&
		printf /dev/nullb0 >"$_s/namespaces/1/device_path" && echo 1 >"$_s/namespaces/1/enable" &&
		mkdir "$NVMET/ports/1" && echo rdma >"$NVMET/ports/1/addr_trtype" &&
		echo ipv4 >"$NVMET/ports/1/addr_adrfam" && echo "$IP_A" >"$NVMET/ports/1/addr_traddr" &&
		echo $SVC >"$NVMET/ports/1/addr_trsvcid"
}

# nvme_finish: after the rounds: the configuration and the modules go.
nvme_finish() {
	rm -f "$NVMET/ports/1/subsystems/$NQN"
	rmdir "$NVMET/ports/1" 2>/dev/null
	echo 0 >"$NVMET/subsystems/$NQN/namespaces/1/enable" 2>/dev/null
	rmdir "$NVMET/subsystems/$NQN/namespaces/1" "$NVMET/subsystems/$NQN" 2>/dev/null
	for _m in nvme_rdma nvmet_rdma nvmet null_blk; do
		! grep -q "^$_m " /proc/modules || modprobe -r "$_m" || say "modprobe -r $_m failed"
	done
}

# nvme_ns: the block device of namespace 1 of $NQN (the multipath head, or
# the controller's own disk), into NS.
nvme_ns() {
	NS=""
	for _b in /sys/block/nvme*; do
		_n=${_b##*/}
		case $_n in *c*) continue ;; esac # nvmeXcYnZ: a hidden path of a head
		[ -r "$_b/device/subsysnqn" ] && read -r _q <"$_b/device/subsysnqn" && [ "$_q" = "$NQN" ] &&
			read -r _i <"$_b/nsid" && [ "$_i" = 1 ] && [ -b "/dev/$_n" ] && NS=$_n
	done
	[ -n "$NS" ]
}

# fio_job NAME JSON-SECTION JSON-KEY ARGS...: one time-based fio job on /dev/$NS;
# prints the job's JSON-KEY ("iops", "bw_bytes") of JSON-SECTION ("read",
# "write") if it ran without error. (fio keeps its job table in SysV shared
# memory: the kernel needs CONFIG_SYSVIPC.)
fio_job() {
	_name=$1 _sec=$2 _key=$3
	shift 3
	timeout $((FIO_SECONDS + 60)) fio --name="$_name" --filename="/dev/$NS" --direct=1 \
		--ioengine=libaio --time_based --runtime="$FIO_SECONDS" --output-format=json \
		--output="$tmp/$_name.json" "$@" >"$tmp/$_name.log" 2>&1 || return 1
	# fio's JSON has one key per line: '"read" : {', '"iops" : 1234.5,'.
	awk -v sec="\"$_sec\"" -v key="\"$_key\"" '
		$1 == "\"error\"" && $3 + 0 != 0 { bad = 1 }
		$1 == sec && $2 == ":" { on = 1; next }
		on && $1 == key { v = $3; sub(/,$/, "", v); on = 0 }
		END { if (!bad && v + 0 > 0) print v }' "$tmp/$_name.json"
}

# nvmeof DRIVER ROUND: the target listens on A (the subsystem linked to the
# port), the host connects from B (nvme-rdma's default queues: one I/O queue
# per CPU, 4, of 128 entries), fio measures, the host disconnects and the
# port is unlinked.
nvmeof() {
	rr="" sw="" NS="" name=$1-r$2-nvme
	# nvmet-rdma lowers the port's inline data size to what the first device
	# it serves can take, for good: each driver starts from the default (-1).
	echo -1 >"$NVMET/ports/1/param_inline_data_size" 2>/dev/null
	if ! ln -s "$NVMET/subsystems/$NQN" "$NVMET/ports/1/subsystems/$NQN" ||
		! wait_for 20 cm_listening $SVC; then
		say "$1 round $2: nvmet-rdma does not listen on $IP_A:$SVC"
	elif ! timeout 90 nvme connect -t rdma -a "$IP_A" -s $SVC -w "$IP_B" -n "$NQN" -q "$HOSTNQN" \
		>"$tmp/$name-connect.log" 2>&1 || ! wait_for 30 nvme_ns; then
		say "$1 round $2: nvme connect to $IP_A from $IP_B failed: $(tr '\n' ';' <"$tmp/$name-connect.log")"
	else
		rr=$(fio_job "$name-randread" read iops --rw=randread --bs=4k --iodepth=32 --norandommap --randrepeat=0)
		sw=$(fio_job "$name-seqwrite" write bw_bytes --rw=write --bs=128k --iodepth=8)
		[ -z "$sw" ] || sw=$(awk -v b="$sw" 'BEGIN { printf "%.2f", b / 1048576 }')
	fi
	timeout 60 nvme disconnect -n "$NQN" >"$tmp/$name-disconnect.log" 2>&1
	rm -f "$NVMET/ports/1/subsystems/$NQN"
	wait_for 20 sh -c "! ls -d /sys/class/nvme/nvme* >/dev/null 2>&1" ||
		say "$1 round $2: an nvme controller is left: $(ls /sys/class/nvme)"
	record "$1 $2 nvme_rr4k ${rr:-nan} IOPS"
	record "$1 $2 nvme_sw128k ${sw:-nan} MiB/s"
	[ -n "$rr" ] && [ -n "$sw" ] || say "$1 round $2: fio failed; read $tmp/$name-*"
	say "$1 round $2: NVMe/RDMA ${NS:-?}: 4 KiB randread QD32 ${rr:-nan} IOPS; 128 KiB write QD8 ${sw:-nan} MiB/s"
}

# iwarp DRIVER ROUND: the iWARP rows; for ours, then its compat-mode rows.
iwarp() {
	summary=""
	cm_rate "$1" "$2"
	rping_rate "$1" "$2"
	lat "$1" "$2" ib_write_lat
	bw "$1" "$2" ib_write_bw 1
	say "$1 round $2: iWARP: $summary"
	[ "$1" = erdma_rs ] || return 0
	# Ours reloaded in compat mode on the same adapters, and back.
	summary=""
	COMPAT_NOW=1
	if unload_driver erdma_rs && modprobe erdma_rs compat_mode=1 && wait_for 20 pair_ready; then
		lat erdma_rs_compat "$2" ib_write_lat
		bw erdma_rs_compat "$2" ib_write_bw 1
	else
		say "round $2: erdma_rs did not come up in compat mode"
		for m in iw_write_lat_p50 iw_write_lat_p99 iw_write_bw_q1; do
			record "erdma_rs_compat $2 $m nan -"
		done
	fi
	COMPAT_NOW=0
	say "erdma_rs round $2: compat mode (no -R): $summary"
	unload_driver erdma_rs && modprobe erdma_rs && wait_for 20 pair_ready ||
		say "round $2: erdma_rs did not come back in standard mode"
}

nics_up $NET
rmmod rdma_rxe 2>/dev/null
# The control path of ours and C in pairs, when both are measured.
PAIRED=""
if [ "$PROTO" = iwarp ]; then
	say "iWARP: $ROUNDS rounds of $DRIVERS on ports $ND_A and $ND_B: cmtime 2 x $((CM_CONNS / 2)) connections, rping $RPING_COUNT x $RPING_SIZE B," \
		"ib_write_lat -R $LAT_ITERS iterations, ib_write_bw -R ${BW_SECONDS}s"
elif listed erdma_rs "$DRIVERS" && listed erdma "$DRIVERS"; then
	say "$PAIRS pairs of ours' and C's control loops (${PAIR_SECONDS}s each), both bound at once"
	paired 0 0 $((PAIRS / 2))
	paired 1 $((PAIRS / 2)) $((PAIRS - PAIRS / 2))
	PAIRED="erdma_rs erdma"
fi
# The NVMe/RDMA target's configuration, for the rounds (after the pairs:
# nothing of it is loaded while they run).
IP_A=$(ipv4_of "$ND_A") IP_B=$(ipv4_of "$ND_B")
[ "$PROTO" = iwarp ] ||
	nvme_prepare || { say "FAILED: the nvmet-rdma target could not be configured"; exit 1; }
[ "$PROTO" = iwarp ] || say "$ROUNDS rounds of: $DRIVERS; ports $ND_A and $ND_B; control loops ${CTL_SECONDS}s each" \
	"${PAIRED:+(not for $PAIRED: paired above)}; latency $LAT_ITERS iterations" \
	"(rxe $RXE_LAT_ITERS), bandwidth ${BW_SECONDS}s per run, kernel CQs $KCQ_QPS QPs for ${KCQ_SECONDS}s," \
	"cmtime $CM_CONNS connections, rping $RPING_COUNT x $RPING_SIZE B (rxe $RXE_RPING_COUNT)," \
	"fio ${FIO_SECONDS}s per job"
round=1
while [ $round -le "$ROUNDS" ]; do
	# Rounds 1-4: ours C rxe, C ours rxe, rxe ours C, rxe C ours; and again.
	set -- $DRIVERS
	if [ $# -ge 2 ]; then
		k=$((round - 1)) first=$1 second=$2
		shift 2
		if [ $((k % 2)) -eq 0 ]; then pair="$first $second"; else pair="$second $first"; fi
		if [ $((k / 2 % 2)) -eq 0 ]; then order="$pair $*"; else order="$* $pair"; fi
	else
		order=$DRIVERS
	fi
	for drv in $order; do
		say "round $round/$ROUNDS: $drv"
		if load "$drv"; then
			if [ "$PROTO" = iwarp ]; then
				say "$drv: $IB_A ($ND_A, $IP_A) and $IB_B ($ND_B, $IP_B)"
				iwarp "$drv" "$round"
			else
				say "$drv: $IB_A ($ND_A, GID $GID_A) and $IB_B ($ND_B, GID $GID_B)"
				listed "$drv" "$PAIRED" || control "$drv" "$round"
				kcq "$drv" "$round"
				data "$drv" "$round"
				cm "$drv" "$round"
				nvmeof "$drv" "$round"
			fi
		else
			say "round $round: $drv did not load; read the console log"
			ctl=$CTL_METRICS
			! listed "$drv" "$PAIRED" && [ "$PROTO" != iwarp ] || ctl=""
			for m in $ctl $ROUND_METRICS; do
				record "$drv $round $m nan -"
			done
		fi
		unload_driver "$drv" || say "round $round: $drv did not unload"
	done
	round=$((round + 1))
done

[ "$PROTO" = iwarp ] || nvme_finish

[ "$ref_failures" -eq 0 ] || say "$ref_failures measurements of rxe (the reference) failed (nan in $RAW)"
bench_end "$RAW" "$failures"
