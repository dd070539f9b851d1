"""Every prompt template, rendered from a real plan (the examples) and its stored phases.

The last test holds the module to that: every template of :mod:`orchestrator.plan.prompts`
must show up, literally, in what the real plans render to — a new template that no
phase renders fails it.
"""

from __future__ import annotations

import dataclasses
import string
from collections.abc import Sequence

import pytest

from orchestrator.gateway.types import ChatRequest
from orchestrator.plan import human, prompts
from orchestrator.plan.debates import Verdict, debate_insertion
from orchestrator.plan.schema import BoardPlan, TeamPlan, load_plan
from storage.read_models import ChunkRecord, PhaseRecord
from tests.unit.stored import example, inputs_of, record, stored


def text_of(p: PhaseRecord) -> str:
    return f"Full text of {p.key} by {p.expert}.\n\nPosition: SUPPORT — as argued in {p.key}."


def request_for(plan: BoardPlan | TeamPlan, phases: Sequence[PhaseRecord], key: str,
                texts: dict[str, str] | None = None) -> ChatRequest:
    by_key = {p.key: p for p in phases}
    inputs = inputs_of(by_key[key], by_key.values())
    if texts is None:
        texts = {p.id: text_of(p) for p in inputs if p.status == "completed"}
    return prompts.build_request(plan, by_key[key], inputs, texts)


def whole(request: ChatRequest) -> str:
    """What the model is sent, as one string."""
    return "\n".join(m.content for m in request.messages())


def board() -> BoardPlan:
    plan = example("board")
    assert isinstance(plan, BoardPlan)
    return plan


def team() -> TeamPlan:
    plan = example("team")
    assert isinstance(plan, TeamPlan)
    return plan


# ---------------------------------------------------------------- board


def test_opening_states_the_question_panel_and_agenda() -> None:
    plan = board()
    req = request_for(plan, stored(plan), "opening")
    assert req.system.startswith("You are Morgan, Chair of the board, moderating a panel.")
    assert plan.question in req.prompt and "2 round(s)" in req.prompt
    for e in plan.experts:
        assert f"{e.name} ({e.role})" in req.prompt
    assert req.context == ()
    # the chair is hinted as the moderator, never as a member of the panel it introduces
    assert req.hints["moderator"] == "Morgan" and "expert" not in req.hints
    assert req.hints["kind"] == "opening" and req.hints["rounds"] == 2


def test_first_round_turn_sees_role_skills_question_and_the_opening() -> None:
    plan = board()
    phases = stored(plan, pending=[p.key for p in stored(plan) if p.position > 0])
    req = request_for(plan, phases, "r1.tomas")
    assert req.system.startswith("You are Tomas, General Counsel.")
    assert "'Position:' followed by SUPPORT, OPPOSE or CONDITIONAL" in req.system
    skill = plan.expert("Tomas").skills[0]
    assert f"### {skill.name}\n{skill.text}" in req.system  # the skill in full, not a summary
    assert "Round 1 of 2" in req.prompt and prompts.TURN_FIRST_ROUND in req.prompt
    assert plan.question in req.prompt
    assert [b.source for b in req.context] == ["opening"]
    assert req.context[0].text == text_of(phases[0])
    assert req.hints["expert"] == "Tomas" and req.hints["role"] == "General Counsel"


def test_later_round_turn_reads_the_full_text_of_every_earlier_round() -> None:
    plan = board()
    phases = stored(plan)
    req = request_for(plan, phases, "r2.dana")
    assert prompts.TURN_LATER_ROUND in req.prompt and "Round 2 of 2" in req.prompt
    earlier = [p for p in phases if p.position < next(q.position for q in phases if q.key == "r2.dana")
               and p.round in (0, 1)]
    assert [b.source for b in req.context] == [p.key for p in earlier]
    for p in earlier:
        assert text_of(p) in whole(req)
    assert req.hints["speakers"] == ["Dana", "Ravi", "Sofia", "Tomas"]


def test_round_summary_notes_the_absent_expert() -> None:
    plan = board()
    phases = stored(plan, failed=["r1.ravi"])
    req = request_for(plan, phases, "r1.summary")
    assert req.system.startswith("You are Morgan")
    assert "Summarise round 1 of 2" in req.prompt
    assert "These experts did not speak this round: Ravi — say so." in req.prompt
    assert req.hints["absent"] == ["Ravi"]
    assert "r1.ravi" not in [b.source for b in req.context]
    present = request_for(plan, stored(plan), "r1.summary")
    assert "did not speak" not in present.prompt and present.hints["absent"] == []


def test_final_summary_asks_for_the_headings_and_names_who_was_missing() -> None:
    plan = board()
    req = request_for(plan, stored(plan, failed=["r2.sofia"]), "final")
    for heading in ("'Recommendation:'", "'Where we agree:'", "'Open disagreements:'", "'Who holds which view:'"):
        assert heading in req.prompt
    assert "'Missing:' naming Sofia" in req.prompt and req.hints["absent"] == ["Sofia"]
    complete = request_for(plan, stored(plan), "final")
    assert "Missing" not in complete.prompt
    assert len(complete.context) == len(stored(plan)) - 1  # everything before the close, in full


