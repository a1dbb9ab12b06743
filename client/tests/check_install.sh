#!/usr/bin/env bash
# check_install.sh BUILD_DIR EXAMPLE.c — installs the build into a temporary
# prefix with `cmake --install`, then compiles the example exactly as
# docs/CLIENT.md says (cc hello.c $(pkg-config --cflags --libs shardex)) and
# checks that it links against the installed libshardex and that the
# installed CLI runs.
set -euo pipefail
build="$1"
example="$2"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/shardex-install.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
export PKG_CONFIG_PATH="$(dirname "$(find "$tmp/prefix" -name shardex.pc | head -n 1)")"
cp "$example" "$tmp/hello.c"
(cd "$tmp" && cc -Wall -Wextra -Werror hello.c $(pkg-config --cflags --libs shardex) -o hello)
libdir="$(pkg-config --variable=libdir shardex)"
LD_LIBRARY_PATH="$libdir" ldd "$tmp/hello" | grep -q "$tmp/prefix/.*libshardex.so" \
    || { echo "hello does not link the installed libshardex" >&2; exit 1; }
test -f "$(pkg-config --variable=includedir shardex)/shardex.h"
test -f "$(pkg-config --variable=includedir shardex)/sx_errors.h"
"$tmp/prefix/bin/shardex" --help | grep -q '^usage: shardex'
echo "ok: installed, example built with pkg-config, CLI runs"
