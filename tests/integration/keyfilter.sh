#!/usr/bin/env bash
# tests/integration/keyfilter.sh — the absent-key filters (node/keyfilter*.c)
# of storage nodes (over fact keys) and index partitions (over entry keys)
# across a kill -9 and restart of every node. A write skips reading what it
# replaces when the filter says the key was never stored; after a restart
# each filter is rebuilt from the keys on disk, and until then says nothing.
# If one ever called a stored key absent, a put would count a new item (or
# index entry) and leave the old index entry behind. So, after the restart:
#   - `status` shows every filter ready, holding exactly the stored keys;
#   - rewriting every item's projected attribute keeps the item and entry
#     counts; moving every item to another index partition keeps them too,
#     and the index holds exactly the new entries, no old one;
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
filter_keys() { # ROLE: the sum of ROLE's filter keys, when all are ready
    local sel='.status.keyfilter'
    [ "$1" = index ] && sel='.status.partitions[].keyfilter'
    sx status --json | jq -e "[.nodes[] | select(.role == \"$1\") | $sel] |
        if all(.ready) then (map(.keys) | add) else error(\"not ready\") end"
}
entries_total() {
    sx status --json | jq '[.nodes[] | select(.role == "index") | .status.partitions[].entries] | add'
}

# "Apple" lives in index partition 101 (i1), "Zebra" in 102 (i2).
seq 1 "$N" | awk '{ printf "{\"id\": %d, \"g\": \"Apple\", \"n\": %d}\n", $1, $1 }' | sx load kv >/dev/null
expect_eq "items after the load" "$N" "$(items_total)"

sx query kv by_g --consistency strong --limit 1 >/dev/null   # the index has caught up
expect_eq "index entries after the load" "$N" "$(entries_total)"

for n in s1 s2 i1 i2; do lc kill "$n" >/dev/null; done
for n in i1 i2 s1 s2; do lc start "$n" >/dev/null; done
wait_for "the storage nodes' filters ready after the restart" 60 filter_keys storage
wait_for "the index partitions' filters ready after the restart" 60 filter_keys index
keys="$(filter_keys storage)"
[ "$keys" -eq "$N" ] || fail "the rebuilt storage filters hold $keys keys, not the $N stored"
keys="$(filter_keys index)"
[ "$keys" -eq "$N" ] || fail "the rebuilt index filters hold $keys keys, not the $N entries"
pass "restarted nodes rebuilt their filters from disk: $N fact keys, $N entry keys"

seq 1 "$N" | awk '{ printf "{\"id\": %d, \"g\": \"Apple\", \"n\": %d}\n", $1, 1000 + $1 }' | sx load kv >/dev/null
expect_eq "items after rewriting a projected attribute" "$N" "$(items_total)"
sx query kv by_g --consistency strong --limit 1 >/dev/null
got="$(sx query kv by_g --eq '["Apple"]' --consistency eventual --limit 100000 | jq -r 'select(.n == 1000 + .id) | .id' | wc -l)"
expect_eq "index entries holding the rewrite (covering)" "$N" "$got"
expect_eq "index entries after rewriting a projected attribute" "$N" "$(entries_total)"

seq 1 "$N" | awk '{ printf "{\"id\": %d, \"g\": \"Zebra\", \"n\": %d}\n", $1, -$1 }' | sx load kv >/dev/null
expect_eq "items after rewriting every item" "$N" "$(items_total)"
got="$(sx query kv by_g --eq '["Apple"]' --consistency strong | ids_of | wc -l)"
expect_eq "items left under Apple (strong)" 0 "$got"
got="$(sx query kv by_g --eq '["Zebra"]' --consistency strong --limit 100000 | jq -r 'select(.n == -.id) | .id' | wc -l)"
expect_eq "items under Zebra holding their rewrite (strong)" "$N" "$got"
# eventual + projection all reads the index alone: no entry of the old values
got="$(sx query kv by_g --consistency eventual --limit 100000 | jq -r '.g' | sort | uniq -c | awk '{print $2 "=" $1}' | tr '\n' ' ')"
expect_eq "the index's own entries" "Zebra=$N " "$got"
expect_eq "live index entries after the move" "$N" "$(entries_total)"

# rewrites add nothing (the keys are in the filters already)
expect_eq "storage filter keys after the rewrites" "$N" "$(filter_keys storage)"
expect_eq "index filter keys after the rewrites and moves" "$((2 * N))" "$(filter_keys index)"

spared() { # ROLE: reads the ROLE's filters spared so far
    local sel='.status.keyfilter'
    [ "$1" = index ] && sel='.status.partitions[].keyfilter'
    sx status --json | jq "[.nodes[] | select(.role == \"$1\") | $sel.spared] | add"
}
s0="$(spared storage)"
i0="$(spared index)"
seq 1001 1100 | awk '{ printf "{\"id\": %d, \"g\": \"Apple\", \"n\": %d}\n", $1, $1 }' | sx load kv >/dev/null
expect_eq "items after 100 new ids" "$((N + 100))" "$(items_total)"
expect_eq "storage filter keys after 100 new ids" "$((N + 100))" "$(filter_keys storage)"
sx query kv by_g --consistency strong --limit 1 >/dev/null
expect_eq "index filter keys after 100 new ids" "$((2 * N + 100))" "$(filter_keys index)"
# each new id was proven new without a read, but for the filter's false
# positives (~1 % here): at least 90 of 100
s1="$(spared storage)"
i1="$(spared index)"
[ $((s1 - s0)) -ge 90 ] || fail "the storage filters spared $((s1 - s0)) reads for 100 new ids"
[ $((i1 - i0)) -ge 90 ] || fail "the index filters spared $((i1 - i0)) reads for 100 new entries"
pass "100 new ids: $((s1 - s0)) fact reads and $((i1 - i0)) entry reads spared"
