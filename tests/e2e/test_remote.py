"""The client's remote mode end to end: ``Conclave.connect`` and ``conclave … --url``
against a real ``conclave api`` subprocess and real workers, on 127.0.0.1 only.

Both modes are held to the same answers: a plan read remotely equals the plan read from
the database, errors are the same classes with the field named, and the event stream,
cut in the middle of a plan by a proxy, is followed again from ``Last-Event-ID`` with no
stored event lost or repeated."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Conclave
from orchestrator.control.coordinator import CancelResult, ResumeResult
from orchestrator.core.errors import (
    InvalidConfiguration,
    InvalidPlan,
    InvalidRequest,
    NotReady,
    PlanNotFound,
    ServiceUnavailable,
    Unauthorized,
)
from storage.status import PlanStatus
from tests.conftest import ROOT, free_port
from tests.e2e.test_api import TOKEN, api, board  # noqa: F401  (api: the API server fixture)
from tests.e2e.test_cli import run_cli

BOARD = ROOT / "examples" / "board.yaml"
#: Experts wait this long before their first words: a quiet moment after each chair's phase.
QUIET = 1.5


def slow_board(**changes: Any) -> dict[str, Any]:
    """The example board whose experts pause before speaking (the chair speaks at once)."""
    plan = board(**changes)
    plan["models"] = {"slow": {"provider": "offline", "options": {"latency": 0.005, "first_chunk_delay": QUIET}}}
    for expert in plan["experts"]:
        expert["model"] = "slow"
    return plan


class CuttingProxy:
    """A TCP proxy on 127.0.0.1 in front of the API. ``cut()`` breaks every open connection
    at once, both ways, as a restarted load balancer would; new connections go through."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.requests: list[str] = []  # the first bytes each client sent: its request head
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            with self._lock:
                self._open += [downstream, upstream]
            threading.Thread(target=self._pump, args=(downstream, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, downstream, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        try:
            while data := src.recv(65536):
                if record:
                    self.requests.append(data.decode("latin-1"))
                    record = False
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                _shut(s)

    def cut(self) -> None:
        with self._lock:
            sockets, self._open = self._open, []
        for s in sockets:
            _shut(s)
            s.close()

    def close(self) -> None:
        self.listener.close()
        self.cut()

    def event_requests(self) -> list[str]:
        return [r for r in self.requests if "/events " in r.split("\r\n", 1)[0]]


def _shut(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


@pytest.fixture()
def server(api: Any) -> Any:  # noqa: F811
    """The API with CONCLAVE_API_TOKEN: the token is an admin's."""
    return api(env={"CONCLAVE_API_TOKEN": TOKEN})


@pytest.fixture()
def remote(server: Any) -> Iterator[Conclave]:
    with Conclave.connect(server.url, token=TOKEN) as c:
        yield c


def _fast(settings: Any) -> Any:
    return settings.model_copy(update={"offline_latency": 0.005})


def _stored(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m["type"] != "chunk"]


def _spoken(messages: list[dict[str, Any]]) -> dict[str, str]:
    """Each phase's text put back together from its chunks, checking they came in order, once."""
    seqs: dict[str, list[int]] = {}
    texts: dict[str, str] = {}
    for m in messages:
        if m["type"] == "chunk":
            seqs.setdefault(m["phase"], []).append(m["seq"])
            texts[m["phase"]] = texts.get(m["phase"], "") + m["text"]
    for key, seen in seqs.items():
        assert seen == list(range(len(seen))), (key, seen)  # no chunk missed or repeated
    return texts


# --------------------------------------------------------------------------- the Python client


def test_the_remote_client_answers_as_the_direct_one(server: Any, remote: Conclave, client: Any,
                                                     workers: Any, settings: Any) -> None:
    assert TOKEN not in repr(remote)
    plan_id = remote.submit(BOARD)  # a path: read here, sent as its contents
    feed = remote.watch(plan_id)
    first = next(feed)  # the stream is subscribed to live chunks before its first read
    workers(settings=_fast(settings))
    messages = [first, *feed]

    stored = _stored(messages)
    assert stored[0]["type"] == "plan_submitted"
    assert stored[-1]["type"] == "plan_finished" and stored[-1]["data"]["status"] == "completed"
    assert [m["id"] for m in stored] == [e.id for e in client.events(plan_id)]
    assert list(remote.events(plan_id)) == list(client.events(plan_id))  # the same EventRecords
    assert list(client.watch(plan_id)) == stored  # the direct watch of a final plan: the same messages

    view = remote.get(plan_id)
    assert view == client.get(plan_id) and view.status is PlanStatus.COMPLETED
    assert remote.wait(plan_id, timeout=5) == view
    assert remote.result(plan_id) == client.result(plan_id)
    spoken = _spoken(messages)
    assert set(spoken) == {p.key for p in view.phases}
    for p in view.phases:
        assert spoken[p.key] == remote.phase_text(plan_id, p.key) == client.phase_text(plan_id, p.key)
    assert remote.phase_text(plan_id, "no.such.phase") is None and client.phase_text(plan_id, "no.such.phase") is None

    # cancel and resume answer in the same shapes
    cancelled = remote.cancel(plan_id)
    assert cancelled == client.cancel(plan_id) == CancelResult(plan_id, [], PlanStatus.COMPLETED)
    done = ResumeResult(plan_id, [], [], PlanStatus.COMPLETED, "the plan completed: nothing is left to run")
    assert remote.resume(plan_id) == done
    # a resume that sent nothing holds no guard: the next one answers the same, in both modes
    assert remote.resume(plan_id, retry_failed=True) == done == client.resume(plan_id)

    # a plan cancelled while it runs: the same answers, and no result in either mode
    other = remote.submit_result(slow_board(task_id="remote-cancelled"))
    assert other.created and other.enqueued[0] == "opening"
    assert remote.submit_result(slow_board(task_id="remote-cancelled")).created is False
    stopped = remote.cancel(other.plan_id)
    assert isinstance(stopped, CancelResult) and stopped.cancelled and type(stopped.status) is PlanStatus
    assert remote.wait(other.plan_id, timeout=30).status == PlanStatus.CANCELLED
    with pytest.raises(NotReady):
        remote.result(other.plan_id)
    with pytest.raises(NotReady):
        client.result(other.plan_id)

    # the list of plans, a page at a time
    page = remote.list_plans(status="completed")
    assert [p["id"] for p in page["plans"]] == [plan_id] and page["next_cursor"] is None
    first_page = remote.list_plans(limit=1)
    assert [p["id"] for p in first_page["plans"]] == [other.plan_id] and first_page["next_cursor"]
    rest = remote.list_plans(limit=1, cursor=first_page["next_cursor"])
    assert [p["id"] for p in rest["plans"]] == [plan_id]
    assert [p["id"] for p in remote.list_plans(task_id="remote-cancelled", status=["cancelled", "failed"])["plans"]
            ] == [other.plan_id]
    assert TOKEN not in server.log()


def test_errors_are_the_direct_modes_classes_with_the_field(server: Any, remote: Conclave,
                                                            client: Any) -> None:
    with pytest.raises(PlanNotFound) as remote_missing:
        remote.get("no-such-plan")
    with pytest.raises(PlanNotFound):
        client.get("no-such-plan")
    assert remote_missing.value.code == "plan.not_found"
    assert remote_missing.value.details[0]["field"] == "plan_id"
    with pytest.raises(PlanNotFound):
        remote.cancel("00000000-0000-0000-0000-000000000000")
    with pytest.raises(PlanNotFound):
        list(remote.watch("no-such-plan"))

    unknown_model = board()
    unknown_model["experts"][0]["model"] = "nope"
    with pytest.raises(InvalidPlan) as remote_invalid:  # refused by the server, against its registry
        remote.submit(unknown_model)
    with pytest.raises(InvalidPlan) as direct_invalid:
        client.submit(unknown_model)
    assert remote_invalid.value.details == direct_invalid.value.details
    assert remote_invalid.value.details[0]["field"] == "experts[0].model"
    with pytest.raises(InvalidPlan) as local:  # refused here, before anything is sent
        remote.submit({"kind": "board"})
    assert local.value.details[0]["field"]
    with pytest.raises(InvalidRequest) as bad_label:
        remote.list_plans(label="not a label!")
    assert bad_label.value.details[0]["field"] == "label"

    for token in ("wrong-token", None):
        with Conclave.connect(server.url, token=token) as stranger, pytest.raises(Unauthorized) as refused:
            stranger.get("no-such-plan")
        assert refused.value.details[0]["field"] == "Authorization"

    dead = f"http://127.0.0.1:{free_port()}"
    with Conclave.connect(dead, token=TOKEN, timeout=2) as nowhere, pytest.raises(ServiceUnavailable) as down:
        nowhere.get("no-such-plan")
    assert dead in down.value.message and TOKEN not in str(down.value)
    with pytest.raises(InvalidConfiguration) as bad_url:
        Conclave.connect("127.0.0.1:8000")
    assert bad_url.value.details[0]["field"] == "url"


def test_watch_reconnects_mid_plan_with_no_gap_and_no_duplicate(server: Any, remote: Conclave, client: Any,
                                                                 workers: Any, settings: Any) -> None:
    proxy = CuttingProxy(server.port)
    try:
        plan_id = remote.submit(slow_board())
        cut_after = {"opening", "r1.summary"}  # the experts' quiet moment follows each
        messages: list[dict[str, Any]] = []
        with Conclave.connect(proxy.url, token=TOKEN) as watcher:
            for m in watcher.watch(plan_id):
                messages.append(m)
                if len(messages) == 1:
                    workers(settings=_fast(settings))
                if m["type"] == "phase_completed" and m["phase"] in cut_after:
                    cut_after.discard(m["phase"])
                    proxy.cut()
        assert not cut_after
    finally:
        proxy.close()

    stored = _stored(messages)
    ids = [m["id"] for m in stored]
    assert ids == [e.id for e in client.events(plan_id)]  # every stored event once, in order, none lost
    assert stored[-1]["type"] == "plan_finished" and stored[-1]["data"]["status"] == "completed"
    reconnects = proxy.event_requests()[1:]
    assert len(reconnects) >= 2, proxy.requests
    resumed_from = [int(line.split(":", 1)[1]) for r in reconnects for line in r.split("\r\n")
                    if line.lower().startswith("last-event-id:")]
    assert len(resumed_from) == len(reconnects) and resumed_from == sorted(resumed_from)
    assert set(resumed_from) <= set(ids) and resumed_from[0] > ids[0]
    assert all(f"bearer {TOKEN}" in r.lower() for r in proxy.requests)

    spoken = _spoken(messages)
    for p in client.get(plan_id).phases:
        assert spoken[p.key] == client.phase_text(plan_id, p.key), p.key


# --------------------------------------------------------------------------- the CLI


@pytest.mark.timeout(300)  # nine CLI subprocesses, each seconds of imports on a loaded machine
def test_the_cli_with_url_and_token_from_the_environment(server: Any, client: Any, workers: Any, settings: Any,
                                                         tmp_path: Path) -> None:
    workers(settings=_fast(settings))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}  # no database, no broker
    env.update({"CONCLAVE_URL": server.url, "CONCLAVE_TOKEN": TOKEN})

    (tmp_path / "notes.md").write_text("# Churn\n\nSmall customers churn when prices rise.\n")
    plan = tmp_path / "plan.yaml"
    plan.write_text(BOARD.read_text() + "briefing:\n  - path: notes.md\n")  # read here, beside the plan
    submitted = run_cli(["submit", str(plan), "--json"], tmp_path, env=env)
    assert submitted.returncode == 0, submitted.stderr
    answer = json.loads(submitted.stdout)
    plan_id = answer["plan_id"]
    assert answer["created"] is True and answer["enqueued"][0] == "opening"
    assert next(client.events(plan_id)).data["documents"] == 1

    options_only = {k: v for k, v in env.items() if k not in ("CONCLAVE_URL", "CONCLAVE_TOKEN")}
    watched = run_cli(["watch", plan_id, "--url", server.url, "--token", TOKEN], tmp_path, env=options_only)
    assert watched.returncode == 0, watched.stderr
    for expected in ("Opening · Morgan", "Round 1 · Dana", "Final summary", "completed"):
        assert expected in watched.stdout

    status = run_cli(["status", plan_id, "--json"], tmp_path, env=env)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout) == json.loads(json.dumps(client.get(plan_id).to_dict()))
    result = run_cli(["result", plan_id], tmp_path, env=env)
    assert result.returncode == 0 and result.stdout == client.result(plan_id) + "\n"
    cancel = run_cli(["cancel", plan_id, "--json"], tmp_path, env=env)
    assert cancel.returncode == 0 and json.loads(cancel.stdout) == {"plan_id": plan_id, "status": "completed",
                                                                    "cancelled": []}
    resume = run_cli(["resume", plan_id, "--json"], tmp_path, env=env)
    assert resume.returncode == 0, resume.stderr
    assert json.loads(resume.stdout) == {"plan_id": plan_id, "status": "completed", "enqueued": [], "retried": [],
                                         "reason": "the plan completed: nothing is left to run"}

    wrong = run_cli(["status", plan_id], tmp_path, env={**env, "CONCLAVE_TOKEN": "not-the-token"})
    assert wrong.returncode == 2
    assert "auth.unauthorized" in wrong.stderr and "Authorization" in wrong.stderr
    missing = run_cli(["result", "no-such-plan"], tmp_path, env=env)
    assert missing.returncode == 2 and "plan.not_found" in missing.stderr and "plan_id" in missing.stderr
    dead = f"http://127.0.0.1:{free_port()}"
    down = run_cli(["status", plan_id, "--url", dead], tmp_path, env=env)  # the option wins over the variable
    assert down.returncode == 1 and "service.unavailable" in down.stderr and dead in down.stderr

    for out in (submitted, watched, status, result, cancel, resume, wrong, missing, down):
        assert "Traceback" not in out.stderr + out.stdout
        assert TOKEN not in out.stderr + out.stdout and "not-the-token" not in out.stderr + out.stdout
    assert not (tmp_path / ".conclave").exists()  # nothing embedded was used
