#!/usr/bin/env bash
# The headless browser the dashboard tests drive: Debian's `chromium` and `chromium-driver`
# (WebDriver), installed with apt-get when missing, as scripts/services.sh installs the
# emulators. Prints the chromedriver path on success.
#
#   scripts/browser.sh          install when missing, then print the driver's path
set -euo pipefail

die() { echo "browser: $*" >&2; exit 1; }

have() { command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; }

if ! have; then
  command -v apt-get >/dev/null 2>&1 \
    || die "chromium and chromedriver are missing and apt-get is not available; install them (Debian: chromium, chromium-driver)"
  sudo=()
  if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null 2>&1 || die "installing chromium needs root (or sudo)"
    sudo=(sudo)
  fi
  echo "browser: installing chromium and chromium-driver with apt-get" >&2
  # Another apt run on the machine holds the lock for a while: wait for it, not fail.
  apt_get=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -y -q)
  "${apt_get[@]}" install --no-install-recommends chromium chromium-driver >&2 \
    || { "${apt_get[@]}" update >&2 && "${apt_get[@]}" install --no-install-recommends chromium chromium-driver >&2; } \
    || die "apt-get could not install chromium and chromium-driver"
  have || die "chromium or chromedriver still missing after apt-get"
fi
command -v chromedriver
