"""What the offline chair and record-keepers write: the opening, the round and final
summaries, the divergence verdict, the synthesis and the summaries of context.

They attribute every position to the expert who took it, name the experts who
were absent, cite context blocks as ``[source]``, and a divergence check answers
with JSON only. With a briefing in the prompt, the record carries the experts'
citations of its passages through (``[doc:n]``, only those the prompt carries) and
says which passages the meeting drew on.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence

from orchestrator.gateway.providers.offline import lexicon as lx
from orchestrator.gateway.providers.offline.citing import cite, cited_in
from orchestrator.gateway.providers.offline.judging import decision_sentence
from orchestrator.gateway.providers.offline.options import STANCES
from orchestrator.gateway.providers.offline.text import (
    DASH,
    Dice,
    cap,
    count_words,
    decap,
    join_names,
    slug_of,
    split_sentences,
    strip_end,
)
from orchestrator.gateway.providers.offline.topic import Topic
from orchestrator.gateway.providers.offline.understanding import (
    Call,
    Said,
    clause,
    concern_of,
    concern_terms,
    has_term,
    latest_by_name,
    parse_positions,
    quote_of,
)
from orchestrator.gateway.providers.offline.voice import Voice, profile_for


def _briefing_refs(call: Call, said: Sequence[Said]) -> list[str]:
    """The passages these statements cite that this call carries, in order, once each."""
    known = call.known
    return list(dict.fromkeys(r for s in said for r in cited_in(s.raw) if r in known))


def _evidence(call: Call) -> str | None:
    """Which passages the meeting drew on, and who cited each; without any citation to
    carry, the passage most relevant to the question, quoted. None without a briefing."""
    if not call.passages:
        return None
    places = {p.ref: p.place for p in call.passages}
    cited: dict[str, list[str]] = {}
    for s in call.said:
        for ref in _briefing_refs(call, [s]):
            who = cited.setdefault(ref, [])
            if s.name and s.name not in who:
                who.append(s.name)
    if cited:
        lines = [f"- {places[ref]} [{ref}]" + (f": cited by {join_names(who)}" if who else "")
                 for ref, who in cited.items()]
        return "Evidence from the briefing:\n" + "\n".join(lines)
    top = next((p for p in call.passages if p.gist()), None)
    return f'Evidence from the briefing: "{top.gist()}" [{top.ref}].' if top else None


def _stance_phrase(stance: str | None) -> str:
    return {
        "support": "supports it",
        "oppose": "opposes it",
        "conditional": "supports it with conditions",
    }.get(stance or "", "didn't state a clear position")


def _gist(said: Said, topic: Topic) -> str:
    """A statement's position, ready to follow a colon."""
    sentence = strip_end(said.position) if said.position else ""
    if not sentence:
        return ""
    if re.match(r"(?:I|I'm|I'd|My|We|Our)\b", sentence):
        return f'in their words, "{sentence}"'
    return decap(sentence, topic.proper)


def _who(call: Call, name: str) -> str:
    role = call.panel.role(name)
    return f"{name} ({role})" if role else name


def _current(call: Call) -> dict[str, Said]:
    """The statements of the current round (or, failing that, everyone's latest)."""
    this_round = [s for s in call.said if s.round() == call.round]
    latest = latest_by_name(this_round) if this_round else latest_by_name(call.said)
    order = {n: i for i, n in enumerate(call.panel.names())}
    return dict(sorted(latest.items(), key=lambda kv: order.get(kv[0], len(order))))


def _missing(call: Call, spoke: Mapping[str, Said]) -> list[str]:
    absent = call.absent()
    moderator = slug_of(str(call.hints.get("moderator") or ""))
    for name in call.panel.names():
        if slug_of(name) == moderator:
            continue  # the chair summarises; it does not take a turn
        if name not in spoke and all(slug_of(a) != slug_of(name) for a in absent):
            absent.append(name)
    return absent


