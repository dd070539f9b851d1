"""A plan's text, before it is a plan: read from its file within the size limit, parsed as
YAML or JSON, and every failure told the way an editor would point at it.

A syntax error names the file, line and column (``examples/board.yaml:12:3: not valid
YAML: …``) — never PyYAML's ``<unicode string>``, which is all the parser knows of a text
it was handed. A plan over the limit says how large it is and which setting raises the
limit (``CONCLAVE_MAX_PLAN_BYTES``). Every failure is an :class:`InvalidPlan`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from orchestrator.core.errors import InvalidPlan

# libyaml's loader when PyYAML has it (the wheels do): the same safe subset, ~10x faster,
# so a large YAML body costs the API milliseconds rather than seconds of CPU.
SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: The setting that raises a plan's size limit (``Settings.max_plan_bytes``).
SIZE_SETTING = "CONCLAVE_MAX_PLAN_BYTES"


def too_large(what: str, size: int, limit: int) -> InvalidPlan:
    """``what`` (``plan file x.yaml``, ``the plan``) is ``size`` bytes, over ``limit``."""
    seen = f"{size:,} bytes ({size / 1_000_000:.1f} MB)"
    message = f"{what} is {seen}; the limit is {limit:,} bytes (set {SIZE_SETTING} to raise it)"
    return InvalidPlan(message, details=[{"field": "", "message": f"too large: {seen}, over {SIZE_SETTING}={limit}"}])


def read_plan_file(path: Path, max_bytes: int) -> str:
    """The text of a plan file, at most ``max_bytes``."""
    try:
        if not path.is_file():
            problem = "it is a directory" if path.is_dir() else "no such file"
            raise InvalidPlan(f"cannot read plan file {str(path)!r}: {problem}",
                              details=[{"field": "", "message": problem}])
        size = path.stat().st_size
        if size > max_bytes:
            raise too_large(f"plan file {path}", size, max_bytes)
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InvalidPlan(f"cannot read plan file {str(path)!r}: {exc.strerror}",
                          details=[{"field": "", "message": str(exc.strerror)}]) from None


def parse_plan_text(text: str, where: str | None = None) -> Any:
    """A plan's text (JSON when it starts with ``{``, else YAML) as plain data; ``where`` is the
    file it came from, named in every syntax error."""
    is_json = text.lstrip().startswith("{")
    try:
        return json.loads(text) if is_json else yaml.load(text, Loader=SafeLoader)
    except json.JSONDecodeError as exc:
        raise _unparseable(where, "JSON", exc.msg, exc.lineno, exc.colno) from None
    except yaml.YAMLError as exc:
        problem, line, column = yaml_problem(exc)
        raise _unparseable(where, "YAML", problem, line, column) from None
    except RecursionError:
        raise _unparseable(where, "JSON" if is_json else "YAML", "nested too deeply", None, None) from None
    except ValueError as exc:  # integers beyond the digit limit, and their like
        raise _unparseable(where, "JSON" if is_json else "YAML", str(exc)[:200], None, None) from None


def yaml_problem(exc: yaml.YAMLError) -> tuple[str, int | None, int | None]:
    """What a YAML error says and the 1-based line and column it points at (None: nowhere)."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return (str(exc).splitlines() or ["syntax error"])[0], None, None
    mark = exc.problem_mark or exc.context_mark
    problem = exc.problem or exc.context or "syntax error"
    context = exc.context_mark
    if exc.context and exc.problem and context is not None and mark is not None \
            and (context.line, context.column) != (mark.line, mark.column):
        problem += f" ({exc.context} at line {context.line + 1}, column {context.column + 1})"
    if mark is None:
        return problem, None, None
    return problem, mark.line + 1, mark.column + 1


def position(where: str | None, line: int | None, column: int | None) -> str:
    """``file:12:3`` (an editor's way), or ``line 12, column 3`` for a text with no file."""
    if line is None:
        return where or ""
    if where:
        return f"{where}:{line}:{column}"
    return f"line {line}, column {column}"


def _unparseable(where: str | None, syntax: str, problem: str, line: int | None, column: int | None) -> InvalidPlan:
    at = position(where, line, column)
    detail: dict[str, Any] = {"field": "", "message": f"not valid {syntax}: {problem}"}
    if line is not None:
        detail.update(line=line, column=column)
    return InvalidPlan(f"{at + ': ' if at else ''}not valid {syntax}: {problem}", details=[detail])
