#!/usr/bin/env bash
# The TypeScript package clients/typescript (@sandboxd/client), CTest
# label clients: built with tests/clients' pinned tsc into its dist/,
# packed with npm and installed from the tarball into a scratch project
# (offline: it has no dependencies), imported there with its types, then
# its gateway scenario (clients/typescript/test/) against a real sandboxd.
#   usage: SANDBOXD_BIN=build/sandboxd tests/clients/typescript.sh
# Exit 77 (skipped) when bwrap cannot run here or we are not root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
pkg=$here/../../clients/typescript
: "${SANDBOXD_BIN:?set SANDBOXD_BIN to the sandboxd binary}"
source "$here/../needs-bwrap.sh"
needs_bwrap "typescript client"
[ -x "$here/node_modules/.bin/tsc" ] || {
  echo "typescript client: $here/node_modules is incomplete; run (cd tests/clients && npm ci --no-audit --no-fund), as scripts/test does" >&2
  exit 1
}
rm -rf "$pkg/dist"
"$here/node_modules/.bin/tsc" -p "$pkg/tsconfig.json"
scratch=$(mktemp -d /tmp/sandboxd-ts-pack-XXXXXX)
trap 'rm -rf "$scratch"' EXIT
(cd "$pkg" && npm pack --silent --ignore-scripts --pack-destination "$scratch" >/dev/null)
cd "$scratch"
echo '{"name":"scratch","version":"0.0.0","private":true,"type":"module"}' >package.json
npm install --offline --no-audit --no-fund --ignore-scripts ./sandboxd-client-*.tgz >/dev/null
cat >check.ts <<'TS'
import { GatewaySandbox, type ShellResult } from '@sandboxd/client';
const api = new GatewaySandbox('http://127.0.0.1:1', 'token', 'acme');
const r: Promise<ShellResult> = api.exec({ command: 'true' });
void r.catch(() => undefined);
TS
"$here/node_modules/.bin/tsc" --noEmit --strict --module nodenext --moduleResolution nodenext --target es2022 --lib es2022,dom check.ts
node -e "import('@sandboxd/client').then((m) => { if (typeof m.GatewaySandbox !== 'function') process.exit(1); })"
echo "typescript client: packed, installed and imported with its types"
cd "$pkg"
node --test --test-reporter=spec test/
