"""The webhook routes, in process over ``httpx`` on the real Postgres, with tokens required:

- another tenant cannot see, read, rotate, delete or read the deliveries of an endpoint (404,
  as a missing one), and never receives a delivery of another tenant's plans; an admin sees
  every tenant's;
- only the ``webhooks`` scope (or ``admin``) manages them: a read or write token is refused;
- a wrong body is a 422 naming the field (a metadata, unspecified, multicast or unlisted
  private address, another scheme); without the operator's key registration is a 409;
- the signing secret is in the answer to the registration (and to a rotation) and nowhere
  else: no other answer, no stored row, no log line — while a real delivery is made.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy import text

from orchestrator.api.app import create_app
from orchestrator.client.local import LocalBackend
from orchestrator.core.settings import Settings
from orchestrator.webhooks.courier import Courier
from storage import plans, principals
from storage.identity import ADMIN, READ, WEBHOOKS, WRITE, Principal
from storage.status import PlanStatus
from tests.integration.durability import board_plan
from tests.unit.test_eval_routes import Shared
from tests.unit.test_one_client import InProcessTransport
from tests.webhook_receiver import Receiver

KEY = "an operator key of at least 32 characters, for tests"
HOOK = "https://hooks.example.com/conclave"


@dataclass
class Api:
    local: LocalBackend
    http: httpx.Client
    tokens: dict[str, str]
    receivers: dict[str, Receiver]

    def call(self, who: str | None, method: str, path: str, headers: dict[str, str] | None = None,
             **kwargs: Any) -> httpx.Response:
        sent = {**(headers or {}), **({"Authorization": f"Bearer {self.tokens[who]}"} if who else {})}
        return self.http.request(method, path, headers=sent, **kwargs)

    def finished_plan(self, tenant: str) -> str:
        """A plan of ``tenant`` that ends now: its ``plan_finished`` event is stored by its builder."""
        writer = Principal(f"w-{tenant}", f"{tenant} ci", tenant, (READ, WRITE))
        plan_id = self.local.coordinator.submit(board_plan(f"{tenant} plan", words=8), principal=writer).plan_id
        assert plans.finish_plan(self.local.db, plan_id, PlanStatus.COMPLETED) is not None
        return plan_id


def open_api(settings: Settings, receivers: dict[str, Receiver]) -> Iterator[Api]:
    local = LocalBackend(settings, worker=False)
    transport = InProcessTransport(create_app(settings, local=local))
    tokens = {name: principals.create(local.db, tenant=tenant, scopes=scopes)[1] for name, tenant, scopes in (
        ("acme", "acme", [WEBHOOKS]), ("globex", "globex", [WEBHOOKS]), ("reader", "acme", [READ]),
        ("writer", "acme", [READ, WRITE]), ("admin", "ops", [ADMIN]))}
    http = httpx.Client(base_url="http://conclave.test", transport=Shared(transport))  # closing it leaves the app
    try:
        yield Api(local, http, tokens, receivers)
    finally:
        http.close()
        transport.close()
        local.close()


@pytest.fixture()
def receivers() -> Iterator[dict[str, Receiver]]:
    found = {"acme": Receiver(now=None).start(), "globex": Receiver(now=None).start()}
    yield found
    for r in found.values():
        r.stop()


@pytest.fixture()
def hooked(settings: Settings, receivers: dict[str, Receiver]) -> Settings:
    allowed = ["https://hooks.example.com", "http://10.0.0.5:8080", *(f"http://127.0.0.1:{r.port}"
                                                                      for r in receivers.values())]
    return settings.model_copy(update={"webhook_secret_key": SecretStr(KEY), "webhook_urls": allowed})


@pytest.fixture()
def api(hooked: Settings, receivers: dict[str, Receiver]) -> Iterator[Api]:
    yield from open_api(hooked, receivers)


def create(api: Api, who: str, url: str = HOOK, events: list[str] | None = None) -> dict[str, Any]:
    answer = api.call(who, "POST", "/v1/webhooks", json={"url": url, "events": events or ["plan_finished"]})
    assert answer.status_code == 201, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_another_tenant_reaches_none_of_my_endpoints_an_admin_reaches_all(api: Api) -> None:
    mine = create(api, "acme")
    theirs = create(api, "globex", events=["*"])
    assert [e["id"] for e in api.call("acme", "GET", "/v1/webhooks").json()["webhooks"]] == [mine["id"]]
    assert [e["id"] for e in api.call("globex", "GET", "/v1/webhooks").json()["webhooks"]] == [theirs["id"]]
    for method, tail in (("GET", ""), ("DELETE", ""), ("POST", "/rotate"), ("GET", "/deliveries")):
        refused = api.call("globex", method, f"/v1/webhooks/{mine['id']}{tail}")
        assert refused.status_code == 404, (method, tail, refused.text)
        assert refused.json()["error"]["code"] == "webhook.not_found"
        assert refused.json()["error"]["details"] == [{"field": "webhook_id", "message": "no such webhook"}]
    assert api.call("acme", "GET", f"/v1/webhooks/{mine['id']}").json()["secret_version"] == 1  # not rotated
    listed = api.call("admin", "GET", "/v1/webhooks").json()["webhooks"]
    assert {(e["id"], e["tenant"]) for e in listed} == {(mine["id"], "acme"), (theirs["id"], "globex")}
    assert api.call("acme", "DELETE", f"/v1/webhooks/{mine['id']}").json() == {"id": mine["id"], "deleted": True}
    assert api.call("acme", "GET", f"/v1/webhooks/{mine['id']}").status_code == 404


def test_an_endpoint_receives_only_its_own_tenants_plans(api: Api) -> None:
    endpoints = {t: create(api, t, api.receivers[t].url, ["*"]) for t in ("acme", "globex")}
    for tenant, endpoint in endpoints.items():
        api.receivers[tenant].secrets.append(endpoint["secret"])
    plan_ids = {t: api.finished_plan(t) for t in ("acme", "globex")}
    courier = Courier(api.local.db, api.local.settings)
    while courier.deliver_due():
        pass
    for tenant, endpoint in endpoints.items():
        listed = api.call(tenant, "GET", f"/v1/webhooks/{endpoint['id']}/deliveries").json()["deliveries"]
        assert [(d["plan_id"], d["event_type"], d["status"]) for d in listed] == [
            (plan_ids[tenant], "plan_finished", "delivered")]
        got = api.receivers[tenant].requests
        assert [(r.json()["plan_id"], r.json()["tenant"], r.valid) for r in got] == [(plan_ids[tenant], tenant, True)]


def test_only_the_webhooks_scope_or_admin_manages_endpoints(api: Api) -> None:
    for who in ("reader", "writer"):
        for method, path in (("POST", "/v1/webhooks"), ("GET", "/v1/webhooks")):
            refused = api.call(who, method, path, json={"url": HOOK, "events": ["plan_finished"]})
            assert refused.status_code == 403 and refused.json()["error"]["code"] == "auth.forbidden"
            assert refused.json()["error"]["details"] == [{"field": "Authorization",
                                                           "message": "missing scope webhooks"}]
    assert api.call(None, "GET", "/v1/webhooks").status_code == 401
    assert api.call("admin", "GET", "/v1/webhooks").json() == {"webhooks": []}  # nothing was made
    assert create(api, "admin")["tenant"] == "ops"  # an admin registers in its own tenant


@pytest.mark.parametrize(("body", "field", "says"), [
    ({"url": "http://169.254.169.254/latest/meta-data/", "events": ["plan_finished"]}, "url", "metadata"),
    ({"url": "http://metadata.google.internal/", "events": ["plan_finished"]}, "url", "metadata"),
    ({"url": "http://0.0.0.0:8080/hook", "events": ["plan_finished"]}, "url", "unspecified"),
    ({"url": "http://239.1.2.3:8080/hook", "events": ["plan_finished"]}, "url", "multicast"),
    ({"url": "http://10.0.0.9:8080/hook", "events": ["plan_finished"]}, "url", "private"),
    ({"url": "gopher://hooks.example.com/conclave", "events": ["plan_finished"]}, "url", "http or https"),
    ({"url": "https://elsewhere.example.org/", "events": ["plan_finished"]}, "url", "CONCLAVE_WEBHOOK_URLS"),
    ({"url": HOOK, "events": ["plan_finished", "chunk"]}, "events[1]", "not an event"),
    ({"url": HOOK, "events": []}, "events", "non-empty"),
    ({"url": HOOK, "events": ["plan_finished"], "secret": "mine"}, "secret", "unknown field"),
    ({"url": 7, "events": ["plan_finished"]}, "url", "string"),
    ({"events": ["plan_finished"]}, "url", "required"),
])
def test_a_wrong_registration_is_a_422_naming_the_field(api: Api, body: dict[str, Any], field: str,
                                                        says: str) -> None:
    answer = api.call("acme", "POST", "/v1/webhooks", json=body)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == "webhook.invalid" and error["details"][0]["field"] == field
    assert says in error["details"][0]["message"], error
    assert api.call("acme", "GET", "/v1/webhooks").json() == {"webhooks": []}


def test_malformed_requests_name_what_is_wrong(api: Api) -> None:
    made = create(api, "acme")
    cases = [
        (api.call("acme", "POST", "/v1/webhooks", content=b"{nope", headers={"Content-Type": "application/json"}),
         400, "body"),
        (api.call("acme", "POST", "/v1/webhooks", content=b"url: x", headers={"Content-Type": "application/yaml"}),
         415, "Content-Type"),
        (api.call("acme", "GET", "/v1/webhooks/not-an-id"), 422, "webhook_id"),
        (api.call("acme", "GET", f"/v1/webhooks/{made['id']}/deliveries?cursor=abc"), 422, "cursor"),
        (api.call("acme", "GET", f"/v1/webhooks/{made['id']}/deliveries?status=lost"), 422, "status"),
        (api.call("acme", "POST", f"/v1/webhooks/{made['id']}/rotate", json={"previous_secret_valid_for": -1}),
         422, "previous_secret_valid_for"),
    ]
    for answer, status, field in cases:
        assert answer.status_code == status, answer.text
        assert answer.json()["error"]["details"][0]["field"] == field, answer.text


def test_without_the_operators_key_registration_is_refused(settings: Settings, receivers: dict[str, Receiver]) -> None:
    for api in open_api(settings.model_copy(update={"webhook_urls": ["https://hooks.example.com"]}), receivers):
        refused = api.call("acme", "POST", "/v1/webhooks", json={"url": HOOK, "events": ["plan_finished"]})
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "webhook.not_configured"
        assert "CONCLAVE_WEBHOOK_SECRET_KEY" in refused.json()["error"]["message"]


def stored_text(api: Api) -> str:
    """Every row of every table, as text."""
    with api.local.db.engine.connect() as c:
        tables = c.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")).scalars().all()
        return json.dumps({t: [[str(v) for v in row] for row in c.execute(text(f'SELECT * FROM "{t}"'))]
                           for t in tables})


def test_the_secret_is_shown_once_and_is_in_no_row_no_other_answer_and_no_log_line(
        api: Api, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    receiver = api.receivers["acme"]
    made = create(api, "acme", receiver.url, ["*"])
    secret, endpoint = made["secret"], made["id"]
    assert secret.startswith("whsec_")
    rotated = api.call("acme", "POST", f"/v1/webhooks/{endpoint}/rotate", json={"previous_secret_valid_for": 60})
    assert rotated.status_code == 200 and rotated.headers["cache-control"] == "no-store"
    new_secret = rotated.json()["secret"]
    assert new_secret != secret and rotated.json()["secret_version"] == 2
    receiver.secrets.append(new_secret)
    api.finished_plan("acme")
    courier = Courier(api.local.db, api.local.settings)
    assert courier.deliver_due() == 1
    assert [r.valid for r in receiver.requests] == [True] and receiver.requests[0].signature.count("v1=") == 2
    answers = [api.call("acme", "GET", "/v1/webhooks"), api.call("acme", "GET", f"/v1/webhooks/{endpoint}"),
               api.call("acme", "GET", f"/v1/webhooks/{endpoint}/deliveries"), api.call("admin", "GET", "/v1/webhooks"),
               api.call("acme", "GET", "/openapi.json")]
    assert all(a.status_code == 200 for a in answers)
    assert "delivered" in answers[2].text
    rows = stored_text(api)
    assert endpoint in rows and "webhook_deliveries" in rows
    logged = caplog.text
    assert "webhook delivery" in logged  # the courier said what it did …
    for value in (secret, new_secret, secret.removeprefix("whsec_"), KEY):  # … and none of these anywhere
        assert value not in rows
        assert value not in logged
        assert all(value not in a.text for a in answers)


def test_the_python_client_makes_the_same_calls_over_http_as_on_the_database(api: Api) -> None:
    from orchestrator.client.conclave import Conclave
    from orchestrator.core.errors import InvalidWebhook, WebhookNotFound

    remote = Conclave.connect("http://conclave.test", token=api.tokens["acme"], transport=api.http._transport)
    local = Conclave(backend=api.local)
    try:
        made = remote.create_webhook(api.receivers["acme"].url, ["plan_finished"], description="from the client")
        assert made.secret.startswith("whsec_") and made.endpoint.tenant == "acme"
        assert remote.get_webhook(made.endpoint.id) == local.get_webhook(made.endpoint.id) == made.endpoint
        assert remote.list_webhooks() == [made.endpoint]
        api.receivers["acme"].secrets.append(made.secret)
        plan_id = api.finished_plan("acme")
        Courier(api.local.db, api.local.settings).deliver_due()
        over_http, on_db = remote.webhook_deliveries(made.endpoint.id), local.webhook_deliveries(made.endpoint.id)
        assert over_http == on_db and [d.plan_id for d in on_db.deliveries] == [plan_id]
        assert on_db.deliveries[0].status == "delivered" and on_db.next_cursor is None
        rotated = remote.rotate_webhook_secret(made.endpoint.id, previous_valid_for=0)
        assert rotated.secret != made.secret and rotated.endpoint.previous_valid_until is None
        with pytest.raises(InvalidWebhook) as wrong:
            remote.create_webhook("http://169.254.169.254/", ["plan_finished"])
        assert wrong.value.details[0]["field"] == "url"
        remote.delete_webhook(made.endpoint.id)
        with pytest.raises(WebhookNotFound):
            local.get_webhook(made.endpoint.id)
    finally:
        remote.close()
