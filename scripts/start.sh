#!/usr/bin/env bash
# The main job (README's first command): installs what is missing, then runs the GeoNames ETL end to end.
# Arguments go to examples/geonames-etl/src/main.ts (--workers N, --input PATH, --sink sqlite:PATH|postgres://..., --chunk-size N).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Node 24 first on PATH (installed into a cache outside the repo when the machine has another line); prints it.
# shellcheck source=scripts/node-runtime.sh
source scripts/node-runtime.sh
if scripts/deps-stale.sh; then
  echo "[etl] installing dependencies (npm ci)" >&2
  npm ci --no-audit --no-fund >&2
fi
exec node -r @swc-node/register examples/geonames-etl/src/main.ts "$@"
