#!/usr/bin/env bash
# router/tests/it/router_it.sh — the router end to end with real processes:
# runs rt_it's refresh storm (many clients at once make the router refresh
# its catalog) and its main checks (paging, tokens, conditions,
# consistency, scans, errors), then
# freezes index node i2 (SIGSTOP) to check that a strong read gives up at
# its deadline with SX_ETIMEDOUT, and thaws it to check that the write made
# meanwhile is then seen by a strong read; last, restarts the storage
# nodes with a scan time slice of 0 to check that a filtered scan cut into
# many pages still returns each match once.
#   router_it.sh BUILD_DIR
source "$(dirname "$0")/../../../tests/integration/lib.sh" "$@"

RT_IT="$IT_BUILD/bin/router_rt_it"
[ -x "$RT_IT" ] || fail "$RT_IT is missing"
FROZEN=""
it_extra_cleanup() {
    [ -n "$FROZEN" ] && kill -CONT "$FROZEN" 2>/dev/null || true
}

it_cluster_up
# first, while the router has not fetched the catalog yet: concurrent refreshes
"$RT_IT" "$IT_URL" refresh-storm || fail "rt_it refresh-storm"
pass "concurrent catalog refreshes: every call answered"
"$RT_IT" "$IT_URL" main || fail "rt_it main"
pass "paging, tokens, conditions, consistency, scans, errors"

FROZEN="$(cat "$IT_DIR/pids/i2.pid")"
kill -STOP "$FROZEN"
"$RT_IT" "$IT_URL" strong-timeout || fail "rt_it strong-timeout"
kill -CONT "$FROZEN"
FROZEN=""
pass "strong read with a frozen index node timed out"
"$RT_IT" "$IT_URL" strong-after || fail "rt_it strong-after"
pass "strong read after the thaw"

# The storage nodes again, with a time slice of 0: every S_RANGE page stops
# at its first check, so a filtered scan that fits one page without the
# slice takes several (node/storage_part.h), and still returns each match
# once.
for s in s1 s2; do
    lc stop "$s" >/dev/null || fail "stop $s"
    SHARDEX_SCAN_SLICE_MS=0 lc start "$s" >/dev/null || fail "start $s"
done
wait_for "the router reaches the restarted storage nodes" 30 sx scan pg
"$RT_IT" "$IT_URL" scan-slice || fail "rt_it scan-slice"
pass "a filtered scan cut by the storage nodes' time slice"
