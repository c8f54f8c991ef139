# The two commands: `make run` starts everything on embedded defaults, `make test` runs the whole suite.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/controlplane
TEST_REDIS_URL ?= redis://127.0.0.1:6379/15
CHROMIUM ?= /usr/bin/chromium
# Tests and benchmarks run on Postgres, where the embedded key is refused: they get a key of their own unless the
# environment gives one (never a production key: nothing they sign outlives the run).
TEST_SECRET_KEY := test-only-key-never-used-in-production
lint test suite test-quick bench: export DJANGO_SECRET_KEY ?= $(TEST_SECRET_KEY)

.PHONY: run test suite test-quick lint bench install install-dev system-packages clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Python writes a module's bytecode the first time a process imports it, and every later process reads it, unless
# PYTHONDONTWRITEBYTECODE is set (some images set it): then every process compiles every module it imports again,
# 2.0 of a control-plane process's 3.3 s of start-up CPU (daphne, manage.py, Celery) and ~11 of the 20 s a vLLM
# process spends importing vLLM (three processes per engine). Caches go to __pycache__ (ignored by git).
unexport PYTHONDONTWRITEBYTECODE

# --no-compile: Python compiles a module the first time it is imported; compiling every installed file up front cost
# ~18 s of CPU for .venv (~48 s for .venv-vllm) that the suite's first minutes need on a 2-core machine.
$(VENV)/.installed: requirements.txt requirements-engine.txt | $(BIN)/python
	$(BIN)/pip install --quiet --no-compile -r requirements.txt
	touch $@

$(VENV)/.installed-dev: requirements-dev.txt $(VENV)/.installed
	$(BIN)/pip install --quiet --no-compile -r requirements-dev.txt
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

run: install
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py seed_demo
	$(BIN)/python manage.py collectstatic --noinput -v0
	./scripts/run.sh

# Debian's Chromium drives the browser tests (Playwright's own browser download cannot work offline);
# promtool (package prometheus) checks every /metrics exposition; Noto CJK renders the Chinese in screenshots.
system-packages:
	@if ! test -x $(CHROMIUM) || ! command -v promtool >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium prometheus >/dev/null; fi
	@fc-list 2>/dev/null | grep -q CJK || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-noto-cjk >/dev/null 2>&1 \
	  || echo "fonts-noto-cjk could not be installed: Chinese text in screenshots will show as boxes (tests are unaffected)"
	@test -x $(CHROMIUM) || (echo "Chromium is missing at $(CHROMIUM); install Debian's chromium package" && exit 1)

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@# The layers: no import cycle (function-level imports count), lib imports no app (docs/architecture.md, Layers).
	$(BIN)/python scripts/check_imports.py
	$(BIN)/python manage.py check
	$(BIN)/python manage.py makemigrations --check --dry-run
	@# The OpenAPI description, warnings as errors: an undocumented view or field fails here (docs/api.md).
	@mkdir -p test-artifacts
	$(BIN)/python manage.py spectacular --validate --fail-on-warn --file test-artifacts/openapi.yaml

# The suite runs on parallel workers (pytest-xdist), each with its own test database, Redis database and ports
# (tests/workers.py); a test file stays on one worker, so module fixtures are shared as written, and the vLLM tests
# run one after another on one worker (tests/conftest.py). docs/testing.md.
TEST_WORKERS ?= 2
TEST_ENV = DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) CELERY_TASK_ALWAYS_EAGER=1 CHROMIUM=$(CHROMIUM)
PYTEST = $(BIN)/python -m pytest -p tests.workers -p tests.timeline -p no:cacheprovider
# When this make started: `make test` prints its own total, install and lint included.
STARTED_AT := $(shell date +%s)

# The vLLM environment (about 2 minutes the first time) installs in the background while the control plane's installs,
# lint runs and the suite starts: the vLLM tests wait for it (VLLM_ENV_STATUS, tests/engine_node/conftest.py). Lint
# runs beside the suite; either failing fails `make test`, which prints its own total at the end.
test:
	@mkdir -p test-artifacts && rm -f test-artifacts/vllm-env.status
	@( $(MAKE) --no-print-directory vllm-env > test-artifacts/vllm-env.log 2>&1; echo $$? > test-artifacts/vllm-env.status ) &
	@$(MAKE) --no-print-directory -j3 lint system-packages suite; status=$$?; \
	while [ ! -s test-artifacts/vllm-env.status ]; do sleep 1; done; \
	if [ "$$(cat test-artifacts/vllm-env.status)" != 0 ]; then tail -30 test-artifacts/vllm-env.log; status=1; fi; \
	echo "make test: $$(( $$(date +%s) - $(STARTED_AT) )) s in all (install, lint and the suite), exit $$status"; \
	exit $$status

# pytest exits 5 when it collected nothing: an empty run fails instead of passing; a skipped test fails it too
# (CONTROLPLANE_TEST_NO_SKIP: a real part missing is a failure, never a pass). The 25 slowest tests are listed at
# the end and every test's time is in test-artifacts/junit.xml: the suite must stay under 20 minutes
# (docs/testing.md).
suite: install-dev
	@mkdir -p test-artifacts && rm -f test-artifacts/timeline-*.jsonl
	$(TEST_ENV) VLLM_ENV_STATUS=$(CURDIR)/test-artifacts/vllm-env.status CONTROLPLANE_TEST_NO_SKIP=1 \
	  $(PYTEST) -n $(TEST_WORKERS) --dist loadgroup --durations=25 --junitxml=test-artifacts/junit.xml tests; \
	status=$$?; if [ $$status -eq 5 ]; then echo "no tests were collected" >&2; exit 1; fi; exit $$status

# The inner loop: every test that starts no process, browser or engine (a test that tries fails, naming the marker
# it needs). Postgres and Redis are still the real ones.
test-quick: install-dev
	CONTROLPLANE_TEST_TIER=quick $(TEST_ENV) $(PYTEST) -n 2 --dist loadgroup -q \
	  -m "not fleet and not browser and not vllm" tests; \
	status=$$?; echo "make test-quick: $$(( $$(date +%s) - $(STARTED_AT) )) s"; \
	if [ $$status -eq 5 ]; then echo "no tests were collected" >&2; exit 1; fi; exit $$status

bench: install-dev
	$(BIN)/python bench/run.py
	$(BIN)/python bench/rollout_fanout.py
	$(BIN)/python bench/rollout_fanout.py --processes 2 --nodes 1,1000 --connect-per-s 100
	$(BIN)/python bench/metrics_freshness.py --saturate-core
	$(BIN)/python bench/alert_evaluation.py
	$(BIN)/python bench/policy_hostile.py
	$(BIN)/python bench/gateway.py
	$(BIN)/python bench/intent_quality.py
	$(BIN)/python bench/simulator_profile.py
	$(BIN)/python bench/replay.py
	$(BIN)/python bench/log_analysis.py
	$(BIN)/python bench/suggestions.py
	$(BIN)/python bench/replay_comparison.py
	$(BIN)/python bench/impact_conclusions.py
	$(BIN)/python bench/tuning_sampler.py
	$(BIN)/python bench/tuning.py
	$(BIN)/python bench/simulator_timeline.py
	$(BIN)/python bench/suite_measurements.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) var staticfiles test-artifacts

# Last, so that a bare `make` does not build the vLLM environment.
include mk/vllm.mk
