"""Compile the ready set of a plan into a Celery canvas.

The canvas is a *trigger*, never the barrier: every canvas ends in
``conclave.advance(plan)``, which reads stored status and enqueues only phases
whose inputs are all completed. A lost or duplicated message therefore delays a
plan (the reconciler re-derives the canvas) but can neither strand it nor run a
phase whose inputs are missing.

Shapes: one ready phase → ``chain(run, [run of its linear successors…], advance)``;
several → ``chord(group(chain per ready phase…), advance)``.
A linear successor is a pending phase whose only dependency is the previous
step and which is that step's only dependent; a divergence check never gets a
successor chained, because it may insert debates its dependents must wait for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from storage.records import PhaseRecord
from storage.status import PhaseStatus

RUN_PHASE = "conclave.run_phase"
ADVANCE = "conclave.advance"


@dataclass(frozen=True)
class Run:
    phase_id: str
    key: str


@dataclass(frozen=True)
class Canvas:
    """``lanes`` run in parallel (one lane: a plain chain); each lane is a
    sequence of phases run one after the other; ``advance`` follows them all."""

    plan_id: str
    lanes: tuple[tuple[Run, ...], ...]

    @property
    def runs(self) -> list[Run]:
        return [r for lane in self.lanes for r in lane]

    @property
    def is_chord(self) -> bool:
        return len(self.lanes) > 1


def compile_canvas(plan_id: str, phases: Sequence[PhaseRecord], ready: Sequence[PhaseRecord]) -> Canvas:
    dependents: dict[str, list[PhaseRecord]] = {}
    for p in phases:
        for d in p.depends_on:
            dependents.setdefault(d, []).append(p)
    lanes = []
    for head in ready:
        lane = [Run(head.id, head.key)]
        cur = head
        while cur.kind != "divergence":
            nxt = [p for p in dependents.get(cur.key, []) if p.status == PhaseStatus.PENDING]
            if len(nxt) != 1 or nxt[0].depends_on != [cur.key]:
                break
            cur = nxt[0]
            lane.append(Run(cur.id, cur.key))
        lanes.append(tuple(lane))
    return Canvas(plan_id, tuple(lanes))


def shadow_name(key: str) -> str:
    return f"{RUN_PHASE}[{key}]"


def to_signature(canvas: Canvas, app: Any) -> Any:
    """The Celery signature for a canvas; tasks are sent by registered name."""
    from celery import chain, chord

    def run(r: Run) -> Any:
        # ``shadow``: the name Flower and worker logs show (conclave.run_phase[r1.dana])
        return app.signature(RUN_PHASE, kwargs={"plan_id": canvas.plan_id, "phase_id": r.phase_id,
                                                "phase_key": r.key}, immutable=True, shadow=shadow_name(r.key))

    advance = app.signature(ADVANCE, kwargs={"plan_id": canvas.plan_id}, immutable=True)
    lanes = [chain(*[run(r) for r in lane]) if len(lane) > 1 else run(lane[0]) for lane in canvas.lanes]
    if len(lanes) == 1:
        return chain(lanes[0], advance)
    return chord(lanes, advance)
