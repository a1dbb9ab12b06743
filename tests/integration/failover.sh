#!/usr/bin/env bash
# failover.sh BINDIR — a local cluster with two routers (r2 added to
# the generated config); sx-failover writes through "r1,r2" while this
# script kills r1, waits until writes progress, restarts r1 and kills r2,
# waits for progress again, restarts r2 and stops the writer. Passes when no
# client call failed, and when a put to a stalled router (SIGSTOP) times
# out there, goes to the other one, and the put the stalled router held is
# refused past its deadline once it continues (sx-failover --stall); and
# when a put the router reported failed (its call to the stopped storage
# nodes timed out) is refused once they continue, not applied.
# Always stops the cluster. Exits 77 when the programs are not built.
set -uo pipefail

bindir="${1:?usage: failover.sh BINDIR}"
bindir="$(cd "$bindir" && pwd -P)"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
lc="$repo/deploy/local-cluster"
for f in "$lc" "$bindir/shardex-node" "$bindir/shardex-router" "$bindir/sx-failover"; do
    [ -x "$f" ] || { echo "failover.sh: $f is missing; skipping" >&2; exit 77; }
done
command -v jq >/dev/null || { echo "failover.sh: jq is missing; skipping" >&2; exit 77; }
export SHARDEX_BIN="$bindir"

dir="$(mktemp -d "${TMPDIR:-/tmp}/shardex-failover.XXXXXX")"
status=1
writer=""
cleanup() {
    [ -n "$writer" ] && kill "$writer" 2>/dev/null
    "$lc" down --dir "$dir" >/dev/null 2>&1 || true
    if [ "$status" -eq 0 ]; then rm -rf "$dir"; else echo "failover.sh: logs in $dir" >&2; fi
}
trap cleanup EXIT
trap 'exit 143' TERM INT
fail() { echo "FAIL [failover]: $*" >&2; exit 1; }

# generate the config, then add a second router on the slot's next free port
"$lc" up --replicas 1 --dir "$dir" >/dev/null || fail "local-cluster up"
"$lc" down --dir "$dir" >/dev/null || fail "local-cluster down"
r1="$(jq -r '.routers[0].url' "$dir/cluster.json")"
r2="${r1%:*}:$(( ${r1##*:} + 5 ))"
jq --arg u "$r2" '.routers += [{"name": "r2", "url": $u}]' "$dir/cluster.json" >"$dir/c.tmp" \
    && mv "$dir/c.tmp" "$dir/cluster.json" || fail "cannot add r2"
"$lc" up --dir "$dir" >/dev/null || fail "local-cluster up with two routers"

"$bindir/sx-failover" "$r1,$r2" "$dir/stop" >"$dir/writer.out" 2>"$dir/writer.err" &
writer=$!

progress() { grep -o '^progress [0-9]*' "$dir/writer.out" | tail -n 1 | cut -d' ' -f2; }
# wait_progress N: until the writer reports at least N rounds (30 s deadline)
wait_progress() {
    local deadline=$((SECONDS + 30)) p
    while :; do
        p="$(progress)"
        [ -n "$p" ] && [ "$p" -ge "$1" ] && return 0
        kill -0 "$writer" 2>/dev/null || fail "writer exited: $(cat "$dir/writer.err")"
        [ $SECONDS -lt $deadline ] || fail "writer stuck at ${p:-0} rounds, expected $1"
        sleep 0.05
    done
}

wait_progress 40
"$lc" kill r1 --dir "$dir" >/dev/null || fail "kill r1"
p="$(progress)"; wait_progress $((p + 100))
echo "ok   [failover]: writes continue through r2 with r1 down (round $(progress))"
"$lc" start r1 --dir "$dir" >/dev/null || fail "start r1"
"$lc" kill r2 --dir "$dir" >/dev/null || fail "kill r2"
p="$(progress)"; wait_progress $((p + 100))
echo "ok   [failover]: writes continue through r1 with r2 down (round $(progress))"
"$lc" start r2 --dir "$dir" >/dev/null || fail "start r2"
touch "$dir/stop"
wait "$writer"
rc=$?
writer=""
cat "$dir/writer.err" >&2
tail -n 1 "$dir/writer.out"
[ "$rc" -eq 0 ] || fail "the writer saw failed calls"
echo "ok   [failover]: no call failed while the routers were killed in turn"

# a stalled (not dead) router: its put times out, goes to r2, and the put
# r1 held cannot land after the caller's next one
"$bindir/sx-failover" "$r1,$r2" --stall "$(cat "$dir/pids/r1.pid")" ||
    fail "a write to a stalled router"
echo "ok   [failover]: a put held by a stalled router is refused past its deadline"

# a router whose call to the storage nodes timed out reports the put failed:
# the S_WRITE it left behind must not land later, even for a client whose
# own timeout (30 s) is longer (r2 restarted with a 1 s call timeout)
S="$bindir/shardex"
late_count() {
    "$S" -r "$r2" status --json | jq '[.nodes[] | .status.writes_past_deadline // 0] | add'
}
"$lc" stop r2 --dir "$dir" >/dev/null || fail "stop r2"
SHARDEX_ROUTER_CALL_MS=1000 "$lc" start r2 --dir "$dir" >/dev/null || fail "start r2 (1 s calls)"
late0="$(late_count)"
s1="$(cat "$dir/pids/s1.pid")" s2="$(cat "$dir/pids/s2.pid")"
kill -STOP "$s1" "$s2"
rc=0
err="$("$S" -r "$r2" --timeout 30000 put fo '{"id": 9999, "v": 10}' 2>&1)" || rc=$?
kill -CONT "$s1" "$s2"
[ "$rc" -eq 3 ] && grep -q "not written" <<<"$err" ||
    fail "a put through r2 with the storage nodes stopped: exit $rc, $err"
deadline=$((SECONDS + 30))
until [ "$(late_count)" -gt "$late0" ]; do
    [ $SECONDS -lt $deadline ] || fail "the S_WRITE r2 gave up on was not refused past its deadline"
    sleep 0.05
done
v="$("$S" -r "$r2" get fo '{"id": 9999}' | jq .v)"
[ "$v" != 10 ] || fail "the put r2 reported failed was applied later (v=$v)"
echo "ok   [failover]: a write its router reported failed (its call timed out) is refused later"
status=0
