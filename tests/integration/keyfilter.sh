#!/usr/bin/env bash
# tests/integration/keyfilter.sh — the storage nodes' absent-key filter
# (node/storage_filter.c) across a kill -9 and restart. A put skips reading
# the fact it replaces when the filter says the key was never stored; after
# a restart the filter is rebuilt from the keys on disk, and until then says
# nothing. If it ever called a stored key absent, the put would count a new
# item and leave the old index entry behind. So, after the restart:
#   - `status` shows each storage node's filter ready, holding its keys;
#   - rewriting every item (moving it to another index partition) keeps the
#     item count, and the index holds exactly the new entries, no old one;
#   - new ids count as new items.
source "$(dirname "$0")/lib.sh" "$@"

it_cluster_up

sx table create kv --key id
sx index create kv by_g --on g --project all
wait_for "index by_g ready" 60 index_ready kv by_g

N=400
items_total() {
    sx status --json | jq '[.nodes[] | select(.role == "storage") | .status.partitions[].items] | add'
}
filter_keys() { # the sum of the storage nodes' filter keys, when all are ready
    sx status --json | jq -e '[.nodes[] | select(.role == "storage") | .status.keyfilter] |
        if all(.ready) then (map(.keys) | add) else error("not ready") end'
}

# "Apple" lives in index partition 101 (i1), "Zebra" in 102 (i2).
seq 1 "$N" | awk '{ printf "{\"id\": %d, \"g\": \"Apple\", \"n\": %d}\n", $1, $1 }' | sx load kv >/dev/null
expect_eq "items after the load" "$N" "$(items_total)"

lc kill s1 >/dev/null
lc kill s2 >/dev/null
lc start s1 >/dev/null
lc start s2 >/dev/null
wait_for "both storage nodes' filters ready after the restart" 60 filter_keys
keys="$(filter_keys)"
[ "$keys" -eq "$N" ] || fail "the rebuilt filters hold $keys keys, not the $N stored"
pass "restarted storage nodes rebuilt their filters from disk: $keys keys"

seq 1 "$N" | awk '{ printf "{\"id\": %d, \"g\": \"Zebra\", \"n\": %d}\n", $1, -$1 }' | sx load kv >/dev/null
expect_eq "items after rewriting every item" "$N" "$(items_total)"
got="$(sx query kv by_g --eq '["Apple"]' --consistency strong | ids_of | wc -l)"
expect_eq "items left under Apple (strong)" 0 "$got"
got="$(sx query kv by_g --eq '["Zebra"]' --consistency strong --limit 100000 | jq -r 'select(.n == -.id) | .id' | wc -l)"
expect_eq "items under Zebra holding their rewrite (strong)" "$N" "$got"
# eventual + projection all reads the index alone: no entry of the old values
got="$(sx query kv by_g --consistency eventual --limit 100000 | jq -r '.g' | sort | uniq -c | awk '{print $2 "=" $1}' | tr '\n' ' ')"
expect_eq "the index's own entries" "Zebra=$N " "$got"

seq 1001 1100 | awk '{ printf "{\"id\": %d, \"g\": \"Apple\", \"n\": %d}\n", $1, $1 }' | sx load kv >/dev/null
expect_eq "items after 100 new ids" "$((N + 100))" "$(items_total)"
keys="$(filter_keys)"
[ "$keys" -ge "$((N + 100))" ] || fail "the filters hold $keys keys after 100 new ids, fewer than $((N + 100))"
pass "new ids are added to the filters ($keys keys)"
