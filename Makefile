# Sherdlock: `make run` serves everything, `make test` runs every test. Both set themselves up.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: run test test-slow lint bench bench-admin superuser seed clean help browser pgbouncer

help:
	@echo "make run        serve web + Celery worker + beat (embedded PostgreSQL and broker by default)"
	@echo "make test       install and run the whole test suite (short stress variants)"
	@echo "make test-slow  the long stress variants only"
	@echo "make bench      benchmarks with baselines; report under bench/results/"
	@echo "make bench-admin  time every admin page at 1M tokens and 100k locks"
	@echo "make superuser  create an operator login for the admin"
	@echo "make seed       load demo tokens (10 wallets x 1000 tokens)"
	@echo "make browser    install Debian's chromium for the browser tests (apt-get)"
	@echo "make pgbouncer  install Debian's pgbouncer for the connection-pooling tests (apt-get)"

# The API's client is a distribution of its own (client/), installed beside the server for the
# tests and the benchmark.
$(STAMP): pyproject.toml client/pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required (set PYTHON=python3.11)")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]' -e ./client
	touch $(STAMP)

# The browser tests drive Debian's Chromium (Playwright's own browser download is not used).
CHROMIUM := /usr/bin/chromium

browser: $(CHROMIUM)

# $(call apt-install,PROGRAM,PACKAGE): install Debian's PACKAGE as root, or through sudo.
define apt-install
@if [ "$$(id -u)" = 0 ]; then sudo=; \
elif command -v sudo >/dev/null 2>&1; then sudo=sudo; \
else echo "$(1) is missing and installing it needs root: apt-get install $(2)" >&2; exit 1; fi; \
$$sudo apt-get update -q && \
$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(2)
endef

$(CHROMIUM):
	$(call apt-install,$(CHROMIUM),chromium)

# The pooling tests and benchmark points put Debian's PgBouncer in front of PostgreSQL.
PGBOUNCER := /usr/sbin/pgbouncer

pgbouncer: $(PGBOUNCER)

$(PGBOUNCER):
	$(call apt-install,$(PGBOUNCER),pgbouncer)

run: $(STAMP)
	$(PY) -m config.serve

# Every strategy on the same data in one run: `make bench BENCH_ARGS="--duration 5"`,
# `make bench BENCH_ARGS="--check bench/results/baseline.json"`; see `python -m bench --help`.
BENCH_STAMP := $(VENV)/.bench-installed
BENCH_ARGS ?=

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e '.[bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP) pgbouncer
	$(PY) -m bench $(BENCH_ARGS)

# Server time and queries of every admin page at scale: `make bench-admin BENCH_ARGS=--reuse`.
bench-admin: $(STAMP)
	$(PY) -m bench.admin_pages $(BENCH_ARGS)

# The core and the client are typed strictly; the apps (and the tests' worker programs) with the
# Django and DRF plugins, not strictly ([tool.mypy] in pyproject.toml).
MYPY_STRICT := sherdlock/ client/sherdlock_client/
MYPY_APPS := locks tokens clients common config tests/workers

# Two workers: the end-to-end tests one after another on one of them, the benchmark harness's and
# the release test on the other, then the unit and integration tests on whichever is free
# (tests/helpers/scheduling.py). PYTEST_WORKERS=0: one process.
PYTEST_WORKERS ?= 2

test: $(STAMP) browser pgbouncer
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/codespell
	$(VENV)/bin/lint-imports
	$(PY) -m mypy --strict $(MYPY_STRICT)
	$(PY) -m mypy $(MYPY_APPS)
	$(PY) -m pytest --numprocesses $(PYTEST_WORKERS) --dist load $(PYTEST_ARGS)

test-slow: $(STAMP) pgbouncer
	$(PY) -m pytest -m slow $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/codespell
	$(VENV)/bin/lint-imports
	$(PY) -m mypy --strict $(MYPY_STRICT)
	$(PY) -m mypy $(MYPY_APPS)

# Both migrate first: on a fresh database (after `make test`, say) there are no tables yet.
superuser: $(STAMP)
	$(PY) manage.py migrate --verbosity 0
	$(PY) manage.py createsuperuser

seed: $(STAMP)
	$(PY) manage.py migrate --verbosity 0
	$(PY) manage.py seed_tokens --wallets 10 --tokens-per-wallet 1000

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis .mypy_cache .import_linter_cache .grimp_cache
