"""The stream guard: one model call that can neither hang nor say things twice.

Failure report 001 (``/work/shared/seeds``): a stream that accepted the request
but never sent its first chunk hung a whole board meeting, and the first fix
then re-broadcast the full text on top of a stream that broke half-way. This
module makes both impossible:

* the stream's first event is read by a producer thread that feeds a queue; the
  caller's thread waits on the queue with timeouts, so no read can block it:
  ``first_chunk_timeout`` until the first text, ``idle_timeout`` between events,
  ``deadline`` overall, and ``should_stop()`` is polled every ``POLL_INTERVAL``.
  A stream that can be aborted (every network provider's, the offline model's) is
  then handed over: its response is open, so the caller reads the rest itself,
  with no thread switch per chunk, while the process's watchdog
  (:mod:`orchestrator.gateway.watchdog`) keeps the same clocks and polls ``should_stop()``,
  and aborts the stream when one runs out, which ends the blocked read. A stream
  without ``abort()`` stays with its producer to the end;
* no first chunk, an empty stream, or a stream error before any text (other
  than rate limiting and fatal errors, which a non-streaming call would meet
  too) fall back to ``provider.complete()`` — itself run in a thread and bounded
  by what is left of the deadline — and its text is replayed through
  ``on_text`` in ``REPLAY_CHUNK``-character chunks: ``Completion(fallback=True)``;
* an error or timeout AFTER text was shown returns what was shown,
  ``Completion(truncated=True)``; ``complete()`` is never called then, so
  watchers never see the text twice;
* ``on_text`` is only ever called on the caller's thread, in order;
* usage is the provider's when it reported one, else an estimate labelled
  ``source="estimated"``; an error raised after the provider reported usage
  carries that usage.

When the guard gives up on a stream still with its producer, it stops the producer: it calls the
stream's ``abort()`` if it has one (network providers shut the socket down,
which wakes a blocked read), and the producer then ``close()``s the generator
in its own thread (closing the HTTP response). A stream without ``abort()``
that blocks forever inside ``next()`` can only be left behind: producer threads
are daemons for that last resort, and a warning is logged. Network providers
also bound every socket read with an httpx timeout, so theirs always end.
"""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from orchestrator.gateway.budget import estimate_usage
from orchestrator.gateway.failures import (
    CallCancelled,
    FatalError,
    LLMError,
    ProviderUnavailable,
    RateLimited,
    StreamStalled,
)
from orchestrator.gateway.types import ChatRequest, Completion, ModelSpec, Provider, TextDelta, Usage, UsageReport
from orchestrator.gateway.watchdog import CANCELLED, POLL_INTERVAL, WATCHDOG, Watch

logger = logging.getLogger(__name__)

REPLAY_CHUNK = 24  # characters per on_text call when replaying a fallback
JOIN_GRACE = 1.0  # seconds to wait for a stopped producer before leaving it behind

OnText = Callable[[str], None]
ShouldStop = Callable[[], bool]

_EVENT, _END, _ERROR, _HANDOVER = "event", "end", "error", "handover"


@dataclass
class _Outcome:
    text: str
    usage: Usage | None  # what the provider reported, if anything
    error: BaseException | None  # why the stream ended early, if it did
    reason: str  # "end", "error", "first_chunk_timeout", "idle_timeout", "deadline"


def guarded_call(
    provider: Provider,
    spec: ModelSpec,
    request: ChatRequest,
    *,
    on_text: OnText = lambda text: None,
    should_stop: ShouldStop = lambda: False,
    clock: Callable[[], float] = time.monotonic,
) -> Completion:
    """Streams ``request`` through ``provider`` under the guard; see the module docstring."""
    started = clock()
    deadline_at = started + spec.deadline
    outcome = _consume_stream(provider, spec, request, on_text, should_stop, started, deadline_at, clock)
    if outcome.text:
        # a partial figure carried by an error is not the call's usage: estimate instead
        usage = outcome.usage or estimate_usage(request, outcome.text)
        if outcome.reason == "end":
            return Completion(text=outcome.text, usage=usage)
        logger.warning(
            "action=stream_truncated model=%s reason=%s chars_shown=%d error=%s upstream=%s",
            spec.name,
            outcome.reason,
            len(outcome.text),
            type(outcome.error).__name__,
            getattr(outcome.error, "detail", None),  # what the provider said, redacted: the log only
        )
        return Completion(text=outcome.text, usage=usage, truncated=True, finish_reason=outcome.reason)
    error = outcome.error
    # tokens the failed stream is known to have spent: its final report, else the error's partial one
    spent = outcome.usage or (error.usage if isinstance(error, LLMError) else None)
    if isinstance(error, RateLimited | FatalError):
        raise _with_usage(error, spent)
    if clock() >= deadline_at:
        raise _with_usage(
            StreamStalled(f"model {spec.name!r}: no output within the deadline of {spec.deadline}s"),
            spent,
        )
    logger.warning(
        "action=stream_fallback model=%s reason=%s error=%s upstream=%s",
        spec.name,
        outcome.reason,
        type(error).__name__ if error else None,
        getattr(error, "detail", None),  # what the provider said, redacted: the log only
    )
    completion = _bounded_complete(provider, spec, request, should_stop, deadline_at, clock, spent, outcome.reason)
    for start in range(0, len(completion.text), REPLAY_CHUNK):
        if should_stop():
            raise CallCancelled(f"model {spec.name!r}: cancelled while replaying", usage=completion.usage)
        on_text(completion.text[start : start + REPLAY_CHUNK])
    return completion


