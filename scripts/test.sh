#!/usr/bin/env bash
# `make test`: format, lint, then every test against the local services. Services this
# script starts, it stops; services already running (say, `make run`) are reused and left up.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n== %s\n' "$*"; }

step "format (cargo fmt --check)"
cargo fmt --all -- --check

step "lint (cargo clippy, warnings denied)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "local services"
status="$(scripts/services.sh status)"
stopped="$(sed -n 's/^\([a-z-]*\): stopped$/\1/p' <<<"$status" | tr '\n' ' ')"
if [[ -n "$stopped" ]]; then
  trap "scripts/services.sh stop $stopped" EXIT
fi
scripts/services.sh start

step "unit, property and integration tests"
cargo test --workspace --locked
