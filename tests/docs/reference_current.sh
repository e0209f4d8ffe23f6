#!/usr/bin/env bash
# docs/reference/configuration.md is what `sandboxd config reference`
# prints (the table of keys in common/config.c): fail, with the difference
# and the command that regenerates it, when the two have drifted apart.
# Also the other outputs of `sandboxd config`: the reference as JSON, with
# every key of the table, and `config show` with a file and --set applied.
#   reference_current.sh SANDBOXD_BIN SOURCE_DIR
set -euo pipefail
bin=$1 src=$2
page=$src/docs/reference/configuration.md
out=$(mktemp)
conf=$(mktemp)
trap 'rm -f "$out" "$conf"' EXIT
"$bin" config reference --format markdown >"$out"
if ! diff -u "$page" "$out"; then
  echo "docs/reference/configuration.md differs from the binary's reference (above: - the file, + the binary)." >&2
  echo "Regenerate it from the source tree with:" >&2
  echo "  $bin config reference --format markdown > docs/reference/configuration.md" >&2
  exit 1
fi
keys=$(grep -c '^| `' "$page")
"$bin" config reference --format json |
  node -e 'const r = JSON.parse(require("fs").readFileSync(0, "utf8"));
    const n = +process.argv[1];
    if (r.keys.length !== n) throw new Error(`json reference: ${r.keys.length} keys, markdown ${n}`);
    for (const k of r.keys) if (!k.key || !k.meaning || !k.type) throw new Error(`json reference: ${JSON.stringify(k)}`);
    const t = r.keys.find((k) => k.key === "threads");
    if (t.default !== 0 || t.min !== 0 || t.max !== 256) throw new Error("json reference: threads");' "$keys"
echo '{"threads": 3, "data_dir": "/srv/sbx"}' >"$conf"
"$bin" config show --config "$conf" --set leeway-s=7 |
  node -e 'const c = JSON.parse(require("fs").readFileSync(0, "utf8"));
    if (c.threads !== 3 || c["leeway-s"] !== 7 || c["db-path"] !== "/srv/sbx/sandboxd.db" || c["docs-dir"] !== "/usr/share/sandboxd/docs")
      throw new Error("config show: " + JSON.stringify(c));'
if "$bin" config show --set threads=999 >/dev/null 2>&1; then
  echo "config show accepted threads=999 (out of range)" >&2
  exit 1
fi
if "$bin" config reference --format yaml >/dev/null 2>&1; then
  echo "config reference accepted --format yaml" >&2
  exit 1
fi
echo "docs/reference/configuration.md matches sandboxd config reference ($keys keys); its JSON and config show agree"
