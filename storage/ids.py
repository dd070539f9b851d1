"""Plan ids and the one rule that keeps them apart from task ids.

A plan id is a UUID (stored in its canonical lower-case hyphenated form). Anything a
UUID parser accepts — any case, with or without hyphens, braces or a ``urn:uuid:``
prefix — is *shaped like a plan id*: such a string is never accepted as a
``task_id``, and a reference shaped like one is looked up among plan ids only
(:func:`storage.plans.resolve`). So a task id can never shadow or be shadowed by a
plan id.

A *prefix* of a plan id (:func:`as_id_prefix`: at least :data:`MIN_PREFIX` hex digits,
hyphens where the id has them) names the one plan whose id starts with it — but only
when no task id is exactly that string: an exact name always wins over a prefix.
"""

from __future__ import annotations

import re
import uuid

MIN_PREFIX = 4
_HEX_RE = re.compile(r"[0-9a-f]+")
_GROUPS = (8, 4, 4, 4, 12)  # a UUID's hex digits between its hyphens


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


def is_short_prefix(ref: str) -> bool:
    """Whether ``ref`` reads as the start of a plan id but is shorter than :data:`MIN_PREFIX`
    hex digits: a lookup that finds nothing by it says how long a prefix must be."""
    digits = ref.strip().lower().replace("-", "") if isinstance(ref, str) else ""
    return 0 < len(digits) < MIN_PREFIX and _HEX_RE.fullmatch(digits) is not None


def as_id_prefix(ref: str) -> str | None:
    """The canonical start of a plan id ``ref`` denotes — at least :data:`MIN_PREFIX` hex
    digits, shorter than an id, any case, hyphens optional — else None."""
    if not isinstance(ref, str) or len(ref) > 40:
        return None
    digits = ref.strip().lower().replace("-", "")
    if not MIN_PREFIX <= len(digits) < 32 or not _HEX_RE.fullmatch(digits):
        return None
    parts, at = [], 0
    for size in _GROUPS:
        if at < len(digits):
            parts.append(digits[at:at + size])
        at += size
    return "-".join(parts)
