"""Every prompt Conclave sends, in one place, named after what it is for.

Each expert sees its own role, its skills (in full unless a skill explicitly asks
for summary mode), the question, and the full text of the inputs it depends on —
offloaded or not: inputs arrive as :class:`ContextBlock` s resolved from the
content store by the coordinator, never as a phase's short summary. A plan with a
briefing adds the passages picked for the call to the end of its prompt
(:func:`with_briefing`; the prompt is never summarised, so they reach the model whole).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from orchestrator.briefing.retrieval import render
from orchestrator.deliberation.answers import ChoiceAnswer, NumberAnswer
from orchestrator.gateway.tokens import estimate_tokens
from orchestrator.gateway.types import ChatRequest, ContextBlock
from orchestrator.plan import dag
from orchestrator.plan.schema import BoardPlan, Expert, Skill, TeamPlan
from storage import phases as stored_phases
from storage.read_models import ChunkRecord, PhaseRecord
from storage.status import GIVEN_UP

EXPERT_SYSTEM = (
    "You are {name}, {role}. You are one member of a panel deliberating on a question. "
    "Stay in your role: argue from your expertise, be concrete, and engage with what "
    "named colleagues said before you. State your position in one line that begins "
    "'Position:' followed by SUPPORT, OPPOSE or CONDITIONAL."
)
MODERATOR_SYSTEM = (
    "You are {name}, {role}, moderating a panel. You are neutral: you frame the question, "
    "keep the discussion on track, and summarise fairly, attributing each view to the "
    "person who holds it."
)
OPENING = (
    "Open the meeting. State the question: {question}\n"
    "Introduce the panel: {panel}.\n"
    "Give the agenda: {rounds} round(s) in which every expert speaks, a summary after each "
    "round, then a final recommendation."
)
OPENING_NEUTRAL = (
    "\nThe panel will answer with a verdict each: state the options, and give no view of your own on the "
    "answer, so that every expert's first answer is their own."
)
TURN = (
    "Round {round} of {rounds}. The question: {question}\n"
    "{round_instruction} Speak for about 150 words."
)
TURN_FIRST_ROUND = "Give your opening view from your role's perspective."
TURN_LATER_ROUND = (
    "Respond to what your colleagues said in the earlier rounds (name them), "
    "then restate or revise your position."
)
ROUND_SUMMARY = (
    "Summarise round {round} of {rounds} on: {question}\n"
    "Attribute each position to its holder, note where the panel agrees and the sharpest "
    "disagreement.{absent_note}"
)
FINAL_SUMMARY = (
    "Close the meeting on: {question}\n"
    "Write a final summary with these headings: 'Recommendation:', 'Where we agree:', "
    "'Open disagreements:', 'Who holds which view:' (one bullet per expert with their latest "
    "position){missing_heading}."
)
TEAM_EXPERT = "The team's question: {question}\n\nYour task ({key}): {task}"
DIVERGENCE = (
    "Do these experts materially disagree about: {question}\n"
    "Answer ONLY with a JSON object: "
    '{{"diverged": true|false, "topic": "<the point of disagreement>", '
    '"participants": ["<names of the experts who disagree>"]}}. Experts: {names}.'
)
DIVERGENCE_RETRY = (
    "Your previous answer could not be used ({error}). Answer again with ONLY the JSON object "
    '{{"diverged": bool, "topic": str, "participants": [names]}} — no prose, no code fence.'
)
DEBATE = (
    "A debate on: {topic}\n(The team's question: {question})\n"
    "You disagree with {opponents}. Answer the strongest point each of them made, by name. "
    "Then write 'Revised position:' and your revised position, with the 'Position:' line."
)
SYNTHESIS = (
    "The team's question: {question}\n\n{task}\n"
    "Your inputs, by phase id: {sources}.{debates}\n"
    "Use the full text of every input above. Cite the phase each claim comes from with its id in "
    "square brackets, e.g. [{example}]. Where a debate took place, report its outcome."
)
TEAM_ABSENT = (
    "Absent: {names} did not answer in time (a person's seat, ended at its deadline); the team goes on "
    "without them — do not invent their view, and say that it is missing where it matters."
)
SYNTHESIS_DEBATE = " Debate {group} on {topic!r} between {participants}: say who moved and who held firm."
VERDICT = (
    "End with one line of its own, the last line, exactly in this form:\n"
    'Verdict: {{"answer": {answer}, "confidence": <a number from 0 to 1>, "reason": "<one line>"}}'
)
VERDICT_CHOICE = "<one of: {options}>"
VERDICT_NUMBER = "<a number>"
VERDICT_TEXT = '"<your answer, in a few words>"'
VERDICT_REPAIR = (
    "Your previous answer ended without a verdict that could be read ({problem}). Reply with ONLY the "
    "verdict line for the answer you gave, nothing else:\n"
    'Verdict: {{"answer": {answer}, "confidence": <0 to 1>, "reason": "<one line>"}}'
)
CHAIR_DECISION = (
    "\nThe panel's decision, tallied from the experts' verdicts by {protocol}: {answer}. State this answer "
    "in your Recommendation, and end with the verdict line giving it. {verdict}"
)
CHAIR_NO_DECISION = (
    "\nThe experts' verdicts gave no winner ({protocol}): say so in your Recommendation. {verdict}"
)
CHAIR_VERDICT = "\nGive the panel's answer as you judge it from the meeting. {verdict}"
REVIEW = (
    "Round 1 is over. The question: {question}\n"
    "Above are the other experts' answers{anonymized}, labelled {labels} in an order drawn for you alone. "
    "Judge them on their reasoning, not on their position in the list. Rank them, best first, then give "
    "your own answer (you may revise it). Speak for about 120 words."
)
REVIEW_RANKING = ' Add to your verdict "ranking": [{labels}] — every label once, best first.'
SEAT_POSITION = (
    "You are {name}, {role}, at this meeting in person. End with one line of its own that begins 'Position:' "
    "followed by SUPPORT, OPPOSE or CONDITIONAL and your reason in a sentence, so the chair records your view."
)
STEERING = (
    "## Notes from the people running this meeting\n"
    "They were sent while the meeting ran (the latest last); take them into account:"
)
REVISION = (
    "## Sent back for a revision\n"
    "Your draft, [{draft}] above, was sent back by {who} with this note:\n\n{note}\n\n"
    "Write it again, whole: keep what stands, change what the note asks for."
)
#: the phases whose text ends with an expert's verdict, when the plan declares its answer
VERDICT_KINDS = frozenset({"turn", "expert", "debate", "review"})
CHAIR_KINDS = frozenset({"final_summary", "synthesis"})
BRIEFING = (
    "## Briefing\n"
    "Passages from the documents attached to this plan, the most relevant to your part first. Work from "
    "them where they bear on the question, and cite each passage you draw on by its reference in square "
    "brackets, e.g. [{example}]. Cite only the passages shown here."
)


def system_for(expert: Expert, *, moderator: bool = False) -> str:
    base = expert.system or (MODERATOR_SYSTEM if moderator else EXPERT_SYSTEM).format(
        name=expert.name, role=expert.role)
    skills = "\n\n".join(render_skill(s) for s in expert.skills)
    return f"{base}\n\n## Skills\n{skills}" if skills else base


def render_skill(skill: Skill) -> str:
    """Full text by default; summary mode only when the skill asks for it."""
    if skill.mode == "summary":
        brief = skill.summary or skill.text.strip().split("\n\n", 1)[0][:400]
        return f"### {skill.name} (summary)\n{brief}"
    return f"### {skill.name}\n{skill.text}"


def build_request(plan: BoardPlan | TeamPlan, phase: PhaseRecord, inputs: Sequence[PhaseRecord],
                  texts: dict[str, str], notes: Sequence[Mapping[str, Any]] = ()) -> ChatRequest:
    """The request for one phase. ``inputs`` are its transitive dependencies in plan
    order; ``texts`` maps their phase ids to full text (completed ones only); ``notes`` are
    the plan's steering notes its claim read (:func:`with_people`)."""
    blocks = tuple(_block(plan, p, texts[p.id]) for p in inputs if p.id in texts and p.kind != "divergence")
    speakers = list(dict.fromkeys(p.expert for p in inputs
                                  if p.id in texts and p.expert and p.kind in ("turn", "expert", "debate")))
    absent = [p.expert for p in inputs if p.kind == "turn" and p.status in GIVEN_UP
              and p.round == phase.round and p.expert]
    if isinstance(plan, TeamPlan):  # a person absent upstream under missing_expert: tolerate
        absent = list(dict.fromkeys(p.expert for p in inputs if dag.absent(p) and p.expert))
    hints: dict[str, Any] = {
        "kind": phase.kind, "topic": plan.question, "speakers": speakers, "absent": absent,
        "experts": [{"name": e.name, "role": e.role} for e in plan.experts],
    }
    expert = plan.expert(phase.expert) if phase.expert else None
    chairing = isinstance(plan, BoardPlan) and phase.kind in ("opening", "round_summary", "final_summary")
    if expert and not chairing:  # the chair is hinted as "moderator", never as a panel member
        hints |= {"expert": expert.name, "role": expert.role}
    stopped = frozenset(p.key for p in inputs if p.error_code == stored_phases.EARLY_STOP)  # held by nobody
    request = _board(plan, phase, blocks, hints, stopped) if isinstance(plan, BoardPlan) else _absence(_team(
        plan, phase, blocks, hints, texts, inputs))
    return with_verdict(plan, phase, inputs, with_people(phase, request, notes))


