"""A plan's trace, derived from its id alone — no OpenTelemetry needed.

The phases of one plan run in many tasks, on many workers, and may be sent again by
another worker's reconciler long after the canvas that carried them: there is no one
context to propagate. So every process derives the same ids from the plan id: the trace
id is the plan's UUID itself (a trace is found by the plan id, hyphens dropped), and the
span every phase hangs from is a hash of it. That span is never recorded: trace viewers
show the phases as the children of a root they do not have.
"""

from __future__ import annotations

import hashlib
import uuid


def plan_trace_id(plan_id: str) -> int:
    """128 bits, never 0: the plan's UUID, or a hash of an id that is not one."""
    try:
        value = uuid.UUID(plan_id).int
    except ValueError:
        value = int.from_bytes(hashlib.sha256(f"conclave.trace:{plan_id}".encode()).digest()[:16], "big")
    return value or 1


def plan_span_id(plan_id: str) -> int:
    """64 bits, never 0: the plan's own (unrecorded) span, the parent of its phases."""
    value = int.from_bytes(hashlib.sha256(f"conclave.span:{plan_id}".encode()).digest()[:8], "big")
    return value or 1
