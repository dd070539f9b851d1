"""A canvas as plain data, for assertions: a run is its key, an advance is ``"advance"``,
a chain a list, a group a tuple."""

from __future__ import annotations

from typing import Any

from orchestrator.plan.canvas import Advance, Canvas, Chain, Run, Step


def shape(canvas: Canvas) -> Any:
    return _shape(canvas.root)


def _shape(step: Step) -> Any:
    if isinstance(step, Run):
        return step.key
    if isinstance(step, Advance):
        return "advance"
    if isinstance(step, Chain):
        return [_shape(s) for s in step.steps]
    return tuple(_shape(s) for s in step.lanes)
