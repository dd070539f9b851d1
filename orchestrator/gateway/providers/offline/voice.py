"""A speaker's voice in the offline model: the vocabulary of a role, the stance it
argues, and the sentences (reasons, conditions, ``Position:`` lines) it says them in.

The words come from :mod:`orchestrator.gateway.providers.offline.lexicon`; a voice picks among them
with its own dice and never uses the same template twice while fresh ones remain.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from orchestrator.gateway.providers.offline import lexicon as lx
from orchestrator.gateway.providers.offline.text import DASH, Dice, cap, decap, strip_end
from orchestrator.gateway.providers.offline.topic import Topic


def profile_for(role: str) -> lx.RoleProfile:
    """The vocabulary profile of a role string (generic when nothing matches)."""
    padded = " " + re.sub(r"[^a-z0-9&+-]+", " ", role.lower()) + " "
    for profile in lx.PROFILES:
        if any(f" {kw} " in padded for kw in profile.keywords):
            return profile
    return lx.GENERIC


def _themes(topic: str) -> list[lx.Theme]:
    padded = " " + re.sub(r"[^a-z0-9-]+", " ", topic.lower()) + " "
    scored = []
    for order, theme in enumerate(lx.THEMES):
        hits = sum(1 for kw in theme.keywords if f" {kw} " in padded)
        if hits:
            scored.append((-hits, order, theme))
    return [t for _, _, t in sorted(scored, key=lambda x: (x[0], x[1]))][:2]


class Voice:
    """One speaker: name, role, vocabulary, stance, and a dice for choosing words."""

    def __init__(self, name: str, role: str, topic: Topic, stance: str, *seed: object) -> None:
        self.name = name
        self.role = role or "panel member"
        self.profile = profile_for(self.role)
        self.topic = topic
        self.stance = stance
        self.dice = Dice(name, role, topic.question, *seed)
        self._used: set[str] = set()
        self._vars = {
            "gerund": topic.gerund,
            "Gerund": cap(topic.gerund),
            "short": topic.short,
            "Short": cap(topic.short),
            "role": self.role,
        }
        self._vars["lens"] = self.profile.lens.format(**self._vars)
        self.lens = self._vars["lens"]

    def decap(self, sentence: str) -> str:
        return decap(sentence, self.topic.proper)

    def fill(self, template: str, **extra: Any) -> str:
        return template.format(**self._vars, **extra)

    def take(self, pool: Sequence[str], **extra: Any) -> str:
        """An unused template from a pool, filled in."""
        fresh = [t for t in pool if t not in self._used] or list(pool)
        template = self.dice.pick(fresh)
        self._used.add(template)
        return self.fill(template, **extra)

    def reason(self, stance: str | None = None, *, plain: bool = False) -> str:
        """A reason for a stance; ``plain`` prefers one without a colon (to follow "but" or ":")."""
        stance = stance or self.stance
        pool: Sequence[str] = self.profile.oppose if stance == "oppose" else self.profile.support
        if stance == "conditional":
            pool = lx.CONDITIONAL_CORE
        if plain:
            pool = [t for t in pool if ":" not in t] or pool
        return self.take(pool)

    def conditions(self, n: int = 2) -> list[str]:
        return [self.fill(c) for c in self.dice.shuffled(self.profile.conditions)[:n]]

    def concerns(self) -> list[str]:
        return [self.fill(c) for c in self.profile.concerns]

    def facets(self) -> list[str]:
        out: list[str] = []
        for theme in _themes(self.topic.question):
            out.extend(theme.facets.get(self.profile.key) or theme.facets.get("*", ()))
        return out

    def position_line(self, stance: str, conditions: Sequence[str] = (), tail: str = "") -> str:
        if stance == "conditional":
            cond = conditions[0] if conditions else self.conditions(1)[0]
            template = self.dice.pick(
                (
                    "{Gerund} is worth doing only if {c}",
                    "{Gerund} should go ahead only if {c}",
                    "{Gerund} makes sense only if {c}",
                )
            )
            sentence = self.fill(template, c=cond)
        else:
            pool = self.profile.position_support if stance == "support" else self.profile.position_oppose
            sentence = strip_end(self.fill(self.dice.pick(pool)))
        if tail:
            sentence = f"{sentence}, {tail}"
        return f"Position: {stance.upper()} {DASH} {strip_end(sentence)}."

    def elaborations(self) -> Iterator[str]:
        """Stance-appropriate sentences to pad a turn to length; endless, repeating only when exhausted."""
        pool: list[str] = []
        facets = self.facets()
        facet_lines = [self.take(lx.THEME_LINES, facet=f) for f in facets]
        details = [self.fill(d) for d in self.dice.shuffled(self.profile.details)]
        reasons = [
            self.fill(r)
            for r in self.dice.shuffled(
                self.profile.oppose if self.stance == "oppose" else self.profile.support
            )
            if r not in self._used
        ]
        question = [self.fill(q) for q in self.dice.shuffled(self.profile.questions)]
        pool.extend(facet_lines[:1])
        pool.extend(details[:2])
        if self.stance != "conditional":
            pool.extend(reasons[:1])
        pool.extend(question[:1])
        pool.extend(facet_lines[1:])
        pool.extend(details[2:])
        if self.stance != "conditional":
            pool.extend(reasons[1:])
        pool.extend(question[1:])
        yield from pool
        prefixes = ("To come back to {c}: ", "One more word on {c}: ", "And on {c}, ")
        n = 0
        while True:
            concern = self.concerns()[n % len(self.concerns())]
            sentence = details[n % len(details)] if details else self.fill(self.profile.support[0])
            yield self.fill(prefixes[n % len(prefixes)], c=concern) + self.decap(sentence)
            n += 1
