# make test: create .venv, install the project with its test dependencies and
# the system programs the suite runs (redis-server, chromium, faketime, openssl), then run every test.
# make test-servers: the acceptance suites on Redis 6.2 and 8.0, Valkey 9, as
# the least-privilege ACL user, over TLS, and with CLOCK "app" (Redis 7.0 is
# make test's); fetches the servers it needs into .servers/ first.
# make lint: ruff (lint and format) and mypy --strict over django_rl/.
# make matrix: the test suite under every Django x Python pair of tox.ini.
# make demo: the example site on 127.0.0.1:8000 (DEMO_PORT=8001 for another port) with its
# own Redis (or REDIS_URL), in its own small .venv-demo (django_rl with DRF, drf-spectacular and
# prometheus_client, nothing of the test or lint toolchains).
# make bench-admin: time the admin's live counters with 1,000,000 keys in Redis.
# make bench-scaling: commands, bytes and server CPU per decision (docs/scaling.md).
# make screenshot: retake docs/admin-live-counters.png and docs/admin-charts.png with the browser test.
# make bench: the benchmarks (docs/performance.md; bench.dropin_drf: the DRF
# drop-in against DRF's own throttles; bench.stacked: several policies on one
# request against DRF's and django-ratelimit's stacked limits; bench.stacked_cluster:
# the same on a Redis Cluster, one slot and three, refunds counted), in their own .venv-bench
# with the peers installed; they start and stop their own redis-server,
# gunicorn and wrk.
# make bench-compare BEFORE=DIR: bench.decisions and bench.endtoend of the checkout in DIR
# and this one, run by run, one before/after table per bench (BENCH_ARGS=--quick: 2 runs).
# make bench-instructions [BEFORE=DIR]: CPU instructions per decision of every django_rl
# row by callgrind (repeatable on a busy machine), and of DIR's checkout beside it.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
SYSTEM_PACKAGES := redis-server=redis-server redis-cli=redis-tools chromium=chromium faketime=faketime openssl=openssl strace=strace
DEMO_VENV := .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.installed-stamp
BENCH_VENV := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed-stamp
BENCH_SYSTEM_PACKAGES := redis-server=redis-server redis-benchmark=redis-tools wrk=wrk

.PHONY: test test-servers lint matrix demo demo-venv bench bench-compare bench-instructions venv system-packages clean bench-admin bench-scaling screenshot

test: venv system-packages
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-servers: venv system-packages
	PYTHON=$(BIN)/python scripts/test-servers.sh

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,lint,matrix]'
	touch $(STAMP)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy django_rl

# The tox matrix (tox.ini): Django 4.2 / 5.2 / 6.x on Python 3.10 to 3.13.
TOX_PARALLEL ?= 2
matrix: venv system-packages
	PATH="$$(scripts/interpreters-path.sh)" $(BIN)/tox run-parallel --parallel $(TOX_PARALLEL) --parallel-no-spinner

# Without REDIS_URL the demo needs redis-server; installing it may fail where
# apt-get cannot run, and then the demo says how to install it. DEMO_PORT, in the
# environment or on the command line (make demo DEMO_PORT=8001), picks the port.
demo: demo-venv
	-@scripts/ensure-system-packages.sh redis-server=redis-server
	$(DEMO_VENV)/bin/python scripts/demo.py

demo-venv: $(DEMO_STAMP)

$(DEMO_STAMP): setup.cfg pyproject.toml
	test -x $(DEMO_VENV)/bin/python || $(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(DEMO_VENV)/bin/python -m pip install --quiet -e '.[drf,prometheus,spectacular]'
	touch $(DEMO_STAMP)

bench-admin: venv system-packages
	$(BIN)/python bench/admin_page.py $(BENCH_ARGS)

bench-scaling: venv system-packages
	scripts/ensure-system-packages.sh redis-benchmark=redis-tools
	$(BIN)/python -m bench.scaling $(BENCH_ARGS)

screenshot: venv system-packages
	DJANGO_RL_SCREENSHOT=docs/admin-live-counters.png \
		$(BIN)/python -m pytest tests/admin/test_admin_browser.py -k screenshot

system-packages:
	scripts/ensure-system-packages.sh $(SYSTEM_PACKAGES)

bench: $(BENCH_STAMP)
	scripts/ensure-system-packages.sh $(BENCH_SYSTEM_PACKAGES)
	$(BENCH_VENV)/bin/python -m bench.decisions $(BENCH_ARGS)
	$(BENCH_VENV)/bin/python -m bench.endtoend $(BENCH_ARGS)
	$(BENCH_VENV)/bin/python -m bench.dropin_ratelimit $(BENCH_ARGS)
	$(BENCH_VENV)/bin/python -m bench.dropin_drf $(BENCH_ARGS)
	$(BENCH_VENV)/bin/python -m bench.stacked $(BENCH_ARGS)
	$(BENCH_VENV)/bin/python -m bench.stacked_cluster $(BENCH_ARGS)

bench-compare: $(BENCH_STAMP)
	@test -n "$(BEFORE)" || { echo "make bench-compare BEFORE=DIR (e.g. git archive <commit> | tar -x -C DIR)"; exit 2; }
	scripts/ensure-system-packages.sh $(BENCH_SYSTEM_PACKAGES)
	$(BENCH_VENV)/bin/python -m bench.compare --before $(BEFORE) $(BENCH_ARGS)

bench-instructions: $(BENCH_STAMP)
	scripts/ensure-system-packages.sh $(BENCH_SYSTEM_PACKAGES) valgrind=valgrind
	$(BENCH_VENV)/bin/python -m bench.instructions $(if $(BEFORE),--before $(BEFORE)) $(BENCH_ARGS)

$(BENCH_STAMP): setup.cfg pyproject.toml
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install --quiet -e '.[bench]'
	touch $(BENCH_STAMP)

clean:
	rm -rf $(VENV) $(DEMO_VENV) $(BENCH_VENV) build dist *.egg-info
