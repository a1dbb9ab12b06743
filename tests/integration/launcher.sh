#!/usr/bin/env bash
# tests/integration/launcher.sh — deploy/local-cluster itself (the layout of
# --replicas 1; tests/integration/replicas_layout.sh checks the others): the
# generated topology, two clusters side by side in two DIRs on different
# ports, status lines, `url`, kill/start of one process, an idempotent `up`,
# data kept across down/up, and `down` leaving every process stopped.
source "$(dirname "$0")/lib.sh" "$@"

it_cluster_up --replicas 1
cfg="$IT_DIR/cluster.json"

# ---- the generated config ---------------------------------------------------------
[ "$(jq '.routers | length' "$cfg")" -eq 1 ] || fail "expected 1 router"
[ "$(jq '.storage | length' "$cfg")" -ge 2 ] || fail "expected >= 2 storage nodes"
[ "$(jq '[.storage[].partitions[]] | length' "$cfg")" -ge 4 ] || fail "expected >= 4 fact partitions"
[ "$(jq '.index | length' "$cfg")" -ge 2 ] || fail "expected >= 2 index nodes"
[ "$(jq '[.index[].partitions[]] | length' "$cfg")" -ge 2 ] || fail "expected >= 2 index partitions"
jq -e '[.. | .url? // empty] | all(startswith("tcp://127.0.0.1:"))' "$cfg" >/dev/null \
    || fail "a URL is not on loopback"
[[ "$(jq -r .hash_key "$cfg")" =~ ^[0-9a-f]{32}$ ]] || fail "hash_key is not 32 hex digits"
[[ "$(jq -r .token_key "$cfg")" =~ ^[0-9a-f]{64}$ ]] || fail "token_key is not 64 hex digits"
[[ "$(jq -r .link_key "$cfg")" =~ ^[0-9a-f]{64}$ ]] || fail "link_key is not 64 hex digits"
[ "$(stat -c %a "$cfg")" = 600 ] || fail "the config (it holds secrets) is not mode 600"
pass "generated topology: 1 router, 2 storage x 2 partitions, 2 index partitions, loopback, secrets"

# ---- status ------------------------------------------------------------------------
st="$(lc status)"
echo "$st"
[ "$(wc -l <<<"$st")" -eq 5 ] || fail "status should print 5 lines"
while read -r role name pid url state; do
    [[ "$role" =~ ^(router|storage|index)$ ]] || fail "bad role in: $role $name"
    [[ "$pid" =~ ^[0-9]+$ ]] || fail "bad pid for $name: $pid"
    [ "$state" = running ] || fail "$name is $state"
    [ "$(jq -r --arg n "$name" '(.routers[], .storage[], .index[]) | select(.name == $n) | .url' "$cfg")" = "$url" ] \
        || fail "status URL of $name differs from the config"
    kill -0 "$pid" || fail "pid $pid of $name is not alive"
done <<<"$st"
pass "status: role, name, pid, URL, state for every process"
[ "$(lc url)" = "$IT_URL" ] || fail "url printed $(lc url), up $IT_URL"
pass "url prints the router URL up printed last"

# ---- a second cluster side by side ---------------------------------------------------
D2="$(mktemp -d "$IT_BUILD/it-clusters/$IT_NAME-2.XXXXXX")"
it_extra_cleanup() {
    "$IT_REPO/deploy/local-cluster" down --dir "$D2" >/dev/null 2>&1 || true
    rm -rf "$D2"
}
url2="$("$IT_REPO/deploy/local-cluster" up --replicas 1 --dir "$D2" | tail -n 1)"
[ "$url2" != "$IT_URL" ] || fail "the second cluster got the same router URL"
ports1="$(jq -r '.. | .url? // empty' "$cfg" | sort)"
ports2="$(jq -r '.. | .url? // empty' "$D2/cluster.json" | sort)"
[ -z "$(comm -12 <(echo "$ports1") <(echo "$ports2"))" ] || fail "the two clusters share a port"
sx table create one --key id
sx put one '{"id": 1, "where": "first"}'
"$IT_CLI" -r "$url2" table create two --key id
"$IT_CLI" -r "$url2" put two '{"id": 1, "where": "second"}'
sx_rc get two '{"id": 1}'
[ "$RC" -eq 3 ] || fail "cluster 1 knows cluster 2's table (exit $RC)"
[ "$(sx get one '{"id": 1}' | jq -r .where)" = first ] || fail "cluster 1 lost its item"
[ "$("$IT_CLI" -r "$url2" get two '{"id": 1}' | jq -r .where)" = second ] || fail "cluster 2 lost its item"
"$IT_REPO/deploy/local-cluster" down --dir "$D2" >/dev/null
pass "two clusters in two DIRs ran side by side on different ports"

