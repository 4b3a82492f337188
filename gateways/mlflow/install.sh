#!/usr/bin/env bash
# Install the MLflow AI gateway for the Sluice study, isolated under CACHE_DIR (scripts/pip-venv.sh).
#   install.sh [--check] CACHE_DIR [PYTHON]
NAME=mlflow
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FINGERPRINT_FILES=("$HERE/requirements.txt")
source "$HERE/../../scripts/pip-venv.sh"
installed() { [[ -x $VENV/bin/mlflow ]]; }
post_install() { run env MLFLOW_DISABLE_TELEMETRY=true DO_NOT_TRACK=true "$VENV/bin/mlflow" --version; }
pip_venv_main "$@"
