#!/usr/bin/env bash
# Prints the Python interpreter of a venv holding DuckDB (from PyPI, into .venv/duckdb,
# git-ignored; installed when missing): the Parquet reader the export's tests read the
# exported files back with, so our files are checked by a reader we did not write.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv/duckdb"
DUCKDB_VERSION="1.4.3"
mkdir -p "$ROOT/.venv"
exec 9>"$ROOT/.venv/duckdb.lock"
flock 9
if ! "$VENV/bin/python" -c "import duckdb" >/dev/null 2>&1; then
  echo "duckdb: installing duckdb $DUCKDB_VERSION into $VENV" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "duckdb==$DUCKDB_VERSION" >&2
fi
echo "$VENV/bin/python"
