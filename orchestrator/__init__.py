"""Control plane of Conclave. Its subpackages, from the ground up (each imports only
those below it, and :mod:`storage`; ``tests/unit/test_layers.py`` enforces it):

    gateway       the model gateway: providers, guard, budget, egress
    core          settings, errors, the live bus, the version
    deliberation  answers, verdicts and the decision protocols' tallies (pure)
    briefing      briefing packs: chunking, retrieval, citations
    plan          the plan model and its compilation: schema, expansion, canvas, prompts, debates
    logs, metrics, tracing   what a process tells its operator
    control       the coordinator (commands and reads) and the dispatcher
    webhooks      signed webhooks: endpoints, signing, the backoff schedule, the courier
    fleet         the Celery app, the one start-up, embedded mode, health, Flower
    client        the one client, over a local or an HTTP backend
    evaluation    ``conclave eval``: specs, the harness, the report
    api           the HTTP API and the plan page
    cli           ``conclave``: one command family per module

Public surface (loaded on first use, so ``from orchestrator.plan.schema import Plan``
does not import Celery)::

    from orchestrator import Conclave, Settings, InvalidPlan, ConclaveError
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.client.conclave import Conclave
    from orchestrator.core.errors import (
        CapacityExceeded,
        ConclaveError,
        InvalidConfiguration,
        InvalidPlan,
        PlanConflict,
        PlanNotFound,
        ResumeInProgress,
        ServiceUnavailable,
        SubmitRateLimited,
        WaitTimeout,
    )
    from orchestrator.core.settings import Settings
    from orchestrator.plan.schema import BoardPlan, TeamPlan, load_plan

_WHERE = {
    "Conclave": "orchestrator.client.conclave",
    "Settings": "orchestrator.core.settings",
    "BoardPlan": "orchestrator.plan.schema",
    "TeamPlan": "orchestrator.plan.schema",
    "load_plan": "orchestrator.plan.schema",
    **dict.fromkeys(["CapacityExceeded", "ConclaveError", "InvalidConfiguration", "InvalidPlan", "PlanConflict",
                     "PlanNotFound", "ResumeInProgress", "ServiceUnavailable", "SubmitRateLimited", "WaitTimeout"],
                    "orchestrator.core.errors"),
}

__all__ = [
    "BoardPlan",
    "CapacityExceeded",
    "Conclave",
    "ConclaveError",
    "InvalidConfiguration",
    "InvalidPlan",
    "PlanConflict",
    "PlanNotFound",
    "ResumeInProgress",
    "ServiceUnavailable",
    "Settings",
    "SubmitRateLimited",
    "TeamPlan",
    "WaitTimeout",
    "load_plan",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
