"""Token estimates, where no tokenizer is at hand.

An ESTIMATE, not a count: used to decide whether a request fits a model's window
(:mod:`orchestrator.gateway.budget`), to size a briefing, and to fill a call's usage when its
provider reports none — that usage says ``source="estimated", method="chars/4"``.
Characters count a quarter token each, except the characters of scripts written without
spaces — Chinese, Japanese and Korean, full-width forms — which count one token each: real
tokenizers spend one to three tokens on such a character, so a quarter would let a CJK board
overflow a window the budget thought it fitted. Keep a margin in ``context_window``.
"""

from __future__ import annotations

import math
import re

from orchestrator.gateway.types import ChatRequest, Usage

ESTIMATE_METHOD = "chars/4"
MESSAGE_OVERHEAD = 8  # role markers and separators per message, in tokens

#: One token each: Hangul Jamo, CJK radicals to unified ideographs (kana, bopomofo, …
#: included), Hangul syllables, compatibility ideographs, full-width forms, and the
#: supplementary ideograph planes.
_WIDE = re.compile("[\u1100-\u11ff\u2e80-\u9fff\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff"
                   "\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0003ffff]")


def estimate_tokens(text: str) -> int:
    """An estimate, not a count: ``ceil(others / 4) + wide`` (see the module's notes)."""
    if text.isascii():
        return math.ceil(len(text) / 4)
    wide = len(_WIDE.findall(text))
    return math.ceil((len(text) - wide) / 4) + wide


def request_tokens(request: ChatRequest) -> int:
    """Estimated input tokens of the whole request as it is rendered for a provider."""
    messages = request.messages()
    return sum(estimate_tokens(m.content) + MESSAGE_OVERHEAD for m in messages)


def estimate_usage(request: ChatRequest, output: str) -> Usage:
    """Usage labelled as estimated, for providers that report none."""
    return Usage(request_tokens(request), estimate_tokens(output), "estimated", ESTIMATE_METHOD)
