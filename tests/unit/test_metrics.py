"""Metrics without services: the API's gauges against stored state (SQLite), what the phase
runner and the coordinator record as a plan runs in process, and the Grafana dashboard's
queries against the names the code exports."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.api.ops import scrape
from orchestrator.gateway.failures import RateLimited
from orchestrator.gateway.model_gateway import Attempt
from orchestrator.gateway.types import ChatRequest, Completion, ModelSpec, Usage
from orchestrator.metrics import FleetCollector, MeasureCalls, Recorder
from storage.status import PhaseStatus
from tasks.housekeeping import Housekeeper
from tasks.lease import LeaseKeeper
from tests.conftest import ROOT
from tests.unit.planes import OWNER, Planes
from tests.unit.stored import example

DASHBOARD = ROOT / "docker" / "grafana" / "conclave.json"
TARGET_LABELS = {"instance", "job"}  # Prometheus adds them to every series it scrapes


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sampled(name: str, **labels: str) -> float:
    """A sample of this process's recorder (0 before anything was recorded)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_the_api_gauges_count_what_is_live_in_the_database(planes: Planes) -> None:
    done = planes.coordinator.submit(example("board")).plan_id
    planes.run_all()  # finished: counted nowhere any more
    cancelling = planes.coordinator.submit(example("board")).plan_id
    waiting = planes.coordinator.submit(example("team")).plan_id
    planes.dispatcher.take()  # their canvases are lost: nothing runs but what the test claims
    opening = next(p for p in planes.state(cancelling).phases if p.key == "opening")
    assert planes.runner.claim(opening.id, owner=OWNER) is not None  # a worker holds it ...
    planes.expire_lease(opening.id)  # ... and went silent
    planes.coordinator.cancel(cancelling)  # a cancel that waits for the running phase

    got = samples(scrape(planes.db).decode())

    live = [planes.state(pid) for pid in (done, cancelling, waiting) if not planes.state(pid).plan.final]
    assert [s.plan.id for s in live] == [cancelling, waiting]
    by_status = Counter(p.status for s in live for p in s.phases)
    assert got[("conclave_plans_running", ())] == 2
    assert got[("conclave_plans_cancelling", ())] == 1
    for status in PhaseStatus:
        assert got[("conclave_phases", (("status", str(status)),))] == by_status[status], status
    assert by_status[PhaseStatus.RUNNING] == 1 and by_status[PhaseStatus.CANCELLED] > 0
    assert got[("conclave_phases_lease_expired", ())] == 1
    assert got[("conclave_webhook_deliveries_pending", ())] == got[("conclave_webhook_deliveries_overdue", ())] == 0


def test_a_plan_run_in_process_is_measured_as_stored(planes: Planes) -> None:
    kinds = ("opening", "turn", "round_summary", "final_summary")
    before = {k: sampled("conclave_phase_duration_seconds_count", kind=k, outcome="completed") for k in kinds}
    tokens = {(s, d): sampled("conclave_model_tokens_total", provider="offline", model="default", source=s,
                              direction=d) for s in ("provider", "estimated") for d in ("input", "output")}
    calls = sampled("conclave_model_call_duration_seconds_count", provider="offline", model="default", outcome="ok")

    plan_id = planes.coordinator.submit(example("board")).plan_id
    planes.run_all()

    stored = planes.state(plan_id)
    assert stored.plan.status == "completed"
    per_kind = Counter(p.kind for p in stored.phases if p.status == PhaseStatus.COMPLETED)
    for k in kinds:
        assert sampled("conclave_phase_duration_seconds_count", kind=k, outcome="completed") - before[k] \
            == per_kind[k], k
    rows = planes.usage(plan_id)
    for (source, direction), was in tokens.items():
        stored_tokens = sum(r.input_tokens if direction == "input" else r.output_tokens
                            for r in rows if r.source == source)
        now = sampled("conclave_model_tokens_total", provider="offline", model="default", source=source,
                      direction=direction)
        assert now - was == stored_tokens, (source, direction)
    assert sampled("conclave_model_call_duration_seconds_count", provider="offline", model="default",
                   outcome="ok") - calls == len(rows)  # one usage row per call


