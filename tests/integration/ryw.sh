#!/usr/bin/env bash
# tests/integration/ryw.sh — read-your-writes through the CLI: a `strong`
# query issued right after a put (or an update that moves the item to another
# index partition, or a delete) sees that write, every time.
source "$(dirname "$0")/lib.sh" "$@"

it_cluster_up

sx table create things --key id
sx index create things by_color --on color --project all
wait_for "index by_color ready" 60 index_ready things by_color

# Colors on both sides of the index split at "M": "Amber" lives in i1,
# "Teal" in i2.
for i in $(seq 1 15); do
    sx put things "{\"id\": $i, \"color\": \"Amber\", \"n\": $i}"
    got="$(sx query things by_color --eq '["Amber"]' --consistency strong | ids_of | grep -cx "$i" || true)"
    [ "$got" -eq 1 ] || fail "strong query right after put of id $i did not see it"
done
pass "15 puts, each seen by the strong query that followed it"

for i in $(seq 1 2 15); do
    sx put things "{\"id\": $i, \"color\": \"Teal\", \"n\": $i}"
    teal="$(sx query things by_color --eq '["Teal"]' --consistency strong | ids_of)"
    grep -qx "$i" <<<"$teal" || fail "strong query did not see id $i moved to Teal"
    amber="$(sx query things by_color --eq '["Amber"]' --consistency strong | ids_of)"
    if grep -qx "$i" <<<"$amber"; then fail "id $i still answered under Amber after moving to Teal"; fi
done
pass "updates moving items across index partitions are seen at once"

for i in 2 4 6; do
    sx delete things "{\"id\": $i}"
    amber="$(sx query things by_color --eq '["Amber"]' --consistency strong | ids_of)"
    if grep -qx "$i" <<<"$amber"; then fail "deleted id $i still answered"; fi
done
pass "deletes are seen at once"

# The final answers, exactly, in index order (by id within a color).
got="$(sx query things by_color --eq '["Amber"]' --consistency strong | ids_of | tr '\n' ' ')"
expect_eq "final Amber set" "8 10 12 14 " "$got"
got="$(sx query things by_color --eq '["Teal"]' --consistency strong | ids_of | tr '\n' ' ')"
expect_eq "final Teal set" "1 3 5 7 9 11 13 15 " "$got"
# eventual reads the index alone (projection all: covering); once strong has
# waited, the index itself holds exactly these entries.
got="$(sx query things by_color --consistency eventual | jq -r '"\(.color):\(.id)"' | tr '\n' ' ')"
expect_eq "index content (eventual, covering)" \
    "Amber:8 Amber:10 Amber:12 Amber:14 Teal:1 Teal:3 Teal:5 Teal:7 Teal:9 Teal:11 Teal:13 Teal:15 " "$got"
