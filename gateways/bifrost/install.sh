#!/usr/bin/env bash
# Build Bifrost's HTTP gateway for the Sluice study with the machine's Go toolchain and the
# Go module proxy (`go install MODULE@VERSION`, version pinned in module.txt) into CACHE_DIR/bin.
#   install.sh CACHE_DIR          install (does nothing if already built from the same pin)
#   install.sh --check CACHE_DIR  exit 0 iff built from the current pin
set -euo pipefail
NAME=bifrost
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CHECK=0
if [[ ${1:-} == --check ]]; then CHECK=1; shift; fi
CACHE=${1:?usage: install.sh [--check] CACHE_DIR}

die() { echo "[$NAME] install FAILED: $*" >&2; exit 1; }
run() { echo "[$NAME] + $*" >&2; "$@" || die "command failed (exit $?): $*"; }

MODULE=$(tr -d '[:space:]' < "$HERE/module.txt")
BIN=$CACHE/bin/bifrost-http
STAMP=$CACHE/.installed
WANT=$({ echo "$MODULE"; go version; } | sha256sum | cut -d' ' -f1) || die "cannot run go"
if [[ -f $STAMP && $(cat "$STAMP") == "$WANT" && -x $BIN ]]; then
    [[ $CHECK == 1 ]] || echo "[$NAME] already installed in $CACHE"
    exit 0
fi
[[ $CHECK == 1 ]] && exit 1

START=$(date +%s)
run mkdir -p "$CACHE/bin"
rm -f "$STAMP" "$BIN"
# Build on one or two cores at low priority: the machine is shared.
run env GOBIN="$CACHE/bin" GOMAXPROCS=2 GOFLAGS="-p=1 -buildvcs=false" nice -n 19 go install "$MODULE"
[[ -x $BIN ]] || die "go install succeeded but $BIN is missing"
echo "$WANT" > "$STAMP"
echo "[$NAME] installed in $CACHE in $(( $(date +%s) - START )) s"