def test_the_reconciler_counts_what_it_finds_and_what_it_takes_over(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(example("board")).plan_id
    planes.dispatcher.take()  # the opening's message is lost ...
    opening = next(p for p in planes.state(plan_id).phases if p.key == "opening")
    assert planes.runner.claim(opening.id, owner=OWNER) is not None
    planes.expire_lease(opening.id)  # ... and the worker that claimed it died
    stalled, nudged = sampled("conclave_reconciler_actions_total", action="stalled"), \
        sampled("conclave_reconciler_actions_total", action="nudged")
    takeovers = sampled("conclave_lease_takeovers_total")

    assert planes.coordinator.reconcile() == [plan_id]

    assert sampled("conclave_reconciler_actions_total", action="stalled") - stalled == 1
    assert sampled("conclave_reconciler_actions_total", action="nudged") - nudged == 1
    assert sampled("conclave_lease_takeovers_total") - takeovers == 1
    planes.run_all()
    assert planes.state(plan_id).plan.status == "completed"


def test_a_heartbeat_that_finds_a_lease_taken_over_counts_the_call_it_stops(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(example("board")).plan_id
    opening = next(p for p in planes.state(plan_id).phases if p.key == "opening")
    work = planes.runner.claim(opening.id, owner=OWNER)
    assert work is not None
    planes.expire_lease(opening.id)
    assert planes.runner.claim(opening.id, owner="unit:2:other") is not None  # another attempt takes it over
    keeper = LeaseKeeper(planes.runner.renew, interval=3600.0)  # beats by hand
    lost = sampled("conclave_leases_lost_total")
    with keeper.hold(opening.id, work.attempt) as lease:
        keeper.beat()
        assert lease.should_stop()
    assert sampled("conclave_leases_lost_total") - lost == 1
    keeper.close()


def test_each_sweep_of_the_housekeeper_is_counted(planes: Planes) -> None:
    keeper = Housekeeper(planes.db, planes.coordinator, interval=60, stalled_after=60)
    swept = sampled("conclave_reconciler_sweeps_total", result="swept")
    assert keeper.sweep() and keeper.sweep()  # SQLite: one process, it always holds the lock
    assert sampled("conclave_reconciler_sweeps_total", result="swept") - swept == 2


# ---------------------------------------------------------------- the dashboard


def exported(db: Any) -> dict[str, set[str]]:
    """Every series name the code exports (workers and API), with its label names: one of
    everything recorded through the public surface into a fresh registry, and a scrape."""
    registry = CollectorRegistry()
    r = Recorder(registry=registry)
    with r.phase("turn") as timed:
        timed.outcome = "completed"
    spec = ModelSpec(name="m", provider="openai", model="gpt")
    done = Completion("text", Usage(1, 2, "provider"), truncated=True, fallback=True, finish_reason="idle_timeout",
                      fallback_reason="first_chunk_timeout")
    MeasureCalls(r).after_attempt(spec, ChatRequest("s", "p"), Attempt(0.5, 0.1, done, None, done.usage, None))
    MeasureCalls(r).after_attempt(spec, ChatRequest("s", "p"), Attempt(0.5, None, None, RateLimited("slow down"),
                                                                       None, 1.0))
    r.lease_lost()
    r.taken_over(1)
    r.swept("swept")
    r.reconciled("stalled")
    r.pruned(1)
    registry.register(FleetCollector(db))
    names: dict[str, set[str]] = {}
    for family in registry.collect():
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def _exprs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "expr" and isinstance(v, str)] + \
            [e for v in node.values() for e in _exprs(v)]
    if isinstance(node, list):
        return [e for v in node for e in _exprs(v)]
    return []


def test_every_metric_the_dashboard_queries_is_exported_with_the_labels_it_uses(planes: Planes) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = _exprs(dashboard)
    assert len(exprs) >= 10
    names = exported(planes.db)
    queried = set()
    for expr in exprs:
        used = re.findall(r"\b(conclave_[a-z_]+)(\{[^}]*\})?", expr)
        assert used, expr
        labels_here = set(TARGET_LABELS)
        for name, matchers in used:
            assert name in names, f"{name} (in {expr!r}) is not exported"
            queried.add(name)
            labels_here |= names[name]
            for label in re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers):
                assert label in names[name], f"{name} has no label {label!r} ({expr!r})"
        for grouping in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
            for label in filter(None, (g.strip() for g in grouping.split(","))):
                assert label in labels_here, f"no metric of {expr!r} has the label {label!r}"
    # and it shows every family the code exports
    families = {re.sub(r"_(bucket|count|sum|total|created)$", "", n) for n in names}
    assert {re.sub(r"_(bucket|count|sum|total)$", "", n) for n in queried} == families