def who(actor: Mapping[str, Any] | None) -> str:
    """A person as a prompt names them: an actor's name (the operator when none is recorded)."""
    return str((actor or {}).get("name") or "the operator")


def for_a_person(plan: BoardPlan | TeamPlan, phase: PhaseRecord, request: ChatRequest) -> str:
    """What a person's seat is asked: the words a model in the seat would be given, and — for
    a turn that states a position — the line the model's instructions ask it to end with (a
    person is not shown a model's instructions)."""
    if phase.kind not in ("turn", "expert", "debate"):
        return request.prompt
    expert = plan.expert(phase.expert or "")
    return f"{request.prompt}\n\n{SEAT_POSITION.format(name=expert.name, role=expert.role)}"


def with_people(phase: PhaseRecord, request: ChatRequest, notes: Sequence[Mapping[str, Any]]) -> ChatRequest:
    """``request`` with what people said to this phase: the note a revision was sent back with,
    and the meeting's steering notes (each with who sent it), after its instructions. Unchanged
    when there are none."""
    parts = []
    if phase.meta.get("revision_of"):
        parts.append(REVISION.format(draft=phase.meta["revision_of"], who=who(phase.meta.get("sent_back_by")),
                                     note=phase.meta.get("note", "")))
    if notes:
        parts.append("\n".join([STEERING, *(f"- {who(n.get('by'))} (note {n.get('n')}): {n.get('note')}"
                                           for n in notes)]))
    if not parts:
        return request
    hints = {**request.hints, "notes": [n.get("note") for n in notes]} if notes else dict(request.hints)
    if phase.meta.get("revision_of"):
        hints["revision_of"] = phase.meta["revision_of"]
    return replace(request, prompt="\n\n".join([request.prompt, *parts]), hints=hints)


