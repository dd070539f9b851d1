"""The offline model and a briefing: it reads the passages its prompt carries (as the prompt
builder renders them), cites those its text draws on as ``[doc:n]``, carries its
colleagues' citations through into summaries and syntheses — and never cites a passage its
prompt does not carry, whatever the colleagues it quotes cited."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.gateway.providers.offline import OfflineProvider
from orchestrator.gateway.providers.offline.citing import cited_in, only_citing, passages_in
from orchestrator.gateway.types import ChatRequest, ContextBlock, ModelSpec
from orchestrator.plan.prompts import with_briefing
from storage.read_models import ChunkRecord

TOPIC = "Should we move our product to usage-based pricing?"
EXPERTS = [{"name": "Dana", "role": "CFO"}, {"name": "Raj", "role": "CTO"}, {"name": "Maya", "role": "Head of Sales"}]
PASSAGES = [
    ChunkRecord("memo", 2, "Pricing memo", ["Pricing", "Risks"], 40, 160,
                "## Risks\n\nHeavy users would pay up to three times more, and some of them will leave us.", 20),
    ChunkRecord("churn", 1, "Churn analysis", ["Churn analysis"], 0, 120,
                "# Churn analysis\n\n```\n# not a heading\n```\n\nSmall accounts churn at 3.4%, twice the rate of "
                "larger accounts.", 25),
]
IN_PROMPT = {"memo:2", "churn:1"}
# colleagues who cite passages this call was given (memo:2) and passages it was not (ghost:7, memo:9),
# in plain sentences that a reply may quote
DANA = ("I have looked at the numbers closely. Revenue per account has been flat for six quarters [ghost:7]. "
        "Heavy users pay up to three times more under the new model [memo:2]. Small accounts churn at twice "
        "the rate of large ones [memo:9, churn:1].\n\nPosition: OPPOSE — The margin risk is too high for us [ghost:7].")
RAJ = ("The billing platform can meter invoices within a quarter [ghost:7]. Migration is the real risk for the "
       "platform team [memo:2].\n\nPosition: SUPPORT — The platform can carry it if we stage the migration.")


def spec() -> ModelSpec:
    return ModelSpec(name="offline", provider="offline", options={"latency": 0})


def request(kind: str, context: tuple[ContextBlock, ...] = (), passages: list[ChunkRecord] | None = None,
            **hints: Any) -> ChatRequest:
    base = {"kind": kind, "topic": TOPIC, "experts": EXPERTS, "moderator": "Morgan", "round": 1, "rounds": 2}
    req = ChatRequest(system="You are on a panel.", prompt="Speak.", context=context, hints={**base, **hints})
    return with_briefing(req, PASSAGES if passages is None else passages)


def answer(req: ChatRequest) -> str:
    return OfflineProvider().complete(spec(), req).text


def streamed(req: ChatRequest) -> str:
    return "".join(e.text for e in OfflineProvider().stream(spec(), req) if hasattr(e, "text"))


COLLEAGUES = (ContextBlock("r1.dana", "Round 1: Dana (CFO)", DANA), ContextBlock("r1.raj", "Round 1: Raj (CTO)", RAJ))
KINDS: list[tuple[str, dict[str, Any]]] = [
    ("opening", {}),
    ("turn", {"expert": "Maya", "role": "Head of Sales", "round": 1}),
    ("turn", {"expert": "Maya", "role": "Head of Sales", "round": 2, "speakers": ["Dana", "Raj"]}),
    ("expert", {"expert": "Maya", "role": "Head of Sales"}),
    ("debate", {"expert": "Maya", "role": "Head of Sales", "opponents": ["Dana"], "participants": ["Maya", "Dana"]}),
    ("round_summary", {"speakers": ["Dana", "Raj"]}),
    ("final_summary", {"speakers": ["Dana", "Raj"], "round": 3}),
    ("synthesis", {"expert": "Maya", "role": "Head of Sales", "speakers": ["Dana", "Raj"]}),
]


def test_the_prompt_builders_passages_are_what_the_offline_model_reads() -> None:
    found = passages_in(request("turn").prompt)
    assert [(p.ref, p.where) for p in found] == [("memo:2", "Pricing memo > Pricing > Risks"),
                                                 ("churn:1", "Churn analysis > Churn analysis")]
    assert found[0].text == PASSAGES[0].text and found[1].text == PASSAGES[1].text
    assert found[1].gist() == "Small accounts churn at 3.4%, twice the rate of larger accounts"  # not the code
    assert passages_in(request("turn", passages=[]).prompt) == []


@pytest.mark.parametrize(("kind", "hints"), KINDS, ids=[f"{k}-{h.get('round', 1)}" for k, h in KINDS])
def test_every_kind_cites_only_passages_its_prompt_carries(kind: str, hints: dict[str, Any]) -> None:
    context = () if kind == "opening" else COLLEAGUES
    req = request(kind, context, **hints)
    text = answer(req)
    cited = cited_in(text)
    assert cited, f"{kind}: draws on no passage\n{text}"
    assert set(cited) <= IN_PROMPT, f"{kind}: cites {set(cited) - IN_PROMPT}\n{text}"
    assert streamed(req) == text  # the stream is filtered the same way, piece by piece


def test_summaries_and_syntheses_carry_colleagues_citations_through() -> None:
    final = answer(request("final_summary", COLLEAGUES, speakers=["Dana", "Raj"], round=3))
    assert "Evidence from the briefing:\n- Risks [memo:2]: cited by Dana and Raj\n- Churn analysis [churn:1]: " \
           "cited by Dana" in final
    dana = next(line for line in final.splitlines() if line.startswith("- **Dana**"))
    assert dana.endswith("[r1.dana] [memo:2] [churn:1]")  # memo:9 and ghost:7 were never in the prompt
    synthesis = answer(request("synthesis", COLLEAGUES, expert="Maya", role="Head of Sales", speakers=["Dana", "Raj"]))
    assert "[r1.raj] [memo:2]" in synthesis and "**Evidence from the briefing.**" in synthesis
    summary = answer(request("round_summary", COLLEAGUES, speakers=["Dana", "Raj"]))
    assert "[memo:2, churn:1]" not in summary and "[memo:2] [churn:1]." in summary


def test_a_call_given_no_passage_cites_none_even_when_it_quotes_citations() -> None:
    # the context summariser's request carries no passage: sentences it keeps lose their citations
    summarise = ChatRequest(system="Condense.", prompt="Summarise the material above in at most 60 words.",
                            context=COLLEAGUES[:1], purpose="summarise", hints={"kind": "summarise"})
    kept = answer(summarise)
    assert "Small accounts churn at twice the rate of large ones." in kept  # the sentence is kept …
    assert cited_in(kept) == []  # … their citations are not
    for kind, hints in KINDS:
        assert cited_in(answer(request(kind, () if kind == "opening" else COLLEAGUES, passages=[], **hints))) == []


def test_only_citing_keeps_what_it_may_and_drops_the_rest() -> None:
    kept = only_citing("Churn is high [memo:9, churn:1]; flat [ghost:7].", {"churn:1"})
    assert kept == "Churn is high [churn:1]; flat."
    assert only_citing("See [r1.dana] and [Churn:1].", {"churn:1"}) == "See [r1.dana] and [Churn:1]."  # phase citation
    assert cited_in("[a:1; b:02] [r1.x] [c: 3]") == ["a:1", "b:2"]
