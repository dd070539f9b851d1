"""The webhook outbox (over SQLite; the Postgres trigger is proven in
``tests/integration/test_webhook_delivery.py``): a stored event of a deliverable type writes,
in its own transaction, one delivery row per endpoint of the plan's tenant that subscribes to
its type (or to ``*``), and nothing for any other event, tenant or type — so the hot path of a
plan costs the same statements with webhooks registered as without."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest
from pydantic import SecretStr
from sqlalchemy import select

from orchestrator.core.settings import Settings
from orchestrator.webhooks.endpoints import WebhookEndpoints
from storage import outbox
from storage.event_shapes import NewEvent
from storage.identity import READ, WEBHOOKS, WRITE, Principal
from storage.models import WebhookDelivery
from storage.outbox import Outbox
from storage.webhook_outbox import ALL, EVENTS, subscribes
from tests.sqlcount import StatementCounter
from tests.unit.planes import Planes
from tests.unit.test_statements import SMALL_BOARD

URL = "https://hooks.example.com/conclave"
KEY = "k" * 40
OTHER_TYPES = ("phase_started", "phase_completed", "plan_submitted", "input_received", "steered")


def hooked(planes: Planes) -> WebhookEndpoints:
    settings: Settings = planes.settings.model_copy(update={"webhook_secret_key": SecretStr(KEY),
                                                             "webhook_urls": ["https://hooks.example.com"]})
    return WebhookEndpoints(planes.db, settings)


def caller(tenant: str, *scopes: str) -> Principal:
    return Principal(f"p-{tenant}-{'-'.join(scopes)}", f"{tenant} caller", tenant, scopes)


def deliveries(planes: Planes) -> list[WebhookDelivery]:
    with planes.db.transaction() as s:
        return list(s.scalars(select(WebhookDelivery).order_by(WebhookDelivery.event_id, WebhookDelivery.endpoint_id)))


def submit(planes: Planes, tenant: str, **changes: Any) -> str:
    plan = SMALL_BOARD.model_copy(update=changes) if changes else SMALL_BOARD
    return planes.coordinator.submit(plan, principal=caller(tenant, READ, WRITE)).plan_id


def test_a_finished_plan_writes_one_delivery_per_subscribed_endpoint_of_its_tenant(planes: Planes) -> None:
    hooks = hooked(planes)
    acme, globex = caller("acme", WEBHOOKS), caller("globex", WEBHOOKS)
    finished = hooks.create(URL, ["plan_finished"], principal=acme).endpoint.id
    everything = hooks.create(URL, [ALL], principal=acme).endpoint.id
    hooks.create(URL, ["awaiting_approval"], principal=acme)  # not this type
    hooks.create(URL, [ALL], principal=globex)  # not this tenant
    plan_id = submit(planes, "acme", task_id="weekly-review")
    planes.run_all()
    [event] = [e for e in planes.events(plan_id) if e.type == "plan_finished"]
    rows = deliveries(planes)
    assert {(r.endpoint_id, r.event_type) for r in rows} == {(finished, "plan_finished"), (everything, "plan_finished")}
    for r in rows:  # a copy of what the event said, so trimming events never loses a delivery
        assert (r.event_id, r.plan_id, r.task_id, r.tenant, r.data, r.phase_key) == (
            event.id, plan_id, "weekly-review", "acme", event.data, None)
        assert (r.status, r.attempts, r.next_attempt_at, r.occurred_at) == ("pending", 0, event.created_at,
                                                                            event.created_at)
    assert len({r.id for r in rows}) == 2 and all(len(r.id) == 32 for r in rows)


@pytest.mark.parametrize("subscribed", [[t] for t in EVENTS] + [[ALL], ["plan_finished", "input_requested"]],
                         ids=lambda e: "+".join(e))
def test_the_trigger_decides_as_subscribes_says_for_every_type(planes: Planes, subscribed: list[str]) -> None:
    hooks = hooked(planes)
    endpoint = hooks.create(URL, subscribed, principal=caller("acme", WEBHOOKS)).endpoint.id
    plan_id = submit(planes, "acme")
    stored = {t: outbox.append_event(planes.db, plan_id, NewEvent(t, {"n": i}, "r1.dana")).id
              for i, t in enumerate((*EVENTS, *OTHER_TYPES))}
    got = {(r.event_type, r.event_id) for r in deliveries(planes) if r.endpoint_id == endpoint}
    assert got == {(t, i) for t, i in stored.items() if subscribes(subscribed, t)}
    assert got, "every subscription here receives at least one of these events"


def test_no_row_without_the_event_a_rolled_back_transaction_writes_neither(planes: Planes) -> None:
    hooks = hooked(planes)
    hooks.create(URL, [ALL], principal=caller("acme", WEBHOOKS))
    plan_id = submit(planes, "acme")
    with pytest.raises(RuntimeError), planes.db.transaction() as s:
        box = Outbox(s, plan_id)
        box.append(NewEvent("input_requested", {"phase": "r1.you"}, "r1.you"))
        assert box.records()  # flushed: the trigger ran, inside this transaction
        raise RuntimeError("the change the event reports fails")
    assert deliveries(planes) == []
    outbox.append_event(planes.db, plan_id, NewEvent("input_requested", {"phase": "r1.you"}, "r1.you"))
    assert [r.event_type for r in deliveries(planes)] == ["input_requested"]


def test_an_endpoint_registered_later_receives_only_later_events(planes: Planes) -> None:
    hooks = hooked(planes)
    plan_id = submit(planes, "acme")
    outbox.append_event(planes.db, plan_id, NewEvent("awaiting_approval", {}, "synthesis"))
    hooks.create(URL, [ALL], principal=caller("acme", WEBHOOKS))
    later = outbox.append_event(planes.db, plan_id, NewEvent("awaiting_approval", {}, "synthesis"))
    assert [r.event_id for r in deliveries(planes)] == [later.id]


def whole_run(planes: Planes, tenant: str) -> Counter[str]:
    plan_id = submit(planes, tenant)
    counter = StatementCounter().attach(planes.db.engine)
    try:
        planes.run_all()
        return counter.snapshot()["statements"]
    finally:
        counter.detach()
        assert planes.state(plan_id).plan.status == "completed"


def test_a_plan_costs_the_same_statements_with_webhooks_as_without(planes: Planes) -> None:
    hooks = hooked(planes)
    for events in ([ALL], ["plan_finished"], ["plan_finished"]):
        hooks.create(URL, events, principal=caller("hooked", WEBHOOKS))
    whole_run(planes, "warm-up")  # the worker's first plan reads and caches what it needs
    plain, hooked_run = whole_run(planes, "plain"), whole_run(planes, "hooked")
    assert sum(1 for r in deliveries(planes) if r.tenant == "hooked") == 3  # the rows are there …
    assert hooked_run == plain  # … and not one statement more was sent for them


def test_subscribes_is_the_vocabulary() -> None:
    for events in itertools.chain([[t] for t in EVENTS], [[ALL]]):
        assert {t for t in (*EVENTS, *OTHER_TYPES) if subscribes(events, t)} == (set(EVENTS) if events == [ALL]
                                                                                 else set(events))
