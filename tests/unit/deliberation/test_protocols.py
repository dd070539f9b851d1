"""The tally on hand-made ballots: each protocol's arithmetic, abstentions, answers grouped
as the spec compares them, and ties — broken by total confidence, then by a draw seeded with
the plan id that gives the same winner on every call and says so in the record. Then, for
any panel: the winner has the top score, the order of the ballots changes nothing, a
unanimous panel wins with agreement 1, and only an abstention weighs nothing."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.deliberation.answers import PROTOCOLS, ChoiceAnswer, NumberAnswer, Protocol, TextAnswer
from orchestrator.deliberation.protocols import Ballot, Decision, agreement, tally
from orchestrator.deliberation.verdicts import Verdict, abstention
from tests.unit.bounded import bounded

Spec = ChoiceAnswer | NumberAnswer | TextAnswer
XYZ = ChoiceAnswer(type="choice", options=["X", "Y", "Z"])
YES_NO = ChoiceAnswer(type="choice", options=["yes", "no"])
TALLIES: tuple[Protocol, ...] = ("vote", "weighted_vote", "borda", "consensus")
Panel = tuple[Protocol, Spec, list[Ballot]]


def ballot(expert: str, answer: str | float | None, confidence: float = 0.5,
           ranking: Sequence[str] = ()) -> Ballot:
    verdict = abstention("unreadable") if answer is None else Verdict(answer, confidence, f"{expert}'s reason",
                                                                      tuple(ranking))
    return Ballot(expert=expert, phase=f"r1.{expert.lower()}", verdict=verdict)


def scores(decision: Decision) -> dict[str, float]:
    return {c.key: c.score for c in decision.candidates}


# ---------------------------------------------------------------- each protocol


def test_plurality_counts_one_vote_per_expert() -> None:
    d = tally("vote", XYZ, [ballot("A", "X", 0.2), ballot("B", "X", 0.3), ballot("C", "Y", 0.99)], seed="p")
    assert (d.answer, d.key, d.margin, d.tie_break) == ("X", "X", 1.0, None)
    assert d.weights == (1.0, 1.0, 1.0) and scores(d) == {"X": 2.0, "Y": 1.0, "Z": 0.0}
    assert d.agreement == pytest.approx(2 / 3)
    assert d.candidates[0].voters == ["A", "B"] and d.candidates[0].confidence == pytest.approx(0.5)
    assert d.threshold is None and d.reached is None


def test_a_weighted_vote_weighs_each_ballot_by_its_confidence() -> None:
    ballots = [ballot("A", "X", 0.9), ballot("B", "Y", 0.4), ballot("C", "Y", 0.4)]
    assert tally("vote", XYZ, ballots, seed="p").key == "Y"  # plurality: two against one
    d = tally("weighted_vote", XYZ, ballots, seed="p")
    assert d.key == "X" and d.weights == (0.9, 0.4, 0.4)
    assert scores(d)["X"] == pytest.approx(0.9) and scores(d)["Y"] == pytest.approx(0.8)
    assert d.margin == pytest.approx(0.1)
    assert d.agreement == pytest.approx(1 / 3)  # agreement counts experts, not weight


def test_borda_scores_rankings_and_can_overturn_the_plurality() -> None:
    ballots = [ballot("A", "X", ranking=["X", "Y", "Z"]), ballot("B", "X", ranking=["X", "Y", "Z"]),
               ballot("C", "Y", ranking=["Y", "Z", "X"]), ballot("D", "Z", ranking=["Z", "Y", "X"])]
    assert tally("vote", XYZ, ballots, seed="p").key == "X"
    d = tally("borda", XYZ, ballots, seed="p")
    # with three options first place scores 2, second 1, last 0
    assert scores(d) == {"Y": 5.0, "X": 4.0, "Z": 3.0} and d.key == "Y" and d.margin == 1.0
    assert d.weights == (1.0, 1.0, 1.0, 1.0)
    assert d.candidates[0].voters == ["C"] and d.agreement == 0.25  # one expert answered Y


def test_borda_without_rankings_scores_each_answer_as_first_place_only() -> None:
    d = tally("borda", XYZ, [ballot("A", "X"), ballot("B", "Y"), ballot("C", "Y")], seed="p")
    assert scores(d) == {"Y": 4.0, "X": 2.0, "Z": 0.0}
    partial = tally("borda", XYZ, [ballot("A", "X", ranking=["X", "Z"]), ballot("B", "Y")], seed="p")
    assert scores(partial) == {"X": 2.0, "Y": 2.0, "Z": 1.0}  # unranked options score nothing


def test_consensus_is_reached_at_the_threshold_and_not_below() -> None:
    four_of_five = [ballot(n, "yes") for n in "ABCD"] + [ballot("E", "no")]
    reached = tally("consensus", YES_NO, four_of_five, seed="p", threshold=0.8)
    assert reached.key == "yes" and reached.agreement == 0.8 and reached.reached is True
    assert reached.as_json()["consensus"] == {"threshold": 0.8, "reached": True}
    three_of_five = [ballot(n, "yes") for n in "ABC"] + [ballot(n, "no") for n in "DE"]
    short = tally("consensus", YES_NO, three_of_five, seed="p", threshold=0.8)
    assert short.key == "yes" and short.reached is False  # the plurality still decides, flagged
    assert short.as_json()["consensus"] == {"threshold": 0.8, "reached": False}
    assert tally("consensus", YES_NO, three_of_five, seed="p").threshold == 0.8  # the default
    assert "consensus" not in tally("vote", YES_NO, three_of_five, seed="p", threshold=0.8).as_json()


def test_abstentions_weigh_nothing_and_count_against_agreement() -> None:
    ballots = [ballot("A", "yes", 0.9), ballot("B", "yes", 0.9), ballot("C", None), ballot("D", None)]
    for protocol in TALLIES:
        d = tally(protocol, YES_NO, ballots, seed="p")
        assert d.key == "yes" and d.weights[2:] == (0.0, 0.0)
        assert d.agreement == 0.5 and d.as_json()["abstentions"] == 2
    assert agreement(YES_NO, ballots) == 0.5
    consensus = tally("consensus", YES_NO, ballots, seed="p", threshold=0.75)
    assert consensus.reached is False  # two of four, though every answer given was "yes"


def test_a_panel_that_abstained_has_no_answer() -> None:
    for protocol in TALLIES:
        d = tally(protocol, YES_NO, [ballot("A", None), ballot("B", None)], seed="p")
        assert (d.answer, d.key, d.margin, d.agreement, d.tie_break) == (None, None, 0.0, 0.0, None)
        assert d.as_json()["abstentions"] == 2
    empty = tally("vote", YES_NO, [], seed="p")
    assert (empty.key, empty.agreement) == (None, 0.0) and agreement(YES_NO, []) == 0.0


def test_numbers_within_the_tolerance_are_one_answer() -> None:
    spec = NumberAnswer(type="number", tolerance=0.5)
    d = tally("vote", spec, [ballot("A", 92.5), ballot("B", 92.0), ballot("C", 91.6), ballot("D", 95.0)], seed="p")
    assert d.answer == 92.0 and d.key == "92" and scores(d) == {"92": 3.0, "95": 1.0}
    assert d.candidates[0].voters == ["A", "B", "C"] and d.agreement == 0.75  # around the answer near most


def test_numbers_are_grouped_the_same_in_any_order_of_the_experts() -> None:
    # 1.0 ~ 1.4 ~ 1.8 within 0.5, but 1.0 and 1.8 are not: grouped around 1.4, whoever spoke first
    spec = NumberAnswer(type="number", tolerance=0.5)
    ballots = [ballot("A", 1.0), ballot("B", 1.4), ballot("C", 1.8)]
    for order in itertools.permutations(ballots):
        d = tally("vote", spec, list(order), seed="p")
        assert (d.key, d.agreement, scores(d)) == ("1.4", 1.0, {"1.4": 3.0})
    spread = tally("vote", NumberAnswer(type="number", tolerance=1), [ballot(n, v) for n, v in zip(
        "ABCDE", [93.0, 92.0, 91.0, 92.0, 95.0], strict=True)], seed="p")
    assert scores(spread) == {"92": 4.0, "95": 1.0}
    exact = tally("vote", NumberAnswer(type="number"), [ballot("A", 92.0), ballot("B", 92.5)], seed="p")
    assert sorted(scores(exact).items()) == [("92", 1.0), ("92.5", 1.0)]


def test_free_text_answers_are_grouped_as_they_read() -> None:
    spec = TextAnswer(type="text")
    d = tally("vote", spec, [ballot("A", "Keep the flat plan"), ballot("B", "keep the flat plan."),
                             ballot("C", "KEEP  THE FLAT PLAN"), ballot("D", "Adopt it")], seed="p")
    assert d.key == "keep the flat plan" and d.answer == "Keep the flat plan"  # as the first said it
    assert scores(d) == {"keep the flat plan": 3.0, "adopt it": 1.0}


def test_every_option_is_a_candidate_even_unchosen() -> None:
    d = tally("vote", XYZ, [ballot("A", "Z")], seed="p")
    assert [c.key for c in d.candidates] == ["Z", "X", "Y"] and d.margin == 1.0


def test_every_protocol_but_the_chair_tallies() -> None:
    assert set(TALLIES) == set(PROTOCOLS) - {"chair"}


def test_the_chair_does_not_tally() -> None:
    with pytest.raises(ValueError, match="no tally"):
        tally("chair", YES_NO, [ballot("A", "yes")], seed="p")


# ---------------------------------------------------------------- ties


def test_a_tie_goes_to_the_higher_total_confidence() -> None:
    d = tally("vote", YES_NO, [ballot("A", "yes", 0.6), ballot("B", "no", 0.9)], seed="plan-1")
    assert d.key == "no" and d.margin == 0.0
    assert d.tie_break == {"between": ["no", "yes"], "by": "confidence"}  # best first; no seed: no draw
    assert [c.key for c in d.candidates] == ["no", "yes"]


def test_a_tie_on_confidence_too_is_a_draw_seeded_with_the_plan_id() -> None:
    ballots = [ballot("A", "yes", 0.7), ballot("B", "no", 0.7)]
    winners = {tally("vote", YES_NO, ballots, seed="plan-1").key for _ in range(20)}
    assert len(winners) == 1  # the same winner on every call ...
    d = tally("vote", YES_NO, ballots, seed="plan-1")
    assert d.tie_break == {"between": ["yes", "no"], "by": "draw", "seed": "plan-1"}  # ... and the record says how
    assert tally("vote", YES_NO, list(reversed(ballots)), seed="plan-1").key == d.key  # whoever spoke first
    by_seed = {tally("vote", YES_NO, ballots, seed=f"plan-{i}").key for i in range(40)}
    assert by_seed == {"yes", "no"}  # a draw, not a fixed preference


def test_a_three_way_draw_names_every_tied_answer() -> None:
    d = tally("vote", XYZ, [ballot("A", "X", 0.5), ballot("B", "Y", 0.5), ballot("C", "Z", 0.5)], seed="s")
    assert d.tie_break is not None and d.tie_break["by"] == "draw"
    assert sorted(d.tie_break["between"]) == ["X", "Y", "Z"] and d.key in ("X", "Y", "Z")
    assert d.key == d.candidates[0].key


def test_only_the_leaders_are_drawn_between() -> None:
    d = tally("vote", XYZ, [ballot("A", "X", 0.5), ballot("B", "Y", 0.5), ballot("C", "Z", 0.5),
                            ballot("D", "Z", 0.5), ballot("E", "Y", 0.5)], seed="s")
    assert d.tie_break is not None and sorted(d.tie_break["between"]) == ["Y", "Z"] and d.key in ("Y", "Z")


def test_the_record_lists_every_vote_with_its_weight() -> None:
    d = tally("weighted_vote", YES_NO, [ballot("A", "yes", 0.75), ballot("B", None)], seed="p")
    record = json.loads(json.dumps(d.as_json()))
    assert record == {
        "protocol": "weighted_vote", "answer": "yes", "key": "yes",
        "votes": [{"expert": "A", "phase": "r1.a", "answer": "yes", "confidence": 0.75, "reason": "A's reason",
                   "weight": 0.75},
                  {"expert": "B", "phase": "r1.b", "answer": None, "confidence": 0.0, "reason": "",
                   "abstained": "unreadable", "weight": 0.0}],
        "candidates": [{"answer": "yes", "key": "yes", "score": 0.75, "confidence": 0.75, "voters": ["A"]},
                       {"answer": "no", "key": "no", "score": 0.0, "confidence": 0.0, "voters": []}],
        "margin": 0.75, "agreement": 0.5, "abstentions": 1, "tie_break": None,
    }


# ---------------------------------------------------------------- any panel

OPTIONS = ["red", "green", "blue", "amber"]
#: as models state them (two decimals, where ties are common) or any float; never 0, which
#: under weighted_vote weighs an answer as little as an abstention
CONFIDENCE = st.integers(1, 100).map(lambda n: n / 100) | st.floats(0, 1, exclude_min=True)


@st.composite
def panels(draw: st.DrawFn, *, unanimous: bool = False) -> Panel:
    protocol = draw(st.sampled_from(TALLIES))
    kind = "choice" if protocol == "borda" else draw(st.sampled_from(["choice", "number", "text"]))
    if kind == "choice":
        spec: Spec = ChoiceAnswer(type="choice", options=OPTIONS[: draw(st.integers(2, 4))])
        answers: st.SearchStrategy[str | float] = st.sampled_from(spec.options)
    elif kind == "number":
        spec = NumberAnswer(type="number", tolerance=draw(st.sampled_from([0.0, 0.5, 1.0])))
        answers = st.sampled_from([0.0, 0.5, 1.0, 1.4, 1.8, 2.0, 3.0])  # chains within the tolerance
    else:
        spec = TextAnswer(type="text")
        answers = st.sampled_from(["Keep it", "keep it.", "Adopt", "ADOPT", "wait"])
    n = draw(st.integers(1 if unanimous else 0, 7))
    one = draw(answers)
    ballots = []
    for i in range(n):
        answer = one if unanimous else draw(st.none() | answers)
        ranking: tuple[str, ...] = ()
        if answer is not None and isinstance(spec, ChoiceAnswer) and draw(st.booleans()):
            rest = draw(st.permutations([o for o in spec.options if o != answer]))
            ranking = (str(answer), *rest[: draw(st.integers(0, len(rest)))])
        verdict = abstention("unreadable") if answer is None else Verdict(answer, draw(CONFIDENCE), "", ranking)
        ballots.append(Ballot(expert=f"e{i}", phase=f"r1.e{i}", verdict=verdict))
    return protocol, spec, ballots


@bounded(300)
@given(panels())
def test_the_winner_always_has_the_top_score(panel: Panel) -> None:
    protocol, spec, ballots = panel
    d = tally(protocol, spec, ballots, seed="plan")
    top = max((c.score for c in d.candidates), default=0.0)
    if d.key is None:
        assert top == 0.0 and d.agreement == 0.0
        return
    assert d.candidates[0].key == d.key and d.candidates[0].score == top > 0
    assert d.margin == top - max((c.score for c in d.candidates[1:]), default=0.0) >= 0
    assert (d.tie_break is not None) == (d.margin == 0 and len(d.candidates) > 1)
    assert 0 < d.agreement <= 1 and d.agreement == len(d.candidates[0].voters) / len(ballots)


@bounded(200)
@given(panels(), st.randoms(use_true_random=False))
def test_the_order_of_the_ballots_changes_nothing(panel: Panel, rnd: random.Random) -> None:
    protocol, spec, ballots = panel
    shuffled = list(ballots)
    rnd.shuffle(shuffled)
    first = tally(protocol, spec, ballots, seed="plan")
    again = tally(protocol, spec, shuffled, seed="plan")
    assert again.key == first.key and scores(again) == scores(first)
    assert (again.margin, again.agreement) == (first.margin, first.agreement)
    assert (again.tie_break or {}).get("by") == (first.tie_break or {}).get("by")


@bounded(200)
@given(panels(unanimous=True))
def test_a_unanimous_panel_wins_with_agreement_one(panel: Panel) -> None:
    protocol, spec, ballots = panel
    d = tally(protocol, spec, ballots, seed="plan", threshold=1.0)
    assert d.answer == ballots[0].verdict.answer and d.agreement == 1.0 and d.tie_break is None
    assert d.reached in (None, True)


@bounded(200)
@given(panels())
def test_only_an_abstention_weighs_nothing(panel: Panel) -> None:
    protocol, spec, ballots = panel
    d = tally(protocol, spec, ballots, seed="plan")
    for b, weight in zip(ballots, d.weights, strict=True):
        assert (weight == 0.0) == b.verdict.abstained
        if not b.verdict.abstained:
            assert weight == (b.verdict.confidence if protocol == "weighted_vote" else 1.0)


def test_confidences_are_added_up_the_same_in_any_order() -> None:
    # 0.1 + 0.2 + 0.3 is 0.6000000000000001 in floating point, 0.3 + 0.2 + 0.1 is 0.6: that
    # decided whether X won outright or the tie went to the draw
    ballots = [ballot("A", "X", 0.1), ballot("B", "X", 0.2), ballot("C", "X", 0.3), ballot("D", "Y", 0.6)]
    records = set()
    for order in itertools.permutations(ballots):
        d = tally("weighted_vote", XYZ, list(order), seed="plan-3")
        assert scores(d)["X"] == scores(d)["Y"] == 0.6 and d.margin == 0.0
        records.add((d.key, json.dumps(d.tie_break)))
    assert len(records) == 1 and '"by": "draw"' in records.pop()[1]


def test_equal_decimal_totals_of_confidence_are_a_tie_for_the_draw() -> None:
    # 0.35 + 0.47 and 0.36 + 0.46 are both 0.82, but exactly rounded binary sums differ in the
    # last bit (0.82 against 0.8200000000000001): that noise, not the seeded draw, chose Y
    ballots = [ballot("A", "X", 0.35), ballot("B", "X", 0.47), ballot("C", "Y", 0.36), ballot("D", "Y", 0.46)]
    d = tally("vote", XYZ, ballots, seed="plan-5")
    assert {c.key: c.confidence for c in d.candidates if c.voters} == {"X": 0.82, "Y": 0.82}
    assert d.tie_break is not None and d.tie_break["by"] == "draw"
    # the draw is the seed's, not the listing's: another seed may pick the other
    winners = {tally("vote", XYZ, ballots, seed=f"plan-{i}").key for i in range(20)}
    assert winners == {"X", "Y"}


def test_every_order_of_a_small_tied_panel_gives_one_winner() -> None:
    ballots = [ballot("A", "X", 0.5), ballot("B", "Y", 0.25), ballot("C", "Y", 0.25), ballot("D", "X")]
    keys = {tally("vote", XYZ, list(order), seed="plan-9").key for order in itertools.permutations(ballots)}
    assert len(keys) == 1
