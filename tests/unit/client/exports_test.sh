#!/usr/bin/env bash
# check_exports.sh LIB HEADER — fails unless the shared library's exported
# functions are exactly the SX_API names of the public header plus
# sx_strerror (nothing from proto/ or the client's internals leaks).
set -euo pipefail
lib="$1"
hdr="$2"
got="$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TtWw]$/ {print $3}' | sed 's/@.*//' | sort -u)"
want="$( (grep -E '^SX_API ' "$hdr" | grep -oE 'sx_[a-z0-9_]+\(' | tr -d '('; echo sx_strerror) | sort -u)"
if [ "$got" != "$want" ]; then
    echo "exports differ from the header (< library, > header):" >&2
    diff <(echo "$got") <(echo "$want") >&2 || true
    exit 1
fi
echo "ok: $(echo "$got" | wc -l) exported functions, all declared in $(basename "$hdr")"
