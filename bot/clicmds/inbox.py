"""``switchboard inbox list [--failed]`` and ``switchboard inbox retry ENTRY_ID``.

A message that failed ``bus.max_attempts`` times is dead-lettered: set aside, never run again by itself,
and listed here. Like ``switchboard webhooks retry``, retry does not talk to the running server: it marks
the stored entry ``retry`` (attempts reset) in the shared database, the service (any instance) claims it
on its next poll and runs it as if it had just arrived, and this command waits for and prints the outcome.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bot.clicmds._list_retry import EXIT_FAILED, age, register_list_retry, retry_and_wait
from config.schema import Settings

if TYPE_CHECKING:
    from bot.db import Database
    from bot.inbox import Inbox, InboxEntry


async def _open_inbox(settings: Settings) -> tuple[Database, Inbox]:
    from bot.db import Database
    from bot.inbox import Inbox, metadata

    db = Database(settings.database.url)
    async with db.engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    return db, Inbox(db, max_attempts=settings.bus.max_attempts)


def _where(entry: InboxEntry) -> str:
    m = entry.message
    return f"{m.provider}:{m.chat}"


async def _list(inbox: Inbox, failed: bool, limit: int) -> int:
    from bot.tracing import trace_id_of

    entries = await inbox.entries(failed_only=failed, limit=limit)
    if not entries:
        print("no failed messages" if failed else "no messages recorded")
        return 0
    now = time.time()
    print(f"{'ENTRY':32} {'TRACE':32} {'WHERE':28} {'STATUS':8} {'TRIES':>5} {'AGE':>5}  DETAIL")
    for e in entries:
        detail = (e.error or e.message.text).replace("\n", " ")[:80]
        trace = trace_id_of(e.message) or e.id  # an entry stored before trace ids: its id was the trace
        print(
            f"{e.id:32} {trace:32} {_where(e):28} {e.status:8} {e.attempts:>5} "
            f"{age(now - e.created_at):>5}  {detail}"
        )
    return 0


async def _retry(inbox: Inbox, entry_id: str, wait: float) -> int:
    from bot.inbox import DEAD, DONE, FAILED

    def outcome(current: InboxEntry) -> tuple[int, str] | None:
        if current.status == DONE:
            return 0, "retried: answered"
        if current.status in (FAILED, DEAD):
            return EXIT_FAILED, f"retry failed: {current.error}"
        return None

    return await retry_and_wait(
        inbox,
        entry_id,
        wait,
        noun="inbox entry",
        retryable="failed or dead-lettered messages",
        label=_where,
        outcome=outcome,
        pending="not finished after {wait}s: no running service has picked it up yet, or it is still "
        "running; it runs when `switchboard serve` is running",
    )


def register(subparsers: Any, load_or_exit: Callable[[str | None], Settings]) -> None:
    register_list_retry(
        subparsers,
        load_or_exit,
        name="inbox",
        help="chat messages the service could not handle: list and retry",
        list_help="recent inbox entries, newest first",
        failed_help="only failed and dead-lettered messages",
        retry_help="run a failed or dead-lettered message again in the running service",
        id_name="entry_id",
        opener=_open_inbox,
        lister=_list,
        retrier=_retry,
    )
