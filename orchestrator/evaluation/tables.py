"""Plain-text tables for the terminal, and the few number formats the report prints.

A table fits in :data:`WIDTH` columns whatever its data: the first column (an arm's name)
gives way, cut with ``~``, so a long name never breaks the layout of ``conclave eval``, and a
title longer than that (an eval's long name) wraps.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

WIDTH = 100
GAP = "  "
MIN_FIRST = 6  # the first column is never cut below this


def grid(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], *, width: int = WIDTH) -> str:
    """``title`` over a table of ``rows``; the first column left-aligned, the others right."""
    columns = len(headers)
    for row in rows:
        if len(row) != columns:
            raise ValueError(f"a row has {len(row)} cells, the table {columns} columns")
    widths = [max([len(headers[c]), *(len(row[c]) for row in rows)]) for c in range(columns)]
    rest = sum(widths[1:]) + len(GAP) * (columns - 1)
    widths[0] = max(MIN_FIRST, min(widths[0], width - rest))

    def line(cells: Sequence[str]) -> str:
        first = cells[0] if len(cells[0]) <= widths[0] else cells[0][: widths[0] - 1] + "~"
        parts = [first.ljust(widths[0]), *(cell.rjust(w) for cell, w in zip(cells[1:], widths[1:], strict=True))]
        return GAP.join(parts).rstrip()

    rule = "-" * min(width, sum(widths) + len(GAP) * (columns - 1))
    return "\n".join([textwrap.fill(title, width), line(headers), rule, *(line(row) for row in rows)])


def percent(value: float | None) -> str:
    """``83.7``: a share as a percentage with one decimal; ``-`` when undefined."""
    return "-" if value is None else f"{100 * value:.1f}"


def span(interval: tuple[float, float] | None) -> str:
    """``80.1-86.9``: a 95 % interval in percent."""
    return "-" if interval is None else f"{percent(interval[0])}-{percent(interval[1])}"


def amount(value: float | None) -> str:
    """``12,345``: a number of tokens, rounded."""
    return "-" if value is None else f"{value:,.0f}"


def dollars(value: float | None) -> str:
    """``$0.0123``: US dollars, to three significant places below a dollar."""
    if value is None:
        return "-"
    return f"${value:,.2f}" if value >= 1 else f"${value:.3g}"


def decimal(value: float | None, places: int = 2) -> str:
    return "-" if value is None else f"{value:.{places}f}"


def p_value(value: float) -> str:
    """``0.031``, ``<0.001``."""
    return "<0.001" if value < 0.001 else f"{value:.3f}"