def _consume_stream(
    provider: Provider,
    spec: ModelSpec,
    request: ChatRequest,
    on_text: OnText,
    should_stop: ShouldStop,
    started: float,
    deadline_at: float,
    clock: Callable[[], float],
) -> _Outcome:
    parts: list[str] = []
    usage: Usage | None = None
    try:
        stream = provider.stream(spec, request)
        iterator = iter(stream)  # one iterator, read first by the producer, then perhaps here
    except Exception as exc:
        return _Outcome("", None, exc, "error")
    events: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
    stop = threading.Event()
    # an abortable stream is handed over after its first event (its response is open then);
    # ``handed`` is set once the producer has let go of it, so that its reader closes it
    handover, handed = callable(getattr(stream, "abort", None)), threading.Event()
    # in the caller's context: its log context and its trace (the HTTP request is made there)
    producer = threading.Thread(
        target=contextvars.copy_context().run, args=(_produce, stream, iterator, events, stop, handover, handed),
        name=f"llm-stream-{spec.name}", daemon=True,
    )
    producer.start()
    last_event = started
    finished = False  # the producer reported its end (or handed the stream over): nothing to abort
    handed_over = False
    try:
        while True:
            if should_stop():
                raise CallCancelled(f"model {spec.name!r}: cancelled", usage=_known(usage, request, parts))
            now = clock()
            if parts:
                until, reason = min(
                    (last_event + spec.idle_timeout, "idle_timeout"), (deadline_at, "deadline")
                )
            else:
                until, reason = min(
                    (started + spec.first_chunk_timeout, "first_chunk_timeout"), (deadline_at, "deadline")
                )
            if now >= until:
                return _Outcome(
                    "".join(parts), usage, StreamStalled(f"model {spec.name!r}: {reason}"), reason
                )
            try:
                kind, payload = events.get(timeout=min(until - now, POLL_INTERVAL))
            except queue.Empty:
                continue
            last_event = clock()
            finished = kind != _EVENT
            if kind == _HANDOVER:
                handed_over = True
                producer.join()  # it returns right after handing over
                watch = Watch(stream.abort, should_stop, first_due=started + spec.first_chunk_timeout,
                              idle=spec.idle_timeout, deadline_at=deadline_at, clock=clock,
                              has_text=bool(parts), last_event=last_event)
                return _read_inline(iterator, watch, parts, usage, spec, request, on_text, should_stop)
            if kind == _END:
                return _Outcome("".join(parts), usage, None, "end")
            if kind == _ERROR:
                return _Outcome("".join(parts), usage, payload, "error")
            if isinstance(payload, TextDelta) and payload.text:
                parts.append(payload.text)
                on_text(payload.text)
            elif isinstance(payload, UsageReport):
                usage = payload.usage
    finally:
        if not handed_over:
            _stop_producer(stream, stop, producer, spec, abort=not finished)
        if handed.is_set():  # read here, or given up on just as it was handed over
            _close(stream, iterator)


def _read_inline(
    iterator: Iterator[Any],
    watch: Watch,
    parts: list[str],
    usage: Usage | None,
    spec: ModelSpec,
    request: ChatRequest,
    on_text: OnText,
    should_stop: ShouldStop,
) -> _Outcome:
    """The rest of an abortable stream, read on the caller's thread while the process's
    watchdog keeps its clocks: a due stream is aborted, which ends the blocked read."""
    with WATCHDOG.watching(watch):
        while True:
            try:
                event = next(iterator)
            except StopIteration:
                return _Outcome("".join(parts), usage, None, "end")
            except Exception as exc:
                if watch.reason == CANCELLED:
                    raise CallCancelled(f"model {spec.name!r}: cancelled",
                                        usage=_known(usage, request, parts)) from None
                if watch.reason is not None:
                    return _Outcome("".join(parts), usage,
                                    StreamStalled(f"model {spec.name!r}: {watch.reason}"), watch.reason)
                return _Outcome("".join(parts), usage, exc, "error")
            is_text = isinstance(event, TextDelta) and bool(event.text)
            watch.saw(text=is_text)
            if should_stop():
                raise CallCancelled(f"model {spec.name!r}: cancelled", usage=_known(usage, request, parts))
            if is_text:
                parts.append(event.text)
                on_text(event.text)
            elif isinstance(event, UsageReport):
                usage = event.usage


