"""The one hypothesis setting every property test of the unit tier starts from.

Derandomised and without an example database: a run explores the same examples every time,
on every machine, so a counterexample found in CI reproduces locally with the same command.
Each test bounds itself with :func:`bounded` (how many examples, how long one may take), so
the whole set stays a few seconds of the edit loop. ``CONCLAVE_PROPERTY_EXAMPLES=N``
multiplies every bound by N and draws random examples: a longer hunt, on demand.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_SCALE = int(os.environ.get("CONCLAVE_PROPERTY_EXAMPLES", "1") or "1")


def bounded(examples: int, deadline_ms: int = 500) -> settings:
    """At most ``examples`` examples of at most ``deadline_ms`` each, reproducibly."""
    return settings(
        max_examples=examples * _SCALE,
        deadline=deadline_ms,
        derandomize=_SCALE == 1,
        database=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
