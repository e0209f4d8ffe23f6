#!/usr/bin/env bash
# MCP tests (CTest label mcp): POST /mcp driven by the official MCP
# TypeScript SDK's client (@modelcontextprotocol/sdk, pinned in
# package.json) as a third party would, against a real sandboxd on
# 127.0.0.1 that the test starts itself (../clients/server.mjs) with the
# bwrap backend.
#   usage: SANDBOXD_BIN=build/sandboxd tests/mcp/run.sh
# Exit 77 (skipped) when bwrap cannot run here or we are not root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
: "${SANDBOXD_BIN:?set SANDBOXD_BIN to the sandboxd binary}"
cd "$here"
source "$here/../needs-bwrap.sh"
needs_bwrap "mcp tests"
if [ ! -d node_modules/@modelcontextprotocol/sdk ]; then
  echo "mcp tests: $here/node_modules is incomplete; run (cd tests/mcp && npm ci --no-audit --no-fund), as scripts/test does" >&2
  exit 1
fi
exec node --test --test-reporter=spec mcp.test.mjs
