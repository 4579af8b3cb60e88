"""The PostgreSQL checkpointer's connection pool: while the database is known to be away, fail fast.

Why: LangGraph's ``AsyncPostgresSaver`` runs every query of the process behind one lock, and asks the
pool for its connection *inside* that lock. During an outage each query waited the pool's whole
connection timeout (5 s) holding the lock, so the queries of all running turns failed one every 5 s,
in a single queue. A turn stops (and its reply shows the retry note, bot/faults.py) only when all of
its own queued queries have failed, and each turn has two or three in flight (its input checkpoint,
its writes, the model step's checkpoint): with ten turns, the first one stopped about 85 s into the
outage (measured, on a loaded machine), so a user waited through a 20 s restart with a frozen reply
and no note. The same queue also kept working turns from finishing after the database came back.

:class:`OutageAwarePool` remembers that a connection could not be had (a ``PoolTimeout``) and, until
one is had again, gives a query only :data:`DOWN_CONNECT_TIMEOUT_SECONDS` to get one: the queue drains
in a fraction of a second per query and every stopped turn says so within seconds. It still waits
that long, rather than not at all, so a waiting query asks the pool to connect (a pool that gives up
at once never opens a new connection) and the first query after the database is back succeeds. A
caller that names its own timeout (the health check) keeps it: it is what notices the recovery.
"""

from __future__ import annotations

from typing import Any

from psycopg_pool import AsyncConnectionPool, PoolTimeout

#: How long a checkpoint query waits for a connection while the last attempt to get one failed. Long
#: enough to open a connection to a database that is back (milliseconds on a LAN), short enough that a
#: queue of a few dozen queries fails within seconds of an outage.
DOWN_CONNECT_TIMEOUT_SECONDS = 0.25


class OutageAwarePool(AsyncConnectionPool[Any]):
    """An ``AsyncConnectionPool`` whose default wait is short while its database is known away."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: True from a connection request that timed out until one is served again.
        self.down = False

    async def getconn(self, timeout: float | None = None) -> Any:  # noqa: ASYNC109 (the pool's signature)
        """A connection, as the pool's; waiting at most :data:`DOWN_CONNECT_TIMEOUT_SECONDS` instead of
        the pool's timeout when no connection could be had last time and the caller named none."""
        if timeout is None and self.down:
            timeout = min(self.timeout, DOWN_CONNECT_TIMEOUT_SECONDS)
        try:
            conn = await super().getconn(timeout)
        except PoolTimeout:
            self.down = True
            raise
        self.down = False
        return conn
