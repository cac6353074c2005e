#!/usr/bin/env bash
# Regenerates (or, with --check, verifies) events/kinesis-kpl.json with aws-kinesis-agg, AWS's
# KPL aggregation library from PyPI, installed into .venv/kpl (git-ignored) when missing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv/kpl"
AGG_VERSION="1.2.3"
mkdir -p "$ROOT/.venv"
exec 9>"$ROOT/.venv/kpl.lock"
flock 9
if ! "$VENV/bin/python" -c "import aws_kinesis_agg" >/dev/null 2>&1; then
  echo "kpl-fixtures: installing aws-kinesis-agg $AGG_VERSION into $VENV" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "aws-kinesis-agg==$AGG_VERSION" "six==1.17.0" >&2
fi
exec "$VENV/bin/python" "$ROOT/scripts/kpl_fixtures.py" "$@"
