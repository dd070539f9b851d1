"""Mutations of the webhook invariants: the outbox is written by the event's own transaction,
for the plan's tenant's subscribed endpoints only (I73); a delivery is made at least once,
leased, fenced, retried to its horizon (I74); it is signed with a secret derived, never stored
or logged (I75); it goes only where the operator allows, and a tenant reaches only its own
endpoints (I76)."""

from __future__ import annotations

from tests.mutants.catalogue_types import Edit, Mutation, mutation

MIGRATION = "storage/migrations/versions/0013_webhooks.py"
UNIT = "tests/unit/webhooks"
OUTBOX = f"{UNIT}/test_webhook_outbox.py"
COURIER = f"{UNIT}/test_webhook_courier.py"
SIGNING = f"{UNIT}/test_webhook_signing.py"
SCHEDULE = f"{UNIT}/test_webhook_schedule.py"
ENDPOINTS = f"{UNIT}/test_webhook_endpoints.py"
SENDING = f"{UNIT}/test_webhook_sending.py"
DELIVERY = "tests/integration/test_webhook_delivery.py"
API = "tests/integration/test_webhook_api.py"
LEASED = f"{COURIER}::test_a_delivery_is_taken_by_one_courier_until_its_lease_passes_and_a_stale_one_records_nothing"

