"""An API process's event-stream slots are shared fairly (issue 20): against a real
``conclave api`` subprocess with tokens of two tenants, one tenant's watchers take at most
its share (``CONCLAVE_MAX_STREAMS_PER_TENANT``) and another tenant still gets a stream;
the process's own limit holds across tenants; a stream whose token is revoked ends, and
its slot is free again. No worker runs, so the plans stay running and their streams open."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from storage import connect, principals
from tests.e2e.test_api import api, assert_error, board  # noqa: F401  (api: the API server fixture)
from tests.e2e.test_api_principals import _auth, _tokens

ADMIN_TOKEN = "admin-token-for-the-stream-share-0123456789"


@contextlib.contextmanager
def opened(client: httpx.Client, url: str, token: str) -> Iterator[tuple[httpx.Response, Iterator[str]]]:
    """An event stream held open: its response and its lines, the first (``retry:``) read."""
    with client.stream("GET", url, headers=_auth(token)) as response:
        lines = response.iter_lines()
        if response.status_code == 200:
            assert next(lines).startswith("retry:")
        yield response, lines


def refused(client: httpx.Client, url: str, token: str) -> dict[str, Any]:
    with opened(client, url, token) as (response, _):
        response.read()
        return assert_error(response, 429)


@pytest.mark.timeout(120)
def test_a_tenant_takes_at_most_its_share_of_the_streams_and_a_revoked_token_ends_its_own(
        api: Any, settings: Any) -> None:  # noqa: F811
    tokens = _tokens(settings.database_url)
    server = api(env={"CONCLAVE_AUTH": "tokens", "CONCLAVE_API_TOKEN": ADMIN_TOKEN,
                      "CONCLAVE_MAX_STREAMS": "3", "CONCLAVE_MAX_STREAMS_PER_TENANT": "2"})
    acme_rw, acme_ro, globex = (tokens[n][1] for n in ("acme-rw", "acme-ro", "globex-rw"))
    plans = {}
    for name, token in (("acme", acme_rw), ("globex", globex)):
        r = httpx.post(f"{server.url}/v1/plans", json=board(title=f"{name} board"), headers=_auth(token))
        assert r.status_code == 201, r.text
        plans[name] = f"{server.url}/v1/plans/{r.json()['plan_id']}/events"

    with httpx.Client(timeout=httpx.Timeout(30.0)) as client, contextlib.ExitStack() as held:
        held.enter_context(opened(client, plans["acme"], acme_rw))
        _, ro_lines = held.enter_context(opened(client, plans["acme"], acme_ro))

        # acme holds its share: a third acme stream is refused, naming the setting
        err = refused(client, plans["acme"], acme_rw)
        assert err["code"] == "request.too_many_streams"
        assert "tenant 'acme'" in err["message"] and "CONCLAVE_MAX_STREAMS_PER_TENANT=2" in err["message"]

        # globex, whose watchers acme could otherwise have crowded out, gets the last slot
        response, _ = held.enter_context(opened(client, plans["globex"], globex))
        assert response.status_code == 200
        # and then the process is full, for every tenant
        err = refused(client, plans["globex"], globex)
        assert "the limit is 3 (CONCLAVE_MAX_STREAMS)" in err["message"]

        # a revoked token's stream ends (within the stream's re-check), and its slot is free again
        db = connect(settings.database_url)
        try:
            principals.revoke(db, tokens["acme-ro"][0])
        finally:
            db.dispose()
        list(ro_lines)  # returns only when the server ends the stream: the plan itself never ends here
        deadline = time.monotonic() + 10
        while True:  # the slot is given back once the server has closed its side
            with opened(client, plans["acme"], acme_rw) as (again, _):
                if again.status_code == 200 or time.monotonic() > deadline:
                    break
            time.sleep(0.2)
        assert again.status_code == 200
        # the revoked token itself opens nothing any more
        with opened(client, plans["acme"], acme_ro) as (gone, _):
            gone.read()
            assert assert_error(gone, 401)
    assert "api.stream_revoked" in server.log()
