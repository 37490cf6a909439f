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
# A cluster of N brokers (see "kafka" below for ports and data; N=1, the default, is the single broker as before):
#   KEYFLOW_BROKERS=3 infra/local/stack.sh up   (or: stack.sh up --brokers 3)   N combined broker+controller nodes,
#                                      a 3-voter quorum, default.replication.factor=3, min.insync.replicas=2
#   infra/local/stack.sh brokers       one line per broker: index<TAB>host:port<TAB>pid|-<TAB>up|down
#   infra/local/stack.sh kill-broker I SIGKILL broker I (1-based) and wait until its process is gone
#   infra/local/stack.sh stop-broker I SIGTERM broker I (controlled shutdown, 30 s grace)
#   infra/local/stack.sh start-broker I start broker I again (same data, same ports) and wait until it answers
#   These read the broker count the stack was started with; libs/testing's clusterControl() wraps them.
#
# Settings (environment):
#   KAFKA_VERSION (4.1.1)  KAFKA_PORT (9092)  KAFKA_CONTROLLER_PORT (9093)  KAFKA_HEAP_OPTS (-Xms256m -Xmx512m)
#   KEYFLOW_BROKERS (1)  KAFKA_PORT_STEP (10): broker i of N listens on KAFKA_PORT+(i-1)*step, controller likewise
#   KAFKA_SASL_SSL_PORT (unset)  also a SASL_SSL listener (SCRAM-SHA-512 over TLS; Kafka docs "Authentication using
#     SASL/SCRAM") on this port (broker i: +(i-1)*step), with KAFKA_SSL_KEYSTORE (a PKCS12 file holding the broker's
#     key and certificate) and KAFKA_SSL_KEYSTORE_PASSWORD; KAFKA_SCRAM_USERS ("name:password,...") are created
#     through the PLAINTEXT listener once the broker answers. The PLAINTEXT listener stays for the brokers and tools.
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
# One broker (the default, unchanged): process "kafka", data in <run dir>/kafka, node id 1, a standalone quorum.
# N brokers (KEYFLOW_BROKERS=N or `up --brokers N`): processes "kafka-1".."kafka-N", each a combined broker+controller
# with node id i, data in <run dir>/kafka-i, a static quorum of N voters, and ports derived from the base ports:
# broker i listens on KAFKA_PORT + (i-1)*KAFKA_PORT_STEP, its controller on KAFKA_CONTROLLER_PORT + (i-1)*KAFKA_PORT_STEP.
# The count a stack was started with is recorded in <run dir>/kafka.brokers; later commands read it from there.
BROKERS_FILE="$RUN_DIR/kafka.brokers"
KAFKA_PORT_STEP="${KAFKA_PORT_STEP:-10}"
BROKERS_GIVEN="${KEYFLOW_BROKERS:-}"
broker_count() {
  if [[ -n "$BROKERS_GIVEN" ]]; then echo "$BROKERS_GIVEN"
  elif [[ -s "$BROKERS_FILE" ]]; then cat "$BROKERS_FILE"
  else echo 1; fi
}
check_broker_count() {
  local n; n="$(broker_count)"
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "KEYFLOW_BROKERS must be a positive integer, got '$n'"
  if [[ -f "$BROKERS_FILE" && "$(cat "$BROKERS_FILE")" != "$n" ]] && any_broker_alive; then
    die "this run dir's Kafka runs with $(cat "$BROKERS_FILE") broker(s), not $n: run \`stack.sh down\` first (or use another KEYFLOW_RUN_DIR)"
  fi
}
any_broker_alive() { local f; for f in "$RUN_DIR"/kafka.pid "$RUN_DIR"/kafka-*.pid; do [[ -f "$f" ]] && alive "$(basename "$f" .pid)" && return 0; done; return 1; }
broker_name() { if [[ "$(broker_count)" == 1 ]]; then echo kafka; else echo "kafka-$1"; fi; }
broker_port() { echo $((KAFKA_PORT + ($1 - 1) * KAFKA_PORT_STEP)); }
controller_port() { echo $((KAFKA_CONTROLLER_PORT + ($1 - 1) * KAFKA_PORT_STEP)); }
sasl_ssl_port() { echo $((KAFKA_SASL_SSL_PORT + ($1 - 1) * KAFKA_PORT_STEP)); }
check_index() {
  local n; n="$(broker_count)"
  [[ "${1:-}" =~ ^[0-9]+$ ]] && (( $1 >= 1 && $1 <= n )) || die "broker index must be 1..$n, got '${1:-}'"
}
bootstrap_list() {
  local n i out=(); n="$(broker_count)"
  for ((i = 1; i <= n; i++)); do out+=("127.0.0.1:$(broker_port "$i")"); done
  (IFS=,; echo "${out[*]}")
}

