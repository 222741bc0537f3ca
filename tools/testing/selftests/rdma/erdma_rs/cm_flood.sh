#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# Floods for the iWARP connection manager (issue 30, trust boundaries),
# between two iWARP adapters of this guest (cm_flood.py does the flooding):
#   - 1,000 TCP connections, as fast as they are taken, to a listener
#     (rping -s -P on adapter A) that never send a whole MPA request
#     (nothing, half a header, garbage), far beyond its backlog, then held
#     12 s more with every one the listener closes replaced by a silent one
#     (32 kept open): while they are held, and after they are gone, a real
#     rdma_cm connection (rping, validated) to the same listener must work;
#     the listener's end of every one of them closes within the wait for a
#     request (ours loads with 3 s, mpa_request_timeout_ms); the flood adds
#     at most 11 lines of the driver's connection manager to the kernel log
#     in each 30 s it lasts (a peer must not be able to fill it);
#   - listeners killed (KILL or TERM) while a hammer keeps connecting to
#     them, sending nothing, garbage, half or whole requests, three rounds;
#     afterwards a new listener on the same port takes a real connection;
#   - a storm of 40 short rdma_cm connections in a row (pyverbs, one message
#     each way and a goodbye, both disconnect), every one ended cleanly by
#     both sides;
#   - nothing left: no rdma_cm ID, no TCP connection of the listeners, the
#     model holds the objects it held before, the driver unloads.
# Against either driver (ERDMA_DRIVER=erdma_rs or erdma); the C driver has no
# request wait of its own to shorten. On a real instance it leaves out what
# changes the machine (see "What a test may change" in lib.sh).

. "$(dirname "$0")/lib.sh"

NET=59
PROTO=iwarp
need_functions
DRV=$ERDMA_DRIVER
tmp=/tmp/cm_flood
rm -rf "$tmp"
mkdir -p "$tmp"
FLOOD="python3 $(cd "$(dirname "$0")" && pwd)/cm_flood.py"
command -v rping >/dev/null || ksft_skip_all "rping (rdmacm-utils) is missing"
command -v python3 >/dev/null && python3 -c 'import pyverbs.cmid' 2>/dev/null ||
	ksft_skip_all "pyverbs (python3-pyverbs) is missing"
# The flood and the listeners' ends of it: 1,000 files at least.
N_FLOOD=${CM_FLOOD_N:-1000}
N_STORM=${CM_FLOOD_STORM:-40}
# Ours waits 3 s for a request, not 20: the flood's half-open connections end
# that much sooner.
REQ_S=20
[ "$DRV" = erdma_rs ] && ERDMA_MODPROBE_ARGS="mpa_request_timeout_ms=3000" && REQ_S=3

tap_header
nics_up $NET
load_driver
iwarp_pair || ksft_skip_all "fewer than two iWARP adapters bound"
[ -c /dev/infiniband/rdma_cm ] || ksft_skip_all "no /dev/infiniband/rdma_cm (rdma_ucm)"
objects=$(model_objects)

# within SECONDS COMMAND...: polls COMMAND every 0.5 s until it succeeds, for
# SECONDS of the clock (wait_for counts its 0.1 s ticks, and a command that
# forks costs the debug kernel under TCG a tenth of a second or more).
within() {
	_w_end=$(($(uptime) + $1))
	shift
	until "$@"; do
		[ "$(uptime)" -lt "$_w_end" ] || return 1
		sleep 0.5
	done
}
# said WORD FILE: a line of FILE starts with WORD (no process forked).
said() {
	while read -r _s_line; do
		case "$_s_line" in "$1"*) return 0 ;; esac
	done <"$2"
	return 1
}

# open_conns PORT: TCP connections of PORT's listener side still open (not
# TIME-WAIT), and the listener itself.
open_conns() {
	ss -tanH state all "( sport = :$1 )" | grep -v 'TIME-WAIT'
}
# no_conns PORT: nothing of the kind; listening PORT: a listener on PORT is all.
no_conns() { [ -z "$(open_conns "$1")" ]; }
only_listener() { [ -z "$(open_conns "$1" | grep -v '^LISTEN')" ]; }
no_cm_ids() { [ -z "$(rdma resource show cm_id 2>&1)" ]; }

