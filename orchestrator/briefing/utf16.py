"""Offsets in UTF-16 code units — the unit browsers and JavaScript index strings in.

Python indexes a ``str`` by code point; JavaScript by UTF-16 code unit, where every
character outside the Basic Multilingual Plane (most emoji, rarer CJK ideographs)
takes two. Every offset Conclave hands out (chunk start/end, citation positions) is in
UTF-16 code units, so ``text.slice(start, end)`` in a browser is exactly the span
(failure report R-03). This module is the only place that converts.
"""

from __future__ import annotations

import re
from bisect import bisect_left

_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def utf16_len(text: str) -> int:
    """The length of ``text`` in UTF-16 code units."""
    return len(text) + sum(1 for _ in _ASTRAL.finditer(text))


class Utf16Index:
    """Converts code-point indices of one text to UTF-16 offsets in O(log n) each."""

    def __init__(self, text: str) -> None:
        self._astral = [m.start() for m in _ASTRAL.finditer(text)]

    def offset(self, index: int) -> int:
        """The UTF-16 offset of code-point ``index`` (0 ≤ index ≤ len(text))."""
        return index + bisect_left(self._astral, index)


def utf16_slice(text: str, start: int, end: int) -> str:
    """``text.slice(start, end)`` as JavaScript computes it, for offsets that do not split
    a surrogate pair (every offset Conclave produces)."""
    return text.encode("utf-16-le")[2 * start:2 * end].decode("utf-16-le")