kafka_cp() { echo "$KAFKA_HOME/libs/*"; }
kafka_ready() { # [index]
  # A real metadata round trip (DescribeCluster), not just an open port.
  java -cp "$(kafka_cp)" -Dlog4j2.configurationFile="$HERE/tools-log4j2.properties" \
    org.apache.kafka.tools.ClusterTool cluster-id --bootstrap-server "127.0.0.1:$(broker_port "${1:-1}")" >/dev/null 2>&1
}

kafka_props() { # index dir
  local i="$1" dir="$2" n; n="$(broker_count)"
  local port cport; port="$(broker_port "$i")"; cport="$(controller_port "$i")"
  # Replication of the internal topics and the broker defaults: all brokers up to 3, min ISR one less (KIP-101 /
  # Kafka docs "min.insync.replicas": with acks=all a write needs min ISR replicas; RF 3 / min ISR 2 survives one loss).
  local rf=$((n < 3 ? n : 3)); local isr=$((rf > 1 ? rf - 1 : 1))
  echo "process.roles=broker,controller"
  echo "node.id=$i"
  if [[ "$n" == 1 ]]; then
    echo "controller.quorum.bootstrap.servers=127.0.0.1:$cport"
  else
    local voters=() j
    for ((j = 1; j <= n; j++)); do voters+=("$j@127.0.0.1:$(controller_port "$j")"); done
    echo "controller.quorum.voters=$(IFS=,; echo "${voters[*]}")"
  fi
  local extra="" map="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
  if [[ -n "${KAFKA_SASL_SSL_PORT:-}" ]]; then
    extra=",SASL_SSL://127.0.0.1:$(sasl_ssl_port "$i")"; map="$map,SASL_SSL:SASL_SSL"
    cat <<EOF
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.ssl.keystore.type=PKCS12
listener.name.sasl_ssl.ssl.keystore.location=${KAFKA_SSL_KEYSTORE:?KAFKA_SASL_SSL_PORT needs KAFKA_SSL_KEYSTORE}
listener.name.sasl_ssl.ssl.keystore.password=${KAFKA_SSL_KEYSTORE_PASSWORD:?KAFKA_SASL_SSL_PORT needs KAFKA_SSL_KEYSTORE_PASSWORD}
listener.name.sasl_ssl.ssl.key.password=$KAFKA_SSL_KEYSTORE_PASSWORD
EOF
  fi
  cat <<EOF
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport$extra
advertised.listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport$extra
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$map
log.dirs=$dir/data
num.partitions=3
auto.create.topics.enable=false
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
transaction.state.log.num.partitions=8
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
group.initial.rebalance.delay.ms=0
log.cleaner.dedupe.buffer.size=33554432
log.retention.hours=168
EOF
  if [[ "$n" != 1 ]]; then
    echo "default.replication.factor=$rf"
    echo "min.insync.replicas=$isr"
  fi
}

# A KRaft cluster id: 16 random bytes, base64url without padding (22 characters). Never one that starts with '-'
# (1 in 64 would): StorageTool's argument parser takes it for an option ("--cluster-id: expected one argument"), as
# Kafka's own Uuid.randomUuid() also avoids.
new_cluster_id() {
  local id
  while id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | cut -c1-22)"; [[ "$id" == -* ]]; do :; done
  echo "$id"
}

