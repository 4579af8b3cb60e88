"""Token usage and cost per person for the console: ``agent_thread_usage`` joined to the conversations
it belongs to, and what their turns cost today and this month from the spend ledger (bot/spend/).

Why here and not in :mod:`agent.usage`: the owner of a thread is the bot's knowledge (its conversations
table); ``agent`` must not import it.
"""

from __future__ import annotations

import time
from collections import defaultdict

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from agent.tables import thread_usage
from bot.console.models import UsageOut
from bot.spend.ledger import day_of, month_of
from bot.spend.prices import format_micros
from bot.spend.tables import spend_daily
from bot.threads import conversations_table


async def cost_by_owner(engine: AsyncEngine, now: float) -> dict[str, tuple[int, int]]:
    """(today, this month) in millionths of the currency, per person with spending this month."""
    d = spend_daily.c
    today, month = day_of(now), month_of(now)
    query = (
        select(d.owner, d.day, func.sum(d.cost_micros))
        .where(d.day >= f"{month}-01", d.day <= f"{month}-31")
        .group_by(d.owner, d.day)
    )
    async with engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    costs: dict[str, tuple[int, int]] = {}
    for owner, day, micros in rows:
        on_day, in_month = costs.get(owner, (0, 0))
        costs[owner] = (on_day + (int(micros) if day == today else 0), in_month + int(micros))
    return costs


async def usage_by_owner(
    engine: AsyncEngine, limit: int, currency: str, now: float | None = None
) -> list[UsageOut]:
    """Most tokens first; threads abandoned by ``/new`` no longer have an owner here and are left out."""
    u, c = thread_usage.c, conversations_table.c
    # Summed in SQL per (person, model): the rows that reach Python are few even over many threads.
    query = (
        select(
            c.owner,
            u.model,
            func.count(),
            func.sum(u.turns),
            func.sum(u.total_input_tokens),
            func.sum(u.total_output_tokens),
            func.max(u.updated_at),
        )
        .join(conversations_table, c.thread_id == u.thread_id)
        .group_by(c.owner, u.model)
    )
    async with engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    costs = await cost_by_owner(engine, time.time() if now is None else now)
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0, 0, 0.0])
    models: dict[str, set[str]] = defaultdict(set)
    for owner, model, threads, turns, tokens_in, tokens_out, updated_at in rows:
        total = totals[owner]
        total[0] += threads
        total[1] += turns
        total[2] += tokens_in
        total[3] += tokens_out
        total[4] = max(total[4], updated_at)
        models[owner].add(model)
    out = [
        UsageOut(
            owner=owner,
            threads=int(t[0]),
            turns=int(t[1]),
            input_tokens=int(t[2]),
            output_tokens=int(t[3]),
            models=sorted(models[owner]),
            last_used_at=float(t[4]),
            cost_today=format_micros(costs.get(owner, (0, 0))[0]),
            cost_month=format_micros(costs.get(owner, (0, 0))[1]),
            currency=currency,
        )
        for owner, t in totals.items()
    ]
    out.sort(key=lambda row: (-(row.input_tokens + row.output_tokens), row.owner))
    return out[:limit]
