#!/usr/bin/env bash
# tests/integration/tls.sh — the router's client port over TLS, client
# certificates required (local-cluster up --tls: the config's client_tls,
# deploy/tls.sh). Items are written, read and queried over TLS (the CLI's
# SHARDEX_TLS_DIR, and --tls), and status says clients_tls. Then each way in
# without the cluster's client certificate fails, says why, and changes
# nothing: no TLS files; plain tcp:// to the TLS port; a client certificate
# another CA signed; a client that does not trust the router (another CA).
# A client refuses a router whose certificate the CA signed for another
# host. Last, the router refuses a config whose TLS URL lacks client_tls,
# one with client_tls and a plain URL, a ws:// URL, and unreadable TLS
# files, naming them.
source "$(dirname "$0")/lib.sh" "$@"
command -v openssl >/dev/null || { echo "SKIPPED [$IT_NAME]: no openssl"; exit 77; }

it_cluster_up --tls
[[ "$IT_URL" == tls+tcp://* ]] || fail "the router URL is not TLS: $IT_URL"
TLS="$IT_DIR/tls"
for f in ca.pem ca.key router.pem router.key client/ca.pem client/client.pem client/client.key; do
    [ -s "$TLS/$f" ] || fail "local-cluster did not make $TLS/$f"
done
[ "$(ls "$TLS/client")" = "$(printf 'ca.pem\nclient.key\nclient.pem')" ] ||
    fail "the client's folder holds more than its CA, certificate and key: $(ls "$TLS/client")"
for f in ca.key router.key client/client.key; do
    [ "$(stat -c %a "$TLS/$f")" = 600 ] || fail "$f is not mode 600"
done

# ---- over TLS ----------------------------------------------------------------------
sx table create people --key id
sx index create people by_town --on town --project all
wait_for "index by_town ready" 60 index_ready people by_town
sx put people '{"id": 1, "town": "Redmond", "name": "ann"}'
[ "$(sx get people '{"id": 1}' | jq -r .name)" = ann ] || fail "get over TLS"
[ "$(sx query people by_town --eq '["Redmond"]' | jq -r .id)" = 1 ] || fail "query over TLS"
[ "$(SHARDEX_TLS_DIR='' "$IT_CLI" -r "$IT_URL" --tls "$TLS/client" get people '{"id": 1}' |
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
cp "$IT_DIR/stranger/client/client.pem" "$IT_DIR/stranger/client/client.key" \
    "$IT_DIR/strange-client/"
nocon="no connection: .*TLS certificate"
refused "$nocon" "$IT_CLI" -r "$IT_URL" --tls "$IT_DIR/strange-client" \
    --timeout 1500 put people '{"id": 7, "town": "Redmond"}'
sx_rc get people '{"id": 7}'
((RC == 1)) || fail "the stranger's put was stored (get exit $RC)"
# a wary client: the cluster's client certificate, but it trusts another CA
cp "$IT_DIR/stranger/ca.pem" "$IT_DIR/wary-client/ca.pem"
cp "$TLS/client/client.pem" "$TLS/client/client.key" "$IT_DIR/wary-client/"
refused "$nocon" "$IT_CLI" -r "$IT_URL" --tls "$IT_DIR/wary-client" \
    --timeout 1500 get people '{"id": 1}'
pass "no TLS files, plain tcp, another CA's client, a client trusting another CA: all refused"

# ---- a router certificate the CA signed for another host --------------------------
# a second router (same nodes) on the slot's next free port, showing a
# certificate for evil.example: the client dials 127.0.0.1 and refuses it
cfg="$IT_DIR/cluster.json"
port="${IT_URL##*:}"
evil="tls+tcp://127.0.0.1:$((port + 6))"
(
    cd "$TLS" || exit 1
    printf 'subjectAltName=DNS:evil.example\nextendedKeyUsage=serverAuth\n' >evil.ext
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout evil.key \
        -out evil.csr -subj /CN=evil.example 2>/dev/null &&
        openssl x509 -req -in evil.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out evil.pem \
            -days 2 -extfile evil.ext 2>/dev/null
) || fail "cannot make the evil router's certificate"
jq --arg u "$evil" '.routers[0].url = $u | .client_tls.cert = "tls/evil.pem" |
    .client_tls.key = "tls/evil.key"' "$cfg" >"$IT_DIR/evil.json"
"$IT_BUILD/bin/shardex-router" --config "$IT_DIR/evil.json" --name r1 \
    --log "$IT_DIR/logs/evil.log" >"$IT_DIR/logs/evil.out" 2>&1 &
EVIL=$!
it_extra_cleanup() { kill "$EVIL" 2>/dev/null || true; wait "$EVIL" 2>/dev/null || true; }
evil_ready() { grep -qx ready "$IT_DIR/logs/evil.out"; }
wait_for "the evil router ready" 30 evil_ready
refused "$nocon" "$IT_CLI" -r "$evil" --timeout 1500 get people '{"id": 1}'
it_extra_cleanup
pass "a router whose certificate names another host is refused by the client"

# ---- the router's config rules ----------------------------------------------------
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
bad_config '.routers[0].url = "wss://127.0.0.1:1"' "not wss://"
pass "the router refuses TLS URLs without client_tls, client_tls without TLS URLs, ws URLs, missing files"
