"""The offline provider: deterministic, in role, structured per kind, and faulty on request."""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from typing import Any

import pytest

from orchestrator.gateway.failures import FaultNotAllowed, ProviderMisconfigured, ProviderUnavailable, StreamStalled
from orchestrator.gateway.providers.offline import OfflineOptions, OfflineProvider, derived_stance, parse_positions
from orchestrator.gateway.providers.offline.options import (
    DEMO_FIRST_CHUNK_DELAY,
    MAX_LATENCY,
    MAX_WORDS,
    option_problems,
)
from orchestrator.gateway.providers.offline.provider import _chunks
from orchestrator.gateway.providers.offline.topic import Topic
from orchestrator.gateway.providers.offline.voice import Voice, profile_for
from orchestrator.gateway.types import ChatRequest, ContextBlock, ModelSpec, TextDelta, UsageReport

TOPIC = "Should we move our product to usage-based pricing?"
PANEL = [("Dana", "CFO"), ("Raj", "CTO"), ("Maya", "Head of Sales")]
EXPERTS = [{"name": n, "role": r} for n, r in PANEL]
POSITION_LINE = re.compile(r"^Position: (SUPPORT|OPPOSE|CONDITIONAL) \u2014 \S.*\.$", re.M)


def spec(**options: Any) -> ModelSpec:
    return ModelSpec(name="offline", provider="offline", options={"latency": 0, **options})


def request(kind: str, context: tuple[ContextBlock, ...] = (), **hints: Any) -> ChatRequest:
    base: dict[str, Any] = {
        "kind": kind,
        "topic": TOPIC,
        "experts": EXPERTS,
        "moderator": "Morgan",
        "round": 1,
        "rounds": 2,
    }
    return ChatRequest(
        system="You are on a panel.", prompt="Speak.", context=context, hints={**base, **hints}
    )


def text(req: ChatRequest, *, testing: bool = False, **options: Any) -> str:
    return OfflineProvider(testing=testing).complete(spec(**options), req).text


def turn(name: str, role: str, rnd: int = 1, context: tuple[ContextBlock, ...] = (), **options: Any) -> str:
    return text(request("turn", context, expert=name, role=role, round=rnd), **options)


def block(source: str, body: str, title: str = "") -> ContextBlock:
    return ContextBlock(source=source, title=title or source, text=body)


def meeting(stances: dict[str, str]) -> tuple[ContextBlock, ...]:
    """Round 1 of the panel, each turn reading the ones before it."""
    blocks: list[ContextBlock] = []
    for name, role in PANEL:
        said = turn(name, role, 1, tuple(blocks), stances=stances)
        blocks.append(block(f"r1.{name.lower()}", said, f"Round 1: {name} ({role})"))
    return tuple(blocks)


SPLIT = {"Dana": "support", "Raj": "oppose", "Maya": "conditional"}


# --- determinism and role --------------------------------------------------------


def test_same_input_gives_same_text_and_different_experts_differ() -> None:
    a1 = turn("Dana", "CFO")
    assert a1 == turn("Dana", "CFO")
    assert a1 != turn("Raj", "CTO")
    assert a1 != turn("Dana", "CFO", context=meeting(SPLIT)[1:])


def test_stance_is_derived_from_name_and_topic_unless_overridden() -> None:
    stance = derived_stance("Dana", TOPIC)
    assert stance in ("support", "oppose", "conditional")
    assert parse_positions(turn("Dana", "CFO"))[0][0] == stance
    other = next(s for s in ("support", "oppose", "conditional") if s != stance)
    assert parse_positions(turn("Dana", "CFO", stances={"Dana": other}))[0][0] == other


def test_turn_has_exactly_one_position_line_and_speaks_in_role() -> None:
    cfo = turn("Dana", "CFO", stances={"Dana": "oppose"})
    assert len(POSITION_LINE.findall(cfo)) == 1
    assert len(re.findall(r"^Position:", cfo, re.M)) == 1
    assert POSITION_LINE.search(cfo).group(1) == "OPPOSE"  # type: ignore[union-attr]
    assert "usage-based pricing" in cfo
    finance = ("margin", "cash", "payback", "pays back", "forecast", "runway", "budget", "revenue")
    assert any(w in cfo.lower() for w in finance)
    sales = turn("Maya", "Head of Sales").lower()
    assert any(w in sales for w in ("customer", "pipeline", "churn", "deal", "renewal", "quota"))


