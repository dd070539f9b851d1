"""Mutations of people at the table: a person's seat is asked, never sent or claimed (I65),
and asked once (I66); an answer is fenced and idempotent (I67); a deadline fires once (I68);
approval and cancel exclude each other (I69); one send-back (I70); a note reaches the phases
that start after it (I71); a page form needs the session's form token (I72)."""

from __future__ import annotations

from tests.mutants.catalogue_types import Edit, Mutation, mutation

UNIT = "tests/unit"
SEATS = f"{UNIT}/test_human_seats.py"
DECISIONS = f"{UNIT}/test_people_decisions.py"
APPROVAL = f"{UNIT}/test_approval_and_steering.py"
FORMS = f"{UNIT}/test_form_token.py"
RACES = "tests/integration/test_people_races.py"

MUTATIONS: tuple[Mutation, ...] = (
    # I65 — a seat is asked by advance, never sent, never claimed
    mutation(
        "seat-sent-to-a-worker", "I65", "orchestrator/plan/dag.py",
        "        if p.human:  # a person's seat is asked, never sent (:func:`to_ask`)\n            continue\n",
        "",
        tests=(f"{DECISIONS}::test_a_seat_is_asked_never_sent_even_by_a_resume",),
        why="advance sends a person's seat to a worker like any ready phase"),
    mutation(
        "claim-takes-a-seat", "I65", "storage/sql/base.py",
        ".where(PHASES.c.id == bindparam(\"phase_id\"), takeable, ~self.human(), live_plan, self.ready())",
        ".where(PHASES.c.id == bindparam(\"phase_id\"), takeable, live_plan, self.ready())",
        tests=(f"{SEATS}::test_a_stray_message_for_a_seat_is_refused_by_the_claim",),
        why="a stray run_phase for a seat is claimed and a model answers in the person's place"),
    mutation(
        "canvas-runs-past-a-seat", "I65", "orchestrator/plan/canvas.py",
        "if any(d.key in inside and (d.kind == \"divergence\" or d.key in asks) for d in known):",
        "if any(d.key in inside and d.kind == \"divergence\" for d in known):",
        tests=(f"{DECISIONS}::test_the_lanes_that_lead_to_a_seat_end_in_advance_and_a_plan_without_people_is_one_canvas",),
        why="the lane before a seat goes on without an advance, so the person is asked only when the whole round "
            "of models has spoken"),

    # I66 — asked once
    mutation(
        "seat-asked-twice", "I66", "storage/seats.py",
        "Phase.status == PhaseStatus.PENDING, db.sql.human(), db.sql.ready())",
        "db.sql.human(), db.sql.ready())",
        tests=(f"{SEATS}::test_two_advances_racing_ask_a_seat_once",),
        why="two advances racing both ask the seat: two input_requested events, a second attempt, a new deadline"),

    # I67 — an answer is fenced and idempotent
    Mutation(
        "answer-not-fenced", "I67", "storage/seats.py",
        (Edit("or row.status != PhaseStatus.AWAITING_INPUT", "or False"),
         Edit("Phase.attempt == row.attempt,\n"
              "                                Phase.status == PhaseStatus.AWAITING_INPUT)",
              "Phase.attempt == row.attempt)")),
        tests=(f"{SEATS}::test_the_same_key_is_told_the_stored_answer_and_another_key_is_refused",),
        why="a second answer overwrites the first"),
    mutation(
        "answer-after-the-deadline", "I67", "storage/seats.py",
        "                or (row.due_at is not None and row.due_at <= now)):",
        "                ):",
        tests=(f"{SEATS}::test_an_answer_past_the_deadline_is_refused_before_any_sweep_ended_the_seat",),
        why="an answer that comes after the seat's deadline is taken because no sweep has ended the seat yet"),
    mutation(
        "any-key-replays", "I67", "storage/seats.py",
        "and given.get(\"idempotency_key\") == idempotency_key):",
        "):",
        tests=(f"{SEATS}::test_the_same_key_is_told_the_stored_answer_and_another_key_is_refused",),
        why="an answer with another key is told it succeeded (replayed) instead of being refused"),

    # I68 — a deadline fires once, whoever sweeps
    Mutation(
        "deadline-fires-again", "I68", "storage/seats.py",
        (Edit("                        .where(Phase.plan_id == plan_id, Phase.status == PhaseStatus.AWAITING_INPUT,\n"
              "                               Phase.due_at <= now)",
              "                        .where(Phase.plan_id == plan_id, Phase.due_at <= now)"),
         Edit("update(Phase).where(Phase.id == seat.id, Phase.status == PhaseStatus.AWAITING_INPUT,\n"
              "                                    Phase.due_at <= now)",
              "update(Phase).where(Phase.id == seat.id, Phase.due_at <= now)")),
        tests=(f"{SEATS}::test_at_the_deadline_a_tolerant_meeting_notes_the_absence_once",
               f"{RACES}::test_a_sweeper_held_at_its_lock_ends_nothing_another_sweeper_ended"),
        why="a seat whose deadline passed is ended again by every later sweep (and by both racing sweepers)"),
    Mutation(
        "deadline-before-it-is-due", "I68", "storage/seats.py",
        (Edit(".where(Phase.status == PhaseStatus.AWAITING_INPUT, Phase.due_at <= now)",
              ".where(Phase.status == PhaseStatus.AWAITING_INPUT)"),
         Edit("                        .where(Phase.plan_id == plan_id, Phase.status == PhaseStatus.AWAITING_INPUT,\n"
              "                               Phase.due_at <= now)",
              "                        .where(Phase.plan_id == plan_id, Phase.status == PhaseStatus.AWAITING_INPUT)"),
         Edit("update(Phase).where(Phase.id == seat.id, Phase.status == PhaseStatus.AWAITING_INPUT,\n"
              "                                    Phase.due_at <= now)",
              "update(Phase).where(Phase.id == seat.id, Phase.status == PhaseStatus.AWAITING_INPUT)")),
        tests=(f"{SEATS}::test_at_the_deadline_a_tolerant_meeting_notes_the_absence_once",),
        why="a sweep ends a seat before its deadline"),
    mutation(
        "absent-seat-blocks-a-team", "I68", "orchestrator/plan/dag.py",
        "        if dep.status == PhaseStatus.COMPLETED or absent(dep):",
        "        if dep.status == PhaseStatus.COMPLETED:",
        tests=(f"{SEATS}::test_a_team_tolerates_a_person_who_did_not_answer_and_tells_what_follows",),
        why="under missing_expert: tolerate a team's phases after an unanswered seat never become ready"),
    mutation(
        "claim-refuses-past-an-absent-seat", "I68", "storage/sql/base.py",
        "usable = or_(dep.c.status == PhaseStatus.COMPLETED, absent, and_(",
        "usable = or_(dep.c.status == PhaseStatus.COMPLETED, and_(",
        tests=(f"{RACES}::test_a_tolerant_team_claims_past_an_absent_seat_on_postgres",),
        why="the coordinator sends the synthesis after an absent seat but the claim refuses it: the plan stalls"),
    mutation(
        "fatal-absence-tolerated", "I68", "orchestrator/plan/dag.py",
        '            and phase.meta.get("missing_expert") == "tolerate")',
        "            )",
        tests=(f"{SEATS}::test_a_team_whose_rule_is_fatal_fails_naming_the_seat_and_the_rule",),
        why="a plan whose rule is fatal goes on without the person"),

    # I69 — approval: the draft waits; approve and cancel exclude each other
    mutation(
        "draft-goes-out-unapproved", "I69", "orchestrator/plan/dag.py",
        "        if needs_approval(plan.spec):\n            return PlanStatus.AWAITING_APPROVAL, None, None\n",
        "",
        tests=(f"{DECISIONS}::test_a_plan_whose_answer_needs_approval_waits_for_it_once_its_draft_is_written",
               f"{APPROVAL}::test_a_draft_waits_for_approval_and_approving_it_completes_the_plan"),
        why="a plan whose answer needs approval completes as soon as its draft is written"),
    mutation(
        "approval-after-a-cancel", "I69", "storage/approval.py",
        "        if plan.status != PlanStatus.AWAITING_APPROVAL or plan.cancel_requested:\n"
        "            return Decided(False, PlanStatus(plan.status), plan.cancel_requested, _revision(s, plan_id))",
        "        if plan.status == PlanStatus.COMPLETED:\n"
        "            return Decided(False, PlanStatus(plan.status), plan.cancel_requested, _revision(s, plan_id))",
        tests=(f"{APPROVAL}::test_a_cancel_and_an_approval_exclude_each_other",
               f"{RACES}::test_an_approval_racing_a_cancel_is_won_by_one_never_both[cancel]"),
        why="an approval after a cancel completes the cancelled plan: both win"),
    mutation(
        "cancel-leaves-the-draft-waiting", "I69", "storage/plans.py",
        "        if plan.status == PlanStatus.AWAITING_APPROVAL:  # nothing runs: its draft is never approved",
        "        if False:",
        tests=(f"{APPROVAL}::test_a_cancel_and_an_approval_exclude_each_other",),
        why="a cancel of a plan waiting for approval leaves it waiting, and a later approval completes it"),

    # I70 — one send-back
    mutation(
        "sent-back-twice", "I70", "storage/approval.py",
        "if plan.status != PlanStatus.AWAITING_APPROVAL or plan.cancel_requested or revised is not None:",
        "if plan.status != PlanStatus.AWAITING_APPROVAL or plan.cancel_requested:",
        tests=(f"{APPROVAL}::test_a_draft_is_sent_back_once_with_a_note_then_the_revision_is_approved",),
        why="a draft is sent back again and again"),
    mutation(
        "failed-revision-fails-the-plan", "I70", "orchestrator/control/coordinator.py",
        "            state = self.people.fall_back(state)\n",
        "            pass\n",
        tests=(f"{APPROVAL}::test_a_revision_that_fails_falls_back_to_the_first_draft_which_waits_again",),
        why="a revision whose model failed fails the whole plan: the first draft, already paid for, is lost"),

    # I71 — a note reaches the phases that start after it
    mutation(
        "notes-never-given", "I71", "orchestrator/plan/prompts.py",
        "    if notes:\n        parts.append(",
        "    if not notes:\n        parts.append(",
        tests=(f"{APPROVAL}::test_a_note_reaches_the_phases_that_start_after_it_and_no_phase_already_running",),
        why="the steering notes are never put in a prompt"),
    mutation(
        "notes-read-after-the-claim", "I71", "tasks/runner.py",
        "request = build_request(work.plan, work.phase, work.inputs, work.texts, work.notes)",
        "request = build_request(work.plan, work.phase, work.inputs, work.texts, "
        "plans.get_plan(self.db, work.plan_id).notes)",
        tests=(f"{APPROVAL}::test_a_note_reaches_the_phases_that_start_after_it_and_no_phase_already_running",),
        why="a phase that started before a note is given it when it builds its prompt later (and every prompt "
            "costs a read)"),

    # I72 — a page form needs the session's form token
    mutation(
        "cookie-alone-acts", "I72", "orchestrator/api/auth.py",
        "        if not session.form_token_matches(claim, given):",
        "        if False:",
        tests=(f"{FORMS}::test_a_form_post_needs_the_session_s_own_form_token",),
        why="a form post with only the session cookie (a forged one) changes a plan"),
    mutation(
        "any-origin-posts", "I72", "orchestrator/api/ui/actions.py",
        "        return fetch_site == \"same-origin\"",
        "        return True",
        tests=(f"{FORMS}::test_a_browser_s_word_that_a_post_came_from_elsewhere_refuses_it",),
        why="a post another origin's page made is taken"),
)
