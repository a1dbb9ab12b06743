#!/usr/bin/env bash
# tests/integration/diskerror.sh — a disk error on a storage node loses
# nothing acknowledged. A running storage node's file size limit is lowered
# (prlimit: its next writes past the limit fail with EFBIG, like a full
# disk) while items are written through the router:
#   - the writes that land on it fail with a message that says their outcome
#     is unknown, and from the first failure on it refuses every write, even
#     once the limit is lifted, while reads go on; `status` says
#     writes_refused=true;
#   - after a kill -9 and a restart it writes again, and every acknowledged
#     item is there with its value; the index converges to the facts.
# Why the fail-stop (node/engine/ldb.c) matters: leveldb alone carries on
# after a torn log record, and writes acknowledged after it are then lost at
# the restart, or the store does not open.
source "$(dirname "$0")/lib.sh" "$@"
command -v prlimit >/dev/null || fail "prlimit (util-linux) is missing"

it_cluster_up
W="$IT_DIR/work"
mkdir -p "$W"
: >"$W/acked"      # "id value" per acknowledged put
: >"$W/failed"     # ids whose put failed

sx table create t --key id
sx index create t by_v --on v
wait_for "index by_v ready" 60 index_ready t by_v

# put_one ID VALUE: one put; records the outcome
put_one() {
    if sx put t "{\"id\": $1, \"v\": \"$2\"}" >/dev/null 2>"$W/err"; then
        echo "$1 $2" >>"$W/acked"
    else
        echo "$1" >>"$W/failed"
        cat "$W/err" >>"$W/errors"
    fi
}

for i in $(seq 1 20); do put_one "$i" "a$i"; done
[ "$(wc -l <"$W/acked")" -eq 20 ] || fail "puts failed before any disk error: $(cat "$W/errors")"

# s1's store: its log is the file its next writes append to
pid="$(cat "$IT_DIR/pids/s1.pid")"
log="$(ls "$IT_DIR"/data/s1/store/*.log | sort | tail -n 1)"
limit=$(($(ldb_log_data_end "$log") + 400))
prlimit --pid "$pid" --fsize="$limit:unlimited" || fail "prlimit on s1 failed"
for i in $(seq 21 60); do put_one "$i" "b$i"; done
[ -s "$W/failed" ] || fail "no put failed with s1 past its file size limit"
grep -q "may or may not survive" "$W/errors" ||
    fail "a failed put does not say its outcome is unknown: $(head -n 3 "$W/errors")"
pass "$(wc -l <"$W/failed") puts failed on s1's disk error, $(wc -l <"$W/acked") acknowledged"

prlimit --pid "$pid" --fsize=unlimited:unlimited || fail "prlimit on s1 failed"
sx status >"$W/status" || fail "status failed"
grep -E '^[0-9]+ +s1 ' "$W/status" | grep -q 'writes_refused=true' ||
    fail "status does not show s1's writes refused: $(grep -E ' s1 ' "$W/status")"
# still refused with room again, on every partition of s1 (new ids until
# one lands there: partitions are placed by a keyed hash)
refused=0
for i in $(seq 61 100); do
    put_one "$i" "c$i"
    if grep -qx "$i" "$W/failed"; then refused=1; break; fi
done
((refused)) || fail "s1 took writes again before a restart"
first="$(head -n 1 "$W/acked" | cut -d' ' -f1)"
sx get t "{\"id\": $first}" >/dev/null || fail "reads stopped with the writes"
pass "s1 refuses writes until it restarts (status: writes_refused=true); reads go on"

lc kill s1 >/dev/null
lc start s1 >/dev/null
for i in $(seq 101 110); do put_one "$i" "d$i"; done
grep -qx "10[0-9]\|110" "$W/failed" && fail "puts still fail after s1's restart: $(tail -n 3 "$W/errors")"
sx status >"$W/status.after" || fail "status failed after s1's restart"
if grep -q 'writes_refused' "$W/status.after"; then
    fail "status still shows writes refused after the restart: $(grep 'writes_refused' "$W/status.after")"
fi

# every acknowledged item is there with its value
while read -r id v; do
    got="$(sx get t "{\"id\": $id}" 2>&1)" || fail "acknowledged item $id lost: $got"
    [ "$(jq -r .v <<<"$got")" = "$v" ] || fail "item $id holds $got, not v=$v"
done <"$W/acked"
pass "after kill -9 and restart: all $(wc -l <"$W/acked") acknowledged items there, writes work"

# the index converges to the facts (a failed put may or may not have survived)
facts() { sx scan t | jq -r '"\(.v) \(.id)"' | sort; }
index_eq_facts() {
    sx query t by_v --consistency strong --attrs id,v | jq -r '"\(.v) \(.id)"' | sort >"$W/ix" &&
        facts >"$W/facts" && cmp -s "$W/ix" "$W/facts"
}
wait_for "index = facts" 60 index_eq_facts
pass "the index equals the facts ($(wc -l <"$W/facts") items)"
