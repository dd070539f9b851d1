"""Whether this process holds the credentials a model's calls will read — asked before a
run whose phases this process makes (embedded mode), so that a missing key refuses the run
naming the model and the variable instead of failing its phases one after another.

The same rules as the call itself (:func:`~orchestrator.gateway.providers.http.api_key`,
:func:`~orchestrator.gateway.providers.http.extra_headers`, each provider's
``key_required``): a variable named by ``api_key_env`` or by a configured header must be set
and not empty. Only variables' names are ever returned, never a value.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from orchestrator.gateway.providers.anthropic import AnthropicProvider
from orchestrator.gateway.providers.http_provider import HttpProvider
from orchestrator.gateway.providers.ollama import OllamaProvider
from orchestrator.gateway.providers.openai import OpenAIProvider
from orchestrator.gateway.types import ModelSpec

_NETWORK: dict[str, type[HttpProvider]] = {p.name: p for p in (OpenAIProvider, AnthropicProvider, OllamaProvider)}


@dataclass(frozen=True)
class Unset:
    """A credential a call of the model needs and this environment lacks."""

    variable: str | None  # None: the model names no variable at all (it needs api_key_env)
    what: str  # "OPENAI_API_KEY (its api_key_env)"

    def __str__(self) -> str:
        return f"{self.what}, which is not set" if self.variable else self.what


def unset_credentials(spec: ModelSpec) -> list[Unset]:
    """What a call of ``spec`` from this process would lack now (empty: nothing); the
    offline model and unknown providers need nothing here (the gateway refuses the latter)."""
    provider = _NETWORK.get(spec.provider)
    if provider is None:
        return []
    missing = []
    if spec.api_key_env:
        if not os.environ.get(spec.api_key_env):
            missing.append(Unset(spec.api_key_env, f"{spec.api_key_env} (its api_key_env)"))
    elif provider.key_required(spec):
        missing.append(Unset(None, f"api_key_env, the variable that holds its {spec.provider} key"))
    for header, variable in spec.headers.items():
        if not os.environ.get(variable):
            missing.append(Unset(variable, f"{variable} (the value of its {header} header)"))
    return missing