def _produce(
    stream: Any,
    iterator: Iterator[Any],
    events: queue.SimpleQueue[tuple[str, Any]],
    stop: threading.Event,
    handover: bool,
    handed: threading.Event,
) -> None:
    """Producer thread body: forwards everything, including errors, and always closes —
    except a stream it hands over after its first event, which its reader closes."""
    try:
        for event in iterator:
            if stop.is_set():
                return
            events.put((_EVENT, event))
            if handover:
                handed.set()
                events.put((_HANDOVER, None))
                return
        events.put((_END, None))
    except BaseException as exc:  # forwarded to the consumer, never left unhandled in a thread
        events.put((_ERROR, exc))
    finally:
        if not handed.is_set():
            _close(stream, iterator)


def _close(stream: Any, iterator: Iterator[Any]) -> None:
    for closing in (iterator,) if iterator is stream else (iterator, stream):
        close = getattr(closing, "close", None)
        if callable(close):
            try:
                close()
            except Exception:
                logger.debug("action=stream_close_failed", exc_info=True)


def _stop_producer(
    stream: Any, stop: threading.Event, producer: threading.Thread, spec: ModelSpec, *, abort: bool
) -> None:
    stop.set()
    aborter = getattr(stream, "abort", None) if abort and producer.is_alive() else None
    if callable(aborter):
        try:
            aborter()
        except Exception:
            logger.debug("action=stream_abort_failed", exc_info=True)
    # a finished or aborted producer ends at once; one blocked in a stream without abort()
    # is not waited for: it closes its generator when the stream next yields
    producer.join(JOIN_GRACE if (not abort or callable(aborter)) else 0.05)
    if producer.is_alive():
        logger.info("action=stream_thread_left_behind model=%s abortable=%s", spec.name, callable(aborter))


def _bounded_complete(
    provider: Provider,
    spec: ModelSpec,
    request: ChatRequest,
    should_stop: ShouldStop,
    deadline_at: float,
    clock: Callable[[], float],
    stream_usage: Usage | None,
    reason: str,
) -> Completion:
    """``provider.complete()`` in a daemon thread, waited for until the deadline; ``reason``:
    why the stream was given up (kept on the completion, for metrics)."""
    result: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()

    def run() -> None:
        try:
            result.put((_END, provider.complete(spec, request)))
        except BaseException as exc:  # forwarded to the caller
            result.put((_ERROR, exc))

    threading.Thread(target=contextvars.copy_context().run, args=(run,), name=f"llm-complete-{spec.name}",
                     daemon=True).start()
    while True:
        if should_stop():
            raise CallCancelled(f"model {spec.name!r}: cancelled during fallback", usage=stream_usage)
        remaining = deadline_at - clock()
        if remaining <= 0:
            raise StreamStalled(
                f"model {spec.name!r}: fallback did not finish within the deadline of {spec.deadline}s",
                usage=stream_usage,
            )
        try:
            kind, payload = result.get(timeout=min(remaining, POLL_INTERVAL))
        except queue.Empty:
            continue
        if kind == _ERROR:
            if isinstance(payload, LLMError):
                raise _with_usage(payload, stream_usage)
            raise ProviderUnavailable(
                f"model {spec.name!r}: {type(payload).__name__} in complete()", usage=stream_usage
            ) from payload
        completion: Completion = payload
        return Completion(
            text=completion.text,
            usage=_add(stream_usage, completion.usage),
            fallback=True,
            finish_reason=completion.finish_reason,
            fallback_reason=reason,
        )


def _known(usage: Usage | None, request: ChatRequest, parts: list[str]) -> Usage | None:
    """Usage to put on a cancellation: reported, else estimated if text was produced."""
    if usage is not None:
        return usage
    return estimate_usage(request, "".join(parts)) if parts else None


def _with_usage(error: BaseException, usage: Usage | None) -> LLMError:
    if not isinstance(error, LLMError):
        wrapped = ProviderUnavailable(f"{type(error).__name__} in stream", usage=usage)
        wrapped.__cause__ = error
        return wrapped
    if error.usage is None and usage is not None:
        error.usage = usage
    return error


def _add(first: Usage | None, second: Usage) -> Usage:
    """Usage of a failed stream attempt plus its fallback; estimated if either part is."""
    if first is None:
        return second
    tokens = (first.input_tokens + second.input_tokens, first.output_tokens + second.output_tokens)
    if first.source == second.source == "provider":
        return Usage(*tokens, "provider")
    method = "+".join(part or "provider" for part in (first.method, second.method))
    return Usage(*tokens, "estimated", method)
