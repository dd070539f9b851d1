"""Compile the statically known part of a plan into one Celery canvas.

From the phases being sent now (the heads), the canvas reaches downstream as far as the
plan's shape is known: every pending phase whose dependencies are complete or earlier in
the canvas, stopping after a divergence check (it may insert debates that its dependents
must then wait for) and after a phase a person's seat waits for (``advance`` asks the seat
there, :func:`orchestrator.plan.dag.to_ask`; a seat is never in a canvas, and a worker's
claim refuses one). That region is decomposed into series and parallel parts
(:mod:`orchestrator.plan.seriesparallel`) and becomes chains of chords of ``run_phase``; a
board from its opening is one canvas::

    opening → chord(r1 turns) → r1.summary → chord(r2 turns) → r2.summary → final → advance

(an ``advance`` right after a run is sent as that run's last step, in the same task:
:func:`to_signature`).

``advance(plan)`` runs where the shape can change (right after a divergence check), where
the order stops being series-parallel, and at the end. The canvas is a *trigger*, never
the barrier: ``run_phase`` claims only a phase whose inputs are complete (a conditional
UPDATE), so a step that arrives early — a duplicate, a resend, the successor of a phase
that failed — does nothing, and the ``advance`` at the end of its lane re-derives the
plan from stored status. A lost message delays a plan (the reconciler re-derives it) but
can neither strand it nor run a phase whose inputs are missing.

Which pending phases join a canvas: those not marked enqueued by an earlier canvas — or
all downstream of a head that is being *re-sent* (its earlier canvas is broken: a lease
expired, a message was lost, or a resume), since their triggers were in that canvas.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.plan import dag
from orchestrator.plan.seriesparallel import Leaf, Node, Open, Parallel, Series, decompose, is_open
from storage.read_models import PhaseRecord
from storage.status import PhaseStatus

RUN_PHASE = "conclave.run_phase"
ADVANCE = "conclave.advance"


@dataclass(frozen=True)
class Run:
    phase_id: str
    key: str


@dataclass(frozen=True)
class Advance:
    """``conclave.advance(plan)``: re-derive the plan from stored status."""


@dataclass(frozen=True)
class Chain:
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Group:
    lanes: tuple[Step, ...]


Step = Run | Advance | Chain | Group


@dataclass(frozen=True)
class Canvas:
    """What one ``advance`` sends: a tree of chains and groups of runs and advances
    (a chain that runs a group and then a step is a chord)."""

    plan_id: str
    root: Step

    @property
    def runs(self) -> list[Run]:
        """Every ``run_phase`` in the canvas, depth first (plan order)."""
        return [s for s in walk(self.root) if isinstance(s, Run)]

    @property
    def advances(self) -> int:
        return sum(1 for s in walk(self.root) if isinstance(s, Advance))


def walk(step: Step) -> Iterable[Step]:
    yield step
    if isinstance(step, Chain):
        for s in step.steps:
            yield from walk(s)
    elif isinstance(step, Group):
        for s in step.lanes:
            yield from walk(s)


def region(phases: Sequence[PhaseRecord], heads: Sequence[PhaseRecord], resent: Iterable[str]) -> list[PhaseRecord]:
    """The heads and every pending phase statically downstream of them (see the module
    docstring), in plan order. ``resent``: keys of heads whose earlier canvas is broken."""
    by_key = {p.key: p for p in phases}
    inside = {h.key for h in heads}
    broken = set(resent)
    # a person's seat is asked by ``advance``, never run: the lanes leading to one end there
    asks = {d for p in phases if p.human and p.status == PhaseStatus.PENDING for d in p.depends_on}
    changed = True
    while changed:
        changed = False
        for p in phases:
            if p.key in inside or p.status != PhaseStatus.PENDING or not p.depends_on or p.human \
                    or p.held_at is not None:  # held for its tenant's share: only a release sends it
                continue
            deps = [by_key.get(k) for k in p.depends_on]
            if any(d is None for d in deps):
                continue
            known = [d for d in deps if d is not None]
            if any(d.key in inside and (d.kind == "divergence" or d.key in asks) for d in known):
                continue  # the check may insert debates p must wait for; a seat's turn is asked there
            if not all(d.key in inside or d.status == PhaseStatus.COMPLETED or dag.absent(d)
                       or (d.final and p.meta.get("tolerate_failed_deps")) for d in known):
                continue
            if not any(d.key in inside for d in known):
                continue
            carried = any(d.key in broken for d in known)
            if p.enqueued_at is None or carried:
                inside.add(p.key)
                if p.enqueued_at is not None or carried:
                    broken.add(p.key)
                changed = True
    return [p for p in phases if p.key in inside]


def orphans(phases: Sequence[PhaseRecord], resent: Iterable[str], sent: Iterable[str]) -> list[PhaseRecord]:
    """Pending phases downstream of a re-sent head that the new canvas does not carry, yet
    are marked enqueued: their trigger was in the broken canvas. Their marks must be
    released, so the ``advance`` that follows their inputs sends them at once."""
    dependents: dict[str, list[PhaseRecord]] = {}
    for p in phases:
        for d in p.depends_on:
            dependents.setdefault(d, []).append(p)
    carried = set(sent)
    seen: set[str] = set()
    stack = list(resent)
    while stack:
        for p in dependents.get(stack.pop(), []):
            if p.key not in seen and p.status == PhaseStatus.PENDING:
                seen.add(p.key)
                stack.append(p.key)
    return [p for p in phases if p.key in seen and p.key not in carried and p.enqueued_at is not None]


def compile_canvas(plan_id: str, phases: Sequence[PhaseRecord], heads: Sequence[PhaseRecord],
                   *, resent: Iterable[str] = ()) -> Canvas:
    """The canvas that sends ``heads`` and everything statically downstream of them."""
    members = sorted(region(phases, heads, resent), key=lambda p: p.position)
    by_key = {p.key: p for p in members}
    node = decompose([p.key for p in members], {p.key: p.depends_on for p in members})
    checks = {p.key for p in members if p.kind == "divergence"}
    return Canvas(plan_id, _flatten(_emit(node, by_key, checks, tail=True)))


def _open(node: Node, checks: set[str]) -> bool:
    if isinstance(node, Leaf):
        return node.key in checks
    if isinstance(node, Series):
        return _open(node.parts[-1], checks)
    if isinstance(node, Parallel):
        return any(_open(p, checks) for p in node.parts)
    return is_open(node)


def _emit(node: Node, by_key: dict[str, PhaseRecord], checks: set[str], *, tail: bool) -> Step:
    """``tail``: the node ends its lane, so an ``advance`` follows it — right after each
    branch that ends open (a check, or a cut), else once after all of it (a chord body)."""
    if isinstance(node, Leaf):
        run = Run(by_key[node.key].id, node.key)
        return Chain((run, Advance())) if tail else run
    if isinstance(node, Open):  # each minimal element ends its own lane: no barrier between them
        if isinstance(node.part, Parallel):
            return Group(tuple(_emit(p, by_key, checks, tail=True) for p in node.part.parts))
        return _emit(node.part, by_key, checks, tail=True)
    if isinstance(node, Series):
        last = len(node.parts) - 1
        return Chain(tuple(_emit(p, by_key, checks, tail=tail and i == last) for i, p in enumerate(node.parts)))
    if tail and any(_open(p, checks) for p in node.parts):
        return Group(tuple(_emit(p, by_key, checks, tail=True) for p in node.parts))
    lanes = Group(tuple(_emit(p, by_key, checks, tail=False) for p in node.parts))
    return Chain((lanes, Advance())) if tail else lanes


def _flatten(step: Step) -> Step:
    if isinstance(step, Chain):
        steps: list[Step] = []
        for s in (_flatten(s) for s in step.steps):
            steps.extend(s.steps if isinstance(s, Chain) else (s,))
        return steps[0] if len(steps) == 1 else Chain(tuple(steps))
    if isinstance(step, Group):
        lanes = tuple(_flatten(s) for s in step.lanes)
        return lanes[0] if len(lanes) == 1 else Group(lanes)
    return step


def shadow_name(key: str) -> str:
    return f"{RUN_PHASE}[{key}]"


def to_signature(canvas: Canvas, app: Any) -> Any:
    """The Celery signature for a canvas; tasks are sent by registered name (a chain
    holding a group followed by a step becomes a chord). An ``advance`` right after a run
    in a chain is that run's own last step (``run_phase(..., advance=True)``: the same task
    advances the plan once the phase is stored), not a task of its own: a plan's closing
    advance costs no message, no task and no result."""
    from celery import chain, group

    def run(step: Run, *, advance: bool = False) -> Any:
        kwargs: dict[str, Any] = {"plan_id": canvas.plan_id, "phase_id": step.phase_id, "phase_key": step.key}
        if advance:
            kwargs["advance"] = True
        # ``shadow``: the name Flower and worker logs show (conclave.run_phase[r1.dana])
        return app.signature(RUN_PHASE, kwargs=kwargs, immutable=True, shadow=shadow_name(step.key))

    def build(step: Step) -> Any:
        if isinstance(step, Run):
            return run(step)
        if isinstance(step, Advance):
            return app.signature(ADVANCE, kwargs={"plan_id": canvas.plan_id}, immutable=True)
        if isinstance(step, Chain):
            sigs: list[Any] = []
            for i, s in enumerate(step.steps):
                if isinstance(s, Advance) and i and isinstance(step.steps[i - 1], Run):
                    continue  # carried by the run before it
                follows = i + 1 < len(step.steps) and isinstance(step.steps[i + 1], Advance)
                sigs.append(run(s, advance=follows) if isinstance(s, Run) else build(s))
            return sigs[0] if len(sigs) == 1 else chain(*sigs)
        return group(*[build(s) for s in step.lanes])

    return build(canvas.root)
