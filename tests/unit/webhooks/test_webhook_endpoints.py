"""A tenant's endpoints as the control plane keeps them (over SQLite): another tenant's
endpoint is a missing one for every operation, an admin (or the operator) reaches every
tenant's; and neither a signing secret nor the operator's key can reach a log line."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from pydantic import SecretStr

from orchestrator.core.errors import WebhookNotFound
from orchestrator.logs.redaction import Redactor, secrets_of
from orchestrator.webhooks.endpoints import WebhookEndpoints
from storage.identity import ADMIN, WEBHOOKS, Principal
from tests.unit.planes import Planes

KEY = "the operator's webhook key, 32 characters or more"
URL = "https://hooks.example.com/conclave"
ACME = Principal("p-acme", "acme hooks", "acme", (WEBHOOKS,))
GLOBEX = Principal("p-globex", "globex hooks", "globex", (WEBHOOKS,))
OPS = Principal("p-ops", "ops", "ops", (ADMIN,))


@pytest.fixture()
def hooks(planes: Planes) -> WebhookEndpoints:
    settings = planes.settings.model_copy(update={"webhook_secret_key": SecretStr(KEY),
                                                   "webhook_urls": ["https://hooks.example.com"]})
    return WebhookEndpoints(planes.db, settings)


def test_another_tenants_endpoint_is_missing_for_every_operation(hooks: WebhookEndpoints) -> None:
    mine = hooks.create(URL, ["plan_finished"], principal=ACME).endpoint
    theirs = hooks.create(URL, ["*"], principal=GLOBEX).endpoint
    assert [e.id for e in hooks.list_endpoints(principal=ACME)] == [mine.id]
    for operation in (lambda: hooks.get(mine.id, principal=GLOBEX), lambda: hooks.delete(mine.id, principal=GLOBEX),
                      lambda: hooks.rotate(mine.id, principal=GLOBEX),
                      lambda: hooks.deliveries(mine.id, principal=GLOBEX)):
        with pytest.raises(WebhookNotFound) as missing:
            operation()
        assert missing.value.details == [{"field": "webhook_id", "message": "no such webhook"}]
    assert hooks.get(mine.id, principal=ACME).secret_version == 1  # the refused rotation changed nothing
    assert {e.id for e in hooks.list_endpoints(principal=OPS)} == {mine.id, theirs.id}
    assert {e.id for e in hooks.list_endpoints()} == {mine.id, theirs.id}  # the operator: every tenant
    assert hooks.get(theirs.id, principal=OPS).tenant == "globex"
    hooks.delete(mine.id, principal=ACME)
    assert [e.id for e in hooks.list_endpoints(principal=OPS)] == [theirs.id]


def test_a_rotation_gives_a_new_secret_and_says_until_when_the_old_one_signs(hooks: WebhookEndpoints) -> None:
    made = hooks.create(URL, ["plan_finished"], principal=ACME)
    again = hooks.rotate(made.endpoint.id, previous_for=timedelta(hours=2), principal=ACME)
    assert again.secret != made.secret and again.endpoint.secret_version == 2
    assert again.endpoint.previous_valid_until is not None and again.endpoint.rotated_at is not None
    assert again.endpoint.previous_valid_until - again.endpoint.rotated_at == timedelta(hours=2)
    at_once = hooks.rotate(made.endpoint.id, previous_for=timedelta(0), principal=ACME)
    assert at_once.endpoint.secret_version == 3 and at_once.endpoint.previous_valid_until is None
    shown = hooks.get(made.endpoint.id, principal=ACME).to_dict()
    assert "secret" not in shown and "whsec_" not in str(shown)


def test_a_signing_secret_and_the_operators_key_never_reach_a_log_line(hooks: WebhookEndpoints,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    secret = hooks.create(URL, ["plan_finished"], principal=ACME).secret
    redact = Redactor(secrets_of(hooks.settings))
    line = f"receiver said: secret {secret} was wrong; key={KEY!s} and {KEY}"
    cleaned = redact(line)
    assert secret not in cleaned and secret.removeprefix("whsec_") not in cleaned and KEY not in cleaned
    assert "whsec_***" in cleaned
    with caplog.at_level(logging.DEBUG):
        hooks.rotate(hooks.list_endpoints()[0].id, principal=ACME)
    assert secret not in caplog.text and KEY not in caplog.text
