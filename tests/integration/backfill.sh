#!/usr/bin/env bash
# tests/integration/backfill.sh — building an index over existing items while
# they are written, and after a kill -9 in the middle of a build.
#
# The daemons run with SHARDEX_BACKFILL_HOLD (a backfill that has taken its
# snapshot waits while the file exists), SHARDEX_BACKFILL_RUN_KB=8 (runs
# of a few dozen items, so each partition sorts and emits several runs) and
# SHARDEX_BACKFILL_SEND_KB=1 (a run goes to the index partitions in many
# rounds, each ended by a destination's share reaching 1 KiB).
#   1. 1,200 items are loaded; index by_grp is created and every storage
#      partition's backfill holds at its snapshot. Meanwhile items move to a
#      group on the other index node, are deleted, lose or gain the indexed
#      attribute, or are new; `status` shows every partition building it.
#      Released, the index becomes ready and equals
#      the facts exactly (a strong query over the whole index, and the
#      covering entries' values), the logs show records left to the later
#      writes and more than one sorted run per partition.
#   2. Index by_v (keys only) is created; while its backfills hold, items
#      change only grp (by_v's key and projection stay), storage node s1 is
#      killed with SIGKILL and more writes go to s2's partitions. s1 is
#      restarted with SHARDEX_BACKFILL_RUNNING=1 while the hold lasts: one
#      partition's backfill, started again from the beginning, holds and the
#      other waits for it (logged); released, by_v too ends equal to the
#      facts.
#   3. Index by_v2 is created with SHARDEX_BACKFILL_HOLD_RUN: each partition
#      holds after emitting its first run; s2 is killed with SIGKILL there,
#      restarted, builds again from the beginning (its first run's records
#      arrive twice), and by_v2 ends equal to the facts.
#   4. An index node refuses a build request (I_BUILD) read at an outbox head
#      below its watermark for the source, and applies one read at it
#      (sx-ibuild, tests/integration/ibuild.c).
#   5. Index by_g3 (on grp: Mango/Zebra entries live on i2) is built while
#      index node i2 is down: the builds' rounds to it fail and are sent
#      again (logged) until i2 is back, no build starts over, and by_g3
#      ends equal to the facts. i2 held nothing unsealed (every earlier
#      build was sealed), so it reopens without recounting.
#   6. Index by_g4 (on grp) is created with SHARDEX_BACKFILL_HOLD_RUN: the
#      partitions hold after sending a run, which index node i2 applied
#      without a sync (unsealed: proto/PROTOCOL.md, I_BUILD); i2 is killed
#      with SIGKILL there, a record with a wrong checksum is appended to
#      its partition's log (a torn unsynced tail, which leveldb's paranoid
#      open would refuse), and i2 is restarted: it recovers the log
#      leniently (leveldb logs the skipped record), recounts its partition (its
#      marker file was there, logged), the builds see its new epoch in their
#      next round, stop and start again from the beginning (logged), and
#      by_g4 ends equal to the facts.
#   7. The same with SHARDEX_BACKFILL_HOLD_SEAL (index by_g5): the builds
#      hold once every round is applied, before their seal; i2 is killed
#      and restarted there, and the seal is what sees its new epoch.
#   8. Index by_g6 is created with SHARDEX_BACKFILL_HOLD_RUN as in step 6,
#      but i2 is stopped cleanly (`local-cluster stop`): it seals the
#      unsealed rounds and keeps its epoch (DATA/epoch, taken and removed
#      at its next start), so no build starts again, i2 does not recount,
#      and by_g6 ends equal to the facts.
#   9. Step 6 again (index by_g7, no tear) on that start, which took the
#      kept epoch: killed, i2 comes back with a new one and the builds
#      start again.
# After step 1 both index nodes' status shows the build's unsynced groups,
# its seals and the logs they synced.
source "$(dirname "$0")/lib.sh" "$@"

# The holds are test hooks, compiled in only with -DSHARDEX_TEST_HOOKS=ON.
node_help="$("$IT_BUILD/bin/shardex-node" --help 2>&1)" || fail "shardex-node --help failed: $node_help"
if ! grep -q "built with test hooks" <<<"$node_help"; then
    echo "backfill: $IT_BUILD/bin/shardex-node has no test hooks (build with" \
         "-DSHARDEX_TEST_HOOKS=ON, as scripts/setup does); skipping" >&2
    exit 77