kafka_up() { # index
  local i="${1:-1}" name; name="$(broker_name "$i")"
  local port; port="$(broker_port "$i")"
  if alive "$name"; then log "$name already running (pid $(pid_of "$name"))"; return 0; fi
  port_open 127.0.0.1 "$port" && die "port $port is taken by a process this script did not start; stop it or set KAFKA_PORT"
  port_open 127.0.0.1 "$(controller_port "$i")" && die "port $(controller_port "$i") is taken by a process this script did not start; stop it or set KAFKA_CONTROLLER_PORT"
  fetch_kafka
  local dir="$RUN_DIR/$name"; mkdir -p "$dir/data"
  local props="$dir/server.properties"
  kafka_props "$i" "$dir" >"$props"
  if [[ ! -f "$dir/data/meta.properties" ]]; then
    local cid fmt=(--standalone)
    if [[ "$(broker_count)" == 1 ]]; then
      cid="$(new_cluster_id)"
    else
      # One cluster id for all nodes; the static voters (controller.quorum.voters) need no --standalone.
      [[ -f "$RUN_DIR/kafka-cluster.id" ]] || new_cluster_id >"$RUN_DIR/kafka-cluster.id"
      cid="$(cat "$RUN_DIR/kafka-cluster.id")"; fmt=()
    fi
    log "formatting KRaft storage of $name (cluster id $cid)"
    java -cp "$(kafka_cp)" -Dlog4j2.configurationFile="$HERE/tools-log4j2.properties" \
      kafka.tools.StorageTool format "${fmt[@]}" --ignore-formatted --cluster-id "$cid" --config "$props" \
      >"$dir/format.log" 2>&1 || { cat "$dir/format.log" >&2; die "kafka storage format failed"; }
  fi
  [[ -f "$dir/server.log" ]] && mv -f "$dir/server.log" "$dir/server.log.prev"
  log "starting $name (kafka $KAFKA_VERSION) on 127.0.0.1:$port"
  # shellcheck disable=SC2086
  setsid nohup java $KAFKA_HEAP_OPTS -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$HERE/log4j2.properties" -Dkafka.logs.dir="$dir" \
    -cp "$(kafka_cp)" kafka.Kafka "$props" >"$dir/stdout.log" 2>&1 </dev/null &
  echo $! >"$RUN_DIR/$name.pid"
}

kafka_wait() { # index
  local i="${1:-1}" name; name="$(broker_name "$i")"
  local dir="$RUN_DIR/$name" t0=$SECONDS
  until grep -q 'Kafka Server started' "$dir/server.log" 2>/dev/null; do
    alive "$name" || fail_start "$name" "$dir/server.log" "process exited (stdout: $(tail -n 3 "$dir/stdout.log" 2>/dev/null | tr '\n' ' '))"
    (( SECONDS - t0 > READY_TIMEOUT_S )) && fail_start "$name" "$dir/server.log" "not started after ${READY_TIMEOUT_S}s"
    sleep 0.3
  done
  until kafka_ready "$i"; do
    alive "$name" || fail_start "$name" "$dir/server.log" "process exited"
    (( SECONDS - t0 > READY_TIMEOUT_S )) && fail_start "$name" "$dir/server.log" "no metadata answer after ${READY_TIMEOUT_S}s"
    sleep 0.5
  done
  log "$name ready on 127.0.0.1:$(broker_port "$i")"
  if [[ -n "${KAFKA_SASL_SSL_PORT:-}" && -n "${KAFKA_SCRAM_USERS:-}" ]]; then
    local u users; IFS=, read -ra users <<<"$KAFKA_SCRAM_USERS"
    for u in "${users[@]}"; do
      # KIP-554: SCRAM credentials through the Admin API (kafka-configs --bootstrap-server), here on PLAINTEXT.
      java -cp "$(kafka_cp)" -Dlog4j2.configurationFile="$HERE/tools-log4j2.properties" kafka.admin.ConfigCommand \
        --bootstrap-server "127.0.0.1:$(broker_port "$i")" --alter --entity-type users --entity-name "${u%%:*}" \
        --add-config "SCRAM-SHA-512=[iterations=8192,password=${u#*:}]" >"$dir/scram.log" 2>&1 \
        || fail_start "$name" "$dir/scram.log" "could not create the SCRAM user ${u%%:*}"
    done
    log "$name: SASL_SSL (SCRAM-SHA-512) on 127.0.0.1:$(sasl_ssl_port "$i"), ${#users[@]} SCRAM user(s)"
  fi
}

kafka_all() { # up|wait
  local n i; n="$(broker_count)"
  for ((i = 1; i <= n; i++)); do "kafka_$1" "$i"; done
}

# SIGKILL a process started here (no shutdown, no flush) and wait until it is gone; forgets its pid file.
# Returns 1 when it is still alive 10 s after the signal.
kill_pid() { # name [what, for the log line]
  local name="$1" p t0; p="$(pid_of "$name")"
  if alive "$name"; then
    log "SIGKILL $name (pid $p${2:+, $2})"
    kill -KILL "$p" 2>/dev/null || true
    t0=$SECONDS
    while alive "$name"; do (( SECONDS - t0 > 10 )) && return 1; sleep 0.05; done
  else
    log "$name is not running"
  fi
  rm -f "$RUN_DIR/$name.pid"
}

