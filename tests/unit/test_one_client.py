"""One :class:`Conclave`, two backends: the same scenario run through the local backend (the
coordinator in this process, embedded) and through the HTTP backend (the API app of that
same process, in process over ``httpx.ASGITransport``) ends with the same stored state and
shows the user the same things; and both backends implement the whole protocol."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio.from_thread
import httpx
import pytest
from fastapi import FastAPI

from orchestrator.api.app import create_app
from orchestrator.client.backend import ConclaveBackend
from orchestrator.client.conclave import Conclave
from orchestrator.client.local import LocalBackend
from orchestrator.client.over_http import HttpBackend
from orchestrator.control.coordinator import CancelResult, ResumeResult
from orchestrator.core.errors import DocumentNotFound, InvalidConfiguration, InvalidRequest, PlanNotFound
from orchestrator.core.settings import Settings
from storage import plans
from storage.status import PlanStatus

NOTES = "# Pilot\n\nThe pilot costs 40k and takes six weeks.\n\n# Risks\n\nThe vendor may be late.\n"


class InProcessTransport(httpx.BaseTransport):
    """``httpx.ASGITransport(app)`` for a blocking client: the app (with its lifespan) runs on
    an event loop in a thread of this process; each answer is read whole before it returns."""

    def __init__(self, app: FastAPI) -> None:
        self._portal_cm = anyio.from_thread.start_blocking_portal()
        self._portal = self._portal_cm.__enter__()
        self._lifespan = self._portal.wrap_async_context_manager(app.router.lifespan_context(app))
        self._lifespan.__enter__()
        self._asgi = httpx.ASGITransport(app=app)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()

        async def send() -> tuple[int, httpx.Headers, bytes]:
            inner = httpx.Request(request.method, request.url, headers=request.headers, content=body)
            response = await self._asgi.handle_async_request(inner)
            return response.status_code, response.headers, await response.aread()

        status, headers, content = self._portal.call(send)
        return httpx.Response(status, headers=headers, content=content, request=request)

    def close(self) -> None:
        self._lifespan.__exit__(None, None, None)
        self._portal_cm.__exit__(None, None, None)


@pytest.fixture()
def both(home: Path) -> Iterator[tuple[Conclave, Conclave]]:
    """A local client (embedded: SQLite, the in-process worker) and an HTTP client of the API
    serving that same local backend: one stored state, two ways in."""
    settings = Settings(home=home, offline_latency=0.0, reconcile_interval=0.5)
    local = LocalBackend(settings)
    direct = Conclave(backend=local)
    remote = Conclave.connect("http://conclave.test", transport=InProcessTransport(create_app(settings, local=local)))
    try:
        yield direct, remote
    finally:
        remote.close()
        direct.close()


def team(task_id: str) -> dict[str, Any]:
    return {"kind": "team", "title": f"Pilot first? ({task_id})", "task_id": task_id, "labels": ["parity"],
            "question": "Should we ship the pilot first?",
            "experts": [{"name": "Ana", "role": "Analyst"}, {"name": "Lead", "role": "Lead"}],
            "phases": [{"id": "costs", "expert": "Ana", "prompt": "Costs?"}],
            "synthesis": {"expert": "Lead"},
            "briefing": [{"id": "notes", "title": "Notes", "text": NOTES, "format": "markdown"}]}


def scenario(c: Conclave, tag: str) -> dict[str, Any]:
    """What a user sees along the way, with the plan's id replaced by ``ID``."""
    first = c.submit_result(team(tag))
    pid = first.plan_id
    view = c.wait(pid, timeout=60)
    again = c.submit_result(team(tag))
    page = c.list_plans(task_id=tag, label="parity", status=["completed", "failed"])
    docs = c.documents(pid)
    doc = c.document(pid, "notes")
    with pytest.raises(DocumentNotFound):
        c.document(pid, "no-such-doc")
    cancelled, resumed = c.cancel(pid), c.resume(pid)
    with pytest.raises(PlanNotFound):
        c.get("no-such-plan")
    with pytest.raises(InvalidRequest) as refused:
        c.list_plans(label="not a label!")
    stored = list(c.events(pid))
    return {
        "created": (first.created, again.created, again.plan_id == pid, again.enqueued),
        "status": view.status, "phases": [(p.key, p.status) for p in view.phases],
        "result": bool(c.result(pid)) and c.result(pid) == c.phase_text(pid, view.phases[-1].key),
        "listed": [(p["id"] == pid, p["task_id"] == tag, p["status"], p["labels"]) for p in page["plans"]],
        "next_cursor": page["next_cursor"],
        "documents": [(d.id, d.title, d.chunks) for d in docs], "document": (doc.id, doc.text, len(doc.chunks)),
        "cancel": cancelled == CancelResult(pid, [], PlanStatus.COMPLETED),
        "resume": resumed == ResumeResult(pid, [], [], PlanStatus.COMPLETED),
        "refused": [d["field"] for d in refused.value.details],
        "events": [e.type for e in stored],
    }


