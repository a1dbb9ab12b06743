#!/usr/bin/env bash
# cli.sh BINDIR — the `shardex` CLI's contract against a real local
# cluster (deploy/local-cluster): JSON round trip of nested values, binaries
# and doubles; exit codes 0/1/2/3 with one-line messages; --help on every
# command; load with bad lines; query without --limit following tokens over
# several pages and --limit N returning exactly min(N, matches); --explain;
# scan --where; router failover with a dead first router; --timeout and
# SHARDEX_TIMEOUT_MS (checked; a call to a stopped router ends after that
# wait, and says so); a write whose deadline is within the clock skew
# refused, not applied; status with index lag. Exits 77 (skipped) when the servers are not built.
set -uo pipefail

bindir="${1:?usage: cli.sh BINDIR}"
bindir="$(cd "$bindir" && pwd -P)"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
lc="$repo/deploy/local-cluster"
for f in "$lc" "$bindir/shardex-node" "$bindir/shardex-router" "$bindir/shardex"; do
    [ -x "$f" ] || { echo "cli.sh: $f is missing; skipping" >&2; exit 77; }
done
command -v jq >/dev/null || { echo "cli.sh: jq is missing; skipping" >&2; exit 77; }

dir="$(mktemp -d "${TMPDIR:-/tmp}/shardex-cli.XXXXXX")"
status=1
cleanup() {
    SHARDEX_BIN="$bindir" "$lc" down --dir "$dir" >/dev/null 2>&1 || true
    if [ "$status" -eq 0 ]; then rm -rf "$dir"; else echo "cli.sh: logs in $dir/logs" >&2; fi
}
trap cleanup EXIT
trap 'exit 143' TERM INT     # a signal still runs the cleanup

fail() { echo "FAIL [cli.sh]: $*" >&2; exit 1; }
pass() { echo "ok   [cli.sh]: $*"; }
S="$bindir/shardex"
# run EXPECTED-RC ARGS...: runs the CLI, checks its exit code; OUT/ERR hold
# its stdout/stderr.
run() {
    local want="$1"; shift
    local rc=0
    OUT="$("$S" "$@" 2>"$dir/err")" || rc=$?
    ERR="$(cat "$dir/err")"
    [ "$rc" -eq "$want" ] || fail "shardex $* exited $rc, expected $want (stderr: $ERR)"
}
one_line() {
    [ "$(printf '%s\n' "$ERR" | grep -c .)" -eq 1 ] || fail "expected one line on stderr, got: $ERR"
    grep -q '^shardex: ' <<<"$ERR" || fail "stderr should start with 'shardex: ': $ERR"
}

# a clock skew of 5 s (the default is 100 ms), so that a write with a 1 s
# timeout is refused by its storage node well before the client gives up
SHARDEX_BIN="$bindir" "$lc" up --replicas 1 --dir "$dir" >/dev/null && "$lc" down --dir "$dir" >/dev/null &&
    jq '.max_clock_skew_ms = 5000' "$dir/cluster.json" >"$dir/c.tmp" &&
    mv "$dir/c.tmp" "$dir/cluster.json" || fail "cannot set max_clock_skew_ms"
out="$(SHARDEX_BIN="$bindir" "$lc" up --replicas 1 --dir "$dir")" || fail "local-cluster up failed: $out"
export SHARDEX_ROUTER="$(tail -n 1 <<<"$out")"
echo "cli.sh: router $SHARDEX_ROUTER"

# ---- usage and help ----
run 2
one_line
run 2 frobnicate
one_line
run 2 query onlytable
one_line
run 2 query t i --limit -3
one_line
run 2 put t '{"id":'
one_line
for c in "table" "index" "put" "get" "delete" "load" "query" "scan" "status"; do
    run 0 $c --help
    grep -q '^usage: shardex' <<<"$OUT" || fail "$c --help printed no usage: $OUT"
done
pass "usage errors exit 2 with one line; --help on every command"

# ---- tables, indexes, round trip ----
run 0 table create people --key id
run 3 table create people --key id
one_line
grep -q "people" <<<"$ERR" || fail "duplicate table message does not name it: $ERR"
run 0 index create people by_town --on town,lastname --project all
run 0 index create people by_n --on n
item='{"id":1,"town":"Redmond","lastname":"Smith","score":0.1,"one":1.0,"neg":-7,"big":9007199254740993,"ok":true,"nil":null,"tags":["a",2,[3.5,{"x":[]}]],"meta":{"k":{"$bin":"AAEC/w=="},"deep":{"a":{"b":"c"}}},"s":"q\"\\\n\u00e9"}'
run 0 put people "$item"
run 0 get people '{"id":1}'
[ "$(jq -cS . <<<"$OUT")" = "$(jq -cS . <<<"$item")" ] || fail "round trip changed the item: $OUT"
grep -q '"one":1.0' <<<"$OUT" || fail "1.0 should stay a double: $OUT"
grep -q '"score":0.1[,}]' <<<"$OUT" || fail "0.1 should print as 0.1: $OUT"
grep -q '"big":9007199254740993' <<<"$OUT" || fail "int64 beyond 2^53 lost precision: $OUT"
pass "put/get round trip of nested values, binary, doubles, big ints"
run 1 get people '{"id":2}'
run 3 get nosuch '{"id":1}'
one_line
run 1 delete people '{"id":2}'
run 3 put people '{"town":"x"}'
one_line
pass "exit codes: absent 1, errors 3 with one line"