# real_client NAME PORT: rping from B to the listener on A, 3 round trips,
# validated (its MPA reply wait is 10 s; 40 s is a hang).
real_client() {
	timeout "$(ksft_within 40)" rping -c -a "$IP_A" -I "$IP_B" -p "$2" -C 3 -V >"$tmp/$1" 2>&1
	r=$?
	[ $r = 0 ] && ! grep -q 'mismatch\|error\|failed' "$tmp/$1" && return 0
	tap_diag "$1: rping exit $r: $(tr '\n' ';' <"$tmp/$1" | tail -c 400)"
	return 1
}

# stop PID: ends the background job PID (TERM) and reaps it.
stop() {
	kill "$1" 2>/dev/null
	wait "$1" 2>/dev/null
}

# ---- 1. a flood of half-open connections --------------------------------------
LPORT=19800
timeout "$(ksft_within 300)" rping -s -P -a "$IP_A" -p $LPORT >"$tmp/flood.srv" 2>&1 &
spid=$!
if wait_for 20 cm_listening $LPORT; then
	klog_mark mark
	t0=$(uptime)
	# Held 12 s after the last one opened (four request waits), the backlog
	# kept full of silent ones.
	timeout "$(ksft_within 150)" $FLOOD flood "$IP_A" $LPORT "$N_FLOOD" 12 >"$tmp/flood" 2>&1 &
	fpid=$!
	within 120 said holding "$tmp/flood" || tap_diag "the flood did not say it held: $(tr '\n' ';' <"$tmp/flood")"
	tap_diag "$(grep '^holding' "$tmp/flood")"
	tap_check "flood: while $N_FLOOD half-open connections and more are held, rping to the listener works" \
		real_client during $LPORT
	wait $fpid
	frc=$?
	tap_diag "$(grep -v '^holding' "$tmp/flood" | tr '\n' ';')"
	tap_check "flood: $N_FLOOD connections opened and held (exit $frc)" \
		sh -c "[ $frc = 0 ] && grep -q '^flood summary: ' '$tmp/flood'"
	tap_check "flood: the listener's end of every one is closed within the request wait ($REQ_S s)" \
		within $((REQ_S + 5)) only_listener $LPORT
	open_conns $LPORT | grep -v '^LISTEN' | head -n 5 | while read -r l; do tap_diag "left: $l"; done
	tap_check "flood: afterwards, rping to the same listener works" real_client after $LPORT
	# (A mark pushed out of the log by what came after it: the flood filled it.)
	if dmesg | grep -q "$mark\$"; then
		lines=$(klog_since "$mark" | grep -c 'iWARP CM')
	else
		lines="all the log holds: the test's mark was pushed out"
	fi
	dmesg | grep 'iWARP CM' | tail -n 3 | while read -r l; do tap_diag "$l"; done
	# What peers make the CM log is limited to 10 lines in 30 s, and each
	# window after the first begins with one line counting what it
	# suppressed: at most 11 lines a window the flood reached (on a quiet
	# machine it takes under 30 s, two windows with the real connections).
	windows=$((($(uptime) - t0) / 30 + 1))
	tap_check "flood: the kernel log gains at most $((11 * windows)) lines of the driver's CM in its $windows windows of 30 s (it gained $lines)" \
		[ "$lines" -le $((11 * windows)) ] 2>/dev/null
else
	tap_diag "rping -s -P did not listen: $(tr '\n' ';' <"$tmp/flood.srv")"
	tap_check "flood: rping -s -P listens" false
fi
stop $spid
tap_check "flood: no TCP connection of the listener left after it ends" within 10 no_conns $LPORT

