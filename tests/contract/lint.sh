#!/usr/bin/env bash
# Lints the OpenAPI file with the Redocly CLI pinned in package.json, using
# redocly.yaml beside this script. Run by CTest (test contract_openapi_lint);
# scripts/test installs node_modules (npm ci) before ctest runs.
# Usage: tests/contract/lint.sh [path/to/openapi.yaml]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
spec="${1:-$here/../../openapi/openapi.yaml}"
cd "$here"
if ! command -v npx >/dev/null 2>&1; then
  echo "contract lint: npx not found; scripts/deps installs nodejs and npm" >&2
  exit 1
fi
# @redocly/cli 2.x runs on Node.js >= 20.19 (22.12 or newer later on).
if ! node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=19)?0:1)'; then
  echo "contract lint: Node.js $(node --version) is too old for @redocly/cli $(node -p 'require("./package.json").devDependencies["@redocly/cli"]'); it needs 20.19 or newer" >&2
  exit 1
fi
if [ ! -x node_modules/.bin/redocly ]; then
  echo "contract lint: $here/node_modules is missing; run (cd tests/contract && npm ci --no-audit --no-fund), as scripts/test does" >&2
  exit 1
fi
# No telemetry and no update check from a test run.
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true NO_COLOR=1
exec npx --no-install redocly lint --lint-config error --format stylish "$spec"
