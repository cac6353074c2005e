#!/usr/bin/env bash
# `make sam-local`: the four functions exactly as `sam build` packs them, run by `sam local
# invoke` and `sam local start-api` in Docker against DynamoDB Local, every output checked
# (SAM exits 0 on many failures, so the bodies are read).
#
#   scripts/sam-local.sh            after `make build` (the Makefile target builds first)
#
# What it needs, and gets itself where it can:
# - a Docker daemon: the one DOCKER_HOST or the default socket reaches (Docker Desktop, a
#   laptop's docker), or else its own: Debian's docker.io, started on a socket under
#   .local/sam-local/docker/ with its own data, a private bridge and no iptables rules, and
#   stopped again at the end (needs root);
# - arm64 emulation when the host is not arm64: qemu-user-static registered with binfmt_misc
#   (needs root; Docker Desktop has its own);
# - the base image SAM runs provided.al2023 functions on,
#   public.ecr.aws/lambda/provided:al2023-<arch>: pulled, or, where no image registry is
#   reachable, built from Debian packages with debootstrap (cached under .local/sam-local/);
# - DynamoDB Local, kinesis-mock and moto's S3 (scripts/services.sh; stopped again if started
#   here), reached by the containers through scripts/forward.py on the bridge's gateway.
# A step that lacks a privilege fails and says which; nothing is skipped silently.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

LOCAL="${TIDEMARK_LOCAL_DIR:-$ROOT/.local}"
WORK="$LOCAL/sam-local"
DDB_PORT="${TIDEMARK_DYNAMODB_PORT:-8000}"
API_PORT="${TIDEMARK_API_PORT:-3000}"
SAM_API_PORT="${TIDEMARK_SAM_API_PORT:-$((API_PORT + 10))}"
ARCH="arm64" # template.yaml's Globals.Function.Architectures
BASE_IMAGE="public.ecr.aws/lambda/provided:al2023-$ARCH"
BASE_IMAGE_RECIPE="1" # bump when the local base image recipe below changes
BRIDGE_CIDR="${TIDEMARK_DOCKER_BRIDGE:-172.29.77.1/24}"
export SAM_CLI_TELEMETRY=0 SAM_CLI_BETA_RUST_CARGO_LAMBDA=1

die() { echo "sam-local: FAILED: $*" >&2; exit 1; }
say() { echo "sam-local: $*" >&2; }
is_root() { [[ "$(id -u)" -eq 0 ]]; }
need_root() { is_root || die "$1 needs root (uid 0); run as root, or $2"; }