def test_role_profiles_and_generic_fallback() -> None:
    assert profile_for("CFO").key == "finance"
    assert profile_for("Chief Technology Officer").key == "tech"
    assert profile_for("Head of Sales").key == "sales"
    assert profile_for("General Counsel").key == "legal"
    assert profile_for("Chief Happiness Officer").key == "generic"
    odd = turn("Bo", "Chief Happiness Officer")
    assert "Chief Happiness Officer" in odd and len(POSITION_LINE.findall(odd)) == 1


def test_topic_phrasing() -> None:
    t = Topic.parse(TOPIC)
    assert (t.gerund, t.short) == ("moving our product to usage-based pricing", "usage-based pricing")
    assert Topic.parse("Should we adopt Kubernetes?").gerund == "adopting Kubernetes"
    assert Topic.parse("Should we stop shipping on Fridays?").gerund == "stopping shipping on Fridays"
    assert Topic.parse("What now?").short == "the proposal"


def test_later_round_answers_named_earlier_speakers() -> None:
    r1 = meeting(SPLIT)
    said = turn("Dana", "CFO", 2, r1, stances=SPLIT)
    first_paragraph = said.split("\n\n")[0]
    assert "Raj" in first_paragraph or "Maya" in first_paragraph
    # Raj is the one who disagrees outright, so he is answered first.
    assert "Raj" in first_paragraph
    # ... and a phrase of what Raj actually said comes back, or one of his concerns.
    raj = r1[1].text.lower()
    words = re.findall(r"[a-z][a-z-]{5,}", first_paragraph.lower().split("raj", 1)[1])
    assert any(w in raj for w in words)


def test_words_option_controls_length() -> None:
    short = turn("Dana", "CFO", words=40)
    long = turn("Dana", "CFO", words=400)
    assert len(long.split()) > 3 * len(short.split())
    assert 300 <= len(long.split()) <= 520


# --- kinds --------------------------------------------------------------------------


def test_opening_states_question_panel_and_agenda() -> None:
    out = text(request("opening", rounds=3))
    assert TOPIC in out and "Morgan" in out
    for name, role in PANEL:
        assert name in out and role in out
    assert "3 rounds" in out and "recommendation" in out.lower()
    assert not parse_positions(out)


def test_round_summary_attributes_positions_and_names_absent() -> None:
    blocks = meeting(SPLIT)[:2]  # Maya's turn failed
    out = text(request("round_summary", blocks, absent=["Maya"]))
    assert "Dana (CFO) supports it" in out
    assert "Raj (CTO) opposes it" in out
    assert "We did not hear from Maya this round." in out
    assert "Sharpest disagreement:" in out and "Agreement:" in out
    assert not parse_positions(out)


def test_final_summary_sections() -> None:
    blocks = meeting(SPLIT)
    out = text(request("final_summary", blocks, round=2, absent=["Maya"]))
    for heading in (
        "Recommendation:",
        "Where we agree:",
        "Open disagreements:",
        "Who holds which view:",
        "Missing:",
    ):
        assert heading in out
    bullets = re.findall(r"^- \*\*(\w+)\*\* \([^)]*\): (SUPPORT|OPPOSE|CONDITIONAL)", out, re.M)
    assert dict(bullets) == {"Dana": "SUPPORT", "Raj": "OPPOSE", "Maya": "CONDITIONAL"}
    assert "Missing:" not in text(request("final_summary", blocks, round=2))


def test_divergence_is_json_and_detects_support_versus_oppose() -> None:
    blocks = meeting(SPLIT)
    verdict = json.loads(text(request("divergence", blocks, participants=["Dana", "Raj", "Maya"])))
    assert verdict["diverged"] is True
    assert sorted(verdict["participants"]) == ["Dana", "Raj"]
    assert isinstance(verdict["topic"], str) and verdict["topic"]

    agree = meeting({"Dana": "support", "Raj": "support", "Maya": "conditional"})
    verdict = json.loads(text(request("divergence", agree)))
    assert verdict == {"diverged": False, "topic": verdict["topic"], "participants": []}


