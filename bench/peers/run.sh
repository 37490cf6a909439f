#!/usr/bin/env bash
# npm run bench:peers [-- --only keyflow,dbos,restate,bullmq]   keyflow next to its peers (issue 44; BENCHMARKS.md,
# "Peers (issue 44)"): the same three-step workflow through keyflow, DBOS Transact, Restate and BullMQ, one table.
#
# bench/peers/ is its own npm project, not a workspace of the root (the root lists "bench", not "bench/*"): the
# root's `npm ci` never installs the peers. On first use this installs them here (bench/peers/node_modules, the
# versions pinned in bench/peers/package.json and its package-lock.json; log: bench/peers/install.log). An install
# that fails leaves those engines out: their rows say so, the others still run.
# Needs the local stack: eval "$(infra/local/stack.sh env)" (KAFKA_BROKERS, SCHEMA_REGISTRY_URL, REDIS_URL,
# POSTGRES_URL). The stack's CPU is read from its pid files (KEYFLOW_RUN_DIR, default infra/local/.run).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$(dirname "$HERE")")"
source "$ROOT/scripts/node-runtime.sh" >/dev/null

if [[ ! -d "$HERE/node_modules/bullmq" || ! -d "$HERE/node_modules/@dbos-inc/dbos-sdk" || ! -d "$HERE/node_modules/@restatedev/restate-sdk" ]]; then
  echo "[bench:peers] installing the peers into $HERE/node_modules (once; log: $HERE/install.log)" >&2
  (cd "$HERE" && npm ci --no-audit --no-fund --foreground-scripts >"$HERE/install.log" 2>&1) ||
    { tail -n 20 "$HERE/install.log" >&2; echo "[bench:peers] install failed: the rows of what is missing say so" >&2; }
fi

cd "$ROOT"
exec node -r @swc-node/register bench/peers/driver.ts "$@"
