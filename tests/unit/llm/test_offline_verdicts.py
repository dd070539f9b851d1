"""The offline model's verdicts: a verdict line at the end of an expert's text, a repair
that is that line alone, a chair that states the decision, the two fault switches, and
the simulated solver's statistics (skill, correlation, conformity, position bias)."""

from __future__ import annotations

import json
import math
import random
import re
from typing import Any

import pytest

from orchestrator.gateway.failures import FaultNotAllowed, ProviderMisconfigured
from orchestrator.gateway.providers.offline import OfflineProvider, parse_positions
from orchestrator.gateway.providers.offline.options import option_problems
from orchestrator.gateway.providers.offline.solver import value_of
from orchestrator.gateway.types import ChatRequest, ModelSpec, TextDelta

QUESTION = "Board question: What is 17 + 25 * 3? Answer with the number."
CHOICE = {"type": "choice", "options": ["92", "126", "95"]}
EXPERT_KINDS = ("turn", "expert", "debate")
VERDICT = re.compile(r"^Verdict: (\{.*\})$")


def spec(**options: Any) -> ModelSpec:
    return ModelSpec(name="offline", provider="offline", options={"latency": 0, **options})


def request(kind: str = "turn", **hints: Any) -> ChatRequest:
    base: dict[str, Any] = {
        "kind": kind, "topic": QUESTION, "expert": "Dana", "role": "CFO", "moderator": "Morgan",
        "experts": [{"name": "Dana", "role": "CFO"}, {"name": "Raj", "role": "CTO"}],
        "round": 1, "rounds": 2, "answer": CHOICE, "verdict": "turn",
    }
    if kind == "debate":
        base["opponents"] = ["Raj"]
    return ChatRequest(system="You are on a panel.", prompt="Speak.", hints={**base, **hints})


def text(req: ChatRequest, *, testing: bool = False, **options: Any) -> str:
    return OfflineProvider(testing=testing).complete(spec(**options), req).text


def verdict(out: str) -> dict[str, Any]:
    """The JSON of the text's last line, which must be a verdict line."""
    found = VERDICT.match(out.splitlines()[-1])
    assert found, out[-200:]
    body = json.loads(found.group(1))
    assert isinstance(body, dict)
    return body


def answer(question: str, options: list[str], expert: str, rnd: int = 1, **solver: Any) -> Any:
    """What ``expert`` answers a choice question in a turn, under a solver."""
    req = request(topic=question, answer={"type": "choice", "options": options}, expert=expert, round=rnd)
    return verdict(text(req, words=1, solver=solver))["answer"]


