#!/usr/bin/env bash
# tests/chaos/smoke.sh — chaos.smoke: the chaos runner's smoke
# (tests/chaos/run --schedule smoke) on the binaries of BUILD_DIR, at 3
# replicas a partition (the default layout):
#   1. the kill, pause and partition-halves schedules, 30 s each, on a
#      healthy build: the runner exits 0, and for each schedule
#      results.json says every checker passed, at least one fault was
#      injected and healed, and each workload had at least 200 ok
#      operations;
#   2. each planted bug (a build with -DSHARDEX_TEST_HOOKS=ON), in one
#      schedule: the runner exits 1 and names a checker that must catch it
#      (strong-skips-wait: index, under kill, 10 s; index-ignores-version:
#      index-quiescent, under pause, 10 s; stale-leader-read: linearizable,
#      under partition-leader, 10 s; ack-before-commit: set-full,
#      linearizable or index, under partition-leader, 30 s and 9 clients:
#      only the group a cut-off leader proposes before it steps down is
#      lost, so it takes a write of a client of that node's router in that
#      moment, which not every fault brings).
# Needs root (network namespaces): without it, or without test hooks for
# part 2, it says so and exits 77. Each run's folder is kept under
# BUILD_DIR/chaos-smoke when the test fails.
# Usage: tests/chaos/smoke.sh BUILD_DIR
set -euo pipefail

BUILD="$(cd "${1:?usage: smoke.sh BUILD_DIR}" && pwd -P)"
RUN="$(cd "$(dirname "$0")" && pwd -P)/run"
export SHARDEX_BIN="$BUILD/bin"
START=$SECONDS
mkdir -p "$BUILD/chaos-smoke"
W="$(mktemp -d "$BUILD/chaos-smoke/run.XXXXXX")"

fail() {
    echo "FAIL [chaos.smoke]: $*" >&2
    echo "[chaos.smoke] runs kept in $W" >&2
    exit 1
}
pass() { echo "ok   [chaos.smoke +$((SECONDS - START))s]: $*"; }

# chaos NAME ARGS...: the runner into $W/NAME; sets RC
chaos() {
    local name="$1"
    shift
    RC=0
    "$RUN" --out "$W/$name" "$@" >"$W/$name.log" 2>&1 || RC=$?
    if ((RC == 77)); then
        grep SKIPPED "$W/$name.log" || true
        rm -rf "$W"
        exit 77
    fi
}

# ---- 1. the smoke on a healthy build ------------------------------------------
chaos healthy --schedule smoke --duration 30 --seed 41 --replicas 3
if ((RC != 0)); then
    tail -n 40 "$W/healthy.log" >&2
    fail "the smoke exited $RC"
fi
R="$W/healthy/results.json"
[ "$(jq '.schedules | length' "$R")" = 3 ] || fail "results.json has not 3 schedules"
for s in kill pause partition-halves; do
    jq -e --arg s "$s" '.schedules[] | select(.schedule == $s) | .passed' "$R" >/dev/null ||
        fail "$s: not every checker passed: $(jq -c --arg s "$s" '.schedules[] | select(.schedule == $s) | .checkers' "$R")"
    n="$(jq --arg s "$s" '.schedules[] | select(.schedule == $s) | [.faults[] | select(.healed_s > .start_s)] | length' "$R")"
    ((n >= 1)) || fail "$s: no fault was injected and healed"
    low="$(jq -r --arg s "$s" '.schedules[] | select(.schedule == $s) | .operations | to_entries[] | select(.value.ok < 200) | .key' "$R")"
    [ -z "$low" ] || fail "$s: fewer than 200 ok operations in $low"
    [ -s "$W/healthy/$s/timeline.png" ] || ! command -v gnuplot >/dev/null ||
        fail "$s: no timeline.png"
    pass "$s: $n fault(s), $(jq -r --arg s "$s" '.schedules[] | select(.schedule == $s) | .operations | [.[] | .ok] | add' "$R") ok operations, every checker passed"
done

# ---- 2. each planted bug caught ----------------------------------------------
if ! grep -q "built with test hooks" <<<"$("$SHARDEX_BIN/shardex-node" --help)"; then
    echo "SKIPPED [chaos.smoke]: the planted bugs need a build with -DSHARDEX_TEST_HOOKS=ON"
    exit 77
fi
# BUG:SCHEDULE:SECONDS:CLIENTS:CHECKERS (CHECKERS: any of them, | between)
for plan in strong-skips-wait:kill:10:6:index index-ignores-version:pause:10:6:index-quiescent \
            'ack-before-commit:partition-leader:30:9:set-full|linearizable|index' \
            stale-leader-read:partition-leader:10:6:linearizable; do
    IFS=: read -r bug s secs ncl checker <<<"$plan"
    chaos "$bug" --schedule "$s" --duration "$secs" --clients "$ncl" --seed 42 --replicas 3 --plant "$bug"
    if ((RC != 1)); then
        tail -n 40 "$W/$bug.log" >&2
        fail "--plant $bug: the runner exited $RC, not 1"
    fi
    grep -Eq "^chaos: FAILED checkers: .*\b($checker) \($s\)" "$W/$bug.log" ||
        fail "--plant $bug: no ${checker//|/ or } checker caught it in $s: $(grep '^chaos: FAILED' "$W/$bug.log" || echo 'no failed checker')"
    pass "--plant $bug: caught in $s ($(grep '^chaos: FAILED' "$W/$bug.log"))"
done
rm -rf "$W"
echo "[chaos.smoke] finished in $((SECONDS - START))s"
