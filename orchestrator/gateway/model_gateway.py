"""The model gateway: the one door through which every model call goes.

``Gateway.call`` fits the request to the model's window (``budget.fit_request``;
summariser calls go through this same door with ``purpose="summarise"`` and
their text is never shown to watchers), then runs the guarded stream
(``guard.guarded_call``), retrying ``RetryableError`` with exponential backoff
that honours ``retry_after`` (at most ``spec.max_retries`` retries). A
``FatalError`` is raised at once. A stream that broke after showing text is
not retried: the guard returns it as ``truncated`` and the caller decides.

Cross-cutting concerns (usage rows, budgets, cancellation checks, metrics) are
``CallHook`` subclasses, in the spirit of dramatiq's middleware: ``before_call``
runs before EVERY model call attempt (summaries and retries included) and may
refuse it by raising ``BudgetExhausted`` or ``CallCancelled``; ``after_call``
runs after every attempt that was made, with whatever usage is known (a
provider's figure, an estimate labelled as such, or None) and the error if it
failed; ``after_attempt`` then gets the attempt as measured (:class:`Attempt`:
its duration, when its first text was shown, how it ended, whether it is
retried). A call refused by ``before_call`` is followed by neither.

One attempt is one guarded call: the stream and, when the guard falls back to
it, the non-streaming ``complete()``; ``spec.deadline`` bounds each attempt.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from orchestrator.gateway.budget import fit_request
from orchestrator.gateway.failures import CallCancelled, LLMError, ProviderMisconfigured, RetryableError
from orchestrator.gateway.guard import guarded_call
from orchestrator.gateway.types import ChatRequest, Completion, ModelSpec, Provider, Usage
from orchestrator.gateway.watchdog import POLL_INTERVAL

logger = logging.getLogger(__name__)

__all__ = ["Attempt", "CallHook", "Gateway", "default_providers"]


@dataclass(frozen=True)
class Attempt:
    """One model call attempt as the gateway saw it, for hooks that measure (metrics)."""

    seconds: float  # from the request to the attempt's end (its fallback included)
    first_text: float | None  # seconds to the first text shown (a fallback's: its replay); None: none shown
    completion: Completion | None  # what it returned, or None when it failed
    error: LLMError | None
    usage: Usage | None  # the figure ``after_call`` got
    retry_in: float | None  # the gateway retries after this many seconds; None: it does not


class CallHook:
    """Base class of gateway hooks; every method is a no-op. Override what you need."""

    def before_call(self, spec: ModelSpec, request: ChatRequest) -> None:
        """Before every model call attempt. Raise BudgetExhausted / CallCancelled to refuse it."""

    def after_call(
        self, spec: ModelSpec, request: ChatRequest, usage: Usage | None, error: LLMError | None
    ) -> None:
        """After every attempt that was made, successful or not, with whatever usage is known."""

    def after_attempt(self, spec: ModelSpec, request: ChatRequest, attempt: Attempt) -> None:
        """After ``after_call``, with the attempt as measured."""


def _discard(text: str) -> None:
    """on_text for summariser calls: their text is not for watchers."""


class _Timed:
    """One attempt's ``on_text``: passes text on and remembers when the first reached the caller."""

    def __init__(self, on_text: Callable[[str], None]) -> None:
        self._on_text = on_text
        self._started = time.monotonic()
        self._first: float | None = None

    def __call__(self, text: str) -> None:
        if self._first is None:
            self._first = time.monotonic() - self._started
        self._on_text(text)

    def attempt(self, completion: Completion | None, error: LLMError | None, usage: Usage | None,
                retry_in: float | None) -> Attempt:
        return Attempt(time.monotonic() - self._started, self._first, completion, error, usage, retry_in)


