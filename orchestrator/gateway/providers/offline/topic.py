"""The topic of a meeting as the offline model reads it: the question, a gerund
phrase ("moving our product to usage-based pricing") and a short name
("usage-based pricing"), shared by every reader and writer of the offline model."""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.gateway.providers.offline.text import count_words, decap, gerund_of, strip_end

_QUESTION_PREFIX = re.compile(
    r"^(?:should|shall|could|can|must|would|will|do|does)\s+"
    r"(?:we|i|you|they|(?:the|our|my)\s+[\w-]+(?:\s+team)?)\s+(?:not\s+)?(?P<action>.+)$",
    re.I,
)
_OTHER_PREFIX = re.compile(
    r"^(?:is it (?:time|wise|worth it|a good idea) to|would it be (?:wise|worth it|a good idea) to|"
    r"whether (?:or not )?(?:to|we should)|proposal:|motion:|we should|let'?s|what if we)\s+(?P<action>.+)$",
    re.I,
)
_MOVE_VERBS = (
    "move",
    "switch",
    "migrate",
    "shift",
    "change",
    "go",
    "convert",
    "transition",
    "expand",
    "pivot",
    "return",
    "upgrade",
)


@dataclass(frozen=True)
class Topic:
    question: str  # as put to the panel
    gerund: str  # "moving our product to usage-based pricing"
    short: str  # "usage-based pricing"
    proper: frozenset[str] = frozenset()  # capitalised words of the question that keep their capital

    @classmethod
    def parse(cls, text: str) -> Topic:
        question = " ".join(text.strip().split()) or "the proposal before us"
        core = strip_end(question)
        proper = frozenset(w.strip(".,;:!?'\"()") for w in core.split()[1:] if w[:1].isupper())
        match = _QUESTION_PREFIX.match(core) or _OTHER_PREFIX.match(core)
        if not match:
            phrase = decap(core) if count_words(core) <= 10 and not core.endswith("?") else "the proposal"
            if question.endswith("?") and not match:
                phrase = "the proposal"
            return cls(question, phrase, phrase, proper)
        action = match.group("action").strip()
        verb, _, rest = action.partition(" ")
        gerund = f"{gerund_of(verb)} {rest}".strip()
        short = rest or gerund
        lowered = f" {rest.lower()} "
        if verb.lower() in _MOVE_VERBS and " to " in lowered:
            short = rest[lowered.rindex(" to ") + 3 :].strip()
        elif verb.lower() in ("replace", "swap") and " with " in lowered:
            short = rest[lowered.rindex(" with ") + 5 :].strip()
        if not short or count_words(short) > 7:
            short = gerund
        return cls(question, gerund, short, proper)
