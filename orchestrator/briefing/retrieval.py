"""Which passages an expert sees: the query, and the pick within a token budget. Pure.

The query is made of the words that say what this call is about — the phase's prompt,
the expert's role, the plan's question — without stop words; the storage search ranks
the plan's chunks by it (OR semantics: any shared word counts, more count more). The
pick walks that ranking and keeps each passage that still fits the budget, measured
the way the prompt will carry it (:func:`render`), so a long passage low in the ranking
never pushes out shorter, more relevant ones above it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from storage.records import ChunkRecord
from tasks.llm.budget import estimate_tokens

MAX_TERMS = 48
_WORD = re.compile(r"\w+")
_STOP_WORDS = """
a about above after again against all also am an and any are as at be because been before being below
between both but by can could did do does doing down during each few for from further had has have having
he her here hers him his how i if in into is it its itself just me more most my no nor not now of off on
once only or other our ours out over own same she should so some such than that the their theirs them then
there these they this those through to too under until up very was we were what when where which while who
whom why will with would you your yours yourself yourselves shall may might must let lets us one two
give given make makes made get gets use using used way ways each every many much well also like need needs
answer question expert experts phase role plan team board discuss discussion write say says think
"""
STOP_WORDS = frozenset(_STOP_WORDS.split())


def build_query(role: str, prompt: str, question: str, *, max_terms: int = MAX_TERMS) -> str:
    """The search words for one expert's call: from the phase's prompt first, then the
    role, then the question — distinct, lower-cased, stop words and one-letter Latin
    words left out."""
    words: list[str] = []
    for source in (prompt, role, question):
        for w in _WORD.findall(source.lower()):
            if w in STOP_WORDS or (len(w) == 1 and w.isascii() and w.isalpha()) or not w.strip("_"):
                continue
            words.append(w)
    return " ".join(list(dict.fromkeys(words))[:max_terms])


def render(chunk: ChunkRecord) -> str:
    """A passage as a prompt carries it: its citation, where it comes from, its text."""
    where = " > ".join([chunk.title, *chunk.heading_path])
    return f"[{chunk.ref}] ({where})\n{chunk.text}"


def passage_tokens(chunk: ChunkRecord) -> int:
    return estimate_tokens(render(chunk)) + 2  # the blank line between passages


def pick_passages(ranked: Sequence[ChunkRecord], budget_tokens: int, *,
                  max_passages: int | None = None) -> list[ChunkRecord]:
    """The best-ranked passages that fit ``budget_tokens`` together, in ranking order."""
    picked: list[ChunkRecord] = []
    used = 0
    for chunk in ranked:
        if max_passages is not None and len(picked) >= max_passages:
            break
        cost = passage_tokens(chunk)
        if used + cost <= budget_tokens:
            picked.append(chunk)
            used += cost
    return picked
