"""A what-if fork of a plan: which of its phases are copied from the source, and which run.

``POST /v1/plans/{id}/fork {from: PHASE, overrides}`` makes a new plan from the source's spec
with the overrides merged over it (:mod:`orchestrator.plan.overrides`). :func:`select` decides,
without running a model, what the fork stores:

**From PHASE on.** ``from`` names a phase of the source (or, for a board, a round: ``r2``). Its
*stage* is the phase itself — for a board's turn or review, every turn of its round (every
review): the experts of a round speak in parallel, so a round is forked as one. *From PHASE on*
is the stage and everything downstream of it (a phase whose transitive inputs meet the stage).
*Before PHASE* is every other phase: for a board, the opening and the rounds before; for a team,
every phase that is neither PHASE nor depends on it — upstream of it, or on another branch.

**Copied, only where nothing changed.** A phase before PHASE is copied — stored completed,
pointing at its source phase's content (shared, never duplicated), with its verdict, no attempt
and no usage — only when its source phase completed with a stored hash of what it was sent
(``sent_hash``) and the fork's :func:`~orchestrator.plan.fingerprint.fingerprint` for it, computed
from the fork's plan and the copied inputs' texts, is that hash. Every input of a copied phase
is itself copied (else the texts it would be sent are not known yet). So a change upstream of
PHASE — the question, a role, an expert's system prompt, a model's settings, the briefing —
reruns the phases it reaches and everything downstream of them; and a stored output is never
restored onto a phase that would be sent something else. Phases from PHASE on always run.

**Who answers changes from PHASE on.** An expert's ``model`` and ``fallback_models`` in the
overrides are what the fork asks *from PHASE on*: a phase before PHASE keeps the models its
source phase ran on (pinned in its ``meta.models``), so forking a board from round 2 with
another model for one expert reuses that expert's round 1 — and if that phase runs anyway
(something it is sent changed), it runs on those models. What a phase is *sent* (question,
roles, system prompts, skills, briefing, answer) is the fork's everywhere. A ``decision``
phase keeps its source's seed (``meta.seed``), so a tie is broken the same way.

**Effects are re-derived.** What a copied phase did to its plan when it completed is done
again here, by the same code, under the fork's plan: a copied divergence check that diverged
inserts its debates (within the fork's ``max_debates``); a copied round summary whose panel
agreed skips the later rounds (``plan.early_stop``) — unless the fork starts inside them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.core.errors import InvalidPlan, InvalidRequest
from orchestrator.gateway.failures import LLMError
from orchestrator.plan import tally
from orchestrator.plan.debates import MalformedVerdict, debate_insertion, parse_verdict
from orchestrator.plan.expand import expand
from orchestrator.plan.fingerprint import decision_seed, fingerprint, models_for
from orchestrator.plan.registry import ModelResolver
from orchestrator.plan.schema import BoardPlan, TeamPlan
from storage import event_shapes
from storage.event_shapes import NewEvent
from storage.phases import EARLY_STOP
from storage.plans import Reused, Skipped
from storage.read_models import NewPhase, PhaseRecord
from storage.status import PhaseStatus

FROM = "from"
ROUND_RE = re.compile(r"^r([1-9][0-9]?)$")
Plan = BoardPlan | TeamPlan


@dataclass(frozen=True)
class Selection:
    """What a fork stores: its phases (the fork plan's expansion, with the debates its copied
    checks inserted, the early stops its copied summaries made, and its pins), the phases it
    copies and stores skipped, the phases before ``from`` that run anyway (``rerun``), and the
    events that tell it (``plan_forked``, then what was replayed)."""

    phases: list[NewPhase]
    reused: dict[str, Reused]
    skipped: dict[str, Skipped]
    rerun: list[str]
    from_on: list[str]
    events: list[NewEvent] = field(default_factory=list)


def stage_of(plan: Plan, phases: Sequence[NewPhase], key: str) -> set[str]:
    """The phases forked as one with ``key`` (see the module docstring): for a board, a
    round's turns (``r2`` or ``r2.dana``) or its reviews; otherwise the phase alone."""
    if isinstance(plan, BoardPlan):
        m = ROUND_RE.match(key)
        group = f"r{m.group(1)}" if m else next((p.group_key for p in phases if p.key == key
                                                  and p.kind in ("turn", "review")), None)
        if group is not None:
            return {p.key for p in phases if p.group_key == group}
    return {key}


def check_from(source: Sequence[PhaseRecord], source_plan: Plan, key: Any) -> str:
    """``from``, checked against the source: one of its phase keys, or a board's round (``r2``).
    Raises :class:`InvalidRequest` naming ``from``."""
    if not isinstance(key, str) or not key.strip():
        raise _bad_from("a phase key of the source plan, e.g. r2.dana, r2 (a board's round), synthesis")
    key = key.strip()
    keys = {p.key for p in source}
    m = ROUND_RE.match(key)
    if key in keys or (m and isinstance(source_plan, BoardPlan) and any(p.group_key == key for p in source)):
        return key
    shown = ", ".join(sorted(keys)[:12]) + (", …" if len(keys) > 12 else "")
    raise _bad_from(f"the source plan has no phase {key!r} (its phases: {shown})")


