"""Which passages an expert sees: the query, and the pick within a token budget. Pure.

The query is made of the words that say what this call is about, in three tiers searched
in order: the phase's prompt (what this call must do), the expert's role (the angle it
takes), the plan's question (shared by every expert). Stop words are left out, and so
are the rank words of job titles ("Chief … Officer", "Head of …"): they say nothing
about a role's subject, and stemming makes "officer" match "office". The
storage search ranks the plan's chunks for each tier (OR semantics: any shared word
counts, more count more); the rankings are concatenated tier by tier, so the passages
about this call's own task come before those that merely touch the shared question —
otherwise every expert would read the same passages. The pick walks that order and keeps
each passage that still fits the budget, measured the way the prompt will carry it
(:func:`render`), so one long passage never pushes out shorter, more relevant ones.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.gateway.tokens import estimate_tokens
from storage.read_models import ChunkRecord

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
chief officer head senior deputy vice director manager
"""
STOP_WORDS = frozenset(_STOP_WORDS.split())


@dataclass(frozen=True)
class Query:
    """Search words per tier (prompt, role, question; empty tiers dropped), and the
    call's own words as a sentence for a reranker."""

    tiers: tuple[str, ...]
    sentence: str


def build_query(role: str, prompt: str, question: str, *, max_terms: int = MAX_TERMS) -> Query:
    """The search words for one expert's call: distinct within each tier, lower-cased,
    stop words and single Latin letters left out, at most ``max_terms`` in all."""
    tiers: list[str] = []
    budget = max_terms
    for source in (prompt, role, question):
        words = [w for w in _WORD.findall(source.lower())
                 if w not in STOP_WORDS and not (len(w) == 1 and w.isascii() and w.isalpha()) and w.strip("_")]
        kept = list(dict.fromkeys(words))[:budget]
        budget -= len(kept)
        if kept:
            tiers.append(" ".join(kept))
    return Query(tuple(tiers), " ".join(part.strip() for part in (role, prompt, question) if part.strip()))


def merge_rankings(rankings: Sequence[Sequence[ChunkRecord]]) -> list[ChunkRecord]:
    """Tier rankings concatenated in tier order, each passage at its first place."""
    seen: set[str] = set()
    merged = []
    for ranking in rankings:
        for chunk in ranking:
            if chunk.ref not in seen:
                seen.add(chunk.ref)
                merged.append(chunk)
    return merged


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
