"""Small, deterministic text tools of the offline model: the dice it chooses with,
and the string helpers every part of it shares.

Nothing here reads a request or knows a role; the dice is seeded by SHA-256, never
by ``hash()`` or the global random state, so every choice is reproducible.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")

DASH = "\u2014"  # em dash, the separator of a Position line


def slug_of(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", name.lower())


class Dice:
    """Deterministic choices: SHA-256 of a seed and a counter."""

    def __init__(self, *seed: object) -> None:
        self._seed = "\x1f".join(str(s) for s in seed)
        self._n = 0

    def below(self, n: int) -> int:
        self._n += 1
        digest = hashlib.sha256(f"{self._seed}\x1e{self._n}".encode()).digest()
        return int.from_bytes(digest[:8], "big") % max(1, n)

    def pick(self, seq: Sequence[T]) -> T:
        return seq[self.below(len(seq))]

    def shuffled(self, seq: Sequence[T]) -> list[T]:
        out = list(seq)
        for i in range(len(out) - 1, 0, -1):
            j = self.below(i + 1)
            out[i], out[j] = out[j], out[i]
        return out

    def chance(self, p: float) -> bool:
        return self.below(10_000) < p * 10_000

    def uniform(self) -> float:
        """A number in [0, 1), with 53 bits of the next draw."""
        return self.below(2**53) / 2**53


def cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def decap(s: str, keep: frozenset[str] = frozenset()) -> str:
    """Lower-case a sentence's first letter, unless it starts with "I", an acronym or a name in ``keep``."""
    first = s.split(" ", 1)[0]
    if first.strip(".,;:!?'\"") in keep:
        return s
    if not first or first in ("I", "I'm", "I'd", "I've", "I'll") or first.isupper() or first[:1].islower():
        return s
    if len(first) > 1 and any(c.isupper() for c in first[1:]):
        return s
    return first[:1].lower() + s[1:] if first[:1].isalpha() else s


def join_names(names: Sequence[str]) -> str:
    names = list(names)
    if not names:
        return "nobody"
    if len(names) == 1:
        return names[0]
    return ", ".join(names[:-1]) + " and " + names[-1]


def count_words(text: str) -> int:
    return len(text.split())


_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+(?=[\"'(\[]?[A-Z0-9*])")


def split_sentences(text: str) -> list[str]:
    out: list[str] = []
    for line in text.splitlines():
        line = re.sub(r"^\s*(?:[-*+]\s+|\d+[.)]\s+|#+\s+|>\s*)", "", line).strip()
        if not line:
            continue
        out.extend(s.strip() for s in _SENTENCE_END.split(line) if s.strip())
    return out


def strip_end(s: str) -> str:
    return s.strip().rstrip(".!?;:,").strip()


def gerund_of(verb: str) -> str:
    v = verb.lower()
    special = {
        "be": "being",
        "see": "seeing",
        "go": "going",
        "do": "doing",
        "die": "dying",
        "lie": "lying",
        "tie": "tying",
        "free": "freeing",
        "agree": "agreeing",
    }
    if v in special:
        out = special[v]
    elif v.endswith("ing") and len(v) > 5:
        out = v
    elif v.endswith("ie"):
        out = v[:-2] + "ying"
    elif v.endswith("e") and not v.endswith(("ee", "ye", "oe")):
        out = v[:-1] + "ing"
    elif (len(v) <= 4 and re.fullmatch(r"[^aeiou]*[aeiou][^aeiouwxy]", v)) or v in (
        "commit",
        "admit",
        "refer",
    ):
        out = v + v[-1] + "ing"
    else:
        out = v + "ing"
    return out if verb.islower() or verb[:1].islower() else cap(out)


def paragraphs(sentences: Sequence[str], size: int = 4) -> str:
    """Sentences as paragraphs of at most ``size``; a ``"\n"`` item ends a paragraph early."""
    return "".join(paragraph_pieces(sentences, size))


def paragraph_pieces(sentences: Iterable[str], size: int = 4) -> Iterator[str]:
    """:func:`paragraphs`, lazily: each paragraph as soon as its sentences are known
    (the separator leads every paragraph but the first), reading ``sentences`` only
    as far as it needs to."""
    started = False
    current: list[str] = []
    for s in sentences:
        if s == "\n":
            if current:
                yield ("\n\n" if started else "") + " ".join(current)
                started = True
            current = []
            continue
        current.append(s)
        if len(current) >= size:
            yield ("\n\n" if started else "") + " ".join(current)
            started = True
            current = []
    if current:
        yield ("\n\n" if started else "") + " ".join(current)
