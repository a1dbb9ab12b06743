#!/usr/bin/env bash
# tests/integration/crash.sh — kill -9 during a write load.
#
# A background writer loads batches of items (new ids, plus rewrites of
# earlier ids that move them between index partitions or out of the index),
# recording every attempt and which batches were acknowledged. During the
# load one index node and then one storage node are killed with SIGKILL, and
# both are restarted. Then:
#   - every acknowledged item is readable with `get`, and an item whose last
#     write was acknowledged holds exactly that write;
#   - the index converges to the facts: a strong query over the whole index
#     returns exactly the stored items that have the indexed attribute, and
#     the index's own entries (eventual, covering) equal the facts' values;
#   - every acknowledged item with the attribute is among them;
#   - the killed nodes held acknowledged writes: entries in i1's index
#     range, and items in s2's storage partitions (found by a primary-key
#     query's explain), written by batches acknowledged before each kill;
#     those items are readable after s2's restart.
source "$(dirname "$0")/lib.sh" "$@"

it_cluster_up
# shellcheck source=tests/integration/chaos_lib.sh
source "$(dirname "$0")/chaos_lib.sh"
chaos_start

wait_for "4 acknowledged batches" 60 acked_at_least 4
cp "$W/acked" "$W/acked_before_i1"      # acknowledged before the kill, all of them
lc kill i1
pass "killed index node i1 after $(acked_count) acknowledged batches"
a=$(acked_count)
wait_for "writes acknowledged while i1 is down" 60 acked_at_least $((a + 2))
cp "$W/acked" "$W/acked_before_s2"
lc kill s2
pass "killed storage node s2 after $(acked_count) acknowledged batches"
t=$(attempted)
wait_for "a write attempted while s2 is down" 60 attempted_at_least $((t + 1))
lc start i1 >/dev/null
lc start s2 >/dev/null
pass "restarted i1 and s2 ($(wc -l <"$W/failed") batch(es) failed meanwhile)"
chaos_finish

# ---- the killed nodes held acknowledged writes ---------------------------------
# (else the checks above prove nothing about what a kill -9 loses)
# i1: index entries of groups in its range (below "M") written by batches
# acknowledged before its kill.
n_i1="$(awk 'NR == FNR { ok[$1] = 1; next } ($1 in ok) && $3 != "-" && $3 < "M"' \
    "$W/acked_before_i1" "$W/attempts" | wc -l)"
((n_i1 > 0)) || fail "no acknowledged write put an entry in i1's range before its kill"
pass "$n_i1 writes acknowledged before i1's kill went to its index partition"

# s2: the ids written by batches acknowledged before its kill that live in
# its storage partitions (a primary-key query's explain names the fact
# partition it read); each must be readable after the restart.
s2_parts=" $(jq -r '.storage[] | select(.name == "s2") | .partitions[].id' \
    "$IT_DIR/cluster.json" | tr '\n' ' ')"
[ "$s2_parts" != " " ] || fail "no storage partitions of s2 in cluster.json"
awk 'NR == FNR { ok[$1] = 1; next } ($1 in ok) { print $2 }' \
    "$W/acked_before_s2" "$W/attempts" | sort -un >"$W/ids_before_s2"
n_s2=0
while read -r id; do
    out="$(sx query kv primary --eq "[$id]" --explain 2>&1 >/dev/null)" ||
        fail "primary-key query of id $id failed: $out"
    part="$(awk '/fact partitions:/ { print $3 }' <<<"$out")"
    [ -n "$part" ] || fail "id $id: the explain names no fact partition: $out"
    [[ "$s2_parts" == *" $part "* ]] || continue
    sx get kv "{\"id\": $id}" >/dev/null || fail "id $id (partition $part on s2) is missing"
    n_s2=$((n_s2 + 1))
done <"$W/ids_before_s2"
((n_s2 > 0)) || fail "none of the $(wc -l <"$W/ids_before_s2") ids acknowledged before s2's kill lives on s2"
pass "$n_s2 of the $(wc -l <"$W/ids_before_s2") ids acknowledged before s2's kill live in its partitions ($(echo $s2_parts)) and are there after its restart"