# ---- kill and start one process ----------------------------------------------------
old_pid="$(lc status | awk '$2 == "s1" { print $3 }')"
lc kill s1 >/dev/null
[ "$(lc status | awk '$2 == "s1" { print $5 }')" = stopped ] || fail "s1 not stopped after kill"
if kill -0 "$old_pid" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$old_pid/stat" 2>/dev/null)" != Z ]; then
    fail "pid $old_pid still alive after kill"
fi
sx_rc get one '{"id": 1}' >/dev/null 2>&1   # s1 (and the catalog) down: an error, not a crash
((RC < 128)) || fail "the CLI died of a signal while s1 was down"
SHARDEX_CACHE_MB=48 lc start s1 >/dev/null   # and with a block cache of its own size
new_pid="$(lc status | awk '$2 == "s1" { print $3 }')"
[ "$(lc status | awk '$2 == "s1" { print $5 }')" = running ] || fail "s1 not running after start"
[ "$new_pid" != "$old_pid" ] || fail "start did not start a new process"
wait_for "get after restarting s1" 60 sx get one '{"id": 1}'
pass "kill s1 (pid $old_pid) and start s1 (pid $new_pid); the item is still there"
grep -q -- "--cache-mb 48 " <<<"$(tr '\0' ' ' <"/proc/$new_pid/cmdline")" \
    || fail "SHARDEX_CACHE_MB did not reach s1's command line: $(tr '\0' ' ' <"/proc/$new_pid/cmdline")"
grep -q "s1 starting (storage, [0-9]* workers, 48 MiB block cache)" "$IT_DIR/logs/s1.log" \
    || fail "s1's log does not say its 48 MiB block cache"
rc=0
out="$("$IT_BUILD/bin/shardex-node" --config "$cfg" --name s1 --data "$IT_DIR/x" --cache-mb 0 2>&1)" \
    || rc=$?
[ "$rc" -eq 2 ] && grep -q "cache-mb must be" <<<"$out" || fail "--cache-mb 0: exit $rc, $out"
pass "SHARDEX_CACHE_MB reaches the node as --cache-mb (logged); --cache-mb 0 is a usage error"

# ---- up is idempotent; down stops all; data survives down/up ----------------------------
before="$(lc status)"
again="$(lc up | tail -n 1)"
[ "$again" = "$IT_URL" ] || fail "second up printed $again, not $IT_URL"
[ "$(lc status)" = "$before" ] || fail "second up restarted running processes"
lc down >/dev/null
[ "$(lc status | grep -c stopped)" -eq 5 ] || fail "not all stopped after down: $(lc status)"
for n in r1 s1 s2 i1 i2; do
    [ ! -e "$IT_DIR/pids/$n.pid" ] || fail "pid file of $n left after down"
done
pass "up is idempotent; down stops every process"
lc up >/dev/null
wait_for "get after down/up" 60 sx get one '{"id": 1}'
[ "$(sx get one '{"id": 1}' | jq -r .where)" = first ] || fail "item changed across down/up"
pass "data kept across down and up"

# ---- a cluster that spans hosts needs its link key ----------------------------------
# (DESIGN.md, "Security"): with one process listening beyond loopback and no
# link_key, neither kind of process starts, and each says why
jq 'del(.link_key) | .storage[0].url = "tcp://0.0.0.0:1"' "$cfg" >"$IT_DIR/remote.json"
for b in "shardex-node --name s2 --data $IT_DIR/remote-data" "shardex-router --name r1"; do
    # shellcheck disable=SC2086
    out="$("$IT_BUILD/bin/"$b --config "$IT_DIR/remote.json" 2>&1)" && fail "$b started"
    grep -q "link_key" <<<"$out" || fail "$b did not name link_key: $out"
done
[ ! -e "$IT_DIR/remote-data" ] || fail "the refused node made its data folder"
pass "a config listening beyond loopback without link_key is refused: $out"