def select(plan: Plan, source_plan: Plan, source: Sequence[PhaseRecord], texts: Mapping[str, str],
           from_key: str, models: ModelResolver, *, source_id: str) -> Selection:
    """The fork of ``source`` (the source plan's stored phases; ``texts``: their full texts by
    phase id) as ``plan`` (the merged, validated fork plan), run anew from ``from_key`` (see
    the module docstring). Pure: reads nothing but what it is given."""
    by_key = {p.key: p for p in source}
    work = _Work(plan, expand(plan), source_plan=source_plan, source=by_key, models=models)
    stage = work.stage = stage_of(plan, work.phases, from_key)
    if not stage & set(work.by_key):
        raise _bad_from(f"{from_key!r} is not a phase of the fork's plan (the overrides changed its shape): "
                        "fork from a phase both plans have")
    for key in list(work.by_key):
        work.pin(key)
    reused: dict[str, Reused] = {}
    rerun: list[str] = []
    for key in work.in_order():
        phase = work.by_key[key]
        if key in stage or stage & set(phase.inputs):
            work.from_on.append(key)
            continue
        if key in work.skipped:
            work.settle(key, work.skipped_record(key))
            continue
        src = by_key.get(key)
        record = work.record(key)
        inputs = sorted((work.done.get(k) for k in phase.inputs), key=lambda i: -1 if i is None else i.position)
        if (src is None or src.status != PhaseStatus.COMPLETED or src.sent_hash is None or src.content_id is None
                or src.id not in texts or any(i is None or not i.final for i in inputs)
                or _sent(plan, record, [i for i in inputs if i is not None], work.texts, models) != src.sent_hash):
            rerun.append(key)
            continue
        copied = dataclasses.replace(record, status=PhaseStatus.COMPLETED, verdict=src.verdict, summary=src.summary,
                                     truncated=src.truncated, content_id=src.content_id, sent_hash=src.sent_hash)
        work.settle(key, copied, texts[src.id])
        reused[key] = Reused(content_id=src.content_id, sent_hash=src.sent_hash, summary=src.summary,
                             truncated=src.truncated, verdict=src.verdict)
        work.replay(copied, [i for i in inputs if i is not None])
    forked = event_shapes.plan_forked(source=source_id, from_phase=from_key, reused=list(reused), rerun=rerun)
    return Selection(phases=work.stored(), reused=reused, skipped=dict(work.skipped), rerun=rerun,
                     from_on=work.from_on, events=[forked, *work.events])


def _sent(plan: Plan, record: PhaseRecord, inputs: list[PhaseRecord], texts: Mapping[str, str],
          models: ModelResolver) -> str | None:
    """The fork's hash for a phase; None when one of its models cannot be resolved here (it is
    not copied then, and runs — and fails there, as any phase on a model the fleet refuses)."""
    try:
        return fingerprint(plan, record, inputs, texts, models)
    except LLMError:
        return None


