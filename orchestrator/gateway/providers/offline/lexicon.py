"""Vocabulary of the offline provider: role profiles, topic themes and phrasing.

The words are data, in ``data/lexicon.json`` beside this module (shipped as package
data), loaded once at import with :mod:`importlib.resources`. This module gives them
their types. The offline model (:mod:`orchestrator.gateway.providers.offline.voice` and the writers) picks
from these tables with a hash-seeded dice, so the same request always yields the
same words.

Sentence templates may use these placeholders (filled by ``str.format``):

``{gerund}`` / ``{Gerund}``  "moving our product to usage-based pricing"
``{short}`` / ``{Short}``    "usage-based pricing"
``{role}``                   the speaker's role as given ("Head of Sales")

Responding to an earlier speaker (``RESPOND_*``, ``OWN_EARLIER``) may also use
``{peer}`` ``{concern}`` ``{quote}`` ``{counter}`` ``{my_concern}`` ``{lens}``.

Position sentences are written impersonally (no "I"), so that summaries can
attribute them to a person without rewriting pronouns. They never contain a
full stop before the end: a position is one sentence.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.resources import files
from typing import Any


@dataclass(frozen=True)
class RoleProfile:
    """How one kind of role talks: its lens, its concerns, its arguments."""

    key: str
    keywords: tuple[str, ...]  # matched as whole words/phrases in the lower-cased role
    lens: str  # "Let me start with {lens}."
    concerns: tuple[str, ...]  # noun phrases: "Dana's point about {concern}"
    support: tuple[str, ...]  # reasons for, full sentences
    oppose: tuple[str, ...]  # reasons against, full sentences
    conditions: tuple[str, ...]  # clauses: "only if {condition}"
    questions: tuple[str, ...]
    details: tuple[str, ...]  # role-flavoured elaboration, stance-neutral
    position_support: tuple[str, ...]
    position_oppose: tuple[str, ...]

    @classmethod
    def load(cls, data: dict[str, Any]) -> RoleProfile:
        fields: dict[str, Any] = {k: v if isinstance(v, str) else tuple(v) for k, v in data.items()}
        return cls(**fields)


@dataclass(frozen=True)
class Theme:
    """What a topic is about: extra facets each kind of role would raise."""

    key: str
    keywords: tuple[str, ...]
    facets: dict[str, tuple[str, ...]]  # profile key (or "*") -> noun phrases

    @classmethod
    def load(cls, data: dict[str, Any]) -> Theme:
        return cls(key=data["key"], keywords=tuple(data["keywords"]),
                   facets={k: tuple(v) for k, v in data["facets"].items()})


def _strings(value: list[str]) -> tuple[str, ...]:
    return tuple(value)


def _by_stance(value: dict[str, list[str]]) -> dict[str, tuple[str, ...]]:
    return {k: tuple(v) for k, v in value.items()}


_DATA: dict[str, Any] = json.loads(
    files("orchestrator.gateway.providers.offline").joinpath("data", "lexicon.json").read_text("utf-8"))

PROFILES: tuple[RoleProfile, ...] = tuple(RoleProfile.load(p) for p in _DATA["profiles"])
# Used when no profile matches the role: concerns named after the role itself.
GENERIC: RoleProfile = RoleProfile.load(_DATA["generic"])
THEMES: tuple[Theme, ...] = tuple(Theme.load(t) for t in _DATA["themes"])

# --- turn phrasing -----------------------------------------------------------

OPENERS_FIRST: tuple[str, ...] = _strings(_DATA["openers_first"])
OPENERS_LATER: tuple[str, ...] = _strings(_DATA["openers_later"])
OPENERS_FINAL: tuple[str, ...] = _strings(_DATA["openers_final"])
DECLARE: dict[str, tuple[str, ...]] = _by_stance(_DATA["declare"])
RESPOND_SAME: tuple[str, ...] = _strings(_DATA["respond_same"])
RESPOND_AGAINST: tuple[str, ...] = _strings(_DATA["respond_against"])
RESPOND_AS_CONDITIONAL: tuple[str, ...] = _strings(_DATA["respond_as_conditional"])
RESPOND_TO_CONDITIONAL: tuple[str, ...] = _strings(_DATA["respond_to_conditional"])
RESPOND_NO_CONCERN: tuple[str, ...] = _strings(_DATA["respond_no_concern"])
OWN_EARLIER: tuple[str, ...] = _strings(_DATA["own_earlier"])
THEME_LINES: tuple[str, ...] = _strings(_DATA["theme_lines"])
CONDITION_LINES: tuple[str, ...] = _strings(_DATA["condition_lines"])
CONDITIONAL_CORE: tuple[str, ...] = _strings(_DATA["conditional_core"])
CLOSERS: dict[str, tuple[str, ...]] = _by_stance(_DATA["closers"])

# Phrases recognised in other speakers' text, beyond the profiles' concerns and the
# themes' facets: (regular expression, the concern it stands for).
TERM_ALIASES: tuple[tuple[str, str], ...] = tuple((pattern, concern) for pattern, concern in _DATA["term_aliases"])

# What each kind of role would own after the meeting ("Dana to ...").
NEXT_STEPS: dict[str, str] = dict(_DATA["next_steps"])

# Concerns too common as words to show what a sentence is about ("focus", "process").
TOO_COMMON: frozenset[str] = frozenset(_DATA["too_common"])

del _DATA
