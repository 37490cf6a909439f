#!/usr/bin/env bash
# Local infrastructure without Docker: a single-node Apache Kafka broker (KRaft, broker+controller),
# Apicurio Registry (Confluent-compatible API) and Redis, all on loopback, all from Maven Central / Debian.
#
#   infra/local/stack.sh up            start what is not running (idempotent), wait until each answers
#   infra/local/stack.sh down [--purge] stop exactly the processes this script started; --purge deletes data
#   infra/local/stack.sh status        one line per service
#   infra/local/stack.sh logs [NAME] [-f]  tail the logs (kafka, registry, redis)
#   infra/local/stack.sh env           print the environment variables tests and services read
#   infra/local/stack.sh fetch         only download the artifacts into the cache
#
# Settings (environment):
#   KAFKA_VERSION (4.1.1)  KAFKA_PORT (9092)  KAFKA_CONTROLLER_PORT (9093)  KAFKA_HEAP_OPTS (-Xms256m -Xmx512m)
#   APICURIO_VERSION (3.0.9)  REGISTRY_PORT (8081)  REGISTRY_MANAGEMENT_PORT (9001)  REGISTRY_HEAP_OPTS (-Xms128m -Xmx512m)
#   KEYFLOW_REDIS_PORT or REDIS_PORT (6390)  the Redis this script starts for idempotency records, with AOF
#     (appendonly yes, appendfsync everysec; data in <run dir>/redis/data), so completion records survive a restart
#   REDIS_URL (redis://127.0.0.1:<KEYFLOW_REDIS_PORT>)  set it to use another Redis: it is then reused when it
#     answers PING (its persistence is its own business; the workers warn when it persists nothing), and started
#     here with AOF on its host:port otherwise
#   POSTGRES_URL (postgres://postgres@127.0.0.1:5432/test)  the workers' tests and the ETL sink; the machine's
#     cluster is started (pg_ctlcluster) if it is installed and down
#   KEYFLOW_CACHE_DIR (${XDG_CACHE_HOME:-~/.cache}/keyflow)  downloaded artifacts, shared by every clone
#   KEYFLOW_RUN_DIR (<repo>/infra/local/.run)  pid files, logs and data (git-ignored)
#   READY_TIMEOUT_S (120)  how long `up` waits for each service
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KAFKA_VERSION="${KAFKA_VERSION:-4.1.1}"
KAFKA_PORT="${KAFKA_PORT:-9092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-9093}"
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m}"
APICURIO_VERSION="${APICURIO_VERSION:-3.0.9}"
REGISTRY_PORT="${REGISTRY_PORT:-8081}"
REGISTRY_MANAGEMENT_PORT="${REGISTRY_MANAGEMENT_PORT:-9001}"
REGISTRY_HEAP_OPTS="${REGISTRY_HEAP_OPTS:--Xms128m -Xmx512m}"
REDIS_PORT="${KEYFLOW_REDIS_PORT:-${REDIS_PORT:-6390}}"
# Given by the user: reused when it answers. Not given: this script's own AOF Redis on REDIS_PORT.
REDIS_URL_GIVEN="${REDIS_URL:+1}"
REDIS_URL="${REDIS_URL:-redis://127.0.0.1:$REDIS_PORT}"
POSTGRES_URL="${POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"
CACHE_DIR="${KEYFLOW_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/keyflow}"
RUN_DIR="${KEYFLOW_RUN_DIR:-$HERE/.run}"
READY_TIMEOUT_S="${READY_TIMEOUT_S:-120}"

KAFKA_HOME="$CACHE_DIR/kafka-$KAFKA_VERSION"
APICURIO_HOME="$CACHE_DIR/apicurio-registry-$APICURIO_VERSION"

log() { printf '[infra] %s\n' "$*" >&2; }
die() { printf '[infra] error: %s\n' "$*" >&2; exit 1; }

redis_host() { local hp="${REDIS_URL#*://}"; hp="${hp#*@}"; hp="${hp%%/*}"; echo "${hp%%:*}"; }
redis_port() { local hp="${REDIS_URL#*://}"; hp="${hp#*@}"; hp="${hp%%/*}"; [[ "$hp" == *:* ]] && echo "${hp##*:}" || echo 6379; }