# SIGKILL one broker (no shutdown: no controlled leader move, no flush), and wait until the process is gone.
cmd_kill_broker() {
  check_index "${1:-}"
  local name; name="$(broker_name "$1")"
  kill_pid "$name" "127.0.0.1:$(broker_port "$1")" || die "$name still alive 10s after SIGKILL"
}

# SIGTERM one broker (controlled shutdown: leaders move first), waiting up to 30 s.
cmd_stop_broker() { check_index "${1:-}"; stop_pid "$(broker_name "$1")" 30; }

# Start one broker of the recorded cluster (its data and settings are kept) and wait until it answers.
cmd_start_broker() { check_index "${1:-}"; need_java; kafka_up "$1"; kafka_wait "$1"; }

# One line per broker: index, host:port, pid (- when down), up|down.
cmd_brokers() {
  local n i name; n="$(broker_count)"
  for ((i = 1; i <= n; i++)); do
    name="$(broker_name "$i")"
    if alive "$name"; then printf '%s\t127.0.0.1:%s\t%s\tup\n' "$i" "$(broker_port "$i")" "$(pid_of "$name")"
    else printf '%s\t127.0.0.1:%s\t-\tdown\n' "$i" "$(broker_port "$i")"; fi
  done
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
# The first bytes of Redis's answer to PING (empty when nothing answers).
redis_reply() {
  local h p; h="$(redis_host)"; p="$(redis_port)"
  (exec 3<>"/dev/tcp/$h/$p" && printf 'PING\r\n' >&3 && timeout 2 head -c 7 <&3) 2>/dev/null || true
}
# Whether a reply says Redis is up (PONG, or NOAUTH from one that wants a password).
redis_up_reply() { [[ "$1" == *PONG* || "$1" == *NOAUTH* ]]; }
redis_ping() { redis_up_reply "$(redis_reply)"; }

# The Redis this script started is the one REDIS_URL names (it records the URL next to the pid).
redis_ours() { alive redis && [[ "$(cat "$RUN_DIR/redis.url" 2>/dev/null)" == "$REDIS_URL" ]]; }

# Waits until the Redis at REDIS_URL answers PONG (or NOAUTH); fails the start if the one this script started exits
# ($2 = ours), or after 20 s without an answer (READY_TIMEOUT_S once it has answered LOADING). $1: its log, shown on
# failure.
redis_wait() {
  local log_file=$1 ours=${2:-} t0=$SECONDS r limit=20
  until r="$(redis_reply)"; redis_up_reply "$r"; do
    [[ -z "$ours" ]] || alive redis || fail_start redis "$log_file" "process exited"
    # -LOADING: it is reading its AOF back (millions of idempotency records after a day of benches take tens of
    # seconds), which is progress: from the first such answer on, wait as long as for the other services (a probe
    # that gets no answer meanwhile does not bring the 20 s back).
    [[ "$r" == *LOADIN* ]] && limit=$READY_TIMEOUT_S
    (( SECONDS - t0 > limit )) && fail_start redis "$log_file" "no PONG after ${limit}s"
    sleep 0.1
  done
}

redis_up() {
  if redis_ours; then
    # Ours and running: up, or still loading its AOF (a second `up` meanwhile must not start another on its port).
    redis_ping || { log "redis (pid $(pid_of redis)) is still starting at $REDIS_URL: waiting for it"; redis_wait "$RUN_DIR/redis/redis.log" ours; }
    log "redis already running (pid $(pid_of redis)) at $REDIS_URL"; return 0
  fi
  local reply; reply="$(redis_reply)"
  if [[ -n "$reply" ]]; then
    # Something this script did not start answers: reused only when the user named it in REDIS_URL, once it answers
    # PONG (it may be reading its data back: -LOADING).
    [[ -n "$REDIS_URL_GIVEN" ]] || die "port $(redis_port) answers ($(tr -d '\r\n' <<<"$reply")) but not from a Redis this script started; stop it, or set KEYFLOW_REDIS_PORT, or name it in REDIS_URL to reuse it"
    redis_up_reply "$reply" || { log "redis at $REDIS_URL (given in REDIS_URL) is not ready yet: waiting for it"; redis_wait /dev/null; }
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
  redis_wait "$dir/redis.log" ours
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
  check_broker_count
  BROKERS_GIVEN="$(broker_count)"
  echo "$BROKERS_GIVEN" >"$BROKERS_FILE"
  local t0=$SECONDS
  redis_up
  postgres_up
  kafka_all up
  registry_up
  kafka_all wait
  registry_wait
  log "up in $((SECONDS - t0))s"
  cmd_env
}

cmd_down() {
  local f purge=0
  [[ "${1:-}" == "--purge" ]] && purge=1
  if ((purge)); then
    # The data goes with the run dir: a controlled shutdown would only cost time (a 3-broker stack's last broker,
    # its quorum gone, waits out its 30 s), so the brokers are killed at once.
    # One still alive after that is left to stop_pid below.
    for f in "$RUN_DIR"/kafka.pid "$RUN_DIR"/kafka-*.pid; do
      [[ -f "$f" ]] && { kill_pid "$(basename "$f" .pid)" "its data is purged" || true; }
    done
  fi
  stop_pid registry 20
  for f in "$RUN_DIR"/kafka.pid "$RUN_DIR"/kafka-*.pid; do [[ -f "$f" ]] && stop_pid "$(basename "$f" .pid)" 30; done
  rm -f "$BROKERS_FILE"
  stop_pid redis 10 # SIGTERM: Redis fsyncs its AOF and exits
  rm -f "$RUN_DIR/redis.url"
  if [[ -f "$RUN_DIR/postgres.started" ]]; then
    log "stopping the PostgreSQL cluster started here"
    pg_ctlcluster --skip-systemctl-redirect "$(cat "$RUN_DIR/postgres.started")" main stop || true
    rm -f "$RUN_DIR/postgres.started"
  fi
  if ((purge)); then log "purging $RUN_DIR"; rm -rf "$RUN_DIR"; fi
}

cmd_status() {
  local s
  local n i; n="$(broker_count)"
  local names=(); for ((i = 1; i <= n; i++)); do names+=("$(broker_name "$i")"); done
  for name in "${names[@]}" registry redis; do
    if alive "$name"; then s="running (pid $(pid_of "$name"), started here)"; else s="not started here"; fi
    case "$name" in
      kafka*)
        i="${name#kafka-}"; [[ "$name" == kafka ]] && i=1
        port_open 127.0.0.1 "$(broker_port "$i")" && s="$s, answering on 127.0.0.1:$(broker_port "$i")" ;;
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
  local d
  for d in "$RUN_DIR"/kafka "$RUN_DIR"/kafka-*; do
    [[ -f "$d/server.log" ]] || continue
    [[ "$which" == all || "$which" == kafka || "$which" == "$(basename "$d")" ]] && files+=("$d/server.log")
  done
  [[ "$which" == all || "$which" == registry ]] && files+=("$RUN_DIR/registry/registry.log")
  [[ "$which" == all || "$which" == redis ]] && [[ -f "$RUN_DIR/redis/redis.log" ]] && files+=("$RUN_DIR/redis/redis.log")
  tail -n 50 $follow "${files[@]}"
}

