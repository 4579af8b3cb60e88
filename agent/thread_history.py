"""Delete agent threads' stored history (LangGraph checkpoints), offline, from whichever store holds it.

Deleting a person or a chat must also delete what the model was told and answered; that lives in the
checkpointer, not in the service's own tables. The running service opens the same stores
(``AgentRuntime._open_checkpointer``); this opens them on its own for the CLI, where no runtime runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver


async def delete_histories(database_url: str, checkpoint_path: Path | None, thread_ids: Iterable[str]) -> int:
    """Delete the checkpoints of ``thread_ids``; returns how many threads were asked for.

    SQLite: the checkpoint file beside the database (nothing to do when it was never created).
    PostgreSQL: the checkpointer's tables in the same database. Anything else keeps no history."""
    wanted = sorted(set(thread_ids))
    if not wanted:
        return 0
    async with AsyncExitStack() as stack:
        saver = await _open(stack, database_url, checkpoint_path)
        if saver is None:
            return 0
        for thread_id in wanted:
            await saver.adelete_thread(thread_id)
    return len(wanted)


async def _open(
    stack: AsyncExitStack, database_url: str, checkpoint_path: Path | None
) -> BaseCheckpointSaver[Any] | None:
    if checkpoint_path is not None:
        if not await asyncio.to_thread(checkpoint_path.exists):
            return None
        from agent.sqlite_checkpoints import open_saver

        return await open_saver(stack, checkpoint_path)
    from agent.checkpoint_store import postgres_conninfo

    conninfo = postgres_conninfo(database_url)
    if conninfo is None:
        return None
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    saver = await stack.enter_async_context(AsyncPostgresSaver.from_conn_string(conninfo))
    await saver.setup()  # idempotent: a database the agent never used has no tables yet
    return saver
