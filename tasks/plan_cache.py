"""Parsed plan specs, cached per worker process by plan id.

A stored spec never changes (what can change later — ``max_debates``, the title — is a
plan column, read by the transaction that needs it), and plan ids are never reused, so
a parsed spec can be kept for as long as memory allows: a bounded LRU. A plan's spec
(up to ``CONCLAVE_MAX_PLAN_BYTES`` of JSON) is then read and parsed once per process,
not on every claim.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

from orchestrator.plan.schema import BoardPlan, TeamPlan

Plan = BoardPlan | TeamPlan


class SpecCache:
    def __init__(self, load: Callable[[str], Plan], size: int = 64) -> None:
        self._load = load
        self._size = size
        self._plans: OrderedDict[str, Plan] = OrderedDict()
        self._loading: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def get(self, plan_id: str) -> Plan:
        with self._lock:
            plan = self._hit(plan_id)
            if plan is not None:
                return plan
            loading = self._loading.setdefault(plan_id, threading.Lock())
        # one load per plan, outside the cache's lock: the first wave of a plan's phases
        # waits for it, other plans' phases do not
        with loading:
            with self._lock:
                plan = self._hit(plan_id)
            if plan is None:
                plan = self._load(plan_id)
                with self._lock:
                    self._plans[plan_id] = plan
                    while len(self._plans) > self._size:
                        self._plans.popitem(last=False)
        with self._lock:
            self._loading.pop(plan_id, None)
        return plan

    def _hit(self, plan_id: str) -> Plan | None:
        plan = self._plans.get(plan_id)
        if plan is not None:
            self._plans.move_to_end(plan_id)
        return plan

    def __contains__(self, plan_id: str) -> bool:
        with self._lock:
            return plan_id in self._plans