# ---- 2. listeners destroyed while connections arrive ---------------------------
HPORT=19810
# round N SIGNAL: a listener on HPORT, the hammer at it for 6 s, the listener
# killed with SIGNAL 1 to 3 s in; the listener ends, and no rdma_cm ID and no
# TCP connection of it are left.
round() {
	timeout "$(ksft_within 60)" rping -s -P -a "$IP_A" -p $HPORT >"$tmp/round$1.srv" 2>&1 &
	lpid=$!
	wait_for 20 cm_listening $HPORT || {
		tap_diag "round $1: rping -s -P did not listen: $(tr '\n' ';' <"$tmp/round$1.srv")"
		stop $lpid
		return 1
	}
	timeout "$(ksft_within 30)" $FLOOD hammer "$IP_A" $HPORT 6 >"$tmp/round$1.hammer" 2>&1 &
	hpid=$!
	sleep "$1"
	# The timeout's child, rping, gets the signal.
	child=""
	for st in /proc/[0-9]*/stat; do
		read -r p _c _s pp _rest <"$st" 2>/dev/null || continue
		[ "$pp" = "$lpid" ] && child=$p
	done
	kill -"$2" "${child:-$lpid}" 2>/dev/null
	wait $lpid
	lrc=$?
	wait $hpid
	tap_diag "round $1 (listener killed by $2 after $1 s, exit $lrc): $(tr '\n' ';' <"$tmp/round$1.hammer")"
	grep -q '^hammer summary' "$tmp/round$1.hammer" || return 1
	[ $lrc != 124 ] || { tap_diag "round $1: the listener did not end"; return 1; }
	within 10 no_cm_ids ||
		{ tap_diag "round $1: cm_ids left: $(rdma resource show cm_id 2>&1 | head -n 3 | tr '\n' ';')"; return 1; }
	within $((REQ_S + 5)) no_conns $HPORT ||
		{ tap_diag "round $1: left: $(open_conns $HPORT | head -n 3 | tr '\n' ';')"; return 1; }
}
tap_check "listener killed (KILL) 1 s into a hammer of connections" round 1 KILL
tap_check "listener killed (TERM) 2 s into a hammer of connections" round 2 TERM
tap_check "listener killed (KILL) 3 s into a hammer of connections" round 3 KILL
# new_listener: rping -s on HPORT again, and a real client to it.
new_listener() {
	timeout "$(ksft_within 60)" rping -s -a "$IP_A" -p $HPORT -C 3 >"$tmp/new.srv" 2>&1 &
	npid=$!
	wait_for 20 cm_listening $HPORT || {
		tap_diag "rping -s did not listen: $(tr '\n' ';' <"$tmp/new.srv")"
		stop $npid
		return 1
	}
	real_client new.cli $HPORT || { stop $npid; return 1; }
	wait $npid || { tap_diag "server: $(tr '\n' ';' <"$tmp/new.srv" | tail -c 300)"; return 1; }
}
tap_check "a new listener on the same port takes a real connection (rping, validated)" new_listener

# ---- 3. a storm of short connections ---------------------------------------------
SPORT=19820
storm() {
	timeout "$(ksft_within 120)" $FLOOD serve "$IP_A" $SPORT "$N_STORM" >"$tmp/storm.srv" 2>&1 &
	stpid=$!
	wait_for 20 cm_listening $SPORT || {
		tap_diag "the storm's server did not listen: $(tr '\n' ';' <"$tmp/storm.srv")"
		stop $stpid
		return 1
	}
	timeout "$(ksft_within 120)" $FLOOD connect "$IP_A" "$IP_B" $SPORT "$N_STORM" >"$tmp/storm.cli" 2>&1
	crc=$?
	[ $crc = 0 ] || kill $stpid 2>/dev/null
	wait $stpid
	src=$?
	tap_diag "storm: client (exit $crc): $(tr '\n' ';' <"$tmp/storm.cli" | tail -c 300) server (exit $src): $(tr '\n' ';' <"$tmp/storm.srv" | tail -c 300)"
	[ $crc = 0 ] && [ $src = 0 ] && grep -q "^done $N_STORM" "$tmp/storm.cli" "$tmp/storm.srv"
}
tap_check "storm: $N_STORM rdma_cm connections in a row, each one message each way, all ended cleanly" storm
tap_check "storm: no TCP connection of the listener left" within 10 no_conns $SPORT

# ---- 4. nothing left ------------------------------------------------------------------
tap_check "no rdma_cm ID is left" within 10 no_cm_ids ||
	tap_diag "cm_ids left: $(rdma resource show cm_id 2>&1 | head -n 5 | tr '\n' ';')"
[ -z "$objects" ] ||
	tap_check "the model holds no more objects than before: $objects" model_no_more "$objects"
unload_and_finish "$DRV" $functions
