# Two commands do all set-up on a fresh machine: `make run` and `make test`.
# The venv's interpreter: Debian's CPython 3.11 when the machine has it, else python3. Debian
# builds it as one static executable with profile-guided and link-time optimization; python3 on
# this project's machines is pyenv's default build of 3.11 (libpython as a shared library, no
# PGO), which runs the broker's request path with about 15% more CPU (bench/README.md,
# "Interpreter"). `make PYTHON=...` chooses another; `make python` prints the choice.
FAST_PYTHON := /usr/bin/python3.11
ifeq ($(origin PYTHON), undefined)
PYTHON := $(shell $(FAST_PYTHON) -c 'import ensurepip, venv' >/dev/null 2>&1 && echo $(FAST_PYTHON) || echo python3)
endif
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed
# `make run HOST=0.0.0.0 PORT=19092 DATA_DIR=/var/lib/minibroker ARGS="--metrics-port 9308"`
HOST ?= 127.0.0.1
PORT ?= 9092
DATA_DIR ?= ./data
ARGS ?=
TEST_STAMP := $(VENV)/.installed-test

.PHONY: python run test test-reference test-fast test-programs lint docs bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PIP) install --quiet -e .
	touch $@

$(TEST_STAMP): pyproject.toml | $(PY)
	$(PIP) install --quiet -e '.[test]'
	touch $@

python:
	@echo $(PYTHON)

run: $(STAMP)
	$(VENV)/bin/minibroker serve --host $(HOST) --port $(PORT) --data-dir $(DATA_DIR) $(ARGS)

# The suite waits on brokers, clients and Spark more than it computes: worker processes
# (pytest-xdist, one per core, at most four) overlap those waits. --dist loadgroup: the tests of an
# xdist_group run on one worker, so one reference Kafka serves them: "kafka_ref" (the one-node
# Kafka and the tools' own) and "kafka_three" (the three-node cluster) run side by side, each
# started first as the largest units of work (tests/kafka_ref/fixtures.py).
PYTEST_WORKERS := -n auto --maxprocesses=4 --dist loadgroup

# The programs the tests run that pip does not install (kcat, a JDK, Maven, Node and npm), from
# Debian's packages when missing and make runs as root; otherwise one line says what to install
# (tests/system_programs.sh). Kafka's jars (tests/kafka_ref/fetch.sh) and the Node packages
# (npm ci) are fetched by the tests that use them.
test-programs:
	@bash tests/system_programs.sh

# `make test`: everything but the suites that run against a reference Kafka (a JVM Kafka started
# by the tests: tests/kafka_ref/fixtures.py marks them `reference`). `make test-reference` runs
# those; CI (.ci/run) runs both, one after the other.
test: $(TEST_STAMP) test-programs
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(PY) -m pytest $(PYTEST_WORKERS) -m "not reference"

test-reference: $(TEST_STAMP) test-programs
	$(PY) -m pytest $(PYTEST_WORKERS) -m reference

test-fast: $(TEST_STAMP) test-programs
	$(PY) -m pytest $(PYTEST_WORKERS) -m "not slow and not reference"

lint: $(TEST_STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy

# docs/configuration.md from the broker's config tables (a test fails when it is stale).
docs: $(STAMP)
	$(PY) -m broker.config.reference

bench: $(TEST_STAMP)
	$(PY) bench/produce.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