def _conditions_from(said: Sequence[Said]) -> list[tuple[str, str]]:
    out = []
    for s in said:
        m = re.search(r"\bonly if (.+?)(?:, which answers .*)?$", strip_end(s.position or ""))
        if s.name and m:
            out.append((s.name, strip_end(m.group(1))))
    return out


def _recommendation(call: Call, views: Mapping[str, Said]) -> str:
    decision = decision_sentence(call)
    if decision is not None:
        return cap(decision)
    stances = [s.stance for s in views.values()]
    sup, opp, con = (stances.count(x) for x in STANCES)
    gerund, names = call.topic.gerund, call.panel.names()
    opposers = [n for n, s in views.items() if s.stance == "oppose"]
    conds = _conditions_from(list(views.values()))
    cond_text = "; ".join(f"{c} ({n})" for n, c in conds)
    if not views:
        return f"None yet: no positions on {call.topic.short} were recorded."
    if sup and not opp and not con:
        return f"Proceed with {gerund}. The panel is unanimous."
    if sup + con > opp and not opp:
        return f"Proceed with {gerund}, on the conditions the panel set: {cond_text or 'a staged rollout'}."
    if sup + con > opp:
        worry = join_names([f"{n}'s concern about {concern_of(views[n], names) or 'the risks'}" for n in opposers])
        extra = f" Conditions: {cond_text}." if cond_text else ""
        return (
            f"Proceed with {gerund} as a staged, reversible step, and resolve {worry} before committing "
            f"fully.{extra}"
        )
    if opp > sup + con:
        return (
            f"Do not proceed with {gerund} now. Revisit once the objections raised by {join_names(opposers)} "
            f"have answers."
        )
    return (
        f"No clear mandate. Run a time-boxed pilot of {call.topic.short} and bring the evidence back to "
        f"this panel."
    )


def _disagreement(call: Call, views: Mapping[str, Said]) -> str | None:
    names = call.panel.names()
    pro = [n for n, s in views.items() if s.stance == "support"]
    con = [n for n, s in views.items() if s.stance == "oppose"]
    mid = [n for n, s in views.items() if s.stance == "conditional"]
    if pro and con:
        dice = Dice("sharpest", call.topic.question, *sorted(views))
        a, b = dice.pick(pro), dice.pick(con)
        ca = concern_of(views[a], names) or "the upside"
        cb = concern_of(views[b], names) or "the risk"
        quote = quote_of(views[b], names, cb)
        said_b = f' ("{quote}")' if quote else ""
        if ca == cb:
            return (
                f"{a} and {b} read {ca} in opposite directions: for {a} it is the reason to go ahead, for "
                f"{b}{said_b} the reason not to."
            )
        return (
            f"{a} and {b}. {a} sees {ca} as the reason to go ahead; {b} puts {cb} first{said_b}. "
            f"Until someone answers {b}'s point about {cb}, this is the decision's weak spot."
        )
    if mid and (pro or con):
        other = (pro or con)[0]
        stance = "would go further and faster" if pro else "is not yet persuaded they are enough"
        whose = join_names([m + "'s" for m in mid])
        return (
            f"No outright split. The open question is whether {whose} conditions are acceptable to "
            f"{other}, who {stance}."
        )
    return None


def _shared_terms(call: Call, said: Sequence[Said] | None = None) -> list[str]:
    """Concerns that more than one expert's words mention, most shared first."""
    shared: dict[str, set[str]] = {}
    for s in call.said if said is None else said:
        if s.name is None:
            continue
        for pattern, display in concern_terms():
            if pattern.search(s.body + " " + s.position):
                shared.setdefault(display, set()).add(s.name)
    return sorted((d for d, ns in shared.items() if len(ns) >= 2), key=lambda d: (-len(shared[d]), d))


