# The two commands a newcomer needs:  make study   and   make test
PYTHON   ?= python3
VENV     := .venv
PY       := $(VENV)/bin/python
PROFILE  ?= standard
GATEWAYS ?=
SET      ?=
STUDY    ?=

.PHONY: study study-deps faults inflight test test-fast test-deps test-sluice-pure sluice-build report gate lint setup clean-venv

setup: $(VENV)/.installed

# The study environment, pinned by requirements.lock; rebuilt when the pins change.
$(VENV)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c requirements.lock --config-settings editable_mode=compat -e '.[test]'
	touch $@

## Sluice's compiled hot path (Cython + gcc, one source with the .py modules; idempotent, instant
## when current). Without a compiler Sluice runs its pure-Python modules, and says so.
sluice-build: setup
	@command -v gcc >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc; }
	$(PY) gateways/sluice/build.py

## What the study itself needs from Debian: tcpdump for the wire timing, valgrind and strace for
## the counting lane (without one, its figures are reported missing, with the reason). Idempotent.
study-deps:
	@command -v tcpdump >/dev/null 2>&1 || [ -x /usr/bin/tcpdump ] || { [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends tcpdump; } || echo "tcpdump missing: wire timing will be reported as not captured" >&2
	@{ command -v valgrind && command -v strace; } >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends valgrind strace; } || echo "valgrind or strace missing: the counting lane will report every system as not counted" >&2

## make study [PROFILE=standard] [GATEWAYS=all|direct,nginx,...] [SET="--set runs_per_gateway=1"]
## (no GATEWAYS: the profile's own systems, else every system under gateways/)
study: setup study-deps sluice-build
	$(PY) -m harness notebook --profile $(PROFILE) $(if $(GATEWAYS),--gateways $(GATEWAYS)) $(SET)

## What the tests start: Debian's nginx and chromium, and every pinned competitor (into .cache/).
## Idempotent: a second run installs nothing.
test-deps: setup
	bash scripts/install-test-deps.sh
	$(PY) -m harness install all

## Everything, the real processes included (what CI runs).
test: setup test-deps sluice-build
	$(PY) -m pytest -p no:cacheprovider

## The unit tests only (no real gateways, no Locust; under a minute, on both cores): the inner loop.
test-fast: setup sluice-build
	$(PY) -m pytest -p no:cacheprovider -m "not integration" -n 2

## What a linter says (ruff: pyflakes, bugbear, imports sorted; [tool.ruff] in pyproject.toml).
lint: setup
	$(PY) -m ruff check .

## Sluice's tests once more on its pure-Python modules (CI runs it after `make test`).
test-sluice-pure: setup
	SLUICE_PURE_PYTHON=1 $(PY) -m pytest -p no:cacheprovider tests/sluice

## The provider-fault lane: every system in the five core fault scenarios on the same open-loop
## arrivals, configured as its vendor recommends, 3 runs each (notebooks/suites/faults.toml;
## it prints its expected and its actual duration), then the suite's report. make faults SUITE=faults-extra (slow tail,
## resets, stalled streams, mid-stream errors, stream cuts; Retry-After, every deployment rate-limited,
## no response, a non-retriable error, flapping) or SUITE=faults-shipped (every system as shipped);
## an interrupted lane resumes with ID=<its suite id>.
SUITE ?= faults
ID    ?=
faults: setup study-deps sluice-build
	id=$${ID:-$(SUITE)-$$(date -u +%Y%m%dT%H%M%SZ)} && $(PY) -m harness suite notebooks/suites/$(SUITE).toml \
	  --suite-id $$id && $(PY) -m harness report artifacts/suites/$$id

## The in-flight lane: every runnable system holding 1,000 to 10,000 requests open, unary and
## streamed, sized as its vendor documents, 3 runs each (notebooks/suites/inflight.toml; it prints
## its expected and its actual duration), then the suite's report; ID=<suite id> resumes.
inflight: setup study-deps sluice-build
	id=$${ID:-inflight-$$(date -u +%Y%m%dT%H%M%SZ)} && $(PY) -m harness suite notebooks/suites/inflight.toml \
	  --suite-id $$id && $(PY) -m harness report artifacts/suites/$$id

## The performance gate (CI runs it after the tests): the base commit's Sluice (from
## baselines/gate/, built in a worktree) counted twice and this tree's once, under Valgrind and
## strace (instructions, allocations, system calls per request decide), then a short timed
## check beside them for what counts cannot see (baselines/README.md). About 6 minutes.
gate: setup sluice-build
	bash scripts/install-test-deps.sh
	$(PY) -m harness gate run

## make report STUDY=artifacts/<study-id>
report: setup
	@test -n "$(STUDY)" || (echo "usage: make report STUDY=artifacts/<study-id>" >&2; exit 2)
	$(PY) -m harness report $(STUDY)

clean-venv:
	rm -rf $(VENV)