def with_verdict(plan: BoardPlan | TeamPlan, phase: PhaseRecord, inputs: Sequence[PhaseRecord],
                 request: ChatRequest) -> ChatRequest:
    """``request`` asking for the verdict line its phase ends with, when the plan declares its
    answer: an expert's (with the answers its inputs already gave, as hints) or the chair's
    (with the tally it must state). Unchanged otherwise."""
    if plan.answer is None or phase.kind not in VERDICT_KINDS | CHAIR_KINDS:
        return request
    verdict = VERDICT.format(answer=_answer_slot(plan))
    hints = {**request.hints, "answer": plan.answer.model_dump(mode="json")}
    if phase.kind == "review":  # the answers under the labels, for a provider that cannot read prose
        said = {p.expert: p.verdict.get("answer") for p in inputs if p.kind == "turn" and p.verdict}
        by_label = dict(zip(phase.meta.get("labels", []), phase.meta.get("shown", []), strict=False))
        shown = hints["review"]["labels"]
        hints["review"] = {**hints["review"], "answers": [said.get(by_label[label]) for label in shown]}
        verdict += REVIEW_RANKING.format(labels=", ".join(json.dumps(label) for label in shown))
    if phase.kind in VERDICT_KINDS:
        hints |= {"verdict": "turn", "peer_answers": [] if phase.kind == "review" else [
            {"expert": p.expert, "round": p.round, "answer": p.verdict.get("answer")}
            for p in inputs if p.kind in VERDICT_KINDS and p.verdict is not None]}
        return replace(request, prompt=f"{request.prompt}\n\n{verdict}", hints=hints)
    hints["verdict"] = "chair"
    decision = next((p.verdict for p in inputs if p.kind == "decision" and p.verdict is not None), None)
    if decision is None:
        ask = CHAIR_VERDICT.format(verdict=verdict)
    else:
        hints["decision"] = {k: decision.get(k) for k in ("protocol", "answer", "key")}
        ask = (CHAIR_DECISION if decision.get("answer") is not None else CHAIR_NO_DECISION).format(
            protocol=decision.get("protocol"), answer=decision.get("key"), verdict=verdict)
    return replace(request, prompt=f"{request.prompt}\n{ask}", hints=hints)


