# rlwh: `make demo` runs the main job on built-in demo data, `make test` runs every test
# (what CI runs), `make check` the fast ones (not marked slow), and `make coverage` the fast
# ones under coverage, failing when an rlwh module goes unexercised. Both print a progress
# line every 30 s (tests/progress.py; PYTEST_ADDOPTS=--progress-every=N to change it); times
# on a quiet 2-core machine are in the README (Tests) and BENCHMARKS.md. To find slow tests:
# PYTEST_ADDOPTS="--durations=20" make test (--cpu-durations=20 for CPU seconds).
# All set up .venv first. test and check run on every core (pytest-xdist, TEST_WORKERS=auto;
# TEST_WORKERS=0 for one process), a test file per worker (--dist loadfile: a file's module
# fixtures are made once, and test_ray's one Ray cluster stays on one worker).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TEST_WORKERS ?= auto
XDIST := -n $(TEST_WORKERS) --dist loadfile
STAMP := $(VENV)/.installed
DEMO_DIR ?= demo

.PHONY: install demo test check coverage lint bench docs clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,ray]'
	$(BIN)/duckdb -version >/dev/null
	touch $(STAMP)

demo: install
	$(BIN)/python -m rlwh.demo $(DEMO_DIR)

test: install
	$(BIN)/python -m pytest -q $(XDIST)

check: install
	$(BIN)/python -m pytest -q $(XDIST) -m "not slow"

coverage: install
	$(BIN)/python -m coverage erase
	$(BIN)/python -m coverage run -m pytest -q -m "not slow"
	$(BIN)/python -m coverage combine -q
	$(BIN)/python -m coverage report --skip-covered --sort=cover
	$(BIN)/python tests/unexercised_modules.py

lint: install
	$(BIN)/ruff check rlwh tests bench
	$(BIN)/mypy rlwh
	$(BIN)/python -m rlwh.docs --check

docs: install
	$(BIN)/python -m rlwh.docs

bench: install
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) $(DEMO_DIR) build dist *.egg-info .coverage .coverage.*