# ---------------------------------------------------------------- team


def test_team_expert_sees_its_task_and_the_full_text_of_its_dependencies() -> None:
    plan = team()
    phases = stored(plan)
    req = request_for(plan, phases, "rollout")
    assert req.system.startswith("You are Lena, General Counsel.")
    assert plan.expert("Lena").skills[0].text in req.system
    assert "Your task (rollout):" in req.prompt and "lawful, low-risk rollout" in req.prompt
    assert plan.question in req.prompt
    assert [b.source for b in req.context] == ["growth", "finance"]  # the check's verdict is not material
    growth = request_for(plan, phases, "growth")
    assert growth.context == () and "Your task (growth):" in growth.prompt


def test_divergence_check_asks_for_json_about_the_parallel_set_only() -> None:
    plan = team()
    req = request_for(plan, stored(plan), "check-1")
    assert req.purpose == "divergence"
    assert '{"diverged": true|false, "topic":' in req.prompt and "Experts: Priya, Marcus." in req.prompt
    assert [b.source for b in req.context] == ["growth", "finance"]
    assert req.hints["participants"] == ["Priya", "Marcus"]
    retry = prompts.divergence_retry(req, "Expecting ',' delimiter")
    assert retry.prompt.startswith(req.prompt)
    assert "Your previous answer could not be used (Expecting ',' delimiter)" in retry.prompt
    assert retry.hints["retry"] is True and retry.purpose == "divergence" and retry.context == req.context


def with_debate(plan: TeamPlan) -> list[PhaseRecord]:
    phases = stored(plan, pending=["check-1", "rollout", "synthesis"])
    check = next(p for p in phases if p.key == "check-1")
    verdict = Verdict(diverged=True, topic="margin vs growth", participants=["Priya", "Marcus"])
    insertion = debate_insertion(plan, check, verdict, inputs_of(check, phases))
    assert insertion is not None and insertion.rewire == "check-1"
    new = [n.key for n in insertion.phases]
    top = max(p.position for p in phases) + 1
    # as storage rewires them: the check's dependents wait for the debate; downstream reads it
    rewired = [dataclasses.replace(p, status="completed",
                                   depends_on=[*p.depends_on, *(new if "check-1" in p.depends_on else [])],
                                   inputs=[*p.inputs, *(new if "check-1" in p.inputs else [])])
               for p in phases]
    return rewired + [record(dataclasses.replace(n, position=top + n.position)) for n in insertion.phases]


def test_debate_turn_answers_the_opponents_and_asks_for_a_revised_position() -> None:
    plan = team()
    phases = with_debate(plan)
    req = request_for(plan, phases, "debate-check-1.priya")
    assert req.system.startswith("You are Priya, Head of Growth.")
    assert "A debate on: margin vs growth" in req.prompt and plan.question in req.prompt
    assert "You disagree with Marcus." in req.prompt and "'Revised position:'" in req.prompt
    assert [b.source for b in req.context] == ["growth", "finance"]
    assert req.hints["opponents"] == ["Marcus"] and req.hints["participants"] == ["Priya", "Marcus"]


def test_synthesis_reads_every_input_in_full_cites_ids_and_reports_the_debate() -> None:
    plan = team()
    phases = with_debate(plan)
    big = "A long research finding. " * 8200  # about 200 KB
    texts = {p.id: (big if p.key == "growth" else text_of(p)) for p in phases if p.key != "synthesis"}
    req = request_for(plan, phases, "synthesis", texts)
    assert len(big) > 200_000
    sent = whole(req)
    assert big in sent  # the whole input, not a summary of it
    sources = [b.source for b in req.context]
    assert sources == ["growth", "finance", "rollout", "debate-check-1.priya", "debate-check-1.marcus"]
    for p in phases:
        if p.key in sources and p.key != "growth":
            assert text_of(p) in sent
    assert "[growth] Priya (Head of Growth)" in req.prompt and "[debate-check-1.marcus]" in req.prompt
    assert "Debate debate-check-1 on 'margin vs growth' between Priya and Marcus" in req.prompt
    assert "e.g. [growth]" in req.prompt and plan.synthesis.prompt in req.prompt
    assert req.system.startswith("You are Elena, Chief of Staff.")


def test_synthesis_without_a_debate_has_no_debate_line() -> None:
    plan = team()
    req = request_for(plan, stored(plan), "synthesis")
    assert "Debate " not in req.prompt and "[rollout]" in req.prompt


# ---------------------------------------------------------------- skills


