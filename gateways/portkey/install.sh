#!/usr/bin/env bash
# Install the Portkey AI gateway for the Sluice study, isolated under CACHE_DIR.
#   install.sh CACHE_DIR          install (does nothing if already installed)
#   install.sh --check CACHE_DIR  exit 0 iff installed from the current lock
# package.json + package-lock.json are copied into CACHE_DIR and installed with `npm ci`
# (exact tree from the lock, integrity-checked). Idempotent: a stamp records a
# fingerprint of the lock and the Node version.
set -euo pipefail
NAME=portkey
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CHECK=0
if [[ ${1:-} == --check ]]; then CHECK=1; shift; fi
CACHE=${1:?usage: install.sh [--check] CACHE_DIR}

die() { echo "[$NAME] install FAILED: $*" >&2; exit 1; }
run() { echo "[$NAME] + $*" >&2; "$@" || die "command failed (exit $?): $*"; }

STAMP=$CACHE/.installed
ENTRY=$CACHE/node_modules/@portkey-ai/gateway/build/start-server.js
fingerprint() {
    { cat "$HERE/package.json" "$HERE/package-lock.json"; node --version; } | sha256sum | cut -d' ' -f1
}
WANT=$(fingerprint) || die "cannot run node"
if [[ -f $STAMP && $(cat "$STAMP") == "$WANT" && -f $ENTRY ]]; then
    [[ $CHECK == 1 ]] || echo "[$NAME] already installed in $CACHE"
    exit 0
fi
[[ $CHECK == 1 ]] && exit 1

START=$(date +%s)
run mkdir -p "$CACHE"
rm -f "$STAMP"
rm -rf "$CACHE/node_modules"
run cp "$HERE/package.json" "$HERE/package-lock.json" "$CACHE/"
cd "$CACHE"
run nice -n 19 npm ci --omit=dev --no-audit --no-fund --loglevel=error
[[ -f $ENTRY ]] || die "missing $ENTRY after npm ci"
run node -e "console.log(require('$CACHE/node_modules/@portkey-ai/gateway/package.json').version)"
echo "$WANT" > "$STAMP"
echo "[$NAME] installed in $CACHE in $(( $(date +%s) - START )) s"
