"""The offline model provider: a deterministic stand-in for an LLM.

It is the default model, so it needs no network and no key, and what it writes
should read like a real meeting. It guarantees:

* **Determinism.** The output is a pure function of ``(request, spec.options)``.
  All choices are made by a dice seeded with SHA-256 of the request's facts,
  never by ``hash()`` or the global random state.
* **Role and memory.** It reads ``request.hints`` (kind, topic, expert, role,
  round, panel, …) and ``request.context``. Each expert keeps a stance on the
  topic (``options["stances"]`` or SHA-256 of name + topic), talks in its
  role's vocabulary (see :mod:`tasks.llm.offline_lexicon`), and answers named
  earlier speakers by quoting or paraphrasing what their blocks actually say.
* **Structure.** Every turn, expert and debate text has exactly one line
  ``Position: SUPPORT|OPPOSE|CONDITIONAL — <sentence>``; a divergence check
  returns only JSON; a synthesis cites every context block as ``[source]``;
  summaries attribute positions and name absent experts.
* **Honest usage.** Tokens are estimated as characters / 4 and reported with
  ``source="estimated"``, ``method="offline:chars/4"``.
* **Fault modes** for benchmarks and crash tests, all from ``spec.options``:
  ``latency``, ``first_chunk_delay``, ``chunk_chars``, ``words``, ``hang`` (+
  ``hang_seconds``), ``fail``, ``break_after_chars``, ``stances`` and
  ``malformed_divergence``. ``break_after_chars`` only breaks the stream;
  ``complete()`` (the gateway's non-streaming fallback) still returns the
  whole text. A hang can be cut short with :meth:`OfflineProvider.release`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tasks.llm import offline_lexicon as lx
from tasks.llm.errors import ProviderMisconfigured, ProviderUnavailable
from tasks.llm.types import (
    ChatRequest,
    Completion,
    ModelSpec,
    StreamEvent,
    TextDelta,
    Usage,
    UsageReport,
)

__all__ = ["USAGE_METHOD", "OfflineOptions", "OfflineProvider", "derived_stance", "parse_positions"]

USAGE_METHOD = "offline:chars/4"
STANCES = ("support", "oppose", "conditional")
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
DASH = "\u2014"  # em dash, the separator of a Position line

T = TypeVar("T")


# --- options -----------------------------------------------------------------


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", name.lower())


@dataclass(frozen=True)
class OfflineOptions:
    """``spec.options`` of an offline model, validated."""

    latency: float = 0.02
    first_chunk_delay: float = 0.02
    chunk_chars: int = 24
    words: int = 110
    hang_all: bool = False
    hang: frozenset[str] = frozenset()  # slugs
    hang_seconds: float = 3600.0
    fail_all: bool = False
    fail: frozenset[str] = frozenset()  # slugs
    break_after_chars: int | None = None
    stances: Mapping[str, str] = field(default_factory=dict)  # slug -> stance
    malformed_divergence: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> OfflineOptions:
        try:
            latency = float(options.get("latency", 0.02))
            first = float(options.get("first_chunk_delay", latency))
            chunk_chars = int(options.get("chunk_chars", 24))
            words = int(options.get("words", 110))
            hang_seconds = float(options.get("hang_seconds", 3600.0))
            brk = options.get("break_after_chars")
            break_after = None if brk is None else int(brk)
        except (TypeError, ValueError) as exc:
            raise ProviderMisconfigured(f"offline provider: bad numeric option ({exc})") from exc
        if (
            min(latency, first, hang_seconds) < 0
            or words < 1
            or (break_after is not None and break_after < 0)
        ):
            raise ProviderMisconfigured("offline provider: options must not be negative (words >= 1)")
        hang_all, hang = cls._names(options.get("hang"), "hang")
        fail_all, fail = cls._names(options.get("fail"), "fail")
        raw_stances = options.get("stances") or {}
        if not isinstance(raw_stances, Mapping):
            raise ProviderMisconfigured("offline provider: 'stances' must map expert names to stances")
        stances: dict[str, str] = {}
        for name, stance in raw_stances.items():
            value = str(stance).strip().lower()
            if value not in STANCES:
                raise ProviderMisconfigured(
                    f"offline provider: stance {stance!r} for {name!r} is not one of {', '.join(STANCES)}"
                )
            stances[_slug(str(name))] = value
        return cls(
            latency=latency,
            first_chunk_delay=first,
            chunk_chars=chunk_chars,
            words=words,
            hang_all=hang_all,
            hang=hang,
            hang_seconds=hang_seconds,
            fail_all=fail_all,
            fail=fail,
            break_after_chars=break_after,
            stances=stances,
            malformed_divergence=bool(options.get("malformed_divergence", False)),
        )

    @staticmethod
    def _names(value: Any, key: str) -> tuple[bool, frozenset[str]]:
        if value is None or value is False:
            return False, frozenset()
        if value is True:
            return True, frozenset()
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, Sequence | set | frozenset):
            raise ProviderMisconfigured(f"offline provider: {key!r} must be true or a list of expert names")
        return False, frozenset(_slug(str(v)) for v in value)

    def hangs(self, speaker: str | None) -> bool:
        return self.hang_all or (speaker is not None and _slug(speaker) in self.hang)

    def fails(self, speaker: str | None) -> bool:
        return self.fail_all or (speaker is not None and _slug(speaker) in self.fail)


# --- the provider ------------------------------------------------------------


class OfflineProvider:
    """Deterministic, key-less provider (see the module docstring)."""

    name = "offline"

    def __init__(self) -> None:
        self._released = threading.Event()

    def release(self) -> None:
        """End every current and future simulated hang (for tests and shutdown)."""
        self._released.set()

    def stream(self, spec: ModelSpec, request: ChatRequest) -> Iterator[StreamEvent]:
        opts = OfflineOptions.parse(spec.options)
        speaker = _speaker(request)
        input_tokens = _input_tokens(request)
        self._faults(opts, speaker, input_tokens)
        text = render(request, opts)
        chunks = _chunks(text, opts.chunk_chars)
        sent = 0
        for i, chunk in enumerate(chunks):
            delay = opts.first_chunk_delay if i == 0 else opts.latency
            if delay:
                time.sleep(delay)
            if opts.break_after_chars is not None and sent + len(chunk) >= opts.break_after_chars:
                part = chunk[: opts.break_after_chars - sent]
                if part:
                    sent += len(part)
                    yield TextDelta(part)
                if sent < len(text):
                    raise ProviderUnavailable(
                        f"offline provider: stream broken after {sent} characters (break_after_chars)",
                        usage=_usage(input_tokens, sent),
                    )
                continue
            sent += len(chunk)
            yield TextDelta(chunk)
        yield UsageReport(_usage(input_tokens, len(text)))

    def complete(self, spec: ModelSpec, request: ChatRequest) -> Completion:
        opts = OfflineOptions.parse(spec.options)
        speaker = _speaker(request)
        input_tokens = _input_tokens(request)
        self._faults(opts, speaker, input_tokens)
        text = render(request, opts)
        n = len(_chunks(text, opts.chunk_chars))
        total_delay = opts.first_chunk_delay + opts.latency * max(0, n - 1) if n else 0.0
        if total_delay:
            time.sleep(total_delay)
        return Completion(text=text, usage=_usage(input_tokens, len(text)), finish_reason="stop")

    def _faults(self, opts: OfflineOptions, speaker: str | None, input_tokens: int) -> None:
        who = speaker or "this call"
        if opts.fails(speaker):
            raise ProviderUnavailable(
                f"offline provider: simulated failure for {who}", usage=_usage(input_tokens, 0)
            )
        if opts.hangs(speaker):
            deadline = time.monotonic() + opts.hang_seconds
            while not self._released.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._released.wait(min(0.1, remaining))
            raise ProviderUnavailable(
                f"offline provider: simulated hang for {who} ended without output",
                usage=_usage(input_tokens, 0),
            )


def _usage(input_tokens: int, output_chars: int) -> Usage:
    return Usage(
        input_tokens=input_tokens,
        output_tokens=math.ceil(output_chars / 4),
        source="estimated",
        method=USAGE_METHOD,
    )


def _input_tokens(request: ChatRequest) -> int:
    chars = len(request.system) + len(request.prompt) + sum(len(b.text) for b in request.context)
    return math.ceil(chars / 4)


def _chunks(text: str, size: int) -> list[str]:
    if size <= 0:
        return [text] if text else []
    return [text[i : i + size] for i in range(0, len(text), size)]


def _speaker(request: ChatRequest) -> str | None:
    hints = request.hints
    for key in ("expert", "moderator"):
        value = hints.get(key)
        if value:
            return str(value)
    found = _NAME_IN_PROMPT.search(request.system) or _NAME_IN_PROMPT.search(request.prompt)
    return found.group(1).strip() if found else None


_NAME_IN_PROMPT = re.compile(r"\bYou are ([A-Z][\w'-]*(?: [A-Z][\w'-]*)?)")
_ROLE_IN_PROMPT = re.compile(r"\bYou are [A-Z][\w'-]*(?: [A-Z][\w'-]*)?,? (?:the |our |a |an )([^.,;\n]+)")


# --- small text helpers -------------------------------------------------------


class _Dice:
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


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def _decap(s: str, keep: frozenset[str] = frozenset()) -> str:
    """Lower-case a sentence's first letter, unless it starts with "I", an acronym or a name in ``keep``."""
    first = s.split(" ", 1)[0]
    if first.strip(".,;:!?'\"") in keep:
        return s
    if not first or first in ("I", "I'm", "I'd", "I've", "I'll") or first.isupper() or first[:1].islower():
        return s
    if len(first) > 1 and any(c.isupper() for c in first[1:]):
        return s
    return first[:1].lower() + s[1:] if first[:1].isalpha() else s


