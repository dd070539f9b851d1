"""Named mutations, each breaking one invariant of DESIGN.md's table, and the tests
that must catch it (``make mutants`` applies each in a scratch copy and runs them).

One module per family of invariants; :data:`MUTATIONS` is all of them. Every
invariant id in DESIGN.md needs at least one mutation; add one with each invariant
you add, then run ``python -m tests.mutants.run --table`` to regenerate
``docs/invariants.md`` (a unit test fails while it is out of date). Pick the fastest
tests that catch the mutant (repository tests first, worker-process tests only where
the behaviour needs processes).

When code moves and the runner reports a stale anchor, copy the guarded line's new
text into ``old`` and its broken version into ``new``; keep ``name`` stable.
"""

from __future__ import annotations

from tests.mutants.catalogue import (
    api,
    briefing,
    connections,
    deliberation,
    fairshare,
    fence,
    fleet,
    flow,
    forks,
    hotpath,
    money,
    observability,
    offline,
    people,
    plans,
    races,
    systematic,
    tenancy,
    trust,
    webhooks,
)
from tests.mutants.catalogue_types import Mutation

MUTATIONS: tuple[Mutation, ...] = (
    *plans.MUTATIONS, *fence.MUTATIONS, *flow.MUTATIONS, *tenancy.MUTATIONS, *trust.MUTATIONS, *hotpath.MUTATIONS,
    *briefing.MUTATIONS, *offline.MUTATIONS, *api.MUTATIONS, *fleet.MUTATIONS, *observability.MUTATIONS,
    *races.MUTATIONS, *systematic.MUTATIONS, *deliberation.MUTATIONS, *money.MUTATIONS, *people.MUTATIONS,
    *forks.MUTATIONS, *connections.MUTATIONS, *webhooks.MUTATIONS, *fairshare.MUTATIONS)