need_java() {
  command -v java >/dev/null || die "java not found: install a JDK 17+ (Debian: apt-get install openjdk-17-jre-headless)"
  local v; v="$(java -XshowSettings:properties -version 2>&1 | awk -F'= ' '/java.specification.version/{print $2}')"
  [[ "${v%%.*}" -ge 17 ]] || die "java $v found; Kafka $KAFKA_VERSION and Apicurio $APICURIO_VERSION need 17+"
}
need_mvn() { command -v mvn >/dev/null || die "mvn not found: install Apache Maven (Debian: apt-get install maven)"; }

# ---------- fetch (cached outside the repo) ----------
fetch_kafka() {
  [[ -f "$KAFKA_HOME/.complete" ]] && return 0
  need_mvn
  log "fetching Apache Kafka $KAFKA_VERSION from Maven Central into $KAFKA_HOME"
  rm -rf "$KAFKA_HOME"; mkdir -p "$KAFKA_HOME/libs"
  mvn -B -q -f "$HERE/pom.xml" -Dkafka.version="$KAFKA_VERSION" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$KAFKA_HOME/libs" >"$KAFKA_HOME/fetch.log" 2>&1 \
    || { tail -n 30 "$KAFKA_HOME/fetch.log" >&2; die "could not resolve org.apache.kafka:kafka_2.13:$KAFKA_VERSION"; }
  ls "$KAFKA_HOME/libs" | grep -q '^slf4j-api-2' && die "slf4j-api 2.x on the broker classpath: the broker would log nothing"
  touch "$KAFKA_HOME/.complete"
}

