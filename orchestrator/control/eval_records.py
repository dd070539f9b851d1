"""Eval records, as the control plane keeps them: create once per (tenant, name), read back.

An eval's record is the resolved spec of a ``conclave eval`` run (its items, its arms, each
arm's plan template: :mod:`orchestrator.evaluation.spec` builds and checks it); its plans are
ordinary plans labelled ``eval=<name>``. Tenancy is the plans': a principal creates in its
tenant and reads only its tenant's evals (an admin's reach, or the operator's — no principal
— is every tenant), so another tenant's eval answers as a missing one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from orchestrator.control.reads import reach
from orchestrator.core.errors import (
    ConclaveError,
    EvalConflict,
    EvalNotFound,
    InvalidEval,
    ServiceUnavailable,
)
from storage import Database, evals
from storage import exceptions as storage_errors
from storage.evals import EvalCreated, EvalRecord, EvalSummary
from storage.identity import DEFAULT_TENANT, Principal

#: An eval's name: it is part of the label ``eval=<name>`` (at most 64 characters) and of
#: every task id of its plans.
EVAL_NAME_RE = r"^[a-z0-9][a-z0-9_-]{0,58}$"
MAX_EVAL_BYTES = 8_000_000  # a record with ~20,000 items


def check_name(name: object) -> str:
    if not isinstance(name, str) or not re.fullmatch(EVAL_NAME_RE, name):
        raise InvalidEval(f"name: {name!r} is not an eval name (1-59 lower-case letters, digits, '_' or '-', "
                          "starting with a letter or digit)",
                          details=[{"field": "name", "message": "not an eval name"}])
    return name


class EvalRecords:
    def __init__(self, db: Database) -> None:
        self.db = db

    def create(self, name: str, spec: dict[str, Any], *, principal: Principal | None = None) -> EvalCreated:
        """Store the eval in the principal's tenant (the default tenant without one), or return
        the stored one when its spec is the same; :class:`EvalConflict` when it is not."""
        check_name(name)
        if not isinstance(spec, dict):
            raise InvalidEval("spec: an eval's spec is a JSON object",
                              details=[{"field": "spec", "message": "not an object"}])
        if spec.get("name") != name:
            raise InvalidEval(f"name: {name!r} is not the name its record was made for ({spec.get('name')!r})",
                              details=[{"field": "name", "message": "not the record's name"}])
        size = len(json.dumps(spec, separators=(",", ":")))
        if size > MAX_EVAL_BYTES:
            raise InvalidEval(f"spec: {size} bytes, the limit is {MAX_EVAL_BYTES}",
                              details=[{"field": "spec", "message": "too large"}])
        tenant = principal.tenant if principal is not None else DEFAULT_TENANT
        with _boundary():
            return evals.create_eval(self.db, name=name, spec=spec, tenant=tenant)

    def get(self, name: str, *, principal: Principal | None = None) -> EvalRecord:
        check_name(name)
        with _boundary():
            return evals.get_eval(self.db, name, tenant=reach(principal))

    def list_evals(self, *, principal: Principal | None = None, limit: int = 100) -> list[EvalSummary]:
        with _boundary():
            return evals.list_evals(self.db, tenant=reach(principal), limit=limit)


@contextmanager
def _boundary() -> Iterator[None]:
    """Storage errors as the eval's errors, naming the field ``name``."""
    try:
        yield
    except storage_errors.NotFound as exc:
        raise EvalNotFound(str(exc), details=[{"field": "name", "message": "no such eval"}]) from exc
    except storage_errors.Conflict as exc:
        raise EvalConflict(str(exc), details=[{"field": "name", "message": "taken by another spec"}]) from exc
    except storage_errors.Unavailable as exc:
        raise ServiceUnavailable(f"database unavailable: {exc}") from exc
    except storage_errors.StorageError as exc:
        raise ConclaveError(str(exc)) from exc
