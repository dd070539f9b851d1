"""The offline model provider: a deterministic stand-in for an LLM.

It is the default model, so it needs no network and no key, and what it writes
should read like a real meeting. It guarantees:

* **Determinism.** The output is a pure function of ``(request, spec.options)``.
  All choices are made by a dice seeded with SHA-256 of the request's facts,
  never by ``hash()`` or the global random state.
* **Role and memory.** It reads ``request.hints`` (kind, topic, expert, role,
  round, panel, …) and ``request.context``. Each expert keeps a stance on the
  topic (``options["stances"]`` or SHA-256 of name + topic), talks in its
  role's vocabulary (see :mod:`tasks.llm.offline.lexicon`), and answers named
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

This module is the provider (options, timing, faults, usage). What it says is
written elsewhere: :mod:`~tasks.llm.offline.reading` reads the request,
:mod:`~tasks.llm.offline.writing` (the experts) and
:mod:`~tasks.llm.offline.minutes` (the chair and the record) write the answer,
in the :mod:`~tasks.llm.offline.voice` of each speaker.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator

from tasks.llm.errors import ProviderUnavailable
from tasks.llm.offline.options import OfflineOptions
from tasks.llm.offline.reading import speaker_of
from tasks.llm.offline.writing import render
from tasks.llm.types import (
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
        speaker = speaker_of(request)
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
        speaker = speaker_of(request)
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
