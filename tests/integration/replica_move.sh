#!/usr/bin/env bash
# replica_move.sh — moving a replica by editing the config: four storage
# nodes, fact partition 1 on s1 s2 s3 and s4 holding nothing; items are
# written; then the config puts s4 in s3's place in partition 1's
# "replicas", and every process is restarted with it, one at a time, s4
# first. s4 joins partition 1's group as a new replica (snapshot and log),
# the leader promotes it once caught up and then removes s3's replica (the
# config no longer lists s3 for it), one change at a time. Then s1 is
# killed: partition 1's majority is s2 and s4, and every item written is
# still read back, before and after more writes.
# Usage: tests/integration/replica_move.sh BUILD_DIR
source "$(dirname "$0")/lib.sh" "$@"

it_own_cluster 7
# config P1_REPLICAS: the cluster's config with partition 1 on those nodes
config() {
    cat <<JSON
{
  "cluster": "move", "hash_key": "$IT_HK", "token_key": "$IT_TK", "link_key": "$IT_LK",
  "catalog_node": ["s1", "s2", "s3"],
  "routers": [{"name": "r1", "url": "tcp://127.0.0.1:$IT_BASE"}],
  "storage": [
    {"name": "s1", "id": 1, "url": "tcp://127.0.0.1:$((IT_BASE + 1))", "partitions": [
      {"id": 1, "lo": "0000000000000000", "hi": "7fffffffffffffff", "replicas": $1}]},
    {"name": "s2", "id": 2, "url": "tcp://127.0.0.1:$((IT_BASE + 2))", "partitions": [
      {"id": 2, "lo": "8000000000000000", "hi": "ffffffffffffffff",
       "replicas": ["s2", "s3", "s1"]}]},
    {"name": "s3", "id": 3, "url": "tcp://127.0.0.1:$((IT_BASE + 3))", "partitions": []},
    {"name": "s4", "id": 4, "url": "tcp://127.0.0.1:$((IT_BASE + 4))", "partitions": []}
  ],
  "index": [
    {"name": "i1", "url": "tcp://127.0.0.1:$((IT_BASE + 5))", "partitions": [
      {"id": 101, "lo": null, "hi": ["M"]}]},
    {"name": "i2", "url": "tcp://127.0.0.1:$((IT_BASE + 6))", "partitions": [
      {"id": 102, "lo": ["M"], "hi": null}]}
  ]
}
JSON
}
config '["s1", "s2", "s3"]' >"$IT_DIR/cluster.json"
chmod 600 "$IT_DIR/cluster.json"
out="$(lc up)" || { echo "$out" >&2; fail "local-cluster up failed"; }
IT_URL="$(tail -n 1 <<<"$out")"
export SHARDEX_ROUTER="$IT_URL"
pass "cluster up: partition 1 on s1 s2 s3, partition 2 on s2 s3 s1, s4 holding nothing"

sx table create kv --key id >/dev/null
for i in $(seq 1 40); do sx put kv "{\"id\": $i, \"v\": \"one $i\"}" >/dev/null; done
p1_items() { # NODE: partition 1's item count on NODE (its status row)
    sx status --json | jq -r --arg n "$1" '.nodes[] | select(.name == $n)
        | .status.partitions[]? | select(.id == 1) | .items'
}
n1="$(p1_items s1)"
[ -n "$n1" ] && [ "$n1" -gt 0 ] || fail "partition 1 holds no items on s1 ($n1)"
pass "40 items written, $n1 of them in partition 1"

# the move: s4 in s3's place; every process restarted with it, s4 first
config '["s1", "s2", "s4"]' >"$IT_DIR/cluster.json.new"
chmod 600 "$IT_DIR/cluster.json.new"
mv "$IT_DIR/cluster.json.new" "$IT_DIR/cluster.json"
for n in s4 s1 s2 s3 i1 i2 r1; do
    lc stop "$n" >/dev/null
    lc start "$n" >/dev/null
done
# s4's join is retried until a leader with the new config lets it in
joined() { grep -q "fact partition 1: this node joined as replica" "$IT_DIR/logs/s4.log"; }
wait_for "s4 to join partition 1's group" 30 joined
members() { # partition 1's members on its leader: "NODE:voter|learner" sorted
    sx status --json | jq -r '.nodes[].status.groups // [] | .[]
        | select(.kind == "fact" and .id == 1 and .role == "leader") | .members[]
        | "\(.node):\(if .voter then "voter" else "learner" end)"' | sort | tr '\n' ' '
}
moved() { [ "$(members)" = "s1:voter s2:voter s4:voter " ]; }
wait_for "partition 1's members to be s1 s2 s4, all voters" 30 moved
grep -qh "fact partition 1: replica [0-9]* on s3, a node the config no longer lists for it, removed" \
    "$IT_DIR"/logs/s[124].log || fail "no leader logged the removal of s3's replica"
pass "s4 joined partition 1, was promoted, and s3's replica was removed (members: $(members))"

# (promoted: the leader saw s4 hold every entry of the group)
lc kill s1 >/dev/null
for i in $(seq 1 40); do
    expect_eq "item $i with s1 down" "{\"id\":$i,\"v\":\"one $i\"}" "$(sx get kv "{\"id\": $i}")"
done
for i in $(seq 41 60); do sx put kv "{\"id\": $i, \"v\": \"two $i\"}" >/dev/null; done
expect_eq "an item written with s1 down" '{"id":60,"v":"two 60"}' "$(sx get kv '{"id": 60}')"
pass "with s1 killed, partition 1 served by s2 and s4: all 40 items read back, 20 more written"
