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
#   - every acknowledged item with the attribute is among them.
source "$(dirname "$0")/lib.sh" "$@"

it_cluster_up
# shellcheck source=tests/integration/chaos_lib.sh
source "$(dirname "$0")/chaos_lib.sh"
chaos_start

wait_for "4 acknowledged batches" 60 acked_at_least 4
lc kill i1
pass "killed index node i1 after $(acked_count) acknowledged batches"
a=$(acked_count)
wait_for "writes acknowledged while i1 is down" 60 acked_at_least $((a + 2))
lc kill s2
pass "killed storage node s2 after $(acked_count) acknowledged batches"
t=$(attempted)
wait_for "a write attempted while s2 is down" 60 attempted_at_least $((t + 1))
lc start i1 >/dev/null
lc start s2 >/dev/null
pass "restarted i1 and s2 ($(wc -l <"$W/failed") batch(es) failed meanwhile)"
chaos_finish