fi

HOLD="$(mktemp -u "$IT_BUILD/it-clusters/backfill-hold.XXXXXX")"
HOLD_RUN="$HOLD.run"
HOLD_SEAL="$HOLD.seal"
export SHARDEX_BACKFILL_HOLD="$HOLD"
export SHARDEX_BACKFILL_HOLD_RUN="$HOLD_RUN"
export SHARDEX_BACKFILL_HOLD_SEAL="$HOLD_SEAL"
export SHARDEX_BACKFILL_RUN_KB=8
export SHARDEX_BACKFILL_SEND_KB=1
it_extra_cleanup() { rm -f "$HOLD" "$HOLD_RUN" "$HOLD_SEAL"; }
it_cluster_up
W="$IT_DIR/work"
mkdir -p "$W"

GROUPS_=(Apple Kiwi Lime Mango Zebra)   # Apple/Kiwi/Lime -> i1, Mango/Zebra -> i2
N=1200
item() { # ID GRP(- for none) V
    if [ "$2" = "-" ]; then
        echo "{\"id\": $1, \"v\": \"$3\"}"
    else
        echo "{\"id\": $1, \"grp\": \"$2\", \"v\": \"$3\"}"
    fi
}
for ((id = 1; id <= N; id++)); do
    g="${GROUPS_[$(((id * 7) % 5))]}"
    ((id % 9 == 0)) && g="-"
    item "$id" "$g" "0.$id"
done >"$W/load.jsonl"
sx table create kv --key id
sx load kv "$W/load.jsonl" >/dev/null
pass "loaded $N items"

holding() { # COUNT: that many "holds at its snapshot" lines in the storage logs
    [ "$(cat "$IT_DIR"/logs/s*.log | grep -c 'holds at its snapshot')" -ge "$1" ]
}
nparts="$(jq '[.storage[].partitions | length] | add' "$IT_DIR/cluster.json")"
[ "$nparts" -ge 2 ] || fail "cannot tell the storage partitions from cluster.json"

# ---- 1. writes while every partition's backfill holds at its snapshot -----------
touch "$HOLD"
sx index create kv by_grp --on grp --project all
wait_for "every storage partition's backfill holds at its snapshot" 60 holding "$nparts"
pass "all $nparts storage partitions hold their backfill of by_grp"
nb="$(sx status --json | jq '[.nodes[] | select(.role == "storage") | .status.partitions[]
                                | select(.building == "kv.by_grp")] | length')"
[ "$nb" -eq "$nparts" ] || fail "status shows $nb of $nparts storage partitions building kv.by_grp"
grep -q 'building="kv.by_grp" build_scanned=0' <<<"$(sx status)" ||
    fail "shardex status does not show the build and its progress"
pass "status shows every storage partition building kv.by_grp, nothing scanned yet"
{
    # move to a group on the other index node (Apple/Kiwi/Lime <-> Mango/Zebra)
    for ((id = 1; id <= 60; id++)); do
        g="${GROUPS_[$(((id * 7) % 5))]}"
        case "$g" in Apple|Kiwi|Lime) g=Zebra ;; *) g=Apple ;; esac
        ((id % 9 == 0)) && g=Mango
        item "$id" "$g" "1.$id"
    done
    # lose the attribute
    for ((id = 101; id <= 130; id++)); do item "$id" - "1.$id"; done
    # gain it (ids that had none)
    for ((id = 135; id <= 400; id += 9)); do item "$id" Lime "1.$id"; done
    # new items
    for ((id = 5001; id <= 5040; id++)); do item "$id" Kiwi "1.$id"; done
} >"$W/during.jsonl"
sx load kv "$W/during.jsonl" >/dev/null
for ((id = 61; id <= 100; id++)); do sx delete kv "{\"id\": $id}" >/dev/null; done
# Items without grp, on every partition: a tombstone is collected once every
# storage partition has written past its version.
for ((id = 7001; id <= 7060; id++)); do item "$id" - "1.$id"; done >"$W/bump.jsonl"
sx load kv "$W/bump.jsonl" >/dev/null
pass "rewrote, moved, deleted and added items while the backfills held"
# Let those writes' records ship and their tombstones be collected before the
# backfills go on: a backfill record older than a collected tombstone would
# then bring back a stale entry, unless the backfill leaves it out.
shipped_and_collected() {
    sx status --json | jq -e '
        ([.nodes[] | select(.role == "storage") | .status.partitions[]
          | {key: (.id | tostring), value: .head}] | from_entries) as $head
        | [.nodes[] | select(.role == "index") | .status.partitions[]] as $ix
        | ($ix | map(.tombstones) | add) == 0
          and all($ix[].watermarks[]; .[1] >= $head[.[0] | tostring])' >/dev/null
}
wait_for "the writes shipped and their tombstones collected" 60 shipped_and_collected
pass "the writes' records shipped and their tombstones were collected"
sx_rc query kv by_grp --limit 1 --consistency eventual
[ "$RC" -ne 0 ] || fail "by_grp answered a query while still building"
rm -f "$HOLD"
wait_for "index by_grp ready" 120 index_ready kv by_grp

