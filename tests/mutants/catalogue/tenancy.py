"""Mutations of the tenancy invariants: the submit rate (I16), plan and task ids (I20),
tokens (I21) and the audit trail (I22)."""

from __future__ import annotations

from tests.mutants.catalogue_types import Mutation, mutation

TENANCY = "tests/integration/test_tenancy.py"
PRINCIPALS = "tests/integration/test_principals.py"
SCHEMA = "tests/unit/test_schema.py"
PG = "[postgresql]"
SQLITE = "[sqlite]"
RATE = f"{TENANCY}::test_the_submit_rate_is_per_tenant_and_says_when_to_retry{PG}"
SCOPED = f"{TENANCY}::test_task_ids_are_scoped_to_their_tenant{PG}"
PLAN_ID_SHAPED = f"{TENANCY}::test_a_plan_id_shaped_reference_only_ever_finds_a_plan_id{PG}"
AUDIT = f"{TENANCY}::test_submit_records_the_principal_and_cancel_and_resume_record_the_actor{PG}"
ROTATION = f"{PRINCIPALS}::test_rotation_two_tokens_of_a_tenant_then_revoke_the_old_one{PG}"
CALLERS = "tests/integration/test_callers_and_their_tenants.py"
WHO_ASKED = f"{CALLERS}::test_submit_cancel_and_resume_record_who_asked"


