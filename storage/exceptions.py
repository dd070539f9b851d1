"""Storage errors. Driver exceptions are translated at the repository boundary.

    StorageError          storage.error
    ├── NotFound          storage.not_found
    ├── Ambiguous         storage.ambiguous    (an id prefix several plans share: ``candidates``)
    ├── Conflict          storage.conflict     (unique/foreign-key violation, lost race)
    │   ├── CapacityExceeded storage.capacity_exceeded
    │   ├── RateLimited   storage.rate_limited (``retry_after`` seconds)
    │   ├── BudgetSpent   storage.budget_spent (a tenant's monthly budget: ``details``)
    │   └── Busy          storage.busy
    └── Unavailable       storage.unavailable  (cannot reach the database; retry later)

All are picklable (``RateLimited`` keeps its extra argument in ``args``) because they
cross Celery processes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import exc as sa_exc


class StorageError(Exception):
    code = "storage.error"


class NotFound(StorageError):
    code = "storage.not_found"


class Conflict(StorageError):
    code = "storage.conflict"


class Ambiguous(StorageError):
    """A reference that names more than one row (an id prefix): ``candidates`` holds them."""

    code = "storage.ambiguous"

    def __init__(self, message: str, candidates: list[str]) -> None:
        super().__init__(message, candidates)
        self.message = message
        self.candidates = candidates

    def __str__(self) -> str:
        return self.message


class Unavailable(StorageError):
    code = "storage.unavailable"


@contextmanager
def translated() -> Iterator[None]:
    """Turn SQLAlchemy/driver errors into :class:`StorageError` subclasses."""
    try:
        yield
    except StorageError:
        raise
    except sa_exc.IntegrityError as exc:
        raise Conflict(_first_line(exc)) from exc
    except (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError) as exc:
        raise Unavailable(_first_line(exc)) from exc
    except sa_exc.DBAPIError as exc:
        if exc.connection_invalidated:
            raise Unavailable(_first_line(exc)) from exc
        raise StorageError(_first_line(exc)) from exc


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc)
    return text.strip().splitlines()[0][:300] if text.strip() else type(exc).__name__


class CapacityExceeded(Conflict):
    code = "storage.capacity_exceeded"


class Busy(Conflict):
    """Someone else holds the guard (e.g. a resume already in progress)."""

    code = "storage.busy"


class RateLimited(Conflict):
    """A tenant's submit rate is exhausted; a new plan is accepted in ``retry_after`` s."""

    code = "storage.rate_limited"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message, retry_after)
        self.message = message
        self.retry_after = retry_after

    def __str__(self) -> str:
        return self.message


class BudgetSpent(Conflict):
    """A tenant's budget for the calendar month is spent: ``details`` has the tenant, the
    budget, what was spent and the month (``YYYY-MM``, UTC)."""

    code = "storage.budget_spent"

    def __init__(self, message: str, *, tenant: str, spent_usd: float, budget_usd: float, month: str) -> None:
        super().__init__(message, tenant, spent_usd, budget_usd, month)
        self.message = message
        self.details = {"tenant": tenant, "budget_usd": budget_usd, "spent_usd": spent_usd, "month": month}

    def __reduce__(self) -> tuple[object, ...]:
        d = self.details
        return (_budget_spent, (self.message, d["tenant"], d["spent_usd"], d["budget_usd"], d["month"]))

    def __str__(self) -> str:
        return self.message


def _budget_spent(message: str, tenant: str, spent_usd: float, budget_usd: float, month: str) -> BudgetSpent:
    return BudgetSpent(message, tenant=tenant, spent_usd=spent_usd, budget_usd=budget_usd, month=month)
