"""The delivery log's own ``sqlite3`` connection: a batch commits on the event loop when it can.

GitHub waits for our answer, and the answer waits for the delivery's commit. Through SQLAlchemy and
aiosqlite one group-commit batch took about six hops to the connection's thread and back (checkout,
the insert, ``COMMIT``, the pool's reset-on-return rollback, …), and each hop is a wake-up and a GIL
hand-over that costs more than the write itself: a WAL commit with ``synchronous=NORMAL`` (the same
pragmas as every other connection, so the same durability) is a ``write()`` into the page cache.

So the batch runs right here, in one ``BEGIN IMMEDIATE … COMMIT`` on this connection, whenever the
write lock is free at once (``busy_timeout`` 0: never a wait on the loop). When another connection holds
it, the same batch goes to one worker thread that waits for the lock as the other connections do. The
inbox does the same for its writes (bot/inbox.py); this is the delivery log's copy, since ``webhooks``
may not import ``bot``.

One caller at a time: the delivery writer task, which awaits each batch before starting the next.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


def is_busy(exc: sqlite3.OperationalError) -> bool:
    """SQLITE_BUSY/SQLITE_LOCKED: another connection writes (not an error, just not now)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


class LoopSqliteWriter:
    """Runs ``work(connection)`` inside one immediate transaction: on the loop if the lock is free now,
    else in its worker thread. ``work`` must be plain synchronous code that only uses the connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        # Whatever the connection's factory set (the service's Database: 10 s) is what the thread waits.
        self._wait_ms = int(conn.execute("PRAGMA busy_timeout").fetchone()[0])
        conn.isolation_level = None  # transactions are ours: BEGIN IMMEDIATE … COMMIT
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA busy_timeout=0")
        self.conn = conn
        self._executor: ThreadPoolExecutor | None = None

    async def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Commit ``work`` and return its result; raises what ``work`` (or SQLite) raised, rolled back."""
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
        else:
            return self._finish(work)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="github-deliveries-writer")
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._run_waiting, work)

    def _run_waiting(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """In the worker thread: wait for the lock like any other connection, then the same as on the loop."""
        self.conn.execute(f"PRAGMA busy_timeout={self._wait_ms}")
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        finally:
            self.conn.execute("PRAGMA busy_timeout=0")
        return self._finish(work)

    def _finish(self, work: Callable[[sqlite3.Connection], T]) -> T:
        try:
            result = work(self.conn)
            self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise
        return result

    def close(self) -> None:
        """After the last batch: stop the thread (waiting for a batch it may still run), close the file."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        self.conn.close()