def test_skills_are_full_text_unless_they_ask_for_summary_mode() -> None:
    long_text = "First paragraph: the short version.\n\n" + ("Every detail that matters. " * 200).strip()
    plan = load_plan({**board().model_dump(mode="json"), "experts": [
        {"name": "Dana", "role": "CFO", "skills": [{"name": "Full", "text": long_text}]},
        {"name": "Ravi", "role": "CTO", "skills": [
            {"name": "Brief", "text": long_text, "mode": "summary", "summary": "Check the invoices."},
            {"name": "Derived", "text": long_text, "mode": "summary"}]},
    ]})
    assert isinstance(plan, BoardPlan)
    phases = stored(plan)
    dana = request_for(plan, phases, "r1.dana")
    assert f"### Full\n{long_text}" in dana.system
    ravi = request_for(plan, phases, "r1.ravi")
    assert "### Brief (summary)\nCheck the invoices." in ravi.system
    assert "### Derived (summary)\nFirst paragraph: the short version." in ravi.system
    assert "Every detail that matters." not in ravi.system


def test_a_skill_defaults_to_full_mode() -> None:
    skill = board().expert("Tomas").skills[0]
    assert skill.mode == "full"
    assert prompts.render_skill(skill) == f"### {skill.name}\n{skill.text}"


# ---------------------------------------------------------------- coverage


TEMPLATES = sorted(name for name, value in vars(prompts).items() if name.isupper() and isinstance(value, str))


def render_every_phase() -> str:
    """System and prompt of every phase of both examples (one absent expert, one debate)."""
    out: list[str] = []
    b = board()
    board_phases = stored(b, failed=["r1.ravi"])
    t = team()
    team_phases = with_debate(t)
    voting = example("board-vote")
    tallied = [dataclasses.replace(p, verdict={"protocol": "vote", "answer": "Keep the flat plan",
                                               "key": "Keep the flat plan"}) if p.kind == "decision" else p
               for p in stored(voting)]
    no_winner = [dataclasses.replace(p, verdict={"protocol": "vote", "answer": None, "key": None})
                 if p.kind == "decision" else p for p in stored(voting)]
    chaired = example("board-vote", decide="chair", stop_when=None)
    numeric = example("board-vote", answer={"type": "number", "tolerance": 0.5})
    free = example("board-vote", answer={"type": "text"})
    reviewed = example("board-vote", decide="borda", review={"anonymize": True, "exclude_self": True})
    reviewed_phases = [dataclasses.replace(p, verdict={"answer": "Keep the flat plan", "confidence": 0.6,
                                                       "reason": "r"}) if p.kind == "turn" else p
                       for p in stored(reviewed)]
    for plan, phases in ((b, board_phases), (t, team_phases), (voting, tallied), (voting, no_winner),
                         (chaired, stored(chaired)), (numeric, stored(numeric)), (free, stored(free)),
                         (reviewed, reviewed_phases)):
        for p in phases:
            if p.status == "completed" and p.kind != "decision":
                req = request_for(plan, phases, p.key)
                out += [req.system, req.prompt]
                if req.purpose == "divergence":
                    out.append(prompts.divergence_retry(req, "malformed").prompt)
                elif req.hints.get("verdict") == "turn":
                    out.append(prompts.verdict_repair(plan, req, "no verdict line").prompt)
                else:  # the same phase with a briefing: its passages follow the instructions
                    passage = ChunkRecord("memo", 1, "Memo", ["Risks"], 0, 9, "Churn is up.", 3)
                    out.append(prompts.with_briefing(req, [passage]).prompt)
    # a board steered by a note, and its final sent back once for a revision
    final = next(p for p in board_phases if p.key == "final")
    revised = record(human.revision(final, "Shorter, please.", {"id": "p1", "name": "Ada"}))
    steered = [*board_phases, revised]
    seat = dataclasses.replace(board_phases[1], meta={"human": True})  # a person asked for their turn
    out.append(prompts.for_a_person(b, seat, request_for(b, board_phases, seat.key)))
    out.append(prompts.build_request(b, revised, inputs_of(revised, steered),
                                     {p.id: text_of(p) for p in steered if p.status == "completed"},
                                     [{"n": 1, "note": "Mind the churn.", "by": {"id": "p1", "name": "Ada"}}]).prompt)
    # a team whose first phase's person did not answer in time (missing_expert: tolerate)
    first = team_phases[0]
    gone = dataclasses.replace(first, status="failed", error_code="input.timed_out",
                               meta={**first.meta, "human": True, "missing_expert": "tolerate"})
    absent = [gone if p.key == first.key else p for p in team_phases]
    synthesis = next(p for p in absent if p.kind == "synthesis")
    out.append(request_for(t, absent, synthesis.key).prompt)
    return "\n".join(out)


@pytest.mark.parametrize("name", TEMPLATES)
def test_every_template_is_rendered_from_the_examples(name: str) -> None:
    corpus = render_every_phase()
    literal = [text for text, *_ in string.Formatter().parse(getattr(prompts, name)) if len(text.strip()) >= 8]
    assert literal, name
    for piece in literal:
        assert piece in corpus, f"{name}: {piece!r} never rendered"
