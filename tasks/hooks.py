"""Gateway hooks a phase runs with: usage accounting, the plan's token budget, cancellation.

Small classes around every model call (summariser calls and retries included),
in the style of dramatiq's middleware, rather than flags threaded through calls.
"""

from __future__ import annotations

import itertools
from typing import Protocol

from orchestrator.gateway.budget import estimate_tokens
from orchestrator.gateway.failures import BudgetExhausted, CallCancelled, LLMError
from orchestrator.gateway.model_gateway import CallHook
from orchestrator.gateway.types import ChatRequest, ModelSpec, Usage
from tasks.claimed import PhaseWork
from tasks.lease import Lease


class Ledger(Protocol):
    """Where usage is written and read (the phase runner)."""

    def record_usage(self, work: PhaseWork, *, seq: int, purpose: str, spec: ModelSpec, used: Usage) -> None: ...

    def spent_tokens(self, plan_id: str) -> int: ...


class RecordUsage(CallHook):
    """Writes a usage row per model call as soon as the call ends, keyed by
    (phase, attempt, seq) — so a failure afterwards can never lose or double it."""

    def __init__(self, ledger: Ledger, work: PhaseWork) -> None:
        self._ledger = ledger
        self._work = work
        self._seq = itertools.count(1)

    def after_call(self, spec: ModelSpec, request: ChatRequest, usage: Usage | None,
                   error: LLMError | None) -> None:
        if usage is not None:
            self._ledger.record_usage(self._work, seq=next(self._seq), purpose=request.purpose,
                                      spec=spec, used=usage)


class TokenBudget(CallHook):
    """Stops the plan before the call that would take it past ``budget.max_tokens``."""

    def __init__(self, ledger: Ledger, work: PhaseWork) -> None:
        self._ledger = ledger
        self._work = work

    def before_call(self, spec: ModelSpec, request: ChatRequest) -> None:
        budget = self._work.plan.budget
        if budget is None:
            return
        spent = self._ledger.spent_tokens(self._work.plan_id)
        text = request.system + request.prompt + "".join(b.text for b in request.context)
        need = estimate_tokens(text) + spec.max_output_tokens
        if spent + need > budget.max_tokens:
            raise BudgetExhausted(f"{spent} tokens spent; this call needs up to {need} more, "
                                  f"past the plan's budget of {budget.max_tokens}")


class StopWhenCancelled(CallHook):
    """No new model call once the plan is cancelled or the lease is lost."""

    def __init__(self, lease: Lease) -> None:
        self._lease = lease

    def before_call(self, spec: ModelSpec, request: ChatRequest) -> None:
        if self._lease.should_stop():
            raise CallCancelled("the plan was cancelled or the phase was taken over")