# check_index INDEX ATTR: the index equals the facts (strong ids, covering values)
check_index() {
    local ix="$1" a="$2"
    sx scan kv | jq -r --arg a "$a" '"\(.id) \(.[$a] // "-")"' | sort >"$W/facts.$ix"
    awk '$2 != "-" { print $1 }' "$W/facts.$ix" | sort >"$W/want_ids.$ix"
    awk '$2 != "-" { print $2, $1 }' "$W/facts.$ix" | sort >"$W/want_entries.$ix"
    sx query kv "$ix" --consistency strong | ids_of | sort >"$W/strong_ids.$ix"
    if ! cmp -s "$W/strong_ids.$ix" "$W/want_ids.$ix"; then
        diff "$W/want_ids.$ix" "$W/strong_ids.$ix" | head -n 20 >&2 || true
        fail "$ix: a strong query over the whole index differs from the stored items with $a"
    fi
    sx query kv "$ix" --consistency eventual --attrs "$a" |
        jq -r --arg a "$a" '"\(.[$a]) \(.id)"' | sort >"$W/entries.$ix"
    if ! cmp -s "$W/entries.$ix" "$W/want_entries.$ix"; then
        diff "$W/want_entries.$ix" "$W/entries.$ix" | head -n 20 >&2 || true
        fail "$ix: the index entries differ from the facts' values"
    fi
    pass "$ix equals the facts: $(wc -l <"$W/want_ids.$ix") items with $a, their values too"
}
check_index by_grp grp
[ "$(wc -l <"$W/want_ids.by_grp")" -gt 900 ] || fail "too few items with grp"
st="$(sx status)" || fail "status failed once the index is ready"
if grep -q 'building=' <<<"$st"; then
    fail "status still shows a build once the index is ready: $(grep 'building=' <<<"$st")"
fi
grep -q '"Zebra"' <<<"$(sx get kv '{"id": 1}')" || fail "item 1 was not moved to Zebra"

# the later writes' records won (some backfill records were left out), and
# every partition emitted several sorted runs
left="$(cat "$IT_DIR"/logs/s*.log | grep 'backfilled index(es) 2 ' |
    sed -E 's/.* ([0-9]+) left to later writes.*/\1/' | awk '{ s += $1 } END { print s + 0 }')"
((left >= 100)) || fail "expected the backfill to leave >= 100 records to later writes, saw $left"
runs_min="$(cat "$IT_DIR"/logs/s*.log | grep 'backfilled index(es) 2 ' |
    sed -E 's/.* in ([0-9]+) sorted run.*/\1/' | sort -n | head -n 1)"
[ "$(cat "$IT_DIR"/logs/s*.log | grep -c 'backfilled index(es) 2 ')" -eq "$nparts" ] ||
    fail "not every partition logged its finished backfill"
((runs_min >= 2)) || fail "expected several sorted runs per partition, least was $runs_min"
pass "the backfills left $left records to later writes and sorted >= $runs_min runs each"
rounds_min="$(cat "$IT_DIR"/logs/s*.log | grep 'backfilled index(es) 2 ' |
    sed -E 's/.* sent in ([0-9]+) round.*/\1/' | sort -n | head -n 1)"
