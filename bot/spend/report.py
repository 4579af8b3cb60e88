"""Usage reports as text: ``/usage`` in chat and ``switchboard usage`` for operators."""

from __future__ import annotations

import time
from collections.abc import Sequence

from bot.spend.budgets import BudgetGate
from bot.spend.ledger import SpendLedger, UsageLine, day_of, month_of
from bot.spend.prices import money, to_micros
from bot.spend.scope import Scope

#: How many top spenders an admin's ``/usage`` lists.
TOP_SPENDERS = 5


def period_bounds(now: float) -> dict[str, tuple[str, str]]:
    """``today`` and ``month`` as inclusive (first day, last day) strings."""
    day, month = day_of(now), month_of(now)
    return {"today": (day, day), "this month": (f"{month}-01", f"{month}-31")}


def total(lines: Sequence[UsageLine]) -> UsageLine:
    return UsageLine(
        "total",
        sum(x.turns for x in lines),
        sum(x.input_tokens for x in lines),
        sum(x.output_tokens for x in lines),
        sum(x.cached_tokens for x in lines),
        sum(x.cost_micros for x in lines),
    )


def line_text(line: UsageLine, currency: str) -> str:
    cached = f", {line.cached_tokens:,} cached" if line.cached_tokens else ""
    return (
        f"{money(line.cost_micros, currency)} — {line.turns} turn(s), "
        f"{line.input_tokens:,} in{cached} / {line.output_tokens:,} out"
    )


async def scope_summary(
    ledger: SpendLedger, gate: BudgetGate, scope: Scope, key: str, currency: str, now: float | None = None
) -> list[str]:
    """Today and this month for one owner or chat, with its budget where one is set."""
    now = time.time() if now is None else now
    out: list[str] = []
    limits = gate.limits(scope)
    for label, (since, until) in period_bounds(now).items():
        line = total(await ledger.report(group=None, since=since, until=until, where=(scope, key)))
        limit = limits.day if label == "today" else limits.month
        budget = f" (budget {money(to_micros(limit), currency)})" if limit is not None else ""
        out.append(f"{label.capitalize()}: {line_text(line, currency)}{budget}")
    return out


async def top_spenders(ledger: SpendLedger, currency: str, now: float | None = None) -> list[str]:
    since, until = period_bounds(time.time() if now is None else now)["this month"]
    lines = await ledger.report(group="owner", since=since, until=until, limit=TOP_SPENDERS)
    return [f"{i}. {line.label}: {line_text(line, currency)}" for i, line in enumerate(lines, 1)]
