#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# A hostile MPA peer (mpa_peer.py) against the iWARP connection manager of
# the driver under test, between two iWARP adapters of this guest.
#
# Listener side: a persistent rping server listens on adapter A; the peer
# connects over TCP and sends a request with a wrong key, another revision,
# markers or CRC asked for, more private data than MPA allows or than iw_cm
# can report, less than it announced, half a header, resets after 0, 10 and
# 28 bytes, and a good request one byte at a time. Each must end in a reject
# reply or a closed connection, within the listener's wait for the request
# (20 s; ours loads with 5 s, mpa_request_timeout_ms); then a real rping
# connection must still work, and nothing may be left: no rdma_cm ID, no TCP
# connection of the listener, no QP, CQ or MR in the model. A listener
# destroyed while its user holds a good request unanswered rejects it.
#
# Active side: rping connects from adapter A to a peer listening on adapter
# B's address, which answers with a wrong key, another revision, markers,
# CRC, a reject with private data, too much private data, less than it
# announced, nothing at all, or a good reply one byte at a time (after which
# the adapter finds no peer QP: the connection fails by retries). Each must
# end in the error rdma_cm reports, never in a hang. The peer records the
# driver's MPA request, which is checked byte for byte (key, flags, revision
# 129, no private data, a cookie, congestion control 0), and compared with
# the other driver's when both ran in this boot.
# Runs against either driver (ERDMA_DRIVER=erdma_rs or erdma); the C driver
# reports some of these failures with other errors, which are shown.
# On a real instance it runs between the adapters' own addresses with the
# driver bound, and leaves out the unload (see "What a test may change" in
# lib.sh).

. "$(dirname "$0")/lib.sh"

NET=58
need_functions
DRV=$ERDMA_DRIVER
tmp=/tmp/iwarp_mpa
frames=/tmp/mpa-frames
rm -rf "$tmp"
mkdir -p "$tmp" "$frames"
PEER="python3 $(cd "$(dirname "$0")" && pwd)/mpa_peer.py"
command -v rping >/dev/null || ksft_skip_all "rping (rdmacm-utils) is missing"

tap_header
nics_up $NET
# Ours waits 5 s for a request instead of 20 (the module parameter): the
# requests that stop half-way end that much sooner. (The wait for a reply
# stays 10 s: the connection in progress at rmmod, below, needs it.)
[ "$DRV" = erdma_rs ] && ERDMA_MODPROBE_ARGS="mpa_request_timeout_ms=5000"
load_driver
iwarp_pair || ksft_skip_all "fewer than two iWARP adapters bound"
objects=$(model_objects)

# The C driver answers some bad requests with a reject where ours closes, or
# the other way round: with it, the peer only asks that each connection ends.
# It also accepts a request with 256 bytes of private data (which it reports
# to iw_cm, whose event has an 8-bit length, as 0 bytes); ours rejects it.
[ "$DRV" = erdma ] && MPA_PEER_LENIENT=1 MPA_PEER_ACCEPTS_256=1 &&
	export MPA_PEER_LENIENT MPA_PEER_ACCEPTS_256

# peer_request CASE: the peer sends request CASE to the listener.
peer_request() {
	out=$($PEER request "$IP_A" "$LPORT" "$1" 2>&1)
	r=$?
	tap_diag "$out"
	return $r
}

# open_conns PORT: TCP connections to or from PORT still open (not TIME_WAIT),
# and listeners on it.
open_conns() {
	ss -tanH state all "( sport = :$1 or dport = :$1 )" | grep -v 'TIME-WAIT'
}

LPORT=19500
timeout "$(ksft_within 600)" rping -s -P -a "$IP_A" -p "$LPORT" >"$tmp/server" 2>&1 &
spid=$!
if wait_for 20 cm_listening "$LPORT"; then
	for c in wrong-key reply-key revision-1 revision-128 markers crc pd-257 pd-256 \
		pd-short half-header reset-after-0 reset-after-10 reset-after-28 slow-good; do
		tap_check "listener: request '$c' ends in a reject or a close" peer_request "$c"
	done
	tap_check "listener: a good connection afterwards (rping, 10 round trips, validated)" \
		timeout "$(ksft_within 60)" rping -c -a "$IP_A" -I "$IP_B" -p "$LPORT" -C 10 -V
else
	tap_diag "rping -s -P did not listen: $(tr '\n' ';' <"$tmp/server")"
	tap_check "listener: rping -s -P listens" false
