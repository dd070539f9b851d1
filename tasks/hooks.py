"""Gateway hooks a phase runs with: spending (budgets and usage accounting), cancellation.

Small classes around every model call (summariser calls and retries included),
in the style of dramatiq's middleware, rather than flags threaded through calls.
"""

from __future__ import annotations

import itertools
from typing import Protocol

from orchestrator.gateway.failures import CallCancelled, LLMError
from orchestrator.gateway.model_gateway import CallHook
from orchestrator.gateway.types import ChatRequest, ModelSpec, Usage
from tasks.claimed import PhaseWork
from tasks.lease import Lease


class Ledger(Protocol):
    """Where spending is reserved and usage written (the phase runner)."""

    def reserve(self, work: PhaseWork, spec: ModelSpec, request: ChatRequest) -> int | None: ...

    def release_reservation(self, reservation: int) -> None: ...

    def record_usage(self, work: PhaseWork, *, seq: int, purpose: str, spec: ModelSpec, used: Usage,
                     reservation: int | None = None) -> None: ...


class Spend(CallHook):
    """Reserve before you spend. Before every call attempt, its worst case is reserved against
    the plan's budget and its tenant's month (:func:`storage.spend.reserve`; the call is refused
    with ``BudgetExhausted`` when it does not fit; nothing is reserved, and no statement run,
    when no budget applies). After it, a usage row is written as soon as the call ends, keyed by
    (phase, attempt, seq) — so a failure afterwards can never lose or double it — and the same
    write settles the reservation; a call that ended with no usage known gives it back."""

    def __init__(self, ledger: Ledger, work: PhaseWork) -> None:
        self._ledger = ledger
        self._work = work
        self._seq = itertools.count(1)
        self._held: int | None = None

    def before_call(self, spec: ModelSpec, request: ChatRequest) -> None:
        self._held = self._ledger.reserve(self._work, spec, request)

    def after_call(self, spec: ModelSpec, request: ChatRequest, usage: Usage | None,
                   error: LLMError | None) -> None:
        held, self._held = self._held, None
        if usage is not None:
            self._ledger.record_usage(self._work, seq=next(self._seq), purpose=request.purpose,
                                      spec=spec, used=usage, reservation=held)
        elif held is not None:
            self._ledger.release_reservation(held)


class StopWhenCancelled(CallHook):
    """No new model call once the plan is cancelled or the lease is lost."""

    def __init__(self, lease: Lease) -> None:
        self._lease = lease

    def before_call(self, spec: ModelSpec, request: ChatRequest) -> None:
        if self._lease.should_stop():
            raise CallCancelled("the plan was cancelled or the phase was taken over")
