#!/usr/bin/env bash
# Install the LiteLLM proxy for the Sluice study, isolated under CACHE_DIR.
#   install.sh CACHE_DIR [PYTHON]          install (does nothing if already installed)
#   install.sh --check CACHE_DIR [PYTHON]  exit 0 iff installed from the current pins
# Idempotent and cached: the stamp records a fingerprint of the lock file and the Python
# version; a matching stamp means nothing is reinstalled.
set -euo pipefail
NAME=litellm
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CHECK=0
if [[ ${1:-} == --check ]]; then CHECK=1; shift; fi
CACHE=${1:?usage: install.sh [--check] CACHE_DIR [PYTHON]}
PY=${2:-python3}

die() { echo "[$NAME] install FAILED: $*" >&2; exit 1; }
run() { echo "[$NAME] + $*" >&2; "$@" || die "command failed (exit $?): $*"; }

VENV=$CACHE/venv
STAMP=$CACHE/.installed
fingerprint() {
    { cat "$HERE/requirements.txt"; "$PY" -c 'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1
}
WANT=$(fingerprint) || die "cannot run $PY"
if [[ -f $STAMP && $(cat "$STAMP") == "$WANT" && -x $VENV/bin/litellm ]]; then
    [[ $CHECK == 1 ]] || echo "[$NAME] already installed in $CACHE"
    exit 0
fi
[[ $CHECK == 1 ]] && exit 1

START=$(date +%s)
run mkdir -p "$CACHE"
rm -f "$STAMP"
rm -rf "$VENV"
run nice -n 19 "$PY" -m venv "$VENV"
run nice -n 19 "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-input \
    --require-hashes --no-deps -r "$HERE/requirements.txt"
run env LITELLM_LOCAL_MODEL_COST_MAP=True "$VENV/bin/litellm" --version
echo "$WANT" > "$STAMP"
echo "[$NAME] installed in $CACHE in $(( $(date +%s) - START )) s"
