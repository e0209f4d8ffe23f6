#!/usr/bin/env bash
# deploy/kubernetes/*.yaml against the Kubernetes API's schemas and what
# sandboxd needs of them (validate.mjs), offline: no cluster, no kubectl.
# scripts/test installs node_modules (npm ci) first.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ ! -d "$here/node_modules/kubernetes-models" ] || [ ! -d "$here/node_modules/yaml" ]; then
  echo "kubernetes manifests: $here/node_modules is incomplete; run (cd tests/deploy/kubernetes && npm ci --no-audit --no-fund), as scripts/test does" >&2
  exit 1
fi
exec node "$here/validate.mjs" "$here/../../../deploy/kubernetes"
