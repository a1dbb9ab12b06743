#!/usr/bin/env bash
# tests/integration/fuzzframe.sh — thousands of mutated-but-nearly-valid
# frames (sx-fuzzframe) to every port of a real cluster: each gets a
# well-formed reply, every process keeps serving and reports nothing (no
# sanitizer report, no abort), and the data read before is all still there.
#
# What the data check covers: the customers table (every item, by scan) and
# its index (a strong query). sx-fuzzframe sends mutated writes to internal
# ports too (S_WRITE, I_APPLY, I_BUILD, CAT_UPDATE, CAT_BACKFILLED), which,
# with no inter-node authentication yet, may really write; it withholds,
# before sending, every frame that decodes (as its server will decode it)
# into a write that could touch customers (its table id, name or index ids,
# or an I_APPLY watermark move). So customers must come out unchanged, while
# the throwaway table fzscratch (and whatever tables and indexes the fuzzed
# TABLE_CREATE / INDEX_CREATE / CAT_UPDATE frames made) may hold anything:
# the test only checks that it still takes a write and reads it back.
source "$(dirname "$0")/lib.sh" "$@"

EX="$IT_REPO/deploy/examples/customers.jsonl"
FUZZ="$IT_BUILD/bin/sx-fuzzframe"
[ -x "$FUZZ" ] || fail "$FUZZ is missing"
# FUZZ_COUNT / FUZZ_SEED: run longer, or another sequence, by hand
FUZZ_ARGS=(--count "${FUZZ_COUNT:-1500}")
[ -z "${FUZZ_SEED:-}" ] || FUZZ_ARGS+=(--seed "$FUZZ_SEED")

it_cluster_up

sx table create customers --key id
sx index create customers town_lastname --on town,lastname --project lastname,firstname,town
sx load customers "$EX" >/dev/null
sx table create fzscratch --key id
sx index create fzscratch by_town --on town
sx put fzscratch '{"id": 1, "town": "Redmond", "lastname": "Seed"}' >/dev/null
wait_for "customers index ready" 60 index_ready customers town_lastname
wait_for "fzscratch index ready" 60 index_ready fzscratch by_town
before_scan="$(sx scan customers | jq -cS . | sort)"
before_q="$(sx query customers town_lastname --eq '["Redmond"]' --consistency strong | jq -cS .)"
[ "$(wc -l <<<"$before_scan")" -eq "$(grep -c . "$EX")" ] || fail "scan before: wrong count"
[ "$(wc -l <<<"$before_q")" -ge 2 ] || fail "the Redmond query before found too little"

# ---- the fuzzer: every port of cluster.json (routers over REQ/REP, nodes over links)
"$FUZZ" --config "$IT_DIR/cluster.json" --read customers --write fzscratch "${FUZZ_ARGS[@]}" \
    >"$IT_DIR/fuzz.out" 2>"$IT_DIR/fuzz.err" || {
    cat "$IT_DIR/fuzz.out"
    head -c 20000 "$IT_DIR/fuzz.err" >&2
    fail "sx-fuzzframe reported failures"
}
tail -n 2 "$IT_DIR/fuzz.out"
total="$(awk '$1 == "total" {print $2}' "$IT_DIR/fuzz.out")"
if [ -z "$total" ] || [ "$total" -lt $((20 * ${FUZZ_COUNT:-1500})) ]; then
    fail "sx-fuzzframe sent too few frames: '$total'"
fi
pass "every port answered each of $total mutated frames and still answered PING"

# ---- every process alive, nothing reported in any log --------------------------
st="$(lc status)"
[ "$(grep -c running <<<"$st")" -eq 5 ] || fail "a process died: $st"
pass "all 5 processes still running"
pattern='AddressSanitizer|UndefinedBehaviorSanitizer|LeakSanitizer|runtime error|Assertion .* failed|[Aa]bort(ed)?\b|Segmentation fault|SIGSEGV|SIGABRT'
hits="$(grep -nE "$pattern" "$IT_DIR"/logs/* || true)"
if [ -n "$hits" ]; then
    head -n 40 <<<"$hits" >&2
    fail "a daemon's log reports a sanitizer error, an assertion or an abort (above)"
fi
pass "no sanitizer report, assertion or abort in any log"
"$FUZZ" --config "$IT_DIR/cluster.json" --ping || fail "a port does not answer PING"
sx status >/dev/null || fail "status (every node through the router) failed"
pass "every port answers PING; status reaches every node"

# ---- the data read before is all still there --------------------------------------
after_scan="$(sx scan customers | jq -cS . | sort)"
expect_eq "scan of customers after the fuzzing equals the scan before" "$before_scan" "$after_scan"
after_q="$(sx query customers town_lastname --eq '["Redmond"]' --consistency strong | jq -cS .)"
expect_eq "Redmond query after the fuzzing equals the one before" "$before_q" "$after_q"
sx put fzscratch '{"id": 424242, "town": "After", "lastname": "Fuzz"}' >/dev/null
[ "$(sx get fzscratch '{"id": 424242}' | jq -r .town)" = After ] ||
    fail "the throwaway table no longer takes a write and reads it back"
pass "the throwaway table still takes a write and reads it back"
