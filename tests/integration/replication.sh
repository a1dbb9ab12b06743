#!/usr/bin/env bash
# replication.sh — replicated fact partitions under a steady put load
# (local-cluster up --replicas 3: the catalog and every fact and index
# partition a Raft group of three).
#
# A writer puts items with increasing ids and an indexed attribute v (one
# of four values), one `shardex put` at a time, and records each
# acknowledged id with the time of its acknowledgement.
#  1. three faults, one after the other: kill -9 of the storage node
#     leading the most fact partitions, SIGSTOP of the one leading the most
#     then but s1 (its router stalls with it; s1's router r1 is the one the
#     clients try first), kill -9 of the index node leading
#     the most index partitions. After each, puts go on (the longest gap
#     between acknowledged puts is at most 3 s), and within 3 s of the
#     fault a get, a strong query, a verified query and a scan succeed,
#     the strong query and the scan seeing every put acknowledged before
#     it. Started again (or continued), the node catches up: every group
#     has a leader and the node's replicas lag 0 on their leaders.
#  2. a lost disk: a storage node killed, its data folder removed, started
#     again: it joins every group as a new replica, receives a snapshot and
#     is promoted, its lost replica removed. Then another storage node is
#     killed, so that every majority needs the rejoined replica: puts go
#     on, every acknowledged id is read back by a get, and once the writer
#     stopped and the index lag is 0, a strong query for each value returns
#     exactly the items a scan finds with it (the index agrees with the
#     facts): every acknowledged put with that value, and beside them only
#     puts whose outcome the writer did not learn.
# Usage: tests/integration/replication.sh BUILD_DIR
source "$(dirname "$0")/lib.sh" "$@"

# a log compacted every 1,000 entries (the default is 10,000), so that a
# rejoining replica below gets a snapshot with data
export SHARDEX_RAFT_COMPACT_ENTRIES=1000
it_cluster_up --replicas 3
[ "$(jq '[.storage[].partitions[]] | length' "$IT_DIR/cluster.json")" = 4 ] ||
    fail "the --replicas 3 layout has not 4 fact partitions"
