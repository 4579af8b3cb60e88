"""Keep only a thread's latest checkpoint: what a resumed or next turn reads, and nothing older.

Why: LangGraph saves a checkpoint at every step of a turn, and each one holds the whole message list.
Kept forever, a thread's storage grows with the *square* of its length (a 200-turn thread of ~140 KB
of text wrote 72 MB). Nothing here ever reads an older checkpoint: a turn, ``/compact``, memory
extraction and a turn resumed after a crash (the bus runs the message again from the start) all read
the thread's latest state. So once a turn has finished, its superseded checkpoints and their pending
writes are deleted; the latest one (and its writes) stays, so a crash at any point still finds exactly
the state it would have found without pruning.

Pruning runs after the turn, off its critical path for the reply, and a failure only leaves a few rows
for the next turn to delete: it is logged, never raised.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

log = logging.getLogger(__name__)

#: Deletes every superseded checkpoint of one thread.
Pruner = Callable[[str], Awaitable[None]]

# Checkpoint ids are time-ordered (uuid6) and the saver itself takes the greatest as the latest, so
# "older than the newest of its namespace" is exactly "superseded". Writes go first: they are found
# through the checkpoints that are still there. A write for a checkpoint not saved yet (a step whose
# put is still queued) has a greater id than any saved one, and is kept.
_SQLITE_PRUNE = (
    """DELETE FROM writes WHERE thread_id = ? AND checkpoint_id < (
        SELECT MAX(c.checkpoint_id) FROM checkpoints c
        WHERE c.thread_id = writes.thread_id AND c.checkpoint_ns = writes.checkpoint_ns)""",
    """DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_id < (
        SELECT MAX(c.checkpoint_id) FROM checkpoints c
        WHERE c.thread_id = checkpoints.thread_id AND c.checkpoint_ns = checkpoints.checkpoint_ns)""",
    # The kept checkpoint's parent is gone: say so rather than point at nothing (as the PostgreSQL
    # saver's own prune does).
    "UPDATE checkpoints SET parent_checkpoint_id = NULL WHERE thread_id = ? AND parent_checkpoint_id IS NOT NULL",
)


def sqlite_pruner(saver: AsyncSqliteSaver) -> Pruner:
    """Pruning for the SQLite checkpoint file (the saver has no prune of its own)."""

    async def prune(thread_id: str) -> None:
        # saver.lock: every saver write holds it from statement to commit (agent/sqlite_checkpoints.py).
        async with saver.lock:
            try:
                for statement in _SQLITE_PRUNE:
                    await saver.conn.execute(statement, (thread_id,))
                await saver.conn.commit()
            except BaseException:
                await saver.conn.rollback()
                raise

    return prune


def postgres_pruner(saver: AsyncPostgresSaver) -> Pruner:
    """Pruning for PostgreSQL: the saver's own ``keep_latest``, which also frees unreferenced blobs."""

    async def prune(thread_id: str) -> None:
        await saver.aprune([thread_id], strategy="keep_latest")

    return prune


async def prune_quietly(pruner: Pruner | None, thread_id: str) -> None:
    """Prune ``thread_id``; a failure is logged (the next turn tries again), never raised."""
    if pruner is None:
        return
    try:
        await pruner(thread_id)
    except Exception as exc:
        log.warning(
            "pruning old checkpoints of a thread failed (%s); retried after its next turn", type(exc).__name__
        )
