# Two commands do all set-up: `make sweep` and `make test` (the suite, in parallel test processes;
# CI runs it, then `make test-long`: the runs marked long -- fleets, hosts, the stack, outages,
# the examples end to end, variants, search quality, the type check and the benchmarks).
# `make test-fast` leaves out the end-to-end runs marked slow too, for a quick local check.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch. A GPU user sets TORCH_SPEC to the CUDA build they want
# (docs/getting-started.md, "GPUs").
TORCH_SPEC ?= torch==2.13.0
SWEEP ?= examples/quickstart.yaml
PYTEST_ARGS ?=
# Test processes: one more than the cores (trials wait on sockets and files part of the time),
# 3 to 8. Tests that share a costly fixture stay in one process (tests/conftest.py).
TEST_WORKERS ?= $(shell $(PYTHON) -c "import os; print(max(3, min(8, len(os.sched_getaffinity(0)) + 1)))")
PYTEST_PARALLEL = -n $(TEST_WORKERS) --dist loadgroup

.PHONY: sweep test test-long test-fast stack stack-down install lint typecheck docs bench bench-full bench-components bench-scale clean

$(VENV)/.installed: pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

# pip leaves an editable install's own modules uncompiled; where PYTHONDONTWRITEBYTECODE is set,
# every trial, worker and CLI process would compile them again. Only changed files recompile.
install: $(VENV)/.installed
	$(PY) -m compileall -q hyperfleet tests examples benchmarks

sweep: install
	$(VENV)/bin/hyperfleet sweep run $(SWEEP)

# The shared stack as local processes (PostgreSQL, MLflow server, two workers, dashboard);
# STACK_ARGS: e.g. --address 0.0.0.0 for workers on other hosts. `make stack-down` stops it.
STACK_ARGS ?=
stack: install
	$(VENV)/bin/hyperfleet stack up $(STACK_ARGS)

stack-down: install
	$(VENV)/bin/hyperfleet stack down

test: install
	$(PY) -m pytest $(PYTEST_PARALLEL) -m "not long" $(PYTEST_ARGS)

test-long: install
	$(PY) -m pytest $(PYTEST_PARALLEL) -m long $(PYTEST_ARGS)

test-fast: install
	$(PY) -m pytest $(PYTEST_PARALLEL) -m "not slow and not long" $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check hyperfleet tests benchmarks examples
	$(VENV)/bin/ruff format --check hyperfleet tests benchmarks examples

typecheck: install
	$(VENV)/bin/mypy

# The documentation site (mkdocs.yml, docs/) into site/, built strictly: a broken link, a page
# left out of the nav or an API reference that does not resolve fails it (CI runs it).
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# The side-by-side suite of trial start-up (BENCHMARKS.md, benchmarks/results/*.json) and a
# smoke run of the Bayesian schedulers with trials in flight (its full grid takes an hour or
# more: python benchmarks/bench_parallel_bo.py); bench-full: the sizes of issue #15;
# bench-components: the per-component scripts too. Both install the `bench` extra (Ray Tune,
# SMAC3, matplotlib) for the anytime benchmark (benchmarks/bench_anytime.py; its full size:
# 36 runs of ~35 s, ~20 min idle).
bench: install
	$(PY) benchmarks/run_all.py --quick
	$(PY) benchmarks/bench_parallel_bo.py --quick
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) benchmarks/bench_anytime.py --size quick

bench-full: install
	$(PY) benchmarks/run_all.py
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) benchmarks/bench_anytime.py --size full

bench-components: install
	$(PY) benchmarks/run_all.py --quick --components

# Scale: 1 to 1,000 simulated workers on one PostgreSQL, sweeps of 1,000 and 10,000 trials
# (BENCHMARKS.md "Scale": about an hour on an idle 2-core machine; 1,000 workers need more cores).
bench-scale: install
	$(PY) benchmarks/bench_scale.py --full --json benchmarks/results/scale.json

clean:
	rm -rf hyperfleet-runs
