#!/usr/bin/env bash
# `make test`: format, lint, then every test against the local services. Services this
# script starts, it stops; services already running (say, `make run`) are reused and left up.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Each step says how far into the run it starts, so a slow step shows in CI's log.
step() { printf '\n== %s (at %d s)\n' "$*" "$SECONDS"; }

step "format (cargo fmt --check)"
cargo fmt --all -- --check

step "lint (cargo clippy, warnings denied)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "local services"
status="$(scripts/services.sh status)"
stopped="$(sed -n 's/^\([a-z0-9-]*\): stopped$/\1/p' <<<"$status" | tr '\n' ' ')"
# The devstack's and the API's tests run beside the other packages' against a DynamoDB Local of
# their own (scripts/test-packages.py says why), started here and stopped at the end.
BESIDE_DDB_PORT="${TIDEMARK_BESIDE_DYNAMODB_PORT:-8002}"
cleanup() {
  # A deployment build still running (a test failed first) goes with the run.
  if [[ -n "${deployment_pid:-}" ]]; then kill -- "-$deployment_pid" 2>/dev/null || true; fi
  rm -f "${artifacts:-}" "${deployment_log:-}"
  TIDEMARK_DYNAMODB_PORT="$BESIDE_DDB_PORT" scripts/services.sh stop dynamodb-local
  if [[ -n "$stopped" ]]; then scripts/services.sh stop $stopped; fi
}
trap cleanup EXIT
scripts/services.sh start
TIDEMARK_DYNAMODB_PORT="$BESIDE_DDB_PORT" scripts/services.sh start

# The dashboard tests drive a real headless Chromium (crates/devstack/tests/it/local/dashboard.rs and
# dashboard_pages.rs).
step "headless browser (chromium, chromedriver)"
scripts/browser.sh

# The sign-in tests run against a real OpenID Connect provider (crates/devstack/tests/it/local/dashboard_auth.rs).
step "local OpenID provider (oidc-provider)"
scripts/oidc.sh >/dev/null

# Ingest's KPL fixture is written by AWS's own aggregation library, not by our encoder.
step "KPL fixture (aws-kinesis-agg) matches events/kinesis-kpl.json"
scripts/kpl-fixtures.sh --check

# The export's files are read back by DuckDB, a Parquet reader we did not write.
step "Parquet reader (duckdb) for the export's tests"
scripts/duckdb.sh >/dev/null

# The deployment checks (docs/design.md §7): the template lints clean and `sam build` produces
# the six functions' arm64 `bootstrap` binaries exactly as a deploy would. Set
# TIDEMARK_SKIP_SAM_BUILD=1 to skip them (and `sam local`) in a quick local loop.
deployment_build() {
  local began=$SECONDS
  echo "== template (sam validate --lint, checkov)"
  make --no-print-directory validate
  echo "== sam build (arm64, release command, optimizer turned down)"
  # Installed once up front: sam builds the functions in parallel, and three concurrent
  # `rustup target add` calls race each other.
  rustup target add aarch64-unknown-linux-gnu >/dev/null 2>&1 || true
  # The same command a deploy runs (`sam build`: cargo-lambda, --release, arm64), with the
  # optimizer turned down through Cargo's own profile overrides: fat LTO and one codegen unit
  # made this step 30 of CI's 78 minutes, and they change no behaviour the checks below look
  # at (docs/decisions/0012-test-build-optimizer.md). `make build` and `make deploy` keep
  # them; TIDEMARK_SAM_RELEASE_PROFILE=1 checks the deployed profile itself.
  if [[ "${TIDEMARK_SAM_RELEASE_PROFILE:-0}" == "1" ]]; then
    make --no-print-directory build
  else
    CARGO_PROFILE_RELEASE_LTO=off CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_OPT_LEVEL=1 \
      make --no-print-directory build
  fi
  # Each function's artifact directory comes from the built template: with SAM's build
  # performance feature (`--beta-features`) the aggregator's two functions share one build,
  # under `AggregatorFunction-Shared`, instead of a copy per function.
  local fn dir bin
  for fn in IngestFunction AggregatorFunction AlertFunction ApiFunction WatchdogFunction ExporterFunction; do
    dir="$("$(scripts/sam-tools.sh)/python" scripts/built_code_uri.py "$fn")"
    bin=".aws-sam/build/$dir/bootstrap"
    [[ -x "$bin" ]] || { echo "sam build produced no $bin for $fn" >&2; return 1; }
    head -c 20 "$bin" | od -An -tx1 | tr -d ' \n' | grep -q '^7f454c46020101.\{22\}b700' \
      || { echo "$bin is not an arm64 ELF executable" >&2; return 1; }
    echo "$fn: $bin: arm64 ELF, $(stat -c %s "$bin") bytes"
  done
  echo "== deployment build done in $((SECONDS - began)) s"
}

step "unit, property and integration tests: build"
# `--tests`: unit and integration tests, not the examples (the benchmarks' drivers), which
# clippy's `--all-targets` above has already type-checked and linking would only cost time.
artifacts="$(mktemp)"
deployment_log="$(mktemp)"
cargo test --workspace --locked --tests --no-run --message-format=json-render-diagnostics >"$artifacts"
cargo test --workspace --locked --doc

# The tests mostly wait (on batching windows, DynamoDB Local, the browser), so the deployment
# build runs beside them at the lowest CPU priority, on the cycles they leave; the tests keep
# the CPU whenever they want it. Its output follows theirs.
deployment_pid=""
if [[ "${TIDEMARK_SKIP_SAM_BUILD:-0}" != "1" ]]; then
  # In a process group of its own, so that a failed run stops all of it (cleanup above).
  export -f deployment_build
  setsid bash -c 'set -euo pipefail; renice -n 19 -p $$ >/dev/null; deployment_build' >"$deployment_log" 2>&1 &
  deployment_pid=$!
fi

step "unit, property and integration tests: run$([[ -n "$deployment_pid" ]] && echo " (the deployment build beside them)")"
# Run package by package; a DynamoDB Local this script started is restarted between packages
# (scripts/test-packages.py says why).
between=()
if [[ " $stopped " == *" dynamodb-local "* ]]; then
  between=(bash -c 'scripts/services.sh stop dynamodb-local >/dev/null && scripts/services.sh start >/dev/null')
fi
scripts/test-packages.py --beside "devstack,api:TIDEMARK_DYNAMODB_PORT=$BESIDE_DDB_PORT" "${between[@]}" <"$artifacts"

if [[ -z "$deployment_pid" ]]; then
  step "template, sam build and sam local skipped (TIDEMARK_SKIP_SAM_BUILD=1)"
else
  step "template and sam build (started beside the tests; waiting for the rest)"
  status=0
  wait "$deployment_pid" || status=$?
  deployment_pid=""
  cat "$deployment_log"
  [[ $status == 0 ]] || { echo "the deployment build failed" >&2; exit "$status"; }

  # The same build under `sam local invoke` and `sam local start-api`, in Docker (arm64
  # emulated), against DynamoDB Local, every output checked (scripts/sam-local.sh).
  step "sam local invoke and start-api (make sam-local without the rebuild)"
  scripts/sam-local.sh
fi
step "done"
