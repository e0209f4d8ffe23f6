#!/usr/bin/env bash
# libsandboxd as a user gets it: `cmake --install` into a temporary
# prefix, then the example of docs/clients.md built with pkg-config against the
# installed shared library and against the static one (with libcurl and
# jansson shared: Debian ships no static libcurl dependencies), and run.
#   install.sh BUILD_DIR SOURCE_DIR SANITIZE(ON|OFF)
set -euo pipefail
build=$1 src=$2 sanitize=$3
prefix=$(mktemp -d /tmp/sbxc-install-XXXXXX)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(ls -d "$prefix"/lib*/pkgconfig | head -1 | xargs dirname)
for f in "$libdir/libsandboxd.so" "$libdir/libsandboxd.a" "$prefix/include/sandboxd.h" \
	"$libdir/pkgconfig/sandboxd.pc" "$prefix/bin/sbx" "$prefix/share/bash-completion/completions/sbx"; do
	[ -e "$f" ] || { echo "not installed: $f" >&2; exit 1; }
done
# The shared library exports the API and nothing else.
if nm -D --defined-only "$libdir/libsandboxd.so" | awk '{print $3}' | grep -v '^sbxc_' | grep . >/dev/null; then
	echo "libsandboxd.so exports names outside sbxc_:" >&2
	nm -D --defined-only "$libdir/libsandboxd.so" | awk '{print $3}' | grep -v '^sbxc_' >&2
	exit 1
fi
san=()
[ "$sanitize" = ON ] && san=(-fsanitize=address,undefined)
export PKG_CONFIG_PATH=$libdir/pkgconfig
cc -std=c17 -Wall -Wextra -Werror "${san[@]}" "$src/client/examples/gateway.c" \
	$(pkg-config --cflags --libs sandboxd) -o "$prefix/ex_shared"
cc -std=c17 -Wall -Wextra -Werror "${san[@]}" "$src/client/examples/gateway.c" $(pkg-config --cflags sandboxd) \
	"$libdir/libsandboxd.a" $(pkg-config --libs libcurl jansson) -lpthread -o "$prefix/ex_static"
for ex in ex_shared ex_static; do
	set +e
	out=$(env -u SANDBOXD_URL -u SANDBOXD_TOKEN LD_LIBRARY_PATH="$libdir" "$prefix/$ex" 2>&1)
	rc=$?
	set -e
	if [ $rc -ne 2 ] || [[ $out != *SANDBOXD_URL* ]]; then
		echo "$ex: exit $rc, output: $out" >&2
		exit 1
	fi
done
bash -n "$prefix/share/bash-completion/completions/sbx"
# docs/clients.md shows the example as it is built here, byte for byte.
awk '/^A gateway in a few lines/{f=1} f&&/^```$/{exit} f&&p{print} f&&/^```c$/{p=1}' "$src/docs/clients.md" >"$prefix/readme.c"
if ! cmp -s "$prefix/readme.c" "$src/client/examples/gateway.c"; then
	echo "docs/clients.md's example differs from client/examples/gateway.c:" >&2
	diff "$prefix/readme.c" "$src/client/examples/gateway.c" >&2 || true
	exit 1
fi
echo "installed and linked: shared and static"
