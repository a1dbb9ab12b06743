# tests/integration/lib.sh — shared helpers for the integration test scripts.
# Sourced (not run) by each test as:  source lib.sh "$@"   with $1 = build dir.
#
# Provides:
#   it_cluster_up [--netns] [--tls] [--replicas N]  start a fresh cluster in a new temp dir
#                          (one replica a partition unless --replicas says)
#                          (--netns: each process in a network namespace of
#                          its own, deploy/netns.sh; --tls: the router's
#                          client port TLS, deploy/tls.sh, and
#                          SHARDEX_TLS_DIR exported); sets IT_DIR, IT_URL,
#                          exports SHARDEX_ROUTER; the cluster is torn down
#                          on exit whatever happens. With SHARDEX_IT_ROUTER_IN
#                          set (s1 or s2: the *.hosted variants of some
#                          tests), the router runs inside that storage node
#                          (local-cluster --router-in); IT_ROUTER_PROC names
#                          the process serving the router either way
#   it_own_cluster N       for a test writing its own config: IT_DIR, IT_BASE
#                          (N free ports in a row), secrets IT_HK IT_TK IT_LK
#   it_mktemp              prints a new folder of the test's (it-clusters/)
#   lc ARGS...             deploy/local-cluster ARGS --dir IT_DIR
#   sx ARGS...             the shardex CLI against the cluster
#   sx_rc ARGS...          same, sets RC to its exit status instead of failing
#   it_need_netns          exits 77 (ctest: skipped), saying why, unless this
#                          machine can make network namespaces (root) whose
#                          traffic crosses a bridge (netns_probe)
#   fail MSG / pass MSG    report; fail exits 1
#   wait_for DESC SECS CMD...   poll CMD until it succeeds or SECS pass
#   ids_of                 stdin JSON lines -> their "id" values, one a line
# A test may define it_extra_cleanup (run first at exit, e.g. to stop a
# background writer).
# Every test runs under `set -euo pipefail`.
set -euo pipefail

IT_BUILD="${1:?usage: $0 BUILD_DIR}"
IT_BUILD="$(cd "$IT_BUILD" && pwd -P)"
IT_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
export SHARDEX_BIN="$IT_BUILD/bin"
IT_CLI="$SHARDEX_BIN/shardex"
IT_DIR=""
IT_URL=""
IT_NAME="$(basename "$0" .sh)"
IT_START=$SECONDS

for b in shardex shardex-node shardex-router; do
    [ -x "$SHARDEX_BIN/$b" ] || { echo "FAIL: $SHARDEX_BIN/$b is missing" >&2; exit 1; }
done
command -v jq >/dev/null || { echo "FAIL: jq is missing (scripts/setup installs it)" >&2; exit 1; }

fail() {
    echo "FAIL [$IT_NAME]: $*" >&2
    exit 1
}

pass() {
    echo "ok   [$IT_NAME +$((SECONDS - IT_START))s]: $*"
}

lc() {
    "$IT_REPO/deploy/local-cluster" "$@" --dir "$IT_DIR"
}

sx() {
    "$IT_CLI" -r "$IT_URL" "$@"
}

# Runs the CLI without failing the script; RC holds its exit status.
sx_rc() {
    RC=0
    "$IT_CLI" -r "$IT_URL" "$@" || RC=$?
}

# wait_for DESC SECS CMD...: polls CMD (quietly) until it succeeds; fails the
# test after SECS seconds.
wait_for() {
    local desc="$1" secs="$2" deadline
    shift 2
    deadline=$((SECONDS + secs))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || fail "timed out after ${secs}s waiting for: $desc"
        sleep 0.05
    done
}

ids_of() {
    jq -r '.id'
}

