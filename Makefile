# The two commands a newcomer needs:  make study   and   make test
PYTHON   ?= python3
VENV     := .venv
PY       := $(VENV)/bin/python
PROFILE  ?= standard
GATEWAYS ?=
SET      ?=
STUDY    ?=

.PHONY: study study-deps publish faults inflight test test-fast test-integration test-deps test-sluice test-sluice-pure sluice-build cc report gate lint typecheck docs setup clean-venv

setup: $(VENV)/.installed

# The study environment, pinned by requirements.lock; rebuilt when the pins change.
$(VENV)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c requirements.lock --config-settings editable_mode=compat -e '.[test]'
	touch $@

## A C compiler for Sluice's compiled hot path (Debian's gcc, when missing and run as root).
cc:
	@command -v gcc >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc; }

## Sluice's compiled hot path in its source folder, for its tests (Cython + gcc, one source with
## the .py modules; idempotent, instant when current). The study installs Sluice as a package
## instead (gateways/sluice/gateway.toml), compiled by the same build. Without a compiler
## Sluice runs its pure-Python modules, and says so.
sluice-build: setup cc
	$(PY) gateways/sluice/build.py

## What the study itself needs from Debian: tcpdump for the wire timing, valgrind and strace for
## the counting lane (without one, its figures are reported missing, with the reason). Idempotent.
study-deps:
	@command -v tcpdump >/dev/null 2>&1 || [ -x /usr/bin/tcpdump ] || { [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends tcpdump; } || echo "tcpdump missing: wire timing will be reported as not captured" >&2
	@{ command -v valgrind && command -v strace; } >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends valgrind strace; } || echo "valgrind or strace missing: the counting lane will report every system as not counted" >&2

## make study [PROFILE=standard] [GATEWAYS=all|direct,nginx,...] [SET="--set runs_per_gateway=1"]
## (no GATEWAYS: the profile's own systems, else every system under gateways/): cleared once, run
## through notebooks/head_to_head.ipynb, which writes the report.
study: setup study-deps cc
	$(PY) -m harness notebook --profile $(PROFILE) $(if $(GATEWAYS),--gateways $(GATEWAYS)) $(SET)

## What the tests start: Debian's nginx and chromium, and every pinned competitor (into .cache/).
## Idempotent: a second run installs nothing.
test-deps: setup cc
	bash scripts/install-test-deps.sh
	$(PY) -m harness install all

## Everything, the real processes included, Sluice's own tests too (what CI runs), and the 25
## slowest tests. On both cores, a test file a worker (its module's fixtures start once): most
## of the integration tier waits on real processes' clocks, not on the CPU.
test: setup test-deps sluice-build
	$(PY) -m pytest -p no:cacheprovider -n 2 --dist loadfile --durations=25

## The unit tests only (no real process: neither tier below; under a minute, on both cores): the
## inner loop.
test-fast: setup sluice-build
	$(PY) -m pytest -p no:cacheprovider -m "not integration and not slow" -n 2

## The integration tier: the real processes at tiny scale, each module marked `integration`,
## without the `slow` ones (`make test` runs those too; `pytest -m slow` alone).
test-integration: setup test-deps sluice-build
	$(PY) -m pytest -p no:cacheprovider -m "integration and not slow" -n 2 --dist loadfile

## What a linter says (ruff: pyflakes, bugbear, imports sorted; [tool.ruff] in pyproject.toml).
lint: setup
	$(PY) -m ruff check .

## The docs (mkdocs.yml, docs/) built into site/ (git-ignored), warnings as errors: a dead link or
## anchor, or a page missing from the navigation, fails. scripts/gen_docs.py writes the pages that
## come from the code; tests/test_docs.py says when one is stale.
docs: setup
	$(PY) -m mkdocs build --strict

## Sluice's package under mypy, strict (gateways/sluice/mypy.ini): the compiled modules carry
## their types in type comments, which Cython does not read.
typecheck: setup
	cd gateways/sluice && $(abspath $(PY)) -m mypy --config-file mypy.ini

## Sluice's own tests, from its folder (gateways/sluice/tests, with its pyproject.toml).
test-sluice: setup sluice-build
	cd gateways/sluice && $(abspath $(PY)) -m pytest -p no:cacheprovider -n 2 --dist loadfile

## Sluice's tests once more on its pure-Python modules (CI runs it after `make test`).
test-sluice-pure: setup
	cd gateways/sluice && SLUICE_PURE_PYTHON=1 $(abspath $(PY)) -m pytest -p no:cacheprovider -n 2 --dist loadfile

## The provider-fault lane: every system in the five core fault scenarios on the same open-loop
## arrivals, configured as its vendor recommends, 3 runs each (notebooks/suites/faults.toml),
## through notebooks/suite.ipynb as `make study` goes through its notebook; it prints its expected
## and its actual duration, and writes the suite's report. make faults SUITE=faults-extra (slow
## tail, resets, stalled streams, mid-stream errors, stream cuts; Retry-After, every deployment
## rate-limited, no response, a non-retriable error, flapping) or SUITE=faults-shipped (every
## system as shipped); an interrupted lane resumes with ID=<its suite id>. RUNS=N: N runs per
## configured system instead of the suite's (a bad value stops it before anything starts).
SUITE ?= faults
ID    ?=
RUNS  ?=
faults: setup study-deps cc
	$(PY) -m harness suite notebooks/suites/$(SUITE).toml --suite-id $${ID:-$(SUITE)-$$(date -u +%Y%m%dT%H%M%SZ)} $(if $(RUNS),--runs-per-gateway '$(RUNS)')

## The in-flight lane: every runnable system holding 1,000 to 10,000 requests open, unary and
## streamed, sized as its vendor documents, 3 runs each (notebooks/suites/inflight.toml), through
## notebooks/suite.ipynb; it prints its expected and its actual duration, and writes the suite's
## report; ID=<suite id> resumes; RUNS=N runs per configured system instead of 3.
inflight: setup study-deps cc
	$(PY) -m harness suite notebooks/suites/inflight.toml --suite-id $${ID:-inflight-$$(date -u +%Y%m%dT%H%M%SZ)} $(if $(RUNS),--runs-per-gateway '$(RUNS)')

## The performance gate (CI runs it after the tests): the base commit's Sluice (from
## baselines/gate/, built in a worktree) counted twice and this tree's once, under Valgrind and
## strace (instructions, allocations, system calls per request decide), then a short timed
## check beside them for what counts cannot see (baselines/README.md). About 6 minutes.
gate: setup cc
	bash scripts/install-test-deps.sh
	$(PY) -m harness gate run

## The study's answer committed in the repository: artifacts/published/ (one self-contained page,
## the tables as Parquet, the manifests, the raw files' SHA-256) from the newest complete standard
## study and fault and in-flight suites, and the README's Results block from it
## (docs/publishing.md). `python -m harness publish --check` says which rows went stale.
publish: setup
	$(PY) -m harness publish

## make report STUDY=artifacts/<study-id>
report: setup
	@test -n "$(STUDY)" || (echo "usage: make report STUDY=artifacts/<study-id>" >&2; exit 2)
	$(PY) -m harness report $(STUDY)

clean-venv:
	rm -rf $(VENV)
