# The two commands a new user runs: `make demo` and `make test`.
# Both install what they need (system packages, Java 17, a .venv) and are safe to run twice.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: setup test test-large lint demo demo-reset bench soak soak-bench clean wheel

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh scripts/install_jars.sh scripts/jars/pom.xml scripts/jars/s3/pom.xml scripts/jars/jdbc/pom.xml scripts/jars/debezium/pom.xml
	bash scripts/setup.sh
	touch $(STAMP)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# Two pytest workers, whole files per worker: most of a sync test's time is latency (Spark job
# scheduling, Dagster events), so two overlap well on 2 cores (measured: 10 min in all). Files go
# out in collection order, the longest first (cdc_assets_tests/conftest.py), not xdist's "most
# tests first", which left the one-test browser file running alone at the end.
test: lint
	$(VENV)/bin/pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=25

# The many-table sync test alone at a thousand tables (`make test` runs it at 120: steps of 100 and 20 tables).
test-large: setup
	CDC_TEST_MANY_TABLES=1000 $(VENV)/bin/pytest -q -m large

# The fault soak of `make test` runs 45 s; this runs it for an hour (SOAK_SECONDS=... to change).
soak: setup
	CDC_SOAK_SECONDS=$(or $(SOAK_SECONDS),3600) $(VENV)/bin/pytest -q -s -m soak

demo: setup
	bash scripts/demo.sh

# Start the demo over: a new source, no run history, no stored assets; the .venv stays.
demo-reset: setup
	rm -rf .demo
	bash scripts/demo.sh

# `make bench` runs every benchmark at its default size (tens of minutes on 2 cores);
# `make bench QUICK=1` runs small versions. It installs nothing: pandas (the naive baselines) and
# pyspark[connect]'s packages (freshness.py's Spark Connect probe) are project dependencies, whose
# versions pip resolved together at setup (grpcio and grpcio-status need not match exactly).
bench: setup
	$(PY) benchmarks/source_read.py $(if $(QUICK),--rows 20000)
	$(PY) benchmarks/tds_wire.py $(if $(QUICK),--rows 20000)
	$(PY) benchmarks/snapshot_end_to_end.py $(if $(QUICK),--quick)
	$(PY) benchmarks/masked_snapshot.py $(if $(QUICK),--quick)
	$(PY) benchmarks/snapshot_resume.py $(if $(QUICK),--quick)
	$(PY) benchmarks/change_range.py $(if $(QUICK),--quick)
	$(PY) benchmarks/mirror_merge.py $(if $(QUICK),--quick)
	$(PY) benchmarks/incremental_daily_orders.py $(if $(QUICK),--quick)
	$(PY) benchmarks/history_range.py $(if $(QUICK),--quick)
	$(PY) benchmarks/sensor_tick.py $(if $(QUICK),--quick)
	$(PY) benchmarks/quiet_range.py $(if $(QUICK),--quick)
	$(PY) benchmarks/emulator_tables.py $(if $(QUICK),--quick)
	$(PY) benchmarks/maintenance.py $(if $(QUICK),--quick)
	$(PY) benchmarks/compaction.py $(if $(QUICK),--quick)
	$(PY) benchmarks/burst_memory.py $(if $(QUICK),--quick)
	$(PY) benchmarks/snapshot_beside_ranges.py $(if $(QUICK),--quick)
	$(PY) benchmarks/freshness.py $(if $(QUICK),--quick)
	$(PY) benchmarks/freshness.py --variants demo --tps 20 $(if $(QUICK),--quick)
	$(PY) benchmarks/debezium_peer.py $(if $(QUICK),--quick)

# The whole system for 90 minutes: make demo's processes and config with histories, column rules,
# maintenance and injected faults (benchmarks/soak.py; QUICK=1: 15 minutes; SOAK_MINUTES=N).
# Not part of `make bench`: it alone runs longer than all of bench, and its figures need the
# machine to themselves.
soak-bench: setup
	$(PY) benchmarks/soak.py $(if $(QUICK),--quick,$(if $(SOAK_MINUTES),--minutes $(SOAK_MINUTES)))

# The package as a wheel in dist/, to install into a Dagster project of your own (README: "In your
# own Dagster project"); pip builds it in an isolated environment (setuptools from the index).
wheel:
	$(if $(wildcard $(PY)),$(PY),python3) -m pip wheel -q --disable-pip-version-check --no-deps -w dist .
	rm -rf build

clean:
	rm -rf $(VENV) .demo .soak dist build
