"""Mutations of deliberation: a decision is computed from the stored verdicts (I52), a verdict
is repaired once and then an abstention (I53), an early stop rewires what waited (I54), a chair
that fails never loses a paid decision (I55), a review is anonymized and drawn per reviewer (I56)."""

from __future__ import annotations

from tests.mutants.catalogue_types import Mutation, mutation

FLOW = "tests/unit/test_deliberation_flow.py"
PROTOCOLS = "tests/unit/deliberation/test_protocols.py"
REVIEW = "tests/unit/test_review_round.py"
POSTGRES = "tests/integration/test_verdicts_on_postgres.py"

MUTATIONS: tuple[Mutation, ...] = (
    # I52 — the decision is code over each expert's latest stored verdict; the chair is held to it
    mutation(
        "weighted-vote-ignores-confidence", "I52", "orchestrator/deliberation/protocols.py",
        '        w = v.confidence if protocol == "weighted_vote" else 1.0\n',
        "        w = 1.0\n",
        tests=(f"{PROTOCOLS}::test_a_weighted_vote_weighs_each_ballot_by_its_confidence",),
        why="a confidence-weighted vote counts heads: a confident minority never wins"),
    mutation(
        "first-verdict-is-the-ballot", "I52", "orchestrator/plan/tally.py",
        "            latest[p.expert] = p\n",
        "            latest.setdefault(p.expert, p)\n",
        tests=("tests/unit/test_ballots.py::test_the_latest_verdict_is_the_ballot",),
        why="an expert's first verdict is counted, not the one it revised to in a later round"),
    mutation(
        "tie-not-broken-by-confidence", "I52", "orchestrator/deliberation/protocols.py",
        "    if len(leaders) == 1:\n",
        "    if False:\n",
        tests=(f"{PROTOCOLS}::test_a_tie_goes_to_the_higher_total_confidence",),
        why="a tie is drawn at random even when one answer was given with more confidence"),
    mutation(
        "confidence-ties-decided-by-float-noise", "I52", "orchestrator/deliberation/protocols.py",
        "    return float(sum((Decimal(repr(float(p))) for p in parts), Decimal(0)))\n",
        "    return sum(parts, 0.0)\n",
        tests=(f"{PROTOCOLS}::test_equal_decimal_totals_of_confidence_are_a_tie_for_the_draw",),
        why="0.35 + 0.47 against 0.36 + 0.46 is won by a last-bit difference, not tied for the seeded draw"),
    mutation(
        "chair-never-flagged", "I52", "orchestrator/plan/tally.py",
        '            stored["matches_decision"] = _matches(plan, decision.get("answer"), verdict.answer)\n',
        '            stored["matches_decision"] = True\n',
        tests=(f"{FLOW}::test_a_chair_that_contradicts_the_tally_is_flagged",),
        why="a synthesis that states another answer than the tally is reported as agreeing with it"),

    # I53 — a malformed verdict gets one repair, then is an abstention
    mutation(
        "no-verdict-repair", "I53", "tasks/runner.py",
        "        if problem is not None and not completion.truncated:\n",
        "        if False:\n",
        tests=(f"{FLOW}::test_a_malformed_verdict_gets_one_repair_call_per_turn",),
        why="a turn whose verdict line is malformed is recorded as an abstention without being asked again"),

    # I54 — an early stop skips the later rounds and rewires what waited for them
    mutation(
        "early-stop-not-rewired", "I54", "storage/phases.py",
        "        if row.key not in skip and any(d in skip for d in row.depends_on):\n",
        "        if False:\n",
        tests=(f"{POSTGRES}::test_an_early_stop_skips_the_later_rounds_and_rewires_what_waited[postgresql]",
               f"{FLOW}::test_a_panel_that_agrees_skips_the_remaining_rounds_and_says_what_that_saved"),
        why="after an early stop the decision still waits for a skipped summary: the plan can never finish"),

    # I55 — a chair that fails on every model after a tally completes with the decision
    mutation(
        "failed-chair-loses-the-decision", "I55", "tasks/runner.py",
        "            decision = None if lease.should_stop() else "
        "tally.chair_fallback(work.plan, work.phase, work.inputs)\n",
        "            decision = None\n",
        tests=(f"{FLOW}::test_a_tallied_team_whose_chair_fails_on_every_model_completes_with_the_decision",),
        why="a failed chair fails the plan after every expert was paid and the decision was tallied"),
    mutation(
        "failed-round-summary-ends-the-meeting", "I55", "orchestrator/plan/stand_in.py",
        '    if phase.kind == "round_summary":\n        return True\n',
        '    if phase.kind == "round_summary":\n        return False\n',
        tests=("tests/unit/test_stand_in.py::test_a_failed_round_summary_is_written_by_code_and_the_meeting_goes_on",),
        why="a round summary that failed on every model fails the plan after every expert spoke"),
    mutation(
        "untallied-chair-loses-the-run", "I55", "orchestrator/plan/stand_in.py",
        '    return phase.kind in KINDS and bool(phase.meta.get("terminal")) and not phase.meta.get("revision_of")',
        "    return False",
        tests=("tests/unit/test_stand_in.py::test_a_failed_last_word_without_a_tally_completes_with_the_experts_words",),
        why="a plan without a tally whose final summary failed on every model fails after every expert was paid"),

    # I56 — a review is shown the others' answers only, by label, in an order drawn for it
    mutation(
        "review-shows-its-own-answer", "I56", "orchestrator/plan/expand.py",
        "        others = [x.name for x in plan.experts if not (plan.review.exclude_self and x.name == e.name)]\n",
        "        others = [x.name for x in plan.experts]\n",
        tests=(f"{REVIEW}::test_each_reviewer_sees_the_others_in_an_order_drawn_for_it_and_stored",),
        why="a reviewer is shown (and ranks) its own answer: self-preference votes are counted"),
    mutation(
        "review-names-the-authors", "I56", "orchestrator/plan/prompts.py",
        '    answers = [ContextBlock(source=label, title=f"Answer {label}" + ("" if anonymize else f" — {name}"),\n',
        '    answers = [ContextBlock(source=label, title=f"Answer {label} — {name}",\n',
        tests=(f"{REVIEW}::test_an_anonymized_review_prompt_names_no_expert_and_labels_every_answer",),
        why="an anonymized review is told who wrote each answer"),
)
