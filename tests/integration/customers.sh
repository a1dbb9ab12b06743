#!/usr/bin/env bash
# tests/integration/customers.sh — the customers example end to end: a table,
# an index on (town, lastname) spread over two index partitions, the seeds'
# customers loaded, and the Quick start's two questions answered exactly.
# Expectations are computed independently from deploy/examples/customers.jsonl
# with jq (index order = town, then lastname, then id; bytewise).
# Also: get of an absent key exits 1, index list shows ready, --explain names
# one index partition for Redmond, backfill of an index created after the
# load, the sparse rule, limits, descending order, and a `primary` query on a
# table with a sort key.
source "$(dirname "$0")/lib.sh" "$@"

EX="$IT_REPO/deploy/examples/customers.jsonl"
it_cluster_up

sx table create customers --key id
sx index create customers town_lastname --on town,lastname --project lastname,firstname,town
n_lines=$(grep -c . "$EX")
out="$(sx load customers "$EX")"
grep -qw "$n_lines" <<<"$out" || fail "load printed '$out', expected the count $n_lines"
pass "load printed the count $n_lines"

wait_for "index town_lastname ready" 60 index_ready customers town_lastname
line="$(sx index list customers | grep -E '^[[:space:]]*town_lastname[[:space:]]')"
grep -q 'town' <<<"$line" && grep -q 'lastname' <<<"$line" && grep -qw ready <<<"$line" \
    || fail "index list line lacks attributes or state: $line"
pass "index list: $line"

# ---- the two Quick start questions -------------------------------------------
exp_redmond="$(jq -s -r '[.[] | select(.town == "Redmond")] | sort_by(.lastname, .id) | .[].id' "$EX")"
exp_s="$(jq -s -r '[.[] | select(.town == "Redmond" and (.lastname | startswith("S")))]
                   | sort_by(.lastname, .id) | .[].id' "$EX")"
[ "$(wc -l <<<"$exp_redmond")" -ge 10 ] || fail "example file has too few Redmond customers"
[ "$(wc -l <<<"$exp_s")" -ge 3 ] || fail "example file has too few Redmond S customers"

for c in strong verified; do
    got="$(sx query customers town_lastname --eq '["Redmond"]' --consistency "$c" | ids_of)"
    expect_eq "Redmond customers, $c, in index order" "$exp_redmond" "$got"
    got="$(sx query customers town_lastname --eq '["Redmond"]' --prefix S --consistency "$c" | ids_of)"
    expect_eq "Redmond customers with last name S*, $c" "$exp_s" "$got"
done

# whole items come back: compare one against the file
got="$(sx query customers town_lastname --eq '["Redmond"]' --prefix Sato | jq -cS .)"
want="$(jq -cS 'select(.id == 8)' "$EX")"
expect_eq "query returns the whole item" "$want" "$got"

# covering eventual query with --attrs within the projection
got="$(sx query customers town_lastname --eq '["Redmond", "Smith"]' --attrs firstname \
        --consistency eventual | jq -r '"\(.id) \(.firstname)"')"
want="$(jq -s -r '[.[] | select(.town == "Redmond" and .lastname == "Smith")] | sort_by(.id)
                  | .[] | "\(.id) \(.firstname)"' "$EX")"
expect_eq "eventual covering query with --attrs" "$want" "$got"

# descending and limit
got="$(sx query customers town_lastname --eq '["Redmond"]' --desc | ids_of)"
expect_eq "descending order" "$(tac <<<"$exp_redmond")" "$got"
got="$(sx query customers town_lastname --eq '["Redmond"]' --limit 4 | ids_of)"
expect_eq "limit 4" "$(head -n 4 <<<"$exp_redmond")" "$got"

# k = 0: the whole index, in (town, lastname, id) order; the item without a
# town is not in the index (sparse)
got="$(sx query customers town_lastname | ids_of)"
want="$(jq -s -r '[.[] | select(has("town") and has("lastname"))] | sort_by(.town, .lastname, .id) | .[].id' "$EX")"
expect_eq "whole index in index order, sparse" "$want" "$got"

# a range on the first attribute
got="$(sx query customers town_lastname --from '"Kirkland"' --to '"Redmond"' | ids_of)"
want="$(jq -s -r '[.[] | select(has("lastname") and .town >= "Kirkland" and .town <= "Redmond")]
                  | sort_by(.town, .lastname, .id) | .[].id' "$EX")"
expect_eq "inclusive range Kirkland..Redmond on town" "$want" "$got"

# ---- explain -------------------------------------------------------------------
err="$(sx query customers town_lastname --eq '["Redmond"]' --explain 2>&1 >/dev/null)"
echo "$err"
ipl="$(grep -i 'index part' <<<"$err" | head -n 1)"
[ -n "$ipl" ] || fail "--explain does not mention index partitions: $err"
nparts="$(sed 's/^[^:]*://' <<<"$ipl" | grep -oE '[0-9]+' | wc -l)"
[ "$nparts" -eq 1 ] || fail "--explain should name exactly 1 index partition for Redmond: $ipl"
pass "--explain names 1 index partition for Redmond ($ipl)"
err="$(sx query customers town_lastname --explain 2>&1 >/dev/null)"
ipl="$(grep -i 'index part' <<<"$err" | head -n 1)"
nparts="$(sed 's/^[^:]*://' <<<"$ipl" | grep -oE '[0-9]+' | wc -l)"
[ "$nparts" -eq 2 ] || fail "--explain should name 2 index partitions for the whole index: $ipl"
pass "--explain names 2 index partitions for the whole index"