MUTATIONS: tuple[Mutation, ...] = (
    # I73 — one row per subscribed endpoint of the plan's tenant, in the event's transaction
    mutation(
        "webhook-to-every-tenant", "I73", MIGRATION,
        "    WHERE e.tenant = p.tenant\n      AND EXISTS",
        "    WHERE 1 = 1\n      AND EXISTS",
        tests=(f"{OUTBOX}::test_a_finished_plan_writes_one_delivery_per_subscribed_endpoint_of_its_tenant",),
        why="an event of one tenant's plan is delivered to every tenant's endpoints (SQLite)"),
    mutation(
        "webhook-to-every-tenant-on-postgres", "I73", MIGRATION,
        "    WHERE e.tenant = p.tenant AND (e.events::jsonb",
        "    WHERE (e.events::jsonb",
        tests=(f"{API}::test_an_endpoint_receives_only_its_own_tenants_plans",),
        why="on Postgres, an event of one tenant's plan is delivered to every tenant's endpoints"),
    mutation(
        "webhook-ignores-subscriptions", "I73", MIGRATION,
        "WHERE j.value = NEW.type OR j.value = '*');",
        "WHERE 1 = 1);",
        tests=(f"{OUTBOX}::test_the_trigger_decides_as_subscribes_says_for_every_type",),
        why="an endpoint receives event types it did not subscribe to"),
    mutation(
        "webhook-endpoint-read-without-key-share", "I73", MIGRATION,
        "    FOR KEY SHARE OF e;\n",
        "    ;\n",
        tests=(f"{DELIVERY}::test_an_endpoint_deleted_while_a_plan_finishes_is_skipped_not_an_error",),
        why="an endpoint deleted while a plan finishes makes the plan's finishing transaction fail on a "
            "foreign key"),

    # I74 — at least once: leased, fenced, retried to the horizon, then failed
    mutation(
        "webhook-claim-without-lease", "I74", "storage/webhook_outbox.py",
        "                  .values(attempts=WebhookDelivery.attempts + 1, next_attempt_at=lease_until, "
        "last_attempt_at=now)\n",
        "                  .values(attempts=WebhookDelivery.attempts + 1, last_attempt_at=now)\n",
        tests=(LEASED,),
        why="a delivery a courier is sending stays due: every other courier takes it too"),
    mutation(
        "webhook-lease-never-passes", "I74", "storage/webhook_outbox.py",
        "next_attempt_at=lease_until, last_attempt_at=now)\n",
        "next_attempt_at=None, last_attempt_at=now)\n",
        tests=(LEASED,),
        why="a delivery whose courier died mid-request is never due again: it is lost"),
    mutation(
        "webhook-outcome-not-fenced", "I74", "storage/webhook_outbox.py",
        "                           .where(WebhookDelivery.id == delivery_id, WebhookDelivery.attempts == attempt,\n",
        "                           .where(WebhookDelivery.id == delivery_id,\n",
        tests=(LEASED,),
        why="a courier whose lease passed overwrites what the courier that took the delivery over recorded"),
    mutation(
        "webhook-given-up-at-once", "I74", "orchestrator/webhooks/schedule.py",
        "    return min(now + timedelta(seconds=backoff(attempt, draw)), deadline)\n",
        "    return None\n",
        tests=(f"{COURIER}::test_a_failed_attempt_is_tried_again_after_its_backoff_with_the_same_id_and_body",
               f"{SCHEDULE}::test_attempts_come_until_the_horizon_the_last_one_at_it_then_none"),
        why="a delivery that fails once is failed: a receiver down for a minute loses it"),
    mutation(
        "webhook-never-given-up", "I74", "orchestrator/webhooks/schedule.py",
        "    if now >= deadline:\n        return None\n",
        "",
        tests=(f"{SCHEDULE}::test_attempts_come_until_the_horizon_the_last_one_at_it_then_none",),
        why="a delivery is retried past its horizon, forever, and never shows as failed"),

    # I75 — signed; secrets derived, shown once, never stored or logged
    mutation(
        "webhook-signature-without-timestamp", "I75", "orchestrator/webhooks/signing.py",
        'f"{timestamp}.".encode() + body, hashlib.sha256',
        "body, hashlib.sha256",
        tests=(f"{SIGNING}::test_the_documented_snippet_accepts_a_delivery_and_nothing_altered",),
        why="the timestamp is not signed: a captured delivery can be replayed with a fresh timestamp"),
    mutation(
        "webhook-secret-ignores-version", "I75", "orchestrator/webhooks/signing.py",
        'f"{_LABEL}:{endpoint_id}:{version}"',
        'f"{_LABEL}:{endpoint_id}"',
        tests=(f"{SIGNING}::test_each_endpoint_and_version_has_its_own_secret_derived_from_the_operators_key",
               f"{ENDPOINTS}::test_a_rotation_gives_a_new_secret_and_says_until_when_the_old_one_signs"),
        why="a rotation hands out the same secret again: a leaked secret cannot be revoked"),
    mutation(
        "webhook-previous-secret-signs-forever", "I75", "orchestrator/webhooks/request.py",
        " and now < due.previous_valid_until:",
        ":",
        tests=(f"{SIGNING}::test_after_a_rotation_the_previous_secret_signs_too_until_its_time",),
        why="after a rotation the previous secret keeps signing deliveries after its window"),
    mutation(
        "webhook-secret-shape-not-redacted", "I75", "orchestrator/logs/redaction.py",
        '    (re.compile(rf"\\b({re.escape(WEBHOOK_SECRET_PREFIX)})[A-Za-z0-9_-]+"), rf"\\1{MASK}"),\n',
        "",
        tests=(f"{ENDPOINTS}::test_a_signing_secret_and_the_operators_key_never_reach_a_log_line",),
        why="a signing secret that ends up in a log line (a receiver's echo, an exception) is written out"),
    mutation(
        "webhook-key-not-redacted", "I75", "orchestrator/logs/redaction.py",
        "    for secret in (settings.api_token, settings.flower_password, settings.webhook_secret_key):\n",
        "    for secret in (settings.api_token, settings.flower_password):\n",
        tests=(f"{ENDPOINTS}::test_a_signing_secret_and_the_operators_key_never_reach_a_log_line",),
        why="the operator's webhook key, from which every secret is derived, can reach a log line"),

    # I76 — only where the operator allows; the receiver's answer unread; a tenant's own endpoints
    mutation(
        "webhook-url-unchecked-at-registration", "I76", "orchestrator/webhooks/endpoints.py",
        "        settings.webhook_policy.check(url)\n",
        "        pass\n",
        tests=(f"{COURIER}::test_registration_refuses_what_the_address_rules_refuse_naming_url",),
        why="an endpoint at a metadata or unlisted private address is registered"),
    mutation(
        "webhook-delivered-unchecked", "I76", "orchestrator/webhooks/sending.py",
        "        pinned = policy.pin(url, resolve=resolve)\n",
        '        pinned = type("Unchecked", (), {"url": url, "headers": {}, "extensions": {}})()\n',
        tests=(f"{COURIER}::test_a_name_that_resolves_to_a_forbidden_address_is_refused_at_delivery",),
        why="a name re-pointed at a loopback or metadata address after registration is called at delivery"),
    mutation(
        "webhook-follows-redirects", "I76", "orchestrator/webhooks/sending.py",
        "httpx.Client(follow_redirects=False, trust_env=False",
        "httpx.Client(follow_redirects=True, trust_env=False",
        tests=(f"{COURIER}::test_a_redirect_is_not_followed_and_a_silent_receiver_is_cut_off",),
        why="a receiver's redirect is followed, to an address nobody checked"),
    mutation(
        "webhook-no-deadline", "I76", "orchestrator/webhooks/sending.py",
        "trust_env=False, timeout=limits) as client, deadline:\n",
        "trust_env=False, timeout=limits) as client:\n",
        tests=(f"{SENDING}::test_a_receiver_that_drips_its_answer_is_cut_off_at_the_deadline",),
        why="a receiver that answers a byte at a time holds a courier past its lease"),
    Mutation(
        "webhook-reads-the-receivers-answer", "I76", "orchestrator/webhooks/sending.py",
        (Edit("            response.close()  # the body is never read\n", "            response.read()\n"),
         Edit("    return Sent(False, status, said)\n", "    return Sent(False, status, response.text or said)\n")),
        tests=(f"{COURIER}::test_what_a_receiver_says_is_never_stored_nor_logged",),
        why="what a receiver answers is stored and shown to whoever reads the deliveries"),
    mutation(
        "webhook-request-line-logged", "I76", "orchestrator/webhooks/sending.py",
        "    _sending.active = True\n",
        "",
        tests=(f"{COURIER}::test_what_a_receiver_says_is_never_stored_nor_logged",),
        why="httpx's line about each delivery logs the endpoint's URL (its path may be a credential) and the "
            "reason phrase the receiver chose"),
    mutation(
        "webhook-endpoint-of-any-tenant", "I76", "storage/webhook_outbox.py",
        "    return q if tenant is None else q.where(WebhookEndpoint.tenant == tenant)\n",
        "    return q\n",
        tests=(f"{ENDPOINTS}::test_another_tenants_endpoint_is_missing_for_every_operation",),
        why="a tenant reads, rotates or deletes another tenant's endpoint, or reads its deliveries"),
)
