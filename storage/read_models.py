"""Read models handed to callers: frozen snapshots, never live ORM objects."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from storage.status import PHASE_FINAL, PLAN_FINAL, PhaseStatus, PlanStatus

T = TypeVar("T")


def snapshot(cls: type[T], row: Any) -> T:
    return cls(**{f.name: getattr(row, f.name) for f in dataclasses.fields(cls)})  # type: ignore[arg-type]


@dataclass(frozen=True)
class PlanRecord:
    id: str
    tenant: str
    task_id: str | None
    title: str
    kind: str
    spec: dict[str, Any]
    status: PlanStatus
    cancel_requested: bool
    max_debates: int
    error_code: str | None
    error_message: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    labels: list[str] = dataclasses.field(default_factory=list)
    notes: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # steering notes (storage.steering)
    forked_from: str | None = None  # a fork's source plan (storage.models.Plan.forked_from)
    fork_phase: str | None = None  # and the phase it runs anew from
    priority: int = 0  # higher first among its tenant's held phases (storage.fairshare)

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", PlanStatus(self.status))

    @property
    def final(self) -> bool:
        return self.status in PLAN_FINAL


@dataclass(frozen=True)
class PhaseRecord:
    id: str
    plan_id: str
    key: str
    kind: str
    expert: str | None
    round: int | None
    group_key: str | None
    position: int
    depends_on: list[str]
    inputs: list[str]  # keys of every phase this one depends on, directly or not
    meta: dict[str, Any]
    status: PhaseStatus
    attempt: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    enqueued_at: datetime | None
    retries_requested: int
    summary: str | None
    truncated: bool
    error_code: str | None
    error_message: str | None
    started_at: datetime | None
    finished_at: datetime | None
    verdict: dict[str, Any] | None = None  # see storage.models.Phase.verdict
    due_at: datetime | None = None  # a person's seat: when it ends unanswered (storage.seats)
    content_id: str | None = None  # the content it points at (its own, or a fork's source's)
    sent_hash: str | None = None  # what it was sent (orchestrator.plan.fingerprint)
    reused_from: str | None = None  # in a fork: the plan this completed phase was copied from
    held_at: datetime | None = None  # fair share: waiting for its tenant's share (storage.fairshare)

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", PhaseStatus(self.status))

    @property
    def final(self) -> bool:
        return self.status in PHASE_FINAL

    @property
    def human(self) -> bool:
        """A person's seat: a person answers it, never a worker (``storage.seats``)."""
        return bool(self.meta.get("human"))


@dataclass(frozen=True)
class UsageRecord:
    phase_id: str
    attempt: int
    seq: int
    purpose: str
    model: str
    input_tokens: int
    output_tokens: int
    source: str
    method: str | None
    counted: bool  # derived: the row's attempt is the one that completed its phase
    cost_usd: float | None = None  # the call's price when it was made; None: its model has none


@dataclass(frozen=True)
class EventRecord:
    id: int
    plan_id: str
    phase_key: str | None
    type: str
    data: dict[str, Any]
    created_at: datetime

    def message(self) -> dict[str, Any]:
        """The bus message for this event: the stored event itself (``id``, ``type``,
        ``phase``, ``data``), published after the commit that stored it."""
        return {"id": self.id, "type": self.type, "phase": self.phase_key, "data": self.data}


@dataclass(frozen=True)
class NewPhase:
    """A phase to insert (at submit, or a debate inserted while the plan runs)."""

    key: str
    kind: str
    position: int
    depends_on: list[str]
    expert: str | None = None
    round: int | None = None
    group_key: str | None = None
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    inputs: list[str] = dataclasses.field(default_factory=list)  # transitive dependencies' keys


@dataclass(frozen=True)
class NewChunk:
    """A chunk to insert. ``start``/``end`` are UTF-16 code units into its document."""

    ordinal: int
    start: int
    end: int
    heading_path: list[str]
    text: str
    tokens: int


@dataclass(frozen=True)
class NewDocument:
    """A briefing document to insert with its plan, already chunked."""

    doc_id: str
    position: int
    title: str
    format: str
    text: str
    length: int  # UTF-16 code units
    sha256: str
    chunks: list[NewChunk]


@dataclass(frozen=True)
class DocumentRecord:
    doc_id: str
    position: int
    title: str
    format: str
    text: str | None  # None when read without text
    length: int
    sha256: str
    chunks: int


@dataclass(frozen=True)
class ChunkRecord:
    """A stored chunk, cited as ``[doc_id:ordinal]``. ``score`` is the search relevance
    (higher is better; 0 when the chunk was not found by a search)."""

    doc_id: str
    ordinal: int
    title: str  # the document's
    heading_path: list[str]
    start: int  # UTF-16 code units into the document
    end: int
    text: str
    tokens: int
    score: float = 0.0

    @property
    def ref(self) -> str:
        return f"{self.doc_id}:{self.ordinal}"
