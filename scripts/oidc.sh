#!/usr/bin/env bash
# The local OpenID Connect provider the dashboard sign-in tests run against: the npm package
# `oidc-provider` at the version scripts/oidc/package-lock.json pins, installed into
# .local/oidc (git-ignored) when missing, as scripts/services.sh installs the emulators.
# Prints the path of the provider script on success; tests start one provider each
# (`node <path>`, configured by OIDC_* variables: see scripts/oidc/provider.mjs).
#
#   scripts/oidc.sh             install when missing, then print the script's path
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOCAL="${TIDEMARK_LOCAL_DIR:-$ROOT/.local}"
SRC="$ROOT/scripts/oidc"
DEST="$LOCAL/oidc"

die() { echo "oidc: $*" >&2; exit 1; }

command -v node >/dev/null 2>&1 || die "Node.js 20 or newer is required (node not found on PATH)"
command -v npm >/dev/null 2>&1 || die "npm is required to install the local OpenID provider"

# Tests in parallel may all ask at once: one installs, the others wait for it.
mkdir -p "$LOCAL"
exec 9>"$LOCAL/oidc.lock"
flock 9

# Reinstalled when the pinned lock changes; the script itself is copied every time, since
# ES modules resolve packages from the script's own directory.
stamp="$(sha256sum "$SRC/package-lock.json" | cut -c1-16)"
if [[ ! -f "$DEST/.installed-$stamp" ]]; then
  echo "oidc: installing oidc-provider into $DEST" >&2
  rm -rf "$DEST"
  mkdir -p "$DEST"
  cp "$SRC/package.json" "$SRC/package-lock.json" "$DEST/"
  (cd "$DEST" && npm ci --silent --no-audit --no-fund >&2) || die "npm ci failed in $DEST"
  touch "$DEST/.installed-$stamp"
fi
cp "$SRC/provider.mjs" "$DEST/provider.mjs.tmp"
mv "$DEST/provider.mjs.tmp" "$DEST/provider.mjs"
echo "$DEST/provider.mjs"
