"""The offline model provider: a deterministic stand-in for an LLM.

It is the default model, so it needs no network and no key, and what it writes
should read like a real meeting. It guarantees:

* **Determinism.** The output is a pure function of ``(request, spec.options)``.
  All choices are made by a dice seeded with SHA-256 of the request's facts,
  never by ``hash()`` or the global random state.
* **Role and memory.** It reads ``request.hints`` (kind, topic, expert, role,
  round, panel, …) and ``request.context``. Each expert keeps a stance on the
  topic (``options["stances"]`` or SHA-256 of name + topic), talks in its
  role's vocabulary (see :mod:`orchestrator.gateway.providers.offline.lexicon`), and answers named
  earlier speakers by quoting or paraphrasing what their blocks actually say.
* **Structure.** Every turn, expert and debate text has exactly one line
  ``Position: SUPPORT|OPPOSE|CONDITIONAL — <sentence>``; a divergence check
  returns only JSON; a synthesis cites every context block as ``[source]``;
  summaries attribute positions and name absent experts.
* **Verdicts**, when a plan declares an ``answer:`` (``hints["verdict"]``, with
  ``hints["answer"]``, ``hints["peer_answers"]``, ``hints["decision"]``): an expert's
  text (``"turn"``) ends, after its ``Position:`` line, with one line
  ``Verdict: {"answer": …, "confidence": …, "reason": …}`` (valid JSON; a choice
  answer is one of the options); a ``"repair"`` is that line alone, the same one; the
  chair (``"chair"``) states the decision's answer in its recommendation (or that
  there was no winner, and its own pick) and ends with it as its verdict. The answer
  follows the expert's stance, or with ``options.solver`` a simulated solver of the
  question's ``What is <expr>?`` (:mod:`~orchestrator.gateway.providers.offline.judging`,
  :mod:`~orchestrator.gateway.providers.offline.solver`). The verdict line is a piece
  of its own, so the streamed text is the completed text.
* **Honest usage.** Tokens are estimated as characters / 4 and reported with
  ``source="estimated"``, ``method="offline:chars/4"``.
* **Bounded, and faulty only on request.** ``spec.options`` are
  :class:`~orchestrator.gateway.providers.offline.options.OfflineOptions`: ``latency``,
  ``first_chunk_delay``, ``chunk_chars``, ``words``, ``stances`` and ``solver``
  (``skill``, ``correlation``, ``conformity``, ``position_bias`` in [0, 1], ``seed``) are
  bounded; the fault switches (``hang`` + ``hang_seconds``, ``fail``, ``break_after_chars``,
  ``malformed_divergence``, ``malformed_verdict``, ``contradict_decision``, a long
  ``first_chunk_delay``) run only in a provider built with ``testing=True`` (the
  worker's ``CONCLAVE_TESTING``) — otherwise the call fails with
  ``llm.fault_not_allowed``, whatever the stored plan says. The solver is not a fault.
  ``break_after_chars`` only breaks the stream; ``complete()`` (the gateway's
  non-streaming fallback) still returns the whole text. A hang can be cut short
  with :meth:`OfflineProvider.release`.
* **Stoppable, and lazy.** ``stream()`` returns an :class:`OfflineStream` that the
  stream guard can ``abort()`` from another thread (on cancellation, a lost lease, a
  worker's shutdown or a timeout): its waits end at once and it writes nothing more.
  The text is written piece by piece as it is streamed, never ahead of the reader.

This module is the provider (options, timing, faults, usage). What it says is
written elsewhere: :mod:`~orchestrator.gateway.providers.offline.understanding` reads the request,
:mod:`~orchestrator.gateway.providers.offline.writing` (the experts) and
:mod:`~orchestrator.gateway.providers.offline.minutes` (the chair and the record) write the answer,
in the :mod:`~orchestrator.gateway.providers.offline.voice` of each speaker.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from orchestrator.gateway.failures import ProviderUnavailable, StreamStalled
from orchestrator.gateway.providers.offline.options import OfflineOptions
from orchestrator.gateway.providers.offline.understanding import speaker_of
from orchestrator.gateway.providers.offline.writing import render, render_pieces
from orchestrator.gateway.types import (
    ChatRequest,
    Completion,
    ModelSpec,
    StreamEvent,
    TextDelta,
    Usage,
    UsageReport,
)

USAGE_METHOD = "offline:chars/4"


# --- the provider ------------------------------------------------------------

HANG_POLL = 0.05  # seconds between checks of release() and abort() while hanging


class OfflineStream:
    """What :meth:`OfflineProvider.stream` returns: an iterator of stream events, like
    the generator it wraps (``next``, ``close`` from the thread that iterates), plus
    ``abort()``, safe from any thread, which ends its waits at once; the next step
    then raises ``StreamStalled`` instead of writing on."""

    def __init__(self, events: Callable[[OfflineStream], Iterator[StreamEvent]]) -> None:
        self._aborted = threading.Event()
        self._events = events(self)

    def __iter__(self) -> OfflineStream:
        return self

    def __next__(self) -> StreamEvent:
        return next(self._events)

    def close(self) -> None:
        close = getattr(self._events, "close", None)
        if close is not None:
            close()

    def abort(self) -> None:
        self._aborted.set()

    @property
    def aborted(self) -> bool:
        return self._aborted.is_set()

    def wait(self, seconds: float) -> None:
        """Sleeps ``seconds`` unless aborted meanwhile; raises ``StreamStalled`` if aborted."""
        if self._aborted.wait(seconds) if seconds > 0 else self._aborted.is_set():
            raise StreamStalled("offline stream aborted")


class OfflineProvider:
    """Deterministic, key-less provider (see the module docstring). Fault switches run
    only when it is built with ``testing=True``."""

    name = "offline"

    def __init__(self, *, testing: bool = False) -> None:
        self.testing = testing
        self._released = threading.Event()

    def release(self) -> None:
        """End every current and future simulated hang (for tests and shutdown)."""
        self._released.set()

    def stream(self, spec: ModelSpec, request: ChatRequest) -> OfflineStream:
        return OfflineStream(lambda handle: self._events(handle, spec, request))

    def _events(self, handle: OfflineStream, spec: ModelSpec, request: ChatRequest) -> Iterator[StreamEvent]:
        opts = OfflineOptions.parse(spec.options, testing=self.testing)
        speaker = speaker_of(request)
        input_tokens = _input_tokens(request)
        self._faults(opts, speaker, input_tokens, handle, request)
        limit = opts.break_after_chars
        chunks = _chunks(render_pieces(request, opts), opts.chunk_chars)
        sent = 0
        delay = opts.first_delay
        for chunk in chunks:
            handle.wait(delay)
            delay = opts.latency
            if limit is not None and sent + len(chunk) >= limit:
                part = chunk[: limit - sent]
                if part:
                    sent += len(part)
                    yield TextDelta(part)
                if len(part) < len(chunk) or next(chunks, None) is not None:
                    raise ProviderUnavailable(
                        f"offline provider: stream broken after {sent} characters (break_after_chars)",
                        usage=_usage(input_tokens, sent),
                    )
                break
            sent += len(chunk)
            yield TextDelta(chunk)
        yield UsageReport(_usage(input_tokens, sent))

    def complete(self, spec: ModelSpec, request: ChatRequest) -> Completion:
        opts = OfflineOptions.parse(spec.options, testing=self.testing)
        speaker = speaker_of(request)
        input_tokens = _input_tokens(request)
        self._faults(opts, speaker, input_tokens, None, request)
        text = render(request, opts)
        n = -(-len(text) // opts.chunk_chars)
        total_delay = opts.first_delay + opts.latency * max(0, n - 1) if n else 0.0
        # what a stream would take, but never past the call's deadline (the guard gives up there)
        time.sleep(min(total_delay, spec.deadline))
        return Completion(text=text, usage=_usage(input_tokens, len(text)), finish_reason="stop")

    def _faults(self, opts: OfflineOptions, speaker: str | None, input_tokens: int,
                handle: OfflineStream | None, request: ChatRequest) -> None:
        who = speaker or "this call"
        if (opts.fails(speaker) or (opts.fail_revision and request.hints.get("revision_of"))
                or request.hints.get("kind") in opts.fail_kinds):
            raise ProviderUnavailable(
                f"offline provider: simulated failure for {who}", usage=_usage(input_tokens, 0)
            )
        if opts.hangs(speaker):
            waited = 0.0
            while waited < opts.hang_seconds and not self._released.is_set():
                step = min(HANG_POLL, opts.hang_seconds - waited)
                if handle is not None:
                    handle.wait(step)
                else:
                    self._released.wait(step)
                waited += step
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


def _chunks(pieces: Iterable[str], size: int) -> Iterator[str]:
    """``size``-character chunks of the text the pieces make up, as soon as each is
    complete: the same chunks as slicing the whole text."""
    rest = ""
    for piece in pieces:
        text = rest + piece if rest else piece
        end = len(text) - len(text) % size
        for start in range(0, end, size):
            yield text[start : start + size]
        rest = text[end:]
    if rest:
        yield rest
