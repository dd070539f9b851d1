"""How long a person has to answer: ``90s``, ``30m``, ``2h``, ``3d`` (or whole seconds).

A duration is read once, at validation, into whole seconds — what a plan's spec stores and
what a deadline is computed from — and written back the short way for people to read.
"""

from __future__ import annotations

import re

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^([0-9]{1,7})\s*([smhd])$")


def parse_duration(value: object) -> int:
    """Whole seconds from ``"90s"``, ``"30m"``, ``"2h"``, ``"3d"`` or an integer of seconds;
    ``ValueError`` saying how to write one otherwise."""
    if isinstance(value, bool):
        raise ValueError("a duration like 90s, 30m, 2h or 3d, not a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        m = _DURATION.fullmatch(value.strip().lower())
        if m is not None:
            return int(m.group(1)) * UNITS[m.group(2)]
    raise ValueError(f"{value!r} is not a duration: write a number and a unit, like 90s, 30m, 2h or 3d")


def format_duration(seconds: int) -> str:
    """The shortest exact way to write ``seconds`` (``7200`` → ``2h``, ``5400`` → ``90m``)."""
    for unit, size in sorted(UNITS.items(), key=lambda u: -u[1]):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
