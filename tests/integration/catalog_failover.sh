#!/usr/bin/env bash
# catalog_failover.sh — the replicated catalog: three storage nodes hold a
# replica each (config "catalog_node": ["s1", "s2", "s3"], a Raft group),
# the router runs as a process of its own. Each storage node in turn is
# killed with SIGKILL (so the catalog's leader is killed at least once,
# and followers too), and then the leader is paused with SIGSTOP: while it
# is down, table creation (a catalog change
# through the leader) and catalog reads succeed without anyone restarting
# anything, and every table acknowledged before is still there; the node
# is then started again and catches up. At the end every table created
# exists once, as the catalog replicas agree. Then s2 loses its data
# folder: started again, it joins the catalog as a new replica (a fresh
# replica id), the leader promotes it once caught up and removes the lost
# one, and the catalog then serves with either other replica down.
# Usage: tests/integration/catalog_failover.sh BUILD_DIR
source "$(dirname "$0")/lib.sh" "$@"

it_own_cluster 6
cat >"$IT_DIR/cluster.json" <<JSON
{
  "cluster": "catfail", "hash_key": "$IT_HK", "token_key": "$IT_TK", "link_key": "$IT_LK",
  "catalog_node": ["s1", "s2", "s3"],
  "routers": [{"name": "r1", "url": "tcp://127.0.0.1:$IT_BASE"}],
  "storage": [
    {"name": "s1", "id": 1, "url": "tcp://127.0.0.1:$((IT_BASE + 1))", "partitions": [
      {"id": 1, "lo": "0000000000000000", "hi": "5fffffffffffffff"}]},
    {"name": "s2", "id": 2, "url": "tcp://127.0.0.1:$((IT_BASE + 2))", "partitions": [
      {"id": 2, "lo": "6000000000000000", "hi": "afffffffffffffff"}]},
    {"name": "s3", "id": 3, "url": "tcp://127.0.0.1:$((IT_BASE + 3))", "partitions": [
      {"id": 3, "lo": "b000000000000000", "hi": "ffffffffffffffff"}]}
  ],
  "index": [
    {"name": "i1", "url": "tcp://127.0.0.1:$((IT_BASE + 4))", "partitions": [
      {"id": 101, "lo": null, "hi": ["M"]}]},
    {"name": "i2", "url": "tcp://127.0.0.1:$((IT_BASE + 5))", "partitions": [
      {"id": 102, "lo": ["M"], "hi": null}]}
  ]
}
JSON
chmod 600 "$IT_DIR/cluster.json"
out="$(lc up)" || { echo "$out" >&2; fail "local-cluster up failed"; }
IT_URL="$(tail -n 1 <<<"$out")"
export SHARDEX_ROUTER="$IT_URL"
pass "cluster up: the catalog on s1, s2, s3"

wait_for "the catalog to elect a leader" 20 sx table create t0 --key id
sx index create t0 by_v --on v >/dev/null
pass "table t0 and its index made through the catalog's leader"

# status: one catalog row per replica, one leader, and the leader's view of
# every member
catalog_rows() { sx status --json | jq -r '.nodes[].status.groups // [] | .[] | select(.kind == "catalog") | .role'; }
one_leader() { [ "$(catalog_rows | grep -c '^leader$')" = 1 ] && [ "$(catalog_rows | wc -l)" = 3 ]; }
wait_for "status to show three catalog replicas, one leading" 10 one_leader
sx status | grep -E '^catalog +s[123] ' >/dev/null || fail "shardex status shows no catalog rows"
[ "$(sx status | grep -cE '^ +member [0-9]+ on s[123] \(voter\): lag [0-9]+$')" = 3 ] ||
    fail "the leader's view of the three members is missing: $(sx status)"
pass "status: three catalog replicas, one leader, each member's lag"

# the tables made so far must all exist
check_tables() {
    local t
    for t in "$@"; do
        sx index list "$t" >/dev/null 2>&1 || fail "table $t is missing: $(sx index list "$t" 2>&1)"
    done
}