def verdict_repair(plan: BoardPlan | TeamPlan, request: ChatRequest, problem: str) -> ChatRequest:
    """The one repair request for a turn whose verdict could not be read."""
    return ChatRequest(request.system, request.prompt + "\n\n" + VERDICT_REPAIR.format(
        problem=problem, answer=_answer_slot(plan)), request.context, purpose="verdict_repair",
        hints={**request.hints, "verdict": "repair", "verdict_problem": problem})


def _answer_slot(plan: BoardPlan | TeamPlan) -> str:
    answer = plan.answer
    if isinstance(answer, ChoiceAnswer):
        return VERDICT_CHOICE.format(options=", ".join(json.dumps(o, ensure_ascii=False) for o in answer.options))
    return VERDICT_NUMBER if isinstance(answer, NumberAnswer) else VERDICT_TEXT


def _block(plan: BoardPlan | TeamPlan, p: PhaseRecord, text: str) -> ContextBlock:
    who = f"{p.expert}" + (f" ({plan.expert(p.expert).role})" if p.expert else "") if p.expert else ""
    title = {
        "opening": f"Opening by {who}", "turn": f"Round {p.round}: {who}",
        "round_summary": f"Round {p.round} summary by {who}", "expert": f"{who}",
        "debate": f"Debate: {who}", "synthesis": f"Synthesis by {who}",
        "decision": "The panel's decision (tallied by code)",
    }.get(p.kind, f"{p.kind} by {who}")
    return ContextBlock(source=p.key, title=title, text=text)


def _board(plan: BoardPlan, phase: PhaseRecord, blocks: tuple[ContextBlock, ...],
           hints: dict[str, Any], stopped: frozenset[str] = frozenset()) -> ChatRequest:
    mod = plan.moderator
    common = {"question": plan.question, "rounds": plan.rounds, "round": phase.round}
    hints |= {"moderator": mod.name, "round": phase.round, "rounds": plan.rounds}
    if phase.kind == "opening":
        panel = "; ".join(f"{e.name} ({e.role})" for e in plan.experts)
        neutral = OPENING_NEUTRAL if plan.answer is not None else ""
        return ChatRequest(system_for(mod, moderator=True), OPENING.format(panel=panel, **common) + neutral,
                           blocks, hints=hints)
    if phase.kind == "turn":
        expert = plan.expert(phase.expert or "")
        instruction = TURN_FIRST_ROUND if phase.round == 1 else TURN_LATER_ROUND
        return ChatRequest(system_for(expert), TURN.format(round_instruction=instruction, **common),
                           blocks, hints=hints)
    if phase.kind == "review":
        return _review(plan, phase, blocks, hints, common)
    if phase.kind == "round_summary":
        absent = hints["absent"]
        note = f" These experts did not speak this round: {', '.join(absent)} — say so." if absent else ""
        return ChatRequest(system_for(mod, moderator=True), ROUND_SUMMARY.format(absent_note=note, **common),
                           blocks, hints=hints)
    missing = sorted({p for p in _absent_anywhere(blocks, plan, stopped)})
    hints["absent"] = missing
    heading = ", and 'Missing:' naming " + ", ".join(missing) if missing else ""
    return ChatRequest(system_for(mod, moderator=True), FINAL_SUMMARY.format(missing_heading=heading, **common),
                       blocks, hints=hints)


def _review(plan: BoardPlan, phase: PhaseRecord, blocks: tuple[ContextBlock, ...], hints: dict[str, Any],
            common: dict[str, Any]) -> ChatRequest:
    """A reviewer is shown the others' round-one answers under labels, in its own drawn order
    (``meta.shown``), by label only when anonymized; never the chair's words about them."""
    by_expert = {b.source: b for b in blocks}
    shown, labels = list(phase.meta.get("shown", [])), list(phase.meta.get("labels", []))
    anonymize = bool(phase.meta.get("anonymize", True))
    answers = [ContextBlock(source=label, title=f"Answer {label}" + ("" if anonymize else f" — {name}"),
                            text=by_expert[f"r1.{plan.expert(name).slug}"].text)
               for name, label in zip(shown, labels, strict=True) if f"r1.{plan.expert(name).slug}" in by_expert]
    present = [b.source for b in answers]
    hints = {k: v for k, v in hints.items() if k not in ("speakers", "experts")} if anonymize else hints
    hints["review"] = {"labels": present, "anonymize": anonymize}
    expert = plan.expert(phase.expert or "")
    prompt = REVIEW.format(anonymized=" (anonymized)" if anonymize else "", labels=", ".join(present), **common)
    return ChatRequest(system_for(expert), prompt, tuple(answers), hints=hints)


