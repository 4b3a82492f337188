#!/usr/bin/env bash
# Debian packages the test suite needs: nginx (the hop system), chromium (the report
# screenshot test), iproute2 (`ip netns`: the multi-host test's hosts), tcpdump (wire
# timing captures), gcc (Sluice's compiled hot path), valgrind and strace (the counting gate:
# instructions and system calls per request). Idempotent: installs
# only what is missing.
set -euo pipefail
missing=()
command -v nginx >/dev/null 2>&1 || missing+=(nginx-light)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
command -v tcpdump >/dev/null 2>&1 || [ -x /usr/bin/tcpdump ] || missing+=(tcpdump)
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
command -v strace >/dev/null 2>&1 || missing+=(strace)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "missing Debian packages: ${missing[*]}; run: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
