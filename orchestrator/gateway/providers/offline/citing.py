"""The briefing passages an offline request carries, and the one rule for citing them.

A briefed prompt ends with its passages, each as the prompt builder renders it (a line
``[doc:n] (Title > Heading)`` and the passage's text, up to the next such line); this is
read from the prompt itself, as a real model would read it. The offline model cites a
passage only when its text draws on it — a quoted sentence, or a colleague's claim it
carries through — and never cites one its prompt does not carry: every piece it writes
goes through :func:`only_citing`, which drops any ``[doc:n]`` reference to a passage
that is not in the prompt (a colleague's citation of a passage this call was not given,
say).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from orchestrator.gateway.providers.offline.text import count_words, split_sentences, strip_end

_REF = r"[A-Za-z0-9][A-Za-z0-9_-]{0,59}:[0-9]{1,6}"
_HEADER = re.compile(rf"^\[({_REF})\] \((.*)\)[ \t]*$", re.M)
_CITATION = re.compile(rf"[ \t]?\[\s*({_REF}(?:\s*[,;]\s*{_REF})*)\s*\]")
_ONE_REF = re.compile(r"([A-Za-z0-9][A-Za-z0-9_-]{0,59}):([0-9]{1,6})")
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,}).*?(?:^[ \t]*\1[`~]*[ \t]*$|\Z)", re.M | re.S)


@dataclass(frozen=True)
class Passage:
    ref: str  # "pricing-memo:3", as the prompt gives it
    where: str  # "Pricing memo > Pricing > Risks"
    text: str

    @property
    def place(self) -> str:
        """Where it comes from, in words: its innermost heading, else its document."""
        return self.where.split(" > ")[-1].strip() or self.ref

    def gist(self, max_words: int = 24) -> str | None:
        """A sentence of the passage to quote (its first real one, outside code and
        headings), shortened to ``max_words``; None when it has no prose."""
        prose = _FENCE.sub("", self.text)
        lines = [ln for ln in prose.splitlines() if not ln.lstrip().startswith(("#", "|", "<"))]
        for sentence in split_sentences("\n".join(lines)):
            sentence = _CITATION.sub("", sentence).replace('"', "'").strip()
            if count_words(sentence) >= 5 and re.search(r"[^\W\d_]", sentence):
                words = strip_end(sentence).split()
                return " ".join(words[:max_words]) + ("…" if len(words) > max_words else "")
        return None


def passages_in(prompt: str) -> list[Passage]:
    """The passages a prompt carries, in its order."""
    heads = list(_HEADER.finditer(prompt))
    out = []
    for i, head in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(prompt)
        out.append(Passage(head.group(1).lower(), head.group(2), prompt[head.end():end].strip()))
    return out


def cited_in(text: str) -> list[str]:
    """Every ``doc:n`` a text cites, in order (lower-cased document ids, as resolved)."""
    return [f"{m.group(1).lower()}:{int(m.group(2))}" for g in _CITATION.finditer(text)
            for m in _ONE_REF.finditer(g.group(1))]


def only_citing(text: str, known: Collection[str]) -> str:
    """``text`` with every citation of a passage not in ``known`` removed (a bracket
    citing several keeps those it may)."""
    def keep(m: re.Match[str]) -> str:
        refs = [r.group(0) for r in _ONE_REF.finditer(m.group(1))
                if f"{r.group(1).lower()}:{int(r.group(2))}" in known]
        if not refs:
            return ""
        lead = m.group(0)[: len(m.group(0)) - len(m.group(0).lstrip(" \t"))]
        return f"{lead}[{', '.join(refs)}]"

    return _CITATION.sub(keep, text) if "[" in text else text


def without_citations(text: str) -> str:
    """``text`` with its ``[doc:n]`` citations taken out (what is left to quote)."""
    return only_citing(text, ())


def cite(refs: Sequence[str]) -> str:
    """``" [a:1] [b:2]"`` (distinct, in order), or ``""``."""
    return "".join(f" [{r}]" for r in dict.fromkeys(refs))
