"""Mutations of the HTTP API's access rules and contract: a principal reaches only its
tenant's plans (I44), authentication fails closed and every route needs its scope (I45),
a PATCH changes only what was sent and stores only a plan that validates whole (I46),
the listing shows every plan exactly once across its pages (I47), and the plan page's
session cookie reads only, and only while its token is valid (I49)."""

from __future__ import annotations

from tests.mutants.catalogue_types import Mutation, mutation

PRINCIPALS = "tests/e2e/test_api_principals.py"
TENANTS = f"{PRINCIPALS}::test_tenants_scopes_revocation_and_the_audit_trail"
LISTING = f"{PRINCIPALS}::test_listing_filters_and_pages_without_gaps_or_repeats"
PATCH = f"{PRINCIPALS}::test_patch_changes_only_what_was_sent_and_validates_the_merged_plan"
PAGE = "tests/e2e/test_plan_page.py::test_sign_in_sessions_tenants_and_bad_input"

MUTATIONS: tuple[Mutation, ...] = (
    # I44 — a principal reaches only its tenant's plans
    mutation(
        "route-reads-as-the-operator", "I44", "orchestrator/api/plan_routes.py",
        "        view = await _call(_reads(request).view, inp.plan_ref(plan_id), principal=principal)\n",
        "        view = await _call(_reads(request).view, inp.plan_ref(plan_id), principal=None)\n",
        tests=(TENANTS,),
        why="GET /v1/plans/{id} shows another tenant's plan to any token that may read"),
    mutation(
        "page-reads-as-the-operator", "I44", "orchestrator/api/ui/routes.py",
        "        return await run_in_threadpool(read_snapshot, _reads(request), inp.plan_ref(plan_id), who)\n",
        "        return await run_in_threadpool(read_snapshot, _reads(request), inp.plan_ref(plan_id), None)\n",
        tests=(PAGE,),
        why="the plan page shows another tenant's plan to anyone signed in"),
    mutation(
        "listing-not-scoped-to-the-tenant", "I44", "orchestrator/control/reads.py",
        "        return listing.list_plans(self.db, tenant=tenant, **filters)\n",
        "        return listing.list_plans(self.db, tenant=None, **filters)\n",
        tests=(TENANTS,),
        why="GET /v1/plans lists every tenant's plans to every principal"),

    # I45 — authentication fails closed; every route needs its scope
    mutation(
        "scope-not-checked", "I45", "orchestrator/api/auth.py",
        "        if principal is not None and not principal.allows(scope):\n",
        "        if False:\n",
        tests=(TENANTS,),
        why="a read-only token submits, cancels, resumes and patches; anyone reads /metrics"),
    mutation(
        "unknown-token-becomes-the-operator", "I45", "orchestrator/api/auth.py",
        "        if found is None:\n            raise _unauthorized(\"unknown or revoked token\")\n",
        "",
        tests=(TENANTS,),
        why="a revoked, tampered or unknown token is let in as the operator, who sees every tenant"),
    mutation(
        "cluster-auth-open-by-default", "I45", "orchestrator/core/settings.py",
        "        return not self.embedded or self.api_token is not None\n",
        "        return self.api_token is not None\n",
        tests=("tests/unit/test_settings.py::test_authentication_fails_closed_in_a_cluster",),
        why="a cluster API with no token configured serves every request to anyone"),

    # I46 — a PATCH changes only what was sent and stores only a plan that validates whole
    mutation(
        "patch-merged-plan-not-revalidated", "I46", "orchestrator/plan/schema.py",
        "        checked = _Patched.model_validate(merged)\n",
        "        checked = _Patched.model_construct(**merged)\n",
        tests=(PATCH,),
        why="a patch whose merged plan is invalid (a repeated label) is stored"),
    mutation(
        "max-debates-patched-after-the-end", "I46", "storage/plans.py",
        '            if name in changes and plan.status in PLAN_FINAL:\n',
        "            if False:\n",
        tests=(PATCH,),
        why="the debate limit of a plan that has ended is changed and reported as a success"),
    mutation(
        "patch-actor-not-recorded", "I46", "storage/plans.py",
        "            outbox.append(event_shapes.plan_updated(changed, actor=actor.audit() if actor else None))\n",
        "            outbox.append(event_shapes.plan_updated(changed, actor=None))\n",
        tests=(TENANTS,),
        why="a change to a plan is stored without who made it"),

    # I47 — every plan exactly once across the listing's pages
    mutation(
        "listing-cursor-repeats-its-row", "I47", "storage/listing.py",
        "and_(Plan.created_at == at, Plan.id < last_id)",
        "and_(Plan.created_at == at, Plan.id <= last_id)",
        tests=(LISTING,),
        why="each page starts with the last plan of the page before"),

    # I49 — a browser session reads only, and only while its token is valid
    mutation(
        "session-cookie-authenticates-writes", "I49", "orchestrator/api/auth.py",
        'and not _headers(scope, b"authorization") and scope.get("method") in SAFE_METHODS:\n',
        'and not _headers(scope, b"authorization"):\n',
        tests=(PAGE,),
        why="a session cookie cancels, resumes, patches and submits: any page the browser opens can forge them"),
    mutation(
        "session-outlives-its-token", "I49", "storage/principals.py",
        "        if row is None or row.revoked_at is not None:\n            return None\n"
        "        if not hmac.compare_digest(",
        "        if row is None:\n            return None\n        if not hmac.compare_digest(",
        tests=(PAGE,),
        why="revoking a token leaves the browser sessions it opened working"),
    mutation(
        "session-mac-not-compared", "I49", "storage/principals.py",
        "        if not hmac.compare_digest(session_mac(row.token_hash, message), mac):\n            return None\n",
        "",
        tests=(PAGE,),
        why="anyone who knows a principal's id makes a session cookie for it"),
    mutation(
        "session-never-expires", "I49", "orchestrator/api/auth.py",
        "        if claim is None or claim.expired():\n",
        "        if claim is None:\n",
        tests=(PAGE,),
        why="a session cookie works forever"),
)
