"""Budgets: which limits a turn's scopes have reached, the one-time warning, and a raise for the day.

A limit is reached when what was spent in the period is at least the limit (a turn that starts below it
may end above it: costs are known only once a turn is over, so the next one stops). An admin's raise
lifts every reached limit of that scope and key — day and month — for the rest of the UTC day.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

from bot.spend.ledger import SpendLedger, day_of, month_of
from bot.spend.prices import money, to_micros
from bot.spend.scope import SCOPES, Scope, SpendKey
from config.schema import BudgetLimits, BudgetsConfig, Settings

Period = Literal["day", "month"]
RAISED, WARNED = "raised", "warned"


@dataclass(frozen=True, slots=True)
class Reached:
    """One limit at (or past) a threshold: which scope and key, which period, the limit and the spending."""

    scope: Scope
    key: str
    period: Period
    limit: int
    spent: int

    def whose(self, person: str | None = None) -> str:
        """Whose limit, in words; ``person`` names the owner where "your" would be unclear (a group)."""
        name = {"day": "daily", "month": "monthly"}[self.period]
        if self.scope == "owner":
            return f"{person}'s {name} budget" if person else f"your {name} budget"
        if self.scope == "chat":
            return f"this chat's {name} budget"
        if self.scope == "agent":
            return f"the {name} budget of agent {self.key}"
        return f"the {name} budget of scheduled task {self.key}"

    def amounts(self, currency: str) -> str:
        when = "today" if self.period == "day" else "this month"
        return f"{money(self.spent, currency)} of {money(self.limit, currency)} {when}"


class BudgetGate:
    def __init__(self, settings: Settings, ledger: SpendLedger) -> None:
        self.settings = settings
        self.ledger = ledger

    @property
    def config(self) -> BudgetsConfig:
        """Read at every check, so a ``SIGHUP`` that changes ``budgets:`` applies to the next turn."""
        return self.settings.budgets

    def limits(self, scope: Scope) -> BudgetLimits:
        return {
            "owner": self.config.per_owner,
            "chat": self.config.per_chat,
            "agent": self.config.per_agent,
            "schedule": self.config.per_schedule,
        }[scope]

    @property
    def enabled(self) -> bool:
        return any(self._limited(scope) for scope in SCOPES)

    def _limited(self, scope: Scope) -> bool:
        limits = self.limits(scope)
        return limits.day is not None or limits.month is not None

    async def _levels(self, key: SpendKey, now: float) -> list[tuple[Scope, str, Period, int, int]]:
        """(scope, key, period, limit, spent) for every configured limit of the turn's scopes."""
        out: list[tuple[Scope, str, Period, int, int]] = []
        for scope in SCOPES:
            value = key.value(scope)
            if not value or not self._limited(scope):
                continue
            spent = await self.ledger.spent(scope, value, now)
            limits = self.limits(scope)
            if limits.day is not None:
                out.append((scope, value, "day", to_micros(limits.day), spent.day))
            if limits.month is not None:
                out.append((scope, value, "month", to_micros(limits.month), spent.month))
        return out

    async def reached(self, key: SpendKey, now: float | None = None) -> list[Reached]:
        """The limits this turn's scopes have reached and nobody raised today (empty: it may run)."""
        now = time.time() if now is None else now
        reached = [Reached(*level) for level in await self._levels(key, now) if level[4] >= level[3]]
        return [r for r in reached if not await self.ledger.has_mark(day_of(now), r.scope, r.key, RAISED)]

    async def raise_for_today(
        self, reached: list[Reached], owner: str, by: str, now: float | None = None
    ) -> None:
        day = day_of(time.time() if now is None else now)
        for r in reached:
            await self.ledger.mark_once(day, r.scope, r.key, RAISED, owner=owner, by=by)

    async def newly_warned(self, key: SpendKey, now: float | None = None) -> list[Reached]:
        """Limits that crossed ``warn_at_percent`` and were not warned about in this period before.

        Each is marked as it is returned, so the person is told once per period, also across a cluster."""
        now = time.time() if now is None else now
        out: list[Reached] = []
        for scope, value, period, limit, spent in await self._levels(key, now):
            if limit <= 0 or spent * 100 < limit * self.config.warn_at_percent:
                continue
            mark = day_of(now) if period == "day" else month_of(now)
            if await self.ledger.mark_once(mark, scope, value, WARNED, owner=key.owner):
                out.append(Reached(scope, value, period, limit, spent))
        return out