def render_opening(call: Call) -> str:
    moderator = str(call.hints.get("moderator") or "the chair")
    dice = Dice("opening", moderator, call.topic.question)
    greet = dice.pick(
        (
            "Good morning, everyone.",
            "Welcome, and thank you for making the time.",
            "Thanks for joining, everyone.",
        )
    )
    intro = (
        f"I'm {moderator}, and I'll chair today's session."
        if call.hints.get("moderator")
        else ("I'll chair today's session.")
    )
    lines = [f"{greet} {intro}", f"The question before the panel: **{call.topic.question}**"]
    if call.passages:
        named = [f"{p.place} [{p.ref}]" for p in call.passages[:2]]
        lines.append(f"The briefing pack is before you; start with {join_names(named)}.")
    panel = []
    for name, role in call.panel.experts:
        voice = Voice(name, role, call.topic, "support", "opening")
        panel.append(f"- **{name}**, {voice.role}, who will look at it through {voice.lens}.")
    if panel:
        lines.append("Our panel:\n" + "\n".join(panel))
    r = call.rounds
    if r == 1:
        agenda = (
            "We'll take a single round: each of you gives a position from your own seat, responding to "
            "anyone who has spoken before you."
        )
    else:
        later = "In round 2" if r == 2 else f"In rounds 2 to {r}"
        agenda = (
            f"We'll take {r} rounds. In round 1, each of you gives an opening position from your own "
            f"seat. {later}, respond to one another by name: agree, disagree, sharpen."
        )
    agenda += (
        " After each round I'll summarise where we stand, and at the end I'll close with a "
        "recommendation and a record of who holds which view."
    )
    lines.append(f"Agenda: {agenda}")
    names = call.panel.names()
    first = f"{names[0]}, would you start us off?" if names else "Let's begin."
    lines.append(
        "Please close each turn with your position line (support, oppose or conditional, in one "
        f"sentence). {first}"
    )
    return "\n\n".join(lines)


def render_round_summary(call: Call) -> str:
    moderator = str(call.hints.get("moderator") or "the chair")
    views = _current(call)
    names = call.panel.names()
    lines = [f"**Round {call.round} of {call.rounds}: summary** ({moderator})"]
    attrib = []
    for name, said in views.items():
        gist = _gist(said, call.topic)
        attrib.append(f"- {_who(call, name)} {_stance_phrase(said.stance)}" + (f": {gist}" if gist else "")
                      + cite(_briefing_refs(call, [said])) + ".")
    lines.append("Where everyone stands:\n" + ("\n".join(attrib) if attrib else "- Nobody spoke this round."))

    groups: dict[str, list[str]] = {}
    for name, said in views.items():
        if said.stance:
            groups.setdefault(said.stance, []).append(name)
    agree = [
        f"{join_names(ns)} {'both' if len(ns) == 2 else 'all'} {_stance_phrase(st).replace('s it', ' it', 1)}"
        for st, ns in groups.items()
        if len(ns) >= 2
    ]
    common = _shared_terms(call, list(views.values()))
    agreement = (
        "; ".join(agree) if agree else "There is no majority yet: each of you landed somewhere different"
    )
    agreement += "."
    if common:
        agreement += f" Several of you raised {common[0]}, which suggests it is the real crux."
    lines.append(f"Agreement: {cap(agreement)}")
    split = _disagreement(call, views)
    lines.append("Sharpest disagreement: " + (split or "I didn't hear a real disagreement this round."))
    missing = _missing(call, views)
    if missing:
        lines.append(" ".join(f"We did not hear from {m} this round." for m in missing))
    if call.round < call.rounds:
        pro = [n for n, s in views.items() if s.stance == "support"]
        con = [n for n, s in views.items() if s.stance == "oppose"]
        if pro and con:
            ask = f"{pro[0]} and {con[0]}, please answer each other directly"
        elif names:
            ask = "each of you, please respond to the strongest point made against your view"
        else:
            ask = "let's respond to each other directly"
        lines.append(f"For round {call.round + 1}: {ask}.")
    else:
        lines.append("That was our last round; I'll draw it together in the final summary.")
    return "\n\n".join(lines)


