#!/usr/bin/env bash
# Makes sure redis-server, redis-cli (which creates the tests' clusters),
# redis-benchmark and openssl (which makes the TLS tests' certificates) are
# on PATH and the plots' font is installed, from Debian's redis-server,
# redis-tools, openssl and fonts-dejavu-core packages when they are missing.
set -euo pipefail
font=/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf
if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 \
  && command -v redis-benchmark >/dev/null 2>&1 && command -v openssl >/dev/null 2>&1 \
  && [ -f "$font" ]; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
echo "installing redis-server, redis-tools, openssl and fonts-dejavu-core from Debian's packages" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server redis-tools openssl fonts-dejavu-core >/dev/null
# The package may start a system-wide service; this project never uses it.
command -v redis-server >/dev/null
