"""Context budgeting: the whole request fits, the oldest blocks are summarised first,
and what cannot fit is refused, never silently cut."""

from __future__ import annotations

import pytest

from orchestrator.gateway.budget import fit_request, fits
from orchestrator.gateway.failures import ContextOverflow
from orchestrator.gateway.tokens import estimate_tokens, estimate_usage, request_tokens
from orchestrator.gateway.types import ChatRequest, Completion, ContextBlock, ModelSpec, Usage


def spec(window: int, reserve: int = 100) -> ModelSpec:
    return ModelSpec(name="m", provider="fake", context_window=window, max_output_tokens=reserve)


def block(source: str, chars: int) -> ContextBlock:
    return ContextBlock(source=source, title=f"Turn {source}", text=("word " * chars)[:chars])


class Summariser:
    """Records every summariser request and checks that each one fits the window."""

    def __init__(self, model: ModelSpec, reply: str | None = "short summary") -> None:
        self.spec = model
        self.reply = reply
        self.requests: list[ChatRequest] = []

    def __call__(self, request: ChatRequest) -> Completion:
        assert fits(self.spec, request), "a summariser request must itself fit the window"
        self.requests.append(request)
        text = self.reply if self.reply is not None else request.context[0].text
        return Completion(text=text, usage=Usage(10, 3, "provider"))


def test_estimate_is_chars_over_four_rounded_up() -> None:
    assert [estimate_tokens(t) for t in ("", "a", "abcd", "abcde")] == [0, 1, 1, 2]


CHINESE = "董事会认为应当先在一个城市试点新的定价方案，观察一个季度的客户流失，再决定是否全面推行。"  # noqa: RUF001


def test_cjk_characters_count_a_token_each() -> None:
    assert estimate_tokens("董事会") == 3
    assert estimate_tokens("한국어 テスト") == 3 + 1 + 3  # the space is a quarter, rounded up
    assert estimate_tokens("\uff30\uff52\uff49\uff43\uff45") == 5  # "Price" in full-width forms
    assert estimate_tokens("Café ✓") == 2  # accented Latin and symbols stay a quarter each
    assert estimate_tokens("价格 price") == 2 + 2


def test_chinese_context_near_the_window_is_summarised_not_sent_over() -> None:
    """3,000 Chinese characters: ~750 tokens by chars/4 — which would fit a 1,600-token
    window with 600 reserved — but at least 3,000 by any real tokenizer."""
    model = spec(1600, reserve=600)
    text = (CHINESE * 80)[:3000]
    request = ChatRequest(system="董事会秘书", prompt="请总结。", context=(ContextBlock("r1.a", "第一轮", text),))
    assert request_tokens(request) > 3000
    assert not fits(model, request)
    summarise = Summariser(model, reply="先试点。再决定。")
    fitted = fit_request(model, request, summarise)
    assert fits(model, fitted) and fitted.context[0].summarised
    # the material was cut into pieces that each fit one summariser request (checked in the fake)
    assert len(summarise.requests) >= 3
    assert "".join(r.context[0].text for r in summarise.requests) == text  # nothing lost


def test_estimated_usage_says_so() -> None:
    usage = estimate_usage(ChatRequest(system="s", prompt="p"), "x" * 9)
    assert (usage.output_tokens, usage.source, usage.method) == (3, "estimated", "chars/4")


def test_request_that_fits_is_returned_unchanged() -> None:
    model = spec(10_000)
    request = ChatRequest(system="sys", prompt="go", context=(block("r1.a", 400),))
    summarise = Summariser(model)
    assert fit_request(model, request, summarise) is request
    assert summarise.requests == []


def test_the_whole_request_is_measured_including_the_output_reserve() -> None:
    request = ChatRequest(system="s" * 400, prompt="p" * 400, context=(block("r1.a", 400),))
    needed = request_tokens(request) + 100
    assert fits(spec(needed), request)
    assert not fits(spec(needed - 1), request)


def test_oldest_blocks_are_summarised_first_and_only_as_needed() -> None:
    blocks = (block("r1.a", 2000), block("r1.b", 2000), block("r2.a", 2000))
    request = ChatRequest(system="sys", prompt="decide", context=blocks)
    model = spec(request_tokens(request) + 100 - 400)  # one block's worth too big
    summarise = Summariser(model)

    fitted = fit_request(model, request, summarise)

    assert fits(model, fitted)
    assert [b.source for b in fitted.context] == ["r1.a", "r1.b", "r2.a"]
    assert [b.summarised for b in fitted.context] == [True, False, False]
    assert fitted.context[0].text == "short summary"
    assert fitted.context[1:] == blocks[1:]
    assert len(summarise.requests) == 1
    sent = summarise.requests[0]
    assert sent.purpose == "summarise"
    assert sent.hints["kind"] == "summarise"
    assert sent.context[0].text == blocks[0].text


def test_a_block_too_large_for_one_summariser_request_is_chunked() -> None:
    request = ChatRequest(system="sys", prompt="decide", context=(block("r1.a", 12_000),))
    model = spec(1500, reserve=200)
    summarise = Summariser(model)

    fitted = fit_request(model, request, summarise)

    assert fits(model, fitted)
    assert len(summarise.requests) > 1  # pieces, each fitting the window
    assert all("part" in r.prompt for r in summarise.requests)
    assert fitted.context[0].summarised and fitted.context[0].source == "r1.a"


def test_instructions_alone_too_large_is_refused_before_any_summary() -> None:
    model = spec(200)
    request = ChatRequest(system="s" * 2000, prompt="go", context=(block("r1.a", 400),))
    summarise = Summariser(model)
    with pytest.raises(ContextOverflow, match="alone need"):
        fit_request(model, request, summarise)
    assert summarise.requests == []


def test_summaries_that_do_not_shrink_end_in_context_overflow() -> None:
    request = ChatRequest(system="sys", prompt="go", context=(block("r1.a", 2000), block("r1.b", 2000)))
    model = spec(request_tokens(request) * 3 // 4)
    summarise = Summariser(model, reply=None)  # echoes the material back
    with pytest.raises(ContextOverflow, match="even with all 2 context block"):
        fit_request(model, request, summarise)
    assert len(summarise.requests) == 2


def test_a_block_whose_piecewise_summaries_do_not_shrink_is_refused() -> None:
    request = ChatRequest(system="sys", prompt="go", context=(block("r1.a", 4000),))
    model = spec(600)
    summarise = Summariser(model, reply=None)
    with pytest.raises(ContextOverflow, match="could not be summarised small enough"):
        fit_request(model, request, summarise)
