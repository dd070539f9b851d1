"""The non-streaming fallback of a guarded call whose stream showed nothing.

The guard (:mod:`orchestrator.gateway.guard`) gives a stream up when it sent no text — no
first chunk in time, an empty stream, an error before any text — and the call is made
again without streaming: ``provider.complete()`` in a daemon thread, watched until the
call's deadline (its watch's only clock), its text replayed through ``on_text`` in
``REPLAY_CHUNK``-character chunks: ``Completion(fallback=True)``. Nothing was shown, so
nothing is shown twice. Rate limiting and fatal errors are raised instead (a
non-streaming call would meet them too), and so is a stream given up at the deadline.

What the call spent is the stream's (its final report, else what its error carried)
plus the fallback's; an error raised on the way carries it.
"""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, Protocol

from orchestrator.gateway.failures import (
    CallCancelled,
    FatalError,
    LLMError,
    ProviderUnavailable,
    RateLimited,
    StreamStalled,
)
from orchestrator.gateway.types import ChatRequest, Completion, ModelSpec, Provider, Usage
from orchestrator.gateway.watchdog import CANCELLED, WATCHDOG, Watched

logger = logging.getLogger("orchestrator.gateway.guard")  # a guarded call logs under one name

REPLAY_CHUNK = 24  # characters per on_text call when replaying a fallback

_DONE, _FAILED, _TRIPPED = "done", "failed", "tripped"


class GivenUp(Protocol):
    """How the stream that showed nothing ended (the guard's reading of it)."""

    usage: Usage | None  # what the provider reported, if anything
    error: BaseException | None  # why the stream ended early, if it did
    reason: str  # "end" (empty), "error", "first_chunk_timeout", "idle_timeout", "deadline"


class FallbackWatch(Watched, Protocol):
    """The fallback's watch (the guard's ``Watch.fallback()``): the call's deadline, its only clock."""

    def past_deadline(self) -> bool: ...


def fall_back(
    provider: Provider,
    spec: ModelSpec,
    request: ChatRequest,
    watch: FallbackWatch,
    stream: GivenUp,
    on_text: Callable[[str], None],
    should_stop: Callable[[], bool],
) -> Completion:
    """The call without streaming, under ``watch``; see the module docstring."""
    error = stream.error
    # tokens the failed stream is known to have spent: its final report, else the error's partial one
    spent = stream.usage or (error.usage if isinstance(error, LLMError) else None)
    if isinstance(error, RateLimited | FatalError):
        raise _with_usage(error, spent)
    if watch.past_deadline():
        raise _with_usage(
            StreamStalled(f"model {spec.name!r}: no output within the deadline of {spec.deadline}s"),
            spent,
        )
    logger.warning(
        "action=stream_fallback model=%s reason=%s error=%s upstream=%s",
        spec.name,
        stream.reason,
        type(error).__name__ if error else None,
        getattr(error, "detail", None),  # what the provider said, redacted: the log only
    )
    completion = _bounded_complete(provider, spec, request, watch, spent, stream.reason)
    for start in range(0, len(completion.text), REPLAY_CHUNK):
        if should_stop():
            raise CallCancelled(f"model {spec.name!r}: cancelled while replaying", usage=completion.usage)
        on_text(completion.text[start : start + REPLAY_CHUNK])
    return completion


def _bounded_complete(
    provider: Provider,
    spec: ModelSpec,
    request: ChatRequest,
    watch: Watched,
    stream_usage: Usage | None,
    reason: str,
) -> Completion:
    """``provider.complete()`` in a daemon thread, watched until the deadline; ``reason``:
    why the stream was given up (kept on the completion, for metrics)."""
    result: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()

    def run() -> None:
        try:
            result.put((_DONE, provider.complete(spec, request)))
        except BaseException as exc:  # forwarded to the caller
            result.put((_FAILED, exc))

    with WATCHDOG.watching(watch, lambda: result.put((_TRIPPED, None))):
        threading.Thread(target=contextvars.copy_context().run, args=(run,), name=f"llm-complete-{spec.name}",
                         daemon=True).start()
        kind, payload = result.get()
    if kind == _TRIPPED:
        if watch.reason == CANCELLED:
            raise CallCancelled(f"model {spec.name!r}: cancelled during fallback", usage=stream_usage)
        raise StreamStalled(
            f"model {spec.name!r}: fallback did not finish within the deadline of {spec.deadline}s",
            usage=stream_usage,
        )
    if kind == _FAILED:
        if isinstance(payload, LLMError):
            if payload.usage is not None and stream_usage is not None:
                # the failed fallback's own report: the call spent the stream's tokens too
                payload.usage = _add(stream_usage, payload.usage)
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