def items(n: int, seed: int = 7) -> list[tuple[str, str, list[str]]]:
    """``n`` questions ``What is a + b * c?``, each with the right value and a distractor, in a seeded order."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b, c = rng.randint(1, 99), rng.randint(1, 20), rng.randint(1, 20)
        right = str(a + b * c)
        wrong = str(a + b * c + rng.choice([-3, -2, -1, 1, 2, 3]))
        out.append((f"What is {a} + {b} * {c}?", right, rng.sample([right, wrong], 2)))
    return out


# --- verdicts without a solver ------------------------------------------------------


@pytest.mark.parametrize("kind", EXPERT_KINDS)
def test_an_expert_text_ends_with_one_valid_verdict_line_after_its_position(kind: str) -> None:
    out = text(request(kind))
    body = verdict(out)
    assert body["answer"] in CHOICE["options"] and 0.5 <= body["confidence"] <= 0.95
    assert isinstance(body["reason"], str) and "\n" not in body["reason"] and body["reason"]
    assert len(parse_positions(out)) == 1 and sum(line.startswith("Verdict:") for line in out.splitlines()) == 1
    assert out.index("Position:") < out.index("Verdict:")
    without = text(request(kind, verdict=None))  # no verdict asked: the text as before
    assert "Verdict:" not in without and out.startswith(without)


@pytest.mark.parametrize(("shape", "check"), [
    ({"type": "number", "tolerance": 0.0}, lambda a: isinstance(a, int) and abs(a - 92) <= 10),
    ({"type": "text"}, lambda a: isinstance(a, str) and 0 < len(a) < 40),
])
def test_number_and_text_answers_have_their_shape(shape: dict[str, Any], check: Any) -> None:
    for name in ("Dana", "Raj", "Maya", "Lee"):
        assert check(verdict(text(request(expert=name, answer=shape)))["answer"])


def test_stances_map_to_options() -> None:
    assert verdict(text(request(), stances={"Dana": "support"}))["answer"] == "92"
    assert verdict(text(request(), stances={"Dana": "oppose"}))["answer"] == "126"


@pytest.mark.parametrize("kind", EXPERT_KINDS)
@pytest.mark.parametrize("solver", [None, {"skill": 0.6, "conformity": 0.5}])
def test_a_repair_is_only_the_verdict_line_the_turn_gave(kind: str, solver: dict[str, Any] | None) -> None:
    options: dict[str, Any] = {"solver": solver} if solver else {}
    peers = [{"expert": "Raj", "round": 1, "answer": "95"}]
    for name, rnd in (("Dana", 1), ("Raj", 2), ("Maya", 2)):
        turn = text(request(kind, expert=name, round=rnd, peer_answers=peers), **options)
        repair = text(request(kind, expert=name, round=rnd, peer_answers=peers, verdict="repair"), **options)
        assert repair == turn.splitlines()[-1] and len(repair.splitlines()) == 1
        verdict(repair)


def test_the_stream_is_the_completed_text_verdict_line_included() -> None:
    req = request(solver=None)
    for size in (4, 7, 24):
        events = OfflineProvider().stream(spec(chunk_chars=size), req)
        streamed = "".join(e.text for e in events if isinstance(e, TextDelta))
        assert streamed == text(req, chunk_chars=size)
        verdict(streamed)


def test_same_request_same_text() -> None:
    variants: list[dict[str, Any]] = [{}, {"solver": {"skill": 0.5, "correlation": 0.3, "seed": 9}}]
    for options in variants:
        for kind in EXPERT_KINDS:
            assert text(request(kind), **options) == text(request(kind), **options)


# --- the chair ----------------------------------------------------------------------

PEERS = [{"expert": "Dana", "round": 1, "answer": "92"}, {"expert": "Raj", "round": 1, "answer": "126"},
         {"expert": "Dana", "round": 2, "answer": "126"}, {"expert": "Raj", "round": 2, "answer": "126"},
         {"expert": "Lee", "round": 2, "answer": None}]


def chair(kind: str, decided: Any, verdict_: str = "chair") -> ChatRequest:
    return request(kind, expert=None, verdict=verdict_, peer_answers=PEERS,
                   decision={"protocol": "vote", "answer": decided, "key": decided})


@pytest.mark.parametrize(("kind", "heading"), [("final_summary", "Recommendation: "),
                                                ("synthesis", "**Conclusion.** Recommendation: ")])
def test_the_chair_states_the_decision_and_ends_with_it(kind: str, heading: str) -> None:
    out = text(chair(kind, "126"))
    line = next(line for line in out.splitlines() if line.startswith(heading))
    assert re.search(r"\b(panel|team)'s vote chose 126 \(2 of 2 verdicts\)", line), line
    assert verdict(out)["answer"] == "126"
    assert text(chair(kind, "126", "repair")) == out.splitlines()[-1]


@pytest.mark.parametrize("kind", ["final_summary", "synthesis"])
def test_without_a_winner_the_chair_says_so_and_gives_its_own_pick(kind: str) -> None:
    out = text(chair(kind, None))
    own = verdict(out)["answer"]
    assert own in CHOICE["options"]
    assert re.search(rf"vote found no winner .*my own pick is {own}\.", out)


# --- the fault switches ---------------------------------------------------------------


@pytest.mark.parametrize("options", [{"malformed_verdict": "once"}, {"malformed_verdict": "always"},
                                     {"contradict_decision": True}])
def test_verdict_fault_switches_run_only_in_testing_mode(options: dict[str, Any]) -> None:
    [(option, message)] = option_problems(options, testing=False)
    assert option == next(iter(options)) and "CONCLAVE_TESTING" in message
    assert option_problems(options, testing=True) == []
    with pytest.raises(FaultNotAllowed) as info:
        OfflineProvider().complete(spec(**options), request())
    assert info.value.code == "llm.fault_not_allowed" and f"options.{option}" in info.value.message
    with pytest.raises(FaultNotAllowed):
        next(OfflineProvider().stream(spec(**options), request()))


@pytest.mark.parametrize("value", [True, 1, 0, "twice", None])
def test_malformed_verdict_takes_once_always_or_false(value: Any) -> None:
    [(option, message)] = option_problems({"malformed_verdict": value}, testing=True)
    assert option == "malformed_verdict" and "once" in message
    assert option_problems({"malformed_verdict": False, "contradict_decision": False}, testing=False) == []


def _broken(line: str) -> bool:
    try:
        json.loads(line.removeprefix("Verdict: "))
    except json.JSONDecodeError:
        return line.startswith("Verdict:")
    return False


@pytest.mark.parametrize("kind", EXPERT_KINDS)
def test_malformed_verdict_once_breaks_the_turn_and_not_the_repair(kind: str) -> None:
    turn = text(request(kind), testing=True, malformed_verdict="once")
    assert _broken(turn.splitlines()[-1]) and "Position:" in turn
    repair = text(request(kind, verdict="repair"), testing=True, malformed_verdict="once")
    assert repair == text(request(kind)).splitlines()[-1]
    assert _broken(text(request(kind, verdict="repair"), testing=True, malformed_verdict="always"))


@pytest.mark.parametrize(("shape", "decided", "other"), [
    (CHOICE, "126", "95"), ({"type": "number"}, 92, 93), ({"type": "text"}, "ninety-two", "not ninety-two"),
])
def test_contradict_decision_makes_the_chair_name_another_answer(shape: dict[str, Any], decided: Any,
                                                                 other: Any) -> None:
    req = request("final_summary", expert=None, verdict="chair", answer=shape,
                  decision={"protocol": "vote", "answer": decided, "key": str(decided)})
    assert verdict(text(req))["answer"] == decided
    out = text(req, testing=True, contradict_decision=True)
    assert verdict(out)["answer"] == other and f"vote chose {decided}" in out


# --- the solver -------------------------------------------------------------------------


def test_the_question_is_evaluated_safely() -> None:
    assert value_of(QUESTION) == 92 and value_of("What is (1 + 2) * 3?") == 9 and value_of("What is 7?") == 7
    assert value_of("What is 10 - 12?") == -2
    for question in ("What is 2 ** 3?", "What is 6 / 3?", "What is -3 + 1?", "What is x + 1?",
                     "What is __import__('os')?", "What is the plan?", "What is 1 +?", "What is " + "9*" * 150 + "9?"):
        assert value_of(question) is None, question


@pytest.mark.parametrize(("solver", "option"), [
    ({"skill": 1.5}, "solver.skill"), ({"skill": -0.1}, "solver.skill"), ({}, "solver.skill"),
    ({"skill": 0.5, "correlation": 2}, "solver.correlation"), ({"skill": 0.5, "seed": 2**31}, "solver.seed"),
    ({"skill": 0.5, "conformity": float("nan")}, "solver.conformity"),
    ({"skill": 0.5, "position_bias": 1.01}, "solver.position_bias"),
    ({"skill": 0.5, "temperature": 1}, "solver.temperature"), ({"skill": "high"}, "solver.skill"),
])
def test_solver_options_are_bounded_and_named(solver: dict[str, Any], option: str) -> None:
    [(field, _)] = option_problems({"solver": solver}, testing=True)
    assert field == option
    with pytest.raises(ProviderMisconfigured) as info:
        OfflineProvider().complete(spec(solver=solver), request())
    assert f"options.{option}: " in info.value.message


def test_a_solver_needs_no_testing_mode() -> None:
    solver = {"skill": 1.0, "correlation": 0.5, "conformity": 0.2, "position_bias": 0.1, "seed": 2**31 - 1}
    assert option_problems({"solver": solver}, testing=False) == []
    assert verdict(text(request(), solver=solver))["answer"] == "92"  # skill 1: always right


def test_accuracy_is_the_skill() -> None:
    n, skill = 4000, 0.7
    right = 0
    for question, truth, options in items(n):
        req = request(topic=question, answer={"type": "choice", "options": options}, expert="sample-1")
        body = verdict(text(req, words=1, solver={"skill": skill}))
        assert body["answer"] in options
        ok = body["answer"] == truth
        right += ok
        assert (0.6 <= body["confidence"] <= 0.95) if ok else (0.35 <= body["confidence"] <= 0.75)
    assert abs(right / n - skill) < 4 * math.sqrt(skill * (1 - skill) / n)


def _correctness(correlation: float, n: int) -> list[tuple[bool, bool, bool]]:
    """Per item: whether sample-1 and sample-2 are right, and whether they gave the same answer."""
    out = []
    for question, truth, options in items(n, seed=11):
        a = answer(question, options, "sample-1", skill=0.7, correlation=correlation, seed=3)
        b = answer(question, options, "sample-2", skill=0.7, correlation=correlation, seed=3)
        out.append((a == truth, b == truth, a == b))
    return out


def _phi(pairs: list[tuple[bool, bool, bool]]) -> float:
    n = len(pairs)
    pa, pb = sum(a for a, _, _ in pairs) / n, sum(b for _, b, _ in pairs) / n
    both = sum(a and b for a, b, _ in pairs) / n
    return (both - pa * pb) / math.sqrt(pa * (1 - pa) * pb * (1 - pb))


def test_at_correlation_zero_two_experts_agree_on_correctness_at_the_independent_rate() -> None:
    pairs = _correctness(0.0, 1500)
    agree = sum(a == b for a, b, _ in pairs) / len(pairs)
    expected = 0.7**2 + 0.3**2
    assert abs(agree - expected) < 4 * math.sqrt(expected * (1 - expected) / len(pairs))
    assert abs(_phi(pairs)) < 0.1


def test_at_correlation_one_every_expert_gives_the_same_answer() -> None:
    for question, _, options in items(300, seed=5):
        answers = {answer(question, options, f"sample-{i}", skill=0.5, correlation=1.0) for i in range(1, 5)}
        assert len(answers) == 1


def test_the_pairwise_correlation_is_the_configured_one() -> None:
    assert abs(_phi(_correctness(0.5, 2000)) - 0.5) < 0.08


def test_an_experts_own_answer_does_not_depend_on_its_round() -> None:
    for question, _, options in items(100, seed=13):
        assert answer(question, options, "Dana", 1, skill=0.5) == answer(question, options, "Dana", 3, skill=0.5)


def test_conformity_one_makes_a_later_round_take_the_peers_majority() -> None:
    majority = [{"expert": "Raj", "round": 1, "answer": "126"}, {"expert": "Lee", "round": 1, "answer": "126"},
                {"expert": "Maya", "round": 1, "answer": "92"}, {"expert": "Raj", "round": 0, "answer": "95"}]
    tie = [{"expert": "Raj", "round": 1, "answer": "95"}, {"expert": "Lee", "round": 1, "answer": "126"}]
    solver = {"skill": 1.0, "conformity": 1.0}
    for name in ("Dana", "Raj", "Maya"):
        assert verdict(text(request(expert=name, round=2, peer_answers=majority), solver=solver))["answer"] == "126"
        assert verdict(text(request("debate", expert=name, peer_answers=majority), solver=solver))["answer"] == "126"
        assert verdict(text(request(expert=name, round=2, peer_answers=tie), solver=solver))["answer"] == "126"
        assert verdict(text(request(expert=name, round=1, peer_answers=majority), solver=solver))["answer"] == "92"
        assert verdict(text(request(expert=name, round=2, peer_answers=majority),
                            solver={"skill": 1.0}))["answer"] == "92"


def test_without_a_computable_answer_the_solver_guesses_at_half_confidence() -> None:
    guesses = set()
    for name in ("a", "b", "c", "d", "e", "f", "g", "h"):
        for question, options in (("Should we open an office in Berlin?", CHOICE),
                                  (QUESTION, {"type": "choice", "options": ["1", "2"]})):
            body = verdict(text(request(topic=question, expert=name, answer=options), solver={"skill": 1.0}))
            assert body["answer"] in options["options"] and body["confidence"] == 0.5
            guesses.add(body["answer"])
    assert len(guesses) > 1


def test_position_bias_ranks_the_first_label_shown_first() -> None:
    review = {"labels": ["126", "92", "95"]}
    # a reviewer ranks the labels shown and gives its own answer: position bias moves the ranking only
    biased = verdict(text(request(review=review), solver={"skill": 1.0, "position_bias": 1.0}))
    assert biased["answer"] == "92" and biased["ranking"] == ["126", "92", "95"]
    fair = verdict(text(request(review=review), solver={"skill": 1.0}))
    assert fair["answer"] == "92" and fair["ranking"][0] == "92" and sorted(fair["ranking"]) == sorted(review["labels"])
    lettered = {"labels": ["A", "B", "C"], "answers": ["95", "126", "92"]}
    assert verdict(text(request(review=lettered), solver={"skill": 1.0}))["ranking"][0] == "C"
    shown_first = verdict(text(request(review=lettered), solver={"skill": 1.0, "position_bias": 1.0}))
    assert shown_first["answer"] == "92" and shown_first["ranking"] == ["A", "B", "C"]


def test_a_divergence_check_stays_json_only() -> None:
    assert set(json.loads(text(request("divergence", verdict="turn")))) == {"diverged", "topic", "participants"}
