"""The courier over SQLite, against a real receiver on 127.0.0.1 that checks every request
with docs/api.md's snippet: a finished plan is delivered signed; a failed attempt is tried
again after its backoff (the pass takes ``now=``: no waiting), with the same delivery id and
body; past the horizon it is failed and stays visible; a delivery a courier took is not taken
again until its lease passes, and a courier whose lease passed records nothing. Where a
webhook may go: a URL the address rules refuse is refused at registration naming ``url``; a
name resolving to such an address is refused at delivery, before any connection; a redirect
is not followed; a receiver that does not answer is cut off at the timeout. What a receiver
answers with is never stored."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from pydantic import SecretStr
from sqlalchemy import select

from orchestrator.core.errors import InvalidWebhook, WebhooksNotConfigured
from orchestrator.core.settings import Settings
from orchestrator.webhooks.courier import Courier
from orchestrator.webhooks.endpoints import WebhookEndpoints
from orchestrator.webhooks.schedule import FIRST_DELAY, lease
from storage import outbox, webhook_outbox
from storage.event_shapes import NewEvent
from storage.identity import READ, WEBHOOKS, WRITE, Principal
from storage.models import WebhookDelivery, utcnow
from tests.unit.planes import Planes
from tests.unit.test_statements import SMALL_BOARD
from tests.webhook_receiver import Receiver

KEY = "k" * 40
ACME = Principal("p-acme", "acme hooks", "acme", (WEBHOOKS,))
WRITER = Principal("p-acme-w", "acme ci", "acme", (READ, WRITE))
LEAK = b"Quartermaster Ondine ordered seven barrels of tar; secret=sk-receiver-LEAK-7f3a"


class Clock:
    """The courier's clock, shared with the receiver (which checks the signature's age against it)."""

    def __init__(self) -> None:
        self.now = utcnow()

    def unix(self) -> float:
        return self.now.timestamp()

    def at(self, moment: datetime) -> datetime:
        self.now = moment
        return moment


@dataclass
class Rig:
    planes: Planes
    clock: Clock
    receiver: Receiver
    settings: Settings
    hooks: WebhookEndpoints
    secrets: list[str]

    def courier(self, **options: Any) -> Courier:
        return Courier(self.planes.db, self.settings, draw=lambda: 0.0, **options)

    def register(self, url: str | None = None, events: tuple[str, ...] = ("plan_finished",)) -> str:
        made = self.hooks.create(url or self.receiver.url, list(events), principal=ACME)
        self.secrets.append(made.secret)
        return made.endpoint.id

    def finish_a_plan(self) -> str:
        plan_id = self.planes.coordinator.submit(SMALL_BOARD, principal=WRITER).plan_id
        self.planes.run_all()
        self.clock.at(max(self.clock.now, utcnow()))  # its events are due now
        return plan_id

    def rows(self) -> list[WebhookDelivery]:
        with self.planes.db.transaction() as s:
            return list(s.scalars(select(WebhookDelivery).order_by(WebhookDelivery.event_id)))


@pytest.fixture()
def rig(planes: Planes) -> Iterator[Rig]:
    clock, secrets = Clock(), []
    receiver = Receiver(secrets, now=clock.unix).start()
    settings = planes.settings.model_copy(update={
        "webhook_secret_key": SecretStr(KEY), "webhook_timeout": 2.0,
        "webhook_urls": [f"http://127.0.0.1:{receiver.port}", f"http://localhost:{receiver.port}"]})
    yield Rig(planes, clock, receiver, settings, WebhookEndpoints(planes.db, settings), secrets)
    receiver.stop()


def test_a_finished_plan_is_delivered_signed_once(rig: Rig) -> None:
    endpoint = rig.register()
    plan_id = rig.finish_a_plan()
    courier = rig.courier()
    assert courier.deliver_due(now=rig.clock.now) == 1
    [got] = rig.receiver.requests
    assert got.valid and got.answered == 200 and got.event == "plan_finished" and got.attempt == 1
    body = got.json()
    assert (body["plan_id"], body["tenant"], body["type"], body["data"]["status"]) == (plan_id, "acme",
                                                                                       "plan_finished", "completed")
    [row] = rig.rows()
    assert (row.id, row.endpoint_id, row.status, row.attempts, row.last_status_code, row.last_error) == (
        got.delivery, endpoint, "delivered", 1, 200, None)
    assert row.delivered_at == rig.clock.now and row.next_attempt_at is None
    assert courier.deliver_due(now=rig.clock.now + timedelta(days=1)) == 0  # delivered: never sent again
    assert len(rig.receiver.requests) == 1


def test_a_failed_attempt_is_tried_again_after_its_backoff_with_the_same_id_and_body(rig: Rig) -> None:
    rig.register()
    rig.finish_a_plan()
    courier = rig.courier()
    rig.receiver.answer, rig.receiver.reply = 500, LEAK
    start = rig.clock.now
    assert courier.deliver_due(now=start) == 1
    [row] = rig.rows()
    assert (row.status, row.attempts, row.last_status_code) == ("pending", 1, 500)
    assert row.last_error == "HTTP 500 Internal Server Error"  # our words: the receiver's body is not read
    assert row.next_attempt_at == start + timedelta(seconds=FIRST_DELAY)  # draw 0: the whole first backoff
    assert courier.deliver_due(now=rig.clock.at(start + timedelta(seconds=FIRST_DELAY - 1))) == 0  # not due yet
    rig.receiver.answer = 200
    assert courier.deliver_due(now=rig.clock.at(start + timedelta(seconds=FIRST_DELAY))) == 1
    first, second = rig.receiver.requests
    assert first.delivery == second.delivery and first.body == second.body  # the idempotency key, the same bytes
    assert (first.attempt, second.attempt) == (1, 2) and first.signature != second.signature  # signed at each attempt
    assert first.valid and second.valid and list(rig.receiver.handled) == [first.delivery]
    [row] = rig.rows()
    assert (row.status, row.attempts, row.last_status_code, row.last_error) == ("delivered", 2, 200, None)


def test_past_the_horizon_a_delivery_is_failed_and_stays_visible(rig: Rig) -> None:
    rig.settings = rig.settings.model_copy(update={"webhook_retry_hours": 1.0})
    endpoint = rig.register()
    rig.finish_a_plan()
    rig.receiver.stop()  # connections refused from now on
    courier = rig.courier()
    [row] = rig.rows()
    while row.status == "pending":
        assert courier.deliver_due(now=rig.clock.at(max(rig.clock.now, row.next_attempt_at))) == 1
        [row] = rig.rows()
    assert row.status == "failed" and row.next_attempt_at is None and row.last_status_code is None
    assert row.last_error.startswith("ConnectError") and 8 <= row.attempts <= 12  # an hour of backoff
    assert row.last_attempt_at == row.occurred_at + timedelta(hours=1)  # the last attempt at the horizon
    assert courier.deliver_due(now=rig.clock.now + timedelta(days=30)) == 0
    page = rig.hooks.deliveries(endpoint, principal=ACME)
    assert [(d.id, d.status, d.attempts) for d in page.deliveries] == [(row.id, "failed", row.attempts)]
    assert rig.hooks.deliveries(endpoint, status="pending", principal=ACME).deliveries == []


def test_a_delivery_is_taken_by_one_courier_until_its_lease_passes_and_a_stale_one_records_nothing(rig: Rig) -> None:
    rig.register()
    rig.finish_a_plan()
    t = rig.clock.now
    [taken] = webhook_outbox.claim_due(rig.planes.db, now=t, lease_until=t + lease(2.0), limit=4)
    assert taken.attempt == 1
    assert webhook_outbox.claim_due(rig.planes.db, now=t + lease(2.0) - timedelta(seconds=1),
                                    lease_until=t + timedelta(minutes=1), limit=4) == []  # held: nobody else
    [again] = webhook_outbox.claim_due(rig.planes.db, now=t + lease(2.0), lease_until=t + timedelta(minutes=1),
                                       limit=4)  # its courier died: the lease passed, another takes it
    assert (again.id, again.attempt) == (taken.id, 2)
    assert not webhook_outbox.record_attempt(rig.planes.db, taken.id, attempt=1, now=t, delivered=True,
                                             next_attempt_at=None, status_code=200, error=None)  # fenced
    [row] = rig.rows()
    assert (row.status, row.attempts) == ("pending", 2)
    assert webhook_outbox.record_attempt(rig.planes.db, taken.id, attempt=2, now=t, delivered=True,
                                         next_attempt_at=None, status_code=200, error=None)
    assert rig.rows()[0].status == "delivered"


@pytest.mark.parametrize(("url", "why"), [
    ("http://169.254.169.254/latest/meta-data/", "metadata"),
    ("http://metadata.google.internal/computeMetadata/v1/", "metadata"),
    ("http://0.0.0.0:8080/hook", "unspecified"),
    ("http://224.0.0.1:8080/hook", "multicast"),
    ("http://10.0.0.6:8080/hook", "private"),  # 10.0.0.5 is listed, not this one
    ("http://[::1]:8080/hook", "loopback"),
    ("ftp://hooks.example.com/conclave", "scheme must be http or https"),
    ("https://evil.example.org/conclave", "CONCLAVE_WEBHOOK_URLS"),
    ("https://user:pw@hooks.example.com/conclave", "'@'"),
    ("https://hooks.example.com/conclave?token=1", "query"),
])
def test_registration_refuses_what_the_address_rules_refuse_naming_url(planes: Planes, url: str, why: str) -> None:
    settings = planes.settings.model_copy(update={"webhook_secret_key": SecretStr(KEY), "webhook_urls": [
        "https://hooks.example.com", "http://10.0.0.5:8080", "http://169.254.169.254", "http://0.0.0.0:8080",
        "http://224.0.0.1:8080", "http://metadata.google.internal"]})
    hooks = WebhookEndpoints(planes.db, settings)
    with pytest.raises(InvalidWebhook) as refused:
        hooks.create(url, ["plan_finished"], principal=ACME)
    assert refused.value.details[0]["field"] == "url" and why in refused.value.message, refused.value.message
    assert hooks.create("http://10.0.0.5:8080/hook", ["plan_finished"], principal=ACME).endpoint.url  # listed
    assert [e.url for e in hooks.list_endpoints(principal=ACME)] == ["http://10.0.0.5:8080/hook"]


def test_registration_names_the_wrong_field_and_needs_the_operators_key(planes: Planes) -> None:
    settings = planes.settings.model_copy(update={"webhook_urls": ["https://hooks.example.com"]})
    url = "https://hooks.example.com/conclave"
    with pytest.raises(WebhooksNotConfigured) as off:
        WebhookEndpoints(planes.db, settings).create(url, ["plan_finished"], principal=ACME)
    assert "CONCLAVE_WEBHOOK_SECRET_KEY" in off.value.message
    hooks = WebhookEndpoints(planes.db, settings.model_copy(update={"webhook_secret_key": SecretStr(KEY)}))
    for events, field in (([], "events"), (["plan_finished", "phase_started"], "events[1]"), (["*", "plan_finished"],
                                                                                             "events")):
        with pytest.raises(InvalidWebhook) as wrong:
            hooks.create(url, events, principal=ACME)
        assert wrong.value.details[0]["field"] == field
    with pytest.raises(InvalidWebhook) as long:
        hooks.create(url, ["plan_finished"], description="x" * 201, principal=ACME)
    assert long.value.details[0]["field"] == "description"
    assert hooks.list_endpoints(principal=ACME) == []


def test_a_name_that_resolves_to_a_forbidden_address_is_refused_at_delivery(rig: Rig) -> None:
    rig.register(f"http://localhost:{rig.receiver.port}/hooks/conclave")  # a name: allowed at registration
    rig.finish_a_plan()
    assert rig.courier().deliver_due(now=rig.clock.now) == 1  # the real resolver: localhost is 127.0.0.1
    [row] = rig.rows()
    assert row.status == "pending" and row.attempts == 1 and row.last_status_code is None
    assert "localhost resolves to" in row.last_error and "loopback" in row.last_error, row.last_error
    metadata = rig.courier(resolve=lambda host, port: ["93.184.216.34", "169.254.169.254"])  # one bad address
    assert metadata.deliver_due(now=rig.clock.at(row.next_attempt_at)) == 1
    [row] = rig.rows()
    assert "169.254.169.254" in row.last_error and "metadata" in row.last_error, row.last_error
    assert rig.receiver.requests == []  # refused before any connection


def test_a_redirect_is_not_followed_and_a_silent_receiver_is_cut_off(rig: Rig) -> None:
    rig.settings = rig.settings.model_copy(update={"webhook_timeout": 1.0})
    rig.register()
    rig.finish_a_plan()
    courier = rig.courier()
    rig.receiver.answer = 307
    assert courier.deliver_due(now=rig.clock.now) == 1
    [row] = rig.rows()
    assert (row.last_status_code, row.last_error) == (307, "HTTP 307 Temporary Redirect: redirects are not followed")
    assert len(rig.receiver.requests) == 1  # its Location was not followed
    rig.receiver.hold = True  # it reads the request and never answers
    started = utcnow()
    assert courier.deliver_due(now=rig.clock.at(row.next_attempt_at)) == 1
    assert utcnow() - started < timedelta(seconds=1 + 2)  # the timeout (1 s) ends it, whatever the receiver does
    rig.receiver.release()
    [row] = rig.rows()
    assert row.status == "pending" and row.attempts == 2 and row.last_error.startswith("no answer within 1 s")


def test_after_a_rotation_both_secrets_sign_until_the_previous_one_expires(rig: Rig) -> None:
    endpoint = rig.register()
    old = rig.secrets.pop()
    rotated = rig.hooks.rotate(endpoint, previous_for=timedelta(hours=1), principal=ACME)
    assert rotated.endpoint.secret_version == 2 and rotated.secret != old
    rig.secrets[:] = [old]  # a receiver that has not switched yet
    rig.finish_a_plan()
    plan_id = rig.finish_a_plan()
    courier = rig.courier()
    assert courier.deliver_due(now=rig.clock.now) == 2
    rig.secrets[:] = [rotated.secret]  # … and one that has
    outbox.append_event(rig.planes.db, plan_id, NewEvent("plan_finished", {"status": "completed"}))
    assert courier.deliver_due(now=rig.clock.at(utcnow())) == 1
    assert [r.valid for r in rig.receiver.requests] == [True, True, True]
    outbox.append_event(rig.planes.db, plan_id, NewEvent("plan_finished", {"status": "completed"}))
    rig.secrets[:] = [old]
    assert courier.deliver_due(now=rig.clock.at(rig.clock.now + timedelta(hours=1))) == 1  # the old one expired
    assert rig.receiver.requests[-1].answered == 401 and not rig.receiver.requests[-1].valid


def test_what_a_receiver_says_is_never_stored_nor_logged(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    rig.register()
    rig.finish_a_plan()
    rig.receiver.answer, rig.receiver.reply = 400, LEAK
    rig.receiver.reply_headers = {"X-Receiver-Says": LEAK.decode()}
    with caplog.at_level(logging.DEBUG):
        rig.courier().deliver_due(now=rig.clock.now)
    [row] = rig.rows()
    assert row.last_error == "HTTP 400 Bad Request"
    assert f"webhook delivery {row.id}" in caplog.text and "HTTP 400 Bad Request" in caplog.text
    assert "Quartermaster" not in caplog.text and "/hooks/conclave" not in caplog.text  # nor the URL's path
    with rig.planes.db.transaction() as s:
        stored = json.dumps([[str(v) for v in r] for r in s.execute(select(WebhookDelivery)).all()])
    assert "Quartermaster" not in stored and "sk-receiver" not in stored


def test_embedded_the_process_that_runs_the_plan_delivers_its_webhooks(home: Any) -> None:
    from orchestrator.client.conclave import Conclave

    receiver = Receiver().start()
    try:
        settings = Settings(home=home, offline_latency=0.0, reconcile_interval=0.5,
                            webhook_secret_key=SecretStr(KEY), webhook_interval=0.1,
                            webhook_urls=[f"http://127.0.0.1:{receiver.port}"])
        with Conclave(settings) as conclave:
            made = conclave.create_webhook(receiver.url, ["plan_finished"])
            receiver.secrets.append(made.secret)
            plan_id = conclave.submit(SMALL_BOARD)
            assert conclave.wait(plan_id, timeout=60).status == "completed"
            deadline = utcnow() + timedelta(seconds=10)
            while not receiver.requests and utcnow() < deadline:
                receiver.arrived.wait(0.1)
            [got] = receiver.requests
            assert got.valid and got.json()["plan_id"] == plan_id and got.answered == 200
    finally:
        receiver.stop()


def test_the_api_counts_pending_deliveries_and_those_no_courier_took(rig: Rig) -> None:
    from orchestrator.api.ops import scrape
    from tests.unit.test_metrics import samples

    def gauges() -> tuple[float, float]:
        got = samples(scrape(rig.planes.db).decode())
        return got[("conclave_webhook_deliveries_pending", ())], got[("conclave_webhook_deliveries_overdue", ())]

    rig.register()
    rig.finish_a_plan()
    rig.finish_a_plan()
    assert gauges() == (2, 0)  # due just now
    with rig.planes.db.transaction() as s:  # … and then for two minutes, with no courier running
        for row in s.scalars(select(WebhookDelivery)):
            row.next_attempt_at = utcnow() - timedelta(minutes=2)
    assert gauges() == (2, 2)
    rig.courier().deliver_due()
    assert gauges() == (0, 0)
