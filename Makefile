# The two commands a newcomer needs:  make study   and   make test
PYTHON   ?= python3
VENV     := .venv
PY       := $(VENV)/bin/python
PROFILE  ?= standard
GATEWAYS ?=
SET      ?=
STUDY    ?=

.PHONY: study test test-deps report gate setup clean-venv

setup: $(VENV)/.installed

# The study environment, pinned by requirements.lock; rebuilt when the pins change.
$(VENV)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c requirements.lock --config-settings editable_mode=compat -e '.[test]'
	touch $@

## make study [PROFILE=standard] [GATEWAYS=all|direct,nginx,...] [SET="--set runs_per_gateway=1"]
study: setup
	$(PY) -m harness.commands.execute --profile $(PROFILE) $(if $(GATEWAYS),--gateways $(GATEWAYS)) $(SET)

## What the tests start: Debian's nginx and chromium, and every pinned competitor (into .cache/).
## Idempotent: a second run installs nothing.
test-deps: setup
	bash scripts/install-test-deps.sh
	$(PY) -m harness.commands.install all

test: setup test-deps
	$(PY) -m pytest -p no:cacheprovider

## The performance gate (CI runs it after the tests): a `gate` study, its A/A self-check, and
## Sluice's ratios to nginx against baselines/gate.json.
gate: setup
	$(PY) -m harness.checks.gate_run

## make report STUDY=artifacts/<study-id>
report: setup
	@test -n "$(STUDY)" || (echo "usage: make report STUDY=artifacts/<study-id>" >&2; exit 2)
	$(PY) -m report.build $(STUDY)

clean-venv:
	rm -rf $(VENV)
