#!/usr/bin/env bash
# tests/integration/putmix.sh — many PUTs in flight at once through the
# router (sx-putmix, putmix.c): they reach it in MULTI frames, and the
# router writes each frame's PUTs as one S_WRITE per storage partition
# (router/wcomb.c). Valid and invalid PUTs mixed: each is answered on its
# own, every valid item reads back, and the router's status shows that its
# combined path answered the PUTs (with fewer S_WRITEs than PUTs) and, for
# a router inside a storage node, that it called that node in-process.
source "$(dirname "$0")/lib.sh" "$@"

it_cluster_up

sx table create pm_a --key id
sx table create pm_b --key id

router_fig() { sx status --json | jq -e ".nodes[] | select(.role == \"router\") | .status.$1"; }
puts0="$(router_fig combined_puts)"
writes0="$(router_fig combined_writes)"
reruns0="$(router_fig combined_reruns)"

"$IT_BUILD/bin/sx-putmix" "$IT_URL" pm_a pm_b || fail "sx-putmix reported failures"
pass "PUTs in flight together, valid and invalid mixed: each answered on its own"

puts="$(( $(router_fig combined_puts) - puts0 ))"
writes="$(( $(router_fig combined_writes) - writes0 ))"
reruns="$(( $(router_fig combined_reruns) - reruns0 ))"
# On table A: 200 single PUTs (13 invalid: declined at the offer, run the
# ordinary way) and 4 batch PUTs, most of them in MULTI frames of many
# PUTs each (a PUT to table B is combined only when it comes first in its
# frame; the one to no table never). Fewer S_WRITEs than PUTs shows that
# frames of several PUTs were combined.
[ "$puts" -ge 100 ] || fail "the combined path answered $puts PUTs (expected most of 191)"
[ "$reruns" -eq 0 ] || fail "$reruns PUTs were run again, though no S_WRITE should fail"
[ "$writes" -ge 1 ] && [ "$writes" -lt "$puts" ] ||
    fail "the combined path sent $writes S_WRITEs for $puts PUTs (expected fewer)"
pass "the router combined $puts PUTs into $writes S_WRITEs"

# A router inside a storage node (the .hosted variant) calls that node's
# partitions in-process: about half the S_WRITEs above went that way. A
# router process makes no such call.
local_calls="$(router_fig in_process_calls)"
if [ -n "${SHARDEX_IT_ROUTER_IN:-}" ]; then
    [ "$local_calls" -ge 1 ] ||
        fail "the router inside $SHARDEX_IT_ROUTER_IN made no in-process call"
    pass "the router inside $SHARDEX_IT_ROUTER_IN made $local_calls in-process calls"
else
    [ "$local_calls" -eq 0 ] || fail "a router process counted $local_calls in-process calls"
fi

# A PUT declined at the offer leaves nothing behind on the router's thread:
# the next valid PUT, whatever its table, is still combined.
for i in 1 2 3 4 5 6 7 8; do
    sx_rc put pm_a '{"tag": "no key"}'
    [ "$RC" -ne 0 ] || fail "a PUT without its key succeeded"
    p0="$(router_fig combined_puts)"
    sx put pm_b "{\"id\": $((300000 + i)), \"tag\": \"t$((300000 + i))\"}" >/dev/null
    p1="$(router_fig combined_puts)"
    [ "$((p1 - p0))" -eq 1 ] || fail "a valid PUT after a declined one was not combined (pair $i)"
done
pass "after declined PUTs, valid PUTs to another table are still combined"
