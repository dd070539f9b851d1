"""Mutations of the what-if fork invariants: a phase is copied only when what it would be sent is
what its source was sent (I77), contents are shared by reference and read through the phase
(I78), retention deletes a content only once nothing references it (I79), and a fork's usage is
only its new phases', admitted like any plan in its tenant (I80)."""

from __future__ import annotations

from tests.mutants.catalogue_types import Mutation, mutation

FORKS = "tests/unit/test_forks.py"
FROM_R2 = f"{FORKS}::test_a_board_forked_from_round_2_with_another_model_reuses_round_1_and_pays_only_for_round_2"
UPSTREAM = f"{FORKS}::test_a_change_upstream_of_from_reruns_what_it_reaches_and_everything_downstream"
TAMPERED = f"{FORKS}::test_a_stored_hash_that_does_not_match_is_never_copied"
HASH = f"{FORKS}::test_the_worker_stores_the_hash_a_fork_recomputes_and_it_tells_phases_apart"
LAST = f"{FORKS}::test_a_fork_with_nothing_changed_from_the_last_phase_reruns_only_it"
TENANCY = f"{FORKS}::test_a_fork_is_tenant_scoped_and_admitted_like_any_plan"
RETENTION = "tests/integration/repositories/test_retention.py"
SHARED = f"{RETENTION}::test_a_content_a_fork_points_at_outlives_its_source_and_goes_with_the_last_plan_that_does"
RACE = f"{RETENTION}::test_a_fork_made_while_retention_deletes_its_source_keeps_what_it_reuses_or_is_refused"
PAST = f"{RETENTION}::test_a_plan_past_retention_is_gone_from_every_table_and_the_others_are_untouched"
SQLITE = "[sqlite]"

MUTATIONS: tuple[Mutation, ...] = (
    # I77 — a phase is copied only where what it would be sent is what its source was sent
    mutation(
        "fork-copies-without-comparing-the-hash", "I77", "orchestrator/plan/forks.py",
        "                or _sent(plan, record, [i for i in inputs if i is not None], work.texts, models) "
        "!= src.sent_hash):\n",
        "                or False):\n",
        tests=(UPSTREAM, TAMPERED),
        why="a phase before `from` is copied by its key alone: an output is restored onto a phase whose system "
            "prompt, question or inputs changed"),
    mutation(
        "fork-copies-what-depends-on-from", "I77", "orchestrator/plan/forks.py",
        "        if key in stage or stage & set(phase.inputs):\n",
        "        if key in stage:\n",
        tests=(FROM_R2,),
        why="the phases downstream of `from` are copied instead of run: the fork's round-2 summary and final are "
            "the source's"),
    mutation(
        "fingerprint-ignores-the-models", "I77", "orchestrator/plan/fingerprint.py",
        '        "models": [_model(models.spec(plan, name)) for name in models_for(plan, phase)],\n',
        '        "models": [],\n',
        tests=(HASH,),
        why="the hash of what a phase is sent leaves out who answers: a phase answered by one model is copied "
            "onto one another model (another stance) would answer"),
    mutation(
        "worker-stores-no-hash", "I77", "tasks/runner.py",
        "            return fingerprint(work.plan, work.phase, work.inputs, work.texts, self.models, work.notes)\n",
        "            return None\n",
        tests=(FROM_R2, LAST),
        why="a completed phase carries no hash of what it was sent: a fork can copy nothing and reruns everything"),

    # I78 — contents by reference, read through the phase
    mutation(
        "copied-phase-points-at-no-content", "I78", "storage/plans.py",
        "        row.content_id, row.sent_hash, row.verdict = reused.content_id, reused.sent_hash, reused.verdict\n",
        "        row.content_id, row.sent_hash, row.verdict = None, reused.sent_hash, reused.verdict\n",
        tests=(FROM_R2,),
        why="a copied phase has no text: the fork's later phases are claimed without their inputs' words"),
    mutation(
        "inputs-read-through-the-wrong-key", "I78", "storage/sql/base.py",
        "                .select_from(PHASES.outerjoin(CONTENTS, CONTENTS.c.id == PHASES.c.content_id))\n",
        "                .select_from(PHASES.outerjoin(CONTENTS, CONTENTS.c.id == PHASES.c.id))\n",
        tests=(HASH,),
        why="a claim reads no input's text: every consumer works from nothing, and what it was sent is not what "
            "a fork recomputes"),

    # I79 — a content is deleted only once no phase references it
    mutation(
        "retention-keeps-unreferenced-contents", "I79", "storage/retention.py",
        "        _delete_contents(s, pointed)\n",
        "        pass  # contents left behind\n",
        tests=(f"{PAST}{SQLITE}", f"{SHARED}{SQLITE}"),
        why="a deleted plan's contents stay for ever, referenced by nothing: retention no longer bounds the store"),
    mutation(
        "retention-counts-references-without-locking", "I79", "storage/retention.py",
        "    s.execute(select(Content.id).where(Content.id.in_(candidates)).with_for_update())\n",
        "",
        tests=(RACE,),
        why="retention counts a content's references before a fork that is pointing at it has committed: its "
            "delete then fails on the new reference, and the source's deletion with it"),
    mutation(
        "fork-does-not-hold-its-contents", "I79", "storage/plans.py",
        "    wanted = {r.content_id for r in fork.reused.values()}\n    if not wanted:\n",
        "    wanted = {r.content_id for r in fork.reused.values()}\n    if True:\n",
        tests=(RACE,),
        why="a fork of a plan retention just deleted fails on a foreign key instead of saying its source is gone"),

    # I80 — a fork pays only for its new phases, and is admitted like any plan in its tenant
    mutation(
        "copied-phase-stored-pending", "I80", "storage/plans.py",
        "        row.status, row.finished_at, row.reused_from = PhaseStatus.COMPLETED, now, fork.source\n",
        "        row.status, row.finished_at, row.reused_from = PhaseStatus.PENDING, now, fork.source\n",
        tests=(FROM_R2,),
        why="a copied phase is claimed and run again in the fork: round 1 is paid for twice"),
    mutation(
        "fork-reaches-another-tenant", "I80", "orchestrator/control/coordinator.py",
        "        source_id = self.reads.resolve(ref, principal)\n",
        "        source_id = self.reads.resolve(ref, None)\n",
        tests=(TENANCY,),
        why="a tenant forks another tenant's plan, reading its spec and reusing its texts"),
    mutation(
        "diff-reaches-another-tenant", "I80", "orchestrator/control/reads.py",
        "            view = self.view(ref, principal=principal)\n",
        "            view = self.view(ref, principal=None)\n",
        tests=(TENANCY,),
        why="a tenant compares another tenant's plan with its own and reads its decision and final text"),
    mutation(
        "fork-admitted-past-the-cap", "I80", "orchestrator/control/coordinator.py",
        "            task_id=plan.task_id, max_active=self.settings.max_active_plans, max_debates=plan.max_debates,\n"
        "            labels=plan.labels, priority=plan.priority, tenant=state.plan.tenant,",
        "            task_id=plan.task_id, max_active=10**9, max_debates=plan.max_debates,\n"
        "            labels=plan.labels, priority=plan.priority, tenant=state.plan.tenant,",
        tests=(TENANCY,),
        why="a fork is not counted against its tenant's active cap: forks run past CONCLAVE_MAX_ACTIVE_PLANS"),
)
