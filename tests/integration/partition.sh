#!/usr/bin/env bash
# tests/integration/partition.sh — hosts cut off the network during a write
# load. The cluster runs as five hosts (local-cluster up --netns: each
# process in its own network namespace on a bridge); the write load of
# chaos_lib.sh runs meanwhile. First index node i1's host loses its network
# (its link down: its connections neither close nor answer, unlike a killed
# process's), long enough for several batches to be acknowledged without
# it; then storage node s2's host, long enough for writes to it to fail;
# meanwhile twelve loads of items s2 holds must each fail, say why and end
# (a client must not hang closing its sockets after a timed-out call);
# then both come back. Then chaos_lib.sh's checks: nothing acknowledged is
# lost, every item whose last write was acknowledged holds it, and the
# index converges to the facts (what the shippers held for i1 reaches it
# once its host is back).
# Then the router's own host is cut off while a load, on a connection made
# before, sends a batch: the kernel holds it, the load times out and ends;
# once the host is back, a put of one of the batch's ids is acknowledged,
# and the held batch, delivered after it, must be refused past its
# deadline (SX_EDEADLINE, status writes_past_deadline), not applied over
# that put.
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
    heal_host r1 2>/dev/null || true
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
# Twelve loads at once, each of 24 new items (so some are s2's whatever the
# cluster's hash key), must each fail, say why and end: a load whose call
# times out (nng 1.5's nng_close could hang after such a call, about once in
# twelve loads before client/lib/close.c bounded it; the held batch below
# times out too), or one the router fails as s2 unavailable because it found
# s2's connection silent and took it for dead (proto/runtime/lpeer.c).
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
    grep -qE "timed out|node s2 at [^ ]*: (not connected|call failed \(service unavailable\))" \
        "$W/cut.$i.err" ||
        fail "load $i failed without saying it timed out or s2 is unavailable: $(cat "$W/cut.$i.err")"
done
pass "12 loads with s2 cut off each failed, said why (a timeout, or s2 unavailable) and ended"
heal_host s2
heal_host i1
pass "both hosts back on the network ($(wc -l <"$W/failed") batch(es) failed meanwhile)"

# ---- a batch held by the network after its client gave up ----
past_deadline() { sx status --json | jq '[.nodes[] | .status.writes_past_deadline // 0] | add'; }
late_more_than() { (($(past_deadline) > $1)); }
batch() {   # batch FIRST LAST V: JSON lines of ids FIRST..LAST
    for i in $(seq "$1" "$2"); do echo "{\"id\": $i, \"v\": \"$3\"}"; done
}
sx table create hold --key id
batch 1001 1040 probe >"$W/probe.jsonl"      # (40 ids: both storage nodes')
writes_flow() { sx load hold "$W/probe.jsonl" >/dev/null 2>&1; }
wait_for "writes through r1 to both storage nodes again" 60 writes_flow
mkfifo "$W/feed"
(
    rc=0
    timeout 60 "$IT_CLI" -r "$IT_URL" --timeout 5000 load hold "$W/feed" >/dev/null \
        2>"$W/held.err" || rc=$?
    echo "$rc" >"$W/held.rc"
) &
exec 7>"$W/feed"
batch 1 200 first >&7       # sent as one PUT once the input pauses (load.c)
got_first() { sx get hold '{"id": 200}' >/dev/null 2>&1; }
wait_for "the load's first batch stored" 30 got_first
late0="$(past_deadline)"
cut_host r1
{ batch 201 399 second; echo '{"id": 1, "v": "held"}'; } >&7
wait_for "the load's exit status" 30 test -s "$W/held.rc"
exec 7>&-
(($(cat "$W/held.rc") == 3)) && grep -q "timed out" "$W/held.err" ||
    fail "the load whose batch the network held: exit $(cat "$W/held.rc"), $(cat "$W/held.err")"
heal_host r1
put_after() { sx put hold '{"id": 1, "v": "after"}' >/dev/null 2>&1; }
wait_for "a put through r1 once its host is back" 30 put_after
# arrived: refused (counted), or (the bug this guards against) applied
held_arrived() { late_more_than "$late0" || sx get hold '{"id": 300}' >/dev/null 2>&1; }
wait_for "the held batch to reach the storage nodes" 60 held_arrived
v="$(sx get hold '{"id": 1}' | jq -r .v)"
[ "$v" = "after" ] || fail "id 1 holds \"$v\" after the held batch arrived: it undid a later put"
if sx get hold '{"id": 300}' >/dev/null 2>&1; then fail "an item of the held batch was stored"; fi
pass "a batch the network held past its deadline reached r1 after a later put and was refused"
chaos_finish