fi
kill "$spid" 2>/dev/null
wait "$spid" 2>/dev/null
tap_diag "rping -P server: $(tr '\n' ';' <"$tmp/server" | tail -c 400)"
tap_check "listener: no TCP connection of it left after the server ends" \
	sh -c "sleep 2; [ -z \"\$(ss -tanH state all '( sport = :$LPORT or dport = :$LPORT )' | grep -v TIME-WAIT)\" ]"
open_conns "$LPORT" | while read -r l; do tap_diag "left: $l"; done

# held_request: a listener destroyed while its user holds a request
# unanswered (cm_hold.py, for 5 s) rejects that request at once: the peer
# hears a reject reply and the close before the hold ends. (iw_cm drops a request
# still queued for a listener it destroys, which then nobody answers; the
# driver cannot tell that from a request its user holds.) Then closing the
# held request is harmless and no TCP connection is left.
held_request() {
	port=$((LPORT + 1))
	timeout "$(ksft_within 90)" python3 "$(dirname "$0")/cm_hold.py" "$IP_A" "$port" 5 >"$tmp/hold" 2>&1 &
	hpid=$!
	if ! wait_for 20 cm_listening "$port"; then
		tap_diag "cm_hold.py did not listen: $(tr '\n' ';' <"$tmp/hold")"
		kill $hpid 2>/dev/null
		wait $hpid
		return 1
	fi
	out=$($PEER request "$IP_A" "$port" unanswered 2>&1)
	r=$?
	tap_diag "$out"
	wait $hpid
	hr=$?
	tap_diag "cm_hold.py (exit $hr): $(tr '\n' ';' <"$tmp/hold")"
	[ $r = 0 ] && [ $hr = 0 ] && [ -z "$(open_conns "$port")" ]
}
if [ "$DRV" = erdma ]; then
	tap_skip "listener: destroyed while its user holds a request, it rejects the request" \
		"the C driver leaves such a request open until it is answered"
else
	tap_check "listener: destroyed while its user holds a request, it rejects the request" held_request
fi

# reply_case CASE PATTERN: rping connects to the peer answering with CASE; it
# must fail with PATTERN (not by its 40 s timeout).
reply_case() {
	port=$((APORT + $3))
	timeout "$(ksft_within 90)" $PEER reply "$IP_B" "$port" "$1" "$tmp/request.$1" >"$tmp/peer.$1" 2>&1 &
	ppid=$!
	wait_for 10 listening "$port" || { tap_diag "the peer did not listen"; return 1; }
	timeout "$(ksft_within 40)" rping -c -a "$IP_B" -I "$IP_A" -p "$port" -C 1 -V >"$tmp/client.$1" 2>&1
	rc=$?
	wait "$ppid"
	out=$(tr '\n' ';' <"$tmp/client.$1" | tail -c 300)
	tap_diag "$1: rping exit $rc: $out"
	[ $rc != 124 ] || return 1
	# After a good reply the connection is made, and its failure (the adapter
	# finds no peer QP) ends it with a failed completion and a disconnect:
	# rping exits 0 when the disconnect reaches it first, the failed
	# completion printed all the same.
	[ $rc != 0 ] || [ "$1" = slow-good ] || return 1
	grep -q -- "$2" "$tmp/client.$1"
}

# What rdma_cm reports: our driver's codes; the C driver's are only shown.
if [ "$DRV" = erdma_rs ]; then
	E_PROTO='RDMA_CM_EVENT_CONNECT_ERROR, error -71'
	E_REFUSED='RDMA_CM_EVENT_REJECTED, error -111'
	E_RESET='RDMA_CM_EVENT_REJECTED, error -104'
	E_TIMEOUT='RDMA_CM_EVENT_UNREACHABLE, error -110'
else
	E_PROTO='RDMA_CM_EVENT_' E_REFUSED='RDMA_CM_EVENT_' E_RESET='RDMA_CM_EVENT_' E_TIMEOUT='RDMA_CM_EVENT_'