MUTATIONS: tuple[Mutation, ...] = (
    # I16 — a tenant's submit rate
    mutation(
        "rate-limit-off-by-one", "I16", "storage/tenancy.py",
        "        if recent >= submit_rate:\n",
        "        if recent > submit_rate:\n",
        tests=(RATE,),
        why="one plan more than CONCLAVE_SUBMIT_RATE per minute is accepted"),
    mutation(
        "rate-limit-lock-dropped", "I16", "storage/tenancy.py",
        "        s.execute(select(func.pg_advisory_xact_lock(lock_key(tenant))))\n",
        "        pass\n",
        tests=(f"{TENANCY}::test_per_tenant_rate_limit_holds_under_racing_submissions",),
        why="racing submissions each count the window before any inserts and all get in past the rate"),
    mutation(
        "rate-limit-counts-every-tenant", "I16", "storage/tenancy.py",
        ".where(Plan.tenant == tenant, Plan.created_at > since)",
        ".where(Plan.created_at > since)",
        tests=(RATE,),
        why="one tenant's submissions use up every other tenant's rate"),
    mutation(
        "rate-window-never-slides", "I16", "storage/tenancy.py",
        ".where(Plan.tenant == tenant, Plan.created_at > since)",
        ".where(Plan.tenant == tenant)",
        tests=(RATE,),
        why="plans older than a minute still count: a tenant that reached the rate is refused for good"),
    mutation(
        "retry-after-always-the-whole-window", "I16", "storage/tenancy.py",
        "            wait = (oldest + RATE_WINDOW - now).total_seconds() if oldest is not None else 1.0\n",
        "            wait = RATE_WINDOW.total_seconds()\n",
        tests=(RATE,),
        why="the refusal's retry_after ignores when the oldest plan leaves the window"),

    # I20 — plan ids and task ids are never confused
    mutation(
        "task-id-may-look-like-a-plan-id", "I20", "orchestrator/plan/schema.py",
        "        if v is not None and as_plan_id(v) is not None:\n",
        "        if False:\n",
        tests=(f"{SCHEMA}::test_a_task_id_shaped_like_a_plan_id_is_rejected",),
        why="a plan is accepted with a UUID-shaped task_id, which can shadow another plan's id"),
    mutation(
        "only-the-canonical-uuid-is-plan-id-shaped", "I20", "storage/ids.py",
        "        return str(uuid.UUID(ref.strip()))\n",
        "        return ref if ref == str(uuid.UUID(ref)) else None\n",
        tests=(f"{SCHEMA}::test_a_task_id_shaped_like_a_plan_id_is_rejected", PLAN_ID_SHAPED),
        why="an upper-case or unhyphenated UUID is taken for a task id: accepted as one, and looked up among "
            "task ids, where another plan may hold it"),
    mutation(
        "resolve-looks-up-both-ids", "I20", "storage/plans.py",
        "q = select(Plan.id, Plan.tenant).where(Plan.id == plan_id if plan_id is not None else Plan.task_id == ref)",
        "q = select(Plan.id, Plan.tenant).where(or_(Plan.id == (plan_id or ref), Plan.task_id == ref))",
        tests=(PLAN_ID_SHAPED,),
        why="a reference is matched against plan ids and task ids at once: a task id shaped like a plan's "
            "id captures or blocks lookups of that plan"),
    mutation(
        "resolve-not-scoped-to-the-tenant", "I20", "storage/plans.py",
        "    if tenant is not None:\n        q = q.where(Plan.tenant == tenant)\n",
        "    if False:\n        q = q.where(Plan.tenant == tenant)\n",
        tests=(SCOPED,),
        why="a tenant's lookup finds another tenant's plan by its id or task id"),
    mutation(
        "operator-lookup-picks-a-tenant", "I20", "storage/plans.py",
        "    if len(rows) > 1:\n",
        "    if False:\n",
        tests=(SCOPED,),
        why="the operator's lookup of a task id used by several tenants silently picks one of their plans"),
    mutation(
        "coordinator-finds-plans-in-every-tenant", "I20", "orchestrator/control/reads.py",
        "        return plans.resolve(self.db, ref, tenant=tenant)\n",
        "        return plans.resolve(self.db, ref, tenant=None)\n",
        tests=(f"{CALLERS}::test_a_principal_finds_cancels_and_resumes_only_its_tenants_plans",),
        why="a principal reads, cancels and resumes another tenant's plan by its id or task id"),

    # I21 — tokens
    mutation(
        "token-hash-not-compared", "I21", "storage/principals.py",
        "        if row is None or row.revoked_at is not None or not hash_matches(token, row.token_hash):\n",
        "        if row is None or row.revoked_at is not None:\n",
        tests=(f"{PRINCIPALS}::test_tampered_unknown_and_malformed_tokens_authenticate_nobody{PG}",),
        why="any token naming a principal's id authenticates as it, whatever its secret"),
    mutation(
        "revoked-token-accepted", "I21", "storage/principals.py",
        "        if row is None or row.revoked_at is not None or not hash_matches(token, row.token_hash):\n",
        "        if row is None or not hash_matches(token, row.token_hash):\n",
        tests=(ROTATION,),
        why="a revoked token still authenticates"),
    mutation(
        "token-stored-in-clear", "I21", "storage/principals.py",
        "token_hash=digest,",
        "token_hash=token,",
        tests=(f"{PRINCIPALS}::test_a_token_is_shown_once_and_stored_only_as_its_hash{SQLITE}",),
        why="the token itself is stored, not its SHA-256"),
    mutation(
        "a-new-token-revokes-the-tenants-others", "I21", "storage/principals.py",
        "        s.add(row)\n        s.flush()\n",
        "        s.execute(update(PrincipalRow)\n"
        "                  .where(PrincipalRow.tenant == tenant, PrincipalRow.revoked_at.is_(None))\n"
        "                  .values(revoked_at=utcnow()))\n"
        "        s.add(row)\n        s.flush()\n",
        tests=(ROTATION,),
        why="creating a token revokes the tenant's other tokens: a rotation without downtime is impossible"),

    # I22 — who did it is recorded
    mutation(
        "submit-principal-not-recorded", "I22", "storage/plans.py",
        "principal=principal.audit() if principal else None,",
        "principal=None,",
        tests=(AUDIT,),
        why="the plan_submitted event does not say who submitted the plan"),
    mutation(
        "cancel-actor-not-recorded", "I22", "storage/plans.py",
        "event_shapes.cancel_requested(keys, actor=actor.audit() if actor else None)",
        "event_shapes.cancel_requested(keys, actor=None)",
        tests=(AUDIT,),
        why="the cancel_requested event does not say who cancelled the plan"),
    mutation(
        "resume-actor-not-recorded", "I22", "storage/plans.py",
        "reset=reset,\n                                                actor=actor.audit() if actor else None))",
        "reset=reset,\n                                                actor=None))",
        tests=(AUDIT,),
        why="the resume_requested event does not say who resumed the plan"),
    mutation(
        "coordinator-submit-forgets-the-caller", "I22", "orchestrator/control/coordinator.py",
        "tenant=tenant, principal=principal,",
        "tenant=tenant, principal=None,",
        tests=(WHO_ASKED,),
        why="a plan submitted through the API or CLI records no submitter"),
    mutation(
        "coordinator-cancel-forgets-the-caller", "I22", "orchestrator/control/coordinator.py",
        "plans.request_cancel(self.db, plan_id, actor=principal)",
        "plans.request_cancel(self.db, plan_id)",
        tests=(WHO_ASKED,),
        why="a cancel through the API or CLI records no actor"),
    mutation(
        "coordinator-resume-forgets-the-caller", "I22", "orchestrator/control/coordinator.py",
        "plans.reopen(self.db, plan_id, retry_failed=retry_failed, actor=principal)",
        "plans.reopen(self.db, plan_id, retry_failed=retry_failed)",
        tests=(WHO_ASKED,),
        why="a resume through the API or CLI records no actor"),
)
