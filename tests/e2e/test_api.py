"""The HTTP API end to end: a real ``conclave api`` (uvicorn) subprocess on 127.0.0.1,
real Postgres and Redis, real worker subprocesses, httpx as the client."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import yaml

from tests.conftest import ROOT, settings_env, terminate

BOARD_YAML = (ROOT / "examples" / "board.yaml").read_text()
CONCLAVE = str(Path(sys.executable).parent / "conclave")
SECRET = "sk-live-9f8e7d6c5b4a39281706f5e4d3c2b1a0"
TOKEN = "t0ken-for-the-api-0123456789abcdef"


def board(**changes: Any) -> dict[str, Any]:
    plan: dict[str, Any] = yaml.safe_load(BOARD_YAML)
    plan.update(changes)
    return plan


class ApiServer:
    """``conclave api --host 127.0.0.1 --port N`` as a subprocess.

    A cluster API requires tokens; a test about something else runs it with
    ``CONCLAVE_AUTH=off`` (the operator's explicit opt-out) unless its ``env`` says
    how to authenticate."""

    def __init__(self, settings: Any, log_dir: Path, env: dict[str, str] | None = None) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"api-{self.port}.log"
        full_env = settings_env(settings)
        env = dict(env or {})
        if "CONCLAVE_AUTH" not in env and "CONCLAVE_API_TOKEN" not in env:
            env["CONCLAVE_AUTH"] = "off"
        full_env.update(env)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([CONCLAVE, "api", "--host", "127.0.0.1", "--port", str(self.port)],
                                         cwd=ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"api exited: {self.log()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"api not up in 30s: {self.log()[-2000:]}")

    def stop(self) -> None:
        terminate(self.proc)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture()
def api(settings: Any, tmp_path: Path) -> Iterator[Any]:
    """Factory: ``api(env={...})`` starts an API server; all are stopped at teardown."""
    started: list[ApiServer] = []

    def start(*, env: dict[str, str] | None = None, settings_: Any = None) -> ApiServer:
        server = ApiServer(settings_ or settings, tmp_path, env)
        started.append(server)
        return server

    yield start
    for s in started:
        s.stop()
    for s in started:
        log = s.log()
        assert "Traceback" not in log, log[-3000:]


def sse(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """Parse a Server-Sent Events body into {"id", "event", "data"} dicts."""
    event: dict[str, Any] = {}
    for line in response.iter_lines():
        if not line:
            if "data" in event:
                event["data"] = json.loads(event["data"])
                yield event
            event = {}
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            event[name] = event["data"] + "\n" + value if name == "data" and "data" in event else value


def follow(url: str, plan_id: str, *, headers: dict[str, str] | None = None, params: dict[str, str] | None = None,
           timeout: float = 90) -> list[dict[str, Any]]:
    with httpx.stream("GET", f"{url}/v1/plans/{plan_id}/events", headers=headers, params=params,
                      timeout=httpx.Timeout(timeout, connect=5)) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        return list(sse(r))


def metric_samples(r: httpx.Response) -> dict[str, str]:
    """``/metrics`` as {series: value}."""
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain"), r.text
    return dict(line.rsplit(" ", 1) for line in r.text.splitlines() if line and not line.startswith("#"))


def assert_error(r: httpx.Response, status: int | None = None) -> dict[str, Any]:
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    if status is not None:
        assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json"), r.headers
    err = r.json()["error"]
    assert set(err) == {"code", "message", "details"}, err
    assert isinstance(err["code"], str) and err["code"] and err["message"]
    assert isinstance(err["details"], list) and err["details"], err
    assert any(d.get("field") for d in err["details"]), err  # names what is wrong
    assert "Traceback" not in r.text and "sqlalchemy" not in r.text.lower()
    return err


# --------------------------------------------------------------------------- the happy path


def test_board_plan_over_http_with_live_events(api: Any, workers: Any, settings: Any) -> None:
    server = api()  # no worker yet: the plan waits until the watcher below is subscribed
    yaml_body = BOARD_YAML + "task_id: api-board-1\n"
    r = httpx.post(f"{server.url}/v1/plans", content=yaml_body, headers={"Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
    body = r.json()
    assert set(body) == {"plan_id", "created", "enqueued"} and body["created"] is True
    plan_id = body["plan_id"]
    # a board is static: its first canvas carries every phase, in plan order
    assert body["enqueued"] == [p["key"] for p in httpx.get(f"{server.url}/v1/plans/{plan_id}").json()["phases"]]
    assert body["enqueued"][0] == "opening" and body["enqueued"][-1] == "final"
    assert r.headers["location"] == f"/v1/plans/{plan_id}"
    waiting = metric_samples(httpx.get(f"{server.url}/metrics"))  # live gauges: the plan waits for a worker
    assert waiting["conclave_plans_running"] == "1.0" and waiting['conclave_phases{status="pending"}'] == "12.0"

    with httpx.stream("GET", f"{server.url}/v1/plans/{plan_id}/events",
                      timeout=httpx.Timeout(90, connect=5)) as live:
        assert live.status_code == 200
        feed = sse(live)
        first = next(feed)  # the stream subscribes to live chunks before its first read: nothing is missed
        workers(settings=settings.model_copy(update={"offline_latency": 0.01}))
        events = [first, *feed]
    stored = [e for e in events if "id" in e]
    chunks = [e for e in events if e.get("event") == "chunk"]
    types = [e["event"] for e in stored]
    assert types[0] == "plan_submitted" and types[-1] == "plan_finished", types
    assert stored[-1]["data"]["data"]["status"] == "completed"
    assert types.count("phase_completed") == 12  # opening, 2 x (4 turns + summary), final
    ids = [int(e["id"]) for e in stored]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(e["data"]["id"] == int(e["id"]) for e in stored)
    assert chunks, "no live chunks were forwarded"
    assert all("id" not in c and c["data"]["type"] == "chunk" and c["data"]["text"] for c in chunks)

    # reconnecting after an event replays exactly the later ones (header, then ?after=)
    mid = ids[len(ids) // 2]
    again = follow(server.url, plan_id, headers={"Last-Event-ID": str(mid)})
    assert [int(e["id"]) for e in again] == [i for i in ids if i > mid]
    assert [int(e["id"]) for e in follow(server.url, plan_id, params={"after": str(ids[-2])})] == [ids[-1]]
    assert follow(server.url, plan_id, headers={"Last-Event-ID": str(ids[-1])}) == []

    view = httpx.get(f"{server.url}/v1/plans/api-board-1").json()  # by task_id
    assert view["id"] == plan_id and view["status"] == "completed" and len(view["phases"]) == 12
    assert view["usage"]["total_tokens"] > 0

    result = httpx.get(f"{server.url}/v1/plans/{plan_id}/result")
    assert result.status_code == 200 and result.json()["text"]
    content = httpx.get(f"{server.url}/v1/plans/{plan_id}/phases/r1.dana/content")
    assert content.status_code == 200 and content.json()["phase"] == "r1.dana" and content.json()["text"]
    streamed = "".join(c["data"]["text"] for c in chunks if c["data"]["phase"] == "final")
    assert streamed == result.json()["text"]  # watched live, word for word, once
    dana = "".join(c["data"]["text"] for c in chunks if c["data"]["phase"] == "r1.dana")
    assert dana == content.json()["text"]

    # idempotent resubmission (same task_id, same plan) and a conflicting one
    same = httpx.post(f"{server.url}/v1/plans", content=yaml_body, headers={"Content-Type": "application/yaml"})
    assert same.status_code == 200 and same.json() == {"plan_id": plan_id, "created": False, "enqueued": []}
    wrapped = httpx.post(f"{server.url}/v1/plans", json={"plan": board(task_id="api-board-1", rounds=1)})
    err = assert_error(wrapped, 409)
    assert err["code"] == "plan.conflict" and err["details"][0]["field"] == "task_id"

    finished = metric_samples(httpx.get(f"{server.url}/metrics"))  # a finished plan is history: not counted
    assert finished["conclave_plans_running"] == "0.0" and finished["conclave_phases_lease_expired"] == "0.0"
    assert all(v == "0.0" for k, v in finished.items() if k.startswith("conclave_phases{")), finished


def test_cancel_and_resume_routes(api: Any, workers: Any, settings: Any) -> None:
    server = api()
    plan_id = httpx.post(f"{server.url}/v1/plans", json=board()).json()["plan_id"]
    # no worker yet: 20 concurrent resumes, exactly one takes the database guard
    barrier = threading.Barrier(20)
    answers: list[httpx.Response] = []
    lock = threading.Lock()

    def resume() -> None:
        barrier.wait()
        r = httpx.post(f"{server.url}/v1/plans/{plan_id}/resume", json={"retry_failed": False}, timeout=30)
        with lock:
            answers.append(r)

    threads = [threading.Thread(target=resume) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = [r for r in answers if r.status_code == 200]
    busy = [r for r in answers if r.status_code == 409]
    assert len(ok) == 1 and len(busy) == 19, [(r.status_code, r.text) for r in answers]
    assert set(ok[0].json()) == {"plan_id", "enqueued", "retried", "status", "reason"}
    assert ok[0].json()["status"] == "running" and ok[0].json()["retried"] == []
    assert {assert_error(r)["code"] for r in busy} == {"plan.resume_in_progress"}

    assert_error(httpx.get(f"{server.url}/v1/plans/{plan_id}/result"), 409)
    assert_error(httpx.get(f"{server.url}/v1/plans/{plan_id}/phases/final/content"), 409)

    # a client that hangs up mid-stream leaves no subscription behind
    bus = redis.Redis.from_url(settings.redis_url)
    channel = f"conclave:plan:{plan_id}"
    with httpx.stream("GET", f"{server.url}/v1/plans/{plan_id}/events", timeout=30) as r:
        events = sse(r)  # keep the iterator: dropping it closes the connection
        assert next(events)["event"] == "plan_submitted"
        assert dict(bus.pubsub_numsub(channel))[channel.encode()] == 1
    deadline = time.monotonic() + 10
    while dict(bus.pubsub_numsub(channel))[channel.encode()] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert dict(bus.pubsub_numsub(channel))[channel.encode()] == 0

    # a slow worker; cancel mid-run
    workers(settings=settings.model_copy(update={"offline_latency": 0.05}))
    with httpx.stream("GET", f"{server.url}/v1/plans/{plan_id}/events", timeout=60) as r:
        seen: list[dict[str, Any]] = []
        for e in sse(r):
            seen.append(e)
            if e.get("event") == "chunk" and len([x for x in seen if x.get("event") == "chunk"]) == 1:
                c = httpx.post(f"{server.url}/v1/plans/{plan_id}/cancel")
                assert c.status_code == 200, c.text
                assert set(c.json()) == {"plan_id", "cancelled", "status"}
                assert c.json()["status"] == "running" and c.json()["cancelled"]  # queued phases
    assert seen[-1]["event"] == "plan_finished" and seen[-1]["data"]["data"]["status"] == "cancelled"
    view = httpx.get(f"{server.url}/v1/plans/{plan_id}").json()
    assert view["status"] == "cancelled" and view["cancel_requested"] is True
    err = assert_error(httpx.get(f"{server.url}/v1/plans/{plan_id}/result"), 409)
    assert err["code"] == "plan.not_ready"
    again = httpx.post(f"{server.url}/v1/plans/{plan_id}/cancel")
    assert again.status_code == 200 and again.json()["cancelled"] == []


# --------------------------------------------------------------------------- bad input


def test_bad_input_never_500(api: Any, settings: Any) -> None:
    server = api()
    url = server.url
    plan_id = httpx.post(f"{url}/v1/plans", json=board()).json()["plan_id"]
    json_h = {"Content-Type": "application/json"}
    yaml_h = {"Content-Type": "application/yaml"}
    big = json.dumps(board(question="x" * (settings.max_plan_bytes + 10)))

    def alias_bomb() -> str:  # a few hundred bytes that expand to 9**10 values
        levels = ['      l0: &l0 ["' + "x" * 50 + '"]']
        levels += [f"      l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 11)]
        return ("kind: board\ntitle: t\nquestion: q\nmoderator: {name: M, role: r}\n"
                "experts: [{name: A, role: r}]\nmodels:\n  default:\n    options:\n" + "\n".join(levels) + "\n")

    cases: list[tuple[str, str, dict[str, Any], int | None, str]] = [
        # (method, path, httpx kwargs, expected status or None for any 4xx, the field it names —
        # ending in "." for "a field under this path")
        ("POST", "/v1/plans", {"json": []}, 422, "body"),
        ("POST", "/v1/plans", {"json": "a plan"}, 422, "body"),
        ("POST", "/v1/plans", {"json": 42}, 422, "body"),
        ("POST", "/v1/plans", {"content": "null", "headers": json_h}, 422, "body"),
        ("POST", "/v1/plans", {"json": {}}, 422, "body"),
        ("POST", "/v1/plans", {"json": board(kind="committee")}, 422, "kind"),
        ("POST", "/v1/plans", {"json": {k: v for k, v in board().items() if k != "kind"}}, 422, "kind"),
        ("POST", "/v1/plans", {"json": board(title=123)}, 422, "title"),
        ("POST", "/v1/plans", {"json": board(rounds="two")}, 422, "rounds"),
        ("POST", "/v1/plans", {"json": board(rounds=99)}, 422, "rounds"),
        ("POST", "/v1/plans", {"json": board(experts=[])}, 422, "experts"),
        ("POST", "/v1/plans", {"json": board(experts=[{"name": "Dana"}])}, 422, "experts[0].role"),
        ("POST", "/v1/plans", {"json": {k: v for k, v in board().items() if k != "moderator"}}, 422, "moderator"),
        ("POST", "/v1/plans", {"json": board(colour="red")}, 422, "colour"),
        ("POST", "/v1/plans", {"json": board(models={"m": {"provider": "openai", "api_key": "sk-x"}})},
         422, "models.m.api_key"),
        ("POST", "/v1/plans", {"json": board(models={"m": {"provider": "psychic"}})}, 422, "models.m.provider"),
        ("POST", "/v1/plans", {"json": board(moderator={"name": "M", "role": "r", "model": "nope"})},
         422, "moderator.model"),
        ("POST", "/v1/plans", {"json": board(task_id="bad id with spaces")}, 422, "task_id"),
        ("POST", "/v1/plans", {"json": {"plan": board(), "priority": 1}}, 422, "priority"),
        ("POST", "/v1/plans", {"json": {"plan": "board"}}, 422, "body"),
        ("POST", "/v1/plans", {"json": {"kind": "team", "title": "t", "question": "q",
                                        "experts": [{"name": "A", "role": "r"}],
                                        "phases": [{"id": "a", "expert": "A", "prompt": "p", "depends_on": ["b"]},
                                                   {"id": "b", "expert": "A", "prompt": "p", "depends_on": ["a"]}],
                                        "synthesis": {"expert": "A"}}}, 422, "phases"),
        ("POST", "/v1/plans", {"json": board(title="nul\u0000byte")}, 422, "title"),
        ("POST", "/v1/plans", {"content": '{"kind": "board", "title": "\\ud800"}', "headers": json_h}, 422, "title"),
        ("POST", "/v1/plans", {"content": '{"kind": "board", "rounds": NaN}', "headers": json_h}, 400, "body"),
        ("POST", "/v1/plans", {"content": '{"kind": "board", "rounds": 1e999}', "headers": json_h}, 422, "rounds"),
        ("POST", "/v1/plans", {"content": '{"rounds": ' + "9" * 5000 + "}", "headers": json_h}, 400, "body"),
        ("POST", "/v1/plans", {"content": "[" * 100_000 + "]" * 100_000, "headers": json_h}, 400, "body"),
        ("POST", "/v1/plans", {"content": '{"kind": "board",', "headers": json_h}, 400, "body"),
        ("POST", "/v1/plans", {"content": "", "headers": json_h}, 400, "body"),
        ("POST", "/v1/plans", {"content": b"\xff\xfe\x00k\x00i", "headers": json_h}, 400, "body"),
        ("POST", "/v1/plans", {"content": "kind: board\ntitle: [unclosed\n", "headers": yaml_h}, 400, "body"),
        ("POST", "/v1/plans", {"content": "kind: board\n---\nkind: team\n", "headers": yaml_h}, 400, "body"),
        ("POST", "/v1/plans", {"content": "kind: board\n" + "- " * 5000, "headers": yaml_h}, 400, "body"),
        ("POST", "/v1/plans", {"content": "[" * 5000, "headers": yaml_h}, None, "body"),
        ("POST", "/v1/plans", {"content": "kind: board\n1: one\n", "headers": yaml_h}, 422, "body"),
        ("POST", "/v1/plans", {"content": "kind: board\ntitle: !!binary aGVsbG8=\n", "headers": yaml_h},
         422, "title"),
        ("POST", "/v1/plans", {"content": "kind: board\ntitle: !!python/object:os.system {}\n",
                               "headers": yaml_h}, 400, "body"),
        ("POST", "/v1/plans", {"content": alias_bomb(), "headers": yaml_h}, 413,
         "models.default.options."),
        ("POST", "/v1/plans", {"content": big, "headers": json_h}, 413, "body"),
        ("POST", "/v1/plans", {"content": json.dumps(board()), "headers": {"Content-Type": "text/plain"}},
         415, "Content-Type"),
        ("POST", "/v1/plans", {"content": json.dumps(board())}, 415, "Content-Type"),
        ("POST", "/v1/plans", {"content": json.dumps(board()),
                               "headers": {"Content-Type": "application/json; charset=latin-1"}}, 415,
         "Content-Type"),
        ("POST", "/v1/plans", {"data": {"plan": "x"}}, 415, "Content-Type"),
        ("POST", "/v1/plans", {"files": {"plan": ("b.yaml", BOARD_YAML)}}, 415, "Content-Type"),
        ("GET", "/v1/plans/no-such-plan", {}, 404, "plan_id"),
        ("GET", "/v1/plans/%00", {}, 422, "plan_id"),
        ("GET", "/v1/plans/" + "a" * 300, {}, 422, "plan_id"),
        ("GET", "/v1/plans/bad%20id", {}, 422, "plan_id"),
        ("GET", "/v1/plans/%F0%9F%9A%80", {}, 422, "plan_id"),
        ("GET", "/v1/plans/no-such-plan/result", {}, 404, "plan_id"),
        ("GET", "/v1/plans/no-such-plan/events", {}, 404, "plan_id"),
        ("GET", f"/v1/plans/{plan_id}/phases/nope/content", {}, 404, "key"),
        ("GET", f"/v1/plans/{plan_id}/phases/%00/content", {}, 422, "key"),
        ("GET", f"/v1/plans/{plan_id}/events", {"headers": {"Last-Event-ID": "abc"}}, 422, "Last-Event-ID"),
        ("GET", f"/v1/plans/{plan_id}/events", {"headers": {"Last-Event-ID": "-1"}}, 422, "Last-Event-ID"),
        ("GET", f"/v1/plans/{plan_id}/events", {"headers": {"Last-Event-ID": "9" * 25}}, 422, "Last-Event-ID"),
        ("GET", f"/v1/plans/{plan_id}/events", {"headers": {"Last-Event-ID": "9223372036854775808"}},
         422, "Last-Event-ID"),
        ("GET", f"/v1/plans/{plan_id}/events", {"params": {"after": "1.5"}}, 422, "after"),
        ("POST", f"/v1/plans/{plan_id}/resume", {"content": "not json", "headers": json_h}, 400, "body"),
        ("POST", f"/v1/plans/{plan_id}/resume", {"json": []}, 422, "body"),
        ("POST", f"/v1/plans/{plan_id}/resume", {"json": {"retry_failed": "yes"}}, 422, "retry_failed"),
        ("POST", f"/v1/plans/{plan_id}/resume", {"json": {"retry_failed": 1}}, 422, "retry_failed"),
        ("POST", f"/v1/plans/{plan_id}/resume", {"json": {"retry": True}}, 422, "retry"),
        ("POST", f"/v1/plans/{plan_id}/resume", {"content": "retry_failed=true",
                                                 "headers": {"Content-Type": "text/plain"}}, 415, "Content-Type"),
        ("POST", "/v1/plans/no-such-plan/resume", {}, 404, "plan_id"),
        ("POST", "/v1/plans/no-such-plan/cancel", {}, 404, "plan_id"),
        ("DELETE", f"/v1/plans/{plan_id}", {}, 405, "method"),
        ("PUT", "/v1/plans", {"json": board()}, 405, "method"),
        ("GET", "/v1/nothing-here", {}, 404, "path"),
    ]
    with httpx.Client(base_url=url, timeout=30) as http:
        for method, path, kwargs, status, field in cases:
            r = http.request(method, path, **kwargs)
            assert r.status_code != 500, (method, path, r.text)
            err = assert_error(r, status)
            fields = [d.get("field") for d in err["details"]]
            named = any(f == field or (field.endswith(".") and f.startswith(field)) for f in fields)
            assert named, (method, path, err)
    assert "Exception in ASGI" not in server.log()
    # the server is still healthy and the valid plan untouched
    assert httpx.get(f"{url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{url}/v1/plans/{plan_id}").json()["status"] == "running"


# --------------------------------------------------------------------------- secrets and auth


def test_secrets_never_leave_the_process(api: Any, workers: Any, settings: Any,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.llm_server import LLMServer

    monkeypatch.setenv("LEDGER_OPENAI_KEY", SECRET)  # inherited by the worker and the API
    with LLMServer() as llm:
        # the operator lets plans use this key variable and this (literal, loopback) address
        trusting = settings.model_copy(update={"allowed_key_envs": ["LEDGER_OPENAI_KEY"],
                                               "allowed_base_urls": [llm.url]})
        worker = workers(settings=trusting)
        server = api(settings_=trusting)
        model = {"provider": "openai", "base_url": llm.url, "model": "auth", "api_key_env": "LEDGER_OPENAI_KEY",
                 "max_retries": 0}
        plan = board(models={"m": model}, moderator={"name": "Morgan", "role": "Chair", "model": "m"},
                     experts=[{"name": "Dana", "role": "CFO", "model": "m"}], rounds=1)
        r = httpx.post(f"{server.url}/v1/plans", json=plan)
        assert r.status_code == 201, r.text
        plan_id = r.json()["plan_id"]
        events = follow(server.url, plan_id)
        assert any(SECRET in rec.headers.get("authorization", "") for rec in llm.requests)  # it was used
    responses = [r.text, json.dumps(events)]
    view = httpx.get(f"{server.url}/v1/plans/{plan_id}")
    assert view.json()["status"] == "failed"
    assert view.json()["phases"][0]["error_code"] == "llm.auth", view.json()["phases"][0]
    responses.append(view.text)
    for path in ("/result", "/phases/opening/content", "/phases/final/content"):
        responses.append(httpx.get(f"{server.url}/v1/plans/{plan_id}{path}").text)
    responses.append(httpx.get(f"{server.url}/metrics").text)
    responses.append(httpx.get(f"{server.url}/readyz").text)
    # a client that pastes the key into the plan is refused without an echo
    pasted = httpx.post(f"{server.url}/v1/plans", json=board(models={"m": {"api_key": SECRET}}))
    assert_error(pasted, 422)
    responses.append(pasted.text)
    as_env = httpx.post(f"{server.url}/v1/plans", json=board(models={"m": {"api_key_env": SECRET}}))
    assert_error(as_env, 422)
    responses.append(as_env.text)
    for text in responses:
        assert SECRET not in text
    assert SECRET not in server.log()
    assert SECRET not in worker.log()


def test_bearer_auth(api: Any, settings: Any) -> None:
    server = api(env={"CONCLAVE_API_TOKEN": TOKEN})
    url = server.url
    good = {"Authorization": f"Bearer {TOKEN}"}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"},
                    {"Authorization": TOKEN}, {"Authorization": "Bearer"}, {"Authorization": f"Bearer {TOKEN}x"}):
        for method, path in (("GET", "/v1/plans/x"), ("POST", "/v1/plans"), ("GET", "/v1/nothing"),
                             ("GET", "/v1/plans/x/events"), ("POST", "/v1/plans/x/resume")):
            r = httpx.request(method, url + path, headers=headers, content=b"\xff" * 10)
            err = assert_error(r, 401)
            assert err["code"] == "auth.unauthorized" and err["details"][0]["field"] == "Authorization"
            assert r.headers["www-authenticate"] == "Bearer"
    # auth is checked before the body is read: a huge body without a token is a 401, not a 413
    assert httpx.post(f"{url}/v1/plans", content=b"x" * (2 * settings.max_plan_bytes),
                      headers={"Content-Type": "application/json"}).status_code == 401
    r = httpx.post(f"{url}/v1/plans", json=board(), headers=good)
    assert r.status_code == 201, r.text
    assert httpx.get(f"{url}/v1/plans/{r.json()['plan_id']}", headers=good).status_code == 200
    assert httpx.get(f"{url}/v1/plans/{r.json()['plan_id']}",
                     headers={"authorization": f"bearer {TOKEN}"}).status_code == 200  # scheme is case-insensitive
    for path in ("/healthz", "/readyz", "/openapi.json", "/docs"):  # probes and the contract stay open
        assert httpx.get(url + path).status_code == 200
    assert_error(httpx.get(f"{url}/metrics"), 401)  # every tenant's counts: the admin scope
    assert httpx.get(f"{url}/metrics", headers=good).status_code == 200
    assert TOKEN not in server.log()

    # fail closed: a configured but empty token refuses everything
    empty = api(env={"CONCLAVE_API_TOKEN": ""})
    assert_error(httpx.get(f"{empty.url}/v1/plans/x", headers={"Authorization": "Bearer"}), 401)
    assert_error(httpx.get(f"{empty.url}/v1/plans/x", headers={"Authorization": "Bearer x"}), 401)

    # a cluster with no token configured fails closed; only CONCLAVE_AUTH=off opens it
    closed = api(env={"CONCLAVE_AUTH": "tokens"})
    assert_error(httpx.get(f"{closed.url}/v1/plans/{r.json()['plan_id']}"), 401)
    assert_error(httpx.get(f"{closed.url}/v1/plans/{r.json()['plan_id']}", headers=good), 401)
    open_ = api(env={"CONCLAVE_AUTH": "off"})
    assert httpx.get(f"{open_.url}/v1/plans/{r.json()['plan_id']}").status_code == 200


def test_readiness_names_what_is_down(api: Any, settings: Any) -> None:
    up = api()
    r = httpx.get(f"{up.url}/readyz")
    assert r.status_code == 200 and r.json() == {"status": "ready", "checks": {"database": "ok", "broker": "ok"}}
    down = api(env={"CONCLAVE_DATABASE_URL": "postgresql+psycopg://postgres@127.0.0.1:1/nope",
                    "CONCLAVE_BROKER_URL": "redis://127.0.0.1:1/0"})
    assert httpx.get(f"{down.url}/healthz").status_code == 200
    r = httpx.get(f"{down.url}/readyz", timeout=30)
    assert r.status_code == 503
    err = r.json()["error"]
    assert err["code"] == "service.unavailable"
    assert {d["field"] for d in err["details"]} == {"database", "broker"}
    assert "127.0.0.1" not in r.text
    # a route that needs the database answers 503, not 500, and does not leak the driver's message
    r = httpx.get(f"{down.url}/v1/plans/x", timeout=30)
    assert r.status_code == 503 and r.json()["error"]["message"] == "database unavailable", r.text
    r = httpx.post(f"{down.url}/v1/plans", json=board(), timeout=30)
    assert r.status_code == 503, r.text
    assert httpx.get(f"{down.url}/metrics", timeout=30).status_code == 503
    assert re.search(r"database unavailable", down.log())
