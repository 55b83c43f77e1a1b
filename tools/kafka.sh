#!/usr/bin/env bash
# A single-node Apache Kafka 4.x broker (KRaft, combined broker+controller) on 127.0.0.1, for tests and local runs.
#
#   tools/kafka.sh fetch                 download the broker's jars from Maven Central (cached under .cache/kafka)
#   tools/kafka.sh start DIR [PORT]      format DIR (first time only), start the broker, print HOST:PORT when it answers
#   tools/kafka.sh start-secure DIR SEC  the same broker with two secured listeners more, as a team's cluster has them:
#                                        SASL_SSL (PLAIN and SCRAM-SHA-512) and SSL requiring a client certificate
#                                        (mutual TLS), and ACLs (StandardAuthorizer). SEC holds ca.pem (the CA), broker.pem
#                                        (the broker's encrypted key and certificate, a PEM key store), broker.password
#                                        (that key's password), plain-users and scram-users (NAME:PASSWORD a line; the
#                                        SCRAM users are created when the storage is formatted, kafka-storage --add-scram).
#                                        The PLAINTEXT listener stays for the operator (super user ANONYMOUS: topics, ACLs).
#                                        Prints PLAINTEXT=HOST:PORT SASL_SSL=localhost:PORT SSL=localhost:PORT; the
#                                        secured listeners are advertised as localhost, the name in the broker's certificate.
#   tools/kafka.sh stop DIR              stop the broker started in DIR (by its process id), cleanly
#   tools/kafka.sh status DIR            print HOST:PORT and exit 0 if it runs, exit 1 if not
#
# Starting again in the same DIR (and PORT) reuses its data: a broker "restart".
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/kafka-pom.xml")
libs="$top/.cache/kafka/$version/libs"
# The broker is a test fixture: half a GiB of heap is plenty and leaves room for Ray on 2 cores.
heap=${KAFKA_HEAP:-512m}
# The JVM takes ~5-20 s to start on a loaded 2-core machine; give it room.
start_timeout=${KAFKA_START_TIMEOUT:-90}

die() { echo "kafka.sh: $*" >&2; exit 1; }

