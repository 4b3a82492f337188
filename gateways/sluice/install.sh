#!/usr/bin/env bash
# Install Sluice for the study as an operator installs it: its package (this folder, the Cython
# build included) pip-installed into a venv under CACHE_DIR (scripts/pip-venv.sh). The study
# measures the compiled build, so an install that could not compile fails.
#   install.sh [--check] CACHE_DIR [PYTHON]
NAME=sluice
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# every file the package is built from: a change to any of them installs it again
mapfile -t FINGERPRINT_FILES < <(cd "$HERE" && find pyproject.toml setup.py MANIFEST.in build.py sluice \
    -type f \( -name '*.py' -o -name '*.pxd' -o -name '*.pyx' -o -name '*.toml' -o -name '*.in' \) \
    | LC_ALL=C sort | sed "s|^|$HERE/|")
source "$HERE/../../scripts/pip-venv.sh"
# the pins are the package's own (pyproject.toml); a local folder has no hash to check
pip_install() { run nice -n 19 "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-input "$HERE"; }
installed() { [[ -x $VENV/bin/sluice ]]; }
post_install() {
    local version
    version=$(cd / && env -u PYTHONPATH "$VENV/bin/sluice" --version) || die "$VENV/bin/sluice --version failed"
    echo "[$NAME] $version" >&2
    [[ $version == *" compiled" ]] || die "$version: built without its compiled modules (no C compiler?); the study measures the compiled build"
}
pip_venv_main "$@"