def test_divergence_maps_blocks_by_slugged_key_and_title() -> None:
    experts = [{"name": "Dana Whitfield", "role": "CFO"}, {"name": "Raj", "role": "CTO"}]
    blocks = (
        block("analysis.dana-whitfield", "Numbers work.\n\nPosition: SUPPORT \u2014 It pays back."),
        block("cto-view", "Too risky.\n\nPosition: OPPOSE \u2014 Migration risk is high.", "Raj (CTO)"),
    )
    verdict = json.loads(text(request("divergence", blocks, experts=experts)))
    assert verdict["diverged"] is True and verdict["participants"] == ["Dana Whitfield", "Raj"]


def test_malformed_divergence_then_retry() -> None:
    blocks = meeting(SPLIT)
    first = text(request("divergence", blocks), testing=True, malformed_divergence=True)
    with pytest.raises(json.JSONDecodeError):
        json.loads(first)
    assert re.search(r"\{.*\}", first, re.S) is None  # not even a JSON object inside prose
    retry = text(request("divergence", blocks, retry=True), testing=True, malformed_divergence=True)
    assert json.loads(retry)["diverged"] is True


def test_debate_answers_opponents_and_revises_position() -> None:
    blocks = meeting(SPLIT)
    out = text(
        request("debate", blocks, expert="Dana", role="CFO", participants=["Dana", "Raj"], opponents=["Raj"]),
        stances=SPLIT,
    )
    assert "**Raj's strongest point**" in out
    _, position = out.split("Revised position:\n")
    assert len(re.findall(r"^Position:", out, re.M)) == 1
    assert POSITION_LINE.match(position)
    assert position.split()[1] in ("SUPPORT", "CONDITIONAL")  # holds, or moves toward conditional


def test_synthesis_cites_every_context_block_and_debate_outcomes() -> None:
    blocks = meeting(SPLIT)
    debate = text(request("debate", blocks, expert="Raj", role="CTO", opponents=["Dana"]), stances=SPLIT)
    context = (
        *blocks,
        block("debate-check.raj", debate, "Debate: Raj (CTO)"),
        block("notes", "Market research says mid-market buyers want to start small."),
    )
    out = text(request("synthesis", context, expert="Morgan", role="Lead"))
    for b in context:
        assert f"[{b.source}]" in out
    assert "Debate outcomes." in out


def test_summarise_keeps_sources_and_positions_and_is_shorter() -> None:
    blocks = meeting(SPLIT)
    req = ChatRequest(
        system="Summarise.",
        prompt="Summarise the material above in at most 60 words.",
        context=blocks,
        purpose="summarise",
        hints={"kind": "summarise"},
    )
    out = text(req)
    for b in blocks:
        assert f"[{b.source}]" in out
    assert [p for p in parse_positions(out)] == [parse_positions(b.text)[0] for b in blocks]
    assert len(out.split()) < sum(len(b.text.split()) for b in blocks) / 2


def test_expert_kind_for_teams() -> None:
    deps = (block("cfo-view", turn("Dana", "CFO", stances=SPLIT), "Dana (CFO)"),)
    out = text(request("expert", deps, expert="Raj", role="CTO"), stances=SPLIT)
    assert "Dana" in out and "Key considerations:" in out
    assert len(POSITION_LINE.findall(out)) == 1 and "Position: OPPOSE" in out


def test_missing_hints_fall_back_to_the_prompt() -> None:
    req = ChatRequest(system="You are Dana, the CFO of Acme.", prompt="Should we open an office in Berlin?")
    out = text(req)
    assert "an office in Berlin" in out and len(POSITION_LINE.findall(out)) == 1


# --- streaming, usage and faults ----------------------------------------------------


