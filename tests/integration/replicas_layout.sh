#!/usr/bin/env bash
# tests/integration/replicas_layout.sh — the layouts of deploy/local-cluster
# --replicas 1, 3 and 5, as `local-cluster config` writes them (no process
# started): --replicas 1 exactly the two-storage, two-index layout with its
# router of its own; 3 and 5 that many storage and index nodes with their
# ids, every fact partition on every storage node with its first replica
# rotating, the catalog on every storage node, the index space split in
# as many partitions, a router inside each storage node, 3N distinct
# consecutive loopback ports; `url` lists every router; the options are
# kept with the folder (another --replicas, or --router-in with 3, is
# refused, saying why); --tls and (as root) --netns addressing of the larger
# layouts. Then `up --replicas 3` and `5`: every process and router runs
# (the first start with --bootstrap), status shows the routers inside their
# storage nodes, a table is made through the list of routers, also with s1
# (and r1) killed; kill/start, stop/start, down and a second up (without
# --bootstrap, the tables still there).
# Usage: tests/integration/replicas_layout.sh BUILD_DIR
source "$(dirname "$0")/lib.sh" "$@"

LC="$IT_REPO/deploy/local-cluster"
ROOT="$(it_mktemp)"
it_extra_cleanup() {
    local d
    [ ! -d "$ROOT" ] || echo "[$IT_NAME] folders kept for inspection: $ROOT" >&2
    for d in "$ROOT"/*/; do
        [ -f "$d/cluster.json" ] && "$LC" teardown --dir "$d" >/dev/null 2>&1 || true
    done
}

# lcd DIR ARGS...: local-cluster ARGS on the cluster in DIR
lcd() {
    local d="$1"
    shift
    "$LC" "$@" --dir "$d"
}

# refused DESC MESSAGE CMD...: CMD must fail (exit 1) and say MESSAGE
refused() {
    local desc="$1" msg="$2" out rc=0
    shift 2
    out="$("$@" 2>&1)" || rc=$?
    [ "$rc" -eq 1 ] || fail "$desc: exit $rc, not 1: $out"
    grep -qF -- "$msg" <<<"$out" || fail "$desc: does not say '$msg': $out"
    pass "$desc: $out"
}

# ---- config: writes the file, starts nothing, prints its path -------------------------
for n in 1 3 5; do
    d="$ROOT/r$n"
    path="$(lcd "$d" config --replicas "$n")" || fail "config --replicas $n failed"
    [ "$path" = "$d/cluster.json" ] || fail "config printed '$path', not $d/cluster.json"
    [ "$(stat -c %a "$path")" = 600 ] || fail "the config (it holds secrets) is not mode 600"
    [ ! -e "$d/pids" ] && [ ! -e "$d/bootstrapped" ] || fail "config started something in $d"
    sum="$(md5sum <"$path")"
    [ "$(lcd "$d" config)" = "$path" ] && [ "$(md5sum <"$path")" = "$sum" ] ||
        fail "a second config on $d changed its config"
    [ "$(lcd "$d" config --replicas "$n")" = "$path" ] && [ "$(md5sum <"$path")" = "$sum" ] ||
        fail "config --replicas $n on its own folder changed its config"
done
pass "config --replicas 1, 3, 5 wrote a config each (mode 600, nothing started) and keeps it"

# ---- --replicas 1: today's layout ---------------------------------------------------
c1="$ROOT/r1/cluster.json"
want1='{"catalog_node": "s1",
  "routers": [{"name": "r1"}],
  "storage": [
    {"name": "s1", "partitions": [
      {"id": 1, "lo": "0000000000000000", "hi": "3fffffffffffffff"},
      {"id": 2, "lo": "4000000000000000", "hi": "7fffffffffffffff"}]},
    {"name": "s2", "partitions": [
      {"id": 3, "lo": "8000000000000000", "hi": "bfffffffffffffff"},
      {"id": 4, "lo": "c000000000000000", "hi": "ffffffffffffffff"}]}],
  "index": [
    {"name": "i1", "partitions": [{"id": 101, "lo": null, "hi": ["M"]}]},
    {"name": "i2", "partitions": [{"id": 102, "lo": ["M"], "hi": null}]}]}'
got1="$(jq -S 'del(.cluster, .hash_key, .token_key, .link_key)
               | walk(if type == "object" then del(.url) else . end)' "$c1")"
expect_eq "--replicas 1: 1 router of its own, s1 s2 (partitions 1-4), i1 i2 split at M, catalog on s1" \
    "$(jq -S . <<<"$want1")" "$got1"
jq -e '[.routers[], .storage[], .index[] | .url | ltrimstr("tcp://127.0.0.1:") | tonumber] as $p
       | ($p | length) == 5 and $p == [range($p[0]; $p[0] + 5)]' "$c1" >/dev/null ||
    fail "--replicas 1: the ports are not 5 consecutive loopback ports: $(jq -c '[.. | .url? // empty]' "$c1")"
[ "$(lcd "$ROOT/r1" url)" = "$(jq -r '.routers[0].url' "$c1")" ] || fail "url of --replicas 1"
pass "--replicas 1: ports r1 s1 s2 i1 i2 consecutive on loopback; url prints r1's"

# ---- --replicas 3 and 5 -----------------------------------------------------------------
# check_layout N CONFIG: the layout of --replicas N
check_layout() {
    local n="$1" c="$2" splits
    case "$n" in 3) splits='["H", "P"]' ;; 5) splits='["D", "H", "M", "S"]' ;; esac
    jq -e --argjson n "$n" '
        [.storage[].name] == [range(1; $n + 1) | "s\(.)"] and
        [.storage[].id] == [range(1; $n + 1)] and
        [.index[].name] == [range(1; $n + 1) | "i\(.)"] and
        [.index[].id] == [range(11; $n + 11)]' "$c" >/dev/null ||
        fail "--replicas $n: storage and index nodes, ids: $(jq -c '[(.storage[], .index[]) | [.name, .id]]' "$c")"
    # fact partitions: ids 1-4 over four equal hash ranges, each on all N
    # storage nodes, listed under its first replica, which rotates
    jq -e --argjson n "$n" '
        [.storage[] as $nd | $nd.partitions[] | . + {node: $nd.name}] | sort_by(.id) as $f
        | [$f[].id] == [1, 2, 3, 4]
          and [$f[] | [.lo, .hi]] == [["0000000000000000", "3fffffffffffffff"],
                                      ["4000000000000000", "7fffffffffffffff"],
                                      ["8000000000000000", "bfffffffffffffff"],
                                      ["c000000000000000", "ffffffffffffffff"]]
          and all($f[]; . as $p
                  | $p.replicas == [range(0; $n) as $t | "s\((($p.id - 1 + $t) % $n) + 1)"]
                    and $p.node == $p.replicas[0])' "$c" >/dev/null ||
        fail "--replicas $n: fact partitions: $(jq -c '[.storage[] | {name, p: .partitions}]' "$c")"
    # index partitions: N, one per index node, split at SPLITS; each with
    # the same number of replicas (local-cluster's index_partition_replicas:
    # 1 for now, or N), from its node on, rotating
    jq -e --argjson n "$n" --argjson s "$splits" '
        [.index[] as $nd | $nd.partitions[] | . + {node: $nd.name}] as $x
        | ($x[0].replicas | length) as $r
        | [$x[].id] == [range(101; 101 + $n)]
          and [$x[] | [.lo, .hi]] == [range(0; $n) as $k
                                      | [(if $k == 0 then null else [$s[$k - 1]] end),
                                         (if $k == $n - 1 then null else [$s[$k]] end)]]
          and ($r == 1 or $r == $n)
          and all($x[]; . as $p | ($p.id - 101) as $k
                  | $p.node == "i\($k + 1)"
                    and $p.replicas == [range(0; $r) as $t | "i\((($k + $t) % $n) + 1)"])' \
        "$c" >/dev/null ||
        fail "--replicas $n: index partitions: $(jq -c '[.index[] | {name, p: .partitions}]' "$c")"
    jq -e --argjson n "$n" '
        .catalog_node == [range(1; $n + 1) | "s\(.)"]
        and [.routers[] | [.name, .host]] == [range(1; $n + 1) | ["r\(.)", "s\(.)"]]' \
        "$c" >/dev/null ||
        fail "--replicas $n: catalog or routers: $(jq -c '{catalog_node, routers}' "$c")"
    jq -e --argjson n "$n" '
        [.routers[], .storage[], .index[] | .url | ltrimstr("tcp://127.0.0.1:") | tonumber] as $p
        | ($p | length) == 3 * $n and $p == [range($p[0]; $p[0] + 3 * $n)]' "$c" >/dev/null ||
        fail "--replicas $n: not 3N consecutive loopback ports: $(jq -c '[.. | .url? // empty]' "$c")"
    [ "$(lcd "$(dirname "$c")" url)" = "$(jq -r '[.routers[].url] | join(",")' "$c")" ] ||
        fail "--replicas $n: url is not every router's URL, comma-separated: $(lcd "$(dirname "$c")" url)"
    pass "--replicas $n: s1..s$n and i1..i$n with ids; fact partitions 1-4 on all $n, first replica rotating; $n index partitions; catalog on s1..s$n; r1..r$n inside s1..s$n; $((3 * n)) ports"
}
check_layout 3 "$ROOT/r3/cluster.json"
check_layout 5 "$ROOT/r5/cluster.json"
st="$(lcd "$ROOT/r3" status)"
[ "$(wc -l <<<"$st")" -eq 9 ] && [ "$(grep -c ' stopped$' <<<"$st")" -eq 6 ] &&
    [ "$(grep -cE '^router +r[123] +- .* stopped \(in s[123]\)$' <<<"$st")" -eq 3 ] ||
    fail "status of a --replicas 3 cluster not started: $st"
pass "status of --replicas 3: 6 processes, 3 routers inside their storage nodes"

# ---- the options stay with the folder -------------------------------------------------
refused "config --replicas 3 on a --replicas 1 folder" "made with --replicas 1, not 3" \
    lcd "$ROOT/r1" config --replicas 3
refused "up --replicas 5 on a --replicas 3 folder" "made with --replicas 3, not 5" \
    lcd "$ROOT/r3" up --replicas 5
refused "--router-in with a --replicas 3 folder" "--router-in goes with --replicas 1" \
    lcd "$ROOT/r3" up --router-in s1
refused "--router-in with --replicas 3" "every storage node hosts a router already" \
    lcd "$ROOT/new" config --replicas 3 --router-in s1
[ ! -e "$ROOT/new" ] || fail "a refused config made its folder"
refused "--replicas 2" "--replicas takes 1, 3 or 5" lcd "$ROOT/new" config --replicas 2
refused "--replicas with status" "--replicas goes with up or config" \
    lcd "$ROOT/r3" status --replicas 3
lcd "$ROOT/rin" config --replicas 1 --router-in s2 >/dev/null
jq -e '.routers == [{"name": "r1", "url": .routers[0].url, "host": "s2"}]' \
    "$ROOT/rin/cluster.json" >/dev/null || fail "--router-in s2: $(jq -c .routers "$ROOT/rin/cluster.json")"
pass "--router-in s2 with --replicas 1: r1 inside s2"

# ---- --tls, and --netns addressing ----------------------------------------------------
lcd "$ROOT/tls3" config --replicas 3 --tls >/dev/null
jq -e '[.routers[].url | test("^tls\\+tcp://127\\.0\\.0\\.1:[0-9]+$")] == [true, true, true]
       and has("client_tls")' "$ROOT/tls3/cluster.json" >/dev/null ||
    fail "--tls --replicas 3: $(jq -c '{routers, client_tls}' "$ROOT/tls3/cluster.json")"
[ -s "$ROOT/tls3/tls/router.pem" ] && [ -s "$ROOT/tls3/tls/client/client.pem" ] ||
    fail "--tls --replicas 3 made no certificates"
pass "--tls --replicas 3: three tls+tcp:// routers, certificates in DIR/tls"
if [ "$(id -u)" = 0 ] && command -v ip >/dev/null 2>&1; then
    lcd "$ROOT/ns5" config --replicas 5 --netns >/dev/null
    slot="$(cat "$ROOT/ns5/netns")"
    [ "$(cat "/run/shardex-netns/$slot")" = "$ROOT/ns5" ] || fail "slot $slot not claimed by $ROOT/ns5"
    jq -e --arg a "10.200.$slot." '
        [.index[].url] == [range(1; 6) | "tcp://\($a)\(.):7100"]
        and [.storage[].url] == [range(6; 11) | "tcp://\($a)\(.):7100"]
        and [.routers[].url] == [range(6; 11) | "tcp://\($a)\(.):7101"]' \
        "$ROOT/ns5/cluster.json" >/dev/null ||
        fail "--netns --replicas 5: $(jq -c '[.. | .url? // empty]' "$ROOT/ns5/cluster.json")"
    lcd "$ROOT/ns5" teardown >/dev/null
    [ ! -e "/run/shardex-netns/$slot" ] || fail "teardown kept slot $slot"
    pass "--netns --replicas 5: i1..i5 on .1-.5, s1..s5 on .6-.10, r1..r5 on port 7101 of their node; teardown released slot $slot"
    refused "--netns --tls --replicas 3" "--netns with --tls takes --replicas 1" \
        lcd "$ROOT/new" config --replicas 3 --netns --tls
else
    echo "[$IT_NAME] not root: --netns addressing not checked"
fi

# ---- up --replicas 3 and 5 ------------------------------------------------------------
# cmdline_has NAME WORD: NAME's daemon runs with WORD among its arguments
cmdline_has() {
    grep -qw -- "$3" <<<"$(tr '\0' ' ' <"/proc/$(cat "$1/pids/$2.pid")/cmdline")"
}
for n in 3 5; do
    d="$ROOT/r$n"
    out="$(lcd "$d" up 2>&1)" || fail "up --replicas $n failed: $out"
    urls="$(tail -n 1 <<<"$out")"
    [ "$urls" = "$(lcd "$d" url)" ] || fail "up --replicas $n printed $urls last, url $(lcd "$d" url)"
    [ "$(tr ',' '\n' <<<"$urls" | wc -l)" -eq "$n" ] || fail "up --replicas $n printed $urls"
    [ -e "$d/bootstrapped" ] || fail "the first up of $d did not record its bootstrap"
    cmdline_has "$d" s1 --bootstrap || fail "s1's first start ran without --bootstrap"
    st="$(lcd "$d" status)"
    [ "$(grep -c ' running$' <<<"$st")" -eq $((2 * n)) ] || fail "up --replicas $n: $st"
    for ((k = 1; k <= n; k++)); do
        [ "$(awk -v r="r$k" '$2 == r { print $3 " " $5 " " $6 " " $7 }' <<<"$st")" = \
          "$(awk -v s="s$k" '$2 == s { print $3 }' <<<"$st") running in s$k" ] ||
            fail "up --replicas $n: r$k is not shown running in s$k: $st"
    done
    wait_for "a table made through $urls" 30 "$IT_CLI" -r "$urls" table create t --key id
    pass "up --replicas $n: $((2 * n)) processes and $n routers inside them running, first start with --bootstrap; a table made through $urls"

    # any one storage node down, its router with it: the others serve
    lcd "$d" kill s1 >/dev/null
    st="$(lcd "$d" status)"
    grep -qE '^storage +s1 +- .* stopped$' <<<"$st" &&
        grep -qE '^router +r1 +- .* stopped \(in s1\)$' <<<"$st" || fail "kill s1: $st"
    "$IT_CLI" -r "$urls" --timeout 20000 table create t_s1_down --key id >/dev/null ||
        fail "up --replicas $n: with s1 killed, no table made through $urls"
    lcd "$d" start s1 >/dev/null
    lcd "$d" stop s2 >/dev/null || fail "stop s2 was not clean"
    lcd "$d" start s2 >/dev/null
    [ "$(grep -c ' running' <<<"$(lcd "$d" status)")" -eq $((3 * n)) ] ||
        fail "after kill/start s1, stop/start s2: $(lcd "$d" status)"
    pass "up --replicas $n: s1 killed (r1 with it), a table made through the other routers; s1 started, s2 stopped and started"

    lcd "$d" down >/dev/null
    [ "$(grep -c ' stopped' <<<"$(lcd "$d" status)")" -eq $((3 * n)) ] || fail "down: $(lcd "$d" status)"
    [ -z "$(ls "$d/pids")" ] || fail "pid files left after down: $(ls "$d/pids")"
    [ "$(lcd "$d" up | tail -n 1)" = "$urls" ] || fail "a second up printed other URLs"
    ! cmdline_has "$d" s1 --bootstrap || fail "s1 ran with --bootstrap again"
    wait_for "tables kept across down and up" 30 \
        "$IT_CLI" -r "$urls" index create t_s1_down by_v --on v
    lcd "$d" down >/dev/null
    pass "up --replicas $n: down stops all; up again (no --bootstrap) serves the tables made before"
done

rm -rf "$ROOT"
