#!/usr/bin/env bash
# The man pages (build/man, cmake/man.cmake) render without a warning:
# groff -ww with tbl (and mandoc -Tlint where it is installed); and they
# name what the binaries offer: every subcommand of `sandboxd --help` is
# in sandboxd(8), every command of `sbx --help` in sbx(1), every key of
# `sandboxd config reference` in sandboxd.conf(5).
#   man_render.sh SOURCE_DIR SANDBOXD_BIN SBX_BIN PAGE...
set -euo pipefail
src=$1 sandboxd=$2 sbx=$3
shift 3
fail=0
for page in "$@"; do
  [ -s "$page" ] || { echo "man: $page is missing or empty (target man)" >&2; fail=1; continue; }
  warn=$(LC_ALL=C.UTF-8 groff -t -man -Tutf8 -ww -z "$page" 2>&1 || echo "groff failed")
  if [ -n "$warn" ]; then
    echo "man: groff warns on $page:" >&2
    echo "$warn" >&2
    fail=1
  fi
  if command -v mandoc >/dev/null 2>&1; then
    lint=$(mandoc -Tlint -W warning "$page" 2>&1 || true)
    if [ -n "$lint" ]; then
      echo "man: mandoc -Tlint on $page:" >&2
      echo "$lint" >&2
      fail=1
    fi
  fi
done
find_page() { local want=$1; shift; for p in "$@"; do [ "$(basename "$p")" = "$want" ] && echo "$p"; done; }
text() { LC_ALL=C.UTF-8 groff -t -man -Tutf8 -rLL=400n -P-cbou "$1" 2>/dev/null | tr -s ' '; }

s8=$(text "$(find_page sandboxd.8 "$@")")
for cmd in $("$sandboxd" --help | sed -n 's/^  sandboxd \([a-z][a-z-]*\).*/\1/p' | sort -u); do
  grep -q "sandboxd $cmd" <<<"$s8" || { echo "man: sandboxd(8) does not name 'sandboxd $cmd' (sandboxd --help does)" >&2; fail=1; }
done
s1=$(text "$(find_page sbx.1 "$@")")
for cmd in $("$sbx" --help | sed -n 's/^  sbx \([a-z][a-z-]*\).*/\1/p'); do
  grep -qE "^ *$cmd( |$)|, $cmd " <<<"$s1" || { echo "man: sbx(1) does not describe 'sbx $cmd' (sbx --help does)" >&2; fail=1; }
done
s5=$(text "$(find_page sandboxd.conf.5 "$@")")
nl=$'\n'
for key in $("$sandboxd" config reference --format markdown | sed -n 's/^| `\([a-z0-9-]*\)`.*/\1/p'); do
  [[ "$nl$s5" =~ $nl\ *$key($nl|\ ) ]] || { echo "man: sandboxd.conf(5) does not list '$key'" >&2; fail=1; }
done
[ "$fail" -eq 0 ] && echo "man: $# pages render without warnings and name every command and key"
exit "$fail"
