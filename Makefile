# The README's commands. Everything runs from a virtualenv this Makefile creates.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export DAGSTER_HOME ?= $(CURDIR)/.dagster_home

.PHONY: install instance system-deps run dev test test-fast screenshots bench verify lint clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/python scripts/fetch_ranks.py data/baselines
	touch $@

# $(DAGSTER_HOME)/dagster.yaml from dagster.yaml; with ALBOR_POSTGRES_URL set, storage in PostgreSQL.
instance: install
	$(BIN)/albor instance

run: instance
	$(BIN)/albor run

dev: instance
	$(BIN)/dagster dev -h 127.0.0.1 -p 3000 -w workspace.yaml

# Debian packages the tests drive for real (command:package), or read (file:package: GLib's
# translated messages are the language filter's multilingual test text), installed when missing.
SYSTEM_DEPS := chromium:chromium pg_ctlcluster:postgresql /usr/share/locale/de/LC_MESSAGES/glib20.mo:libglib2.0-data

system-deps:
	scripts/system-deps $(SYSTEM_DEPS)

# What the tests drive for real beyond the dev extra: the test extra (Ray, an S3 server), a
# torch DataLoader (the CPU build: pip takes the machine's file) and Megatron's HF tokenizer
# wrapper (megatron-core needs torch).
TEST_PACKAGES ?= torch==2.13.0 megatron-core==0.16.1

$(VENV)/.test-packages: $(VENV)/.installed
	$(BIN)/pip install -q -e '.[dev,test]' $(TEST_PACKAGES)
	touch $@

# Two test processes (pytest-xdist): much of the suite's time is spent waiting on `dagster
# dev`'s sensor ticks, server start-ups and subprocess runs. `--dist loadfile` gives each
# process whole test files, so a module's servers start once and its Ray cluster (which
# `ray stop --force` ends) is never shared with another process's tests. Files go out in
# their order (`--no-loadscope-reorder`), so the long `dagster dev` soak starts first
# instead of last.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test: install system-deps $(VENV)/.test-packages
	$(PYTEST)

# The unit tests alone (under two minutes): no whole-graph build, no server, no browser.
FAST := not graph and not server and not e2e and not slow

test-fast: install $(VENV)/.test-packages
	$(PYTEST) -m "$(FAST)"

# The README's UI images, from the browser test (a real run in Debian's Chromium).
screenshots: install system-deps
	ALBOR_SCREENSHOTS=1 $(BIN)/python -m pytest -q albor_pipeline_tests/scenarios/test_ui_e2e.py -k "materialize_all or whatif"

bench: install
	$(BIN)/pip install -q -e '.[dev,bench]'
	$(BIN)/python bench/run.py

verify: install
	$(BIN)/albor verify

lint: install $(VENV)/.test-packages
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	VIRTUAL_ENV=$(CURDIR)/$(VENV) $(BIN)/dg check defs

clean:
	rm -rf data/artifacts .dagster_home