def _names(names: Sequence[str]) -> str:
    names = list(names)
    if not names:
        return "nobody"
    if len(names) == 1:
        return names[0]
    return ", ".join(names[:-1]) + " and " + names[-1]


def _count_words(text: str) -> int:
    return len(text.split())


_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+(?=[\"'(\[]?[A-Z0-9*])")


def _sentences(text: str) -> list[str]:
    out: list[str] = []
    for line in text.splitlines():
        line = re.sub(r"^\s*(?:[-*+]\s+|\d+[.)]\s+|#+\s+|>\s*)", "", line).strip()
        if not line:
            continue
        out.extend(s.strip() for s in _SENTENCE_END.split(line) if s.strip())
    return out


def _strip_end(s: str) -> str:
    return s.strip().rstrip(".!?;:,").strip()


def _gerund(verb: str) -> str:
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
    return out if verb.islower() or verb[:1].islower() else _cap(out)


# --- the topic -----------------------------------------------------------------


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
        core = _strip_end(question)
        proper = frozenset(w.strip(".,;:!?'\"()") for w in core.split()[1:] if w[:1].isupper())
        match = _QUESTION_PREFIX.match(core) or _OTHER_PREFIX.match(core)
        if not match:
            phrase = _decap(core) if _count_words(core) <= 10 and not core.endswith("?") else "the proposal"
            if question.endswith("?") and not match:
                phrase = "the proposal"
            return cls(question, phrase, phrase, proper)
        action = match.group("action").strip()
        verb, _, rest = action.partition(" ")
        gerund = f"{_gerund(verb)} {rest}".strip()
        short = rest or gerund
        lowered = f" {rest.lower()} "
        if verb.lower() in _MOVE_VERBS and " to " in lowered:
            short = rest[lowered.rindex(" to ") + 3 :].strip()
        elif verb.lower() in ("replace", "swap") and " with " in lowered:
            short = rest[lowered.rindex(" with ") + 5 :].strip()
        if not short or _count_words(short) > 7:
            short = gerund
        return cls(question, gerund, short, proper)


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
            if not name or _slug(str(name)) in seen:
                return
            seen.add(_slug(str(name)))
            experts.append((str(name), str(role or "")))

        for item in hints.get("experts") or ():
            if isinstance(item, Mapping):
                add(item.get("name"), item.get("role"))
            elif isinstance(item, str):
                add(item)
        if hints.get("expert") and _slug(str(hints.get("expert"))) != _slug(str(hints.get("moderator") or "")):
            add(hints.get("expert"), hints.get("role"))  # the chair is not one of the panel
        for key in ("speakers", "participants", "opponents"):
            for name in hints.get(key) or ():
                add(name)
        return cls(experts)

    def role(self, name: str) -> str:
        for n, r in self.experts:
            if _slug(n) == _slug(name):
                return r
        return ""

    def names(self) -> list[str]:
        return [n for n, _ in self.experts]

    def match(self, key: str) -> str | None:
        slug = _slug(key)
        if not slug:
            return None
        for name, _ in self.experts:
            if _slug(name) == slug:
                return name
        for name, _ in self.experts:
            first = name.split()[0] if name.split() else name
            if _slug(first) == slug:
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
                name = _cap(tail.replace("_", " ").replace("-", " "))
                panel.add(name)
            stance, sentence = positions[-1] if positions else (None, "")
            body = _POSITION_RE.sub("", text)
            body = re.sub(r"^\s*Revised position:\s*$", "", body, flags=re.M | re.I).strip()
            out.append(Said(source, name, stance, sentence, body, len(out), text))
    return out


def _latest_by_name(said: Sequence[Said]) -> dict[str, Said]:
    latest: dict[str, Said] = {}
    for s in said:
        if s.name is not None and (s.stance is not None or s.name not in latest):
            latest[s.name] = s
    return latest


_TERMS: list[tuple[re.Pattern[str], str]] = []


def _terms() -> list[tuple[re.Pattern[str], str]]:
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
    for s in _sentences(said.body):
        if '"' in s or "\u201c" in s or s.endswith("?") or s.endswith(":") or _is_stock(s):
            continue
        if any(re.search(rf"\b{re.escape(o)}\b", s) for o in others if o and o != said.name):
            continue
        out.append(s)
    return out


def _concern(said: Said, others: Sequence[str]) -> str | None:
    """The concern a statement is mostly about (found in its words), or None."""
    for pattern, display in _terms():
        if said.position and pattern.search(said.position):
            return display
    counts: dict[str, tuple[int, int]] = {}
    text = " ".join(_own_sentences(said, others))
    for pattern, display in _terms():
        hits = list(pattern.finditer(text))
        if hits and display not in counts:
            counts[display] = (len(hits), -hits[0].start())
    return max(counts, key=lambda d: counts[d]) if counts else None


def _has_term(text: str) -> bool:
    return any(p.search(text) for p, _ in _terms())


def _clause(sentence: str, max_words: int = 16) -> str:
    """A short, quotable piece of a sentence, preferring the piece that names a concern."""
    sentence = _strip_end(sentence)
    parts = [p.strip() for p in re.split(r"[,;:\u2014\u2013]\s*|\s+-\s+", sentence) if p.strip()]
    pieces: list[str] = []
    for part in parts:
        if _count_words(part) <= max_words:
            pieces.append(part)
        else:
            pieces.extend(x for x in re.split(r"\s+(?:and|but|because|which|while|so)\s+", part) if x)
    pieces = [re.sub(r"^(?:and|but|so|because|which|while|though)\s+", "", p, flags=re.I) for p in pieces]
    good = [p for p in pieces if 4 <= _count_words(p) <= max_words]
    ranked = sorted(good, key=lambda p: (not _has_term(p), good.index(p)))
    if ranked:
        return ranked[0]
    words = (pieces[0] if pieces else sentence).split()
    return " ".join(words[:max_words]) + ("..." if len(words) > max_words else "")


def _quote(said: Said, others: Sequence[str], concern: str | None = None) -> str | None:
    """A short phrase to quote from a statement: the strongest of its speaker's own sentences
    (preferring one about ``concern`` when given)."""
    about = [p for p, d in _terms() if d == concern]
    best: tuple[float, str] | None = None
    for i, s in enumerate(_own_sentences(said, others)):
        terms = sum(1 for p, _ in _terms() if p.search(s))
        score = 2.0 * bool(terms) + 0.3 * min(terms, 3) + bool(re.search(r"\d", s)) - i * 0.01
        score += 1.5 * any(p.search(s) for p in about)
        if not 6 <= _count_words(s) <= 30:
            score -= 2
        elif _count_words(s) < 10:
            score -= 0.5
        if best is None or score > best[0]:
            best = (score, s)
    best_is_about = best is not None and any(p.search(best[1]) for p in about)
    if about and said.position and any(p.search(said.position) for p in about) and not best_is_about:
        return _clause(said.position)
    if best is not None and best[0] >= 1.5:
        return _clause(best[1])
    if said.position:
        return _clause(said.position)
    return _clause(best[1]) if best else None


# --- voices ----------------------------------------------------------------------


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
        self.dice = _Dice(name, role, topic.question, *seed)
        self._used: set[str] = set()
        self._vars = {
            "gerund": topic.gerund,
            "Gerund": _cap(topic.gerund),
            "short": topic.short,
            "Short": _cap(topic.short),
            "role": self.role,
        }
        self._vars["lens"] = self.profile.lens.format(**self._vars)
        self.lens = self._vars["lens"]

    def decap(self, sentence: str) -> str:
        return _decap(sentence, self.topic.proper)

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
            sentence = _strip_end(self.fill(self.dice.pick(pool)))
        if tail:
            sentence = f"{sentence}, {tail}"
        return f"Position: {stance.upper()} {DASH} {_strip_end(sentence)}."

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


def _stance_of(name: str, topic: str, opts: OfflineOptions) -> str:
    return opts.stances.get(_slug(name)) or derived_stance(name, topic)


def _paragraphs(sentences: Sequence[str], size: int = 4) -> str:
    paras: list[str] = []
    current: list[str] = []
    for s in sentences:
        if s == "\n":
            if current:
                paras.append(" ".join(current))
            current = []
            continue
        current.append(s)
        if len(current) >= size:
            paras.append(" ".join(current))
            current = []
    if current:
        paras.append(" ".join(current))
    return "\n\n".join(paras)


# --- rendering -----------------------------------------------------------------


@dataclass
class _Call:
    """Everything a renderer needs about one request."""

    request: ChatRequest
    opts: OfflineOptions
    kind: str
    topic: Topic
    panel: Panel
    said: list[Said]
    round: int
    rounds: int

    @property
    def hints(self) -> Mapping[str, Any]:
        return self.request.hints

    def stance(self, name: str) -> str:
        return _stance_of(name, self.topic.question, self.opts)

    def voice(self, name: str, role: str, *seed: object) -> Voice:
        return Voice(name, role, self.topic, self.stance(name), self.kind, self.round, *seed)

    def absent(self) -> list[str]:
        return [str(a) for a in self.hints.get("absent") or ()]


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


def render(request: ChatRequest, opts: OfflineOptions) -> str:
    """The whole text the provider answers ``request`` with."""
    hints = request.hints
    panel = Panel.from_hints(hints)
    call = _Call(
        request=request,
        opts=opts,
        kind=_kind(request),
        topic=Topic.parse(_topic_text(request)),
        panel=panel,
        said=read_context(request, panel),
        round=max(1, _int(hints.get("round"), 1)),
        rounds=max(1, _int(hints.get("rounds"), 1)),
    )
    return _RENDERERS[call.kind](call)


def _me(call: _Call) -> tuple[str, str]:
    name = str(call.hints.get("expert") or _speaker(call.request) or "the expert")
    role = str(call.hints.get("role") or call.panel.role(name) or "")
    if not role:
        m = _ROLE_IN_PROMPT.search(call.request.system) or _ROLE_IN_PROMPT.search(call.request.prompt)
        role = m.group(1).strip() if m else ""
    return name, role


def _relation(mine: str, theirs: str | None) -> str:
    if theirs is None:
        return "unknown"
    if mine == theirs:
        return "same"
    if mine == "conditional":
        return "as_conditional"
    if theirs == "conditional":
        return "to_conditional"
    return "against"


def _respond(voice: Voice, peer: Said, others: Sequence[str]) -> str:
    """One or two sentences answering a named earlier speaker."""
    assert peer.name is not None
    concern = _concern(peer, others)
    quote = _quote(peer, others, concern)
    counter = voice.decap(voice.reason(plain=True))
    relation = _relation(voice.stance, peer.stance)
    pool = {
        "same": lx.RESPOND_SAME,
        "against": lx.RESPOND_AGAINST,
        "as_conditional": lx.RESPOND_AS_CONDITIONAL,
        "to_conditional": lx.RESPOND_TO_CONDITIONAL,
    }.get(relation, lx.RESPOND_NO_CONCERN)
    my_concern = voice.dice.pick([c for c in voice.concerns() if c != concern] or voice.concerns())
    usable = [t for t in pool if (concern or "{concern}" not in t) and (quote or "{quote}" not in t)]
    if not usable:
        usable = list(lx.RESPOND_NO_CONCERN) if quote else ["I've listened carefully to {peer}."]
    return voice.take(
        usable,
        peer=peer.name,
        concern=concern or "",
        quote=quote or "",
        counter=counter,
        my_concern=my_concern,
    )


def _peer_order(voice: Voice, peers: Sequence[Said]) -> list[Said]:
    rank = {"against": 0, "as_conditional": 1, "to_conditional": 1, "same": 2, "unknown": 3}
    shuffled = voice.dice.shuffled(peers)
    return sorted(shuffled, key=lambda s: rank[_relation(voice.stance, s.stance)])


def _render_turn(call: _Call) -> str:
    name, role = _me(call)
    voice = call.voice(name, role)
    names = call.panel.names()
    latest = _latest_by_name(call.said)
    mine = latest.pop(name, None) or next((s for n, s in latest.items() if _slug(n) == _slug(name)), None)
    latest = {n: s for n, s in latest.items() if _slug(n) != _slug(name)}
    peers = _peer_order(voice, list(latest.values()))
    final = call.round >= call.rounds and call.rounds > 1
    later = call.round > 1 and bool(peers)

    fmt = {"prev": call.round - 1}
    if final:
        opener = voice.take(lx.OPENERS_FINAL)
    elif later:
        opener = voice.take(lx.OPENERS_LATER, **fmt)
    else:
        opener = voice.take(lx.OPENERS_FIRST)
    first: list[str] = [opener]
    n_resp = 0 if not peers else (1 if call.round == 1 else (3 if call.opts.words >= 180 else 2))
    for peer in peers[:n_resp]:
        first.append(_respond(voice, peer, names))
    if mine is not None and call.round > 1:
        quote = _clause(mine.position) if mine.position else _quote(mine, names)
        if quote:
            prev = mine.round() or call.round - 1
            first.append(voice.take(lx.OWN_EARLIER, prev=prev, quote=quote))

    second: list[str] = [voice.take(lx.DECLARE[voice.stance]), voice.reason()]
    conditions = voice.conditions(2)
    if voice.stance == "conditional":
        second.append(voice.take(lx.CONDITION_LINES, c1=conditions[0], c2=conditions[1]))
    closing = [voice.take(lx.CLOSERS[voice.stance])] if final else []
    body = [*first, "\n", *second] if len(first) > 1 else [*first, *second]
    required_words = sum(_count_words(s) for s in body + closing)
    extra: list[str] = []
    optional = voice.elaborations()
    while required_words + sum(_count_words(s) for s in extra) < call.opts.words * 0.92:
        extra.append(next(optional))
    if extra:
        body += ["\n", *extra]
    body += closing
    text = _paragraphs(body, size=5)
    return f"{text}\n\n{voice.position_line(voice.stance, conditions)}"


def _render_expert(call: _Call) -> str:
    name, role = _me(call)
    voice = call.voice(name, role)
    names = call.panel.names()
    deps = [s for n, s in _latest_by_name(call.said).items() if _slug(n) != _slug(name)]
    deps.sort(key=lambda s: s.index)
    conditions = voice.conditions(2)

    intro = [voice.take(lx.OPENERS_FIRST), voice.take(lx.DECLARE[voice.stance]), voice.reason()]
    parts = [f"**{name}** ({voice.role}) on {call.topic.short}", _paragraphs(intro, 5)]
    if deps:
        lines = [_respond(voice, d, names) for d in deps[:3]]
        cites = " ".join(f"[{d.source}]" for d in deps[:3])
        parts.append("Building on the work before mine " + cites + ": " + " ".join(lines))
    facets = voice.facets()
    items = [voice.take(lx.THEME_LINES, facet=facets[0])] if facets else []
    items += voice.dice.shuffled([voice.fill(d) for d in voice.profile.details])
    concerns = voice.concerns()
    bullets = []
    for i, item in enumerate(items[:3]):
        found = [(m.start(), d) for p, d in _terms() for m in [p.search(item)] if m]
        heading = min(found)[1] if found else concerns[i % len(concerns)]
        bullets.append(f"- **{_cap(heading)}**: {item}")
    parts.append("Key considerations:\n" + "\n".join(bullets))
    if voice.stance != "support":
        parts.append(f"What I'd need to see: {conditions[0]}; and {conditions[1]}.")
    parts.append("Open question: " + voice.fill(voice.dice.pick(voice.profile.questions)))
    text = "\n\n".join(parts)
    optional = voice.elaborations()
    extra: list[str] = []
    while _count_words(text) + sum(_count_words(s) for s in extra) < call.opts.words * 0.92:
        extra.append(next(optional))
    if extra:
        text += "\n\n" + _paragraphs(extra, 5)
    return f"{text}\n\n{voice.position_line(voice.stance, conditions)}"


def _render_debate(call: _Call) -> str:
    name, role = _me(call)
    voice = call.voice(name, role, "debate")
    names = call.panel.names()
    latest = _latest_by_name(call.said)
    opponents = [str(o) for o in call.hints.get("opponents") or ()]
    if not opponents:
        participants = [str(p) for p in call.hints.get("participants") or ()]
        opponents = [p for p in participants if _slug(p) != _slug(name)]
        if not opponents:
            opponents = [n for n in latest if _slug(n) != _slug(name)]
    start = voice.stance
    # Whether the strongest opposing point moves this debater to conditional: a fair coin per debate.
    movable = start != "conditional" and _Dice(
        name, call.topic.question, "debate", *sorted(_slug(o) for o in opponents)
    ).chance(0.5)
    moved: tuple[str, str, str] | None = None  # (opponent, their concern, the condition I accept)

    lines: list[str] = [
        voice.dice.pick(
            (
                f"Let me answer {_names(opponents or ['the other side'])} directly, strongest point first.",
                f"I'll take {_names([o + chr(39) + 's' for o in opponents] or ['the other side'])} "
                f"arguments at "
                "their strongest.",
                "Rather than restate my case, let me deal with the best arguments against it.",
            )
        )
    ]
    for opponent in opponents or ["the other side"]:
        said = latest.get(call.panel.match(opponent) or opponent)
        their_role = call.panel.role(opponent)
        concern = _concern(said, names) if said else None
        quote = _quote(said, names, concern) if said else None
        if concern is None:
            concern = profile_for(their_role).concerns[0].format(role=their_role or "their function")
        their_stance = said.stance if said else None
        head = f"**{opponent}'s strongest point** is {concern}" + (f': "{quote}".' if quote else ".")
        if their_stance == start:
            answer = (
                f"{opponent} and I are on the same side, so that point strengthens my case rather than "
                f"answering it. {voice.take(voice.profile.details)}"
            )
        elif (
            movable
            and moved is None
            and (their_stance is None or _relation(start, their_stance) == "against")
        ):
            their_conditions = profile_for(their_role).conditions
            condition = (
                _Dice(name, opponent, "concede")
                .pick(their_conditions)
                .format(
                    role=their_role or "their", **{"gerund": call.topic.gerund, "short": call.topic.short}
                )
            )
            moved = (opponent, concern, condition)
            answer = (
                f"That one lands, and I can't wave it away. I'd now go ahead only if {condition}, which "
                f"is what {opponent} would need to see."
            )
        elif start == "conditional":
            answer = (
                f"I'd answer it with a condition rather than a rebuttal: {voice.conditions(1)[0]}. "
                f"{voice.reason('conditional')}"
            )
        else:
            answer = (
                f"It's a fair point, but it doesn't outweigh the case: "
                f"{voice.decap(voice.reason(start, plain=True))}"
                f" {voice.take(voice.profile.details)}"
            )
        lines.append(f"{head} {answer}")
    if moved:
        lines.append(
            f"So I've moved from {start} to conditional: {moved[0]}'s point about {moved[1]} deserves "
            "a guard-rail, not a dismissal."
        )
        position = voice.position_line(
            "conditional", [moved[2]], f"which answers {moved[0]}'s point about {moved[1]}"
        )
    else:
        lines.append(f"Having heard {_names(opponents or ['the other side'])} out, I'm holding my position.")
        position = voice.position_line(start, voice.conditions(1))
    return "\n\n".join(lines) + f"\n\nRevised position:\n{position}"


def _stance_phrase(stance: str | None) -> str:
    return {
        "support": "supports it",
        "oppose": "opposes it",
        "conditional": "supports it with conditions",
    }.get(stance or "", "didn't state a clear position")


def _gist(said: Said, topic: Topic) -> str:
    """A statement's position, ready to follow a colon."""
    sentence = _strip_end(said.position) if said.position else ""
    if not sentence:
        return ""
    if re.match(r"(?:I|I'm|I'd|My|We|Our)\b", sentence):
        return f'in their words, "{sentence}"'
    return _decap(sentence, topic.proper)


def _who(call: _Call, name: str) -> str:
    role = call.panel.role(name)
    return f"{name} ({role})" if role else name


def _current(call: _Call) -> dict[str, Said]:
    """The statements of the current round (or, failing that, everyone's latest)."""
    this_round = [s for s in call.said if s.round() == call.round]
    latest = _latest_by_name(this_round) if this_round else _latest_by_name(call.said)
    order = {n: i for i, n in enumerate(call.panel.names())}
    return dict(sorted(latest.items(), key=lambda kv: order.get(kv[0], len(order))))


def _missing(call: _Call, spoke: Mapping[str, Said]) -> list[str]:
    absent = call.absent()
    moderator = _slug(str(call.hints.get("moderator") or ""))
    for name in call.panel.names():
        if _slug(name) == moderator:
            continue  # the chair summarises; it does not take a turn
        if name not in spoke and all(_slug(a) != _slug(name) for a in absent):
            absent.append(name)
    return absent


def _conditions_from(said: Sequence[Said]) -> list[tuple[str, str]]:
    out = []
    for s in said:
        m = re.search(r"\bonly if (.+?)(?:, which answers .*)?$", _strip_end(s.position or ""))
        if s.name and m:
            out.append((s.name, _strip_end(m.group(1))))
    return out


def _recommendation(call: _Call, views: Mapping[str, Said]) -> str:
    stances = [s.stance for s in views.values()]
    sup, opp, con = (stances.count(x) for x in STANCES)
    gerund, names = call.topic.gerund, call.panel.names()
    opposers = [n for n, s in views.items() if s.stance == "oppose"]
    conds = _conditions_from(list(views.values()))
    cond_text = "; ".join(f"{c} ({n})" for n, c in conds)
    if not views:
        return f"None yet: no positions on {call.topic.short} were recorded."
    if sup and not opp and not con:
        return f"Proceed with {gerund}. The panel is unanimous."
    if sup + con > opp and not opp:
        return f"Proceed with {gerund}, on the conditions the panel set: {cond_text or 'a staged rollout'}."
    if sup + con > opp:
        worry = _names([f"{n}'s concern about {_concern(views[n], names) or 'the risks'}" for n in opposers])
        extra = f" Conditions: {cond_text}." if cond_text else ""
        return (
            f"Proceed with {gerund} as a staged, reversible step, and resolve {worry} before committing "
            f"fully.{extra}"
        )
    if opp > sup + con:
        return (
            f"Do not proceed with {gerund} now. Revisit once the objections raised by {_names(opposers)} "
            f"have answers."
        )
    return (
        f"No clear mandate. Run a time-boxed pilot of {call.topic.short} and bring the evidence back to "
        f"this panel."
    )


def _disagreement(call: _Call, views: Mapping[str, Said]) -> str | None:
    names = call.panel.names()
    pro = [n for n, s in views.items() if s.stance == "support"]
    con = [n for n, s in views.items() if s.stance == "oppose"]
    mid = [n for n, s in views.items() if s.stance == "conditional"]
    if pro and con:
        dice = _Dice("sharpest", call.topic.question, *sorted(views))
        a, b = dice.pick(pro), dice.pick(con)
        ca = _concern(views[a], names) or "the upside"
        cb = _concern(views[b], names) or "the risk"
        quote = _quote(views[b], names, cb)
        said_b = f' ("{quote}")' if quote else ""
        if ca == cb:
            return (
                f"{a} and {b} read {ca} in opposite directions: for {a} it is the reason to go ahead, for "
                f"{b}{said_b} the reason not to."
            )
        return (
            f"{a} and {b}. {a} sees {ca} as the reason to go ahead; {b} puts {cb} first{said_b}. "
            f"Until someone answers {b}'s point about {cb}, this is the decision's weak spot."
        )
    if mid and (pro or con):
        other = (pro or con)[0]
        stance = "would go further and faster" if pro else "is not yet persuaded they are enough"
        whose = _names([m + "'s" for m in mid])
        return (
            f"No outright split. The open question is whether {whose} conditions are acceptable to "
            f"{other}, who {stance}."
        )
    return None


def _shared_terms(call: _Call, said: Sequence[Said] | None = None) -> list[str]:
    """Concerns that more than one expert's words mention, most shared first."""
    shared: dict[str, set[str]] = {}
    for s in call.said if said is None else said:
        if s.name is None:
            continue
        for pattern, display in _terms():
            if pattern.search(s.body + " " + s.position):
                shared.setdefault(display, set()).add(s.name)
    return sorted((d for d, ns in shared.items() if len(ns) >= 2), key=lambda d: (-len(shared[d]), d))


def _render_opening(call: _Call) -> str:
    moderator = str(call.hints.get("moderator") or "the chair")
    dice = _Dice("opening", moderator, call.topic.question)
    greet = dice.pick(
        (
            "Good morning, everyone.",
            "Welcome, and thank you for making the time.",
            "Thanks for joining, everyone.",
        )
    )
    intro = (
        f"I'm {moderator}, and I'll chair today's session."
        if call.hints.get("moderator")
        else ("I'll chair today's session.")
    )
    lines = [f"{greet} {intro}", f"The question before the panel: **{call.topic.question}**"]
    panel = []
    for name, role in call.panel.experts:
        voice = Voice(name, role, call.topic, "support", "opening")
        panel.append(f"- **{name}**, {voice.role}, who will look at it through {voice.lens}.")
    if panel:
        lines.append("Our panel:\n" + "\n".join(panel))
    r = call.rounds
    if r == 1:
        agenda = (
            "We'll take a single round: each of you gives a position from your own seat, responding to "
            "anyone who has spoken before you."
        )
    else:
        later = "In round 2" if r == 2 else f"In rounds 2 to {r}"
        agenda = (
            f"We'll take {r} rounds. In round 1, each of you gives an opening position from your own "
            f"seat. {later}, respond to one another by name: agree, disagree, sharpen."
        )
    agenda += (
        " After each round I'll summarise where we stand, and at the end I'll close with a "
        "recommendation and a record of who holds which view."
    )
    lines.append(f"Agenda: {agenda}")
    names = call.panel.names()
    first = f"{names[0]}, would you start us off?" if names else "Let's begin."
    lines.append(
        "Please close each turn with your position line (support, oppose or conditional, in one "
        f"sentence). {first}"
    )
    return "\n\n".join(lines)


def _render_round_summary(call: _Call) -> str:
    moderator = str(call.hints.get("moderator") or "the chair")
    views = _current(call)
    names = call.panel.names()
    lines = [f"**Round {call.round} of {call.rounds}: summary** ({moderator})"]
    attrib = []
    for name, said in views.items():
        gist = _gist(said, call.topic)
        attrib.append(f"- {_who(call, name)} {_stance_phrase(said.stance)}" + (f": {gist}." if gist else "."))
    lines.append("Where everyone stands:\n" + ("\n".join(attrib) if attrib else "- Nobody spoke this round."))

    groups: dict[str, list[str]] = {}
    for name, said in views.items():
        if said.stance:
            groups.setdefault(said.stance, []).append(name)
    agree = [
        f"{_names(ns)} {'both' if len(ns) == 2 else 'all'} {_stance_phrase(st).replace('s it', ' it', 1)}"
        for st, ns in groups.items()
        if len(ns) >= 2
    ]
    common = _shared_terms(call, list(views.values()))
    agreement = (
        "; ".join(agree) if agree else "There is no majority yet: each of you landed somewhere different"
    )
    agreement += "."
    if common:
        agreement += f" Several of you raised {common[0]}, which suggests it is the real crux."
    lines.append(f"Agreement: {_cap(agreement)}")
    split = _disagreement(call, views)
    lines.append("Sharpest disagreement: " + (split or "I didn't hear a real disagreement this round."))
    missing = _missing(call, views)
    if missing:
        lines.append(" ".join(f"We did not hear from {m} this round." for m in missing))
    if call.round < call.rounds:
        pro = [n for n, s in views.items() if s.stance == "support"]
        con = [n for n, s in views.items() if s.stance == "oppose"]
        if pro and con:
            ask = f"{pro[0]} and {con[0]}, please answer each other directly"
        elif names:
            ask = "each of you, please respond to the strongest point made against your view"
        else:
            ask = "let's respond to each other directly"
        lines.append(f"For round {call.round + 1}: {ask}.")
    else:
        lines.append("That was our last round; I'll draw it together in the final summary.")
    return "\n\n".join(lines)


def _render_final_summary(call: _Call) -> str:
    views = _latest_by_name(call.said)
    views = {n: s for n, s in views.items() if s.stance}
    names = call.panel.names()
    lines = [f"## Final summary: {call.topic.question}", f"Recommendation: {_recommendation(call, views)}"]
    groups: dict[str, list[str]] = {}
    for name, said in views.items():
        groups.setdefault(str(said.stance), []).append(name)
    agree_parts = [
        f"{_names(ns)} {_stance_phrase(st).replace('s it', ' it', 1)}"
        for st, ns in groups.items()
        if len(ns) >= 2
    ]
    common = _shared_terms(call)[:2]
    if common:
        agree_parts.append(
            f"{_names(common)} came up from more than one of you, so that is what this decision turns on"
        )
    lines.append(
        "Where we agree: "
        + (
            " ".join(_cap(p) + "." for p in agree_parts)
            if agree_parts
            else "Little beyond the question itself; views are spread."
        )
    )
    split = _disagreement(call, views)
    lines.append("Open disagreements: " + (split or "None of substance."))
    bullets = []
    for name in names + [n for n in views if n not in names]:
        view = views.get(name)
        if view is None:
            bullets.append(f"- **{name}** ({call.panel.role(name) or 'panel'}): no position on record")
            continue
        bullets.append(
            f"- **{name}** ({call.panel.role(name) or 'panel'}): {str(view.stance).upper()} {DASH} "
            f"{_strip_end(view.position)}. [{view.source}]"
        )
    lines.append("Who holds which view:\n" + "\n".join(bullets))
    missing = _missing(call, views)
    if missing:
        lines.append(
            "Missing: "
            + " ".join(
                f"{m} was absent for part of the meeting; their view above is their last on record."
                if m in views
                else f"We did not hear from {m}."
                for m in missing
            )
        )
    return "\n\n".join(lines)


def _render_divergence(call: _Call) -> str:
    if call.opts.malformed_divergence and not call.hints.get("retry"):
        return 'Looking at the positions, I think they diverge. {"diverged": true, "topic": "pricing'
    views = {n: s for n, s in _latest_by_name(call.said).items() if s.stance}
    wanted = [str(p) for p in call.hints.get("participants") or ()]
    if wanted:
        views = {n: s for n, s in views.items() if any(_slug(n) == _slug(w) for w in wanted)} or views
    pro = [n for n, s in views.items() if s.stance == "support"]
    con = [n for n, s in views.items() if s.stance == "oppose"]
    diverged = bool(pro and con)
    participants = [n for n in views if n in pro or n in con] if diverged else []
    if diverged:
        names = call.panel.names()
        c1 = _concern(views[pro[0]], names)
        c2 = _concern(views[con[0]], names)
        crux = " vs ".join(c for c in (c1, c2) if c) if c1 != c2 else (c1 or "")
        topic = f"{call.topic.short}: {crux}" if crux else call.topic.short
    else:
        topic = call.topic.short
    return json.dumps({"diverged": diverged, "topic": topic, "participants": participants})


def _render_synthesis(call: _Call) -> str:
    names = call.panel.names()
    views = _latest_by_name(call.said)
    by_name: dict[str, list[Said]] = {}
    other: list[Said] = []
    for s in call.said:
        if s.name:
            by_name.setdefault(s.name, []).append(s)
        else:
            other.append(s)
    stance_views = {n: s for n, s in views.items() if s.stance}
    lines = [f"## Synthesis: {call.topic.question}", f"**Conclusion.** {_recommendation(call, stance_views)}"]
    evidence = []
    for name, items in by_name.items():
        parts = []
        for s in items:
            point = _quote(s, names) or _gist(s, call.topic) or "spoke without a stated position"
            verb = "in the debate, " if s.is_debate else ""
            parts.append(f'{verb}"{point}" [{s.source}]')
        latest = views.get(name)
        stance = f", ending {str(latest.stance).upper()}" if latest and latest.stance else ""
        evidence.append(f"- **{_who(call, name)}**{stance}: " + "; ".join(parts) + ".")
    for s in other:
        point = _quote(s, names) or _clause(s.body or s.source)
        evidence.append(f'- Also on record: "{point}" [{s.source}].')
    if evidence:
        lines.append("**What the panel established**\n" + "\n".join(evidence))
    debates = [s for s in call.said if s.is_debate and s.name]
    if debates:
        outcomes = []
        for d in debates:
            before = next(
                (s for s in reversed(by_name.get(str(d.name), [])) if not s.is_debate and s.stance), None
            )
            if before and d.stance and before.stance != d.stance:
                outcomes.append(f"{d.name} moved from {before.stance} to {d.stance} [{d.source}]")
            else:
                held = f"held firm at {d.stance.upper()}" if d.stance else "stated no revised position"
                outcomes.append(f"{d.name} {held} [{d.source}]")
        lines.append("**Debate outcomes.** " + _cap("; ".join(outcomes)) + ".")
    risks = []
    for n, s in stance_views.items():
        condition = re.search(r"\bonly if (.+?)(?:, which answers .*)?$", _strip_end(s.position))
        if s.stance == "conditional" and condition:
            risks.append(f"{n}'s condition: {condition.group(1)} [{s.source}]")
        elif s.stance == "oppose":
            risks.append(f"{n}'s objection on {_concern(s, names) or 'the risks'} [{s.source}]")
    if risks:
        lines.append("**Risks and conditions to carry forward.** " + _cap("; ".join(risks)) + ".")
    split = _disagreement(call, stance_views)
    if split:
        lines.append("**Still open.** " + split)
    owners = [n for n in names if n in stance_views][:4]
    if owners:
        steps = [
            f"{n} to {lx.NEXT_STEPS.get(profile_for(call.panel.role(n)).key, lx.NEXT_STEPS['generic'])}"
            for n in owners
        ]
        lines.append("**Next steps.** " + _cap("; ".join(steps)) + ".")
    return "\n\n".join(lines)


def _render_summarise(call: _Call) -> str:
    blocks = call.said
    names = call.panel.names()
    total = sum(_count_words(s.body) + _count_words(s.position) for s in blocks)
    asked = re.search(r"\bat most (\d+) words", call.request.prompt)
    limit = min(call.opts.words, int(asked.group(1))) if asked else call.opts.words
    budget = max(12, min(math.ceil(total / 3), limit))
    titles = {b.source: b.title for b in call.request.context}
    out = []
    for s in blocks:
        share = max(8, budget * (_count_words(s.body) + 1) // max(1, total))
        positions = parse_positions(s.raw)
        share -= sum(_count_words(p) + 2 for _, p in positions)
        kept: list[str] = []
        ranked = sorted(
            enumerate(_sentences(s.body)),
            key=lambda iv: (
                -(
                    2 * _has_term(iv[1])
                    + bool(re.search(r"\d", iv[1]))
                    + 0.5 * any(n in iv[1] for n in names)
                ),
                iv[0],
            ),
        )
        chosen: list[tuple[int, str]] = []
        used = 0
        for i, sentence in ranked:
            if sentence.startswith(("Revised position", "**Revised")):
                continue
            if used and used + _count_words(sentence) > max(share, 6):
                continue
            chosen.append((i, sentence))
            used += _count_words(sentence)
            if used >= share:
                break
        kept = [sentence for _, sentence in sorted(chosen)]
        head = titles.get(s.source) or (s.name or s.source)
        text = f"[{s.source}] {head}: " + (" ".join(kept) if kept else "(no substantive text)")
        for stance, sentence in positions:
            text += f"\nPosition: {stance.upper()} {DASH} {sentence}"
        out.append(text)
    return "\n\n".join(out) if out else "(nothing to summarise)"


_RENDERERS = {
    "opening": _render_opening,
    "turn": _render_turn,
    "round_summary": _render_round_summary,
    "final_summary": _render_final_summary,
    "expert": _render_expert,
    "debate": _render_debate,
    "divergence": _render_divergence,
    "synthesis": _render_synthesis,
    "summarise": _render_summarise,
}
