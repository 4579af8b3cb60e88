"""``switchboard tasks list THREAD`` / ``switchboard tasks show TASK_ID``: subagent tasks and their steps.

The same records the chat's ``/tasks`` shows, for an operator at the server (docs/subagents.md): which
tasks a thread's turns delegated, how each ended, and every step its subagent took.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from config.schema import Settings

if TYPE_CHECKING:
    from agent.task_store import TaskStore

EXIT_FAILED = 1


def _when(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%d %H:%M:%S")


async def _with_store(settings: Settings, work: Callable[[TaskStore], Awaitable[int]]) -> int:
    from agent.tables import metadata as agent_metadata
    from agent.task_store import TaskStore
    from bot.db import Database

    db = Database(settings.database.url)
    try:
        async with db.engine.begin() as conn:  # a database the service never used answers "nothing found"
            await conn.run_sync(agent_metadata.create_all)
        return await work(TaskStore(db.engine))
    finally:
        await db.close()


async def list_tasks(settings: Settings, thread_id: str) -> int:
    async def work(store: TaskStore) -> int:
        tasks = await store.tasks_of_thread(thread_id)
        if not tasks:
            print(f"no tasks in thread {thread_id!r}", file=sys.stderr)
            return EXIT_FAILED
        for task in tasks:
            tokens = task.input_tokens + task.output_tokens
            print(
                f"{task.task_id}  {_when(task.created_at)}  {task.status:<8} {task.kind:<12} {tokens:>8} tok  {task.title}"
            )
        return 0

    return await _with_store(settings, work)


async def show_task(settings: Settings, task_id: str) -> int:
    async def work(store: TaskStore) -> int:
        task = await store.task(task_id)
        if task is None:
            print(f"no task {task_id!r}", file=sys.stderr)
            return EXIT_FAILED
        print(f"{task.task_id} ({task.kind}) in thread {task.thread_id}: {task.status}")
        print(f"title: {task.title}")
        if task.parent_task_id:
            print(f"started by task {task.parent_task_id}")
        print(f"tokens: {task.input_tokens:,} in / {task.output_tokens:,} out")
        print(f"prompt:\n{task.prompt}\n")
        for step in await store.steps(task_id):
            print(f"{step.number:>3} {_when(step.created_at)} {step.kind:<7} {step.text}")
        return 0

    return await _with_store(settings, work)


def register(subparsers: Any, load_or_exit: Callable[[str | None], Settings]) -> None:
    parser = subparsers.add_parser("tasks", help="subagent tasks of a thread, and the steps of one task")
    sub = parser.add_subparsers(dest="tasks_command", required=True)

    listing = sub.add_parser("list", help="the tasks a thread's turns delegated, oldest first")
    listing.add_argument("thread", help="the thread id (as /status or the logs show it)")
    listing.add_argument("--config", help="path to config.yaml")
    listing.set_defaults(func=lambda a: asyncio.run(list_tasks(load_or_exit(a.config), a.thread)))

    showing = sub.add_parser("show", help="one task: its prompt, result and every step its subagent took")
    showing.add_argument("task_id", help="the task id (task-…), as the task card and `tasks list` show it")
    showing.add_argument("--config", help="path to config.yaml")
    showing.set_defaults(func=lambda a: asyncio.run(show_task(load_or_exit(a.config), a.task_id)))
