"""Principals over HTTP, against a real ``conclave api`` subprocess and Postgres: tenants
see only their own plans (another tenant's is a 404, by plan id and by task id), scopes
gate what a token may do (403), a revoked token is refused at once while its rotated
successor works, and submit, patch, resume and cancel are recorded with who did them.
Then the listing (filters, cursor pages) and PATCH semantics, as a client sees them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from storage import connect, outbox, principals
from tests.e2e.test_api import api, assert_error, board  # noqa: F401  (api: the API server fixture)

ADMIN_TOKEN = "admin-token-for-the-api-0123456789"
GHOST = "00000000-0000-4000-8000-000000000000"  # a plan id no plan has


def _tokens(database_url: str) -> dict[str, tuple[str, str]]:
    """name -> (principal id, token), made as ``conclave tokens create`` makes them."""
    db = connect(database_url)
    try:
        made = {}
        for name, tenant, scopes in (("acme-rw", "acme", ["plans:read", "plans:write"]),
                                     ("acme-ro", "acme", ["plans:read"]),
                                     ("acme-wo", "acme", ["plans:write"]),
                                     ("globex-rw", "globex", ["plans:read", "plans:write"])):
            record, token = principals.create(db, tenant=tenant, scopes=scopes, name=name)
            made[name] = (record.id, token)
        return made
    finally:
        db.dispose()


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_tenants_scopes_revocation_and_the_audit_trail(api: Any, settings: Any) -> None:  # noqa: F811
    tokens = _tokens(settings.database_url)
    server = api(env={"CONCLAVE_AUTH": "tokens", "CONCLAVE_API_TOKEN": ADMIN_TOKEN})
    url = server.url
    acme, acme_ro, acme_wo, globex = (_auth(tokens[n][1]) for n in ("acme-rw", "acme-ro", "acme-wo", "globex-rw"))

    r = httpx.post(f"{url}/v1/plans", json=board(task_id="crm-7", title="Acme pricing"), headers=acme)
    assert r.status_code == 201, r.text
    plan_id = r.json()["plan_id"]

    # another tenant: not found, by plan id and by task id, on every route; its own task id is free
    for method, path in (("GET", f"/v1/plans/{plan_id}"), ("GET", "/v1/plans/crm-7"),
                         ("GET", f"/v1/plans/{plan_id}/result"), ("GET", f"/v1/plans/{plan_id}/events"),
                         ("GET", f"/v1/plans/{plan_id}/phases/opening/content"),
                         ("POST", f"/v1/plans/{plan_id}/cancel"), ("POST", f"/v1/plans/{plan_id}/resume"),
                         ("PATCH", f"/v1/plans/{plan_id}")):
        body = {"title": "x"} if method == "PATCH" else None
        r = httpx.request(method, url + path, headers=globex, json=body)
        assert assert_error(r, 404)["code"] == "plan.not_found", (path, r.text)
        # exactly what a plan that does not exist answers: nothing tells the two apart
        ghost_path = path.replace(plan_id, GHOST).replace("crm-7", "crm-none")
        ghost = httpx.request(method, url + ghost_path, headers=globex, json=body)
        assert (ghost.status_code, ghost.text.replace(GHOST, plan_id).replace("crm-none", "crm-7")) == (404, r.text)
    r = httpx.post(f"{url}/v1/plans", json=board(task_id="crm-7", title="Globex pricing"), headers=globex)
    assert r.status_code == 201, r.text  # task ids are scoped to their tenant
    globex_plan = r.json()["plan_id"]
    assert globex_plan != plan_id
    assert httpx.get(f"{url}/v1/plans/crm-7", headers=acme).json()["id"] == plan_id
    assert httpx.get(f"{url}/v1/plans/crm-7", headers=globex).json()["id"] == globex_plan
    assert [p["id"] for p in httpx.get(f"{url}/v1/plans", headers=acme).json()["plans"]] == [plan_id]
    # the admin sees every tenant; a task id used by two tenants is a conflict for it, never a pick
    assert {p["id"] for p in httpx.get(f"{url}/v1/plans", headers=_auth(ADMIN_TOKEN)).json()["plans"]} == {
        plan_id, globex_plan}
    assert_error(httpx.get(f"{url}/v1/plans/crm-7", headers=_auth(ADMIN_TOKEN)), 409)

    # scopes: read-only may read, not write; write-only may write, not read
    assert httpx.get(f"{url}/v1/plans/{plan_id}", headers=acme_ro).status_code == 200
    for method, path, body in (("POST", "/v1/plans", board()), ("POST", f"/v1/plans/{plan_id}/cancel", None),
                               ("POST", f"/v1/plans/{plan_id}/resume", None),
                               ("PATCH", f"/v1/plans/{plan_id}", {"title": "no"})):
        err = assert_error(httpx.request(method, url + path, headers=acme_ro, json=body), 403)
        assert err["code"] == "auth.forbidden" and "plans:write" in err["message"]
    assert assert_error(httpx.get(f"{url}/v1/plans/{plan_id}", headers=acme_wo), 403)["code"] == "auth.forbidden"
    assert_error(httpx.get(f"{url}/metrics", headers=acme), 403)  # every tenant's counts: admin only
    assert httpx.get(f"{url}/metrics", headers=_auth(ADMIN_TOKEN)).status_code == 200

    # what each did is on record, with who did it and never a token
    r = httpx.patch(f"{url}/v1/plans/{plan_id}", json={"labels": ["q3"]}, headers=acme_wo)
    assert r.status_code == 200, r.text
    assert httpx.post(f"{url}/v1/plans/{plan_id}/resume", headers=acme_wo).status_code == 200
    assert httpx.post(f"{url}/v1/plans/{plan_id}/cancel", headers=acme).status_code == 200
    db = connect(settings.database_url)
    try:
        stored = outbox.list_events(db, plan_id)
        who = {e.type: e.data.get("principal") or e.data.get("actor") for e in stored
               if e.type in ("plan_submitted", "plan_updated", "resume_requested", "cancel_requested")}
        assert who == {"plan_submitted": {"id": tokens["acme-rw"][0], "name": "acme-rw"},
                       "plan_updated": {"id": tokens["acme-wo"][0], "name": "acme-wo"},
                       "resume_requested": {"id": tokens["acme-wo"][0], "name": "acme-wo"},
                       "cancel_requested": {"id": tokens["acme-rw"][0], "name": "acme-rw"}}
        assert not any(tok in str(e.data) for e in stored for _, tok in tokens.values())

        # rotation: a second token of the tenant works alongside; revoking the first refuses it at once
        _, rotated = principals.create(db, tenant="acme", scopes=["plans:read"], name="acme-ro-2")
        principals.revoke(db, tokens["acme-ro"][0])
    finally:
        db.dispose()
    err = assert_error(httpx.get(f"{url}/v1/plans/{plan_id}", headers=acme_ro), 401)
    assert err["details"] == [{"field": "Authorization", "message": "unknown or revoked token"}]
    assert httpx.get(f"{url}/v1/plans/{plan_id}", headers=_auth(rotated)).status_code == 200
    tampered = tokens["acme-rw"][1][:-1] + ("A" if tokens["acme-rw"][1][-1] != "A" else "B")
    assert_error(httpx.get(f"{url}/v1/plans/{plan_id}", headers=_auth(tampered)), 401)
    log = server.log()
    assert not any(tok in log for _, tok in tokens.values()) and ADMIN_TOKEN not in log


def test_listing_filters_and_pages_without_gaps_or_repeats(api: Any) -> None:  # noqa: F811
    url = api().url
    made = []
    for i in range(5):
        r = httpx.post(f"{url}/v1/plans", json=board(title=f"plan {i}", task_id=f"list-{i}",
                                                    labels=["even" if i % 2 == 0 else "odd", "q3"]))
        assert r.status_code == 201, r.text
        made.append(r.json()["plan_id"])
    httpx.post(f"{url}/v1/plans/{made[1]}/cancel").raise_for_status()

    seen, cursor, pages = [], None, 0
    while True:
        r = httpx.get(f"{url}/v1/plans", params={"limit": 2, **({"cursor": cursor} if cursor else {})})
        assert r.status_code == 200, r.text
        page = r.json()
        seen += [p["id"] for p in page["plans"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(made)) and pages == 3  # newest first, each exactly once

    def ids(**params: Any) -> list[str]:
        r = httpx.get(f"{url}/v1/plans", params=params)
        assert r.status_code == 200, r.text
        return [p["id"] for p in r.json()["plans"]]

    assert ids(label="even") == [made[4], made[2], made[0]]
    assert ids(label=["odd", "q3"]) == [made[3], made[1]]
    assert ids(label="nope") == []
    assert ids(status="cancelled") == [made[1]]
    assert set(ids(status=["running", "cancelled"])) == set(made)
    assert ids(task_id="list-3") == [made[3]]
    listed = httpx.get(f"{url}/v1/plans", params={"task_id": "list-3"}).json()["plans"][0]
    assert listed["labels"] == ["odd", "q3"] and listed["title"] == "plan 3" and listed["tenant"] == "default"
    assert ids(created_after="2999-01-01T00:00:00Z") == []
    assert set(ids(created_before="2999-01-01T00:00:00")) == set(made)  # no zone: UTC

    for params, field in (({"status": "sleeping"}, "status[0]"), ({"limit": 0}, "limit"), ({"limit": 201}, "limit"),
                          ({"cursor": "not-a-cursor"}, "cursor"), ({"created_after": "yesterday"}, "created_after"),
                          ({"label": "bad label"}, "label"), ({"task_id": "a\x00b"}, "task_id")):
        err = assert_error(httpx.get(f"{url}/v1/plans", params=params), 422)
        assert err["details"][0]["field"] == field, (params, err)


def test_patch_changes_only_what_was_sent_and_validates_the_merged_plan(api: Any, tmp_path: Path) -> None:  # noqa: F811
    url = api().url
    r = httpx.post(f"{url}/v1/plans", json=board(title="Before", labels=["q3"], max_debates=1))
    plan_id = r.json()["plan_id"]

    r = httpx.patch(f"{url}/v1/plans/{plan_id}", json={"title": "After"})
    assert r.status_code == 200, r.text
    view = r.json()
    assert (view["title"], view["labels"]) == ("After", ["q3"])  # omitted: unchanged
    r = httpx.patch(f"{url}/v1/plans/{plan_id}", json={"labels": None, "max_debates": 3})
    assert r.status_code == 200 and r.json()["labels"] == []  # null clears a nullable field
    got = httpx.get(f"{url}/v1/plans/{plan_id}").json()
    assert (got["title"], got["labels"]) == ("After", [])

    for body, field in (({"title": None}, "title"), ({"max_debates": None}, "max_debates"),
                        ({"title": ""}, "title"), ({"max_debates": 11}, "max_debates"),
                        ({"max_debates": True}, "max_debates"), ({"labels": ["a", "a"]}, "labels"),
                        ({"labels": ["ok", "not ok"]}, "labels[1]"), ({"rounds": 3}, "rounds"), ({}, "body")):
        err = assert_error(httpx.patch(f"{url}/v1/plans/{plan_id}", json=body), 422)
        assert err["details"][0]["field"] == field, (body, err)
    assert httpx.get(f"{url}/v1/plans/{plan_id}").json()["title"] == "After"  # nothing stored by a refusal
    assert_error(httpx.patch(f"{url}/v1/plans/{plan_id}", content=b"[1]",
                             headers={"Content-Type": "application/json"}), 422)

    httpx.post(f"{url}/v1/plans/{plan_id}/cancel").raise_for_status()
    err = assert_error(httpx.patch(f"{url}/v1/plans/{plan_id}", json={"max_debates": 2}), 409)
    assert err["details"][0]["field"] == "max_debates"
    assert httpx.patch(f"{url}/v1/plans/{plan_id}", json={"title": "Archived"}).status_code == 200


def test_strict_plan_fields_and_the_published_contract(api: Any) -> None:  # noqa: F811
    url = api().url
    for change, field in (({"rounds": True}, "rounds"), ({"rounds": "2"}, "rounds"),
                          ({"max_debates": 1.5}, "max_debates"), ({"labels": "q3"}, "labels")):
        err = assert_error(httpx.post(f"{url}/v1/plans", json=board(**change)), 422)
        assert err["details"][0]["field"] == field, (change, err)

    schema = httpx.get(f"{url}/openapi.json").json()
    paths = schema["paths"]
    assert {"/v1/plans", "/v1/plans/{plan_id}", "/v1/plans/{plan_id}/result", "/v1/plans/{plan_id}/resume",
            "/v1/plans/{plan_id}/cancel", "/v1/plans/{plan_id}/events",
            "/v1/plans/{plan_id}/phases/{key}/content"} <= set(paths)
    assert set(paths["/v1/plans"]) == {"get", "post"} and "patch" in paths["/v1/plans/{plan_id}"]
    components = schema["components"]["schemas"]
    assert paths["/v1/plans"]["post"]["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Plan"}
    assert {"BoardPlan", "TeamPlan", "PlanView", "PlanPage", "ErrorResponse", "PlanUpdate"} <= set(components)
    assert paths["/v1/plans/{plan_id}"]["get"]["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/PlanView"}
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert httpx.get(f"{url}/docs").status_code == 200
