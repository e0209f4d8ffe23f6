#!/bin/bash
# The Dockerfile, checked without a Docker engine (there is none in CI):
#  1. its build stage's COPY lines bring everything the build needs: the
#     tree they make is configured with the stage's own options and the
#     server built from it for real (a missing directory, source or header
#     fails here, as it would fail `docker build`);
#  2. its build stage installs the Debian package of every pkg-config
#     module CMakeLists.txt requires;
#  3. its runtime stage installs the package of every shared library the
#     server built so links directly (what every Debian image has aside).
# Usage: dockerfile.sh DOCKERFILE
set -euo pipefail # (no pipe below ends before its writer: SIGPIPE would fail it)

dockerfile=$1
src=$(cd "$(dirname "$dockerfile")" && pwd)
fail=0

die() {
	echo "dockerfile: $*" >&2
	fail=1
}

# The packages one stage installs: the words after `install` on its
# apt-get line(s), continued lines joined.
stage_packages() { # $1: 1 (build) or 2 (runtime)
	awk -v want="$1" '
		/^FROM /{ stage++ }
		stage == want { print }
	' "$dockerfile" | sed -e ':a' -e '/\\$/N; s/\\\n//; ta' |
		grep -E 'apt-get( [^ ]+)* install' |
		sed -E 's/.*install//; s/&&.*//' | tr ' ' '\n' | grep -E '^[a-z0-9][a-z0-9.+-]+$' || true
}

debian_package_of() { # a file -> the package that ships it (merged /usr aware)
	local f p out
	f=$(readlink -f "$1")
	for p in "$f" "${f#/usr}" "/usr$f"; do
		out=$(dpkg -S "$p" 2>/dev/null) || continue
		echo "${out%%:*}" # "libc6:amd64: /lib/...": the name alone
		return 0
	done
	return 1
}

in_list() { grep -qxF "$1" <<<"$2"; }

build_pkgs=$(stage_packages 1)
run_pkgs=$(stage_packages 2)
[ -n "$build_pkgs" ] || die "no apt-get install found in the build stage"
[ -n "$run_pkgs" ] || die "no apt-get install found in the runtime stage"

# 1. The tree the COPY lines make, configured.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
awk '/^FROM /{ stage++ } stage == 1 && /^COPY / && !/--from/ { print $2, $3 }' "$dockerfile" |
	while read -r from to; do
		mkdir -p "$tmp/tree/$(dirname "$to")"
		cp -a "$src/$from" "$tmp/tree/$to"
	done
# The -D options of the stage's own `RUN cmake -S . -B build ...` line.
defs=$(awk '/^FROM /{ stage++ } stage == 1 && /^RUN cmake -S/' "$dockerfile" | grep -oE -- '-D[A-Za-z_]+=[^ ]+' || true)
[ -n "$defs" ] || die "no RUN cmake -S line with -D options in the build stage"
# shellcheck disable=SC2086 # one word per option
if ! cmake -S "$tmp/tree" -B "$tmp/build" $defs >"$tmp/cmake.log" 2>&1; then
	sed -n '/Error/,+3p' "$tmp/cmake.log" >&2
	die "the build stage's COPY lines do not make a tree CMake can configure"
elif ! cmake --build "$tmp/build" -j2 --target sandboxd >"$tmp/build.log" 2>&1; then
	grep -m 20 -E 'error|Error' "$tmp/build.log" >&2 || true
	die "the tree the build stage's COPY lines make does not build"
fi
bin=$tmp/build/sandboxd

# 2. Every required pkg-config module's package in the build stage.
for mod in $(sed -nE 's/^pkg_check_modules\([A-Z_]+ REQUIRED IMPORTED_TARGET ([a-z0-9_+-]+).*/\1/p' \
	"$src/CMakeLists.txt"); do
	pc="$(pkg-config --variable=pcfiledir "$mod")/$mod.pc"
	pkg=$(debian_package_of "$pc") || {
		die "no Debian package ships $pc"
		continue
	}
	in_list "${pkg%%:*}" "$build_pkgs" || die "build stage lacks $pkg (pkg-config module $mod)"
done

# 3. Every directly linked library's package in the runtime stage.
[ -x "$bin" ] || exit 1
for lib in $(readelf -d "$bin" | sed -nE 's/.*NEEDED.*\[(.*)\]/\1/p'); do
	path=$(ldconfig -p | awk -v l="$lib" '$1 == l && !p { p = $NF } END { print p }')
	[ -n "$path" ] || {
		die "cannot find $lib"
		continue
	}
	pkg=$(debian_package_of "$path") || {
		die "no Debian package ships $path"
		continue
	}
	case $pkg in libc6 | libgcc-s1) continue ;; esac # in every Debian image
	[ "$(dpkg-query -W -f='${Priority}' "$pkg" 2>/dev/null)" = required ] && continue
	in_list "$pkg" "$run_pkgs" || die "runtime stage lacks $pkg (for $lib)"
done

[ "$fail" = 0 ] && echo "dockerfile: build tree, build packages and runtime packages complete"
exit "$fail"