PATH="$(scripts/sam-tools.sh):$PATH"
PY="$(dirname "$(command -v sam)")/python"
# SAM, with its container readiness check made to work behind Docker's userland proxy.
sam_() { "$PY" "$ROOT/scripts/sam_ready.py" "$@"; }
mkdir -p "$WORK"
CLEANUP=()
cleanup() {
  local i
  for ((i = ${#CLEANUP[@]} - 1; i >= 0; i--)); do eval "${CLEANUP[$i]}" || true; done
}
trap cleanup EXIT

# --- Debian packages ---------------------------------------------------------------------
apt_install() {
  local missing=() p
  for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  command -v apt-get >/dev/null || die "needs the Debian packages ${missing[*]} and there is no apt-get; install their equivalents"
  need_root "installing ${missing[*]} with apt-get" "install them first"
  say "installing ${missing[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${missing[@]}" >"$WORK/apt.log" 2>&1 \
    || { apt-get update -q >>"$WORK/apt.log" 2>&1 && apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$WORK/apt.log" 2>&1; } \
    || die "apt-get install ${missing[*]} failed; see $WORK/apt.log"
}

# --- Docker ------------------------------------------------------------------------------
OWN_DAEMON=0
docker_up() { docker info >/dev/null 2>&1; }

start_own_dockerd() {
  apt_install docker.io
  need_root "starting a Docker daemon (dockerd needs namespaces, cgroups and mounts)" \
    "start Docker yourself and set DOCKER_HOST"
  local d="$WORK/docker"
  mkdir -p "$d"
  export DOCKER_HOST="unix://$d/docker.sock"
  if docker_up; then say "reusing the Docker daemon of an earlier run ($DOCKER_HOST)"; OWN_DAEMON=1; return; fi
  say "starting a Docker daemon on $DOCKER_HOST (bridge $BRIDGE_CIDR, no iptables rules)"
  setsid dockerd --data-root "$d/data" --exec-root "$d/exec" --pidfile "$d/dockerd.pid" \
    -H "$DOCKER_HOST" --iptables=false --ip-masq=false --bip="$BRIDGE_CIDR" \
    </dev/null >"$d/dockerd.log" 2>&1 &
  local pid=$!
  CLEANUP+=("stop_own_dockerd $pid")
  for _ in $(seq 1 60); do
    docker_up && break
    kill -0 "$pid" 2>/dev/null || die "dockerd exited during start-up (privileges? cgroups?); see $d/dockerd.log"
    sleep 0.5
  done
  docker_up || die "dockerd did not answer within 30 s; see $d/dockerd.log"
  OWN_DAEMON=1
}

stop_own_dockerd() {
  local pid="$1"
  say "stopping the Docker daemon this run started (pid $pid)"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
}

ensure_docker() {
  command -v docker >/dev/null 2>&1 && docker_up && { say "using the Docker daemon at ${DOCKER_HOST:-the default socket}"; return; }
  start_own_dockerd
}

# --- arm64 emulation ---------------------------------------------------------------------
ensure_emulation() {
  [[ "$(uname -m)" == "aarch64" || "$ARCH" != "arm64" ]] && return 0
  # Another daemon (Docker Desktop) emulates in its own VM; checked by running the image below.
  [[ "$OWN_DAEMON" == 1 ]] || return 0
  local entry=/proc/sys/fs/binfmt_misc/qemu-aarch64
  if [[ ! -f "$entry" ]] || ! grep -q '^flags:.*F' "$entry"; then
    apt_install qemu-user-static binfmt-support
    if [[ ! -f /proc/sys/fs/binfmt_misc/register ]]; then
      mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null \
        || die "arm64 emulation needs binfmt_misc mounted at /proc/sys/fs/binfmt_misc (mount needs CAP_SYS_ADMIN)"
    fi
    update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
    [[ -f "$entry" ]] || die "qemu-aarch64 is not registered with binfmt_misc (update-binfmts --enable qemu-aarch64 failed)"
    grep -q '^flags:.*F' "$entry" || die "qemu-aarch64 is registered without the F (fix-binary) flag, so containers cannot use it"
  fi
}

# --- the base image ----------------------------------------------------------------------
debian_mirror() {
  # The mirror this machine's apt already uses: nothing hard-coded.
  local m
  m="$(sed -n 's/^URIs: *\([^ ]*\)$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -1)"
  [[ -n "$m" ]] || m="$(sed -n 's/^deb \(\[[^]]*\] \)\{0,1\}\([^ ]*\) .*/\2/p' /etc/apt/sources.list 2>/dev/null | grep -v security | head -1)"
  [[ -n "$m" ]] || die "no Debian mirror found in /etc/apt/sources.list{,.d/} for debootstrap"
  echo "$m"
}

build_base_image() {
  local ctx="$WORK/base-$ARCH" tarball="$WORK/base-$ARCH-r$BASE_IMAGE_RECIPE.tar"
  if [[ ! -f "$tarball" ]]; then
    apt_install debootstrap
    need_root "building the base image with debootstrap (chroot)" "pull $BASE_IMAGE on a machine that can and docker load it"
    local rootfs="$WORK/rootfs-$ARCH" suite
    suite="$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")"
    say "building $BASE_IMAGE from Debian $suite packages (debootstrap, minutes; cached in $tarball)"
    rm -rf "$rootfs"
    debootstrap --variant=minbase --arch="$ARCH" "$suite" "$rootfs" "$(debian_mirror)" \
      >"$WORK/debootstrap.log" 2>&1 || die "debootstrap failed; see $WORK/debootstrap.log"
    rm -rf "$rootfs"/var/cache/apt/* "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/{doc,man,info,locale}
    mkdir -p "$rootfs"/var/task "$rootfs"/var/runtime "$rootfs"/opt
    tar -C "$rootfs" --numeric-owner -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$rootfs"
  fi
  rm -rf "$ctx" && mkdir -p "$ctx"
  ln "$tarball" "$ctx/rootfs.tar" 2>/dev/null || cp "$tarball" "$ctx/rootfs.tar"
  # Lambda's provided runtimes: the function's own `bootstrap` is the runtime; SAM runs this
  # entrypoint under the Runtime Interface Emulator with the handler as its argument.
  cat >"$ctx/lambda-entrypoint.sh" <<'EOS'
#!/bin/sh
export _HANDLER="$1"
for b in /var/runtime/bootstrap /var/task/bootstrap /opt/bootstrap; do
  [ -x "$b" ] && exec "$b"
done
echo "no executable bootstrap in /var/runtime, /var/task or /opt" >&2
exit 127
EOS
  chmod +x "$ctx/lambda-entrypoint.sh"
  cat >"$ctx/Dockerfile" <<'EOD'
FROM scratch
ADD rootfs.tar /
COPY lambda-entrypoint.sh /lambda-entrypoint.sh
ENV LANG=C.UTF-8 TZ=:/etc/localtime PATH=/usr/local/bin:/usr/bin:/bin:/opt/bin \
    LAMBDA_TASK_ROOT=/var/task LAMBDA_RUNTIME_DIR=/var/runtime
WORKDIR /var/task
ENTRYPOINT ["/lambda-entrypoint.sh"]
EOD
  DOCKER_BUILDKIT=0 docker build -q --platform "linux/$ARCH" -t "$BASE_IMAGE" "$ctx" >/dev/null \
    || die "docker build of $BASE_IMAGE failed"
  rm -rf "$ctx"
}

ensure_base_image() {
  if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    say "base image $BASE_IMAGE present"
  elif timeout 120 docker pull -q --platform "linux/$ARCH" "$BASE_IMAGE" >/dev/null 2>&1; then
    say "pulled $BASE_IMAGE"
  else
    say "cannot pull $BASE_IMAGE (no registry reachable?); building it locally"
    build_base_image
  fi
  docker run --rm --platform "linux/$ARCH" --entrypoint /bin/true "$BASE_IMAGE" \
    || die "cannot run $ARCH containers: no $ARCH emulation in this Docker (install qemu-user-static with binfmt F flag, or use Docker Desktop)"
}

# --- the run -----------------------------------------------------------------------------
[[ -f .aws-sam/build/template.yaml ]] || die "no .aws-sam/build: run \`make build\` (or \`make sam-local\`, which does)"

ensure_docker
ensure_emulation
ensure_base_image

status="$(scripts/services.sh status)"
stopped="$(sed -n 's/^\([a-z0-9-]*\): stopped$/\1/p' <<<"$status" | tr '\n' ' ')"
scripts/services.sh start
[[ -n "$stopped" ]] && CLEANUP+=("scripts/services.sh stop $stopped")

# Containers reach the host's DynamoDB Local as host.docker.internal: Docker Desktop names it
# itself; on Linux it is the bridge's gateway.
ADD_HOST=()
if ! docker info -f '{{.OperatingSystem}}' 2>/dev/null | grep -q "Docker Desktop"; then
  gw="$(docker network inspect bridge -f '{{range .IPAM.Config}}{{.Gateway}}{{end}}')"
  [[ -n "$gw" ]] || die "cannot find the Docker bridge's gateway address"
  ADD_HOST=(--add-host "host.docker.internal:$gw")
  # DynamoDB Local and moto's S3 listen on 127.0.0.1 only (scripts/services.sh), which the
  # containers cannot reach: forward the gateway's ports to them while this script runs. The
  # local stack's one listener beyond loopback, on the bridge's address (meant for the
  # containers; a neighbour routing to it would reach it too). Docker Desktop's
  # host.docker.internal reaches the host's loopback without it.
  say "forwarding $gw:$DDB_PORT and $gw:${TIDEMARK_S3_PORT:-4569} to 127.0.0.1 for the containers, until the end of this run"
  setsid python3 scripts/forward.py "$gw" "$DDB_PORT" "${TIDEMARK_S3_PORT:-4569}" \
    </dev/null >"$WORK/forward.log" 2>&1 &
  fwd_pid=$!
  CLEANUP+=("kill -- -$fwd_pid 2>/dev/null")
  for _ in $(seq 1 50); do
    [[ "$(grep -c "^forwarding \|not forwarded" "$WORK/forward.log" 2>/dev/null)" == 2 ]] && break
    kill -0 "$fwd_pid" 2>/dev/null || { cat "$WORK/forward.log" >&2; die "the forwarder to DynamoDB Local and S3 exited"; }
    sleep 0.1
  done
  grep -q "^forwarding \|not forwarded" "$WORK/forward.log" || { cat "$WORK/forward.log" >&2; die "the forwarder did not start"; }
fi

TABLE="tidemark-samlocal-$(date +%s)-$$"
say "table $TABLE on DynamoDB Local :$DDB_PORT"
TABLE_NAME="$TABLE" STREAM_NAME="$TABLE" cargo run --quiet -p tidemark-devstack -- bootstrap >/dev/null
drop_table() {
  AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_DEFAULT_REGION=us-east-1 "$PY" - "$TABLE" \
    "http://127.0.0.1:$DDB_PORT" "http://127.0.0.1:${TIDEMARK_KINESIS_PORT:-4567}" <<'EOP'
import sys, boto3
name, ddb, kin = sys.argv[1:]
boto3.client("dynamodb", endpoint_url=ddb).delete_table(TableName=name)
boto3.client("kinesis", endpoint_url=kin).delete_stream(StreamName=name)
EOP
}
CLEANUP+=("drop_table")
EVENTS="$WORK/events"
rm -rf "$EVENTS"
cargo run --quiet -p tidemark-devstack -- events "$EVENTS" >/dev/null
cat >"$WORK/env.json" <<EOF
{"Parameters": {"TABLE_NAME": "$TABLE",
                "TIDEMARK_DYNAMODB_ENDPOINT": "http://host.docker.internal:$DDB_PORT"},
 "ApiFunction": {"TIDEMARK_LOCAL": "1", "CURSOR_SECRET_ARN": ""}}
EOF
SAM_ARGS=(--env-vars "$WORK/env.json" --skip-pull-image "${ADD_HOST[@]}")

# AlertFunction publishes with the real EventBridge client to devstack's PutEvents stand-in,
# listening where containers reach the host (the bridge's gateway on Linux).
EVENTS_PORT="${TIDEMARK_EVENTS_PORT:-$((API_PORT + 11))}"
EVENTS_FILE="$WORK/events.jsonl"
rm -f "$EVENTS_FILE"
TIDEMARK_EVENTS_FILE="$EVENTS_FILE" setsid cargo run --quiet -p tidemark-devstack -- event-bus \
  "${gw:-127.0.0.1}:$EVENTS_PORT" </dev/null >"$WORK/event-bus.log" 2>&1 &
bus_pid=$!
CLEANUP+=("kill -- -$bus_pid 2>/dev/null")
for _ in $(seq 1 120); do
  grep -q "PutEvents endpoint on" "$WORK/event-bus.log" 2>/dev/null && break
  kill -0 "$bus_pid" 2>/dev/null || { cat "$WORK/event-bus.log" >&2; die "the local PutEvents endpoint exited"; }
  sleep 0.5
done
S3_PORT="${TIDEMARK_S3_PORT:-4569}"
EXPORT_BUCKET="tidemark-sam-local"
"$PY" - "$WORK/env.json" "http://host.docker.internal:$EVENTS_PORT" "$TABLE" \
  "http://host.docker.internal:${TIDEMARK_KINESIS_PORT:-4567}" \
  "http://host.docker.internal:$S3_PORT" "$EXPORT_BUCKET" <<'EOP'
import json, sys
path, endpoint, stream, kinesis, s3, bucket = sys.argv[1:]
env = json.load(open(path))
env["AlertFunction"] = {"EVENT_BUS_NAME": "tidemark-local", "TIDEMARK_EVENTBRIDGE_ENDPOINT": endpoint}
env["WatchdogFunction"] = {"STREAM_NAME": stream, "TIDEMARK_KINESIS_ENDPOINT": kinesis}
# No queue: the invocation exports its slices itself (EXPORT_QUEUE_URL empty).
env["ExporterFunction"] = {"EXPORT_BUCKET": bucket, "TIDEMARK_S3_ENDPOINT": s3, "EXPORT_QUEUE_URL": ""}
json.dump(env, open(path, "w"))
EOP
# moto starts empty: the export's bucket is made here (deployed: the template's).
"$PY" - "http://127.0.0.1:$S3_PORT" "$EXPORT_BUCKET" <<'EOP' || die "could not create the export bucket in moto's S3"
import sys, boto3
s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1",
                  aws_access_key_id="local", aws_secret_access_key="local")
try:
    s3.create_bucket(Bucket=sys.argv[2])
except s3.exceptions.BucketAlreadyOwnedByYou:
    pass
EOP

# The JSON a function returned (SAM prints it as the last line of stdout), checked by a
# Python expression over `r`; SAM exits 0 even when the function failed, so this is the test.
invoke() {
  local fn="$1" event="$2" check="$3" what="$4" out="$WORK/invoke.out" err="$WORK/invoke.err"
  sam_ local invoke "$fn" -e "$event" "${SAM_ARGS[@]}" >"$out" 2>"$err" \
    || { cat "$err" >&2; die "sam local invoke $fn -e $(basename "$event") exited $?"; }
  "$PY" - "$out" "$check" <<'EOP' || { tail -20 "$err" >&2; die "$fn with $(basename "$event"): expected $what"; }
import json, sys
lines = [l for l in open(sys.argv[1]).read().splitlines() if l.strip()]
r = json.loads(lines[-1]) if lines else None
print(f"  -> {json.dumps(r)[:200]}", file=sys.stderr)
sys.exit(0 if isinstance(r, dict) and "errorType" not in r and eval(sys.argv[2]) else 1)
EOP
  say "ok: $fn $(basename "$event"): $what"
}
NO_FAILURES='r.get("batchItemFailures") == []'

invoke IngestFunction "$EVENTS/kinesis-readings.json" "$NO_FAILURES" "every record stored"
invoke IngestFunction "$EVENTS/kinesis-bad-records.json" "$NO_FAILURES" "bad records quarantined, none failed"
sam local generate-event kinesis get-records >"$WORK/generated-kinesis.json"
invoke IngestFunction "$WORK/generated-kinesis.json" "$NO_FAILURES" "SAM's sample record quarantined"
invoke AggregatorFunction "$EVENTS/ddb-stream-readings.json" "$NO_FAILURES" "readings aggregated"
invoke AggregatorFunction "$EVENTS/ddb-stream-ttl-remove.json" "$NO_FAILURES" "TTL removal ignored"
sam local generate-event dynamodb update >"$WORK/generated-dynamodb.json"
invoke AggregatorFunction "$WORK/generated-dynamodb.json" "$NO_FAILURES" "SAM's non-reading records ignored"
invoke AlertFunction "$EVENTS/ddb-stream-alert-opened.json" "$NO_FAILURES" "the alert's change published"
"$PY" - "$EVENTS_FILE" <<'EOP' || die "AlertFunction: expected one 'opened' event at the local PutEvents endpoint"
import json, sys
events = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ok = len(events) == 1 and events[0]["source"] == "tidemark" \
    and events[0]["detail-type"] == "Alert State Change" \
    and events[0]["detail"]["change"] == "opened" and events[0]["detail"]["deviceId"] == "sensor_02"
print(f"  -> {len(events)} event(s): {[e['detail'].get('change') for e in events]}", file=sys.stderr)
sys.exit(0 if ok else 1)
EOP
say "ok: AlertFunction's event reached the local PutEvents endpoint"
invoke AlertFunction "$EVENTS/ddb-stream-alert-opened.json" "$NO_FAILURES" "the same record again"
[[ "$(grep -c . "$EVENTS_FILE")" == 1 ]] || die "AlertFunction: a replayed record published again"
say "ok: AlertFunction: a replayed record publishes nothing"
# Devices are registered by the alerts role (it owns the device item), from the readings.
invoke AlertFunction "$EVENTS/ddb-stream-readings.json" "$NO_FAILURES" "readings evaluated, devices registered"
# The watchdog: heartbeats into every shard of the stream (no ingest runs here, so none passes
# and nothing is decided), its report as the result.
invoke WatchdogFunction "$EVENTS/scheduled-watchdog.json" \
  'r["shards"] >= 1 and r["due"] == 0 and r["opened"] == 0' "a heartbeat into every shard, nobody declared offline"
# The exporter: its first run exports the hour due now (empty here) to moto's S3, a manifest
# with it, and reports it.
invoke ExporterFunction "$EVENTS/scheduled-exporter.json" \
  'len(r["exported"]) + len(r["reexported"]) <= 1 and r["behind"] == 0' "a schedule run, nothing left behind"
"$PY" - "http://127.0.0.1:$S3_PORT" "$EXPORT_BUCKET" <<'EOP' || die "ExporterFunction: expected an hour's manifest in the export bucket"
import sys, boto3
s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1",
                  aws_access_key_id="local", aws_secret_access_key="local")
keys = [o["Key"] for o in s3.list_objects_v2(Bucket=sys.argv[2]).get("Contents", [])]
print(f"  -> {len(keys)} object(s), e.g. {keys[:2]}", file=sys.stderr)
sys.exit(0 if any(k.startswith("tidemark/readings/") and k.endswith("/_manifest.json") for k in keys) else 1)
EOP
say "ok: ExporterFunction wrote an hour's partition to moto's S3"
invoke ApiFunction "$EVENTS/apigw-get-device.json" \
  'r["statusCode"] == 200 and json.loads(r["body"])["deviceId"] == "sensor_01"' "200 with the device the alerts role registered"
sam local generate-event apigateway http-api-proxy >"$WORK/generated-http.json"
invoke ApiFunction "$WORK/generated-http.json" \
  'r["statusCode"] == 404 and "error" in json.loads(r["body"])' "a JSON 404 for SAM's sample path"

# sam local start-api, answered by curl.
say "sam local start-api on 127.0.0.1:$SAM_API_PORT"
setsid "$PY" scripts/sam_ready.py local start-api --port "$SAM_API_PORT" --host 127.0.0.1 --warm-containers LAZY \
  "${SAM_ARGS[@]}" </dev/null >"$WORK/start-api.log" 2>&1 &
api_pid=$!
CLEANUP+=("kill -- -$api_pid 2>/dev/null; sleep 1; kill -9 -- -$api_pid 2>/dev/null")
for _ in $(seq 1 120); do
  (exec 3<>"/dev/tcp/127.0.0.1/$SAM_API_PORT") 2>/dev/null && break
  kill -0 "$api_pid" 2>/dev/null || { cat "$WORK/start-api.log" >&2; die "sam local start-api exited"; }
  sleep 0.5
done

BASE="http://127.0.0.1:$SAM_API_PORT"
# GET/PUT one URL and check status and body (a Python expression over `b`, the parsed body).
http() {
  local method="$1" path="$2" want="$3" check="$4" what="$5" data="${6:-}" code
  code="$(curl -sS -o "$WORK/http.body" -w '%{http_code}' -X "$method" \
    ${data:+-H 'content-type: application/json' --data "$data"} "$BASE$path")" \
    || die "curl $method $path failed"
  "$PY" - "$WORK/http.body" "$check" <<'EOP' && [[ "$code" == "$want" ]] \
    || { echo "  HTTP $code: $(head -c 400 "$WORK/http.body")" >&2; tail -20 "$WORK/start-api.log" >&2; die "$method $path: expected $want and $what"; }
import json, sys
b = json.load(open(sys.argv[1]))
sys.exit(0 if eval(sys.argv[2]) else 1)
EOP
  say "ok: $method $path -> $code, $what"
}

from="$(date -u -d '-2 hours' +%Y-%m-%dT%H:%M:%SZ)"
http GET "/devices/sensor_01/readings?from=$from" 200 \
  'len(b["items"]) == 2 and b["items"][0]["temperature"] == 22.4' "both readings of sensor_01"
http GET "/devices/sensor_02/readings/latest" 200 'b["temperature"] == 31.2' "the newest reading of sensor_02"
http GET "/devices/sensor_01/aggregates?period=hourly&from=$from" 200 \
  'sum(i["metrics"]["temperature"]["count"] for i in b["items"]) == 2' "hourly rollups counting each reading once"
http GET "/groups/series?tag=site:A&metric=temperature&from=$from&to=$(date -u +%Y-%m-%dT%H:%M:%SZ)&resolution=1h" 200 \
  'b["items"] == [] and b["cursor"] is None' "an empty group series (no device at site:A)"
http GET "/groups/series?metric=temperature&from=$from&to=$from" 400 '"tag" in json.dumps(b)' \
  "a group series without a tag, a 400 naming it"
http GET "/quarantine" 200 'len(b["items"]) >= 7 and all(i["reason"] for i in b["items"])' \
  "today's bad records, each with a reason"
http PUT "/devices/sensor_09" 201 'b["deviceId"] == "sensor_09"' "the device registered" \
  '{"name":"Dock door","type":"sensor","status":"active"}'
http GET "/devices/sensor_01/readings?limit=abc" 400 '"limit" in b["error"]["message"]' \
  "a JSON error naming the parameter"
http GET "/no/such/route" 404 '"error" in b' "a JSON 404"

say "all checks passed"
