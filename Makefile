# rlwh: `make demo` runs the main job on built-in demo data, `make test` runs every test
# (what CI runs), `make check` the fast ones (not marked slow), and `make coverage` the fast
# ones under coverage, failing when an rlwh module goes unexercised. Both print a progress
# line every 30 s (tests/progress.py; PYTEST_ADDOPTS=--progress-every=N to change it); times
# on a quiet 2-core machine are in the README (Development) and BENCHMARKS.md. To find slow tests:
# PYTEST_ADDOPTS="--durations=20" make test (--cpu-durations=20 for CPU seconds).
# All set up .venv first. test and check run on every core (pytest-xdist, TEST_WORKERS=auto;
# TEST_WORKERS=0 for one process), a test file per worker (--dist loadfile: a file's module
# fixtures are made once, and test_ray's one Ray cluster stays on one worker), the longest
# files first (tests/conftest.py, LONGEST_FIRST).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TEST_WORKERS ?= auto
XDIST := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
STAMP := $(VENV)/.installed
# test, check and coverage keep their temp files (pytest's tmp_path, and the TMPDIR of every
# process they start) on /dev/shm, a RAM disk, where it has 4 GB free: the tests make and
# remove many thousands of small files, and on a disk mounted with `discard` removing them
# took most of some tests' time (two dataset tests: 37 s with /tmp, 23 s with /dev/shm).
# There, a passing test's temp folder is removed when it ends, and one run's leftovers are
# kept, not three (a run of `make check` left 1.4 GB in memory; with the removal, `make test`
# still left 0.7 GB: its workers' module and session folders). TEST_TMPDIR= (empty) leaves TMPDIR and
# pytest's retention as they are; TEST_TMPDIR=DIR puts the temp files in DIR.
TEST_TMPDIR ?= $(shell df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 && $$4 > 4194304 {print "/dev/shm"}')
# The tests keep Python's bytecode (__pycache__, git-ignored) where the environment says not
# to (PYTHONDONTWRITEBYTECODE=1): without it each test process compiles every test module and
# its assertions' rewrite again (collection: 4.5 s -> 1.9 s a process), as does every rlwh
# process a test starts.
TEST_ENV := PYTHONDONTWRITEBYTECODE= $(if $(TEST_TMPDIR),TMPDIR=$(TEST_TMPDIR))
TEST_KEEP := $(if $(TEST_TMPDIR),-o tmp_path_retention_policy=failed -o tmp_path_retention_count=1)
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
	$(TEST_ENV) $(BIN)/python -m pytest -q $(TEST_KEEP) $(XDIST)

check: install
	$(TEST_ENV) $(BIN)/python -m pytest -q $(TEST_KEEP) $(XDIST) -m "not slow"

coverage: install
	$(BIN)/python -m coverage erase
	$(TEST_ENV) $(BIN)/python -m coverage run -m pytest -q $(TEST_KEEP) -m "not slow"
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
