"""What the offline experts say: a meeting turn, a team expert's analysis and a
debate reply, and :func:`render`, which picks the writer for a request's kind.

Every text ends with exactly one ``Position: SUPPORT|OPPOSE|CONDITIONAL — …``
line, answers named earlier speakers with what their blocks actually say, and in
a debate may concede to the strongest opposing point by becoming conditional.

With a briefing in the prompt, each expert draws on the passage most relevant to its
call (a new one each round, where there are several) — quoting it and citing it as
``[doc:n]`` — and nothing it writes cites a passage its prompt does not carry
(:func:`orchestrator.gateway.providers.offline.citing.only_citing`).

Texts whose length follows ``options.words`` (a meeting turn, a team expert's
analysis) are written lazily, paragraph by paragraph (:func:`render_pieces`): the
provider streams each piece as it is written, so a call that is cancelled or
aborted stops writing too, and the cost of a text is linear in its length.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence

from orchestrator.gateway.providers.offline import lexicon as lx
from orchestrator.gateway.providers.offline.citing import Passage, only_citing
from orchestrator.gateway.providers.offline.judging import chair_verdict, expert_verdict, is_chair, mode_of
from orchestrator.gateway.providers.offline.minutes import (
    render_divergence,
    render_final_summary,
    render_opening,
    render_round_summary,
    render_summarise,
    render_synthesis,
)
from orchestrator.gateway.providers.offline.options import OfflineOptions
from orchestrator.gateway.providers.offline.text import (
    Dice,
    cap,
    count_words,
    join_names,
    paragraph_pieces,
    paragraphs,
    slug_of,
)
from orchestrator.gateway.providers.offline.understanding import (
    Call,
    Said,
    clause,
    concern_of,
    concern_terms,
    latest_by_name,
    parse_positions,
    quote_of,
    read_request,
    speaker_of,
)
from orchestrator.gateway.providers.offline.voice import Voice, profile_for
from orchestrator.gateway.types import ChatRequest

_ROLE_IN_PROMPT = re.compile(r"\bYou are [A-Z][\w'-]*(?: [A-Z][\w'-]*)?,? (?:the |our |a |an )([^.,;\n]+)")


def render(request: ChatRequest, opts: OfflineOptions) -> str:
    """The whole text the provider answers ``request`` with."""
    return "".join(render_pieces(request, opts))


def render_pieces(request: ChatRequest, opts: OfflineOptions) -> Iterator[str]:
    """The text of :func:`render` in pieces, each written only when it is asked for;
    none cites a passage the prompt does not carry. A call that asks for a verdict
    (:mod:`~orchestrator.gateway.providers.offline.judging`) ends with its line, a
    piece of its own; a repair is that line alone, after the same text written unseen."""
    call = read_request(request, opts)
    mode = mode_of(call)
    if mode == "repair":
        if is_chair(call):
            yield chair_verdict(call, repair=True)
        else:
            yield expert_verdict(call, _me(call)[0], _last_position(_written(call)), repair=True)
        return
    position: tuple[str, str] | None = None
    for piece in _written(call):
        found = parse_positions(piece)
        if found:
            position = found[-1]
        yield piece
    if mode == "turn":
        yield "\n\n" + expert_verdict(call, _me(call)[0], position)
    elif mode == "chair":
        yield "\n\n" + chair_verdict(call)


def _written(call: Call) -> Iterator[str]:
    known = call.known
    lazy = _LAZY_RENDERERS.get(call.kind)
    pieces = lazy(call) if lazy is not None else iter((_RENDERERS[call.kind](call),))
    for piece in pieces:
        yield only_citing(piece, known)


def _last_position(pieces: Iterator[str]) -> tuple[str, str] | None:
    """The (stance, sentence) of the last ``Position:`` line the pieces hold."""
    last = None
    for piece in pieces:
        found = parse_positions(piece)
        if found:
            last = found[-1]
    return last


_DRAWN = (
    'The briefing backs this up: "{gist}" [{ref}].',
    'Our own documents are specific here ({place}): "{gist}" [{ref}].',
    'I\'d point everyone to {place}: "{gist}" [{ref}].',
    'The pack puts it plainly: "{gist}" [{ref}].',
)


def _drawn(call: Call, name: str, turn: int = 0) -> str | None:
    """A sentence drawing on one of the call's passages (the most relevant first; the
    ``turn``-th where there are several), quoted and cited; None without a briefing."""
    usable = [p for p in call.passages if p.gist()]
    if not usable:
        return None
    passage: Passage = usable[turn % len(usable)]
    template = Dice(name, call.kind, "briefing").shuffled(_DRAWN)[turn % len(_DRAWN)]
    return template.format(gist=passage.gist(), ref=passage.ref, place=passage.place)


def _me(call: Call) -> tuple[str, str]:
    name = str(call.hints.get("expert") or speaker_of(call.request) or "the expert")
    role = str(call.hints.get("role") or call.panel.role(name) or "")
    if not role:
        m = _ROLE_IN_PROMPT.search(call.request.system) or _ROLE_IN_PROMPT.search(call.request.prompt)
        role = m.group(1).strip() if m else ""
    return name, role


def _voice(call: Call, name: str, role: str, *seed: object) -> Voice:
    return Voice(name, role, call.topic, call.stance(name), call.kind, call.round, *seed)


def _relation(mine: str, theirs: str | None) -> str:
    if theirs is None:
        return "unknown"
    if mine == theirs:
        return "same"
    if mine == "conditional":
        return "as_conditional"
    if theirs == "conditional":
        return "to_conditional"
    return "against"


def _respond(voice: Voice, peer: Said, others: Sequence[str]) -> str:
    """One or two sentences answering a named earlier speaker."""
    assert peer.name is not None
    concern = concern_of(peer, others)
    quote = quote_of(peer, others, concern)
    counter = voice.decap(voice.reason(plain=True))
    relation = _relation(voice.stance, peer.stance)
    pool = {
        "same": lx.RESPOND_SAME,
        "against": lx.RESPOND_AGAINST,
        "as_conditional": lx.RESPOND_AS_CONDITIONAL,
        "to_conditional": lx.RESPOND_TO_CONDITIONAL,
    }.get(relation, lx.RESPOND_NO_CONCERN)
    my_concern = voice.dice.pick([c for c in voice.concerns() if c != concern] or voice.concerns())
    usable = [t for t in pool if (concern or "{concern}" not in t) and (quote or "{quote}" not in t)]
    if not usable:
        usable = list(lx.RESPOND_NO_CONCERN) if quote else ["I've listened carefully to {peer}."]
    return voice.take(
        usable,
        peer=peer.name,
        concern=concern or "",
        quote=quote or "",
        counter=counter,
        my_concern=my_concern,
    )


def _peer_order(voice: Voice, peers: Sequence[Said]) -> list[Said]:
    rank = {"against": 0, "as_conditional": 1, "to_conditional": 1, "same": 2, "unknown": 3}
    shuffled = voice.dice.shuffled(peers)
    return sorted(shuffled, key=lambda s: rank[_relation(voice.stance, s.stance)])


def _render_turn(call: Call) -> Iterator[str]:
    name, role = _me(call)
    voice = _voice(call, name, role)
    names = call.panel.names()
    latest = latest_by_name(call.said)
    mine = latest.pop(name, None) or next((s for n, s in latest.items() if slug_of(n) == slug_of(name)), None)
    latest = {n: s for n, s in latest.items() if slug_of(n) != slug_of(name)}
    peers = _peer_order(voice, list(latest.values()))
    final = call.round >= call.rounds and call.rounds > 1
    later = call.round > 1 and bool(peers)

    fmt = {"prev": call.round - 1}
    if final:
        opener = voice.take(lx.OPENERS_FINAL)
    elif later:
        opener = voice.take(lx.OPENERS_LATER, **fmt)
    else:
        opener = voice.take(lx.OPENERS_FIRST)
    first: list[str] = [opener]
    n_resp = 0 if not peers else (1 if call.round == 1 else (3 if call.opts.words >= 180 else 2))
    for peer in peers[:n_resp]:
        first.append(_respond(voice, peer, names))
    if mine is not None and call.round > 1:
        quote = clause(mine.position) if mine.position else quote_of(mine, names)
        if quote:
            prev = mine.round() or call.round - 1
            first.append(voice.take(lx.OWN_EARLIER, prev=prev, quote=quote))

    second: list[str] = [voice.take(lx.DECLARE[voice.stance]), voice.reason()]
    drawn = _drawn(call, name, call.round - 1)
    if drawn:
        second.append(drawn)
    conditions = voice.conditions(2)
    if voice.stance == "conditional":
        second.append(voice.take(lx.CONDITION_LINES, c1=conditions[0], c2=conditions[1]))
    closing = [voice.take(lx.CLOSERS[voice.stance])] if final else []
    body = [*first, "\n", *second] if len(first) > 1 else [*first, *second]

    def sentences() -> Iterator[str]:
        yield from body
        padding = _padding(voice, sum(count_words(s) for s in body + closing), call.opts.words)
        first_extra = next(padding, None)
        if first_extra is not None:
            yield "\n"
            yield first_extra
            yield from padding
        yield from closing

    yield from paragraph_pieces(sentences(), 5)
    yield f"\n\n{voice.position_line(voice.stance, conditions)}"


def _padding(voice: Voice, written: int, words: int) -> Iterator[str]:
    """Elaborations while fewer than ~``words`` words are written (``written`` so far)."""
    optional = voice.elaborations()
    while written < words * 0.92:
        sentence = next(optional)
        written += count_words(sentence)
        yield sentence


def _render_expert(call: Call) -> Iterator[str]:
    name, role = _me(call)
    voice = _voice(call, name, role)
    names = call.panel.names()
    deps = [s for n, s in latest_by_name(call.said).items() if slug_of(n) != slug_of(name)]
    deps.sort(key=lambda s: s.index)
    conditions = voice.conditions(2)

    intro = [voice.take(lx.OPENERS_FIRST), voice.take(lx.DECLARE[voice.stance]), voice.reason()]
    drawn = [d for d in (_drawn(call, name), _drawn(call, name, 1)) if d]
    intro += list(dict.fromkeys(drawn))
    parts = [f"**{name}** ({voice.role}) on {call.topic.short}", paragraphs(intro, 5)]
    if deps:
        lines = [_respond(voice, d, names) for d in deps[:3]]
        cites = " ".join(f"[{d.source}]" for d in deps[:3])
        parts.append("Building on the work before mine " + cites + ": " + " ".join(lines))
    facets = voice.facets()
    items = [voice.take(lx.THEME_LINES, facet=facets[0])] if facets else []
    items += voice.dice.shuffled([voice.fill(d) for d in voice.profile.details])
    concerns = voice.concerns()
    bullets = []
    for i, item in enumerate(items[:3]):
        found = [(m.start(), d) for p, d in concern_terms() for m in [p.search(item)] if m]
        heading = min(found)[1] if found else concerns[i % len(concerns)]
        bullets.append(f"- **{cap(heading)}**: {item}")
    parts.append("Key considerations:\n" + "\n".join(bullets))
    if voice.stance != "support":
        parts.append(f"What I'd need to see: {conditions[0]}; and {conditions[1]}.")
    parts.append("Open question: " + voice.fill(voice.dice.pick(voice.profile.questions)))
    text = "\n\n".join(parts)
    yield text
    extra = paragraph_pieces(_padding(voice, count_words(text), call.opts.words), 5)
    first_extra = next(extra, None)
    if first_extra is not None:
        yield "\n\n" + first_extra
        yield from extra
    yield f"\n\n{voice.position_line(voice.stance, conditions)}"


def _render_debate(call: Call) -> str:
    name, role = _me(call)
    voice = _voice(call, name, role, "debate")
    names = call.panel.names()
    latest = latest_by_name(call.said)
    opponents = [str(o) for o in call.hints.get("opponents") or ()]
    if not opponents:
        participants = [str(p) for p in call.hints.get("participants") or ()]
        opponents = [p for p in participants if slug_of(p) != slug_of(name)]
        if not opponents:
            opponents = [n for n in latest if slug_of(n) != slug_of(name)]
    start = voice.stance
    # Whether the strongest opposing point moves this debater to conditional: a fair coin per debate.
    movable = start != "conditional" and Dice(
        name, call.topic.question, "debate", *sorted(slug_of(o) for o in opponents)
    ).chance(0.5)
    moved: tuple[str, str, str] | None = None  # (opponent, their concern, the condition I accept)

    lines: list[str] = [
        voice.dice.pick(
            (
                f"Let me answer {join_names(opponents or ['the other side'])} directly, strongest point first.",
                f"I'll take {join_names([o + chr(39) + 's' for o in opponents] or ['the other side'])} "
                f"arguments at "
                "their strongest.",
                "Rather than restate my case, let me deal with the best arguments against it.",
            )
        )
    ]
    for opponent in opponents or ["the other side"]:
        said = latest.get(call.panel.match(opponent) or opponent)
        their_role = call.panel.role(opponent)
        concern = concern_of(said, names) if said else None
        quote = quote_of(said, names, concern) if said else None
        if concern is None:
            concern = profile_for(their_role).concerns[0].format(role=their_role or "their function")
        their_stance = said.stance if said else None
        head = f"**{opponent}'s strongest point** is {concern}" + (f': "{quote}".' if quote else ".")
        if their_stance == start:
            answer = (
                f"{opponent} and I are on the same side, so that point strengthens my case rather than "
                f"answering it. {voice.take(voice.profile.details)}"
            )
        elif (
            movable
            and moved is None
            and (their_stance is None or _relation(start, their_stance) == "against")
        ):
            their_conditions = profile_for(their_role).conditions
            condition = (
                Dice(name, opponent, "concede")
                .pick(their_conditions)
                .format(
                    role=their_role or "their", **{"gerund": call.topic.gerund, "short": call.topic.short}
                )
            )
            moved = (opponent, concern, condition)
            answer = (
                f"That one lands, and I can't wave it away. I'd now go ahead only if {condition}, which "
                f"is what {opponent} would need to see."
            )
        elif start == "conditional":
            answer = (
                f"I'd answer it with a condition rather than a rebuttal: {voice.conditions(1)[0]}. "
                f"{voice.reason('conditional')}"
            )
        else:
            answer = (
                f"It's a fair point, but it doesn't outweigh the case: "
                f"{voice.decap(voice.reason(start, plain=True))}"
                f" {voice.take(voice.profile.details)}"
            )
        lines.append(f"{head} {answer}")
    drawn = _drawn(call, name)
    if drawn:
        lines.append(drawn)
    if moved:
        lines.append(
            f"So I've moved from {start} to conditional: {moved[0]}'s point about {moved[1]} deserves "
            "a guard-rail, not a dismissal."
        )
        position = voice.position_line(
            "conditional", [moved[2]], f"which answers {moved[0]}'s point about {moved[1]}"
        )
    else:
        lines.append(f"Having heard {join_names(opponents or ['the other side'])} out, I'm holding my position.")
        position = voice.position_line(start, voice.conditions(1))
    return "\n\n".join(lines) + f"\n\nRevised position:\n{position}"


_LAZY_RENDERERS: dict[str, Callable[[Call], Iterator[str]]] = {
    "turn": _render_turn,
    "expert": _render_expert,
}
_RENDERERS: dict[str, Callable[[Call], str]] = {
    "opening": render_opening,
    "round_summary": render_round_summary,
    "final_summary": render_final_summary,
    "debate": _render_debate,
    "divergence": render_divergence,
    "synthesis": render_synthesis,
    "summarise": render_summarise,
}
