#!/usr/bin/env bash
# tests/integration/partition.sh — hosts cut off the network during a write
# load. The cluster runs as five hosts (local-cluster up --netns: each
# process in its own network namespace on a bridge); the write load of
# chaos_lib.sh runs meanwhile. First index node i1's host loses its network
# (its link down: its connections neither close nor answer, unlike a killed
# process's), long enough for several batches to be acknowledged without
# it; then storage node s2's host, long enough for writes to it to fail;
# meanwhile twelve loads of items s2 holds must each time out, say so and
# end (a client must not hang closing its sockets after a timed-out call);
# then both come back. Then chaos_lib.sh's checks: nothing acknowledged is
# lost, every item whose last write was acknowledged holds it, and the
# index converges to the facts (what the shippers held for i1 reaches it
# once its host is back).
# (The router's own host is not cut off: a client whose request to it hung
# gives up, and the kernel may still deliver that request once the network
# is back, after the caller's later writes on new connections — a timed-out
# write may apply late, as libshardex's header says. Cutting a node off
# keeps the router's one connection to it, whose requests stay in order.)
# Needs root (network namespaces): without it the test is skipped (exit 77)
# and says so.
source "$(dirname "$0")/lib.sh" "$@"

it_need_netns

it_cluster_up --netns
slot="$(cat "$IT_DIR/netns")"
# shellcheck source=tests/integration/chaos_lib.sh
source "$(dirname "$0")/chaos_lib.sh"
chaos_start

# cut_host NAME / heal_host NAME: the host's network link down or up again
cut_host() { ip netns exec "sx$slot-$1" ip link set eth0 down; }
heal_host() { ip netns exec "sx$slot-$1" ip link set eth0 up; }
it_extra_cleanup() {       # (chaos_start's writer, and the links back up)
    touch "$W/stop" 2>/dev/null || true
    kill "$WPID" 2>/dev/null || true
    wait "$WPID" 2>/dev/null || true
    heal_host i1 2>/dev/null || true
    heal_host s2 2>/dev/null || true
}

wait_for "4 acknowledged batches" 60 acked_at_least 4
cut_host i1
pass "cut index node i1's host off the network after $(acked_count) acknowledged batches"
a=$(acked_count)
wait_for "6 batches acknowledged while i1 is cut off" 120 acked_at_least $((a + 6))
cut_host s2
pass "cut storage node s2's host off the network after $(acked_count) acknowledged batches"
failed_count() { wc -l <"$W/failed"; }
failed_more_than() { (($(failed_count) > $1)); }
wait_for "a write failing while s2 is cut off" 120 failed_more_than "$(failed_count)"
# A client whose call timed out must still end: nng 1.5's nng_close could
# hang after such a call (about once in twelve loads before
# client/lib/close.c bounded it). Twelve loads at once, each of 24 new items
# (so some are s2's whatever the cluster's hash key).
for i in $(seq 1 24); do
    echo "{\"id\": $((900000 + i)), \"v\": \"cut\"}"
done >"$W/cut.jsonl"
for i in $(seq 1 12); do
    (
        rc=0
        timeout 60 "$IT_CLI" -r "$IT_URL" load kv "$W/cut.jsonl" >/dev/null 2>"$W/cut.$i.err" ||
            rc=$?
        echo "$rc" >"$W/cut.$i.rc"
    ) &
done
for i in $(seq 1 12); do
    wait_for "load $i's exit status" 90 test -s "$W/cut.$i.rc"
    rc="$(cat "$W/cut.$i.rc")"
    ((rc != 124)) || fail "load $i with s2 cut off did not end within 60 s (the client hung)"
    ((rc != 0)) || fail "load $i with s2 cut off succeeded"
    grep -q "timed out" "$W/cut.$i.err" || fail "load $i failed without saying it timed out: $(cat "$W/cut.$i.err")"
done
pass "12 loads with s2 cut off each timed out, said so and ended"
heal_host s2
heal_host i1
pass "both hosts back on the network ($(wc -l <"$W/failed") batch(es) failed meanwhile)"
chaos_finish
