#!/usr/bin/env bash
# check_install.sh BUILD_DIR EXAMPLE.c [CFLAGS] — installs the build into a temporary
# prefix with `cmake --install`, then compiles the example exactly as
# docs/CLIENT.md says (cc hello.c $(pkg-config --cflags --libs shardex)) and
# checks that it links against the installed libshardex and that the
# installed CLI runs; and that it also links statically with libshardex.a.
set -euo pipefail
build="$1"
example="$2"
extra="${3:-}"     # e.g. -fsanitize=address,undefined for a sanitizer build
tmp="$(mktemp -d "${TMPDIR:-/tmp}/shardex-install.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
export PKG_CONFIG_PATH="$(dirname "$(find "$tmp/prefix" -name shardex.pc | head -n 1)")"
cp "$example" "$tmp/hello.c"
# The README shows this very program: keep the two identical.
readme="$(dirname "$example")/../../README.md"
if [ -f "$readme" ]; then
    awk '/^This is `client\/examples\/hello.c`/ {f=1} f && /^```c$/ {p=1; next} p && /^```$/ {exit} p' \
        "$readme" >"$tmp/readme_hello.c"
    cmp -s "$tmp/readme_hello.c" "$example" \
        || { echo "README's example differs from $example" >&2; exit 1; }
fi
(cd "$tmp" && cc $extra -Wall -Wextra -Werror hello.c $(pkg-config --cflags --libs shardex) -o hello)
libdir="$(pkg-config --variable=libdir shardex)"
# (outputs captured first: `cmd | grep -q` under pipefail fails when grep
# exits early and cmd then gets SIGPIPE)
deps="$(LD_LIBRARY_PATH="$libdir" ldd "$tmp/hello")"
grep -q "$tmp/prefix/.*libshardex.so" <<<"$deps" \
    || { echo "hello does not link the installed libshardex" >&2; exit 1; }
# the static library: no libshardex.so needed at run time
(cd "$tmp" && cc $extra -Wall -Wextra -Werror hello.c \
    -I"$(pkg-config --variable=includedir shardex)" "$libdir/libshardex.a" \
    $(pkg-config --static --libs-only-l shardex | sed 's/-lshardex//') -o hello_static)
deps="$(ldd "$tmp/hello_static")"
! grep -q libshardex <<<"$deps" || { echo "hello_static needs libshardex.so" >&2; exit 1; }
test -f "$(pkg-config --variable=includedir shardex)/shardex.h"
test -f "$(pkg-config --variable=includedir shardex)/sx_errors.h"
help="$("$tmp/prefix/bin/shardex" --help)"
grep -q '^usage: shardex' <<<"$help"
echo "ok: installed, example built with pkg-config (shared and static), CLI runs"