# ---- load, with bad lines ----
for i in $(seq 1 250); do
    t=$([ $((i % 2)) -eq 0 ] && echo Kent || echo Seattle)
    echo "{\"id\":$((100 + i)),\"town\":\"$t\",\"lastname\":\"L$((i % 7))\",\"n\":$i}"
done > "$dir/good.jsonl"
{ head -n 120 "$dir/good.jsonl"; echo '{broken'; echo '[1,2]'; echo; tail -n 130 "$dir/good.jsonl"; } > "$dir/bad.jsonl"
run 0 load people "$dir/good.jsonl"
[ "$OUT" = "250" ] || fail "load printed '$OUT', expected 250"
run 3 load people < "$dir/bad.jsonl"
[ "$OUT" = "250" ] || fail "load with bad lines printed '$OUT', expected 250"
grep -q 'line 121' <<<"$ERR" && grep -q 'line 122' <<<"$ERR" || fail "bad line numbers missing: $ERR"
grep -q '250 items stored' <<<"$ERR" || fail "load should say how many were stored: $ERR"
pass "load: count printed, bad lines 121 and 122 reported, exit 3"
# a line that parses but the store refuses (no key), inside a batch: the
# other lines of the batch and of the file are still stored
for i in $(seq 1 300); do
    if [ "$i" -eq 150 ]; then echo '{"town":"Nowhere"}'; continue; fi
    echo "{\"id\":$((1000 + i)),\"town\":\"Kent\",\"n\":$i}"
done > "$dir/nokey.jsonl"
run 0 table create loadnk --key id
run 3 load loadnk "$dir/nokey.jsonl"
[ "$OUT" = "299" ] || fail "load with a keyless line printed '$OUT', expected 299: $ERR"
grep -q 'line 150' <<<"$ERR" || fail "the refused line's number is missing: $ERR"
grep -q '1 bad line; 299 items stored' <<<"$ERR" || fail "load's summary: $ERR"
run 0 get loadnk '{"id":1300}'
pass "load: a line the store refuses is reported with its number, the others stored"

# ---- queries: all pages, limits, explain ----
deadline=$((SECONDS + 30))   # the indexes answer once their backfill is done
until "$S" query people by_town --limit 1 >/dev/null 2>&1 && "$S" query people by_n --limit 1 >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || fail "indexes not ready after 30 s"
    sleep 0.1
done
want="$(jq -s -r '[.[] | select(.town == "Kent")] | sort_by(.lastname, .id) | .[].id' "$dir/good.jsonl")"
run 0 query people by_town --eq '["Kent"]' --consistency strong
got="$(jq -r .id <<<"$OUT")"
[ "$got" = "$want" ] || fail "Kent query differs from the expected 125 ids in index order"
all=$(jq -s 'length' <<<"$(cat "$dir/good.jsonl")")
run 0 query people by_town
[ "$(grep -c . <<<"$OUT")" -eq $((all + 1)) ] || fail "full index query returned $(grep -c . <<<"$OUT") items, expected $((all + 1)) (several pages)"
for n in 0 1 99 100 101 251 1000; do
    run 0 query people by_town --limit $n
    exp=$(( n < all + 1 ? n : all + 1 ))
    [ "$(grep -c . <<<"$OUT")" -eq "$exp" ] || fail "--limit $n returned $(grep -c . <<<"$OUT"), expected $exp"
done
run 0 query people by_town --eq '["Kent"]' --desc --limit 3
[ "$(jq -r .id <<<"$OUT")" = "$(tail -n 3 <<<"$want" | tac)" ] || fail "--desc --limit 3: $OUT"
run 0 query people by_town --eq '["Kent"]' --prefix L3 --attrs n
[ "$(jq -c 'keys' <<<"$OUT" | sort -u)" = '["id","n"]' ] || fail "--attrs n should give id and n only: $OUT"
run 0 query people by_town --eq '["Seattle","L1"]' --explain --consistency verified
grep -q 'index partitions' <<<"$ERR" && grep -q 'fact partitions' <<<"$ERR" \
    && grep -q 'entries read' <<<"$ERR" && grep -q 'stale' <<<"$ERR" && grep -q 'covering' <<<"$ERR" \
    || fail "--explain output incomplete: $ERR"
