#!/usr/bin/env bash
# Install the LiteLLM proxy for the Sluice study, isolated under CACHE_DIR (scripts/pip-venv.sh).
#   install.sh [--check] CACHE_DIR [PYTHON]
NAME=litellm
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FINGERPRINT_FILES=("$HERE/requirements.txt")
source "$HERE/../../scripts/pip-venv.sh"
installed() { [[ -x $VENV/bin/litellm ]]; }
post_install() { run env LITELLM_LOCAL_MODEL_COST_MAP=True "$VENV/bin/litellm" --version; }
pip_venv_main "$@"
