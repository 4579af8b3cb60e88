"""``switchboard usage``: what turns cost, for operators, straight from the database (docs/budgets.md).

Grouped ``--by`` owner (default), chat, agent, schedule or model, for today, this month or any range of
UTC days; ``--json`` for scripts. It reads the shared database and does not need the service running.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from config.schema import Settings

EXIT_USAGE = 2
DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
GROUPS = ("owner", "chat", "agent", "schedule", "model")


async def report(settings: Settings, by: str, since: str, until: str, limit: int, as_json: bool) -> int:
    from bot.db import Database
    from bot.spend import tables
    from bot.spend.keeper import currency_of
    from bot.spend.ledger import SpendLedger
    from bot.spend.prices import MICROS, money
    from bot.spend.report import line_text, total
    from bot.spend.scope import SCOPES, Scope

    db = Database(settings.database.url)
    try:
        async with db.engine.begin() as conn:  # a database the service never used reports nothing
            await conn.run_sync(tables.metadata.create_all)
        scopes: dict[str, Scope] = {scope: scope for scope in SCOPES}  # "model" groups by model
        lines = await SpendLedger(db).report(group=scopes.get(by), since=since, until=until, limit=limit)
    finally:
        await db.close()
    currency = currency_of(settings)
    if as_json:
        rows = [
            {
                by: line.label,
                "turns": line.turns,
                "input_tokens": line.input_tokens,
                "output_tokens": line.output_tokens,
                "cached_tokens": line.cached_tokens,
                "cost": str(Decimal(line.cost_micros) / MICROS),
                "currency": currency,
            }
            for line in lines
        ]
        print(json.dumps({"since": since, "until": until, "by": by, "rows": rows}, indent=2))
        return 0
    if not lines:
        print(f"nothing spent from {since} to {until}")
        return 0
    width = max(len(line.label) for line in lines)
    for line in lines:
        print(f"{line.label:<{width}}  {line_text(line, currency)}")
    print(f"{'total':<{width}}  {money(total(lines).cost_micros, currency)} (of the rows shown)")
    return 0


def _range(args: Any) -> tuple[str, str] | None:
    """The report's first and last day, or None (and a line on stderr) when one is not a day."""
    from bot.spend.ledger import day_of, month_of

    now = time.time()
    if args.since or args.until:
        since, until = args.since or args.until, args.until or day_of(now)
    elif args.month:
        since, until = f"{month_of(now)}-01", f"{month_of(now)}-31"
    else:
        since = until = day_of(now)
    for value in (since, until):
        if not DAY.match(value):
            print(f"switchboard usage: {value!r} is not a day (YYYY-MM-DD)", file=sys.stderr)
            return None
    return since, until


def register(subparsers: Any, load_or_exit: Callable[[str | None], Settings]) -> None:
    parser = subparsers.add_parser("usage", help="what turns cost, by owner, chat, agent, schedule or model")
    parser.add_argument("--by", choices=GROUPS, default="owner", help="group rows by this (default: owner)")
    parser.add_argument("--month", action="store_true", help="this UTC month (default: today)")
    parser.add_argument("--since", help="first UTC day, YYYY-MM-DD")
    parser.add_argument("--until", help="last UTC day, YYYY-MM-DD (default: today)")
    parser.add_argument("--limit", type=int, default=50, help="most rows to show, largest first (default 50)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--config", help="path to config.yaml")

    def run(a: Any) -> int:
        days = _range(a)
        if days is None:
            return EXIT_USAGE
        since, until = days
        return asyncio.run(report(load_or_exit(a.config), a.by, since, until, a.limit, a.json))

    parser.set_defaults(func=run)
