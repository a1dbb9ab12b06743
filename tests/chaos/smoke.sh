#!/usr/bin/env bash
# tests/chaos/smoke.sh — chaos.register_smoke: the register workload
# (shardex-chaos-workload) against a local cluster, judged by
# shardex-chaos-check --model register, in two rounds of about 8 s, 4
# clients on 3 keys, each on a table of its own (every key starts absent):
#   1. a healthy cluster: at least 200 ok operations, and the history is
#      linearizable;
#   2. storage node s2 killed with SIGKILL once the load runs, and started
#      again once operations have completed during its outage: the history
#      is linearizable (nothing acknowledged lost, no stale read); the
#      operations on s2's keys fail or end info meanwhile.
# Usage: tests/chaos/smoke.sh BUILD_DIR (binaries in BUILD_DIR/bin).
source "$(dirname "$0")/../integration/lib.sh" "$@"

WL="$SHARDEX_BIN/shardex-chaos-workload"
CHECK="$SHARDEX_BIN/shardex-chaos-check"
for b in "$WL" "$CHECK"; do
    [ -x "$b" ] || fail "$b is missing"
done

WL_PID=""
it_extra_cleanup() {
    if [ -n "$WL_PID" ]; then
        kill "$WL_PID" 2>/dev/null || true
        wait "$WL_PID" 2>/dev/null || true
    fi
}

it_cluster_up
H="$IT_DIR/chaos"
mkdir -p "$H"

# completed H: the completion lines of history H so far.
completed() {
    grep -cv '"type": "invoke"' "$1" || true
}

# count_type H TYPE: the lines of history H whose type is TYPE.
count_type() {
    grep -c "\"type\": \"$2\"" "$1" || true
}

# judge NAME: runs the checker on $H/NAME.jsonl; fails the test unless it
# passes (its verdict and counterexample are printed either way).
judge() {
    local rc=0
    "$CHECK" --history "$H/$1.jsonl" --model register --out "$H/$1.check" >"$H/$1.verdict" \
        2>"$H/$1.cex" || rc=$?
    cat "$H/$1.verdict"
    if ((rc != 0)); then
        head -n 60 "$H/$1.cex" >&2
        fail "$1: shardex-chaos-check exited $rc (history kept in $H)"
    fi
}

# ---- round 1: a healthy cluster ---------------------------------------------
rc=0
"$WL" --router "$IT_URL" --table reg1 --out "$H/round1.jsonl" --clients 4 --keys 3 \
    --duration 8 --seed 1 >"$H/round1.out" 2>&1 || rc=$?
((rc == 0)) || {
    cat "$H/round1.out" >&2
    fail "round 1: the workload exited $rc"
}
ok1="$(count_type "$H/round1.jsonl" ok)"
pass "round 1: $(cat "$H/round1.out")"
((ok1 >= 200)) || fail "round 1: only $ok1 ok operations (at least 200 expected)"
judge round1
pass "round 1: $ok1 ok operations, linearizable"

# ---- round 2: storage node s2 killed under the load and started again --------
# The shard hash is keyed per cluster: a table is made for round 2 until one
# of k0..k2 lives in a storage partition of s2 (each key does with odds 1/2;
# a primary-key query's explain names the fact partition it read).
s2_parts=" $(jq -r '.storage[] | select(.name == "s2") | .partitions[].id' \
    "$IT_DIR/cluster.json" | tr '\n' ' ')"
[ "$s2_parts" != " " ] || fail "no storage partitions of s2 in cluster.json"
T2=""
for t in reg2 reg3 reg4 reg5 reg6 reg7 reg8 reg9; do
    sx table create "$t" --key id >/dev/null
    for k in k0 k1 k2; do
        out="$(sx query "$t" primary --eq "[\"$k\"]" --explain 2>&1 >/dev/null)" ||
            fail "primary-key query of $k in $t failed: $out"
        part="$(awk '/fact partitions:/ { print $3 }' <<<"$out")"
        [ -n "$part" ] || fail "$t $k: the explain names no fact partition: $out"
        if [[ "$s2_parts" == *" $part "* ]]; then
            T2="$t"
            pass "round 2: table $t, whose key $k lives in s2's partition $part"
            break 2
        fi
    done
done
[ -n "$T2" ] || fail "none of k0..k2 lives on s2 in 8 tables"
"$WL" --router "$IT_URL" --table "$T2" --out "$H/round2.jsonl" --clients 4 --keys 3 \
    --duration 8 --seed 2 >"$H/round2.out" 2>&1 &
WL_PID=$!

# the workload has 20 ok operations (or stopped)
running() {
    [ "$(count_type "$H/round2.jsonl" ok)" -ge 20 ] || ! kill -0 "$WL_PID" 2>/dev/null
}
# not_ok H: the completions of history H that are not ok
not_ok() {
    echo $(($(count_type "$1" fail) + $(count_type "$1" info)))
}
# 20 more operations ended fail or info than $1 (or the workload stopped)
outage_seen() {
    [ "$(not_ok "$H/round2.jsonl")" -ge $(($1 + 20)) ] || ! kill -0 "$WL_PID" 2>/dev/null
}

wait_for "round 2: 20 ok operations" 30 running
kill -0 "$WL_PID" 2>/dev/null || fail "round 2: the workload stopped before the kill"
lc kill s2
c="$(completed "$H/round2.jsonl")"
n="$(not_ok "$H/round2.jsonl")"
pass "round 2: killed s2 after $c completed operations"
# s2 holds partitions of the keys: operations on them end fail or info
wait_for "round 2: 20 operations ending fail or info during s2's outage" 30 outage_seen "$n"
kill -0 "$WL_PID" 2>/dev/null || fail "round 2: the workload stopped during s2's outage"
lc start s2 >/dev/null
pass "round 2: s2 started again after $(($(completed "$H/round2.jsonl") - c)) operations completed during its outage"
rc=0
wait "$WL_PID" || rc=$?
WL_PID=""
((rc == 0)) || {
    cat "$H/round2.out" >&2
    fail "round 2: the workload exited $rc"
}
pass "round 2: $(cat "$H/round2.out")"
ok2="$(count_type "$H/round2.jsonl" ok)"
((ok2 >= 50)) || fail "round 2: only $ok2 ok operations (at least 50 expected)"
judge round2
echo "round 2 error fields (\"not found\" also on ok deletes of absent keys):"
grep -o '"error": "[^"]*"' "$H/round2.jsonl" | sort | uniq -c || true
pass "round 2: $ok2 ok, $(count_type "$H/round2.jsonl" fail) fail, $(count_type "$H/round2.jsonl" info) info operations, linearizable"
