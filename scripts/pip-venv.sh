# Sourced by the install.sh of each pip-installed system: an isolated venv under CACHE_DIR with
# every package of requirements.txt installed --require-hashes, and a stamp (a fingerprint of
# the pins and the Python) so that a second run installs nothing.
#
# The caller sets NAME, HERE and FINGERPRINT_FILES, defines installed() (is the install whole?)
# and post_install() (verify it, build extras), may define its own pip_install() (what goes into
# the venv), then calls: pip_venv_main "$@"
#   install.sh CACHE_DIR [PYTHON]          install (does nothing if already installed)
#   install.sh --check CACHE_DIR [PYTHON]  exit 0 iff installed from the current pins
set -euo pipefail

die() { echo "[$NAME] install FAILED: $*" >&2; exit 1; }
run() { echo "[$NAME] + $*" >&2; "$@" || die "command failed (exit $?): $*"; }

# What goes into the venv: requirements.txt, every package pinned by its hash.
pip_install() {
    run nice -n 19 "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-input \
        --require-hashes --no-deps -r "$HERE/requirements.txt"
}

pip_venv_main() {
    local check=0
    if [[ ${1:-} == --check ]]; then check=1; shift; fi
    CACHE=${1:?usage: install.sh [--check] CACHE_DIR [PYTHON]}
    PY=${2:-python3}
    VENV=$CACHE/venv
    local stamp=$CACHE/.installed want start
    # Comment lines do not change what is installed, so they are left out of the fingerprint.
    want=$({ grep -hv '^#' "${FINGERPRINT_FILES[@]}"; "$PY" -c 'import sys; print(sys.version)'; } \
           | sha256sum | cut -d' ' -f1) || die "cannot run $PY"
    if [[ -f $stamp && $(cat "$stamp") == "$want" ]] && installed; then
        [[ $check == 1 ]] || echo "[$NAME] already installed in $CACHE"
        exit 0
    fi
    [[ $check == 1 ]] && exit 1
    start=$(date +%s)
    run mkdir -p "$CACHE"
    rm -f "$stamp"
    rm -rf "$VENV"
    run nice -n 19 "$PY" -m venv "$VENV"
    pip_install
    post_install
    echo "$want" > "$stamp"
    echo "[$NAME] installed in $CACHE in $(( $(date +%s) - start )) s"
}
