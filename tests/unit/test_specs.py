"""The per-process cache of parsed plan specs: one load per plan, bounded."""

from __future__ import annotations

import threading
from typing import Any

from tasks.plan_cache import SpecCache
from tests.unit.stored import example


def test_a_plan_is_loaded_once_however_many_phases_ask_at_once() -> None:
    loads: list[str] = []
    gate = threading.Event()

    def load(plan_id: str) -> Any:
        gate.wait(5)
        loads.append(plan_id)
        return example("board")

    cache = SpecCache(load)
    got: list[Any] = []
    threads = [threading.Thread(target=lambda: got.append(cache.get("p1"))) for _ in range(8)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join(5)
    assert loads == ["p1"] and len(got) == 8 and all(g is got[0] for g in got)


def test_the_least_recently_used_plan_is_dropped_past_the_bound() -> None:
    loads: list[str] = []

    def load(plan_id: str) -> Any:
        loads.append(plan_id)
        return example("team")

    cache = SpecCache(load, size=2)
    cache.get("a")
    cache.get("b")
    cache.get("a")  # a is now the most recent
    cache.get("c")  # b goes
    assert "a" in cache and "c" in cache and "b" not in cache
    cache.get("b")
    assert loads == ["a", "b", "c", "b"]