class Gateway:
    backoff_base = 1.0  # seconds before the first retry when the provider gives no Retry-After
    backoff_max = 30.0
    max_retry_after = 120.0  # a longer Retry-After is not waited for: the error is raised

    def __init__(
        self,
        providers: Mapping[str, Provider],
        hooks: Sequence[CallHook] = (),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._providers = dict(providers)
        self._hooks = tuple(hooks)
        self._sleep = sleep

    def provider(self, spec: ModelSpec) -> Provider:
        try:
            return self._providers[spec.provider]
        except KeyError:
            known = ", ".join(sorted(self._providers)) or "none"
            raise ProviderMisconfigured(
                f"model {spec.name!r} uses unknown provider {spec.provider!r}; known providers: {known}"
            ) from None

    def call(
        self,
        spec: ModelSpec,
        request: ChatRequest,
        *,
        on_text: Callable[[str], None] = lambda s: None,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> Completion:
        """One model call, top-down: its provider, its request fitted to the model's window
        (each summary that takes is a call of its own, through the same attempts), then its
        attempts."""
        provider = self.provider(spec)
        summarise = partial(self._attempts, provider, spec, on_text=_discard, should_stop=should_stop)
        fitted = fit_request(spec, request, summarise)
        return self._attempts(provider, spec, fitted, on_text=on_text, should_stop=should_stop)

    def _attempts(
        self,
        provider: Provider,
        spec: ModelSpec,
        request: ChatRequest,
        *,
        on_text: Callable[[str], None],
        should_stop: Callable[[], bool],
    ) -> Completion:
        """Guarded attempts, each let through by the hooks and told to them, until one returns
        or fails for good; a retryable failure is tried again after its back-off."""
        retries, delay = 0, 0.0
        while True:
            self._back_off(delay, should_stop, spec)  # nothing to wait before the first attempt
            if should_stop():
                raise CallCancelled(f"model {spec.name!r}: cancelled before the call")
            for hook in self._hooks:
                hook.before_call(spec, request)
            timed = _Timed(on_text)
            failure: BaseException | None = None
            try:
                completion = guarded_call(provider, spec, request, on_text=timed, should_stop=should_stop)
            except LLMError as exc:
                if exc.detail:  # what the provider said, redacted: the worker's log only, never stored
                    logger.warning("action=llm_upstream_error model=%s purpose=%s code=%s reason=%s upstream=%s",
                                   spec.name, request.purpose, exc.code, exc.message, exc.detail)
                retry_in = self._retry_delay(spec, exc, retries)
                failure, attempt = exc, timed.attempt(None, exc, exc.usage, retry_in)
            except Exception as exc:  # not the gateway's: the hooks are told its type, and it is raised as it is
                error = LLMError(f"{type(exc).__name__} during the call")
                failure, attempt = exc, timed.attempt(None, error, None, None)
            else:
                attempt = timed.attempt(completion, None, completion.usage, None)
            self._after(spec, request, attempt)  # the one point where the hooks hear of an attempt
            if failure is None:
                return completion
            if attempt.retry_in is None:
                raise failure
            assert attempt.error is not None  # only the gateway's own errors are retried
            retries, delay = retries + 1, attempt.retry_in
            logger.warning(
                "action=llm_retry model=%s purpose=%s retry=%d delay=%.2f code=%s",
                spec.name,
                request.purpose,
                retries,
                delay,
                attempt.error.code,
            )

    def _after(self, spec: ModelSpec, request: ChatRequest, attempt: Attempt) -> None:
        for hook in self._hooks:
            hook.after_call(spec, request, attempt.usage, attempt.error)
        for hook in self._hooks:
            hook.after_attempt(spec, request, attempt)

    def _retry_delay(self, spec: ModelSpec, exc: LLMError, retries: int) -> float | None:
        """Seconds to wait before the next attempt, or None when it must not be retried."""
        if not isinstance(exc, RetryableError) or retries >= spec.max_retries:
            return None
        if exc.retry_after is not None:
            return exc.retry_after if exc.retry_after <= self.max_retry_after else None
        delay = min(self.backoff_max, self.backoff_base * 2**retries)
        return delay * random.uniform(0.8, 1.0)  # jitter: a fleet must not retry in lockstep

    def _back_off(self, delay: float, should_stop: Callable[[], bool], spec: ModelSpec) -> None:
        """Sleeps ``delay`` in slices so that a cancellation is noticed promptly."""
        remaining = delay
        while remaining > 0:
            if should_stop():
                raise CallCancelled(f"model {spec.name!r}: cancelled while backing off")
            step = min(remaining, POLL_INTERVAL * 2)
            self._sleep(step)
            remaining -= step


def default_providers(offline: Provider | None = None, *, testing: bool = False) -> dict[str, Provider]:
    """The built-in providers by name; "offline" too when given or importable (its fault
    switches on only with ``testing``: the process's own ``CONCLAVE_TESTING``)."""
    from orchestrator.gateway.providers.anthropic import AnthropicProvider
    from orchestrator.gateway.providers.ollama import OllamaProvider
    from orchestrator.gateway.providers.openai import OpenAIProvider

    providers: dict[str, Provider] = {
        "openai": OpenAIProvider(),
        "ollama": OllamaProvider(),
        "anthropic": AnthropicProvider(),
    }
    if offline is None:
        try:
            from orchestrator.gateway.providers.offline import OfflineProvider
        except ImportError:
            logger.debug("action=offline_provider_unavailable")
        else:
            offline = OfflineProvider(testing=testing)
    if offline is not None:
        providers["offline"] = offline
    return providers
