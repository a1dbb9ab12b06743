#!/usr/bin/env bash
# tests/chaos/expect.sh — one chaos.check_<case> test: runs the chaos checker
# on a history and asserts its exit status and what it printed.
#
#   expect.sh [--wrapper] BIN HISTORY OUTDIR MODEL STATUS [PATTERN...]
#
# BIN is shardex-chaos-check; with --wrapper it is the directory holding it,
# and tests/chaos/check runs it (SHARDEX_BIN=BIN).  The checker runs as
# `--history HISTORY --model MODEL --out OUTDIR` (HISTORY "-": without
# --history) and must exit with STATUS.  Each PATTERN is out:ERE, err:ERE or
# json:ERE: an extended regular expression that must match a line of
# stdout, stderr or OUTDIR/check.json; "!" before it: must match none.
# check.json must exist unless STATUS is 2, and state "exit": STATUS when
# it does.  Exits 0 when every assertion holds, 1 otherwise (saying which).
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
wrapper=0
if [ "${1:-}" = --wrapper ]; then
    wrapper=1
    shift
fi
if [ $# -lt 5 ]; then
    echo "usage: expect.sh [--wrapper] BIN HISTORY OUTDIR MODEL STATUS [PATTERN...]" >&2
    exit 1
fi
bin=$1 history=$2 outdir=$3 model=$4 want=$5
shift 5

rm -rf "$outdir"
mkdir -p "$(dirname "$outdir")" || exit 1
args=(--model "$model" --out "$outdir")
if [ "$history" != - ]; then
    args=(--history "$history" "${args[@]}")
fi
if [ "$wrapper" = 1 ]; then
    cmd=("$here/check" "${args[@]}")
    export SHARDEX_BIN="$bin"
else
    cmd=("$bin" "${args[@]}")
fi
out="$(mktemp)" err="$(mktemp)"
trap 'rm -f "$out" "$err"' EXIT
"${cmd[@]}" >"$out" 2>"$err"
rc=$?

failed=0
fail() {
    echo "FAILED: $*"
    failed=1
}
[ "$rc" = "$want" ] || fail "exit status $rc, want $want"
json="$outdir/check.json"
if [ -f "$json" ]; then
    grep -q "\"exit\": $want," "$json" || fail "check.json does not say \"exit\": $want"
elif [ "$want" != 2 ]; then
    fail "no $json"
fi
for p in "$@"; do
    neg=0
    case $p in !*) neg=1 p=${p#!} ;; esac
    case $p in
    out:*) file=$out ;;
    err:*) file=$err ;;
    json:*) file=$json ;;
    *)
        fail "bad pattern '$p'"
        continue
        ;;
    esac
    re=${p#*:}
    if grep -Eq -- "$re" "$file" 2>/dev/null; then
        [ "$neg" = 0 ] || fail "${p%%:*} matches /$re/, it must not"
    else
        [ "$neg" = 1 ] || fail "${p%%:*} does not match /$re/"
    fi
done

if [ "$failed" = 1 ]; then
    echo "--- command: ${cmd[*]}"
    echo "--- stdout:"
    cat "$out"
    echo "--- stderr:"
    cat "$err"
    exit 1
fi
echo "ok: exit $rc, ${#} pattern(s) hold"
exit 0
