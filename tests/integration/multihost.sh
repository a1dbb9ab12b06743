#!/usr/bin/env bash
# tests/integration/multihost.sh — a cluster whose five processes are hosts
# of their own: each in a network namespace with its own address, talking
# over a bridge, not loopback (local-cluster up --netns, deploy/netns.sh).
# Checks: every URL is off loopback and the config carries a link_key; the
# customers example loads and answers from this (the client's) namespace;
# a stranger here cannot speak to a node (sx-badframe: a frame without the
# key's hello and proof, and one with a forged tag, dropped; the same with
# the key answered); a router started with another link_key gets nothing
# from the nodes, which log why; without a link_key the config is refused;
# kill -9 of a storage node host and its restart lose nothing; teardown
# removes the namespaces and the bridge.
# Needs root (network namespaces): without it the test is skipped (exit 77)
# and says so.
source "$(dirname "$0")/lib.sh" "$@"

it_need_netns

it_cluster_up --netns
cfg="$IT_DIR/cluster.json"
jq -e '[.. | .url? // empty] | length == 5 and all(test("^tcp://10\\.200\\.[0-9]+\\.[0-9]+:7100$"))' \
    "$cfg" >/dev/null || fail "the URLs are not one 10.200.x.y address per process: $(jq -c '[.. | .url? // empty]' "$cfg")"
[[ "$(jq -r .link_key "$cfg")" =~ ^[0-9a-f]{64}$ ]] || fail "the config has no link_key"
slot="$(cat "$IT_DIR/netns")"
for n in r1 s1 s2 i1 i2; do
    [ -e "/run/netns/sx$slot-$n" ] || fail "no namespace for $n"
done
[ "$(cat "/run/shardex-netns/$slot")" = "$IT_DIR" ] || fail "slot $slot is not claimed by $IT_DIR"
sx status --json | jq -e '[.nodes[] | .status.links_authenticated] | length == 5 and all' >/dev/null ||
    fail "not every process reports links_authenticated: $(sx status --json | jq -c '[.nodes[] | {name, a: .status.links_authenticated}]')"
pass "five processes in five network namespaces, on 10.200.$slot.0/24, with a link_key in use"

# ---- the main job, across the "hosts" ------------------------------------------
EX="$IT_REPO/deploy/examples/customers.jsonl"
sx table create customers --key id
sx index create customers town_lastname --on town,lastname --project lastname,firstname,town
sx load customers "$EX" >/dev/null
wait_for "index ready" 60 index_ready customers town_lastname
want="$(jq -c 'select(.town == "Redmond") | .id' "$EX" | sort -n | tr '\n' ' ')"
[ -n "$want" ] || fail "the example has no customer in Redmond"
got="$(sx query customers town_lastname --eq '["Redmond"]' --consistency verified | ids_of | sort -n | tr '\n' ' ')"
expect_eq "Redmond through the router on its own host" "$want" "$got"

# ---- strangers on the network --------------------------------------------------
urls="$(jq -r '(.storage[], .index[]) | "link+" + .url' "$cfg")"
# shellcheck disable=SC2086
"$IT_BUILD/bin/sx-badframe" --link-key "$(jq -r .link_key "$cfg")" "$(jq -r .cluster "$cfg")" \
    $urls >"$IT_DIR/badframe.out" 2>&1 || { cat "$IT_DIR/badframe.out" >&2; fail "sx-badframe"; }
[ "$(grep -c 'PING without a hello .*-> dropped' "$IT_DIR/badframe.out")" -eq 4 ] &&
[ "$(grep -c 'PING with a forged tag .*-> dropped' "$IT_DIR/badframe.out")" -eq 4 ] ||
    fail "a node answered a stranger: $(grep -i stranger "$IT_DIR/badframe.out")"
pass "every node drops a stranger's frames from another host, and answers the key's"

# A router with another link_key (a process of another cluster, or a
# stolen config with its key changed), here on an ipc:// socket (no port to
# collide with): the nodes refuse its links, so it gets nothing, and they
# log why.
rogue_url="ipc://$IT_DIR/rogue.sock"
jq --arg u "$rogue_url" '.link_key = ("ab" * 32) | .routers[0].url = $u' \
    "$cfg" >"$IT_DIR/rogue.json"
"$IT_BUILD/bin/shardex-router" --config "$IT_DIR/rogue.json" --name r1 \
    --log "$IT_DIR/logs/rogue.log" >"$IT_DIR/logs/rogue.out" 2>&1 &
rogue=$!
it_extra_cleanup() { kill "$rogue" 2>/dev/null || true; wait "$rogue" 2>/dev/null || true; }
wait_for "the rogue router ready" 30 grep -qx ready "$IT_DIR/logs/rogue.out"
RC=0
out="$(timeout 60 "$IT_CLI" -r "$rogue_url" get customers '{"id": 9}' 2>&1)" || RC=$?
((RC != 0)) || fail "the rogue router read an item: $out"
wait_for "a node logging the rogue's failed authentication" 30 \
    grep -q "failed authentication" "$IT_DIR"/logs/s1.log "$IT_DIR"/logs/s2.log
kill "$rogue"
wait "$rogue" || true
pass "a router with another link_key gets nothing from the nodes (exit $RC: ${out%%$'\n'*})"

jq 'del(.link_key)' "$cfg" >"$IT_DIR/nokey.json"
RC=0
out="$("$IT_BUILD/bin/shardex-node" --config "$IT_DIR/nokey.json" --name s1 \
        --data "$IT_DIR/nokey-data" 2>&1)" || RC=$?
((RC != 0)) && grep -q "link_key" <<<"$out" || fail "a node started from a config without link_key: $out"
pass "without link_key the config is refused: ${out##*: }"

# ---- a host lost and back --------------------------------------------------------
before="$(sx scan customers | jq -cS . | sort)"
lc kill s2 >/dev/null
lc start s2 >/dev/null
wait_for "scan after s2's restart" 60 sx scan customers
after="$(sx scan customers | jq -cS . | sort)"
expect_eq "kill -9 of a storage host and its restart lose nothing" "$before" "$after"

# ---- teardown ----------------------------------------------------------------------
lc teardown >/dev/null
left="$(compgen -G "/run/netns/sx$slot-*" || true)"
[ -z "$left" ] || fail "namespaces left after teardown: $left"
! ip link show "sx${slot}br" >/dev/null 2>&1 || fail "bridge sx${slot}br left after teardown"
[ ! -e "/run/shardex-netns/$slot" ] || fail "slot $slot still claimed after teardown"
pass "teardown removed the namespaces and the bridge, and released the slot"
