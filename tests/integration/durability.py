"""Helpers shared by the durability tests (``test_durability_*.py``): plans with the
offline model's fault options, polling, and the stored-state ledger every test
asserts against — read from Postgres through the repositories, never mocked."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import update

from storage import Database, plans, usage
from storage.models import Phase, Plan, utcnow
from storage.read_models import PhaseRecord, PlanRecord, UsageRecord
from storage.status import PhaseStatus
from tests.stored_rows import content_rows

T = TypeVar("T")

EXPERTS = [("Dana", "Chief Financial Officer"), ("Ravi", "Chief Technology Officer"),
           ("Sofia", "Head of Sales"), ("Tomas", "General Counsel")]


def board_plan(title: str = "Durability board", *, experts: int = 2, rounds: int = 1,
               task_id: str | None = None, plan: dict[str, Any] | None = None,
               model: dict[str, Any] | None = None, **options: Any) -> dict[str, Any]:
    """A small board (opening, ``experts`` turns per round, summaries, final) on the
    offline model with ``options`` (latency, words, hang, fail, …); ``plan`` and
    ``model`` add plan-level and model-level fields."""
    doc: dict[str, Any] = {
        "kind": "board", "title": title, "rounds": rounds,
        "question": "Should Ledgerly move to usage-based pricing next quarter?",
        "moderator": {"name": "Morgan", "role": "Chair of the board"},
        "experts": [{"name": n, "role": r} for n, r in EXPERTS[:experts]],
        "models": {"default": {"provider": "offline", **(model or {}),
                               "options": {"words": 40, **options}}},
        **(plan or {}),
    }
    if task_id is not None:
        doc["task_id"] = task_id
    return doc


def team_plan(title: str = "Durability team", *, max_debates: int = 1, groups: int = 1,
              debate_options: dict[str, Any] | None = None, **options: Any) -> dict[str, Any]:
    """A team whose experts take opposite stances, so every parallel group diverges
    and a debate is inserted (``groups`` parallel pairs, each with its own check).
    Debates (and only the experts' phases) run on the ``debater`` model."""
    stances = {"Ada": "support", "Bo": "oppose", "Cy": "support", "Di": "oppose"}
    names = list(stances)[: 2 * groups]
    phases: list[dict[str, Any]] = []
    prev: list[str] = []
    for g in range(groups):
        pair = names[2 * g: 2 * g + 2]
        ids = [f"g{g + 1}-{n.lower()}" for n in pair]
        for n, pid in zip(pair, ids, strict=True):
            phases.append({"id": pid, "expert": n, "depends_on": list(prev),
                           "prompt": f"Argue your view on the pricing change ({pid})."})
        prev = ids
    model_opts = {"words": 40, "stances": stances, **options}
    return {
        "kind": "team", "title": title, "max_debates": max_debates,
        "question": "Should Ledgerly move to usage-based pricing next quarter?",
        "experts": [{"name": n, "role": "Analyst", "model": "debater"} for n in names]
        + [{"name": "Lead", "role": "Lead expert", "model": "default"}],
        "models": {"default": {"provider": "offline", "options": {"words": 40, "stances": stances}},
                   "debater": {"provider": "offline", "options": {**model_opts, **(debate_options or {})}}},
        "phases": phases,
        "synthesis": {"expert": "Lead"},
    }


def wait_for(pred: Callable[[], T | None], timeout: float, *, interval: float = 0.1, what: str = "") -> T:
    """Poll ``pred`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or pred}")
        time.sleep(interval)


def wait_leases_expired(db: Database, plan_id: str, timeout: float = 60) -> None:
    """Wait until every running phase's stored lease has passed (by this machine's clock,
    the one workers set leases with) — a takeover may then happen."""

    def expired() -> bool:
        now = datetime.now(UTC)
        running = [p for p in plans.load_state(db, plan_id).phases if p.status == "running"]
        return all(p.lease_expires_at is not None and p.lease_expires_at < now for p in running)

    wait_for(expired, timeout, interval=0.05, what="the running phases' leases to expire")


def expire_leases(db: Database, plan_id: str) -> None:
    """Time passes for a plan whose workers are all dead (SIGKILLed): every running phase's
    stored lease is now over — the stored-time clock (``tests.unit.planes.Planes.expire_lease``)
    instead of waiting out ``lease_seconds``. Only where no holder is alive: a live one renews."""
    with db.engine.begin() as c:
        c.execute(update(Phase).where(Phase.plan_id == plan_id, Phase.status == PhaseStatus.RUNNING)
                  .values(lease_expires_at=utcnow()))


def lapse_resume_guard(db: Database, plan_id: str) -> None:
    """Time passes for the plan's resume guard: its stored hold is over (instead of sleeping
    ``resume_guard_seconds``)."""
    with db.engine.begin() as c:
        c.execute(update(Plan).where(Plan.id == plan_id, Plan.resume_until.is_not(None))
                  .values(resume_until=utcnow()))


@dataclass(frozen=True)
class Ledger:
    """What is stored for one plan: the record every durability test checks."""

    plan: PlanRecord
    phases: list[PhaseRecord]
    content_rows: dict[str, int]  # phase id -> content rows
    usage_rows: list[UsageRecord]

    def phase(self, key: str) -> PhaseRecord:
        return next(p for p in self.phases if p.key == key)

    def statuses(self) -> dict[str, str]:
        return {p.key: p.status for p in self.phases}

    def usage_of(self, phase: PhaseRecord) -> list[UsageRecord]:
        return [u for u in self.usage_rows if u.phase_id == phase.id]

    @property
    def counted(self) -> list[UsageRecord]:
        return [u for u in self.usage_rows if u.counted]

    @property
    def waste(self) -> list[UsageRecord]:
        return [u for u in self.usage_rows if not u.counted]


def ledger(db: Database, plan_id: str) -> Ledger:
    state = plans.load_state(db, plan_id)
    return Ledger(state.plan, state.phases, content_rows(db, plan_id),
                  usage.rows_for_plan(db, plan_id))


def assert_exactly_once(led: Ledger, *, calls_per_phase: int = 1) -> None:
    """Every completed phase has exactly one content row and exactly its final
    attempt's usage counted (``calls_per_phase`` rows, seq 1..n); nothing else is
    counted; every other usage row belongs to an attempt that did not complete
    (waste); no phase that did not complete has a content row."""
    for p in led.phases:
        rows = led.usage_of(p)
        counted = [u for u in rows if u.counted]
        if p.status == "completed":
            assert led.content_rows.get(p.id) == 1, f"{p.key}: {led.content_rows.get(p.id)} content rows"
            assert len(counted) == calls_per_phase, f"{p.key}: counted usage {counted}"
            assert {u.attempt for u in counted} == {p.attempt}, f"{p.key}: counted rows of another attempt"
            assert sorted(u.seq for u in counted) == list(range(1, calls_per_phase + 1))
            assert all(u.attempt != p.attempt for u in rows if not u.counted), f"{p.key}: live row not counted"
        else:
            assert p.id not in led.content_rows, f"{p.key} is {p.status} but has a content row"
            assert not counted, f"{p.key} is {p.status} but has counted usage"
        keys = [(u.attempt, u.seq) for u in rows]
        assert len(keys) == len(set(keys)), f"{p.key}: duplicate usage rows {keys}"
        assert all(1 <= u.attempt <= p.attempt for u in rows), f"{p.key}: usage of an unknown attempt"


def owner_pid(phase: PhaseRecord) -> int | None:
    """The worker process id in a lease owner (``host:pid:nonce``)."""
    if not phase.lease_owner:
        return None
    try:
        return int(phase.lease_owner.split(":")[1])
    except (IndexError, ValueError):
        return None


class TcpProxy:
    """A TCP proxy on 127.0.0.1 in front of Postgres that a test can take down:
    :meth:`refuse` closes the listening socket and every open connection (the
    database "refuses connections"), :meth:`accept` brings it back on the same port."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = int(probe.getsockname()[1])
        probe.close()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self.refused = threading.Event()

    def accept(self) -> TcpProxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        self.refused.clear()
        self._thread = threading.Thread(target=self._serve, args=(listener,), daemon=True)
        self._thread.start()
        return self

    def _serve(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            if self.refused.is_set():
                client.close()
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def refuse(self) -> None:
        self.refused.set()
        if self._listener is not None:
            try:  # wakes the thread blocked in accept() (close() alone does not, on Linux)
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
            self._listener = None
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def close(self) -> None:
        self.refuse()
