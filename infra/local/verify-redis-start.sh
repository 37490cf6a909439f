#!/usr/bin/env bash
# Proves how `stack.sh up` treats a Redis that is not ready yet, using stack.sh's own Redis functions on a separate
# port and run directory (no Kafka, no registry):
#   1. a second `up` while this script's Redis is reading a large AOF back (it answers -LOADING) waits for it and
#      starts no second redis-server on its port;
#   2. a process it did not start that answers something other than PONG (here a stand-in answering -LOADING) is
#      refused with a message, not raced by a redis-server that cannot bind.
# Prints one line "redis start: N passed, N failed" and exits non-zero on a failure. About a minute: it writes
# VERIFY_REDIS_KEYS (8,000,000) keys so that the reload takes long enough to be caught. Needs redis-server, redis-cli
# (stack.sh up installs them) and node.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# Its own Redis on its own port: a REDIS_URL of the caller (test-all.sh exports the stack's) would be reused instead.
unset REDIS_URL
export KEYFLOW_RUN_DIR="$(mktemp -d)" KEYFLOW_REDIS_PORT="${VERIFY_REDIS_PORT:-26391}"
PORT=$KEYFLOW_REDIS_PORT KEYS=${VERIFY_REDIS_KEYS:-8000000}
STANDIN=
cleanup() {
  [[ -n "$STANDIN" ]] && kill "$STANDIN" 2>/dev/null
  pkill -f "redis-server 127.0.0.1:$PORT" 2>/dev/null
  pkill -f "redis-server.*--port $PORT" 2>/dev/null
  rm -rf "$KEYFLOW_RUN_DIR"
}
trap cleanup EXIT
# stack.sh's functions without its command dispatch.
# shellcheck disable=SC1090
source <(sed '/^if \[\[ "${1:-}" == up && /,$d' "$HERE/stack.sh")
set +e
pass=0 failed=0
check() { if eval "$2"; then pass=$((pass + 1)); else failed=$((failed + 1)); echo "[verify] FAILED: $1" >&2; fi; }
servers() { pgrep -f "redis-server.*$PORT" | wc -l; }

(redis_up) 2>/dev/null || { echo "[verify] could not start redis on $PORT" >&2; exit 1; }
per=$((KEYS / 8))
for b in 0 1 2 3 4 5 6 7; do
  redis-cli -p "$PORT" eval "for i=1,$per do redis.call('set','k'..ARGV[1]..':'..i,string.rep('v',40)) end" 0 "$b" >/dev/null
done
redis-cli -p "$PORT" bgrewriteaof >/dev/null
sleep 1
t0=$SECONDS
until redis-cli -p "$PORT" info persistence 2>/dev/null | grep -q 'aof_rewrite_in_progress:0'; do
  ((SECONDS - t0 > 120)) && { echo "[verify] the AOF rewrite did not finish within 120 s" >&2; echo "redis start: 0 passed, 1 failed"; exit 1; }
  sleep 0.5
done
stop_pid redis 30 2>/dev/null

(redis_up) >"$KEYFLOW_RUN_DIR/first.log" 2>&1 &
first=$!
t0=$SECONDS
until [[ "$(redis_reply)" == *LOADIN* ]]; do
  if redis_ping || ((SECONDS - t0 > 60)); then
    echo "[verify] the Redis never answered -LOADING (its reload too quick to catch: raise VERIFY_REDIS_KEYS)" >&2
    echo "redis start: 0 passed, 1 failed"; exit 1
  fi
  sleep 0.05
done
(redis_up) >"$KEYFLOW_RUN_DIR/second.log" 2>&1
second=$?
wait "$first"
check "the second up, while the first Redis loads, succeeds" '[[ $second == 0 ]]'
check "the second up says it waited" 'grep -q "still starting" "$KEYFLOW_RUN_DIR/second.log"'
check "one redis-server on the port" '[[ $(servers) == 1 ]]'
check "it answers PONG" 'redis_ping'
stop_pid redis 30 2>/dev/null
rm -f "$KEYFLOW_RUN_DIR/redis.url" "$KEYFLOW_RUN_DIR/redis.pid"

node -e '
require("node:net")
  .createServer((c) => {
    c.on("error", () => {});
    c.once("data", () => c.end("-LOADING Redis is loading the dataset in memory\r\n"));
  })
  .listen(Number(process.argv[1]), "127.0.0.1");
' "$PORT" &
STANDIN=$!
until port_open 127.0.0.1 "$PORT"; do sleep 0.05; done
(redis_up) >"$KEYFLOW_RUN_DIR/stranger.log" 2>&1
stranger=$?
check "up refuses a process it did not start that answers -LOADING" '[[ $stranger != 0 ]]'
check "and says why" 'grep -q "not from a Redis this script started" "$KEYFLOW_RUN_DIR/stranger.log"'
check "no redis-server was started beside it" '[[ $(servers) == 0 ]]'

echo "redis start: $pass passed, $failed failed"
[[ $failed == 0 ]]
