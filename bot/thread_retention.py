"""Abandoned agent threads go after ``database.retention_days``: their history, their rows and files.

``/new`` points a conversation at a fresh thread and says earlier messages are forgotten — but the old
thread's LangGraph checkpoints (every turn stores the whole message list) and its workspace stayed
forever, so storage grew with every ``/new`` and nothing a person asked to forget went. A thread is
*abandoned* when no conversation points at it any more and nothing under its folders changed for the
retention period; then its checkpoints, its thread-keyed rows (usage, goals, memory cursors, approvals)
and its folders under every owner's space are deleted. A thread some conversation still uses is never
touched, however old.

It is one more :class:`bot.retention.Prunable`, so it runs in the same background pass, in chunks.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from sqlalchemy import delete, select

from agent import tables as agent_tables
from bot.approvals import approvals_table
from bot.db import Database
from bot.threads import conversations_table

log = logging.getLogger(__name__)

#: Rows that belong to a thread and mean nothing without it.
THREAD_ROWS = (
    agent_tables.thread_usage,
    agent_tables.goals,
    agent_tables.goal_continuations,
    agent_tables.memory_cursors,
    agent_tables.memory_pending,
    agent_tables.subagent_tasks,
    agent_tables.subagent_steps,
    approvals_table,
)

#: Deletes the agent's stored history (checkpoints) of these threads.
ForgetHistories = Callable[[list[str]], Awaitable[object]]


class ThreadEraser:
    """Deletes threads for good: their history (checkpoints), thread rows and folders of every owner.

    Used by retention (abandoned threads) and by ``/forget`` (this chat's thread, at once)."""

    def __init__(self, db: Database, data_dir: Path, forget_histories: ForgetHistories) -> None:
        self.db = db
        self.data_dir = data_dir
        self.forget_histories = forget_histories

    async def folders(self) -> dict[str, list[Path]]:
        return await asyncio.to_thread(_thread_folders, self.data_dir)

    async def erase(self, thread_ids: list[str], folders: dict[str, list[Path]] | None = None) -> None:
        if not thread_ids:
            return
        folders = await self.folders() if folders is None else folders
        await self.forget_histories(thread_ids)
        async with self.db.engine.begin() as conn:
            for table in THREAD_ROWS:
                await conn.execute(delete(table).where(table.c.thread_id.in_(thread_ids)))
        await asyncio.to_thread(_remove, [path for tid in thread_ids for path in folders.get(tid, [])])


class AbandonedThreads:
    retention_label = "abandoned threads"

    def __init__(self, eraser: ThreadEraser) -> None:
        self.eraser = eraser

    async def prune_finished(self, before: float, limit: int) -> int:
        folders = await self.eraser.folders()
        if not folders:
            return 0
        async with self.eraser.db.engine.connect() as conn:
            in_use = {row[0] for row in await conn.execute(select(conversations_table.c.thread_id))}
        candidates = [tid for tid in folders if tid not in in_use]
        idle = await asyncio.to_thread(_idle_since, {tid: folders[tid] for tid in candidates}, before)
        chosen = sorted(idle)[:limit]
        await self.eraser.erase(chosen, folders)
        return len(chosen)


def _thread_folders(data_dir: Path) -> dict[str, list[Path]]:
    """thread id → its folders (one per owner who had files in it: group threads have several)."""
    found: dict[str, list[Path]] = {}
    users = data_dir / "users"
    if not users.is_dir():
        return found
    for threads in users.glob("*/threads"):
        for folder in threads.iterdir():
            if folder.is_dir():
                found.setdefault(folder.name, []).append(folder)
    return found


def _idle_since(threads: dict[str, list[Path]], before: float) -> list[str]:
    """Threads whose every folder, and everything under them, last changed before ``before``."""
    return [tid for tid, folders in threads.items() if _newest_change(folders) < before]


def _newest_change(folders: Iterable[Path]) -> float:
    newest = 0.0
    for folder in folders:
        newest = max(newest, folder.stat().st_mtime)
        for path in folder.rglob("*"):
            newest = max(newest, path.lstat().st_mtime)
    return newest


def _remove(folders: list[Path]) -> None:
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
