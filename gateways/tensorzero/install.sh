#!/usr/bin/env bash
# Install the TensorZero gateway (the PyPI wheel) and build its bind-port shim, isolated under
# CACHE_DIR (scripts/pip-venv.sh). The shim's source is part of the fingerprint.
#   install.sh [--check] CACHE_DIR [PYTHON]
NAME=tensorzero
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FINGERPRINT_FILES=("$HERE/requirements.txt" "$HERE/bindport.c")
source "$HERE/../../scripts/pip-venv.sh"
installed() { [[ -x $VENV/bin/python && -f $CACHE/bindport.so ]]; }
post_install() {
    run nice -n 19 gcc -O2 -shared -fPIC -o "$CACHE/bindport.so" "$HERE/bindport.c" -ldl
    run "$VENV/bin/python" -c "import tensorzero"
}
pip_venv_main "$@"