# ---- point reads ---------------------------------------------------------------
got="$(sx get customers '{"id": 1}' | jq -cS .)"
expect_eq "get id 1" "$(jq -cS 'select(.id == 1)' "$EX")" "$got"
sx_rc get customers '{"id": 999999}'
[ "$RC" -eq 1 ] || fail "get of an absent key exited $RC, expected 1"
pass "get of an absent key exits 1"

# ---- backfill: an index created after the load ---------------------------------
sx index create customers by_lastname --on lastname --project keys
wait_for "index by_lastname ready (backfill)" 60 index_ready customers by_lastname
got="$(sx query customers by_lastname --eq '["Smith"]' | ids_of)"
want="$(jq -s -r '[.[] | select(.lastname == "Smith")] | sort_by(.id) | .[].id' "$EX")"
expect_eq "backfilled index by_lastname finds every Smith" "$want" "$got"

# ---- delete updates the index --------------------------------------------------
sx delete customers '{"id": 4}'
sx_rc get customers '{"id": 4}'
[ "$RC" -eq 1 ] || fail "get after delete exited $RC, expected 1"
got="$(sx query customers town_lastname --eq '["Redmond"]' --consistency strong | ids_of)"
expect_eq "delete removes the customer from the Redmond answer" "$(grep -vx 4 <<<"$exp_redmond")" "$got"

# ---- primary queries on a table with a sort key --------------------------------
sx table create orders --key customer --sort n
for n in 5 3 9 1 7 2 8; do
    sx put orders "{\"customer\": \"c1\", \"n\": $n, \"total\": $((n * 10))}"
done
sx put orders '{"customer": "c2", "n": 4, "total": 1}'
sx put orders '{"customer": "c0", "n": 6, "total": 1}'
got="$(sx query orders primary --eq '["c1"]' | jq -r '.n' | tr '\n' ' ')"
expect_eq "primary query returns sort order" "1 2 3 5 7 8 9 " "$got"
got="$(sx query orders primary --eq '["c1"]' --desc --limit 3 | jq -r '.n' | tr '\n' ' ')"
expect_eq "primary query, descending, limit 3" "9 8 7 " "$got"
got="$(sx query orders primary --eq '["c1"]' --from 3 --to 7 | jq -r '.n' | tr '\n' ' ')"
expect_eq "primary query, inclusive range 3..7" "3 5 7 " "$got"
err="$(sx query orders primary --eq '["c1"]' --explain 2>&1 >/dev/null)"
fpl="$(grep -i 'fact part' <<<"$err" | head -n 1)"
[ -n "$fpl" ] || fail "--explain does not mention fact partitions: $err"
nparts="$(sed 's/^[^:]*://' <<<"$fpl" | grep -oE '[0-9]+' | wc -l)"
[ "$nparts" -eq 1 ] || fail "primary query should touch 1 fact partition: $fpl"
pass "primary query touches 1 fact partition ($fpl)"

# ---- status --------------------------------------------------------------------
sx status >/dev/null || fail "shardex status failed"
st="$(lc status)"
[ "$(grep -c running <<<"$st")" -eq 5 ] || fail "not every process is running: $st"
pass "all 5 processes still running"
# Every put above went through a storage node's group committer, and every
# index entry through an index partition's: their figures count them.
js="$(sx status --json)"
sgroups="$(jq '[.nodes[] | select(.role == "storage") | .status.commits.groups] | add' <<<"$js")"
sops="$(jq '[.nodes[] | select(.role == "storage") | .status.commits.ops] | add' <<<"$js")"
iops="$(jq '[.nodes[] | select(.role == "index") | .status.partitions[].commits.ops] | add' <<<"$js")"
[ "$sgroups" -ge 1 ] && [ "$sops" -ge "$sgroups" ] ||
    fail "storage committers report $sgroups groups of $sops ops: $js"
[ "$iops" -ge 1 ] || fail "index committers report $iops shipped records: $js"
# (storage only: no write runs now, so its figures hold still; an index
# partition's may still be moving with the shippers' heartbeats, and its
# groups may carry only watermarks)
jq -e '[.nodes[] | select(.role == "storage") | .status.commits |
        .max_sync_us <= .sync_us and .groups <= .ops] | all' <<<"$js" >/dev/null ||
    fail "a storage committer's figures disagree (longest sync above the total, or more groups than ops): $js"
human="$(sx status)"
[ "$(grep -cE '^s[12] +all ' <<<"$human")" -eq 2 ] ||
    fail "status does not show both storage committers: $human"
pass "status: committers report $sgroups storage groups ($sops ops), $iops index records"

# Every daemon names its threads (top -H, perf, gdb show them).
names() { cat /proc/"$(cat "$IT_DIR/pids/$1.pid")"/task/*/comm 2>/dev/null | sort -u | tr '\n' ' '; }
for want in "s1 sx-commit" "s1 sx-ship" "s1 sx-leveldb" "s1 sx-worker" "i1 sx-ix-commit" \
            "i1 sx-ix-sync" "i1 sx-leveldb" "$IT_ROUTER_PROC sx-fibers"; do
    set -- $want
    grep -qw -- "$2" <<<"$(names "$1")" || fail "$1 has no thread named $2: $(names "$1")"
done
pass "threads named: s1: $(names s1)"

# Shipped records leave the outboxes once the index partitions report them
# synced (I_APPLY's synced: the shippers are answered before the sync, and
# delete only what a later answer says is durable).
outboxes_empty() {
    sx status --json | jq -e '[.nodes[] | select(.role == "storage") | .status.partitions[].outbox]
                              | length > 0 and all(. == 0)'
}
wait_for "every storage partition's outbox empty" 30 outboxes_empty
pass "outboxes empty: every shipped record was deleted once synced at its index partition"
