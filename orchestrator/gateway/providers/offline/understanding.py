"""How the offline model reads a request: the topic, the panel, who said what,
their stances and ``Position:`` lines, and what each statement is about.

The result is a :class:`Call`, the one object every renderer of
:mod:`~orchestrator.gateway.providers.offline.writing` and
:mod:`~orchestrator.gateway.providers.offline.minutes` works from.
Reading never invents: a speaker is named only from the hints, the prompt's
"You are …", a block's source key or title, or the order of ``speakers``; a briefing
passage only from the prompt (:mod:`orchestrator.gateway.providers.offline.citing`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.gateway.providers.offline import lexicon as lx
from orchestrator.gateway.providers.offline.citing import Passage, passages_in, without_citations
from orchestrator.gateway.providers.offline.options import STANCES, OfflineOptions
from orchestrator.gateway.providers.offline.text import (
    cap,
    count_words,
    slug_of,
    split_sentences,
    strip_end,
)
from orchestrator.gateway.providers.offline.topic import Topic
from orchestrator.gateway.types import ChatRequest

KINDS = (
    "opening",
    "turn",
    "round_summary",
    "final_summary",
    "expert",
    "debate",
    "divergence",
    "synthesis",
    "summarise",
)


# --- who is speaking ----------------------------------------------------------


def speaker_of(request: ChatRequest) -> str | None:
    hints = request.hints
    for key in ("expert", "moderator"):
        value = hints.get(key)
        if value:
            return str(value)
    found = _NAME_IN_PROMPT.search(request.system) or _NAME_IN_PROMPT.search(request.prompt)
    return found.group(1).strip() if found else None


_NAME_IN_PROMPT = re.compile(r"\bYou are ([A-Z][\w'-]*(?: [A-Z][\w'-]*)?)")


# --- context ------------------------------------------------------------------

_POSITION_RE = re.compile(
    r"^[ \t>*_#-]*position[ \t]*[*_]*[ \t]*:[ \t]*[*_]*[ \t]*(support|oppose|conditional)\b[*_]*"
    r"[ \t]*(?:[\u2014\u2013:-]+[ \t]*)?(.*)$",
    re.I | re.M,
)
_SEGMENT_RE = re.compile(r"^\[([A-Za-z0-9][\w.:-]*)\][ \t]*", re.M)
_NON_EXPERT = {"summary", "opening", "moderator", "synthesis", "divergence", "final", "chair", "notes"}


def parse_positions(text: str) -> list[tuple[str, str]]:
    """Every ``Position:`` line of a text, as (stance, sentence)."""
    return [(m.group(1).lower(), m.group(2).strip()) for m in _POSITION_RE.finditer(text)]


def derived_stance(name: str, topic: str) -> str:
    """The stance an expert takes when ``options["stances"]`` doesn't say."""
    digest = hashlib.sha256((name + topic).encode()).digest()
    return STANCES[int.from_bytes(digest[:8], "big") % 3]


@dataclass(frozen=True)
class Said:
    """What one context block (or one segment of a summarised block) says."""

    source: str
    name: str | None  # the expert who said it, when we can tell
    stance: str | None
    position: str  # the sentence of its Position line
    body: str  # the text without Position lines
    index: int  # order in the context
    raw: str = ""  # the text as given

    @property
    def is_debate(self) -> bool:
        return "debate" in self.source.lower()

    def round(self) -> int | None:
        m = re.match(r"r(\d+)\b", self.source)
        return int(m.group(1)) if m else None


@dataclass
class Panel:
    """The people of a meeting, and how to recognise them in source keys."""

    experts: list[tuple[str, str]]  # (name, role)

    @classmethod
    def from_hints(cls, hints: Mapping[str, Any]) -> Panel:
        experts: list[tuple[str, str]] = []
        seen: set[str] = set()

        def add(name: Any, role: Any = "") -> None:
            if not name or slug_of(str(name)) in seen:
                return
            seen.add(slug_of(str(name)))
            experts.append((str(name), str(role or "")))

        for item in hints.get("experts") or ():
            if isinstance(item, Mapping):
                add(item.get("name"), item.get("role"))
            elif isinstance(item, str):
                add(item)
        if hints.get("expert") and slug_of(str(hints.get("expert"))) != slug_of(str(hints.get("moderator") or "")):
            add(hints.get("expert"), hints.get("role"))  # the chair is not one of the panel
        for key in ("speakers", "participants", "opponents"):
            for name in hints.get(key) or ():
                add(name)
        return cls(experts)

    def role(self, name: str) -> str:
        for n, r in self.experts:
            if slug_of(n) == slug_of(name):
                return r
        return ""

    def names(self) -> list[str]:
        return [n for n, _ in self.experts]

    def match(self, key: str) -> str | None:
        slug = slug_of(key)
        if not slug:
            return None
        for name, _ in self.experts:
            if slug_of(name) == slug:
                return name
        for name, _ in self.experts:
            first = name.split()[0] if name.split() else name
            if slug_of(first) == slug:
                return name
        return None

    def add(self, name: str) -> None:
        if self.match(name) is None:
            self.experts.append((name, ""))