((rounds_min > runs_min)) ||
    fail "expected the 1 KiB share bound to split runs into more rounds ($rounds_min <= $runs_min)"
pass "each partition sent its records in >= $rounds_min rounds (shares of 1 KiB at most)"
for n in i1 i2; do
    sx status --json | jq -e --arg n "$n" '[.nodes[] | select(.name == $n) | .status.partitions[]
        | .builds | .unsynced_groups > 0 and .seals > 0 and .logs_synced > 0]
        | length > 0 and all' >/dev/null ||
        fail "$n's status does not show unsynced build groups, seals and synced logs"
done
pass "both index nodes wrote build groups unsynced and sealed them (logs synced)"

# ---- 2. kill -9 of a storage node while its backfill holds -----------------------
touch "$HOLD"
sx index create kv by_v --on v --project keys
wait_for "the by_v backfills hold at their snapshot" 60 holding $((2 * nparts))
# updates that leave by_v's key and projection (id, v) as they were: only grp
# changes, so a write would have nothing new to tell by_v if it already had
# the entry; building, it does not
sx scan kv | jq -c 'select(.id <= 200) | .grp = "Kiwi"' >"$W/regrp.jsonl"
[ "$(wc -l <"$W/regrp.jsonl")" -ge 100 ] || fail "too few items to regroup"
sx load kv "$W/regrp.jsonl" >/dev/null
pass "changed only grp of $(wc -l <"$W/regrp.jsonl") items while the by_v backfills held"
lc kill s1
pass "killed storage node s1 while its by_v backfills held"
# writes to whatever s2 owns: try every id; those on s1 fail while it is down
ok=0
for ((id = 2001; id <= 2060; id++)); do
    sx_rc put kv "{\"id\": $id, \"grp\": \"Mango\", \"v\": \"2.$id\"}"
    [ "$RC" -ne 0 ] || ok=$((ok + 1))
done
((ok > 0)) || fail "no write reached the storage node still up"
pass "$ok writes acknowledged by s2 while s1 was down"
# s1 comes back building one partition at a time, the hold still on: one of
# its partitions holds, the other must wait for it
SHARDEX_BACKFILL_RUNNING=1 lc start s1 >/dev/null
s1_waits() { grep -q 'index build waits: 1 partition(s) of this node building' "$IT_DIR/logs/s1.log"; }
wait_for "s1 (SHARDEX_BACKFILL_RUNNING=1) makes a partition wait" 60 s1_waits
rm -f "$HOLD"
wait_for "index by_v ready" 120 index_ready kv by_v
pass "s1, restarted with SHARDEX_BACKFILL_RUNNING=1, built its partitions one at a time"
check_index by_v v

# ---- 3. kill -9 of a storage node after its build shipped part of its records --
touch "$HOLD_RUN"
sx index create kv by_v2 --on v --project all
s2_held() { [ "$(grep -c 'holds after a run' "$IT_DIR/logs/s2.log")" -ge 2 ]; }
wait_for "both of s2's partitions hold after emitting a run of by_v2" 60 s2_held
emitted="$(sx status --json | jq '[.nodes[] | select(.name == "s2") | .status.partitions[]
                                     | .build_emitted // 0] | min')"
((emitted > 0)) || fail "s2's partitions had emitted nothing before the kill"
lc kill s2
pass "killed storage node s2 after each of its partitions emitted part of by_v2 (>= $emitted records)"
rm -f "$HOLD_RUN"
lc start s2 >/dev/null
wait_for "index by_v2 ready" 120 index_ready kv by_v2
check_index by_v2 v
check_index by_v v
check_index by_grp grp

# ---- 4. a build request that comes after a later write's records -----------------
# A build's records are checked against their facts under the partition's
# write lock, held until they are applied; one whose call timed out could
# still arrive after later writes' records, and must then be refused whole
# (sx-ibuild: read below the watermark -> refused, nothing applied; at it ->
# applied; no watermark moved).
"$IT_BUILD/bin/sx-ibuild" "$IT_DIR/cluster.json" i2 102 1 "Mzz-ibuild" >"$W/ibuild.out" 2>&1 ||
    { cat "$W/ibuild.out"; fail "sx-ibuild: the index node's I_BUILD rule does not hold"; }