fetch() {
  [ -f "$libs/.complete" ] && return 0
  command -v mvn >/dev/null || die "Maven (mvn) is needed to fetch the broker"
  command -v java >/dev/null || die "Java 17+ is needed to run the broker"
  mkdir -p "$libs"
  mvn -q -B -f "$here/kafka-pom.xml" dependency:copy-dependencies -DoutputDirectory="$libs" >&2 \
    || die "could not fetch Kafka $version from Maven Central"
  touch "$libs/.complete"
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

answers() { python3 - "$1" <<'PY'
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
except OSError:
    sys.exit(1)
PY
}

running() {
  local dir=$1
  [ -f "$dir/kafka.pid" ] && kill -0 "$(cat "$dir/kafka.pid")" 2>/dev/null
}

secure=""

start_secure() {
  secure=$(cd "${2:?usage: kafka.sh start-secure DIR SEC}" && pwd)
  start "$1" "${3:-}"
}

# The listeners, authorizer and users of start-secure, appended to server.properties.
secure_properties() {
  local dir=$1 port=$2 cport=$3 sport mport jaas="" line
  if [ -f "$dir/secure-ports" ]; then read -r sport mport < "$dir/secure-ports"; else
    sport=$(free_port); mport=$(free_port); echo "$sport $mport" > "$dir/secure-ports"; fi
  while IFS=: read -r name pw; do [ -n "$name" ] && jaas="$jaas user_$name=\"$pw\""; done < "$secure/plain-users"
  sed -i '/^listeners=/d; /^advertised.listeners=/d; /^listener.security.protocol.map=/d' "$dir/server.properties"
  cat >> "$dir/server.properties" <<PROPS
listeners=PLAINTEXT://127.0.0.1:$port,SASL_SSL://127.0.0.1:$sport,SSL://127.0.0.1:$mport,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port,SASL_SSL://localhost:$sport,SSL://localhost:$mport
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512
listener.name.sasl_ssl.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required$jaas;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location=$secure/broker.pem
ssl.key.password=$(cat "$secure/broker.password")
ssl.truststore.type=PEM
ssl.truststore.location=$secure/ca.pem
listener.name.ssl.ssl.client.auth=required
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS
allow.everyone.if.no.acl.found=true
PROPS
  chmod 600 "$dir/server.properties"
  echo "PLAINTEXT=127.0.0.1:$port SASL_SSL=localhost:$sport SSL=localhost:$mport" > "$dir/listeners"
}

start() {
  local dir=${1:?usage: kafka.sh start DIR [PORT]} port=${2:-}
  fetch
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if running "$dir"; then
    if [ -n "$secure" ]; then cat "$dir/listeners"; else cat "$dir/bootstrap"; fi
    return 0
  fi
  [ -n "$port" ] || { [ -f "$dir/port" ] && port=$(cat "$dir/port"); } || true
  [ -n "$port" ] || port=$(free_port)
  local cport
  cport=$(free_port)
  cat > "$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$dir/logs
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
PROPS
  [ -z "$secure" ] || secure_properties "$dir" "$port" "$cport"
  local cp="$libs/*"
  if [ ! -f "$dir/logs/meta.properties" ]; then
    local id
    id=$(java -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n1)
    local scram=()
    if [ -n "$secure" ]; then
      while IFS=: read -r name pw; do
        [ -n "$name" ] && scram+=(--add-scram "SCRAM-SHA-512=[name=$name,password=$pw]")
      done < "$secure/scram-users"
    fi
    java -cp "$cp" kafka.tools.StorageTool format -t "$id" -c "$dir/server.properties" "${scram[@]}" >"$dir/format.log" 2>&1 \
      || { cat "$dir/format.log" >&2; die "formatting the KRaft storage failed"; }
  else
    # A restart: the controller port is new, the quorum's stored voters must follow it.
    sed -i "s/^controller.quorum.voters=.*/controller.quorum.voters=1@127.0.0.1:$cport/" "$dir/server.properties"
  fi
  cat > "$dir/log4j.properties" <<'L4J'
log4j.rootLogger=WARN, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File=${kafka.logs.dir}/server.log
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
L4J
  cat > "$dir/log4j2.properties" <<'L4J2'
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = FILE
L4J2
  nohup java -Xmx"$heap" -Xms128m -XX:+UseG1GC -Dkafka.logs.dir="$dir" \
    -Dlog4j.configuration="file:$dir/log4j.properties" -Dlog4j2.configurationFile="$dir/log4j2.properties" \
    -cp "$cp" kafka.Kafka "$dir/server.properties" >"$dir/stdout.log" 2>&1 </dev/null &
  echo $! > "$dir/kafka.pid"
  echo "$port" > "$dir/port"
  echo "127.0.0.1:$port" > "$dir/bootstrap"
  local waited=0
  until answers "$port"; do
    running "$dir" || { tail -n 30 "$dir/stdout.log" >&2; die "the broker exited during start-up"; }
    sleep 0.5; waited=$((waited + 1))
    [ "$waited" -lt $((start_timeout * 2)) ] || { stop "$dir"; die "the broker did not answer within ${start_timeout}s"; }
  done
  if [ -n "$secure" ]; then cat "$dir/listeners"; else cat "$dir/bootstrap"; fi
}

stop() {
  local dir=${1:?usage: kafka.sh stop DIR}
  running "$dir" || return 0
  local pid
  pid=$(cat "$dir/kafka.pid")
  kill -TERM "$pid"
  # A clean shutdown flushes logs and leaves the controller quorum; it takes a few seconds.
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" || true
  rm -f "$dir/kafka.pid"
}

status() {
  local dir=${1:?usage: kafka.sh status DIR}
  running "$dir" && answers "$(cat "$dir/port")" && cat "$dir/bootstrap"
}

case "${1:-}" in
  fetch) fetch ;;
  start) shift; start "$@" ;;
  start-secure) shift; start_secure "$@" ;;
  stop) shift; stop "$@" ;;
  status) shift; status "$@" ;;
  *) sed -n '2,18p' "$0" >&2; exit 2 ;;
esac