class _Work:
    """The fork's phases while they are decided, in the order they are decided."""

    def __init__(self, plan: Plan, phases: list[NewPhase], *, source_plan: Plan,
                 source: Mapping[str, PhaseRecord], models: ModelResolver) -> None:
        self.plan = plan
        self.phases = phases
        self.source_plan = source_plan
        self.source = source
        self.models = models
        self.stage: set[str] = set()
        self.by_key = {p.key: p for p in phases}
        self.done: dict[str, PhaseRecord] = {}  # decided and final here: copied or skipped
        self.decided: set[str] = set()
        self.texts: dict[str, str] = {}  # by the fork records' ids (their keys)
        self.skipped: dict[str, Skipped] = {}
        self.from_on: list[str] = []
        self.events: list[NewEvent] = []

    # ------------------------------------------------------------ the phases as stored

    def replace(self, key: str, **changes: Any) -> None:
        self.by_key[key] = dataclasses.replace(self.by_key[key], **changes)

    def stored(self) -> list[NewPhase]:
        return sorted(self.by_key.values(), key=lambda p: p.position)

    def record(self, key: str) -> PhaseRecord:
        """The phase as the fork will store it, pending (what a fingerprint reads of it)."""
        p = self.by_key[key]
        return PhaseRecord(id=key, plan_id="", key=p.key, kind=p.kind, expert=p.expert, round=p.round,
                           group_key=p.group_key, position=p.position, depends_on=list(p.depends_on),
                           inputs=list(p.inputs), meta=dict(p.meta), status=PhaseStatus.PENDING, attempt=0,
                           lease_owner=None, lease_expires_at=None, enqueued_at=None, retries_requested=0,
                           summary=None, truncated=False, error_code=None, error_message=None, started_at=None,
                           finished_at=None)

    def skipped_record(self, key: str) -> PhaseRecord:
        why = self.skipped[key]
        return dataclasses.replace(self.record(key), status=PhaseStatus.SKIPPED, error_code=why.error_code,
                                   error_message=why.error_message)

    def settle(self, key: str, record: PhaseRecord, text: str | None = None) -> None:
        self.done[key] = record
        if text is not None:
            self.texts[record.id] = text

    def in_order(self) -> Any:
        """Each phase once, after every phase it depends on, lowest position first — phases
        inserted while deciding (debates) included."""
        while True:
            ready = [p for p in self.by_key.values() if p.key not in self.decided
                     and all(d in self.decided or d not in self.by_key for d in p.depends_on)]
            if not ready:
                return
            nxt = min(ready, key=lambda p: p.position)
            self.decided.add(nxt.key)
            yield nxt.key

    # ------------------------------------------------------------ pins

    def pin(self, key: str) -> None:
        """Before ``from``, a phase keeps the models its source phase ran on (``meta.models``);
        a decision keeps its source's seed (``meta.seed``)."""
        p, src = self.by_key[key], self.source.get(key)
        if src is None:
            return
        if p.kind == "decision" and src.kind == "decision":
            self.replace(key, meta={**p.meta, "seed": decision_seed(src)})
            return
        if key in self.stage or self.stage & set(p.inputs) or not p.expert or src.expert != p.expert:
            return
        before = models_for(self.source_plan, src)
        if not before or before == models_for(self.plan, self.record(key)):
            return
        for name in before:
            try:
                self.models.spec(self.plan, name)
            except LLMError as exc:
                raise InvalidPlan(
                    f"invalid fork: {FROM}: phase {key} ran on model {name!r}, which this deployment no longer "
                    f"runs ({exc.message}): fork from an earlier phase",
                    details=[{"field": FROM, "message": f"{key} ran on model {name!r}, not runnable here"}]) from None
        self.replace(key, meta={**p.meta, "models": before})

    # ------------------------------------------------------------ effects of a copied phase

    def replay(self, copied: PhaseRecord, inputs: list[PhaseRecord]) -> None:
        text = self.texts.get(copied.id, "")
        if copied.kind == "divergence" and isinstance(self.plan, TeamPlan):
            self._debates(copied, text, inputs)
        if copied.kind == "round_summary":
            self._early_stop(copied, inputs)

    def _debates(self, check: PhaseRecord, text: str, inputs: list[PhaseRecord]) -> None:
        assert isinstance(self.plan, TeamPlan)
        try:
            verdict = parse_verdict(text)
        except MalformedVerdict:
            return
        ins = debate_insertion(self.plan, check, verdict, inputs)
        if ins is None or not ins.phases:
            return
        groups = {p.group_key for p in self.by_key.values() if p.kind == ins.phases[0].kind}
        if len(groups) >= self.plan.max_debates:
            self.events.append(event_shapes.limit_reached(ins.phases[0].kind, limit=self.plan.max_debates,
                                                          existing=len(groups)))
            return
        start = max(p.position for p in self.by_key.values()) + 1
        new_keys = [p.key for p in ins.phases]
        for p in list(self.by_key.values()):
            if p.key in self.decided:
                continue
            if ins.rewire in p.depends_on:
                self.replace(p.key, depends_on=[*p.depends_on, *[k for k in new_keys if k not in p.depends_on]])
            if ins.rewire in self.by_key[p.key].inputs:
                q = self.by_key[p.key]
                self.replace(p.key, inputs=[*q.inputs, *[k for k in new_keys if k not in q.inputs]])
        for p in ins.phases:
            self.by_key[p.key] = dataclasses.replace(p, position=start + p.position)
            self.pin(p.key)
        self.events.append(ins.event)

    def _early_stop(self, summary: PhaseRecord, inputs: list[PhaseRecord]) -> None:
        agreed = tally.agreed(self.plan, summary, inputs)
        if agreed is None:
            return
        skip = [k for k in agreed.skip if k in self.by_key and k not in self.decided]
        if not skip or any(k in self.stage or self.stage & set(self.by_key[k].inputs) for k in skip):
            return  # the fork starts inside the rounds it would skip: they run, as asked
        saved = {k: int((self.source[k].meta.get("tokens_saved") or 0) if k in self.source else 0) for k in skip}
        for key in skip:
            self.skipped[key] = Skipped(EARLY_STOP, agreed.reason)
            self.replace(key, meta={**self.by_key[key].meta, "tokens_saved": saved[key]})
        gone = set(skip)
        for p in list(self.by_key.values()):
            if p.key in gone or p.key in self.decided or not gone & set(p.depends_on):
                continue
            kept = [d for d in p.depends_on if d not in gone]
            self.replace(p.key, depends_on=kept if summary.key in kept else [*kept, summary.key])
        self.events.append(event_shapes.rounds_skipped(
            after_round=agreed.after_round, rounds=agreed.rounds, phases=skip, agreement=agreed.agreement,
            threshold=agreed.threshold, tokens_saved=sum(saved.values())))


def _bad_from(message: str) -> InvalidRequest:
    return InvalidRequest(f"{FROM}: {message}", details=[{"field": FROM, "message": message}])