pass "a build request read below the source's watermark is refused, one at it applied"

# slog_count PATTERN: how many lines of the storage nodes' logs match it;
# slog_reaches PATTERN N: whether at least N do.
slog_count() { cat "$IT_DIR"/logs/s*.log | grep -c "$1" || true; }
slog_reaches() { [ "$(slog_count "$1")" -ge "$2" ]; }

# ---- 5. an index node down while the builds send -----------------------------------
failed_before="$(slog_count 'failed: .*(will start again)')"
touch "$HOLD"
holds_before="$(slog_count 'holds at its snapshot')"
sx index create kv by_g3 --on grp --project all
# s1 still builds one partition at a time (step 2): a partition of each node holds
wait_for "a by_g3 build on each storage node holds at its snapshot" 60 \
    slog_reaches 'holds at its snapshot' $((holds_before + 2))
lc kill i2
pass "killed index node i2 while the by_g3 builds held"
rm -f "$HOLD"
retried() { grep -qh 'index build: sending records: ' "$IT_DIR"/logs/s*.log; }
wait_for "a build's round to i2 fails and is sent again" 60 retried
sx_rc query kv by_g3 --limit 1 --consistency eventual
[ "$RC" -ne 0 ] || fail "by_g3 answered a query while i2 was down and it was building"
unsealed_before="$(grep -c 'unsealed at the last stop' "$IT_DIR/logs/i2.log" || true)"
lc start i2 >/dev/null
wait_for "index by_g3 ready" 120 index_ready kv by_g3
[ "$(grep -c 'unsealed at the last stop' "$IT_DIR/logs/i2.log" || true)" -eq "$unsealed_before" ] ||
    fail "i2 recounted at its restart, though every build before it was sealed"

check_index by_g3 grp
[ "$(slog_count 'failed: .*(will start again)')" -eq "$failed_before" ] ||
    fail "a build failed and started over instead of sending its round again"
grep -q 'index build: sending records again after' "$IT_DIR"/logs/s*.log ||
    fail "no build logged sending its records again once i2 was back"
pass "the builds sent their rounds again until i2 was back; none started over"

# tear_log DIR: writes into the newest leveldb log in DIR, at the start of
# the block after its records, a record whose checksum is wrong, as a
# machine crash can leave an unsynced tail (zeros up to it: the log is
# preallocated, node/engine/ldb_log.h, and leveldb skips a block's zeros).
# leveldb's paranoid open refuses such a log; nothing already in it is lost.
tear_log() {
    local log at
    log="$(ls "$1"/*.log | sort | tail -n 1)"
    at=$(( ($(ldb_log_data_end "$log") / 32768 + 1) * 32768 ))
    # header: checksum 0 (wrong), length 16, type 1 (a full record); payload
    printf '\x00\x00\x00\x00\x10\x00\x01abababababababab' |
        dd of="$log" bs=1 seek="$at" conv=notrunc status=none
}

# i2_restart_held HOLDFILE WHERE INDEX [tear]: creates INDEX on grp with
# HOLDFILE there, waits until three builds log that they hold WHERE ("after
# a run", "before its seal"; s1 builds one partition at a time since step
# 2), kills i2 with SIGKILL (with tear, also tears the log of its partition
# 102, where the unsealed rounds went) and starts it again, waits for its
# recount (its marker file was there), releases the builds and checks that
# one started again and that INDEX equals the facts.
i2_restart_held() {
    local hold="$1" where="$2" ix="$3" tear="${4:-}" restarts held recounts
    restarts="$(slog_count 'an index node restarted during it')"
    held="$(slog_count "holds $where")"
    touch "$hold"
    sx index create kv "$ix" --on grp --project keys
    wait_for "the $ix builds hold $where" 60 slog_reaches "holds $where" $((held + 3))
    lc kill i2
    [ -z "$tear" ] || tear_log "$IT_DIR/data/i2/p102"
    recounts="$(grep -c 'unsealed at the last stop: counted' "$IT_DIR/logs/i2.log" || true)"
    lc start i2 >/dev/null
    wait_for "i2 reopens recounting the partition the unsealed rounds went to" 60 \
        i2_recounted "$recounts"
    rm -f "$hold"
    wait_for "index $ix ready" 120 index_ready kv "$ix"
    (($(slog_count 'an index node restarted during it') > restarts)) ||
        fail "no $ix build started again after i2 restarted (held $where)"
    check_index "$ix" grp
    pass "i2 killed while the $ix builds held $where: they saw its new epoch, built again"
}
i2_recounted() {
    [ "$(grep -c 'unsealed at the last stop: counted' "$IT_DIR/logs/i2.log")" -gt "$1" ]
}

