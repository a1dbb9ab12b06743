#!/usr/bin/env bash
# tests/integration/tombstones.sh — a delete's tombstone is collected while no
# storage partition takes writes.
#
# An index partition collects a tombstone once every storage partition has
# reported a version high-water past it; a partition that takes no writes
# has its high-water raised to the clock by its shipper after 10 s idle
# (st_hw_advance), so one delete on a quiet cluster does not leave its
# tombstone for good. Checks: the tombstone appears, then goes with no other
# write, and the index still answers exactly the remaining items.
source "$(dirname "$0")/lib.sh" "$@"

it_cluster_up
W="$IT_DIR/work"
mkdir -p "$W"
sx table create kv --key id
sx index create kv by_grp --on grp --project keys
wait_for "index by_grp ready" 60 index_ready kv by_grp
for ((id = 1; id <= 40; id++)); do
    echo "{\"id\": $id, \"grp\": \"G$((id % 4))\"}"
done >"$W/items.jsonl"
sx load kv "$W/items.jsonl" >/dev/null
strong_count() { [ "$(sx query kv by_grp --consistency strong | ids_of | wc -l)" -eq "$1" ]; }
wait_for "40 items in the index" 60 strong_count 40
tombstones() {
    sx status --json | jq '[.nodes[] | select(.role == "index") | .status.partitions[].tombstones] | add'
}
[ "$(tombstones)" -eq 0 ] || fail "tombstones before any delete: $(tombstones)"
sx delete kv '{"id": 1}' >/dev/null
has_tomb() { [ "$(tombstones)" -ge 1 ]; }
wait_for "the delete's tombstone" 30 has_tomb
pass "deleting item 1 left a tombstone in the index"
no_tomb() { [ "$(tombstones)" -eq 0 ]; }
wait_for "the tombstone collected with no other write" 60 no_tomb
pass "the tombstone was collected while no storage partition took writes"
sx query kv by_grp --consistency strong | ids_of | sort -n >"$W/ids"
[ "$(wc -l <"$W/ids")" -eq 39 ] && ! grep -qx 1 "$W/ids" ||
    fail "the index does not answer exactly items 2..40: $(tr '\n' ' ' <"$W/ids")"
pass "the index answers exactly the 39 remaining items"
