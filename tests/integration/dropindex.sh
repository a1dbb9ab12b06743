#!/usr/bin/env bash
# tests/integration/dropindex.sh — dropping an index frees its entries on the
# index nodes: also on an index node that was down when the index was
# dropped; the other indexes, and an index re-created under the same name
# (a new id), are left whole; the counters survive kill -9. A catalog change
# asked again under its request id is answered with the version it made.
source "$(dirname "$0")/lib.sh" "$@"

it_cluster_up

sx table create people --key id
sx index create people by_town --on town
sx index create people by_name --on name
wait_for "index by_town ready" 60 index_ready people by_town
wait_for "index by_name ready" 60 index_ready people by_name

# 200 people; towns on both sides of the index split at "M", so by_town has
# entries on both index nodes.
towns=(Austin Boston Redmond Seattle)
for i in $(seq 1 200); do
    echo "{\"id\": $i, \"town\": \"${towns[$((i % 4))]}\", \"name\": \"N$((i % 10))\"}"
done | sx load people >/dev/null

# index_entries: entries of every index partition, summed; fails unless both
# index nodes answered.
index_entries() {
    sx status --json | jq -e '[.nodes[] | select(.role == "index") | .status.partitions[]?.entries]
                              | if length == 2 then add else error("an index node is down") end'
}
entries_are() {
    [ "$(index_entries 2>/dev/null)" = "$1" ]
}
wait_for "400 index entries (2 indexes x 200 items)" 60 entries_are 400
pass "both indexes hold their 200 entries"

# Drop by_town while i2 is down: i2 learns of the drop from the catalog once
# it is back.
lc kill i2 >/dev/null
sx index drop people by_town
lc start i2 >/dev/null
wait_for "by_town's entries collected on both index nodes" 60 entries_are 200
pass "the dropped index's entries are gone, on the node that was down too"
collected="$(sx status --json | jq '[.nodes[] | select(.role == "index") | .status.dropped_collected] | add')"
[ "$collected" = 200 ] || fail "index nodes report $collected entries collected, expected 200"
pass "the index nodes report the 200 entries they collected"

expected="$(seq 3 10 200 | tr '\n' ' ')"
got="$(sx query people by_name --eq '["N3"]' | ids_of | sort -n | tr '\n' ' ')"
expect_eq "by_name still answers after the drop" "$expected" "$got"

# The same name again is a new index (a new id): it is built and kept.
sx index create people by_town --on town
wait_for "re-created by_town ready" 60 index_ready people by_town
wait_for "400 index entries again" 60 entries_are 400
catver="$(sx status --json | jq '.nodes[] | select(.role == "router") | .status.catalog_version')"
[[ "$catver" =~ ^[0-9]+$ ]] || fail "router reported no catalog version: $catver"
# collected_since V: both index nodes finished a collection round with a
# catalog at least version V.
collected_since() {
    sx status --json | jq -e --argjson v "$1" \
        '[.nodes[] | select(.role == "index") | .status.dropped_catalog // 0 | select(. >= $v)] | length == 2'
}
wait_for "a collection round on both index nodes with catalog >= $catver" 60 collected_since "$catver"
entries_are 400 || fail "the re-created index lost entries to the collector: $(index_entries)"
pass "the re-created index survives a collection round"

expected="$(seq 2 4 200 | tr '\n' ' ')"
got="$(sx query people by_town --eq '["Redmond"]' | ids_of | sort -n | tr '\n' ' ')"
expect_eq "re-created by_town answers" "$expected" "$got"

# The counters are durable: kill -9 both index nodes and restart them.
lc kill i1 >/dev/null
lc kill i2 >/dev/null
lc start i1 >/dev/null
lc start i2 >/dev/null
wait_for "400 entries after kill -9 and restart" 60 entries_are 400
pass "entry counters survive kill -9"

# ---- catalog changes asked again under their request id (a lost reply) -----------
# The same TABLE_CREATE frame, request id and all, sent twice straight to
# the router (as libshardex resends it after a failover): both succeed with
# the same catalog version, also after the catalog node's kill -9; the same
# change under another id is "already exists".
FUZZ="$IT_BUILD/bin/sx-fuzzframe"
ddl() { # ddl RIDHEX: TABLE_CREATE of "ddl" (key id) with that 16-byte id
    "$FUZZ" --config "$IT_DIR/cluster.json" --send "$IT_URL" \
        "960102a364646ca26964a0c410$1" | sed -n '1,2p' | tr '\n' ' '
}
rid1=00112233445566778899aabbccddeeff
first="$(ddl $rid1)"
grep -q "ok 0" <<<"$first" || fail "TABLE_CREATE with a request id: $first"
again="$(ddl $rid1)"
expect_eq "the same request again: the same reply (catalog version)" "$first" "$again"
lc kill s1 >/dev/null
lc start s1 >/dev/null
wait_for "the catalog node back" 60 sx get people '{"id": 1}'
expect_eq "the same request after kill -9 of the catalog node" "$first" "$(ddl $rid1)"
other="$(ddl ffeeddccbbaa99887766554433221100)"
grep -q "error 11" <<<"$other" || fail "the same change under another id: $other"
pass "a catalog change asked again under its request id is answered, not refused"