fi
APORT=19600
tap_check "connect: reply 'wrong-key' fails: $E_PROTO" reply_case wrong-key "$E_PROTO" 1
tap_check "connect: reply 'revision-1' fails: $E_PROTO" reply_case revision-1 "$E_PROTO" 2
tap_check "connect: reply 'markers' fails: $E_REFUSED" reply_case markers "$E_REFUSED" 3
tap_check "connect: reply 'crc' fails: $E_REFUSED" reply_case crc "$E_REFUSED" 4
tap_check "connect: reply 'reject' fails: $E_RESET" reply_case reject "$E_RESET" 5
tap_check "connect: reply 'pd-257' fails: $E_PROTO" reply_case pd-257 "$E_PROTO" 6
tap_check "connect: reply 'pd-short' fails: $E_RESET" reply_case pd-short "$E_RESET" 7
tap_check "connect: no reply fails after 10 s: $E_TIMEOUT" reply_case silent "$E_TIMEOUT" 8
tap_check "connect: a good reply one byte at a time, then no peer QP: the transfer fails" \
	reply_case slow-good 'completion failed\|error' 9

# check_request: the driver's MPA request, as the peer read it: key, flags 0,
# revision 129 (0x81), no private data, a cookie, the extension word (CC 0).
check_request() {
	hex=$(cat "$tmp/request.reject")
	tap_diag "MPA request of $DRV: $hex"
	key=4d504120494420526571204672616d65
	cookie=$(echo "$hex" | cut -c41-48)
	[ "$(echo "$hex" | cut -c1-40)" = "${key}00810000" ] && [ "$cookie" != 00000000 ] &&
		[ "$(echo "$hex" | cut -c49-)" = 00000000 ] || return 1
	# Byte for byte, but for the cookie, the other driver's.
	echo "$hex" | sed 's/^\(.\{40\}\).\{8\}/\1XXXXXXXX/' >"$frames/$DRV"
	for other in erdma erdma_rs; do
		[ "$other" != "$DRV" ] && [ -s "$frames/$other" ] || continue
		tap_diag "compared with $other's: $(cat "$frames/$other")"
		cmp -s "$frames/$DRV" "$frames/$other" || return 1
	done
}
tap_check "connect: the driver's MPA request is erdma's revision 129, byte for byte" check_request

tap_check "no rdma_cm ID is left" sh -c '[ -z "$(rdma resource show cm_id 2>&1)" ]'
[ -z "$objects" ] ||
	tap_check "the model holds no more objects than before: $objects" model_no_more "$objects"

if [ "$DRV" != erdma_rs ] || ! may_reconfigure; then
	unload_and_finish "$DRV"
fi

# Unloading with everything in use: a listener whose connection moves data,
# and a connection in progress (its peer never answers). rmmod must complete,
# every rping must end (rdma_cm tells it the device went away), and the
# adapters must hold nothing.
BPORT=19700
t=$(ksft_within 150)
timeout "$t" rping -s -a "$IP_A" -p $BPORT -C 1000000 >"$tmp/busy.srv" 2>&1 &
b1=$!
wait_for 20 cm_listening $BPORT
timeout "$t" rping -c -a "$IP_A" -I "$IP_B" -p $BPORT -C 1000000 >"$tmp/busy.cli" 2>&1 &
b2=$!
timeout "$t" $PEER reply "$IP_B" $((BPORT + 1)) silent "$tmp/request.busy" >/dev/null 2>&1 &
b3=$!
wait_for 10 listening $((BPORT + 1))
timeout "$t" rping -c -a "$IP_B" -I "$IP_A" -p $((BPORT + 1)) -C 1 >"$tmp/busy.pending" 2>&1 &
b4=$!
sleep 3
tap_diag "before rmmod: $(rdma resource show cm_id 2>&1 | sed 's/ pid.*//' | tr '\n' ';')"
tap_check "rmmod erdma_rs with a listener, a connected QP moving data and a connection in progress" \
	timeout "$(ksft_within 90)" rmmod erdma_rs
# rping_ended PID NAME: the rping ended by itself (not by its 150 s timeout).
rping_ended() {
	wait "$1"
	r=$?
	tap_diag "$2 (exit $r): $(tr '\n' ';' <"$tmp/$2" | tail -c 200)"
	[ $r != 124 ]
}
tap_check "the listening rping ended after rmmod" rping_ended $b1 busy.srv
tap_check "the connected rping ended after rmmod" rping_ended $b2 busy.cli
tap_check "the connecting rping ended after rmmod" rping_ended $b4 busy.pending
kill $b3 2>/dev/null
wait $b3 2>/dev/null
tap_check "the adapters hold no QP, CQ, MR or AH after rmmod erdma_rs" model_clean $(erdma_functions)
trouble=$(kernel_trouble)
[ -z "$trouble" ] || tap_diag "$trouble"
tap_check "no oops, BUG or WARNING in the kernel log" [ -z "$trouble" ]
tap_finish
