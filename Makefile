# The two commands a new user runs: `make demo` and `make test`.
# Both install what they need (system packages, Java 17, a .venv) and are safe to run twice.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: setup test lint demo bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $(STAMP)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: lint
	$(VENV)/bin/pytest -q

demo: setup
	bash scripts/demo.sh

bench: setup
	$(PY) benchmarks/source_read.py

clean:
	rm -rf $(VENV) .demo
