#!/usr/bin/env bash
# tests/integration/load.sh — `shardex load`, the bulk loader: many batches
# in flight, and still the file's order for every key (a key's last line
# wins, with keys repeated across batches that are in flight together, with
# and without a sort key); a paused stream's lines stored before it ends;
# bad lines reported by number while every good
# line is stored (a garbage line, and an item the store refuses, which
# sends its batch again item by item); bad options; an unknown table; and a
# load that stops when a storage node is down, saying where, and the same
# load again once it is back.
# (On one router the batches of one load happen to arrive in order, so the
# order checks pass with or without load.c's wait for keys in flight: they
# pin the behaviour; the wait is what guarantees it under retries to another
# router and the router's concurrent handling.)
source "$(dirname "$0")/lib.sh" "$@"

it_cluster_up
sx table create kv --key id
sx table create ks --key u --sort n

# expect_last TABLE FILE KEYJQ [SELECT]: every key's stored item is the
# file's last line for it (KEYJQ: the key as a jq expression; SELECT: a jq
# condition picking the table's items the file wrote, default all).
expect_last() {
    local exp got
    exp="$(jq -cS -s "group_by($3) | map(last) | .[]" "$2" | sort)"
    got="$(sx scan "$1" | jq -cS "select(${4:-true})" | sort)"
    [ "$(wc -l <<<"$exp")" -ge 1000 ] || fail "too few distinct keys in $2"
    expect_eq "$1: every key holds its last line ($(wc -l <<<"$exp") keys)" "$exp" "$got"
}

# ---- the file's order, many batches in flight ------------------------------------
# 60,000 lines over 2,500 ids: batches of 500, 8 in flight, each sharing its
# keys with the batches in flight before it.
seq 0 59999 | awk '{ printf "{\"id\": %d, \"v\": %d, \"g\": \"g%d\"}\n", $1 % 2500, $1, $1 % 7 }' \
    >"$IT_DIR/rep.jsonl"
out="$(sx load kv "$IT_DIR/rep.jsonl" --batch 500 --inflight 8)"
[ "$out" = 60000 ] || fail "load printed '$out', expected 60000"
pass "load of 60,000 lines printed 60000"
expect_last kv "$IT_DIR/rep.jsonl" .id

# with a sort key: string partition keys, integer sort keys (and the
# defaults: batches of 2000, 16 in flight)
seq 0 49999 | awk '{ printf "{\"u\": \"u%d\", \"n\": %d, \"v\": %d}\n", $1 % 7, $1 % 300, $1 }' \
    >"$IT_DIR/sk.jsonl"
[ "$(sx load ks "$IT_DIR/sk.jsonl")" = 50000 ] || fail "load into ks did not print 50000"
expect_last ks "$IT_DIR/sk.jsonl" '[.u, .n]'

# ---- a stream that pauses: what was read is stored before the input ends ------
mkfifo "$IT_DIR/feed"
sx load kv "$IT_DIR/feed" >"$IT_DIR/feed.out" 2>&1 &
feeder=$!
exec 7>"$IT_DIR/feed"
echo '{"id": 9000, "v": "streamed"}' >&7
got_streamed() { [ "$(sx get kv '{"id": 9000}' | jq -r .v)" = streamed ]; }
wait_for "a streamed line stored while its input stays open" 30 got_streamed
echo '{"id": 9001, "v": "streamed"}' >&7
exec 7>&-
wait "$feeder" || fail "the streamed load failed: $(cat "$IT_DIR/feed.out")"
[ "$(cat "$IT_DIR/feed.out")" = 2 ] || fail "the streamed load printed '$(cat "$IT_DIR/feed.out")'"
pass "a stream's line is stored while its input stays open; the load ends at its end"