run 0 query people primary --eq '[1]'
[ "$(jq -r .id <<<"$OUT")" = "1" ] || fail "primary query: $OUT"
run 3 query people nosuch
one_line
run 0 table create events --key user --sort ts
for u in ann bob; do
    for ts in 5 1 9 3 7; do run 0 put events "{\"user\":\"$u\",\"ts\":$ts,\"what\":\"e$ts\"}"; done
done
run 0 query events primary --eq '["ann"]'
[ "$(jq -r .ts <<<"$OUT" | tr '\n' ' ')" = "1 3 5 7 9 " ] || fail "primary query order: $OUT"
run 0 query events primary --eq '["bob"]' --from 3 --to 7 --desc
[ "$(jq -r .ts <<<"$OUT" | tr '\n' ' ')" = "7 5 3 " ] || fail "primary range desc: $OUT"
run 0 query events primary --eq '["bob"]' --limit 2
[ "$(jq -r .ts <<<"$OUT" | tr '\n' ' ')" = "1 3 " ] || fail "primary limit: $OUT"
run 0 get events '{"user":"ann","ts":7}'
[ "$(jq -r .what <<<"$OUT")" = "e7" ] || fail "get with a sort key: $OUT"
pass "query: all pages, exact limits, desc, attrs, explain, primary"

# ---- scan ----
run 0 scan people --where '{"town":"Seattle","lastname":"L2"}'
want="$(jq -s -r '[.[] | select(.town == "Seattle" and .lastname == "L2")] | .[].id' "$dir/good.jsonl" | sort -n)"
[ "$(jq -r .id <<<"$OUT" | sort -n)" = "$want" ] || fail "scan --where differs"
run 0 scan people
[ "$(grep -c . <<<"$OUT")" -eq $((all + 1)) ] || fail "scan returned $(grep -c . <<<"$OUT") items"
pass "scan with and without --where"

# ---- failover and status ----
dead="tcp://127.0.0.1:1"
start=$SECONDS
OUT="$("$S" -r "$dead,$SHARDEX_ROUTER" get people '{"id":1}')" || fail "failover get failed"
[ $((SECONDS - start)) -lt 5 ] || fail "failover took $((SECONDS - start)) s"
pass "a dead first router is skipped"
# ---- the call timeout ----
run 2 --timeout abc status
grep -q -- "--timeout must be a number of milliseconds" <<<"$ERR" || fail "bad --timeout: $ERR"
OUT="$(SHARDEX_TIMEOUT_MS=0 "$S" status 2>&1)" && fail "SHARDEX_TIMEOUT_MS=0 accepted"
grep -q "SHARDEX_TIMEOUT_MS must be" <<<"$OUT" || fail "bad SHARDEX_TIMEOUT_MS: $OUT"
run 0 --timeout 5000 get people '{"id":1}'
r1pid="$(cat "$dir/pids/r1.pid")"
kill -STOP "$r1pid"
rc=0
ERR="$("$S" --timeout 300 get people '{"id":1}' 2>&1)" || rc=$?
OUT2="$(SHARDEX_TIMEOUT_MS=400 "$S" get people '{"id":1}' 2>&1)" || true
kill -CONT "$r1pid"
[ "$rc" -eq 3 ] && grep -q "timed out after 300 ms" <<<"$ERR" ||
    fail "--timeout 300 against a stopped router: exit $rc, $ERR"
grep -q "timed out after 400 ms" <<<"$OUT2" || fail "SHARDEX_TIMEOUT_MS=400: $OUT2"
pass "--timeout and SHARDEX_TIMEOUT_MS: checked, and the wait they set is the one that ends a call"
# a write whose deadline (send time + timeout) is within the cluster's
# max_clock_skew_ms (5000 here) is refused by its storage node, not applied,
# and counted once
run 3 --timeout 1000 put people '{"id":77,"name":"late"}'
one_line
grep -q "not applied: .*max_clock_skew_ms" <<<"$ERR" || fail "a put past its deadline: $ERR"
run 3 --timeout 1000 delete people '{"id":1}'
grep -q "not applied: .*max_clock_skew_ms" <<<"$ERR" || fail "a delete past its deadline: $ERR"
run 1 get people '{"id":77}'
run 0 get people '{"id":1}'
run 0 status --json
late="$(jq '[.nodes[] | .status.writes_past_deadline // 0] | add' <<<"$OUT")"
[ "$late" -eq 2 ] || fail "status counts $late writes refused past their deadline, expected 2"
pass "a put or delete whose timeout is within the clock skew is refused (SX_EDEADLINE), not applied"

run 0 status
grep -q 'storage' <<<"$OUT" && grep -q 'index' <<<"$OUT" && grep -q 'LAG' <<<"$OUT" \
    || fail "status lacks nodes or lag: $OUT"
run 0 status --json
jq -e '.nodes | length >= 3' <<<"$OUT" >/dev/null || fail "status --json: $OUT"
pass "status"
status=0
