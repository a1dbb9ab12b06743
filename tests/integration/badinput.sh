#!/usr/bin/env bash
# tests/integration/badinput.sh — bad input never crashes anything or loses
# data: malformed, truncated, oversized and wrong-version frames sent straight
# to every port (sx-badframe), garbage JSON to the CLI, unknown tables and
# indexes, over-long keys and oversized items. Each gets a clear error; all
# processes keep serving; the data stored before is all still there.
source "$(dirname "$0")/lib.sh" "$@"

EX="$IT_REPO/deploy/examples/customers.jsonl"
BADFRAME="$IT_BUILD/bin/sx-badframe"
[ -x "$BADFRAME" ] || fail "$BADFRAME is missing"

it_cluster_up

sx table create customers --key id
sx index create customers town_lastname --on town,lastname --project lastname,firstname,town
sx load customers "$EX" >/dev/null
wait_for "index ready" 60 index_ready customers town_lastname
before_scan="$(sx scan customers | jq -cS . | sort)"
before_q="$(sx query customers town_lastname --eq '["Redmond"]' --consistency strong | jq -cS .)"
[ "$(wc -l <<<"$before_scan")" -eq "$(grep -c . "$EX")" ] || fail "scan before: wrong count"

# ---- frames straight to every port ------------------------------------------------
# (storage and index nodes speak links: sx-badframe's "link+" URLs)
urls="$(jq -r '(.routers[] | .url), ((.storage[], .index[]) | "link+" + .url)' "$IT_DIR/cluster.json")"
lkey="$(jq -r .link_key "$IT_DIR/cluster.json")"
cname="$(jq -r .cluster "$IT_DIR/cluster.json")"
[[ "$lkey" =~ ^[0-9a-f]{64}$ ]] || fail "local-cluster wrote no link_key"
# shellcheck disable=SC2086
"$BADFRAME" --link-key "$lkey" "$cname" $urls || fail "sx-badframe reported failures"
pass "every port answered every bad frame and still answers PING"

# ---- the CLI: exit codes 2 (usage) or 3 (other error), a message, no crash -----
# expect_err CODES DESC CMD...: CMD must exit with one of CODES ("2 3") and
# print a one-line message on stderr.
expect_err() {
    local codes="$1" desc="$2" err rc=0
    shift 2
    err="$("$IT_CLI" -r "$IT_URL" "$@" 2>&1 >/dev/null)" || rc=$?
    if ! grep -qw "$rc" <<<"$codes"; then
        fail "$desc: exit $rc (expected $codes); stderr: $err"
    fi
    [ -n "$err" ] || fail "$desc: exit $rc but no message on stderr"
    pass "$desc -> exit $rc: $(head -n 1 <<<"$err")"
    LAST_ERR="$err"
}

expect_err "2 3" "put with garbage JSON" put customers '{"id": 1, "town": '
expect_err "2 3" "put with a JSON array instead of an object" put customers '[1, 2, 3]'
expect_err "2 3" "put with trailing garbage" put customers '{"id": 77} xyz'
expect_err "2 3" "put with binary garbage" put customers "$(printf '\x01\x02\xff\xfe')"
expect_err "2 3" "get with garbage key JSON" get customers '{id: 1'
expect_err "2 3" "put without the key attribute" put customers '{"town": "Redmond"}'
expect_err "2 3" "query with garbage --eq" query customers town_lastname --eq '["Redmond"'
expect_err "2 3" "query with a non-array --eq" query customers town_lastname --eq '{"a": 1}'
expect_err "2" "unknown command" frobnicate customers
expect_err "2" "missing arguments" put
expect_err "2" "bad --consistency" query customers town_lastname --consistency sometimes
expect_err "2" "bad --limit" query customers town_lastname --limit notanumber
printf '%s\n' '{"id": 500, "town": "Nowhere", "lastname": "Ok"}' '{"id": 501, garbage' >"$IT_DIR/bad.jsonl"
expect_err "2 3" "load with a garbage line" load customers "$IT_DIR/bad.jsonl"
sx delete customers '{"id": 500}' >/dev/null 2>&1 || true  # the good line may have landed

expect_err "3" "put to an unknown table" put nosuchtable '{"id": 1}'
grep -qi 'table' <<<"$LAST_ERR" || fail "unknown-table message does not say 'table': $LAST_ERR"
expect_err "3" "get from an unknown table" get nosuchtable '{"id": 1}'
expect_err "3" "query on an unknown table" query nosuchtable town_lastname --eq '["x"]'
expect_err "3" "index list of an unknown table" index list nosuchtable
expect_err "3" "query on an unknown index" query customers nosuchindex --eq '["x"]'
grep -qi 'index' <<<"$LAST_ERR" || fail "unknown-index message does not say 'index': $LAST_ERR"
expect_err "3" "drop of an unknown index" index drop customers nosuchindex
expect_err "3" "index on an unknown table" index create nosuchtable ix --on a
expect_err "3" "creating an existing table" table create customers --key id

long="$(head -c 2000 /dev/zero | tr '\0' 'k')"
expect_err "2 3" "put with a 2000-byte key" put customers "{\"id\": \"$long\", \"town\": \"Redmond\"}"
expect_err "2 3" "get with a 2000-byte key" get customers "{\"id\": \"$long\"}"
expect_err "2 3" "delete with a 2000-byte key" delete customers "{\"id\": \"$long\"}"
# the same shape with a short string key is fine (it is the length that fails)
short="$(head -c 100 /dev/zero | tr '\0' 'k')"
sx put customers "{\"id\": \"$short\", \"town\": \"Nowhere\"}" >/dev/null
sx get customers "{\"id\": \"$short\"}" >/dev/null || fail "a 100-byte string key was not stored"
sx delete customers "{\"id\": \"$short\"}" >/dev/null
pass "a 100-byte string key is accepted"
big="$(head -c 500000 /dev/zero | tr '\0' 'b')"
printf '{"id": 600, "blob": "%s"}\n' "$big" >"$IT_DIR/big.jsonl"
expect_err "2 3" "load of a 500 kB item" load customers "$IT_DIR/big.jsonl"
sx_rc get customers '{"id": 600}'
[ "$RC" -eq 1 ] || fail "the oversized item was stored (get exited $RC)"

# ---- everything still serves, nothing stored was lost ---------------------------------
st="$(lc status)"
[ "$(grep -c running <<<"$st")" -eq 5 ] || fail "a process died: $st"
pass "all 5 processes still running"
# shellcheck disable=SC2086
"$BADFRAME" --link-key "$lkey" "$cname" $urls >/dev/null || fail "second sx-badframe round failed"
after_scan="$(sx scan customers | jq -cS . | sort)"
expect_eq "scan after the bad input equals the scan before" "$before_scan" "$after_scan"
after_q="$(sx query customers town_lastname --eq '["Redmond"]' --consistency strong | jq -cS .)"
expect_eq "Redmond query after the bad input equals the one before" "$before_q" "$after_q"