def render_final_summary(call: Call) -> str:
    views = latest_by_name(call.said)
    views = {n: s for n, s in views.items() if s.stance}
    names = call.panel.names()
    lines = [f"## Final summary: {call.topic.question}", f"Recommendation: {_recommendation(call, views)}"]
    groups: dict[str, list[str]] = {}
    for name, said in views.items():
        groups.setdefault(str(said.stance), []).append(name)
    agree_parts = [
        f"{join_names(ns)} {_stance_phrase(st).replace('s it', ' it', 1)}"
        for st, ns in groups.items()
        if len(ns) >= 2
    ]
    common = _shared_terms(call)[:2]
    if common:
        agree_parts.append(
            f"{join_names(common)} came up from more than one of you, so that is what this decision turns on"
        )
    lines.append(
        "Where we agree: "
        + (
            " ".join(cap(p) + "." for p in agree_parts)
            if agree_parts
            else "Little beyond the question itself; views are spread."
        )
    )
    split = _disagreement(call, views)
    lines.append("Open disagreements: " + (split or "None of substance."))
    evidence = _evidence(call)
    if evidence:
        lines.append(evidence)
    bullets = []
    for name in names + [n for n in views if n not in names]:
        view = views.get(name)
        if view is None:
            bullets.append(f"- **{name}** ({call.panel.role(name) or 'panel'}): no position on record")
            continue
        bullets.append(
            f"- **{name}** ({call.panel.role(name) or 'panel'}): {str(view.stance).upper()} {DASH} "
            f"{strip_end(view.position)}. [{view.source}]"
            + cite(_briefing_refs(call, [x for x in call.said if x.name == name]))
        )
    lines.append("Who holds which view:\n" + "\n".join(bullets))
    missing = _missing(call, views)
    if missing:
        lines.append(
            "Missing: "
            + " ".join(
                f"{m} was absent for part of the meeting; their view above is their last on record."
                if m in views
                else f"We did not hear from {m}."
                for m in missing
            )
        )
    return "\n\n".join(lines)


def render_divergence(call: Call) -> str:
    if call.opts.malformed_divergence and not call.hints.get("retry"):
        return 'Looking at the positions, I think they diverge. {"diverged": true, "topic": "pricing'
    views = {n: s for n, s in latest_by_name(call.said).items() if s.stance}
    wanted = [str(p) for p in call.hints.get("participants") or ()]
    if wanted:
        views = {n: s for n, s in views.items() if any(slug_of(n) == slug_of(w) for w in wanted)} or views
    pro = [n for n, s in views.items() if s.stance == "support"]
    con = [n for n, s in views.items() if s.stance == "oppose"]
    diverged = bool(pro and con)
    participants = [n for n in views if n in pro or n in con] if diverged else []
    if diverged:
        names = call.panel.names()
        c1 = concern_of(views[pro[0]], names)
        c2 = concern_of(views[con[0]], names)
        crux = " vs ".join(c for c in (c1, c2) if c) if c1 != c2 else (c1 or "")
        topic = f"{call.topic.short}: {crux}" if crux else call.topic.short
    else:
        topic = call.topic.short
    return json.dumps({"diverged": diverged, "topic": topic, "participants": participants})


