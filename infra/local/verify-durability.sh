#!/usr/bin/env bash
# Proves that the local broker keeps topics and their data across a SIGKILL: starts a separate stack (own ports and
# run directory), writes 20 keyed records, kills the broker with SIGKILL, brings the stack up again, and reads them
# back. Prints one line "durability: N passed, N failed" and exits non-zero when the data is not all there.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export KEYFLOW_RUN_DIR="$(mktemp -d)" KAFKA_PORT="${VERIFY_KAFKA_PORT:-29092}" KAFKA_CONTROLLER_PORT="${VERIFY_CONTROLLER_PORT:-29093}"
export REGISTRY_PORT="${VERIFY_REGISTRY_PORT:-28081}" REGISTRY_MANAGEMENT_PORT="${VERIFY_REGISTRY_MANAGEMENT_PORT:-29001}"
export KEYFLOW_REDIS_PORT="${VERIFY_REDIS_PORT:-26390}"
trap '"$HERE/stack.sh" down --purge >/dev/null 2>&1 || true' EXIT
CACHE="${KEYFLOW_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/keyflow}/kafka-${KAFKA_VERSION:-4.1.1}/libs"
tool() { java -Dlog4j2.configurationFile="$HERE/tools-log4j2.properties" -cp "$CACHE/*" "$@"; }

"$HERE/stack.sh" up >/dev/null
tool org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$KAFKA_PORT" --create --topic durable --partitions 2 --replication-factor 1 >/dev/null
for i in $(seq 1 20); do echo "k$i:v$i"; done |
  tool org.apache.kafka.tools.ConsoleProducer --bootstrap-server "127.0.0.1:$KAFKA_PORT" --topic durable \
    --property parse.key=true --property key.separator=: --producer-property acks=all >/dev/null
kill -KILL "$(cat "$KEYFLOW_RUN_DIR/kafka.pid")"
echo "[verify] broker killed with SIGKILL; bringing the stack up again" >&2
t0=$SECONDS
"$HERE/stack.sh" up >/dev/null
echo "[verify] up again in $((SECONDS - t0)) s" >&2
got="$(tool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "127.0.0.1:$KAFKA_PORT" --topic durable \
  --from-beginning --timeout-ms 15000 --property print.key=true --property key.separator=: 2>/dev/null | sort -V | tr '\n' ' ')"
want="$(for i in $(seq 1 20); do echo "k$i:v$i"; done | sort -V | tr '\n' ' ')"
if [[ "$got" == "$want" ]]; then echo "durability: 1 passed, 0 failed"; else echo "[verify] expected: $want" >&2; echo "[verify] got:      $got" >&2; echo "durability: 0 passed, 1 failed"; exit 1; fi
