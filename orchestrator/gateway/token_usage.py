"""What one model call spent. Its own module so that :mod:`orchestrator.gateway.failures` (which
carries usage on errors) and :mod:`orchestrator.gateway.types` need not import each other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Usage:
    """Tokens one call spent. ``source`` says whether the provider reported
    them or we estimated them (and ``method`` says how)."""

    input_tokens: int
    output_tokens: int
    source: Literal["provider", "estimated"]
    method: str | None = None

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens
