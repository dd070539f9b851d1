"""The vocabulary shared by the gateway, the providers and the phase task.

A request is structured, not a flat list of messages: the earlier material an
expert must read (``context``) is kept apart from its instructions, so that the
context budget can summarise the oldest blocks when the whole request does not
fit the model's window, and so that a synthesis can cite each block by the
phase id it came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from orchestrator.gateway.token_usage import Usage

if TYPE_CHECKING:
    from orchestrator.gateway.egress import EgressPolicy

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class Message:
    role: Role
    content: str


@dataclass(frozen=True)
class ModelSpec:
    """One named model configuration, with settings defaults applied.

    ``api_key_env`` names an environment variable; the key itself is read at
    call time and never stored, logged or echoed. ``headers`` maps extra HTTP
    header names to the environment variables holding their values (read the
    same way). Only operator-registered models carry headers.

    ``trusted`` says the operator configured this model (the registry, or a plan
    in embedded mode, where the user is the operator). An untrusted spec (a
    plan-defined model in a cluster) reaches the network only through
    ``egress`` (:mod:`orchestrator.gateway.egress`); without one, every call is refused.
    Only :mod:`orchestrator.plan.registry` builds the specs of real phases.
    """

    name: str
    provider: str
    model: str = ""
    base_url: str | None = None
    api_key_env: str | None = None
    first_chunk_timeout: float = 30.0
    idle_timeout: float = 30.0
    deadline: float = 300.0
    max_output_tokens: int = 1024
    context_window: int = 32768
    temperature: float | None = None
    max_retries: int = 3
    options: Mapping[str, Any] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    trusted: bool = False
    egress: EgressPolicy | None = None
    #: US dollars per million (input, output) tokens and per call (a fee billed on every call,
    #: whatever its tokens; 0 when the provider charges none), from the operator's registry only
    price: tuple[float, float, float] | None = None

    def cost(self, used: Usage) -> float | None:
        """What one call's usage cost in US dollars; None for a model without a price."""
        return self.tokens_cost(used.input_tokens, used.output_tokens)

    def tokens_cost(self, input_tokens: int, output_tokens: int) -> float | None:
        """What a call of so many tokens costs in US dollars (its per-call fee included);
        None for a model without a price — never free."""
        if self.price is None:
            return None
        per_input, per_output, per_call = self.price
        return (input_tokens * per_input + output_tokens * per_output) / 1_000_000 + per_call


@dataclass(frozen=True)
class ContextBlock:
    """Earlier material an expert reads: a phase's full output, or a summary of it."""

    source: str  # the phase key it came from ("r1.alice", "debate-1.bob", …)
    title: str
    text: str
    summarised: bool = False


@dataclass(frozen=True)
class ChatRequest:
    """What one model call is asked.

    ``hints`` carries structured facts about the call (phase kind, expert,
    role, topic, round, who spoke before) for providers that cannot read
    prose — the offline provider. Network providers ignore it.
    """

    system: str
    prompt: str
    context: tuple[ContextBlock, ...] = ()
    purpose: str = "phase"  # phase | summarise | divergence
    hints: Mapping[str, Any] = field(default_factory=dict)

    def messages(self) -> list[Message]:
        parts = [f"### {b.title} [{b.source}]\n{b.text}" for b in self.context]
        parts.append(self.prompt)
        return [Message("system", self.system), Message("user", "\n\n".join(parts))]


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class UsageReport:
    usage: Usage


StreamEvent = TextDelta | UsageReport


@dataclass(frozen=True)
class Completion:
    text: str
    usage: Usage
    truncated: bool = False  # the stream broke after partial output; text is what was shown
    fallback: bool = False  # produced by the non-streaming fallback and replayed as chunks
    finish_reason: str | None = None
    fallback_reason: str | None = None  # why the stream was given up: first_chunk_timeout | error | end (empty)


class Provider(Protocol):
    """A model backend. ``stream`` yields events and must be closable
    (a generator): the guard closes it on timeout or cancellation."""

    def stream(self, spec: ModelSpec, request: ChatRequest) -> Any: ...

    def complete(self, spec: ModelSpec, request: ChatRequest) -> Completion: ...