# ---- 6. an index node killed holding a build's unsealed rounds ----------------------
i2_restart_held "$HOLD_RUN" "after a run" by_g4 tear
grep -q 'dropping .*checksum mismatch' "$IT_DIR/data/i2/p102/LOG"* ||
    fail "leveldb did not report skipping the torn record of i2's log"
pass "i2 started over a torn log (leveldb skipped the torn record: its LOG says so)"
grep -q "index partition 102's node restarted during the build" "$IT_DIR"/logs/s*.log ||
    fail "no build logged i2's new epoch"
check_index by_g3 grp

# ---- 7. an index node restarted between a build's last round and its seal ----------
i2_restart_held "$HOLD_SEAL" "before its seal" by_g5

# ---- 8. an index node stopped cleanly while the builds hold unsealed rounds -----------
# i2_epoch: the epoch i2 logged at its last start.
i2_epoch() { grep -o 'epoch [0-9a-f]\{16\}' "$IT_DIR/logs/i2.log" | tail -n 1 | cut -d' ' -f2; }
restarts="$(slog_count 'an index node restarted during it')"
held="$(slog_count "holds after a run")"
kept="$(grep -c 'epoch kept for the next start' "$IT_DIR/logs/i2.log" || true)"
recounts="$(grep -c 'unsealed at the last stop: counted' "$IT_DIR/logs/i2.log" || true)"
touch "$HOLD_RUN"
sx index create kv by_g6 --on grp --project keys
wait_for "the by_g6 builds hold after a run" 60 slog_reaches "holds after a run" $((held + 3))
[ -e "$IT_DIR/data/i2/p102.unsealed" ] || fail "i2 held no unsealed rounds of by_g6 to stop with"
before="$(i2_epoch)"
lc stop i2 >/dev/null
(($(grep -c 'epoch kept for the next start' "$IT_DIR/logs/i2.log") > kept)) ||
    fail "i2 stopped cleanly but did not keep its epoch"
[ ! -e "$IT_DIR/data/i2/p102.unsealed" ] || fail "i2 stopped cleanly without sealing"
[ -s "$IT_DIR/data/i2/epoch" ] || fail "i2 stopped cleanly but left no epoch file"
lc start i2 >/dev/null
[ ! -e "$IT_DIR/data/i2/epoch" ] || fail "i2 started but left its epoch file for a later start"
[ "$(i2_epoch)" = "$before" ] || fail "i2 started with epoch $(i2_epoch), not the $before it kept"
st="$(sx status --json | jq -c '.nodes[] | select(.name == "i2") | .status | [.epoch, .epoch_kept]')"
[ "$st" = "[\"$before\",true]" ] || fail "i2's status shows epoch and kept as $st, not [$before, true]"
rm -f "$HOLD_RUN"
wait_for "index by_g6 ready" 120 index_ready kv by_g6
[ "$(slog_count 'an index node restarted during it')" -eq "$restarts" ] ||
    fail "a by_g6 build started again though i2 only stopped cleanly"
[ "$(grep -c 'unsealed at the last stop: counted' "$IT_DIR/logs/i2.log" || true)" -eq "$recounts" ] ||
    fail "i2 recounted after a clean stop"
check_index by_g6 grp
pass "i2 stopped cleanly while the by_g6 builds held unsealed rounds: it sealed them, kept its epoch ($before), and the builds went on"

# ---- 9. killed after a start that took a kept epoch: the builds start again ------------
i2_restart_held "$HOLD_RUN" "after a run" by_g7
[ "$(i2_epoch)" != "$before" ] || fail "i2 kept epoch $before across a kill"

[ "$(lc status | grep -c running)" -eq 5 ] || fail "not every process is running"
pass "all 5 processes running"