made=(t0)
for victim in s1 s2 s3; do
    lc kill "$victim" >/dev/null
    t_kill=$(date +%s%N)
    # one attempt, as a client makes it: the router finds the new leader
    sx_rc table create "t_$victim" --key id
    took=$((($(date +%s%N) - t_kill) / 1000000))
    ((RC == 0)) || fail "table create with $victim killed failed (exit $RC) after ${took} ms"
    made+=("t_$victim")
    check_tables "${made[@]}"
    # a fresh router view of the catalog: an index made now is seen
    sx index create "t_$victim" by_v --on v >/dev/null
    grep -q by_v <<<"$(sx index list "t_$victim")" || fail "index by_v on t_$victim not listed"
    pass "$victim killed: a catalog change succeeded in ${took} ms, every table is there"
    (( took <= 5000 )) || fail "the catalog took ${took} ms to accept a change after $victim died"
    # the leader marks the dead member, never leaves it out
    marked() { grep -qE "member [0-9]+ on $victim \(voter\): lag [0-9]+, UNREACHABLE" <<<"$(sx status)"; }
    wait_for "status to mark $victim unreachable" 10 marked
    lc start "$victim" >/dev/null
done

# the catalog's leader paused (SIGSTOP): it sends nothing and no reset
# comes, yet the others elect a new leader and a change succeeds on its
# own; once resumed, the old leader steps down and follows
catalog_leader() {
    sx status --json | jq -r '.nodes[] | select(any(.status.groups[]?; .kind == "catalog" and .role == "leader")) | .name' | head -n 1
}
wait_for "the catalog to have a leader" 10 test -n "$(catalog_leader)"
paused="$(catalog_leader)"
ppid="$(cat "$IT_DIR/pids/$paused.pid")"
kill -STOP "$ppid"
t_stop=$(date +%s%N)
sx_rc table create t_paused --key id
took=$((($(date +%s%N) - t_stop) / 1000000))
kill -CONT "$ppid"
((RC == 0)) || fail "with the catalog's leader $paused paused, a catalog change failed (exit $RC)"
made+=(t_paused)
check_tables "${made[@]}"
pass "the catalog's leader $paused paused: a change succeeded in ${took} ms, without it"
((took <= 5000)) || fail "the catalog took ${took} ms to accept a change with its leader paused"
one_leader_again() { [ "$(catalog_rows | grep -c '^leader$')" = 1 ] && [ "$(catalog_rows | wc -l)" = 3 ]; }
wait_for "one catalog leader among three replicas after $paused resumed" 15 one_leader_again

# every replica holds the whole catalog: with any one of them down, the
# catalog (served by the other two) has every table
for victim in s1 s2 s3; do
    lc kill "$victim" >/dev/null
    check_tables "${made[@]}"
    sx_rc table create t0 --key id
    ((RC != 0)) || fail "t0 was created twice"
    lc start "$victim" >/dev/null
done
pass "with each replica down in turn the catalog still has all ${#made[@]} tables, t0 once"
[ -d "$IT_DIR/data/s2/catalog.raft" ] && [ -d "$IT_DIR/data/s2/raft" ] ||
    fail "no Raft folders in s2's data"
pass "replicated catalog survives the death of any one replica"

# s2's disk is lost: it comes back empty, joins as a new replica, is
# promoted once caught up, and its lost replica is removed; then the
# catalog survives the death of each of the two others, so the new
# replica votes and holds every change
lc kill s2 >/dev/null
rm -rf "$IT_DIR/data/s2"
lc start s2 >/dev/null
joined() { grep -q "this node joined as replica" "$IT_DIR/logs/s2.log"; }
wait_for "s2 to join the catalog as a new replica" 30 joined
replaced() { grep -qh "replica 258 on s2, replaced by" "$IT_DIR"/logs/s[13].log; }
wait_for "the catalog's leader to promote s2's new replica and remove its lost one" 30 replaced
grep -qh "caught up: promoted to voter" "$IT_DIR"/logs/s[13].log ||
    fail "no promotion logged"
pass "s2, its data lost, rejoined the catalog: $(grep -o 'joined as replica [0-9]*' "$IT_DIR/logs/s2.log")"
for victim in s1 s3; do
    lc kill "$victim" >/dev/null
    check_tables "${made[@]}"
    sx_rc table create "t_after_$victim" --key id
    ((RC == 0)) || fail "with $victim down and s2 rejoined, a catalog change failed (exit $RC)"
    made+=("t_after_$victim")
    lc start "$victim" >/dev/null
done
check_tables "${made[@]}"
pass "the rejoined replica counts: the catalog served with s1, then s3, down"
# and it restarts as the replica it became (its id recorded)
lc stop s2 >/dev/null
lc start s2 >/dev/null
lc kill s3 >/dev/null
sx_rc table create t_final --key id
((RC == 0)) || fail "after s2's restart, with s3 down, a catalog change failed"
lc start s3 >/dev/null
[ "$(grep -c "this node joined as replica" "$IT_DIR/logs/s2.log")" = 1 ] ||
    fail "s2 joined again after a restart"
pass "s2 restarted as its new replica; every table made is there"
