"""``switchboard webhooks list [--failed]`` and ``switchboard webhooks retry DELIVERY_ID``.

Retry does not talk to the running server directly: it marks the stored delivery ``retry`` in the
shared database and the service (any instance) claims it on its next poll, runs the same fan-out as a
fresh delivery, and records the outcome, which this command waits for and prints. If no service is
running, the delivery runs when one starts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from bot.clicmds._list_retry import EXIT_FAILED, age, register_list_retry, retry_and_wait
from config.schema import Settings


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


async def _list(store: Any, failed: bool, limit: int) -> int:
    deliveries = await store.list(failed_only=failed, limit=limit)
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


async def _retry(store: Any, delivery_id: str, wait: float) -> int:
    from webhooks.store import RECEIVED, RETRY

    def outcome(current: Any) -> tuple[int, str] | None:
        if current.status in (RETRY, RECEIVED):
            return None
        if current.status == "failed":
            return EXIT_FAILED, f"retry failed: {current.error}"
        fired = ", ".join((current.dispatch or {}).get("fired", [])) or "no agent (already delivered)"
        return 0, f"retried: {fired}"

    return await retry_and_wait(
        store,
        delivery_id,
        wait,
        noun="delivery",
        retryable="failed or stuck deliveries",
        label=lambda before: before.event,
        outcome=outcome,
        pending="still queued after {wait}s: no running service has picked it up yet; "
        "it runs when `switchboard serve` is running",
    )


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
        opener=_open_store,
        lister=_list,
        retrier=_retry,
    )