def test_both_backends_show_the_same_scenario_and_the_same_stored_plan(both: tuple[Conclave, Conclave]) -> None:
    direct, remote = both
    for name in typing.get_type_hints(ConclaveBackend):  # the protocol's attributes, on both
        assert all(isinstance(getattr(c.backend, name), Settings) for c in both), name
    seen_direct, seen_remote = scenario(direct, "parity-local"), scenario(remote, "parity-http")
    assert seen_direct == seen_remote
    assert seen_direct["status"] is PlanStatus.COMPLETED and seen_direct["created"] == (True, False, True, [])
    assert seen_direct["listed"] == [(True, True, "completed", ["parity"])]
    events = seen_direct["events"]
    assert events[0] == "plan_submitted" and "plan_finished" in events and events[-1] == "resume_requested"
    assert seen_direct["refused"] == ["label"]

    # one plan read both ways: the same answers, field for field
    for tag in ("parity-local", "parity-http"):
        pid = direct.get(tag).id
        assert remote.get(tag) == direct.get(pid)
        assert remote.result(pid) == direct.result(pid)
        assert remote.citations(pid) == direct.citations(pid)
        assert remote.documents(pid) == direct.documents(pid) and remote.document(pid, "notes") == \
            direct.document(pid, "notes")
        assert list(remote.events(pid)) == list(direct.events(pid))
        assert list(remote.watch(pid)) == list(direct.watch(pid))
    assert remote.list_plans(label="parity") == direct.list_plans(label="parity")
    assert [p["task_id"] for p in direct.list_plans(label="parity")["plans"]] == ["parity-http", "parity-local"]


def test_a_cancel_and_a_resume_of_a_waiting_plan_are_the_same_both_ways(home: Path) -> None:
    """No worker: the plan waits, so the cancel catches its phases before they run."""
    settings = Settings(home=home, offline_latency=0.0)
    local = LocalBackend(settings, worker=False)
    with Conclave(backend=local) as direct, Conclave.connect(
            "http://conclave.test", transport=InProcessTransport(create_app(settings, local=local))) as remote:
        outcomes = []
        for c, tag in ((direct, "wait-local"), (remote, "wait-http")):
            pid = c.submit(team(tag))
            assert c.get(pid).status is PlanStatus.RUNNING
            cancelled = c.cancel(pid)
            resumed = c.resume(pid)
            outcomes.append((sorted(cancelled.cancelled), cancelled.status, resumed.enqueued, resumed.status,
                             c.get(pid).status, plans.get_plan(local.db, pid).cancel_requested))
        assert outcomes[0] == outcomes[1]
        assert outcomes[0][0] and outcomes[0][4] is PlanStatus.CANCELLED and outcomes[0][5] is True


def test_both_backends_implement_the_whole_protocol() -> None:
    wanted = {name for name, _ in inspect.getmembers(ConclaveBackend, inspect.isfunction) if not name.startswith("_")}
    assert {"submit_result", "list_plans", "events", "watch", "subscribe", "close"} <= wanted
    for backend in (LocalBackend, HttpBackend):
        for name in wanted:
            ours = getattr(backend, name, None)
            assert callable(ours), f"{backend.__name__} has no {name}"
            spec, given = inspect.signature(getattr(ConclaveBackend, name)), inspect.signature(ours)
            for param in spec.parameters.values():  # every parameter of the protocol, of the same kind
                assert param.name in given.parameters, f"{backend.__name__}.{name} takes no {param.name}"
                assert given.parameters[param.name].kind == param.kind, f"{backend.__name__}.{name}({param.name})"
    # and the facade offers each of them, once
    assert wanted - {"close"} <= {n for n in vars(Conclave) if not n.startswith("_")}


def test_the_local_parts_are_only_in_a_local_client() -> None:
    remote = Conclave.connect("http://127.0.0.1:9", transport=httpx.MockTransport(lambda r: httpx.Response(500)))
    with remote, pytest.raises(InvalidConfiguration):
        _ = remote.local