def read_context(request: ChatRequest, panel: Panel) -> list[Said]:
    """Split the context into attributed statements, in order."""
    speakers = [str(s) for s in request.hints.get("speakers") or ()]
    out: list[Said] = []
    for i, block in enumerate(request.context):
        segments: list[tuple[str, str]] = []
        marks = list(_SEGMENT_RE.finditer(block.text))
        if marks and block.text[: marks[0].start()].strip() == "":
            for j, m in enumerate(marks):
                end = marks[j + 1].start() if j + 1 < len(marks) else len(block.text)
                segments.append((m.group(1), block.text[m.end() : end]))
        else:
            segments.append((block.source, block.text))
        for source, text in segments:
            tail = source.rsplit(".", 1)[-1]
            name = panel.match(tail)
            if name is None:
                name = next(
                    (n for n in panel.names() if re.search(rf"\b{re.escape(n)}\b", block.title)), None
                )
            if name is None and len(speakers) == len(request.context) and len(segments) == 1:
                name = speakers[i]
            positions = parse_positions(text)
            if name is None and positions and tail.lower() not in _NON_EXPERT and not tail.isdigit():
                name = cap(tail.replace("_", " ").replace("-", " "))
                panel.add(name)
            stance, sentence = positions[-1] if positions else (None, "")
            body = without_citations(_POSITION_RE.sub("", text))  # quoted without its [doc:n] references
            body = re.sub(r"^\s*Revised position:\s*$", "", body, flags=re.M | re.I).strip()
            out.append(Said(source, name, stance, sentence, body, len(out), text))
    return out


def latest_by_name(said: Sequence[Said]) -> dict[str, Said]:
    latest: dict[str, Said] = {}
    for s in said:
        if s.name is not None and (s.stance is not None or s.name not in latest):
            latest[s.name] = s
    return latest


_TERMS: list[tuple[re.Pattern[str], str]] = []


def concern_terms() -> list[tuple[re.Pattern[str], str]]:
    if not _TERMS:
        phrases: set[str] = set()
        for p in lx.PROFILES:
            phrases.update(c for c in p.concerns if "{" not in c and c not in lx.TOO_COMMON)
        for theme in lx.THEMES:
            for facets in theme.facets.values():
                phrases.update(facets)
        terms = [
            (re.compile(rf"\b{re.escape(ph)}s?\b", re.I), ph) for ph in sorted(phrases, key=len, reverse=True)
        ]
        terms += [(re.compile(rf"\b(?:{rx})\b", re.I), disp) for rx, disp in lx.TERM_ALIASES]
        _TERMS.extend(terms)
    return _TERMS


_STOCK: list[re.Pattern[str]] = []


def _is_stock(sentence: str) -> bool:
    """Whether a sentence is one of our own stock phrases (openers, declarations) rather than content."""
    if not _STOCK:
        stock = [*lx.OPENERS_FIRST, *lx.OPENERS_LATER, *lx.OPENERS_FINAL]
        stock += [t for pool in (*lx.DECLARE.values(), *lx.CLOSERS.values()) for t in pool]
        for template in stock:
            parts = re.split(r"\{\w+\}", template)
            _STOCK.append(re.compile("^" + ".+?".join(re.escape(p) for p in parts) + "$"))
    return any(p.match(sentence) for p in _STOCK)


def _own_sentences(said: Said, others: Sequence[str]) -> list[str]:
    """Sentences of a statement that are the speaker's own (not quotes of, or replies to, others)."""
    out = []
    for s in split_sentences(said.body):
        if '"' in s or "\u201c" in s or s.endswith("?") or s.endswith(":") or _is_stock(s):
            continue
        if any(re.search(rf"\b{re.escape(o)}\b", s) for o in others if o and o != said.name):
            continue
        out.append(s)
    return out


def concern_of(said: Said, others: Sequence[str]) -> str | None:
    """The concern a statement is mostly about (found in its words), or None."""
    for pattern, display in concern_terms():
        if said.position and pattern.search(said.position):
            return display
    counts: dict[str, tuple[int, int]] = {}
    text = " ".join(_own_sentences(said, others))
    for pattern, display in concern_terms():
        hits = list(pattern.finditer(text))
        if hits and display not in counts:
            counts[display] = (len(hits), -hits[0].start())
    return max(counts, key=lambda d: counts[d]) if counts else None