def render_synthesis(call: Call) -> str:
    names = call.panel.names()
    views = latest_by_name(call.said)
    by_name: dict[str, list[Said]] = {}
    other: list[Said] = []
    for s in call.said:
        if s.name:
            by_name.setdefault(s.name, []).append(s)
        else:
            other.append(s)
    stance_views = {n: s for n, s in views.items() if s.stance}
    decision = decision_sentence(call)
    conclusion = f"Recommendation: {decision}" if decision else _recommendation(call, stance_views)
    lines = [f"## Synthesis: {call.topic.question}", f"**Conclusion.** {conclusion}"]
    evidence = []
    for name, items in by_name.items():
        parts = []
        for s in items:
            point = quote_of(s, names) or _gist(s, call.topic) or "spoke without a stated position"
            verb = "in the debate, " if s.is_debate else ""
            parts.append(f'{verb}"{point}" [{s.source}]' + cite(_briefing_refs(call, [s])))
        latest = views.get(name)
        stance = f", ending {str(latest.stance).upper()}" if latest and latest.stance else ""
        evidence.append(f"- **{_who(call, name)}**{stance}: " + "; ".join(parts) + ".")
    for s in other:
        point = quote_of(s, names) or clause(s.body or s.source)
        evidence.append(f'- Also on record: "{point}" [{s.source}].')
    if evidence:
        lines.append("**What the panel established**\n" + "\n".join(evidence))
    absent = call.absent()
    if absent:
        lines.append(f"**Absent.** {' and '.join(absent)} did not answer in time; their view is missing from "
                     "this synthesis.")
    briefed = _evidence(call)
    if briefed:
        lines.append(briefed.replace("Evidence from the briefing:", "**Evidence from the briefing.**", 1))
    debates = [s for s in call.said if s.is_debate and s.name]
    if debates:
        outcomes = []
        for d in debates:
            before = next(
                (s for s in reversed(by_name.get(str(d.name), [])) if not s.is_debate and s.stance), None
            )
            if before and d.stance and before.stance != d.stance:
                outcomes.append(f"{d.name} moved from {before.stance} to {d.stance} [{d.source}]")
            else:
                held = f"held firm at {d.stance.upper()}" if d.stance else "stated no revised position"
                outcomes.append(f"{d.name} {held} [{d.source}]")
        lines.append("**Debate outcomes.** " + cap("; ".join(outcomes)) + ".")
    risks = []
    for n, s in stance_views.items():
        condition = re.search(r"\bonly if (.+?)(?:, which answers .*)?$", strip_end(s.position))
        if s.stance == "conditional" and condition:
            risks.append(f"{n}'s condition: {condition.group(1)} [{s.source}]")
        elif s.stance == "oppose":
            risks.append(f"{n}'s objection on {concern_of(s, names) or 'the risks'} [{s.source}]")
    if risks:
        lines.append("**Risks and conditions to carry forward.** " + cap("; ".join(risks)) + ".")
    split = _disagreement(call, stance_views)
    if split:
        lines.append("**Still open.** " + split)
    owners = [n for n in names if n in stance_views][:4]
    if owners:
        steps = [
            f"{n} to {lx.NEXT_STEPS.get(profile_for(call.panel.role(n)).key, lx.NEXT_STEPS['generic'])}"
            for n in owners
        ]
        lines.append("**Next steps.** " + cap("; ".join(steps)) + ".")
    return "\n\n".join(lines)


def render_summarise(call: Call) -> str:
    blocks = call.said
    names = call.panel.names()
    total = sum(count_words(s.body) + count_words(s.position) for s in blocks)
    asked = re.search(r"\bat most (\d+) words", call.request.prompt)
    limit = min(call.opts.words, int(asked.group(1))) if asked else call.opts.words
    budget = max(12, min(math.ceil(total / 3), limit))
    titles = {b.source: b.title for b in call.request.context}
    out = []
    for s in blocks:
        share = max(8, budget * (count_words(s.body) + 1) // max(1, total))
        positions = parse_positions(s.raw)
        share -= sum(count_words(p) + 2 for _, p in positions)
        kept: list[str] = []
        ranked = sorted(
            enumerate(split_sentences(s.body)),
            key=lambda iv: (
                -(
                    2 * has_term(iv[1])
                    + bool(re.search(r"\d", iv[1]))
                    + 0.5 * any(n in iv[1] for n in names)
                ),
                iv[0],
            ),
        )
        chosen: list[tuple[int, str]] = []
        used = 0
        for i, sentence in ranked:
            if sentence.startswith(("Revised position", "**Revised")):
                continue
            if used and used + count_words(sentence) > max(share, 6):
                continue
            chosen.append((i, sentence))
            used += count_words(sentence)
            if used >= share:
                break
        kept = [sentence for _, sentence in sorted(chosen)]
        head = titles.get(s.source) or (s.name or s.source)
        text = f"[{s.source}] {head}: " + (" ".join(kept) if kept else "(no substantive text)")
        for stance, sentence in positions:
            text += f"\nPosition: {stance.upper()} {DASH} {sentence}"
        out.append(text)
    return "\n\n".join(out) if out else "(nothing to summarise)"