fetch_registry() {
  [[ -f "$APICURIO_HOME/.complete" ]] && return 0
  need_mvn
  log "fetching Apicurio Registry $APICURIO_VERSION (classifier all, tar.gz) into $APICURIO_HOME"
  rm -rf "$APICURIO_HOME"; mkdir -p "$APICURIO_HOME"
  mvn -B -q dependency:copy -Dtransitive=false \
    -Dartifact="io.apicurio:apicurio-registry-app:$APICURIO_VERSION:tar.gz:all" \
    -DoutputDirectory="$APICURIO_HOME" >"$APICURIO_HOME/fetch.log" 2>&1 \
    || { tail -n 30 "$APICURIO_HOME/fetch.log" >&2; die "could not resolve io.apicurio:apicurio-registry-app:$APICURIO_VERSION:tar.gz:all"; }
  tar -xzf "$APICURIO_HOME"/apicurio-registry-app-*-all.tar.gz -C "$APICURIO_HOME"
  rm -f "$APICURIO_HOME"/apicurio-registry-app-*-all.tar.gz
  ls "$APICURIO_HOME"/*-runner.jar >/dev/null 2>&1 || die "no runner jar in the Apicurio archive"
  touch "$APICURIO_HOME/.complete"
}

# ---------- process bookkeeping ----------
pid_of() { local f="$RUN_DIR/$1.pid"; [[ -f "$f" ]] && cat "$f" || true; }
# Alive = the process exists and is not a zombie (an orphan killed with SIGKILL may stay a zombie where
# nothing reaps it, and kill -0 still succeeds on it).
alive() {
  local p st; p="$(pid_of "$1")"
  [[ -n "$p" ]] && kill -0 "$p" 2>/dev/null || return 1
  st="$(ps -o stat= -p "$p" 2>/dev/null || true)"
  [[ -n "$st" && "$st" != Z* ]]
}
port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

stop_pid() { # name grace_s
  local name="$1" grace="${2:-20}" p; p="$(pid_of "$name")"
  [[ -n "$p" ]] || return 0
  if kill -0 "$p" 2>/dev/null; then
    log "stopping $name (pid $p)"
    kill -TERM "$p" 2>/dev/null || true
    local i=0
    while kill -0 "$p" 2>/dev/null && (( i < grace * 10 )); do sleep 0.1; i=$((i + 1)); done
    if kill -0 "$p" 2>/dev/null; then log "$name did not stop in ${grace}s: SIGKILL"; kill -KILL "$p" 2>/dev/null || true; fi
  fi
  rm -f "$RUN_DIR/$name.pid"
}

fail_start() { # name logfile reason
  log "$1 failed to start: $3. Last lines of $2:"
  tail -n 40 "$2" >&2 || true
  stop_pid "$1" 5
  exit 1
}

# ---------- kafka ----------
kafka_cp() { echo "$KAFKA_HOME/libs/*"; }
kafka_ready() {
  # A real metadata round trip (DescribeCluster), not just an open port.
  java -cp "$(kafka_cp)" -Dlog4j2.configurationFile="$HERE/tools-log4j2.properties" \
    org.apache.kafka.tools.ClusterTool cluster-id --bootstrap-server "127.0.0.1:$KAFKA_PORT" >/dev/null 2>&1
}

kafka_up() {
  if alive kafka; then log "kafka already running (pid $(pid_of kafka))"; return 0; fi
  port_open 127.0.0.1 "$KAFKA_PORT" && die "port $KAFKA_PORT is taken by a process this script did not start; stop it or set KAFKA_PORT"
  fetch_kafka
  local dir="$RUN_DIR/kafka"; mkdir -p "$dir/data"
  local props="$dir/server.properties"
  cat >"$props" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
num.partitions=3
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=8
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.cleaner.dedupe.buffer.size=33554432
log.retention.hours=168
EOF
  if [[ ! -f "$dir/data/meta.properties" ]]; then
    local cid; cid="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | cut -c1-22)"
    log "formatting KRaft storage (cluster id $cid)"
    java -cp "$(kafka_cp)" -Dlog4j2.configurationFile="$HERE/tools-log4j2.properties" \
      kafka.tools.StorageTool format --standalone --ignore-formatted --cluster-id "$cid" --config "$props" \
      >"$dir/format.log" 2>&1 || { cat "$dir/format.log" >&2; die "kafka storage format failed"; }
  fi
  [[ -f "$dir/server.log" ]] && mv -f "$dir/server.log" "$dir/server.log.prev"
  log "starting kafka $KAFKA_VERSION on 127.0.0.1:$KAFKA_PORT"
  # shellcheck disable=SC2086
  setsid nohup java $KAFKA_HEAP_OPTS -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$HERE/log4j2.properties" -Dkafka.logs.dir="$dir" \
    -cp "$(kafka_cp)" kafka.Kafka "$props" >"$dir/stdout.log" 2>&1 </dev/null &
  echo $! >"$RUN_DIR/kafka.pid"
}

kafka_wait() {
  local dir="$RUN_DIR/kafka" t0=$SECONDS
  until grep -q 'Kafka Server started' "$dir/server.log" 2>/dev/null; do
    alive kafka || fail_start kafka "$dir/server.log" "process exited (stdout: $(tail -n 3 "$dir/stdout.log" 2>/dev/null | tr '\n' ' '))"
    (( SECONDS - t0 > READY_TIMEOUT_S )) && fail_start kafka "$dir/server.log" "not started after ${READY_TIMEOUT_S}s"
    sleep 0.3
  done
  until kafka_ready; do
    alive kafka || fail_start kafka "$dir/server.log" "process exited"
    (( SECONDS - t0 > READY_TIMEOUT_S )) && fail_start kafka "$dir/server.log" "no metadata answer after ${READY_TIMEOUT_S}s"
    sleep 0.5
  done
  log "kafka ready on 127.0.0.1:$KAFKA_PORT"
}

# ---------- registry ----------
registry_url() { echo "http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7"; }
registry_ready() { curl -fsS -m 2 "$(registry_url)/subjects" >/dev/null 2>&1; }

registry_up() {
  if alive registry; then log "registry already running (pid $(pid_of registry))"; return 0; fi
  port_open 127.0.0.1 "$REGISTRY_PORT" && die "port $REGISTRY_PORT is taken by a process this script did not start; stop it or set REGISTRY_PORT"
  fetch_registry
  local dir="$RUN_DIR/registry"; mkdir -p "$dir/data"
  [[ -f "$dir/registry.log" ]] && mv -f "$dir/registry.log" "$dir/registry.log.prev"
  log "starting Apicurio Registry $APICURIO_VERSION on 127.0.0.1:$REGISTRY_PORT (H2 file storage in $dir/data)"
  # SQL storage on an H2 *file*: schema ids survive a registry restart, as the ids inside Kafka messages require.
  # shellcheck disable=SC2086
  pushd "$APICURIO_HOME" >/dev/null
  setsid nohup java $REGISTRY_HEAP_OPTS -XX:+UseSerialGC \
    -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$REGISTRY_PORT" \
    -Dquarkus.management.host=127.0.0.1 -Dquarkus.management.port="$REGISTRY_MANAGEMENT_PORT" \
    -Dapicurio.storage.kind=sql -Dapicurio.storage.sql.kind=h2 \
    -Dapicurio.datasource.url="jdbc:h2:file:$dir/data/registry;DB_CLOSE_ON_EXIT=FALSE" \
    -Dapicurio.ccompat.use-canonical-hash=true \
    -Dapicurio.rest.deletion.artifact.enabled=true -Dapicurio.rest.deletion.artifact-version.enabled=true \
    -Dquarkus.log.console.format='%d{HH:mm:ss,SSS} %-5p [%c{2.}] %s%e%n' \
    -jar "$(ls "$APICURIO_HOME"/*-runner.jar | head -n1)" >"$dir/registry.log" 2>&1 </dev/null &
  echo $! >"$RUN_DIR/registry.pid"
  popd >/dev/null
}

registry_wait() {
  local dir="$RUN_DIR/registry" t0=$SECONDS
  until registry_ready; do
    alive registry || fail_start registry "$dir/registry.log" "process exited"
    (( SECONDS - t0 > READY_TIMEOUT_S )) && fail_start registry "$dir/registry.log" "no answer on $(registry_url)/subjects after ${READY_TIMEOUT_S}s"
    sleep 0.3
  done
  log "registry ready at $(registry_url)"
}

# ---------- redis ----------
redis_ping() {
  local h p r; h="$(redis_host)"; p="$(redis_port)"
  r="$( (exec 3<>"/dev/tcp/$h/$p" && printf 'PING\r\n' >&3 && timeout 2 head -c 7 <&3) 2>/dev/null || true)"
  [[ "$r" == *PONG* || "$r" == *NOAUTH* ]]
}

# The Redis this script started is the one REDIS_URL names (it records the URL next to the pid).
redis_ours() { alive redis && [[ "$(cat "$RUN_DIR/redis.url" 2>/dev/null)" == "$REDIS_URL" ]]; }

redis_up() {
  if redis_ours && redis_ping; then log "redis already running (pid $(pid_of redis)) at $REDIS_URL"; return 0; fi
  if redis_ping; then
    # A Redis this script did not start: reuse it only when the user named it in REDIS_URL.
    [[ -n "$REDIS_URL_GIVEN" ]] || die "port $(redis_port) answers as a Redis this script did not start; stop it, or set KEYFLOW_REDIS_PORT, or name it in REDIS_URL to reuse it"
    log "redis answers at $REDIS_URL (given in REDIS_URL): reusing it"
    return 0
  fi
  if ! command -v redis-server >/dev/null; then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
      log "redis-server not installed: installing Debian's package"
      (apt-get install -y -q redis-server >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q redis-server >/dev/null; }) \
        || die "could not install redis-server"
      # Debian's package may start its own service on 6379; this script's Redis is a separate process below.
      if [[ -n "$REDIS_URL_GIVEN" ]] && redis_ping; then log "redis answers at $REDIS_URL after install: reusing it"; return 0; fi
    else
      die "nothing answers at $REDIS_URL and redis-server is not installed (Debian: apt-get install redis-server)"
    fi
  fi
  local dir="$RUN_DIR/redis"; mkdir -p "$dir/data"
  [[ -f "$dir/redis.log" ]] && mv -f "$dir/redis.log" "$dir/redis.log.prev"
  log "starting redis on $(redis_host):$(redis_port) with AOF (appendfsync everysec) in $dir/data"
  # AOF, fsync every second: a completion record survives a Redis restart or crash (at most ~1 s of writes is lost
  # on a machine crash). https://redis.io/docs/latest/operate/oss_and_stack/management/persistence/
  setsid nohup redis-server --bind "$(redis_host)" --port "$(redis_port)" --dir "$dir/data" \
    --appendonly yes --appendfsync everysec --save "" --daemonize no >"$dir/redis.log" 2>&1 </dev/null &
  echo $! >"$RUN_DIR/redis.pid"
  echo "$REDIS_URL" >"$RUN_DIR/redis.url"
  local t0=$SECONDS
  until redis_ping; do
    alive redis || fail_start redis "$dir/redis.log" "process exited"
    (( SECONDS - t0 > 20 )) && fail_start redis "$dir/redis.log" "no PONG after 20s"
    sleep 0.1
  done
  log "redis ready at $REDIS_URL (AOF in $dir/data)"
}

# ---------- postgres ----------
pg_hostport() { local hp="${POSTGRES_URL#*://}"; hp="${hp#*@}"; hp="${hp%%/*}"; echo "$hp"; }
pg_ready() { local hp; hp="$(pg_hostport)"; port_open "${hp%%:*}" "${hp##*:}"; }

postgres_up() {
  if pg_ready; then log "postgres answers at $(pg_hostport): reusing it"; return 0; fi
  if command -v pg_ctlcluster >/dev/null && ls /etc/postgresql >/dev/null 2>&1; then
    local v; v="$(ls /etc/postgresql | sort -V | tail -n1)"
    log "starting the machine's PostgreSQL $v cluster"
    pg_ctlcluster --skip-systemctl-redirect "$v" main start || die "could not start PostgreSQL $v"
    echo "$v" >"$RUN_DIR/postgres.started"
    local t0=$SECONDS
    until pg_ready; do (( SECONDS - t0 > 30 )) && die "PostgreSQL not answering at $(pg_hostport) after 30s"; sleep 0.2; done
    return 0
  fi
  die "nothing answers at $(pg_hostport) (POSTGRES_URL) and no PostgreSQL cluster is installed (Debian: apt-get install postgresql)"
}

# ---------- commands ----------
cmd_up() {
  need_java
  mkdir -p "$RUN_DIR"
  local t0=$SECONDS
  redis_up
  postgres_up
  kafka_up
  registry_up
  kafka_wait
  registry_wait
  log "up in $((SECONDS - t0))s"
  cmd_env
}

cmd_down() {
  stop_pid registry 20
  stop_pid kafka 30
  stop_pid redis 10 # SIGTERM: Redis fsyncs its AOF and exits
  rm -f "$RUN_DIR/redis.url"
  if [[ -f "$RUN_DIR/postgres.started" ]]; then
    log "stopping the PostgreSQL cluster started here"
    pg_ctlcluster --skip-systemctl-redirect "$(cat "$RUN_DIR/postgres.started")" main stop || true
    rm -f "$RUN_DIR/postgres.started"
  fi
  if [[ "${1:-}" == "--purge" ]]; then log "purging $RUN_DIR"; rm -rf "$RUN_DIR"; fi
}

cmd_status() {
  local s
  for name in kafka registry redis; do
    if alive "$name"; then s="running (pid $(pid_of "$name"), started here)"; else s="not started here"; fi
    case "$name" in
      kafka) port_open 127.0.0.1 "$KAFKA_PORT" && s="$s, answering on 127.0.0.1:$KAFKA_PORT" ;;
      registry) registry_ready && s="$s, answering at $(registry_url)" ;;
      redis)
        alive redis && s="$s at $(cat "$RUN_DIR/redis.url" 2>/dev/null)"
        redis_ping && s="$s, answering at $REDIS_URL"
        redis_ours && s="$s, AOF in $RUN_DIR/redis/data" ;;
    esac
    printf '%-9s %s\n' "$name" "$s"
  done
}

cmd_logs() {
  local which="${1:-all}" follow=""
  [[ "${2:-}" == "-f" || "${1:-}" == "-f" ]] && follow="-f"
  [[ "$which" == "-f" ]] && which=all
  local files=()
  [[ "$which" == all || "$which" == kafka ]] && files+=("$RUN_DIR/kafka/server.log")
  [[ "$which" == all || "$which" == registry ]] && files+=("$RUN_DIR/registry/registry.log")
  [[ "$which" == all || "$which" == redis ]] && [[ -f "$RUN_DIR/redis/redis.log" ]] && files+=("$RUN_DIR/redis/redis.log")
  tail -n 50 $follow "${files[@]}"
}

cmd_env() {
  echo "export KAFKA_BROKERS=127.0.0.1:$KAFKA_PORT"
  echo "export SCHEMA_REGISTRY_URL=$(registry_url)"
  echo "export REDIS_URL=$REDIS_URL"
  echo "export POSTGRES_URL=$POSTGRES_URL"
  echo "export KEYFLOW_KAFKA_VERSION=$KAFKA_VERSION"
  echo "export KEYFLOW_REGISTRY_VERSION=$APICURIO_VERSION"
}

# Exit 0 when every service this script manages answers (started here or reused).
cmd_is_up() { alive kafka && alive registry && registry_ready && redis_ping && pg_ready; }

case "${1:-}" in
  up) cmd_up ;;
  down) shift; cmd_down "${1:-}" ;;
  status) cmd_status ;;
  logs) shift; cmd_logs "$@" ;;
  env) cmd_env ;;
  is-up) cmd_is_up ;;
  fetch) fetch_kafka; fetch_registry ;;
  *) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