def has_term(text: str) -> bool:
    return any(p.search(text) for p, _ in concern_terms())


def clause(sentence: str, max_words: int = 16) -> str:
    """A short, quotable piece of a sentence, preferring the piece that names a concern."""
    sentence = strip_end(sentence)
    parts = [p.strip() for p in re.split(r"[,;:\u2014\u2013]\s*|\s+-\s+", sentence) if p.strip()]
    pieces: list[str] = []
    for part in parts:
        if count_words(part) <= max_words:
            pieces.append(part)
        else:
            pieces.extend(x for x in re.split(r"\s+(?:and|but|because|which|while|so)\s+", part) if x)
    pieces = [re.sub(r"^(?:and|but|so|because|which|while|though)\s+", "", p, flags=re.I) for p in pieces]
    good = [p for p in pieces if 4 <= count_words(p) <= max_words]
    ranked = sorted(good, key=lambda p: (not has_term(p), good.index(p)))
    if ranked:
        return ranked[0]
    words = (pieces[0] if pieces else sentence).split()
    return " ".join(words[:max_words]) + ("..." if len(words) > max_words else "")


def quote_of(said: Said, others: Sequence[str], concern: str | None = None) -> str | None:
    """A short phrase to quote from a statement: the strongest of its speaker's own sentences
    (preferring one about ``concern`` when given)."""
    about = [p for p, d in concern_terms() if d == concern]
    best: tuple[float, str] | None = None
    for i, s in enumerate(_own_sentences(said, others)):
        terms = sum(1 for p, _ in concern_terms() if p.search(s))
        score = 2.0 * bool(terms) + 0.3 * min(terms, 3) + bool(re.search(r"\d", s)) - i * 0.01
        score += 1.5 * any(p.search(s) for p in about)
        if not 6 <= count_words(s) <= 30:
            score -= 2
        elif count_words(s) < 10:
            score -= 0.5
        if best is None or score > best[0]:
            best = (score, s)
    best_is_about = best is not None and any(p.search(best[1]) for p in about)
    if about and said.position and any(p.search(said.position) for p in about) and not best_is_about:
        return clause(said.position)
    if best is not None and best[0] >= 1.5:
        return clause(best[1])
    if said.position:
        return clause(said.position)
    return clause(best[1]) if best else None


# --- the request, read -------------------------------------------------------


@dataclass
class Call:
    """Everything a renderer needs about one request."""

    request: ChatRequest
    opts: OfflineOptions
    kind: str
    topic: Topic
    panel: Panel
    said: list[Said]
    round: int
    rounds: int
    passages: list[Passage] = dataclasses.field(default_factory=list)  # the briefing's, as the prompt carries them

    @property
    def known(self) -> set[str]:
        """The passages this call may cite."""
        return {p.ref for p in self.passages}

    @property
    def hints(self) -> Mapping[str, Any]:
        return self.request.hints

    def stance(self, name: str) -> str:
        return _stance_of(name, self.topic.question, self.opts)

    def absent(self) -> list[str]:
        return [str(a) for a in self.hints.get("absent") or ()]


def _stance_of(name: str, topic: str, opts: OfflineOptions) -> str:
    return opts.stances.get(slug_of(name)) or derived_stance(name, topic)


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _topic_text(request: ChatRequest) -> str:
    topic = request.hints.get("topic")
    if topic:
        return str(topic)
    for text in (request.prompt, request.system):
        m = re.search(r"([A-Z][^?\n]{8,200}\?)", text)
        if m:
            return m.group(1).strip()
    first = request.prompt.strip().splitlines()[0] if request.prompt.strip() else ""
    return " ".join(first.split()[:20]) or "the proposal before us"


def _kind(request: ChatRequest) -> str:
    kind = str(request.hints.get("kind") or "").strip().lower()
    if kind in KINDS:
        return kind
    if kind in ("summary", "summarize"):
        return "summarise"
    if request.purpose in ("summarise", "summarize"):
        return "summarise"
    if request.purpose == "divergence":
        return "divergence"
    return "turn"


def read_request(request: ChatRequest, opts: OfflineOptions) -> Call:
    """Everything a renderer needs, read from ``request``."""
    hints = request.hints
    panel = Panel.from_hints(hints)
    return Call(
        request=request,
        opts=opts,
        kind=_kind(request),
        topic=Topic.parse(_topic_text(request)),
        panel=panel,
        said=read_context(request, panel),
        round=max(1, _int(hints.get("round"), 1)),
        rounds=max(1, _int(hints.get("rounds"), 1)),
        passages=passages_in(request.prompt),
    )
