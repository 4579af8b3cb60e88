"""``switchboard webhooks list [--failed]`` and ``switchboard webhooks retry DELIVERY_ID``.

Retry does not talk to the running server directly: it marks the stored delivery ``retry`` in the
shared database and the service (any instance) claims it on its next poll, runs the same fan-out as a
fresh delivery, and records the outcome, which this command waits for and prints. If no service is
running, the delivery runs when one starts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from bot.clicmds._list_retry import age, register_list_retry
from config.schema import Settings

EXIT_FAILED = 1


async def _open_store(settings: Settings) -> tuple[Any, Any]:
    from bot.db import Database
    from webhooks.store import DeliveryStore, metadata

    db = Database(settings.database.url)
    async with db.engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    return db, DeliveryStore(db.engine, is_sqlite=db.is_sqlite)


def _summary(delivery: Any) -> str:
    """Who fired and as whom (``reviewer as member: author_association MEMBER``), or why nobody did."""
    if delivery.error:
        return delivery.error[:80]
    dispatch = delivery.dispatch or {}
    fired = dispatch.get("fired", [])
    if fired:
        levels = {t.get("agent"): t for t in dispatch.get("trust", [])}
        shown = []
        for name in fired:
            trust = levels.get(name)
            shown.append(f"{name} as {trust['level']} ({trust['why']})" if trust else name)
        return "fired: " + ", ".join(shown)
    reasons = "; ".join(f"{s.get('agent')}: {s.get('reason')}" for s in dispatch.get("skipped", []))
    return "fired: -" + (f" ({reasons})" if reasons else "")


async def _list(settings: Settings, failed: bool, limit: int) -> int:
    db, store = await _open_store(settings)
    try:
        deliveries = await store.list(failed_only=failed, limit=limit)
    finally:
        await db.close()
    if not deliveries:
        print("no failed deliveries" if failed else "no deliveries recorded")
        return 0
    now = time.time()
    print(f"{'DELIVERY':38} {'EVENT':28} {'STATUS':9} {'TRIES':>5} {'AGE':>5}  DETAIL")
    for d in deliveries:
        event = f"{d.event}.{d.action}" if d.action else d.event
        status = "stuck" if d.stuck else d.status
        print(f"{d.id:38} {event:28} {status:9} {d.attempts:>5} {age(now - d.created_at):>5}  {_summary(d)}")
    return 0


async def _retry(settings: Settings, delivery_id: str, wait: float) -> int:
    from webhooks.store import RECEIVED, RETRY

    db, store = await _open_store(settings)
    try:
        before = await store.get(delivery_id)
        if before is None:
            print(f"unknown delivery {delivery_id}")
            return EXIT_FAILED
        if not await store.request_retry(delivery_id):
            now = await store.get(delivery_id)
            state = now.status if now else "unknown"
            print(f"delivery {delivery_id} is {state}; only failed or stuck deliveries can be retried")
            return EXIT_FAILED
        print(f"queued {delivery_id} ({before.event}) for retry")
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            current = await store.get(delivery_id)
            if current is None or current.status in (RETRY, RECEIVED):
                continue
            if current.status == "failed":
                print(f"retry failed: {current.error}")
                return EXIT_FAILED
            fired = ", ".join((current.dispatch or {}).get("fired", [])) or "no agent (already delivered)"
            print(f"retried: {fired}")
            return 0
        print(
            f"still queued after {wait:g}s: no running service has picked it up yet; "
            "it runs when `switchboard serve` is running"
        )
        return 0
    finally:
        await db.close()


def register(subparsers: Any, load_or_exit: Callable[[str | None], Settings]) -> None:
    register_list_retry(
        subparsers,
        load_or_exit,
        name="webhooks",
        help="GitHub webhook deliveries: list and retry",
        list_help="recent deliveries, newest first",
        failed_help="only failed (or stuck) deliveries",
        retry_help="re-run a failed delivery through the running service",
        id_name="delivery_id",
        lister=_list,
        retrier=_retry,
    )
