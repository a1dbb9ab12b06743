#!/bin/sh
# soak.sh — runs shardex-sim for as many seeds as you like, on every core,
# alternating 3- and 5-replica clusters, and stops at the first failure
# (whose replay command shardex-sim prints).  See docs/RAFT.md ("Soak").
#
#   tests/sim/soak.sh [BIN] [SEEDS_PER_JOB] [ROUNDS] [FIRST]
#     BIN            shardex-sim binary (default build/bin/shardex-sim)
#     SEEDS_PER_JOB  seeds per job (default 2000)
#     ROUNDS         rounds of one job per core (default 0 = until a failure)
#     FIRST          first seed (default: derived from the clock)
#   Extra flags for shardex-sim can be given in SIM_FLAGS (e.g. --groups 3).
set -u
BIN=${1:-build/bin/shardex-sim}
PER=${2:-2000}
ROUNDS=${3:-0}
FIRST=${4:-$(( ($(date +%s) % 100000) * 100000 ))}
JOBS=$(nproc 2>/dev/null || echo 2)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
round=0
next=$FIRST
while [ "$ROUNDS" -eq 0 ] || [ "$round" -lt "$ROUNDS" ]; do
  pids=""
  j=0
  while [ "$j" -lt "$JOBS" ]; do
    reps=$(( (round + j) % 2 == 0 ? 3 : 5 ))
    # shellcheck disable=SC2086
    "$BIN" --first "$next" --seeds "$PER" --replicas "$reps" ${SIM_FLAGS:-} \
      >"$TMP/out.$j" 2>&1 &
    pids="$pids $!"
    next=$(( next + PER ))
    j=$(( j + 1 ))
  done
  fail=0
  for p in $pids; do wait "$p" || fail=1; done
  cat "$TMP"/out.* | grep -E 'FAILED|replay' || true
  passed=$(cat "$TMP"/out.* | awk '/ passed, /{p+=$1} END{print p+0}')
  echo "round $round: $passed seeds passed (seeds $FIRST..$(( next - 1 )))"
  if [ "$fail" -ne 0 ]; then
    echo "soak: failure found"
    exit 1
  fi
  round=$(( round + 1 ))
done
echo "soak: all seeds passed"