cmd_env() {
  echo "export KAFKA_BROKERS=$(bootstrap_list)"
  echo "export SCHEMA_REGISTRY_URL=$(registry_url)"
  echo "export REDIS_URL=$REDIS_URL"
  echo "export POSTGRES_URL=$POSTGRES_URL"
  echo "export KEYFLOW_KAFKA_VERSION=$KAFKA_VERSION"
  echo "export KEYFLOW_REGISTRY_VERSION=$APICURIO_VERSION"
}

# Exit 0 when every service this script manages answers (started here or reused).
cmd_is_up() {
  local n i; n="$(broker_count)"
  for ((i = 1; i <= n; i++)); do alive "$(broker_name "$i")" || return 1; done
  alive registry && registry_ready && redis_ping && pg_ready; }

if [[ "${1:-}" == up && "${2:-}" == --brokers ]]; then BROKERS_GIVEN="${3:-}"; set -- up; fi
case "${1:-}" in
  up) cmd_up ;;
  kill-broker) cmd_kill_broker "${2:-}" ;;
  stop-broker) cmd_stop_broker "${2:-}" ;;
  start-broker) cmd_start_broker "${2:-}" ;;
  brokers) cmd_brokers ;;
  down) shift; cmd_down "${1:-}" ;;
  status) cmd_status ;;
  logs) shift; cmd_logs "$@" ;;
  env) cmd_env ;;
  is-up) cmd_is_up ;;
  fetch) fetch_kafka; fetch_registry ;;
  *) sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
