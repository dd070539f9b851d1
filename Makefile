# The two commands a fresh clone needs:  make demo   and   make test
VENV ?= .venv
BIN := $(VENV)/bin
PYTHON ?= python3

.PHONY: install demo check test lint mutants services browser pgbouncer chaos bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

## Run the board example embedded: no services, no keys (offline model, SQLite, in-process worker).
demo: install
	$(BIN)/conclave run examples/board.yaml

## The edit loop: the unit tier and the in-process planes, no services (a plain `pytest` runs the same).
check: install
	$(BIN)/pytest -q

## Lint, type-check and run every test tier against real Postgres and Redis (started if down), on
## TEST_WORKERS pytest-xdist workers (each with its own database and Redis database). The tiers are named
## slowest first: xdist hands tests out in that order, so the minute-long e2e tests start early and the
## many short unit tests fill the workers at the end.
TEST_WORKERS ?= 3
TEST_REPORT := .conclave/test-results.xml
test: install services browser pgbouncer lint
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadgroup --junitxml=$(TEST_REPORT) tests/e2e tests/integration tests/unit

lint: install
	$(BIN)/ruff check orchestrator tasks storage tests bench
	$(BIN)/mypy

## Break each invariant of DESIGN.md on purpose (tests/mutants/catalogue/) in a scratch copy;
## fail if its tests do not notice, or if an invariant has no mutation. Right after a `make test` of
## the same tree (as in CI), its report stands for the unmutated run of the named tests.
mutants: install services
	$(BIN)/python -m tests.mutants.run --baseline-from $(TEST_REPORT)

services:
	@bash scripts/services.sh

## Debian's chromium, for the plan page's browser tests (installed with apt if missing).
browser:
	@bash scripts/browser.sh

## Debian's pgbouncer, for the tests of a fleet behind PgBouncer (installed with apt if missing; each test
## starts its own, in transaction pooling mode).
pgbouncer:
	@bash scripts/pgbouncer.sh

chaos: install services
	$(BIN)/python bench/chaos.py

## The hot path against issue 9's goals (SQL per phase, overhead vs a bare canvas), then the pool comparison,
## CPU per model call and makespan vs a bare Celery peer (goal 1), chunk latency to an SSE client (goal 5),
## /metrics, a reconciler pass and the listing with 100 vs 100,000 finished plans (goal 4), and an eval of
## 1,000 items against as many plain plans (phases per second through the fleet), and the same boards through
## PgBouncer in transaction mode vs direct (phases per second), and a quiet tenant's board behind another's
## 40-board burst under fair share (time vs solo, and the burst's throughput with vs without it).
## BENCH_REDIS: a Redis database the benchmarks may flush.
BENCH_REDIS ?= redis://127.0.0.1:6379/13
bench: install services pgbouncer
	$(BIN)/python bench/hotpath.py --redis $(BENCH_REDIS)
	$(BIN)/python bench/throughput.py --redis $(BENCH_REDIS)
	$(BIN)/python bench/cpu.py --redis $(BENCH_REDIS)
	$(BIN)/python bench/stream_latency.py --redis $(BENCH_REDIS)
	$(BIN)/python bench/history.py
	$(BIN)/python bench/eval_throughput.py --redis $(BENCH_REDIS)
	$(BIN)/python bench/pgbouncer.py --redis $(BENCH_REDIS)
	$(BIN)/python bench/fairness.py --redis $(BENCH_REDIS)

clean:
	rm -rf $(VENV) .conclave .pytest_cache .mypy_cache .ruff_cache
