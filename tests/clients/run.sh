#!/usr/bin/env bash
# Client tests (CTest label clients): a TypeScript client generated from
# openapi/openapi.yaml by @hey-api/openapi-ts (into generated/, never
# committed), type-checked with tsc, then gateway.test.ts (only generated
# functions) and eventsource.test.mjs (the eventsource package through TCP
# relays), each against a real sandboxd on 127.0.0.1 that the tests start
# themselves (server.mjs) with the bwrap backend. Then a second client,
# generated from the spec a running server serves (gen-served.mjs) with zod
# response validation, reads both event streams and POST /exec's stream
# (events-validated.test.ts).
#   usage: SANDBOXD_BIN=build/sandboxd tests/clients/run.sh
# Exit 77 (skipped) when bwrap cannot run here or we are not root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
: "${SANDBOXD_BIN:?set SANDBOXD_BIN to the sandboxd binary}"
cd "$here"
source "$here/../needs-bwrap.sh"
needs_bwrap "client tests"
for m in @hey-api/openapi-ts eventsource tsx typescript zod; do
  if [ ! -d "node_modules/$m" ]; then
    echo "client tests: $here/node_modules is incomplete; run (cd tests/clients && npm ci --no-audit --no-fund), as scripts/test does" >&2
    exit 1
  fi
done
rm -rf generated generated-validated
npx --no-install openapi-ts -i ../../openapi/openapi.yaml -o generated -c @hey-api/client-fetch >/dev/null
npx --no-install tsc -p tsconfig.json
node gen-served.mjs
npx --no-install tsc -p tsconfig.validated.json
echo "client tests: generated clients type-check"
node --import tsx --test --test-reporter=spec gateway.test.ts eventsource.test.mjs events-validated.test.ts
