#!/usr/bin/env bash
# Installs Debian's nginx when it is missing. Debian's package is the pin: its version is
# read back from `nginx -v` into every run manifest.
set -euo pipefail
if command -v nginx >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
    echo "nginx: not installed and not root; run: sudo apt-get install -y nginx-light" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends nginx-light || apt-get install -y -qq --no-install-recommends nginx
# Debian starts the packaged service; the study runs its own instances only.
(command -v systemctl >/dev/null && systemctl stop nginx 2>/dev/null) || true
(service nginx stop >/dev/null 2>&1) || true
command -v nginx