# ---- bad lines: reported by number, the good ones stored -------------------------
# line 3: not JSON; line 1502: no key attribute (refused by the store, so its
# batch is sent again item by item); the other 2,998 lines are good.
{
    seq 10000 10001 | awk '{ printf "{\"id\": %d, \"v\": 1}\n", $1 }'
    echo '{"id": 10002, garbage'
    seq 10003 11500 | awk '{ printf "{\"id\": %d, \"v\": 1}\n", $1 }'
    echo '{"v": "no key"}'
    seq 11502 13000 | awk '{ printf "{\"id\": %d, \"v\": 1}\n", $1 }'
} >"$IT_DIR/bad.jsonl"
rc=0
out="$(sx load kv "$IT_DIR/bad.jsonl" --batch 1000 2>"$IT_DIR/bad.err")" || rc=$?
[ "$rc" -eq 3 ] || fail "load with bad lines exited $rc, expected 3"
[ "$out" = 2999 ] || fail "load with bad lines printed '$out', expected 2999"
grep -q '^shardex: line 3:' "$IT_DIR/bad.err" || fail "line 3 not reported: $(cat "$IT_DIR/bad.err")"
grep -q '^shardex: line 1502:' "$IT_DIR/bad.err" || fail "line 1502 not reported: $(cat "$IT_DIR/bad.err")"
grep -q '2 bad lines; 2999 items stored' "$IT_DIR/bad.err" || fail "no summary: $(cat "$IT_DIR/bad.err")"
n="$(sx scan kv --where '{"v": 1}' | jq -r .id | awk '$1 >= 10000 && $1 <= 13000' | wc -l)"
[ "$n" -eq 2999 ] || fail "$n of the 2,999 good lines are stored"
pass "bad lines 3 and 1502 reported, exit 3, the 2,999 good lines stored"

# ---- bad options and an unknown table -----------------------------------------------
for a in "--batch 0" "--batch 10001" "--inflight 0" "--inflight 65" "--batch x"; do
    # shellcheck disable=SC2086
    sx_rc load kv "$IT_DIR/rep.jsonl" $a 2>/dev/null
    [ "$RC" -eq 2 ] || fail "load $a exited $RC, expected 2 (usage)"
done
pass "out-of-range --batch and --inflight are usage errors"
rc=0
err="$(sx load nosuchtable "$IT_DIR/rep.jsonl" 2>&1 >/dev/null)" || rc=$?
[ "$rc" -eq 3 ] && grep -qi 'table' <<<"$err" || fail "unknown table: exit $rc, '$err'"
pass "unknown table -> exit 3: $err"

# ---- a storage node down: the load stops and says where -------------------------
# (s1 also hosts the catalog: the loader then sends one batch at a time)
lc kill s1 >/dev/null
rc=0
"$IT_CLI" -r "$IT_URL" --timeout 2000 load kv "$IT_DIR/rep.jsonl" >"$IT_DIR/down.out" \
    2>"$IT_DIR/down.err" || rc=$?
[ "$rc" -eq 3 ] || fail "load with s1 down exited $rc, expected 3"
grep -q 'load stopped at line [0-9]*: [0-9]* items stored' "$IT_DIR/down.err" ||
    fail "no stop message: $(cat "$IT_DIR/down.err")"
pass "load with s1 down: exit 3, $(grep 'load stopped' "$IT_DIR/down.err")"
lc start s1 >/dev/null
wait_for "s1's partitions serve again" 30 sx scan kv
# The failed load may have stored some of its first lines (those of s2's
# partitions), older values for their keys; loading the file again, as the
# message says, is harmless and ends with every key's last line.
[ "$(sx load kv "$IT_DIR/rep.jsonl")" = 60000 ] || fail "the second load did not store 60000"
expect_last kv "$IT_DIR/rep.jsonl" .id '.id < 2500'
n="$(sx scan kv | jq -r 'select(.id >= 10000) | .id' | wc -l)"
[ "$n" -eq 2999 ] || fail "after s1's restart, $n of the 2,999 good lines of bad.jsonl are stored"
pass "after s1's restart, the 2,999 good lines of bad.jsonl are all there"
