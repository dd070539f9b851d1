"""One builder per event type: the only place an event's shape is decided.

Repositories append what these return in the transaction that makes the change
(transactional outbox) and hand back the :class:`~storage.read_models.EventRecord` they
stored; the caller publishes exactly that record after commit (see
:meth:`~storage.read_models.EventRecord.message`), so a watcher sees one shape per
type whether it reads the database or the bus. The types and keys are documented
for users in ``docs/api.md``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class NewEvent:
    """An event to append: its type, the phase it is about (if any) and its data."""

    type: str
    data: dict[str, Any]
    phase_key: str | None = None


class _Phase(Protocol):
    @property
    def key(self) -> str: ...
    @property
    def expert(self) -> str | None: ...
    @property
    def kind(self) -> str: ...
    @property
    def round(self) -> int | None: ...


def _about(phase: _Phase, attempt: int) -> dict[str, Any]:
    return {"attempt": attempt, "expert": phase.expert, "kind": phase.kind, "round": phase.round}


def plan_submitted(*, title: str, kind: str, phases: int, tenant: str,
                   principal: dict[str, Any] | None = None, documents: int = 0, chunks: int = 0) -> NewEvent:
    """``principal``: who submitted it (id and name, never a token), for the audit trail;
    ``documents``/``chunks``: the briefing stored with it."""
    return NewEvent("plan_submitted", {"title": title, "kind": kind, "phases": phases, "tenant": tenant,
                                       "principal": principal, "documents": documents, "chunks": chunks})


def plan_forked(*, source: str, from_phase: str, reused: Sequence[str], rerun: Sequence[str]) -> NewEvent:
    """A what-if fork was stored from plan ``source`` (``from_phase`` on runs anew): ``reused``, the
    phases copied from it as completed (their contents shared, not copied: no attempt, no usage);
    ``rerun``, the phases before ``from_phase`` that run anyway, because what they would be sent
    differs from what the source's were sent."""
    return NewEvent("plan_forked", {"source": source, "from": from_phase, "reused": list(reused),
                                    "rerun": list(rerun)})


def phase_started(phase: _Phase, *, attempt: int, worker: str, k: int, n: int) -> NewEvent:
    """``k`` of ``n`` phases were final when the claim was made."""
    return NewEvent("phase_started", {**_about(phase, attempt), "worker": worker, "k": k, "n": n}, phase.key)


def phase_completed(phase: _Phase, *, attempt: int, chars: int, truncated: bool, fallback: bool,
                    offloaded: bool, summary: str, k: int, n: int) -> NewEvent:
    return NewEvent("phase_completed", {**_about(phase, attempt), "chars": chars, "truncated": truncated,
                                        "fallback": fallback, "offloaded": offloaded, "summary": summary,
                                        "k": k, "n": n}, phase.key)


def decision_recorded(phase_key: str, record: dict[str, Any]) -> NewEvent:
    """The panel's decision, computed by code from the experts' verdicts
    (:mod:`orchestrator.deliberation.protocols`): the whole record, each vote with its weight."""
    return NewEvent("decision_recorded", dict(record), phase_key)


def rounds_skipped(*, after_round: int, rounds: Sequence[int], phases: Sequence[str], agreement: float,
                   threshold: float, tokens_saved: int) -> NewEvent:
    """A board stopped early: after ``after_round`` the share ``agreement`` of its panel gave one
    answer (at least ``threshold``), so ``rounds`` were skipped; ``tokens_saved`` is an estimate
    (the plan's tokens per model phase so far, times the phases skipped)."""
    return NewEvent("rounds_skipped", {"after_round": after_round, "rounds": list(rounds), "phases": list(phases),
                                       "agreement": agreement, "threshold": threshold,
                                       "tokens_saved": tokens_saved})


def phase_failed(phase: _Phase, *, attempt: int, error_code: str, error: str, k: int, n: int) -> NewEvent:
    return NewEvent("phase_failed", {**_about(phase, attempt), "error_code": error_code, "error": error[:500],
                                     "k": k, "n": n}, phase.key)


def phase_cancelled(phase: _Phase, *, attempt: int, reason: str, k: int, n: int, error_code: str | None = None,
                    error: str | None = None) -> NewEvent:
    """A running phase that ended cancelled: at completion (``reason`` only) or while
    failing (with the error it failed with)."""
    return NewEvent("phase_cancelled", {**_about(phase, attempt), "reason": reason, "error_code": error_code,
                                        "error": None if error is None else error[:500], "k": k, "n": n},
                    phase.key)


def phases_skipped(keys: Sequence[str], reason: str) -> NewEvent:
    return NewEvent("phases_skipped", {"phases": list(keys), "reason": reason})


