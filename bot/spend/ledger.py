"""The spend ledger: add a turn's cost to its day row; read sums for budgets, ``/usage`` and the CLI.

A turn's row is found by its whole primary key and incremented in SQL, so two instances adding to the
same row lose nothing; the first turn of a row inserts it, and an insert that loses the race to another
instance's becomes the increment.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import and_, case, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from bot.engine import HasEngine
from bot.spend.scope import Scope, SpendKey
from bot.spend.tables import budget_marks, spend_daily


def day_of(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d")


def month_of(now: float) -> str:
    return day_of(now)[:7]


@dataclass(frozen=True, slots=True)
class Spent:
    """Micro-units spent today and this month in one scope."""

    day: int
    month: int


@dataclass(frozen=True, slots=True)
class UsageLine:
    """One group of a usage report: its label, turns, tokens and cost."""

    label: str
    turns: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cost_micros: int


class SpendLedger:
    def __init__(self, db: HasEngine) -> None:
        self.db = db

    async def record(
        self,
        key: SpendKey,
        model: str,
        *,
        input_tokens: int,
        output_tokens: int,
        cached_tokens: int,
        cost_micros: int,
        now: float | None = None,
    ) -> None:
        day = day_of(time.time() if now is None else now)
        row = spend_daily.c
        where = and_(
            row.day == day,
            row.owner == key.owner,
            row.chat == key.chat,
            row.agent == key.agent,
            row.schedule == key.schedule,
            row.model == model,
        )
        add = (
            update(spend_daily)
            .where(where)
            .values(
                input_tokens=row.input_tokens + input_tokens,
                output_tokens=row.output_tokens + output_tokens,
                cached_tokens=row.cached_tokens + cached_tokens,
                cost_micros=row.cost_micros + cost_micros,
                turns=row.turns + 1,
            )
        )
        async with self.db.engine.begin() as conn:
            if (await conn.execute(add)).rowcount:
                return
        try:
            async with self.db.engine.begin() as conn:
                await conn.execute(
                    insert(spend_daily).values(
                        day=day,
                        owner=key.owner,
                        chat=key.chat,
                        agent=key.agent,
                        schedule=key.schedule,
                        model=model,
                        input_tokens=input_tokens,
                        output_tokens=output_tokens,
                        cached_tokens=cached_tokens,
                        cost_micros=cost_micros,
                        turns=1,
                    )
                )
        except IntegrityError:  # another instance inserted the row first: add to it
            async with self.db.engine.begin() as conn:
                await conn.execute(add)

    async def spent(self, scope: Scope, value: str, now: float) -> Spent:
        """Today's and this month's spending in one scope: one read over the scope's ``(key, day)`` index."""
        day, month = day_of(now), month_of(now)
        column = spend_daily.c[scope]
        cost = spend_daily.c.cost_micros
        query = select(
            func.coalesce(func.sum(cost), 0),
            func.coalesce(func.sum(case((spend_daily.c.day == day, cost), else_=0)), 0),
        ).where(column == value, spend_daily.c.day >= f"{month}-01", spend_daily.c.day <= f"{month}-31")
        async with self.db.engine.connect() as conn:
            month_total, day_total = (await conn.execute(query)).one()
        return Spent(day=int(day_total), month=int(month_total))

    async def report(
        self,
        *,
        group: Scope | None,
        since: str,
        until: str,
        where: tuple[Scope, str] | None = None,
        limit: int = 20,
    ) -> list[UsageLine]:
        """Usage between two days (inclusive), summed per ``group`` (or per model when None), largest first."""
        c = spend_daily.c
        label = c[group] if group is not None else c.model
        query = (
            select(
                label,
                func.sum(c.turns),
                func.sum(c.input_tokens),
                func.sum(c.output_tokens),
                func.sum(c.cached_tokens),
                func.sum(c.cost_micros),
            )
            .where(c.day >= since, c.day <= until)
            .group_by(label)
            .order_by(func.sum(c.cost_micros).desc(), label)
            .limit(limit)
        )
        if where is not None:
            query = query.where(c[where[0]] == where[1])
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [UsageLine(str(r[0]), *(int(v or 0) for v in r[1:])) for r in rows]

    async def has_mark(self, period: str, scope: Scope, key: str, kind: str) -> bool:
        m = budget_marks.c
        query = select(m.at).where(m.period == period, m.scope == scope, m.key == key, m.kind == kind)
        async with self.db.engine.connect() as conn:
            return (await conn.execute(query)).first() is not None

    async def mark_once(
        self, period: str, scope: Scope, key: str, kind: str, *, owner: str, by: str | None = None
    ) -> bool:
        """Record a mark; False when it was already there (so a warning is sent once, cluster-wide)."""
        try:
            async with self.db.engine.begin() as conn:
                await conn.execute(
                    insert(budget_marks).values(
                        period=period, scope=scope, key=key, kind=kind, owner=owner, by=by, at=time.time()
                    )
                )
        except IntegrityError:
            return False
        return True
