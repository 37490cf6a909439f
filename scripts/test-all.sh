#!/usr/bin/env bash
# The whole test suite, from a fresh clone: install, lint, typecheck, unit tests, then the local
# Kafka + schema registry + Redis (started here unless already up or given by the environment),
# integration tests, and stop what was started. Non-zero on any failure.
# Ends with one line: "tests: N passed, N failed, N skipped".
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export NX_DAEMON=false NX_NO_CLOUD=true NX_SKIP_NX_CACHE="${NX_SKIP_NX_CACHE:-${CI:-}}"

step() { printf '\n==> %s\n' "$*"; }

if [[ ! -f node_modules/.package-lock.json || package-lock.json -nt node_modules/.package-lock.json ]]; then
  step "npm ci"
  npm ci --no-audit --no-fund
fi

export KEYFLOW_TEST_SUMMARY="$PWD/.nx/test-summary.jsonl"
mkdir -p .nx && : >"$KEYFLOW_TEST_SUMMARY"
summary() {
  node -e '
    const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").filter(Boolean).map(JSON.parse);
    const t = lines.reduce((a, l) => ({ p: a.p + l.passed, f: a.f + l.failed, s: a.s + l.skipped }), { p: 0, f: 0, s: 0 });
    console.log(`\ntests: ${t.p} passed, ${t.f} failed, ${t.s} skipped`);
  ' "$KEYFLOW_TEST_SUMMARY" || true
}

step "lint"; npm run -s lint
step "typecheck"; npm run -s typecheck
step "format"; npm run -s format:check
step "schema compatibility gate"; npm run -s schemas:check
step "unit tests"; npm run -s test:unit

stop_infra=0
if [[ -z "${KAFKA_BROKERS:-}" || -z "${SCHEMA_REGISTRY_URL:-}" || -z "${REDIS_URL:-}" ]]; then
  if ! infra/local/stack.sh is-up 2>/dev/null; then stop_infra=1; fi
  step "local infrastructure up"
  eval "$(infra/local/stack.sh up)"
fi
cleanup() {
  local rc=$?
  if [[ $stop_infra == 1 ]]; then step "local infrastructure down"; infra/local/stack.sh down || true; fi
  summary
  exit $rc
}
trap cleanup EXIT

step "integration and e2e tests"; npm run -s test:integration

step "broker durability across SIGKILL (a separate local stack)"
if infra/local/verify-durability.sh; then echo '{"passed":1,"failed":0,"skipped":0}' >>"$KEYFLOW_TEST_SUMMARY"; else echo '{"passed":0,"failed":1,"skipped":0}' >>"$KEYFLOW_TEST_SUMMARY"; exit 1; fi
