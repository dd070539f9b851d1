"""The code blocks of a Markdown document, as a reader sees them, for tests that run them.

A fenced block (```` ```sh ````, ```` ```python ````, …) is taken with its language, the line
its fence opens on and the heading it sits under. A block that is not meant to run says so
just before its fence, in a comment the rendered page hides::

    <!-- not-run: why this block cannot run as written -->

That marker is the only way a runnable block is left out (:attr:`Block.not_run`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

#: The languages a reader types into a shell or runs with Python.
SHELL = frozenset({"sh", "bash", "shell"})
PYTHON = frozenset({"python", "py"})
RUNNABLE = SHELL | PYTHON

_FENCE = re.compile(r"^```\s*([\w+-]*)\s*$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
_NOT_RUN = re.compile(r"^<!--\s*not-run:\s*(.*?)\s*-->$")


@dataclass(frozen=True)
class Block:
    """One fenced code block."""

    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    headings: tuple[str, ...]  # the headings it sits under, outermost first
    not_run: str | None  # the reason given by a ``not-run`` marker, if any

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"

    @property
    def runnable(self) -> bool:
        return self.lang in RUNNABLE


def blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path``, in document order (headings inside blocks are not headings)."""
    found: list[Block] = []
    headings: list[tuple[int, str]] = []
    lines = path.read_text().splitlines()
    previous = ""  # the last non-blank line outside a block
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            start, body = i, []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            if i == len(lines):
                raise ValueError(f"{path.name}:{start + 1}: a code block that never closes")
            marker = _NOT_RUN.match(previous)
            found.append(Block(path, start + 1, fence.group(1).lower(), "\n".join(body) + "\n",
                               tuple(h for _, h in headings), marker.group(1) if marker else None))
            previous = ""
        else:
            heading = _HEADING.match(line)
            if heading:
                level = len(heading.group(1))
                headings = [(lv, h) for lv, h in headings if lv < level] + [(level, heading.group(2))]
            if line.strip():
                previous = line.strip()
        i += 1
    return found


def section(path: Path, heading: str) -> list[Block]:
    """The blocks under ``heading`` (with its subsections)."""
    chosen = [b for b in blocks(path) if heading in b.headings]
    if not chosen:
        raise ValueError(f"{path.name}: no code block under a heading {heading!r}")
    return chosen
