#!/usr/bin/env bash
# tests/integration/router.sh — the router end to end with real processes:
# runs sx-router-it's refresh storm (many clients at once make the router refresh
# its catalog) and its main checks (paging, tokens, conditions,
# consistency, scans, errors), then
# freezes index node i2 (SIGSTOP) to check that a strong read gives up at
# its deadline with SX_ETIMEDOUT, and thaws it to check that the write made
# meanwhile is then seen by a strong read; last, restarts the storage
# nodes with a scan time slice of 0 to check that a filtered scan cut into
# many pages still returns each match once.
#   router.sh BUILD_DIR
source "$(dirname "$0")/lib.sh" "$@"

RT_IT="$IT_BUILD/bin/sx-router-it"
[ -x "$RT_IT" ] || fail "$RT_IT is missing"
FROZEN=""
it_extra_cleanup() {
    [ -n "$FROZEN" ] && kill -CONT "$FROZEN" 2>/dev/null || true
}

it_cluster_up
# first, while the router has not fetched the catalog yet: concurrent refreshes
"$RT_IT" "$IT_URL" refresh-storm || fail "sx-router-it refresh-storm"
pass "concurrent catalog refreshes: every call answered"
"$RT_IT" "$IT_URL" main || fail "sx-router-it main"
pass "paging, tokens, conditions, consistency, scans, errors"

FROZEN="$(cat "$IT_DIR/pids/i2.pid")"
kill -STOP "$FROZEN"
"$RT_IT" "$IT_URL" strong-timeout || fail "sx-router-it strong-timeout"
kill -CONT "$FROZEN"
FROZEN=""
pass "strong read with a frozen index node timed out"
"$RT_IT" "$IT_URL" strong-after || fail "sx-router-it strong-after"
pass "strong read after the thaw"

# The storage nodes again, with a time slice of 0: every S_RANGE page stops
# at its first check, so a filtered scan that fits one page without the
# slice takes several (node/storage/storage_part.h), and still returns each match
# once.
for s in s1 s2; do
    lc stop "$s" >/dev/null || fail "stop $s"
    SHARDEX_SCAN_SLICE_MS=0 lc start "$s" >/dev/null || fail "start $s"
done
wait_for "the router reaches the restarted storage nodes" 30 sx scan pg
"$RT_IT" "$IT_URL" scan-slice || fail "sx-router-it scan-slice"
pass "a filtered scan cut by the storage nodes' time slice"
