"""Mutations of fair share (issue 20, part A): a tenant never runs more phases than its share
(I61), a held phase waits in Postgres and is never sent by a canvas (I62), the sweep releases
what a lost release left held (I63), and held phases go by weighted round-robin between tenants
and by priority within one, a priority patchable with its errors named (I64)."""

from __future__ import annotations

from tests.mutants.catalogue_types import Mutation, mutation

FAIR = "tests/integration/test_fair_share.py"
BURST = f"{FAIR}::test_a_tenant_runs_within_its_share_and_another_is_not_queued_behind_its_burst"
LOST = f"{FAIR}::test_a_lost_release_is_recovered_by_the_sweep"
ROUND_ROBIN = f"{FAIR}::test_held_phases_go_by_weighted_round_robin_between_tenants"
PRIORITY = f"{FAIR}::test_priority_goes_first_within_a_tenant_and_patch_changes_it"
PATCH = ("tests/e2e/test_plan_priority.py::"
         "test_priority_is_set_at_submit_patched_while_it_runs_and_refused_naming_the_field")

MUTATIONS: tuple[Mutation, ...] = (
    # I61 — a tenant never has more phases in flight than its share
    mutation(
        "share-off-by-one", "I61", "storage/sql/base.py",
        '        within = mine < bindparam("share_limit", type_=Integer)\n',
        '        within = mine <= bindparam("share_limit", type_=Integer)\n',
        tests=(BURST,),
        why="a tenant runs one phase more than its share at once"),
    mutation(
        "runner-ignores-the-share", "I61", "tasks/runner.py",
        "            if self.share is not None and plan_id is not None:\n",
        "            if False:\n",
        tests=(BURST,),
        why="a worker claims every phase it is sent: one tenant's burst takes the whole fleet"),

    # I62 — a held phase waits in Postgres: no advance or canvas sends it
    mutation(
        "advance-sends-a-held-phase", "I62", "orchestrator/plan/dag.py",
        "        if p.held_at is not None and p.status == PhaseStatus.PENDING:\n",
        "        if False:\n",
        tests=(LOST,),
        why="an advance sends a phase held for its tenant's share back to the broker (and it is held again)"),

    # I63 — the sweep releases what a lost release left held
    mutation(
        "sweep-releases-nothing", "I63", "orchestrator/control/coordinator.py",
        "        freed = fairshare.release_held(self.db, share) if share is not None else []\n",
        "        freed: list[str] = []\n",
        tests=(LOST,),
        why="a release lost with its worker leaves the phase held for ever while the tenant's slots are free"),

    # I64 — weighted round-robin between tenants, priority within one
    mutation(
        "weights-ignored", "I64", "storage/fairshare.py",
        "        passes[tenant] += 1.0 / policy.weight(tenant)\n",
        "        passes[tenant] += 1.0\n",
        tests=(ROUND_ROBIN,),
        why="a tenant of weight 2 gets no more of the released slots than one of weight 1"),
    mutation(
        "priority-reversed", "I64", "storage/fairshare.py",
        "                        .order_by(Plan.priority.desc(), Phase.held_at, Phase.position).limit(1)\n",
        "                        .order_by(Plan.priority, Phase.held_at, Phase.position).limit(1)\n",
        tests=(PRIORITY,),
        why="a tenant's low-priority plan is released before its high-priority one"),
    mutation(
        "fresh-claims-jump-the-queue", "I64", "storage/sql/base.py",
        "        return within & (PHASES.c.released_at.is_not(None) | ~waits.exists())\n",
        "        return within\n",
        tests=(f"{FAIR}::test_a_fresh_phase_does_not_jump_ahead_of_held_ones",),
        why="a fresh phase takes a free slot ahead of phases held before it: a burst's new messages take "
            "the slots the weighted round-robin gives away"),
    mutation(
        "priority-unbounded", "I64", "orchestrator/plan/schema.py",
        'Priority = Annotated[int, Field(ge=-2, le=2, description="-2..2, higher first within the tenant\'s share")]\n',
        'Priority = Annotated[int, Field(description="-2..2, higher first within the tenant\'s share")]\n',
        tests=(PATCH,),
        why="a PATCH or a submit stores a priority out of range instead of a 422 naming the field"),
)