def _absent_anywhere(blocks: tuple[ContextBlock, ...], plan: BoardPlan, stopped: frozenset[str]) -> list[str]:
    """The experts who missed a turn of a round that was held (rounds an early stop skipped
    were held by nobody)."""
    spoke = {b.source for b in blocks} | stopped
    return [e.name for e in plan.experts
            if any(f"r{r}.{e.slug}" not in spoke for r in range(1, plan.rounds + 1))]


def _team(plan: TeamPlan, phase: PhaseRecord, blocks: tuple[ContextBlock, ...], hints: dict[str, Any],
          texts: dict[str, str], inputs: Sequence[PhaseRecord]) -> ChatRequest:
    expert = plan.expert(phase.expert or "")
    if phase.kind == "expert":
        return ChatRequest(system_for(expert), TEAM_EXPERT.format(question=plan.question, key=phase.key,
                                                                  task=phase.meta.get("prompt", "")),
                           blocks, hints=hints)
    if phase.kind == "divergence":
        examined = [p for p in inputs if p.key in phase.meta.get("examines", [])]
        names = [p.expert for p in examined if p.expert]
        hints |= {"participants": names}
        own = tuple(b for b in blocks if b.source in phase.meta.get("examines", []))
        return ChatRequest(system_for(expert, moderator=True),
                           DIVERGENCE.format(question=plan.question, names=", ".join(names)),
                           own, purpose="divergence", hints=hints)
    if phase.kind == "debate":
        opponents = list(phase.meta.get("opponents", []))
        hints |= {"participants": phase.meta.get("participants", []), "opponents": opponents}
        return ChatRequest(system_for(expert), DEBATE.format(topic=phase.meta.get("topic", plan.question),
                                                             question=plan.question,
                                                             opponents=", ".join(opponents)),
                           blocks, hints=hints)
    example = blocks[0].source if blocks else "phase-id"
    sources = ", ".join(f"[{b.source}] {b.title}" for b in blocks) or "none"
    debates = "".join(
        SYNTHESIS_DEBATE.format(group=p.group_key, topic=p.meta.get("topic", ""),
                                participants=" and ".join(p.meta.get("participants", [])))
        for p in {p.group_key: p for p in inputs if p.kind == "debate" and p.id in texts}.values())
    return ChatRequest(system_for(expert),
                       SYNTHESIS.format(question=plan.question, task=phase.meta.get("prompt", ""),
                                        sources=sources, debates=debates, example=example),
                       blocks, hints=hints)


def _absence(request: ChatRequest) -> ChatRequest:
    """A team phase's request, told which people upstream did not answer in time (unchanged
    when nobody is absent)."""
    absent = request.hints.get("absent")
    if not absent:
        return request
    return replace(request, prompt=f"{request.prompt}\n\n{TEAM_ABSENT.format(names=', '.join(absent))}")


def with_briefing(request: ChatRequest, passages: Sequence[ChunkRecord]) -> ChatRequest:
    """``request`` with the briefing's passages (each as
    :func:`~orchestrator.briefing.retrieval.render` writes it) after its instructions, and
    how to cite them; unchanged when there are none."""
    if not passages:
        return request
    section = "\n\n".join([BRIEFING.format(example=passages[0].ref), *(render(p) for p in passages)])
    return replace(request, prompt=f"{request.prompt}\n\n{section}")


def briefing_overhead() -> int:
    """The tokens of the briefing section's own words, before any passage."""
    return estimate_tokens(BRIEFING.format(example="document-id:12")) + 2


def divergence_retry(request: ChatRequest, error: str) -> ChatRequest:
    return ChatRequest(request.system, request.prompt + "\n\n" + DIVERGENCE_RETRY.format(error=error),
                       request.context, purpose=request.purpose, hints={**request.hints, "retry": True})