def test_stream_chunks_match_complete_and_usage_is_estimated() -> None:
    req = request("turn", expert="Dana", role="CFO")
    events = list(OfflineProvider().stream(spec(chunk_chars=10), req))
    chunks = [e.text for e in events if isinstance(e, TextDelta)]
    assert all(len(c) <= 10 for c in chunks) and all(len(c) == 10 for c in chunks[:-1])
    assert isinstance(events[-1], UsageReport)
    completion = OfflineProvider().complete(spec(chunk_chars=10), req)
    assert "".join(chunks) == completion.text
    usage = events[-1].usage
    assert usage == completion.usage
    assert usage.source == "estimated" and usage.method == "offline:chars/4"
    assert usage.output_tokens == -(-len(completion.text) // 4)
    assert usage.input_tokens == -(-(len(req.system) + len(req.prompt)) // 4)


def test_latency_is_applied_between_chunks() -> None:
    req = request("turn", expert="Dana", role="CFO")
    started = time.monotonic()
    list(OfflineProvider().stream(spec(latency=0.01, chunk_chars=200, words=60), req))
    assert time.monotonic() - started >= 0.01


def test_hang_blocks_before_the_first_chunk() -> None:
    provider = OfflineProvider(testing=True)
    got: list[object] = []
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            for event in provider.stream(spec(hang=["Dana"], hang_seconds=5), request("turn", expert="Dana")):
                got.append(event)
        except ProviderUnavailable as exc:
            errors.append(exc)

    worker = threading.Thread(target=consume, daemon=True)
    worker.start()
    worker.join(0.3)
    assert worker.is_alive() and got == []
    provider.release()
    worker.join(1)
    assert not worker.is_alive() and got == [] and len(errors) == 1
    # Others are not affected, and hang=true hangs everyone (here for a short hang_seconds).
    assert provider.complete(spec(hang=["Dana"]), request("turn", expert="Raj")).text
    started = time.monotonic()
    with pytest.raises(ProviderUnavailable):
        OfflineProvider(testing=True).complete(spec(hang=True, hang_seconds=0.2), request("turn", expert="Raj"))
    assert time.monotonic() - started >= 0.2


def test_fail_raises_before_any_text() -> None:
    req = request("turn", expert="Raj", role="CTO")
    stream = OfflineProvider(testing=True).stream(spec(fail=["Raj"]), req)
    with pytest.raises(ProviderUnavailable):
        next(stream)
    with pytest.raises(ProviderUnavailable):
        OfflineProvider(testing=True).complete(spec(fail=["raj"]), req)


def test_break_after_chars_yields_partial_text_then_raises() -> None:
    req = request("turn", expert="Dana", role="CFO")
    full = OfflineProvider().complete(spec(), req).text
    seen: list[str] = []
    with pytest.raises(ProviderUnavailable) as info:
        for event in OfflineProvider(testing=True).stream(spec(break_after_chars=50, chunk_chars=24), req):
            assert isinstance(event, TextDelta)
            seen.append(event.text)
    assert "".join(seen) == full[:50]
    assert info.value.usage is not None and info.value.usage.output_tokens == 13


def test_bad_options_are_misconfiguration() -> None:
    with pytest.raises(ProviderMisconfigured):
        OfflineProvider().complete(spec(latency="soon"), request("turn", expert="Dana"))
    with pytest.raises(ProviderMisconfigured):
        OfflineProvider().complete(spec(stances={"Dana": "maybe"}), request("turn", expert="Dana"))


# --- bounds, fault switches, laziness (issue 8 B) -----------------------------------


@pytest.mark.parametrize(("options", "option", "words"), [
    ({"words": 3_000_000}, "words", "less than or equal to 50000"),
    ({"latency": 1e300}, "latency", "less than or equal to 2"),
    ({"latency": float("nan")}, "latency", "finite"),
    ({"latency": -1}, "latency", "greater than or equal to 0"),
    ({"chunk_chars": 0}, "chunk_chars", "greater than or equal to 4"),
    ({"words": True}, "words", "valid integer"),
    ({"hang": 3}, "hang", "list of expert names"),
    ({"stances": {"Dana": "maybe"}}, "stances.Dana", "not one of"),
    ({"seed": 7}, "seed", "unknown option"),
])
def test_out_of_bounds_options_are_refused_naming_the_option(options: dict[str, Any], option: str,
                                                              words: str) -> None:
    assert option_problems(options, testing=True) == [(option, option_problems(options, testing=True)[0][1])]
    assert words in option_problems(options, testing=False)[0][1]
    for provider in (OfflineProvider(), OfflineProvider(testing=True)):  # testing mode widens no bound
        with pytest.raises(ProviderMisconfigured) as info:
            provider.complete(spec(**options), request("turn", expert="Dana"))
        assert f"options.{option}: " in info.value.message and words in info.value.message
        with pytest.raises(ProviderMisconfigured):
            next(provider.stream(spec(**options), request("turn", expert="Dana")))


@pytest.mark.parametrize("options", [
    {"hang": ["Dana"]}, {"hang": True}, {"hang_seconds": 1}, {"fail": ["Dana"]}, {"fail": True},
    {"break_after_chars": 10}, {"malformed_divergence": True}, {"first_chunk_delay": DEMO_FIRST_CHUNK_DELAY + 1},
])
def test_fault_switches_run_only_in_testing_mode(options: dict[str, Any]) -> None:
    [(option, message)] = option_problems(options, testing=False)
    assert option == next(iter(options)) and "CONCLAVE_TESTING" in message
    assert option_problems(options, testing=True) == []
    req = request("turn", expert="Dana", role="CFO")
    with pytest.raises(FaultNotAllowed) as info:  # the provider refuses again, whatever submit said
        OfflineProvider().complete(spec(**options), req)
    assert info.value.code == "llm.fault_not_allowed" and f"options.{option}" in info.value.message
    with pytest.raises(FaultNotAllowed):
        next(OfflineProvider().stream(spec(**options), req))


def test_demo_options_need_no_testing_mode() -> None:
    demo = {"latency": MAX_LATENCY, "first_chunk_delay": DEMO_FIRST_CHUNK_DELAY, "words": MAX_WORDS,
            "chunk_chars": 8000, "stances": {"Dana": "support"}, "hang": False, "fail": [],
            "malformed_divergence": False}
    assert option_problems(demo, testing=False) == []
    assert OfflineOptions.parse(demo, testing=False).words == MAX_WORDS


def test_settings_latency_has_the_options_bound() -> None:
    from orchestrator.core.settings import Settings

    assert Settings.model_fields["offline_latency"].metadata[-1].le == MAX_LATENCY


def test_chunks_of_pieces_are_the_chunks_of_the_whole_text() -> None:
    text_ = "".join(chr(65 + i % 26) for i in range(1000))
    cuts = [0, 1, 1, 7, 8, 24, 25, 200, 999, 1000]
    pieces = [text_[a:b] for a, b in itertools.pairwise(cuts)]
    for size in (1, 4, 7, 24, 1000, 5000):
        assert list(_chunks(pieces, size)) == [text_[i: i + size] for i in range(0, len(text_), size)]


@pytest.mark.parametrize("kind", ["turn", "expert"])
def test_a_long_text_is_written_only_as_far_as_it_is_read(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    drawn = 0
    elaborations = Voice.elaborations

    def counted(self: Voice) -> Any:
        nonlocal drawn
        for sentence in elaborations(self):
            drawn += 1
            yield sentence

    monkeypatch.setattr(Voice, "elaborations", counted)
    req = request(kind, expert="Dana", role="CFO")
    stream = OfflineProvider().stream(spec(words=MAX_WORDS, chunk_chars=24), req)
    first = next(stream)
    stream.close()
    assert isinstance(first, TextDelta) and len(first.text) == 24
    assert drawn <= 5  # one paragraph at most, of the thousands the whole text pads with
    whole = OfflineProvider().complete(spec(words=MAX_WORDS), req).text
    assert drawn > 1000 and whole.startswith(first.text)


def test_abort_ends_a_stream_waiting_between_chunks() -> None:
    stream = OfflineProvider().stream(spec(words=MAX_WORDS, latency=MAX_LATENCY, first_chunk_delay=0),
                                      request("turn", expert="Dana", role="CFO"))
    seen: list[object] = []
    ended: list[BaseException] = []

    def consume() -> None:
        try:
            for event in stream:
                seen.append(event)
        except StreamStalled as exc:
            ended.append(exc)

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    deadline = time.monotonic() + 30
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    stream.abort()  # the rest of the text would take hours at this latency
    reader.join(30)
    assert not reader.is_alive() and len(ended) == 1 and "aborted" in ended[0].message
    assert len(seen) == 1  # nothing written after the abort


def test_abort_ends_a_simulated_hang() -> None:
    stream = OfflineProvider(testing=True).stream(spec(hang=True), request("turn", expert="Dana"))
    ended: list[BaseException] = []

    def consume() -> None:
        try:
            next(stream)
        except StreamStalled as exc:
            ended.append(exc)

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    stream.abort()  # the hang alone would last an hour
    reader.join(30)
    assert not reader.is_alive() and len(ended) == 1