def cancel_requested(cancelled: Sequence[str], *, actor: dict[str, Any] | None = None) -> NewEvent:
    """``cancelled``: the keys of the phases that were pending and are now cancelled;
    ``actor``: who asked (id and name), for the audit trail."""
    return NewEvent("cancel_requested", {"cancelled": list(cancelled), "actor": actor})


def retry_requested(keys: Sequence[str]) -> NewEvent:
    return NewEvent("retry_requested", {"phases": list(keys)})


def resume_requested(*, retry_failed: bool, reset: Sequence[str], actor: dict[str, Any] | None) -> NewEvent:
    """Every resume, with who asked (the audit trail) and what it reset."""
    return NewEvent("resume_requested", {"retry_failed": retry_failed, "reset": list(reset), "actor": actor})


def plan_updated(changes: Mapping[str, Any], *, actor: dict[str, Any] | None) -> NewEvent:
    """``changes``: each field a PATCH changed, with its new value; ``actor``: who asked."""
    return NewEvent("plan_updated", {"changes": dict(changes), "actor": actor})


def plan_finished(status: str, *, error_code: str | None, error: str | None) -> NewEvent:
    return NewEvent("plan_finished", {"status": status, "error_code": error_code, "error": error})


def debate_inserted(*, check: str, topic: str | None, participants: Sequence[str],
                    phases: Sequence[str]) -> NewEvent:
    return NewEvent("debate_inserted", {"check": check, "topic": topic, "participants": list(participants),
                                        "phases": list(phases)})


def limit_reached(kind: str, *, limit: int, existing: int) -> NewEvent:
    """Phases of ``kind`` were not inserted: the plan already has ``limit`` groups."""
    return NewEvent(f"{kind}_limit_reached", {"limit": limit, "existing": existing})


# ------------------------------------------------------------------ people at the table
# (docs/api.md documents these shapes; webhooks deliver input_requested, awaiting_approval
# and plan_finished by type, so their keys only ever grow)


def input_requested(phase: _Phase, *, attempt: int, role: str, due_at: str, respond_within: int, prompt: str,
                    inputs: Sequence[str], notes: int = 0) -> NewEvent:
    """A person's seat is asked for its answer: ``due_at`` (ISO 8601, UTC) is when it ends by
    the plan's ``missing_expert`` rule; ``prompt`` is what the person answers (what a model in
    the seat would be asked); ``inputs`` are the phases to read first, in plan order
    (``GET /v1/plans/{id}/phases/{key}/content``); ``notes``: steering notes given with it."""
    return NewEvent("input_requested", {**_about(phase, attempt), "role": role, "due_at": due_at,
                                        "respond_within": respond_within, "prompt": prompt,
                                        "inputs": list(inputs), "notes": notes}, phase.key)


def input_received(phase: _Phase, *, attempt: int, actor: dict[str, Any] | None, chars: int) -> NewEvent:
    """A person answered their seat (``actor``: who, never a token; None with authentication off)."""
    return NewEvent("input_received", {**_about(phase, attempt), "actor": actor, "chars": chars}, phase.key)


def awaiting_approval(*, phase: str, revision: int, chars: int, summary: str,
                      revision_failed: dict[str, Any] | None = None) -> NewEvent:
    """The plan's answer (``phase``: the synthesis or the board's final) is written as a draft and
    waits for a person to approve it or send it back; ``revision`` 0 for the first draft, 1 for the
    one written after a send-back. ``revision_failed`` (phase, error_code, error; else None): the
    revision failed, and the first draft waits for approval again."""
    return NewEvent("awaiting_approval", {"phase": phase, "revision": revision, "chars": chars, "summary": summary,
                                          "revision_failed": dict(revision_failed) if revision_failed else None})


def approved(*, phase: str, revision: int, actor: dict[str, Any] | None) -> NewEvent:
    """A person approved the draft ``phase``: it is the plan's result (the plan completes with it)."""
    return NewEvent("approved", {"phase": phase, "revision": revision, "actor": actor})


def sent_back(*, phase: str, revision: str, note: str, actor: dict[str, Any] | None) -> NewEvent:
    """A person sent the draft ``phase`` back with ``note``: ``revision`` is the phase that rewrites it."""
    return NewEvent("sent_back", {"phase": phase, "revision": revision, "note": note, "actor": actor})


def steered(*, n: int, note: str, actor: dict[str, Any] | None) -> NewEvent:
    """The plan's ``n``-th steering note: every phase that starts after it is given it."""
    return NewEvent("steered", {"n": n, "note": note, "actor": actor})
