#!/usr/bin/env bash
# model.sh BINDIR [sx-model args...] — starts a local cluster with
# deploy/local-cluster (binaries from BINDIR), runs BINDIR/sx-model against
# its router, always stops the cluster, and exits with the test's status.
# Exits 77 (CTest: skipped) when the cluster's programs are not built.
set -uo pipefail

bindir="${1:?usage: model.sh BINDIR [sx-model args...]}"
shift
bindir="$(cd "$bindir" && pwd -P)"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
lc="$repo/deploy/local-cluster"

for f in "$lc" "$bindir/shardex-node" "$bindir/shardex-router" "$bindir/sx-model"; do
    if [ ! -x "$f" ]; then
        echo "model.sh: $f is missing; skipping" >&2
        exit 77
    fi
done

dir="$(mktemp -d "${TMPDIR:-/tmp}/shardex-model.XXXXXX")"
cleanup() {
    SHARDEX_BIN="$bindir" "$lc" down --dir "$dir" >/dev/null 2>&1 || true
    if [ "${status:-1}" -eq 0 ]; then
        rm -rf "$dir"
    else
        echo "model.sh: cluster logs kept in $dir/logs" >&2
    fi
}
trap cleanup EXIT
trap 'exit 143' TERM INT     # a signal still runs the cleanup

out="$(SHARDEX_BIN="$bindir" "$lc" up --replicas 1 --dir "$dir")"
rc=$?
if [ $rc -ne 0 ]; then
    echo "model.sh: local-cluster up failed ($rc):" >&2
    echo "$out" >&2
    status=1
    exit 1
fi
url="$(printf '%s\n' "$out" | tail -n 1)"
echo "model.sh: cluster in $dir, router $url"

# in the background, so a TERM (e.g. from timeout) is handled at once
"$bindir/sx-model" "$url" "$@" &
child=$!
trap 'kill $child 2>/dev/null; exit 143' TERM INT
wait $child
status=$?
exit $status
