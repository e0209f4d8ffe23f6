#!/usr/bin/env bash
# docs/reference/configuration.md is what `sandboxd config reference`
# prints (the table of keys in common/config.c): fail, with the difference
# and the command that regenerates it, when the two have drifted apart.
#   reference_current.sh SANDBOXD_BIN SOURCE_DIR
set -euo pipefail
bin=$1 src=$2
page=$src/docs/reference/configuration.md
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$bin" config reference --format markdown >"$out"
if ! diff -u "$page" "$out"; then
  echo "docs/reference/configuration.md differs from the binary's reference (above: - the file, + the binary)." >&2
  echo "Regenerate it from the source tree with:" >&2
  echo "  $bin config reference --format markdown > docs/reference/configuration.md" >&2
  exit 1
fi
echo "docs/reference/configuration.md matches sandboxd config reference ($(grep -c '^| `' "$page") keys)"
