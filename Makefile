# make test: create .venv, install the project with its test dependencies and
# the system programs the suite runs (redis-server), then run every test.
# make lint: ruff (lint and format) and mypy --strict over django_rl/.
# make bench: the benchmarks (docs/performance.md), in their own .venv-bench
# with the peers installed; they start and stop their own redis-server,
# gunicorn and wrk.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
SYSTEM_PACKAGES := redis-server=redis-server
BENCH_VENV := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed-stamp
BENCH_SYSTEM_PACKAGES := $(SYSTEM_PACKAGES) wrk=wrk

.PHONY: test lint bench venv system-packages clean

test: venv system-packages
	$(BIN)/python -m pytest $(PYTEST_ARGS)

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,lint]'
	touch $(STAMP)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy django_rl

system-packages:
	scripts/ensure-system-packages.sh $(SYSTEM_PACKAGES)

bench: $(BENCH_STAMP)
	scripts/ensure-system-packages.sh $(BENCH_SYSTEM_PACKAGES)
	$(BENCH_VENV)/bin/python -m bench.decisions $(BENCH_ARGS)
	$(BENCH_VENV)/bin/python -m bench.endtoend $(BENCH_ARGS)

$(BENCH_STAMP): setup.cfg pyproject.toml
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install --quiet -e '.[bench]'
	touch $(BENCH_STAMP)

clean:
	rm -rf $(VENV) $(BENCH_VENV) build dist *.egg-info
