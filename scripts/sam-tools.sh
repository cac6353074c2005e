#!/usr/bin/env bash
# Ensures AWS SAM CLI and cargo-lambda (with zig, for cross-compiling to arm64), and checkov,
# in a git-ignored virtual environment, .venv/, from PyPI. Prints the venv's bin directory.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TIDEMARK_VENV:-$ROOT/.venv}"
SAM_VERSION="1.170.0"
CARGO_LAMBDA_VERSION="1.9.2"
CHECKOV_VERSION="3.3.30"

command -v python3 >/dev/null 2>&1 || { echo "sam-tools: Python 3.9 or newer is required (python3 not found)" >&2; exit 1; }
if [[ ! -x "$VENV/bin/sam" || ! -x "$VENV/bin/cargo-lambda" ]]; then
  echo "sam-tools: installing aws-sam-cli $SAM_VERSION and cargo-lambda $CARGO_LAMBDA_VERSION into $VENV" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check \
    "aws-sam-cli==$SAM_VERSION" "cargo-lambda==$CARGO_LAMBDA_VERSION" >&2
fi
# checkov (the template's security scan) in a venv of its own inside .venv/: its pinned
# dependencies and SAM's do not agree.
if [[ ! -x "$VENV/checkov/bin/checkov" ]]; then
  echo "sam-tools: installing checkov $CHECKOV_VERSION into $VENV/checkov" >&2
  python3 -m venv "$VENV/checkov"
  "$VENV/checkov/bin/pip" install --quiet --disable-pip-version-check "checkov==$CHECKOV_VERSION" >&2
fi
echo "$VENV/bin"
