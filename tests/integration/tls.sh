#!/usr/bin/env bash
# tests/integration/tls.sh — the router's client port over TLS, client
# certificates required (local-cluster up --tls: the config's client_tls,
# deploy/tls.sh). Items are written, read and queried over TLS (the CLI's
# SHARDEX_TLS_DIR, and --tls), and status says clients_tls. Then each way in
# without the cluster's client certificate fails, says why, and changes
# nothing: no TLS files; plain tcp:// to the TLS port; a client certificate
# another CA signed; a client that does not trust the router (another CA).
# Last, the router refuses a config whose TLS URL lacks client_tls, one
# with client_tls and a plain URL, and unreadable TLS files, naming them.
source "$(dirname "$0")/lib.sh" "$@"
command -v openssl >/dev/null || { echo "SKIPPED [$IT_NAME]: no openssl"; exit 77; }

it_cluster_up --tls
[[ "$IT_URL" == tls+tcp://* ]] || fail "the router URL is not TLS: $IT_URL"
TLS="$IT_DIR/tls"
for f in ca.pem ca.key router.pem router.key client.pem client.key; do
    [ -s "$TLS/$f" ] || fail "local-cluster did not make $TLS/$f"
done
[ "$(stat -c %a "$TLS/client.key")" = 600 ] || fail "client.key is not mode 600"

# ---- over TLS ----------------------------------------------------------------------
sx table create people --key id
sx index create people by_town --on town --project all
wait_for "index by_town ready" 60 index_ready people by_town
sx put people '{"id": 1, "town": "Redmond", "name": "ann"}'
[ "$(sx get people '{"id": 1}' | jq -r .name)" = ann ] || fail "get over TLS"
[ "$(sx query people by_town --eq '["Redmond"]' | jq -r .id)" = 1 ] || fail "query over TLS"
[ "$(SHARDEX_TLS_DIR='' "$IT_CLI" -r "$IT_URL" --tls "$TLS" get people '{"id": 1}' |
    jq -r .name)" = ann ] || fail "get with --tls"
[ "$(sx status --json | jq '.nodes[0].status.clients_tls')" = true ] ||
    fail "status does not say clients_tls"
pass "put, get, query and status over TLS (SHARDEX_TLS_DIR and --tls)"

# ---- every way in without the cluster's client certificate ------------------------
# refused OUT [ARGS...]: the CLI exits 3 and its message matches OUT
refused() {
    local want="$1" rc=0 out
    shift
    out="$("$@" 2>&1)" || rc=$?
    ((rc == 3)) || fail "$* exited $rc, not 3: $out"
    grep -q -- "$want" <<<"$out" || fail "$* did not say '$want': $out"
}
refused "needs TLS files.*--tls DIR" env SHARDEX_TLS_DIR= "$IT_CLI" -r "$IT_URL" get people '{"id": 1}'
plain="tcp://${IT_URL#tls+tcp://}"
refused "timed out after 1500 ms" env SHARDEX_TLS_DIR= "$IT_CLI" -r "$plain" --timeout 1500 \
    get people '{"id": 1}'
# a stranger: a client certificate its own CA signed, the cluster's CA to check the router
(
    die() { echo "$*" >&2; exit 1; }
    # shellcheck source=deploy/tls.sh
    source "$IT_REPO/deploy/tls.sh"
    tls_make "$IT_DIR/stranger" 127.0.0.1
) || fail "cannot make the stranger's certificates"
mkdir -p "$IT_DIR/strange-client" "$IT_DIR/wary-client"
cp "$TLS/ca.pem" "$IT_DIR/strange-client/ca.pem"
cp "$IT_DIR/stranger/client.pem" "$IT_DIR/stranger/client.key" "$IT_DIR/strange-client/"
refused "no TLS connection within 1500 ms" "$IT_CLI" -r "$IT_URL" --tls "$IT_DIR/strange-client" \
    --timeout 1500 put people '{"id": 7, "town": "Redmond"}'
sx_rc get people '{"id": 7}'
((RC == 1)) || fail "the stranger's put was stored (get exit $RC)"
# a wary client: the cluster's client certificate, but it trusts another CA
cp "$IT_DIR/stranger/ca.pem" "$IT_DIR/wary-client/ca.pem"
cp "$TLS/client.pem" "$TLS/client.key" "$IT_DIR/wary-client/"
refused "no TLS connection within 1500 ms" "$IT_CLI" -r "$IT_URL" --tls "$IT_DIR/wary-client" \
    --timeout 1500 get people '{"id": 1}'
pass "no TLS files, plain tcp, another CA's client, a client trusting another CA: all refused"

# ---- the router's config rules ----------------------------------------------------
cfg="$IT_DIR/cluster.json"
# bad_config JQ WANT: the router refuses the config JQ makes, saying WANT
bad_config() {
    local out
    jq "$1" "$cfg" >"$IT_DIR/bad.json"
    out="$("$IT_BUILD/bin/shardex-router" --config "$IT_DIR/bad.json" --name r1 2>&1)" &&
        fail "the router started with $1"
    grep -q -- "$2" <<<"$out" || fail "the router did not say '$2' for $1: $out"
}
bad_config 'del(.client_tls)' "no \"client_tls\""
bad_config '.routers[0].url = "tcp://127.0.0.1:1"' "must listen on a tls+tcp:// URL"
bad_config '.client_tls.key = "tls/missing.key"' "cannot read .*missing.key"
pass "the router refuses TLS URLs without client_tls, client_tls without TLS URLs, missing files"
