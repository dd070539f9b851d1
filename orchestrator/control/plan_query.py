"""The plan listing's query, checked once for every caller: ``GET /v1/plans`` and the
local client's ``list_plans`` turn what they were given into :class:`PlanQuery` here, and
answer with :func:`page_dict` — so a filter the API refuses, the Python client refuses with
the same field error, and a page has one JSON shape.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from orchestrator.core.errors import InvalidRequest
from orchestrator.plan.schema import LABEL_RE, MAX_LABELS, TASK_ID_RE
from storage.listing import MAX_PAGE, Page, PlanSummary, decode_cursor
from storage.status import PlanStatus

DEFAULT_LIMIT = 50
#: One value or several, as a query string repeats a parameter.
Values = str | Sequence[str] | None
#: A moment as a datetime or ISO 8601 text; without a zone, UTC.
Moment = datetime | str | None


@dataclass(frozen=True)
class PlanQuery:
    """The listing's filters, checked; ``as_filters()`` is what :meth:`PlanReads.list_plans` takes."""

    statuses: tuple[PlanStatus, ...] = ()
    labels: tuple[str, ...] = ()
    created_after: datetime | None = None
    created_before: datetime | None = None
    task_id: str | None = None
    limit: int = DEFAULT_LIMIT
    cursor: str | None = None

    @classmethod
    def check(cls, *, status: Values = None, label: Values = None, created_after: Moment = None,
              created_before: Moment = None, task_id: str | None = None, limit: int | None = None,
              cursor: str | None = None) -> PlanQuery:
        """The query, or :class:`InvalidRequest` naming the first field that is wrong."""
        return cls(statuses=tuple(_status(s) for s in _many(status)), labels=_labels(_many(label)),
                   created_after=_moment("created_after", created_after),
                   created_before=_moment("created_before", created_before), task_id=_task_id(task_id),
                   limit=_limit(limit), cursor=_cursor(cursor))

    def as_filters(self) -> dict[str, Any]:
        return asdict(self)


def page_dict(page: Page) -> dict[str, Any]:
    """A page of plans as ``GET /v1/plans`` answers it: ``{"plans": [...], "next_cursor": …}``."""
    return {"plans": [summary_dict(p) for p in page.plans], "next_cursor": page.next_cursor}


def summary_dict(p: PlanSummary) -> dict[str, Any]:
    out = asdict(p)
    out["status"] = p.status.value  # what JSON carries
    out["created_at"] = p.created_at.isoformat()
    out["finished_at"] = p.finished_at.isoformat() if p.finished_at else None
    return out


def _refused(name: str, message: str) -> InvalidRequest:
    return InvalidRequest(f"{name}: {message}", details=[{"field": name, "message": message}])


def _many(value: Values) -> list[str]:
    return [value] if isinstance(value, str) else list(value or ())


def _status(value: str) -> PlanStatus:
    try:
        return PlanStatus(value)
    except ValueError:
        raise _refused("status", f"{value!r} is not a plan status") from None


def _labels(values: Sequence[str]) -> tuple[str, ...]:
    if len(values) > MAX_LABELS:
        raise _refused("label", f"at most {MAX_LABELS} labels")
    for value in values:
        if not re.fullmatch(LABEL_RE, value):
            raise _refused("label", f"{value!r} is not a label")
    return tuple(values)


def _moment(name: str, value: Moment) -> datetime | None:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise _refused(name, "not an ISO 8601 date and time") from None
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def _task_id(value: str | None) -> str | None:
    if value is not None and not (0 < len(value) <= 200 and re.fullmatch(TASK_ID_RE, value)):
        raise _refused("task_id", "not a task_id")
    return value


def _limit(value: int | None) -> int:
    if value is None:
        return DEFAULT_LIMIT
    if not 1 <= value <= MAX_PAGE:
        raise _refused("limit", f"between 1 and {MAX_PAGE}")
    return value


def _cursor(value: str | None) -> str | None:
    if value is not None:
        try:
            decode_cursor(value)
        except ValueError as exc:
            raise _refused("cursor", str(exc)) from None
    return value
