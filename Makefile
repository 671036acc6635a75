# The README's two commands, and a few helpers. `make help` lists them.
#
#   make demo   checks Python/Java/disk, creates .venv if missing, installs queuelake with what the demo
#               needs, and runs `queuelake demo` (the embedded default) in .demo/
#   make test   checks the same plus the ODBC drivers (installed with apt-get when run as root), installs
#               what the tests need into the same .venv, fetches the Delta jars, and runs lint, the fast tier,
#               then the rest of the suite (two xdist workers, heaviest files first)
#   make test-fast  the tier without database, Spark, S3 or subprocess (tests/conftest.py marks it): under a
#               minute on two xdist workers (`FAST_XDIST=` runs it in one process), the loop to run while working
#
# Variables: PYTHON (the interpreter that creates the venv), VENV, VENV_FLAGS (extra `python -m venv`
# flags), DEMO_DIR, DEMO_ARGS (e.g. --messages 500), PYTEST_ARGS, XDIST and FAST_XDIST (empty runs in one process).
# Installs are remembered by stamp files in the venv: they rerun when setup.py (or the versions it reads)
# changes. pip's own cache (~/.cache/pip) makes a new venv quicker once pyspark's wheel has been built.

SHELL := /bin/bash
.DEFAULT_GOAL := help
.NOTPARALLEL:
MAKEFLAGS += --no-print-directory

PYTHON ?= python3
VENV ?= .venv
VENV_FLAGS ?=
DEMO_DIR ?= .demo
DEMO_ARGS ?=
PYTEST_ARGS ?= -q
# the slower tiers: two workers, a test file each (module fixtures such as the notebooks' lakes are built once),
# in tests/conftest.py's HEAVIEST_FIRST order (xdist would order files by test count)
XDIST ?= -n 2 --dist loadfile --no-loadscope-reorder
# the fast tier: two workers, test by test (its tests share no module fixture worth keeping on one worker)
FAST_XDIST ?= -n 2

# `spark` (pyspark, delta-spark) is an extra: the base wheel leaves Spark to the runtime (Databricks)
DEMO_EXTRAS := spark,embedded,notebooks
TEST_EXTRAS := spark,dev,notebooks,airflow

VENV_ABS := $(abspath $(VENV))
PY := $(VENV)/bin/python
# commands run as if the venv were activated, so subprocesses (spark workers, `queuelake`) use it too
IN_VENV := env PATH="$(VENV_ABS)/bin:$$PATH" VIRTUAL_ENV="$(VENV_ABS)"
# what setup.py's requirements come from
SETUP_INPUTS := setup.py $(wildcard lib/queuelake/versions.py)
CHECK := env PYTHON="$(PYTHON)" VENV="$(VENV)" bash scripts/check-prereqs.sh

.PHONY: help demo test test-fast check check-demo check-test system-deps jars venv install-demo install-test lint clean

help: ## list the targets
	@echo "queuelake: make <target>"
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## (.*)/  \1\t\2/' | expand -t 16

demo: check-demo install-demo ## set up .venv if needed and run the demo (embedded PostgreSQL, local Spark) in .demo/
	@mkdir -p $(DEMO_DIR)
	cd $(DEMO_DIR) && $(IN_VENV) queuelake demo --workdir . $(DEMO_ARGS)

test: check-test system-deps install-test jars ## install what the tests need (ODBC drivers too, as root); lint, fast tier, the rest
	$(MAKE) lint
	$(MAKE) test-fast
	$(IN_VENV) python -m pytest $(PYTEST_ARGS) -m "not fast" $(XDIST)

test-fast: install-test ## the fast tier alone: no database, Spark, S3 or subprocess
	$(IN_VENV) python -m pytest $(PYTEST_ARGS) -m fast $(FAST_XDIST)

check: check-test ## only check the prerequisites (Python 3.10+, Java 17, disk, ODBC drivers)

check-demo:
	@$(CHECK) demo

check-test:
	@$(CHECK) test

system-deps: ## install the missing system packages with apt-get (ODBC drivers; Maven for the jars)
	@bash scripts/system-deps.sh --install

venv: $(PY) ## create .venv (if missing)

$(PY):
	$(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(PY) -m pip install -q --upgrade pip

install-demo: $(VENV)/.installed-demo ## install queuelake[spark,embedded,notebooks] into .venv (editable)

install-test: $(VENV)/.installed-test ## install queuelake[spark,dev,notebooks,airflow] into .venv (editable)

$(VENV)/.installed-demo: $(SETUP_INPUTS) | $(PY)
	@echo "installing queuelake[$(DEMO_EXTRAS)] into $(VENV) (the first time takes a few minutes)" >&2
	$(PY) -m pip install -q -e '.[$(DEMO_EXTRAS)]'
	@# -W ignore: pgserver's platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); only imports are checked
	$(PY) -W ignore -c "import queuelake, pyspark, delta, deltalake, psycopg, pgserver, matplotlib"
	@touch $@

$(VENV)/.installed-test: $(SETUP_INPUTS) | $(PY)
	@echo "installing queuelake[$(TEST_EXTRAS)] into $(VENV) (the first time takes a few minutes)" >&2
	$(PY) -m pip install -q -e '.[$(TEST_EXTRAS)]'
	$(PY) -W ignore -c "import queuelake, pyspark, delta, deltalake, psycopg, pyodbc, adbc_driver_postgresql, matplotlib, pgserver, airflow"
	@# matplotlib's font cache, built once here: building it runs fc-list, a process the fast tier refuses
	$(PY) -c "import matplotlib.font_manager"
	@touch $@

jars: ## fetch the Delta Lake JVM jars (jvm/fetch-jars.sh, when present)
	@if [ -f jvm/fetch-jars.sh ]; then $(IN_VENV) bash jvm/fetch-jars.sh && $(IN_VENV) bash jvm/fetch-jars.sh --s3; fi

lint: install-test ## ruff check, ruff format --check, mypy (the first step of `make test`)
	$(IN_VENV) ruff check .
	$(IN_VENV) ruff format --check .
	$(IN_VENV) python -m mypy

clean: ## remove .venv, .demo and the pytest and ruff caches
	rm -rf $(VENV) $(DEMO_DIR) .pytest_cache .ruff_cache .mypy_cache
