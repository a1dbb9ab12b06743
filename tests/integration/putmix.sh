#!/usr/bin/env bash
# tests/integration/putmix.sh — many PUTs in flight at once through the
# router (sx-putmix, putmix.c): they reach it in MULTI frames, and the
# router writes each frame's PUTs as one S_WRITE per storage partition
# (router/wcomb.c). Valid and invalid PUTs mixed: each is answered on its
# own, every valid item reads back, and the router's status shows that its
# combined path answered the PUTs (with fewer S_WRITEs than PUTs).
source "$(dirname "$0")/lib.sh" "$@"

it_cluster_up

sx table create pm_a --key id
sx table create pm_b --key id

router_fig() { sx status --json | jq -e ".nodes[] | select(.role == \"router\") | .status.$1"; }
puts0="$(router_fig combined_puts)"
writes0="$(router_fig combined_writes)"

"$IT_BUILD/bin/sx-putmix" "$IT_URL" pm_a pm_b || fail "sx-putmix reported failures"
pass "PUTs in flight together, valid and invalid mixed: each answered on its own"

puts="$(( $(router_fig combined_puts) - puts0 ))"
writes="$(( $(router_fig combined_writes) - writes0 ))"
# 200 single PUTs (12 invalid, declined to the ordinary handler) and 4
# batch PUTs: most travel in MULTI frames of many PUTs each.
[ "$puts" -ge 100 ] || fail "the combined path answered $puts PUTs (expected most of 192)"
[ "$writes" -ge 1 ] && [ "$writes" -lt "$puts" ] ||
    fail "the combined path sent $writes S_WRITEs for $puts PUTs (expected fewer)"
pass "the router combined $puts PUTs into $writes S_WRITEs"
