"""Where thread checkpoints live: opening the store, keeping its connection healthy, and checking it.

SQLite file by default; PostgreSQL (langgraph-checkpoint-postgres) when the database is PostgreSQL and
that package is installed; otherwise in memory (history then lasts until restart). The runtime owns one
:class:`CheckpointStore`; ``/health`` and ``/ready`` ask it for :meth:`CheckpointStore.problem`.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

from agent.checkpoint_pruning import Pruner, postgres_pruner, sqlite_pruner

if TYPE_CHECKING:
    import aiosqlite
    from psycopg_pool import AsyncConnectionPool

log = logging.getLogger(__name__)

#: PostgreSQL advisory lock around the checkpointer's migrations (bot/db.py has the service's own).
CHECKPOINT_SCHEMA_LOCK_KEY = 0x5357_4244_0002
#: The PostgreSQL checkpointer serialises its queries (one lock per saver): one connection in use, one
#: spare, so a health check never waits behind a turn.
CHECKPOINT_POOL_SIZE = 2
#: How long a checkpoint query waits for a connection before it fails (and the turn is retried later).
CHECKPOINT_CONNECT_TIMEOUT_SECONDS = 5.0
#: How long a health check waits for a checkpoint connection: a healthy pool has one spare at once.
CHECKPOINT_CHECK_TIMEOUT_SECONDS = 1.0
#: How long start-up waits for the first checkpoint connection (instances starting together queue).
CHECKPOINT_OPEN_TIMEOUT_SECONDS = 30.0
#: How long the pool keeps retrying one lost connection before giving up on it; the next query (or
#: health check) then connects anew. Short: a back-off grown over a long outage would otherwise keep
#: the pool away from a database that is back (measured: seconds after a 20 s restart).
CHECKPOINT_RECONNECT_SECONDS = 2.0


async def _take_session_lock(conn: Any, key: int) -> None:
    """Take a PostgreSQL session advisory lock by polling ``pg_try_advisory_lock`` (see the caller).

    ``conn`` is a connection of the checkpointer's pool, whose rows are dicts.
    """
    while True:
        cursor = await conn.execute("SELECT pg_try_advisory_lock(%s) AS taken", (key,))
        row = await cursor.fetchone()
        if row is not None and row["taken"]:
            return
        await asyncio.sleep(0.05)


def postgres_conninfo(url: str) -> str | None:
    """A libpq connection string for a PostgreSQL database URL; None for any other database."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        return None
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


class CheckpointStore:
    """Opens the checkpointer once and answers whether it can reach its store now."""

    def __init__(self, database_url: str, path: Path | None, stack: AsyncExitStack) -> None:
        self.database_url = database_url
        self.path = path  # a SQLite file of its own (the embedded default); None: follow the database
        self.stack = stack  # closes the pool or the SQLite connection with the runtime
        self.pool: AsyncConnectionPool[Any] | None = None  # on PostgreSQL
        self.sqlite: aiosqlite.Connection | None = None  # on SQLite
        #: Deletes a thread's superseded checkpoints after each turn (agent/checkpoint_pruning.py).
        self.prune: Pruner | None = None

    async def open(self) -> BaseCheckpointSaver[Any]:
        """The thread checkpointer for this deployment (SQLite file, PostgreSQL pool, or in memory)."""
        if self.path is not None:
            from agent.sqlite_checkpoints import open_saver

            # Closed by the stack with no write left half-done (a cut-off one kept the file locked).
            saver = await open_saver(self.stack, self.path)
            self.sqlite = saver.conn
            self.prune = sqlite_pruner(saver)
            return saver
        conninfo = postgres_conninfo(self.database_url)
        if conninfo is not None:
            if importlib.util.find_spec("langgraph.checkpoint.postgres") is None:
                log.warning(
                    "langgraph-checkpoint-postgres is not installed: thread history is kept in memory "
                    "only and is lost on restart (pip install langgraph-checkpoint-postgres)"
                )
            else:
                return await self._open_postgres(conninfo)
        return InMemorySaver()

    async def _open_postgres(self, conninfo: str) -> BaseCheckpointSaver[Any]:
        """A PostgreSQL checkpointer on a pool that reconnects by itself.

        One plain connection (what ``from_conn_string`` opens) never reconnects: after PostgreSQL
        restarted, every later turn failed on it until the service was restarted. The pool checks a
        connection before lending it (a broken one is replaced) and gives up on a connection attempt
        after ``CHECKPOINT_RECONNECT_SECONDS``, so once PostgreSQL is back the next turn connects anew
        instead of waiting out a long back-off. While no connection can be had, queries fail fast
        (agent/checkpoint_pool.py): the saver's lock would otherwise queue them 5 s apart.
        """
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg.rows import dict_row

        from agent.checkpoint_pool import OutageAwarePool

        pool = OutageAwarePool(
            conninfo,
            min_size=1,
            max_size=CHECKPOINT_POOL_SIZE,
            open=False,
            name="agent-checkpoints",
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
            check=OutageAwarePool.check_connection,
            timeout=CHECKPOINT_CONNECT_TIMEOUT_SECONDS,
            reconnect_timeout=CHECKPOINT_RECONNECT_SECONDS,
        )
        self.stack.push_async_callback(pool.close)
        await pool.open(wait=True, timeout=CHECKPOINT_OPEN_TIMEOUT_SECONDS)
        self.pool = pool
        pg_saver = AsyncPostgresSaver(pool)
        # Instances starting together would race the saver's CREATE TABLEs; its migrations run under a
        # session advisory lock held on a connection of their own (released after). Polled, not waited
        # on: the migrations include CREATE INDEX CONCURRENTLY, which waits for every open transaction,
        # and a blocked lock call is one (a deadlock, seen here).
        async with pool.connection() as conn:
            await _take_session_lock(conn, CHECKPOINT_SCHEMA_LOCK_KEY)
            try:
                await pg_saver.setup()
            finally:
                await conn.execute("SELECT pg_advisory_unlock(%s)", (CHECKPOINT_SCHEMA_LOCK_KEY,))
        self.prune = postgres_pruner(pg_saver)
        return pg_saver

    async def problem(self) -> str | None:
        """None when the checkpointer can reach its store now; otherwise why not (for /health, /ready).

        PostgreSQL: a connection from the checkpoint pool answers ``SELECT 1``. SQLite: the checkpoint
        file answers a query. In memory: always fine. The caller caches the answer and bounds its time.
        """
        pool = self.pool
        try:
            if pool is not None:
                async with pool.connection(timeout=CHECKPOINT_CHECK_TIMEOUT_SECONDS) as conn:
                    await conn.execute("SELECT 1")
            elif self.sqlite is not None:
                async with self.sqlite.execute("SELECT 1") as cursor:
                    await cursor.fetchone()
        except Exception as exc:
            return f"cannot reach its checkpoint store ({type(exc).__name__})"
        return None
