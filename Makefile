# The two commands a fresh clone needs:  make demo   and   make test
VENV ?= .venv
BIN := $(VENV)/bin
PYTHON ?= python3

.PHONY: install demo test test-fast lint mutants services chaos bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

## Run the board example embedded: no services, no keys (offline model, SQLite, in-process worker).
demo: install
	$(BIN)/conclave run examples/board.yaml

## Lint, type-check and run every test tier against real Postgres and Redis (started if down).
test: install services lint
	$(BIN)/pytest -q

test-fast: install
	$(BIN)/pytest -q tests/unit

lint: install
	$(BIN)/ruff check orchestrator tasks storage tests bench
	$(BIN)/mypy

## Break each invariant of DESIGN.md on purpose (tests/mutants/catalogue/) in a scratch copy;
## fail if its tests do not notice, or if an invariant has no mutation.
mutants: install services
	$(BIN)/python -m tests.mutants.run

services:
	@bash scripts/services.sh

chaos: install services
	$(BIN)/python bench/chaos.py

## The hot path against issue 9's goals (SQL per phase, overhead vs a bare canvas), then the pool comparison.
## BENCH_REDIS: a Redis database the benchmarks may flush.
BENCH_REDIS ?= redis://127.0.0.1:6379/13
bench: install services
	$(BIN)/python bench/hotpath.py --redis $(BENCH_REDIS)
	$(BIN)/python bench/throughput.py --redis $(BENCH_REDIS)

clean:
	rm -rf $(VENV) .conclave .pytest_cache .mypy_cache .ruff_cache
