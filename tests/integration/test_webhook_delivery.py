"""Webhooks on Postgres, with real plans, real worker processes and a real receiver on
127.0.0.1 that checks every request with docs/api.md's snippet.

- A receiver that refuses connections, then answers 500, then loses two answers, then is up:
  every event reaches it, every signature is valid, and nothing is repeated except
  deliveries whose earlier attempts were not answered with a 2xx — each acted on once by its
  ``Conclave-Delivery``. The courier's passes take ``now=``: an hour of backoff in seconds.
- A worker SIGKILLed while a receiver holds its request: another worker makes the delivery
  once the lease has passed.
- Couriers on several connections never take the same delivery (``FOR UPDATE SKIP LOCKED``).
- The trigger on ``events`` writes the rows in the event's transaction; an endpoint deleted
  while a plan finishes is skipped (``FOR KEY SHARE``), never a foreign-key error in the
  transaction that finishes the plan.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from pydantic import SecretStr
from sqlalchemy import select, text

from orchestrator.client.conclave import Conclave
from orchestrator.core.settings import Settings
from orchestrator.webhooks.courier import Courier
from storage import Database, connect, outbox
from storage.event_shapes import NewEvent
from storage.models import WebhookDelivery, utcnow
from tests.integration.durability import board_plan, wait_for
from tests.webhook_receiver import Receiver

KEY = "an operator key of at least 32 characters, for tests"
EVENTS = ["plan_finished", "input_requested", "awaiting_approval"]


class Clock:
    def __init__(self) -> None:
        self.now = utcnow()

    def unix(self) -> float:
        return self.now.timestamp()


@pytest.fixture()
def clock() -> Clock:
    return Clock()


@pytest.fixture()
def receiver(clock: Clock) -> Iterator[Receiver]:
    """Not started: its port refuses connections until a test starts it."""
    r = Receiver(now=clock.unix)
    yield r
    r.stop()


@pytest.fixture()
def settings(settings: Settings, receiver: Receiver) -> Settings:
    """The cluster's settings with webhooks on: the operator's key, the receiver allowed."""
    return settings.model_copy(update={"webhook_secret_key": SecretStr(KEY), "webhook_timeout": 3.0,
                                       "webhook_interval": 0.3, "webhook_urls": [f"http://127.0.0.1:{receiver.port}"]})


@pytest.fixture()
def conclave(settings: Settings) -> Iterator[Conclave]:
    c = Conclave(settings, worker=False, tenant="acme")
    yield c
    c.close()


def register(conclave: Conclave, receiver: Receiver, events: list[str] = EVENTS) -> str:
    made = conclave.create_webhook(receiver.url, events, description="integration receiver")
    receiver.secrets.append(made.secret)
    return made.endpoint.id


def rows(db: Database) -> list[WebhookDelivery]:
    with db.transaction() as s:
        return list(s.scalars(select(WebhookDelivery).order_by(WebhookDelivery.event_id)))


def test_a_receiver_down_then_failing_then_up_gets_every_event_once_signed(
        settings: Settings, conclave: Conclave, receiver: Receiver, clock: Clock, workers: Any) -> None:
    endpoint = register(conclave, receiver)
    workers(settings=settings.model_copy(update={"webhook_secret_key": None}))  # runs the plans, delivers nothing
    plan_ids = [conclave.submit(board_plan(f"Webhook board {i}", words=8, latency=0)) for i in range(3)]
    for plan_id in plan_ids:
        assert conclave.wait(plan_id, timeout=90).status == "completed"
    db = conclave.local.db
    # a human seat waits and a synthesis awaits approval (their builders are the `people` work's: the
    # trigger keys on the type, so a row of each type stands for them here)
    outbox.append_event(db, plan_ids[0], NewEvent("input_requested", {"expert": "You", "respond_within": 7200},
                                                  "r1.you"))
    outbox.append_event(db, plan_ids[1], NewEvent("awaiting_approval", {"phase": "final"}, "final"))
    outbox.append_event(db, plan_ids[2], NewEvent("phase_started", {"attempt": 1}, "opening"))  # not a webhook's
    expected = {r.id: r.event_type for r in rows(db)}
    assert sorted(Counter(expected.values()).items()) == [("awaiting_approval", 1), ("input_requested", 1),
                                                           ("plan_finished", 3)]

    courier = Courier(db, settings, draw=lambda: 0.5)
    clock.now = start = utcnow()

    def passes_until(moment: Any) -> None:
        """Every pass the backoff asks for, up to ``moment``: the clock jumps to each due time."""
        while True:
            due = [r.next_attempt_at for r in rows(db) if r.status == "pending" and r.next_attempt_at <= moment]
            if not due:
                clock.now = moment
                return
            clock.now = max(clock.now, min(due))
            assert courier.deliver_due(now=clock.now) >= 1

    passes_until(start + timedelta(minutes=20))  # down: connections refused
    down = rows(db)
    assert {r.status for r in down} == {"pending"} and all(r.last_error.startswith("ConnectError") for r in down)
    assert min(r.attempts for r in down) >= 5 and receiver.requests == []

    receiver.answer = 500
    receiver.start()
    passes_until(start + timedelta(minutes=50))  # up, but failing
    failing = rows(db)
    assert {r.status for r in failing} == {"pending"} and {r.last_status_code for r in failing} == {500}
    assert {r.last_error for r in failing} == {"HTTP 500 Internal Server Error"}

    receiver.answer, receiver.lose = 200, 2  # up; two answers are lost on the way back
    up = clock.now
    passes_until(start + timedelta(hours=3))
    done = rows(db)
    assert {r.status for r in done} == {"delivered"} and {r.id: r.event_type for r in done} == expected
    # backoff is at most an hour apart: what a lost answer sent again came within two of them
    assert max(r.delivered_at for r in done) - up <= timedelta(hours=2)

    got = receiver.requests
    assert all(r.valid for r in got), [r for r in got if not r.valid][:1]  # the documented check, every time
    assert set(receiver.handled) == set(expected)  # every event, acted on once per Conclave-Delivery
    ok = Counter(r.delivery for r in got if r.answered == 200)
    assert ok == Counter(set(expected))  # one 2xx per delivery: none sent again after it was answered
    for delivery in expected:
        sent = [r for r in got if r.delivery == delivery]
        assert len({r.body for r in sent}) == 1 and [r.attempt for r in sent] == list(
            range(sent[0].attempt, sent[-1].attempt + 1))  # the same bytes on every attempt that reached it
        assert sent[-1].answered == 200 and all(r.answered in (500, None) for r in sent[:-1])
    lost = [r for r in got if r.answered is None]
    assert len(lost) == 2 and all(r.delivery in ok for r in lost)  # acted on, then sent again: deduped
    by_row = {r.id: r for r in done}
    for delivery, event in expected.items():
        assert receiver.handled[delivery] == next(r.body for r in got if r.delivery == delivery)
        assert by_row[delivery].attempts >= 5 + 1 and by_row[delivery].last_status_code == 200
        assert event == next(r.event for r in got if r.delivery == delivery)
    page = conclave.webhook_deliveries(endpoint)
    assert {d.id for d in page.deliveries} == set(expected) and {str(d.status) for d in page.deliveries} == {
        "delivered"}


def test_a_worker_killed_mid_delivery_leaves_it_to_another_worker(
        settings: Settings, conclave: Conclave, receiver: Receiver, workers: Any) -> None:
    register(conclave, receiver, ["plan_finished"])
    receiver.now = None  # real time: the workers' clocks sign
    receiver.hold = True
    receiver.start()
    first = workers()
    plan_id = conclave.submit(board_plan("Killed courier", words=8, latency=0))
    assert receiver.arrived.wait(60), "the first worker never delivered"
    first.kill(signal.SIGKILL)  # its courier is inside the request, the receiver holding it
    receiver.hold = False
    receiver.release()
    db = conclave.local.db
    [held] = rows(db)
    assert (held.status, held.attempts) == ("pending", 1)  # leased to the dead worker, not lost
    assert held.next_attempt_at > utcnow()
    second = workers()
    wait_for(lambda: rows(db)[0].status == "delivered", 60, interval=0.2, what="the second worker's delivery")
    [row] = rows(db)
    assert row.attempts == 2 and row.last_status_code == 200 and row.plan_id == plan_id
    unanswered, answered = receiver.requests
    assert (unanswered.answered, answered.answered) == (None, 200) and unanswered.valid and answered.valid
    assert unanswered.delivery == answered.delivery == row.id and unanswered.body == answered.body
    assert (unanswered.attempt, answered.attempt) == (1, 2)
    assert f"webhook delivery {row.id} (plan_finished)" in second.log()  # what it did, by id …
    for log in (first.log(), second.log()):  # … and never a secret, the key, or the receiver's URL
        assert receiver.secrets[0] not in log and KEY not in log and "whsec_" not in log
        assert "/hooks/conclave" not in log and "HTTP/1.0 200 OK" not in log  # not even httpx's request line


def test_couriers_on_several_connections_never_take_the_same_delivery(
        settings: Settings, conclave: Conclave, receiver: Receiver, clean_db: str) -> None:
    register(conclave, receiver)
    receiver.now = None
    receiver.start()
    plan_id = conclave.submit(board_plan("Many events", words=8, latency=0))
    db = conclave.local.db
    for i in range(40):
        outbox.append_event(db, plan_id, NewEvent("awaiting_approval", {"n": i}, "final"))
    dbs = [connect(clean_db, pool_size=3) for _ in range(3)]
    couriers = [Courier(d, settings.model_copy(update={"webhook_concurrency": 3})) for d in dbs]
    start = threading.Barrier(len(couriers))

    def drain(courier: Courier) -> None:
        start.wait()
        while courier.deliver_due():
            pass

    threads = [threading.Thread(target=drain, args=(c,)) for c in couriers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for d in dbs:
        d.dispose()
    assert {r.status for r in rows(db)} == {"delivered"} and {r.attempts for r in rows(db)} == {1}
    assert len(receiver.requests) == 40 and len({r.delivery for r in receiver.requests}) == 40


def test_an_endpoint_deleted_while_a_plan_finishes_is_skipped_not_an_error(
        settings: Settings, conclave: Conclave, receiver: Receiver, clean_db: str) -> None:
    endpoint = register(conclave, receiver)
    kept = register(conclave, receiver)
    plan_id = conclave.submit(board_plan("Racing a delete", words=8, latency=0))
    db = conclave.local.db
    other = connect(clean_db, pool_size=1)
    try:
        with other.engine.connect() as deleting:
            deleting.execute(text("BEGIN"))
            deleting.execute(text("DELETE FROM webhook_endpoints WHERE id = :id"), {"id": endpoint})  # not committed
            finished: list[Any] = []
            writer = threading.Thread(target=lambda: finished.append(outbox.append_event(
                db, plan_id, NewEvent("plan_finished", {"status": "completed"}))))
            writer.start()
            time.sleep(0.5)
            assert writer.is_alive()  # the trigger waits for the endpoint's row …
            deleting.execute(text("COMMIT"))
            writer.join(10)
        assert finished, "the event's transaction failed"  # … and, once it is gone, skips it
    finally:
        other.dispose()
    assert [(r.endpoint_id, r.event_id) for r in rows(db)] == [(kept, finished[0].id)]


def test_a_persons_seat_and_approval_reach_the_receiver_signed_as_they_happen(
        settings: Settings, conclave: Conclave, receiver: Receiver, workers: Any) -> None:
    """The events people act on, from a real plan end to end: a worker delivers
    ``input_requested`` when a seat is asked, ``awaiting_approval`` when the draft is written and
    ``plan_finished`` once it is approved — each signed, each once, each with the shape
    docs/api.md gives it, and nothing the endpoint did not ask for."""
    register(conclave, receiver)
    receiver.now = None  # real time: the worker's courier signs
    receiver.start()
    workers()
    plan_id = conclave.submit({
        "kind": "board", "title": "A seat and an approval", "question": "Should we ship the beta?", "rounds": 1,
        "moderator": {"name": "Morgan", "role": "Chair of the board"},
        "experts": [{"name": "Dana", "role": "Chief Financial Officer"},
                    {"name": "You", "role": "Founder", "human": True, "respond_within": "1h"}],
        "final": {"approve": True}, "models": {"default": {"provider": "offline", "options": {"words": 12}}}})

    def received(event: str) -> list[Any]:
        return [r for r in receiver.requests if r.event == event and r.json()["plan_id"] == plan_id]

    wait_for(lambda: received("input_requested"), 60, interval=0.2, what="input_requested at the receiver")
    [asked] = received("input_requested")
    body = asked.json()
    assert body["type"] == "input_requested" and body["phase"] == "r1.you"
    assert body["data"]["expert"] == "You" and "Should we ship the beta?" in body["data"]["prompt"]
    assert conclave.get(plan_id).status == "running"  # the delivery came while the seat waits

    conclave.answer(plan_id, "r1.you", "Ship it to two customers first.\nPosition: CONDITIONAL - a pilot first")
    wait_for(lambda: received("awaiting_approval"), 60, interval=0.2, what="awaiting_approval at the receiver")
    assert conclave.get(plan_id).status == "awaiting_approval" and received("plan_finished") == []

    conclave.approve(plan_id)
    wait_for(lambda: received("plan_finished"), 60, interval=0.2, what="plan_finished at the receiver")
    [finished] = received("plan_finished")
    assert finished.json()["data"]["status"] == "completed"
    got = [r for r in receiver.requests if r.json()["plan_id"] == plan_id]
    assert [r.event for r in got] == ["input_requested", "awaiting_approval", "plan_finished"]
    assert all(r.valid and r.answered == 200 for r in got)  # docs/api.md's check accepts each, each once
