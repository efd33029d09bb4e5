# The two quickstart commands: `make run` (app with demo data on SQLite) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
FLASK := $(BIN)/flask --app app
HOST ?= 127.0.0.1
PORT ?= 5000
# Some shells set PYTHONDONTWRITEBYTECODE; without cached bytecode every test process (and
# every app process a test starts) compiles the app and rewrites the tests' asserts anew.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test test-fast lint install install-dev browser bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Each install runs again only when pyproject.toml changed since (a stamp in the venv), so
# repeated and side-by-side `make test`s do not reinstall into one venv at once.
install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@ $(VENV)/.installed

## Set up, migrate, load demo data and serve on http://127.0.0.1:5000
run: install
	$(FLASK) db upgrade
	$(FLASK) seed-demo
	$(FLASK) run --host $(HOST) --port $(PORT)

## Set up and run the whole test suite (SQLite unless DATABASE_URL is set) on PYTEST_WORKERS
## processes (2; 0 runs it in this one), each test file on one so its module fixtures start once
PYTEST_WORKERS ?= 2
## (TIERS narrows it to a marker expression, for example TIERS="not browser")
PYTEST_ARGS = -q $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile)
test: install-dev browser
	$(BIN)/pytest $(PYTEST_ARGS) $(if $(TIERS),-m "$(TIERS)")

## The suite without its slow tiers (browser, instances, realtime): for the edit-test loop
test-fast: install-dev
	$(BIN)/pytest $(PYTEST_ARGS) -m "not browser and not instances and not realtime"

## Debian's Chromium for the browser tests (never a downloaded browser build)
browser:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

bench: install-dev
	$(BIN)/python bench/records_bench.py
