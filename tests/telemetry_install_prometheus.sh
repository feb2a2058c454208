#!/usr/bin/env bash
# Installs Debian's `prometheus` package for tests/test_telemetry_prometheus.py when missing.
# Exits non-zero when it cannot (no root, no apt, no registry): the test then skips.
set -euo pipefail
command -v prometheus >/dev/null 2>&1 && exit 0
command -v apt-get >/dev/null 2>&1 || { echo "no apt-get on this machine" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "installing prometheus needs root" >&2; exit 3; }
# Keep the package's service from starting here: the test runs its own server.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
fi
trap '[ "$made_policy" = 1 ] && rm -f "$policy"' EXIT
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends prometheus >/dev/null 2>&1 || {
  apt-get update -qq >/dev/null 2>&1
  apt-get install -y --no-install-recommends prometheus >/dev/null
}
command -v prometheus >/dev/null