# the replicated groups (fact partitions, the catalog, and index partitions
# when they have several replicas) and those storage node $1 holds
groups_of() {
    jq --arg n "${1:-}" '.catalog_node as $cat
        | [(.storage, .index)[].partitions[]?
           | select((.replicas // []) | length > 1 and ($n == "" or index($n) != null))]
        | length + (if ($cat | type) == "array" and ($cat | length) > 1
                       and ($n == "" or ($cat | index($n)) != null) then 1 else 0 end)' \
        "$IT_DIR/cluster.json"
}
NGROUPS="$(groups_of)"

now_ms() {
    local us="${EPOCHREALTIME/./}"
    echo "${us:0:-3}"
}

sx table create t --key id >/dev/null
sx index create t by_v --on v >/dev/null
wait_for "index by_v to be ready" 30 index_ready t by_v
pass "table t and index by_v on v"

# ---- the writer ----
ACKS="$IT_DIR/acks"   # "id ms": acknowledged puts, in order
ERRS="$IT_DIR/errors" # "id ms: message": puts whose outcome is unknown
STOP="$IT_DIR/stop"
: >"$ACKS"
: >"$ERRS"
writer() {
    local id=0 out
    while [ ! -e "$STOP" ]; do
        id=$((id + 1))
        if out="$("$IT_CLI" -r "$IT_URL" --timeout 5000 put t \
            "{\"id\": $id, \"v\": \"v$((id % 4))\"}" 2>&1)"; then
            echo "$id $(now_ms)" >>"$ACKS"
        else
            echo "$id $(now_ms): $out" >>"$ERRS"
        fi
    done
}
writer &
WPID=$!
it_extra_cleanup() {
    touch "$STOP"
    kill "$WPID" 2>/dev/null || true
    wait "$WPID" 2>/dev/null || true
}
stop_writer() {
    touch "$STOP"
    wait "$WPID" || fail "the writer failed"
}
acked() { wc -l <"$ACKS"; }
acked_at_least() { (($(acked) >= $1)); }
wait_for "the writer's first 50 puts" 20 acked_at_least 50

# ---- status ----
status_json() { sx status --json; }
# the node leading the most fact partitions, other than $1 (may be "")
most_leading() {
    jq -r --arg not "$1" '[.nodes[].status.groups // [] | .[]
        | select(.kind == "fact" and .role == "leader" and .leader != null and .leader != $not)
        | .leader] | group_by(.) | max_by(length) | .[0] // empty' <<<"$(status_json)"
}
# every group has a leader, and the leaders of node $1's groups show its
# replica reachable, a voter, lag 0, and no other replica of that node
caught_up() {
    jq -e --arg n "$1" --argjson ng "$NGROUPS" --argjson nh "$(groups_of "$1")" '
        [.nodes[].status.groups // [] | .[] | select(.role == "leader")]
        | unique_by("\(.kind) \(.id)") as $l
        | ($l | length) == $ng
        and ([$l[] | select(any(.members[]; .node == $n))] | length) == $nh
        and all($l[]; [.members[] | select(.node == $n)]
                      | length <= 1 and all(.[]; .voter and .reachable and .lag == 0))' \
        <<<"$(status_json)" >/dev/null
}
# node $1's replica ids, "kind id replica" a line
replicas_of() {
    jq -r --arg n "$1" '.nodes[] | select(.name == $n) | .status.groups // [] | .[]
        | "\(.kind) \(.id) \(.replica)"' <<<"$(status_json)" | sort
}

wait_for "every group to have a leader" 20 caught_up s1
pass "status: $NGROUPS groups with a leader each, s1's replicas caught up"
grep -qE '^1 +s[123] +fact +[0-9]+ .* 0000000000000000-3fffffffffffffff$' <<<"$(sx status)" ||
    fail "shardex status shows no row of fact partition 1 with its range: $(sx status)"
grep -qE '^catalog +s[123] +catalog +[0-9]+ .* -$' <<<"$(sx status)" ||
    fail "shardex status shows no catalog row: $(sx status)"
pass "shardex status: kind and range of each group"

# ---- 1. faults of a leader under the writer: kill -9, SIGSTOP ----
# the index node leading the most index partitions
most_leading_index() {
    jq -r '[.nodes[].status.groups // [] | .[]
        | select(.kind == "index" and .role == "leader" and .leader != null)
        | .leader] | group_by(.) | max_by(length) | .[0] // empty' <<<"$(status_json)"
}
left_ms() { echo $((t_kill + 3000 - $(now_ms))); }
attempt_get() {
    local id
    for id in $(head -n "$before" "$ACKS" | tail -n 8 | cut -d' ' -f1); do
        "$IT_CLI" -r "$IT_URL" --timeout "$(left_ms)" get t "{\"id\": $id}" || return
    done
}
attempt_strong() {
    "$IT_CLI" -r "$IT_URL" --timeout "$(left_ms)" query t by_v --eq '["v1"]' --consistency strong
}
attempt_verified() {
    "$IT_CLI" -r "$IT_URL" --timeout "$(left_ms)" query t by_v --eq '["v2"]' --consistency verified
}
attempt_scan() { "$IT_CLI" -r "$IT_URL" --timeout "$(left_ms)" scan t; }
probe() { # NAME: "NAME ms-after-the-fault exit-status" into $IT_DIR/probe.NAME
    local rc=1
    while (($(left_ms) > 0)); do
        rc=0
        "attempt_$1" >"$IT_DIR/probe.$1.out" 2>&1 || rc=$?
        ((rc != 0)) || break
    done
    echo "$1 $(($(now_ms) - t_kill)) $rc" >"$IT_DIR/probe.$1"
}
before_ids() { head -n "$before" "$ACKS" | awk -v m="$1" 'm == "" || $1 % 4 == m {print $1}' | sort; }
after_kill() { awk -v t="$t_kill" '$2 > t' "$ACKS" | wc -l; }
enough_after() { (($(after_kill) >= 30)); }

# fault KIND NODE WHAT: kill (kill -9) or stop (SIGSTOP) NODE under the
# writer; within 3 s a get of ids acknowledged before, a strong and a
# verified query and a scan succeed (the strong query and the scan seeing
# every put acknowledged before), and the writer's longest gap between
# acknowledged puts is at most 3 s; then NODE is started (or continued) and
# every group catches up
fault() {
    local kind="$1" victim="$2" what="$3" p name ms rc missing gap gap_from gap_to pid
    before="$(acked)"
    t_kill="$(now_ms)"
    if [ "$kind" = kill ]; then
        lc kill "$victim" >/dev/null
    else
        pid="$(cat "$IT_DIR/pids/$victim.pid")"
        kill -STOP "$pid"
    fi
    pass "$kind $victim ($what) after $before acknowledged puts"
    local probes=()
    for p in get strong verified scan; do
        probe "$p" &
        probes+=($!)
    done
    wait "${probes[@]}"
    for p in get strong verified scan; do
        read -r name ms rc <"$IT_DIR/probe.$p"
        ((rc == 0 && ms <= 3000)) || fail "$name did not succeed within 3 s of the $kind of $victim (exit $rc after $ms ms): $(tail -n 3 "$IT_DIR/probe.$p.out")"
        pass "$name succeeded $ms ms after the $kind of $victim"
    done
    missing="$(comm -23 <(before_ids 1) <(ids_of <"$IT_DIR/probe.strong.out" | sort) | head -n 5)"
    [ -z "$missing" ] || fail "the strong query after the $kind missed acknowledged ids: $missing"
    missing="$(comm -23 <(before_ids "") <(ids_of <"$IT_DIR/probe.scan.out" | sort) | head -n 5)"
    [ -z "$missing" ] || fail "the scan after the $kind missed acknowledged ids: $missing"
    pass "the strong query (v1: $(wc -l <"$IT_DIR/probe.strong.out") items) and the scan saw every put acknowledged before the $kind"
    wait_for "30 puts acknowledged after the $kind of $victim" 20 enough_after
    # the longest gap between consecutive acknowledged puts from the last
    # one before the fault until now
    read -r gap gap_from gap_to < <(awk -v t="$t_kill" -v e="$(now_ms)" '
        prev != "" && $2 > t && prevt <= e { g = $2 - prevt; if (g > max) { max = g; a = prev; b = $1 } }
        { prev = $1; prevt = $2 }
        END { print max + 0, a + 0, b + 0 }' "$ACKS")
    pass "longest gap between acknowledged puts after the $kind of $victim: $gap ms (ids $gap_from to $gap_to); $(wc -l <"$ERRS") put(s) failed so far"
    ((gap <= 3000)) || fail "puts stalled for $gap ms after the $kind of $victim"
    if [ "$kind" = kill ]; then lc start "$victim" >/dev/null; else kill -CONT "$pid"; fi
    wait_for "$victim's replicas to catch up on every group's leader" 30 caught_up "$victim"
    pass "$victim back: every group has a leader, $victim's replicas lag 0"
}

victim="$(most_leading "")"
[ -n "$victim" ] || fail "no fact partition leader in status"
nled="$(jq -r --arg n "$victim" '[.nodes[] | select(.name == $n) | .status.groups[]
    | select(.kind == "fact" and .role == "leader")] | length' <<<"$(status_json)")"
fault kill "$victim" "leading $nled of the 4 fact partitions"
# (not s1: the clients here try r1, inside s1, first, and a client waits
# its whole attempt on a router that is stalled, not dead)
victim="$(most_leading s1)"
[ -n "$victim" ] || fail "no fact partition leader but s1 in status"
fault stop "$victim" "a storage node leading fact partitions, and its router"
victim="$(most_leading_index)"
if [ -n "$victim" ]; then
    fault kill "$victim" "the index node leading the most index partitions"
fi

# ---- 2. a lost disk, then another node's death ----
# 1,100 writes to one key: its partition's replicas apply more entries
# than a log keeps here (1,000) and compact it, so a new replica of that
# partition gets a snapshot of its data, not the whole log
sx table create hot --key id >/dev/null
awk 'BEGIN { for (n = 1; n <= 1100; n++) printf "{\"id\": 0, \"n\": %d}\n", n }' >"$IT_DIR/hot.jsonl"
sx load hot "$IT_DIR/hot.jsonl" --batch 1 --inflight 1 >/dev/null
hot="$(jq -r '[.nodes[].status.groups // [] | .[] | select(.kind == "fact")]
    | max_by(.commit) | .id' <<<"$(status_json)")"
compacted() { # NODE: its replica of partition $hot has a snapshot past the empty one
    compgen -G "$IT_DIR/data/$1/p$hot.raft/snap-[0-9][0-9]*" >/dev/null
}
for n in s1 s2 s3; do
    wait_for "$n to compact partition $hot's log" 10 compacted "$n"
done
pass "1,100 writes to one key: partition $hot's replicas compacted their logs ($(cd "$IT_DIR/data/s1/p$hot.raft" && echo snap-*))"

lost="$(most_leading "")"
old_ids="$(replicas_of "$lost")"
lc kill "$lost" >/dev/null
rm -rf "${IT_DIR:?}/data/$lost"
lc start "$lost" >/dev/null
nheld="$(groups_of "$lost")"
joined() { (($(grep -c "joined as replica" "$IT_DIR/logs/$lost.log") >= nheld)); }
wait_for "$lost to join its $nheld groups as a new replica" 30 joined
wait_for "the leaders to promote $lost's new replicas and remove its lost ones" 30 caught_up "$lost"
new_ids="$(replicas_of "$lost")"
[ -z "$(comm -12 <(awk '{print $1, $2, $3}' <<<"$old_ids") <(awk '{print $1, $2, $3}' <<<"$new_ids"))" ] ||
    fail "$lost came back under a replica id it had before: $old_ids / $new_ids"
grep -qE "partition $hot: installed the snapshot at ([2-9]|[1-9][0-9]+)$" "$IT_DIR/logs/$lost.log" ||
    fail "$lost's new replica of partition $hot installed no snapshot of its data: $(grep "partition $hot: installed" "$IT_DIR/logs/$lost.log")"
pass "$lost's new replica of partition $hot: $(grep -o "installed the snapshot at [0-9]*$" <<<"$(grep "partition $hot: installed" "$IT_DIR/logs/$lost.log")" | tail -n 1)"
pass "$lost, its data folder lost, rejoined as new replicas: $(tr '\n' ';' <<<"$new_ids") (were: $(tr '\n' ';' <<<"$old_ids"))"

other="$(most_leading "$lost")"
[ -n "$other" ] || fail "no fact partition led by a node other than $lost"
before="$(acked)"
t_kill2="$(now_ms)"
lc kill "$other" >/dev/null
after_kill2() { awk -v t="$t_kill2" '$2 > t' "$ACKS" | wc -l; }
enough_after2() { (($(after_kill2) >= 20)); }
wait_for "20 puts acknowledged with $other down (every majority holds $lost)" 20 enough_after2
pass "$other killed: puts go on with $lost's rejoined replicas in every majority"
stop_writer
nack="$(acked)"
nerr="$(wc -l <"$ERRS")"
pass "the writer stopped: $nack puts acknowledged, $nerr failed"
if ((nerr > 0)); then
    echo "puts that failed (outcome unknown):" >&2
    head -n 10 "$ERRS" >&2
fi

# every acknowledged id read back by a get (4 at a time)
cut -d' ' -f1 "$ACKS" | xargs -P 4 -I ID sh -c \
    '"$0" -r "$1" get t "{\"id\": ID}" 2>&1 || echo "ID failed: $?"' "$IT_CLI" "$IT_URL" \
    >"$IT_DIR/gets"
bad="$(grep -c failed "$IT_DIR/gets" || true)"
((bad == 0)) || fail "$bad acknowledged ids not read back: $(grep failed "$IT_DIR/gets" | head -n 5)"
expected="$(cut -d' ' -f1 "$ACKS" | awk '{printf "{\"id\":%d,\"v\":\"v%d\"}\n", $1, $1 % 4}' | sort)"
expect_eq "all $nack acknowledged puts read back by gets, each as written" "$expected" \
    "$(jq -c -S . <"$IT_DIR/gets" | sort)"

expect_eq "the key written 1,100 times holds its last write" '{"id":0,"n":1100}' \
    "$(sx get hot '{"id": 0}' | jq -c -S .)"

# the index agrees with the facts once it caught up
lag_zero() {
    jq -e '
        ([.nodes[].status.partitions // [] | .[] | select(.head != null) | {id, head}]
         | group_by(.id) | map({key: (.[0].id | tostring), value: (map(.head) | max)})
         | from_entries) as $h
        | [.nodes[].status.partitions // [] | .[] | select(.watermarks != null)
           | .watermarks[] | ($h[.[0] | tostring] // 0) - .[1]] as $lag
        | ($lag | length) > 0 and all($lag[]; . <= 0)' <<<"$(status_json)" >/dev/null
}
wait_for "the index lag to reach 0" 30 lag_zero
failed_ids="$(cut -d' ' -f1 "$ERRS" | sort)"
for m in 0 1 2 3; do
    q="$(sx query t by_v --eq "[\"v$m\"]" --consistency strong | ids_of | sort)"
    s="$(sx scan t --where "{\"v\": \"v$m\"}" | ids_of | sort)"
    expect_eq "v$m: the strong query returns the items the scan finds ($(wc -l <<<"$q"))" "$s" "$q"
    want="$(awk -v m="$m" '$1 % 4 == m {print $1}' "$ACKS" | sort)"
    missing="$(comm -23 <(echo "$want") <(echo "$q") | head -n 5)"
    [ -z "$missing" ] || fail "v$m: acknowledged ids missing from the strong query: $missing"
    extra="$(comm -13 <(echo "$want") <(echo "$q"))"
    unknown="$(comm -23 <(echo "$extra" | sed '/^$/d') <(echo "$failed_ids" | sed '/^$/d'))"
    [ -z "$unknown" ] || fail "v$m: the strong query returns ids never put: $(head -n 5 <<<"$unknown")"
    pass "v$m: $(wc -l <<<"$want") acknowledged, the strong query returns them$([ -z "$extra" ] || echo " and $(wc -l <<<"$extra") put(s) of unknown outcome")"
done
pass "replicated fact partitions: a leader's death, a lost disk and a second death lose nothing acknowledged"
