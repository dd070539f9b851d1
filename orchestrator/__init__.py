"""Control plane of Conclave: plan schema, coordinator, CLI and HTTP API.

Public surface::

    from orchestrator import Conclave, Settings, InvalidPlan, ConclaveError
"""

from orchestrator.client import Conclave
from orchestrator.errors import (
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
from orchestrator.schema import BoardPlan, TeamPlan, load_plan
from orchestrator.settings import Settings

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
