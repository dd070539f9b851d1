"""What the budget tests share: a registry with a priced offline model whose worst case is
known in advance, and a team of independent phases on it.

The price makes the arithmetic exact: input tokens are free, output tokens cost
``OUTPUT_PRICE`` per million and every call pays ``PER_CALL``. A call reserves
``WORST`` (``MAX_OUTPUT`` tokens of output, the fee) and spends a little less: the offline
model writes a few hundred tokens, well under ``MAX_OUTPUT`` (it does not stop at a model's
``max_output_tokens`` as a provider does, so its worst case must be above what it writes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

OUTPUT_PRICE = 1.0  # US dollars per million output tokens
PER_CALL = 0.01  # US dollars per call
MAX_OUTPUT = 1000  # tokens a call may write: its worst case
WORST = MAX_OUTPUT * OUTPUT_PRICE / 1_000_000 + PER_CALL  # what each call reserves


def priced_registry(directory: Path, *, latency: float = 0.0, words: int = 30, **options: Any) -> Path:
    """``priced``: the offline model at the price above; ``free``: the offline model, unpriced."""
    path = directory / "priced-models.yaml"
    offline = {"words": words, "latency": latency, **options}
    path.write_text(yaml.safe_dump({"models": {
        "priced": {"provider": "offline", "max_output_tokens": MAX_OUTPUT, "options": offline,
                   "price": {"input": 0.0, "output": OUTPUT_PRICE, "per_call": PER_CALL}},
        "free": {"provider": "offline", "max_output_tokens": MAX_OUTPUT, "options": offline},
    }}))
    return path


def wide_team(phases: int, *, budget: dict[str, Any] | None, model: str = "priced",
              title: str = "Wide team") -> dict[str, Any]:
    """``phases`` independent phases and a synthesis, every one a call of ``model``."""
    experts = ["Ada", "Bo", "Cy", "Di"]
    plan: dict[str, Any] = {
        "kind": "team", "title": title, "divergence": "off",
        "question": "Should Ledgerly move to usage-based pricing next quarter?",
        "experts": [{"name": n, "role": "Analyst", "model": model} for n in experts]
        + [{"name": "Lead", "role": "Lead expert", "model": model}],
        "phases": [{"id": f"p{i:02d}", "expert": experts[i % len(experts)],
                    "prompt": f"Estimate one effect of the change (angle {i})."} for i in range(phases)],
        "synthesis": {"expert": "Lead"},
    }
    if budget is not None:
        plan["budget"] = budget
    return plan
