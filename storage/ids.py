"""Plan ids and the one rule that keeps them apart from task ids.

A plan id is a UUID (stored in its canonical lower-case hyphenated form). Anything a
UUID parser accepts — any case, with or without hyphens, braces or a ``urn:uuid:``
prefix — is *shaped like a plan id*: such a string is never accepted as a
``task_id``, and a reference shaped like one is looked up among plan ids only
(:func:`storage.plans.resolve`). So a task id can never shadow or be shadowed by a
plan id.
"""

from __future__ import annotations

import uuid


def new_plan_id() -> str:
    return str(uuid.uuid4())


def as_plan_id(ref: str) -> str | None:
    """The canonical plan id ``ref`` denotes if it is shaped like one, else None."""
    if not isinstance(ref, str) or len(ref) > 100:
        return None
    try:
        return str(uuid.UUID(ref.strip()))
    except ValueError:
        return None
