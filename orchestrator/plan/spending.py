"""What a plan may spend and has spent, in words a user reads: the refusal of a call that
would cross a budget, and the spent and remaining amounts a plan's view and its
``budget_exhausted`` outcome carry. Pure: the sums come from stored rows
(:mod:`storage.spend`, :mod:`storage.usage`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from storage.spend import Refusal


def dollars(amount: float) -> str:
    """US dollars: cents from a dollar up, else to the millionth that model calls need
    (``$0.50``, ``$0.010238``), never fewer than two decimals."""
    if amount >= 1:
        return f"${amount:,.2f}"
    whole, _, cents = f"{amount:.6f}".rstrip("0").partition(".")
    return f"${whole}.{cents.ljust(2, '0')}"


def refusal_message(refusal: Refusal, tenant: str) -> str:
    """Why a call was refused, with what was spent, what calls in flight hold and what is left."""
    if refusal.budget == "max_tokens":
        return (f"the plan's budget of {int(refusal.limit)} tokens (budget.max_tokens) is exhausted: "
                f"{int(refusal.spent)} spent, {int(refusal.reserved)} held by calls in flight, "
                f"{int(refusal.remaining)} left; this call needs up to {int(refusal.need)}")
    what = ("the plan's budget of " + dollars(refusal.limit) + " (budget.usd)" if refusal.budget == "usd" else
            f"tenant {tenant!r}'s budget of {dollars(refusal.limit)} for {refusal.month} (UTC)")
    return (f"{what} is exhausted: {dollars(refusal.spent)} spent, {dollars(refusal.reserved)} held by calls in "
            f"flight, {dollars(refusal.remaining)} left; this call needs up to {dollars(refusal.need)}")


@dataclass(frozen=True)
class BudgetView:
    """A plan's budget and what it has spent against it: every call on record, waste
    included (what the budget bounds). ``remaining_*`` is None where the budget sets no limit."""

    max_tokens: int | None
    usd: float | None
    spent_tokens: int
    spent_usd: float | None  # None: a call on record had no price
    remaining_tokens: int | None
    remaining_usd: float | None


def budget_view(budget: dict[str, Any] | None, spent_tokens: int, spent_usd: float | None) -> BudgetView | None:
    """The view of a stored plan's ``budget`` (None: the plan has none)."""
    if not budget:
        return None
    max_tokens, usd = budget.get("max_tokens"), budget.get("usd")
    return BudgetView(max_tokens=max_tokens, usd=usd, spent_tokens=spent_tokens, spent_usd=spent_usd,
                      remaining_tokens=None if max_tokens is None else max(0, max_tokens - spent_tokens),
                      remaining_usd=None if usd is None or spent_usd is None else max(0.0, usd - spent_usd))


def spent_text(cost_usd: float | None, budget: BudgetView | None) -> str:
    """What a plan spent in dollars (nothing when a call had no price) and, under a budget,
    what is left of it: the words ``conclave status`` and ``conclave run`` print."""
    out = "" if cost_usd is None else f"  {dollars(cost_usd)}"
    if budget is None:
        return out
    if budget.usd is not None:
        spent = "unpriced" if budget.spent_usd is None else dollars(budget.spent_usd)
        left = "" if budget.remaining_usd is None else f", {dollars(budget.remaining_usd)} left"
        out += f"  budget: {spent} spent of {dollars(budget.usd)}{left}"
    if budget.max_tokens is not None:
        out += f"  budget: {budget.spent_tokens:,} of {budget.max_tokens:,} tokens, {budget.remaining_tokens:,} left"
    return out


def exhausted_summary(view: BudgetView | None) -> str | None:
    """What a plan that ran out spent and has left, for its outcome (None: it has no budget)."""
    if view is None:
        return None
    parts = []
    if view.usd is not None:
        spent = "an unknown amount" if view.spent_usd is None else dollars(view.spent_usd)
        left = "" if view.remaining_usd is None else f", {dollars(view.remaining_usd)} left"
        parts.append(f"{spent} spent of {dollars(view.usd)}{left}")
    if view.max_tokens is not None:
        parts.append(f"{view.spent_tokens} tokens spent of {view.max_tokens}, {view.remaining_tokens} left")
    return "; ".join(parts)