# Dumps the tail of every log of the cluster (on failure).
it_dump_logs() {
    local f
    [ -n "$IT_DIR" ] && [ -d "$IT_DIR/logs" ] || return 0
    for f in "$IT_DIR"/logs/*; do
        echo "----- $f (tail)" >&2
        tail -n 25 "$f" >&2 || true
    done
}

it_cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if declare -F it_extra_cleanup >/dev/null; then it_extra_cleanup || true; fi
    if [ -n "$IT_DIR" ] && [ -f "$IT_DIR/cluster.json" ]; then
        if ((rc != 0)); then
            lc status >&2 || true
            it_dump_logs
        fi
        lc teardown >/dev/null || echo "[$IT_NAME] teardown failed (see above)" >&2
                                        # (down, and a --netns cluster's namespaces)
        # Daemons that died by a sanitizer report leave it in their .out file.
        if grep -lE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$IT_DIR"/logs/*.out 2>/dev/null; then
            grep -hE -A30 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$IT_DIR"/logs/*.out >&2 || true
            echo "FAIL [$IT_NAME]: a daemon reported a sanitizer error (see above)" >&2
            ((rc != 0)) || rc=1
        fi
        if ((rc == 0)); then
            rm -rf "$IT_DIR"
        else
            echo "[$IT_NAME] cluster dir kept for inspection: $IT_DIR" >&2
        fi
    fi
    echo "[$IT_NAME] finished in $((SECONDS - IT_START))s with status $rc"
    exit "$rc"
}
trap it_cleanup EXIT
trap 'echo "[$IT_NAME] interrupted" >&2; exit 130' INT TERM

it_need_netns() {
    if [ "$(id -u)" != 0 ] || ! ip netns add "sxprobe$$" 2>/dev/null; then
        echo "SKIPPED [$IT_NAME]: cannot make network namespaces here (needs root and iproute2)"
        exit 77
    fi
    ip netns del "sxprobe$$"
    local why
    if ! why="$(netns_probe)"; then
        echo "SKIPPED [$IT_NAME]: network namespaces on a bridge cannot talk here ($why)"
        exit 77
    fi
}

# netns_probe: two namespaces on a bridge of their own (no address in this
# namespace, so nothing here is rerouted), a TCP connection from one to the
# other (perl, part of every Debian system): fails, printing why, when
# bridged traffic does not flow (e.g. an iptables FORWARD policy of DROP
# with br_netfilter). Removes what it made.
netns_probe() {
    local a="sxpa$$" b="sxpb$$" br="sxpbr$$" ok=1 why=""
    ip link add "$br" type bridge 2>/dev/null && ip link set "$br" up &&
        ip netns add "$a" && ip netns add "$b" &&
        ip link add "${a}v" type veth peer name eth0 netns "$a" &&
        ip link add "${b}v" type veth peer name eth0 netns "$b" &&
        ip link set "${a}v" master "$br" up && ip link set "${b}v" master "$br" up &&
        ip netns exec "$a" ip addr add 10.254.254.1/24 dev eth0 &&
        ip netns exec "$b" ip addr add 10.254.254.2/24 dev eth0 &&
        ip netns exec "$a" ip link set eth0 up && ip netns exec "$b" ip link set eth0 up ||
        { ok=0; why="cannot make a bridge and veth pairs"; }
    if ((ok)); then
        ip netns exec "$a" timeout 10 perl -MIO::Socket::INET -e \
            '$s = IO::Socket::INET->new(LocalAddr => "10.254.254.1", LocalPort => 7199,
                                        Listen => 1, ReuseAddr => 1) or exit 1;
             $c = $s->accept or exit 1; print $c "ok\n"' &
        local srv=$! got="" i
        for ((i = 0; i < 100; i++)); do      # the listener up (5 s at most)
            [ -z "$(ip netns exec "$a" ss -Hltn 'sport = :7199' 2>/dev/null)" ] || break
            sleep 0.05
        done
        got="$(ip netns exec "$b" timeout 5 perl -MIO::Socket::INET -e \
            '$c = IO::Socket::INET->new(PeerAddr => "10.254.254.1", PeerPort => 7199,
                                        Timeout => 3) or exit 1; print scalar <$c>' \
            2>/dev/null)" || true
        kill "$srv" 2>/dev/null || true
        wait "$srv" 2>/dev/null || true
        [ "$got" = ok ] || { ok=0; why="no TCP connection across the bridge"; }
    fi
    ip netns del "$a" 2>/dev/null || true
    ip netns del "$b" 2>/dev/null || true
    ip link del "$br" 2>/dev/null || true
    ((ok)) || { echo "$why"; return 1; }
}

# it_mktemp: prints a new folder of this test's under $IT_BUILD/it-clusters
it_mktemp() {
    mkdir -p "$IT_BUILD/it-clusters" && mktemp -d "$IT_BUILD/it-clusters/$IT_NAME.XXXXXX"
}

# it_own_cluster N: for a test that writes its own cluster.json: sets
# IT_DIR (a new folder, torn down at exit like it_cluster_up's), IT_BASE
# (the first of N free loopback ports in a row) and fresh secrets IT_HK
# (hash_key), IT_TK (token_key), IT_LK (link_key), in hex
it_own_cluster() {
    local try b p ok
    IT_DIR="$(it_mktemp)"
    IT_BASE=""
    for ((try = 0; try < 200; try++)); do
        b=$((20000 + (RANDOM % 1500) * 8))
        ok=1
        for ((p = b; p < b + $1; p++)); do
            [ -z "$(ss -Hltn "sport = :$p" 2>/dev/null)" ] || { ok=0; break; }
        done
        if ((ok)); then IT_BASE=$b; break; fi
    done
    [ -n "$IT_BASE" ] || fail "no $1 free ports in a row"
    IT_HK="$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')"
    IT_TK="$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')"
    IT_LK="$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')"
}

it_cluster_up() {
    local out
    IT_DIR="$(it_mktemp)"
    local hosted=()
    IT_ROUTER_PROC=r1
    if [ -n "${SHARDEX_IT_ROUTER_IN:-}" ]; then
        hosted=(--router-in "$SHARDEX_IT_ROUTER_IN")
        IT_ROUTER_PROC="$SHARDEX_IT_ROUTER_IN"
    fi
    # one replica a partition unless the test asks for more (--replicas 3):
    # most tests check one behaviour each, on the layout their node names
    # (s1 s2 i1 i2) and faults assume
    local layout=(--replicas 1)
    [[ " $* " != *" --replicas "* ]] || layout=()
    out="$(lc up "$@" "${layout[@]}" "${hosted[@]}")" || { echo "$out" >&2; fail "local-cluster up failed"; }
    IT_URL="$(tail -n 1 <<<"$out")"
    [[ "$IT_URL" =~ ^((tls\+)?tcp://[0-9.]+:[0-9]+,)*(tls\+)?tcp://[0-9.]+:[0-9]+$ ]] ||
        fail "up did not print the router URLs last: $IT_URL"
    export SHARDEX_ROUTER="$IT_URL"
    if [ -d "$IT_DIR/tls" ]; then export SHARDEX_TLS_DIR="$IT_DIR/tls/client"; fi
    pass "cluster up in $IT_DIR, router $IT_URL${SHARDEX_IT_ROUTER_IN:+ (inside $SHARDEX_IT_ROUTER_IN)}"
}

# index_ready TABLE INDEX: true once INDEX answers queries (not SX_ENOTREADY)
# and `index list TABLE` shows it ready. (The query goes first: the router
# refreshes its cached catalog when a queried index still looks building.)
index_ready() {
    sx query "$1" "$2" --limit 1 --consistency eventual >/dev/null 2>&1 &&
        grep -E "^[[:space:]]*$2[[:space:]]" <<<"$(sx index list "$1")" | grep -qw ready
}

# expect_eq DESC EXPECTED ACTUAL: compares two multi-line strings.
expect_eq() {
    if [ "$2" != "$3" ]; then
        # (here-strings: a pipe from echo would die of SIGPIPE under
        # pipefail on long text, ending the test before its message)
        echo "expected:" >&2; head -n 50 <<<"$2" >&2
        echo "actual:" >&2; head -n 50 <<<"$3" >&2
        fail "$1"
    fi
    pass "$1"
}

# ldb_log_data_end LOG: prints the offset just past the last byte of LOG (a
# leveldb log) that is not zero: about where leveldb's writes to it end (a
# record may end in zero bytes, so the true end is at most a few bytes
# further). Its file size says nothing: a live log is preallocated
# (node/engine/ldb_log.h), the space after its records zeros.
ldb_log_data_end() {
    local last
    # cmp -l lists each byte that differs from /dev/zero: offset (1-based)
    last="$(cmp -l "$1" /dev/zero 2>/dev/null | tail -n 1 | awk '{print $1}')"
    echo "${last:-0}"
}
