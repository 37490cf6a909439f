#!/usr/bin/env bash
# The whole test suite, from a fresh clone, on Node 24 (scripts/node-runtime.sh; the unit suites on Node 22 too):
# install, lint, typecheck, unit tests, then the local
# Kafka + schema registry + Redis (started here unless already up or given by the environment),
# integration tests, and stop what was started. Non-zero on any failure.
# Stops at the first failed step, with that step's message (see scripts/test-steps.sh for `step`, `test_step`).
# Ends with one line: "tests: N passed, N failed, N skipped"; tests that could not run count as failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Under CI (CI set to anything), Nx's local cache is skipped: Nx 23 takes only NX_SKIP_NX_CACHE=true, and with CI=1
# passed through as the value it read earlier lint, typecheck and unit results from ~/.nx (2026-12-06).
export NX_DAEMON=false NX_NO_CLOUD=true NX_SKIP_NX_CACHE="${NX_SKIP_NX_CACHE:-${CI:+true}}"

# Node 24 first on PATH (installed into a cache outside the repo when the machine has another line); prints it.
# shellcheck source=scripts/node-runtime.sh
source scripts/node-runtime.sh

# shellcheck source=scripts/test-steps.sh
source scripts/test-steps.sh

if scripts/deps-stale.sh; then
  step "npm ci" npm ci --no-audit --no-fund
fi

export KEYFLOW_TEST_SUMMARY="$PWD/.nx/test-summary.jsonl"
mkdir -p .nx && : >"$KEYFLOW_TEST_SUMMARY"
stop_infra=0
cleanup() {
  local rc=$?
  if [[ $stop_infra == 1 ]]; then
    printf '\n==> local infrastructure down\n'
    infra/local/stack.sh down || true
  fi
  summary
  exit $rc
}
trap cleanup EXIT # the closing line is printed whichever step stops the script

step "lint" npm run -s lint
step "typecheck" npm run -s typecheck
step "format" npm run -s format:check
step "schema compatibility gate" npm run -s schemas:check
test_step "unit tests" npm run -s test:unit
# The same suites on the oldest line package.json's `engines` allows (Node 22), with the same node_modules.
test_step "unit tests on Node $KEYFLOW_NODE_OLDEST_PINNED" scripts/unit-oldest-node.sh

# Alert rules and dashboard (infra/observability): promtool accepts the rules, every metric they name is exported.
# promtool comes from Debian's prometheus package, installed here when missing (as root).
if ! command -v promtool >/dev/null && command -v apt-get >/dev/null; then
  as_root=""
  if [[ "$(id -u)" != 0 ]] && sudo -n true 2>/dev/null; then as_root="sudo -n"; fi
  if [[ "$(id -u)" == 0 || -n "$as_root" ]]; then
    step "install promtool (Debian's prometheus package)" bash -c \
      "$as_root apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1 || { $as_root apt-get update -q >/dev/null && $as_root apt-get install -y -q --no-install-recommends prometheus >/dev/null; }"
  fi
fi
step "alert rules and dashboard"
if node -r @swc-node/register infra/observability/check.ts; then
  echo '{"passed":1,"failed":0,"skipped":0}' >>"$KEYFLOW_TEST_SUMMARY"
else
  echo '{"passed":0,"failed":1,"skipped":0}' >>"$KEYFLOW_TEST_SUMMARY"
  step_failed 1
fi

if [[ -z "${KAFKA_BROKERS:-}" || -z "${SCHEMA_REGISTRY_URL:-}" || -z "${REDIS_URL:-}" ]]; then
  # Stopped on exit when not up before, also when `up` fails half way (e.g. Redis started, Kafka's port taken).
  if ! infra/local/stack.sh is-up 2>/dev/null; then stop_infra=1; fi
  step "local infrastructure up" stack_up infra/local/stack.sh
fi

test_step "integration and e2e tests" npm run -s test:integration

step "broker durability across SIGKILL (a separate local stack)"
if infra/local/verify-durability.sh; then echo '{"passed":1,"failed":0,"skipped":0}' >>"$KEYFLOW_TEST_SUMMARY"; else echo '{"passed":0,"failed":1,"skipped":0}' >>"$KEYFLOW_TEST_SUMMARY"; step_failed 1; fi

step "a second stack.sh up while Redis loads its AOF (a separate Redis)"
if redis_out="$(infra/local/verify-redis-start.sh)"; then redis_rc=0; else redis_rc=1; fi
echo "$redis_out"
read -r redis_p redis_f < <(sed -n 's/^redis start: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' <<<"$redis_out") || true
echo "{\"passed\":${redis_p:-0},\"failed\":${redis_f:-1},\"skipped\":0}" >>"$KEYFLOW_TEST_SUMMARY"
((redis_rc == 0)) || step_failed 1

# The week-one soak's sample (issue 39; the full one is `npm run soak -- --minutes 15`): retention and sweeps over a
# blob store of 50,000 blobs, every request sent twice, a rolling restart to a new workflow version. It fails on a run
# lost, an input dropped, a step executed twice or an approval taken twice; its latency figures are printed, not judged.
step "week-one soak, 2-minute sample (npm run soak -- --minutes 2)"
if npm run -s soak -- --minutes 2; then echo '{"passed":1,"failed":0,"skipped":0}' >>"$KEYFLOW_TEST_SUMMARY"; else echo '{"passed":0,"failed":1,"skipped":0}' >>"$KEYFLOW_TEST_SUMMARY"; step_failed 1; fi
