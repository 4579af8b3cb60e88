"""The SQLite checkpointer: opened with our connection settings, closed without leaving a lock behind.

Why closing needs care: LangGraph writes checkpoints from background tasks, and a turn cut off at
shutdown can leave one of them between its ``INSERT`` and its ``COMMIT``. Closing the aiosqlite
connection at that moment does not roll the write back: Python's ``sqlite3`` closes with
``sqlite3_close_v2``, and while the cut-off task's cursor still holds its statement the connection
lives on as a "zombie" that keeps its open transaction, and with it the file's write lock, until
the garbage collector happens to free that cursor. The next runtime in the same process (an in-process
restart, or tests) then waited ``busy_timeout`` and failed its first checkpoint write with "database
is locked" — the resumed turn hung and failed, but only when the shutdown landed in that window.

A real crash never hits this: the dying process's locks go with it and SQLite discards the
uncommitted write. :func:`close_saver` makes a normal close end the same way: it waits for the write
in progress (every saver write holds ``saver.lock`` from its statement to its commit), rolls back
whatever a failed or cancelled write left open, and closes the connection before anyone else can
start a write on it.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack
from pathlib import Path

from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

log = logging.getLogger(__name__)

#: Same as the service's own database (bot/db.py): wait for a lock instead of failing at once.
BUSY_TIMEOUT_MS = 10_000
#: How long close waits for a checkpoint write in progress; a write waits at most BUSY_TIMEOUT_MS.
CLOSE_WAIT_SECONDS = BUSY_TIMEOUT_MS / 1000 + 5


async def open_saver(stack: AsyncExitStack, path: Path) -> AsyncSqliteSaver:
    """A ready saver on ``path``; ``stack`` closes it with :func:`close_saver`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    saver = await stack.enter_async_context(AsyncSqliteSaver.from_conn_string(str(path)))
    # Pushed after the connection's own exit, so it runs first (an exit stack unwinds last-in first).
    stack.push_async_callback(close_saver, saver)
    await saver.setup()  # WAL mode and tables
    await saver.conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    # As for the main database: in WAL mode NORMAL survives a process crash (only an OS crash
    # can lose the last commits) and saves an fsync per checkpoint write.
    await saver.conn.execute("PRAGMA synchronous=NORMAL")
    return saver


async def close_saver(saver: AsyncSqliteSaver) -> None:
    """Close ``saver``'s connection with no transaction left open (see the module docstring).

    Holding ``saver.lock`` keeps every other saver call from queueing a statement between the
    rollback and the close. Calls still waiting for the lock fail with "Connection closed" once it
    is released, which is what they would meet after a crash as well.
    """
    held = False
    try:
        async with asyncio.timeout(CLOSE_WAIT_SECONDS):
            await saver.lock.acquire()
        held = True
    except TimeoutError:
        log.warning("a checkpoint write did not finish in %.0f s; closing without it", CLOSE_WAIT_SECONDS)
    try:
        await saver.conn.rollback()  # a no-op unless a write was cut off before its commit
    finally:
        await saver.conn.close()
        if held:
            saver.lock.release()
