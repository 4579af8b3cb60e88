"""Subagent tasks and their steps, kept in the service database so they can be read after the turn.

The chat's ``/tasks`` command (the bot's task cards) and anyone with the database read them through
:meth:`TaskStore.tasks_of_thread` and :meth:`TaskStore.steps`; nothing here knows chats. A task's row is
written when it starts and updated when it ends; its steps are appended while it runs (what the
subagent said, each tool it called and that tool's output, masked and cut short), so a stopped or
crashed task still shows how far it got.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import RowMapping, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from agent.events import TaskStatus
from agent.tables import subagent_steps, subagent_tasks

#: A step's text is cut to this many characters (a tool's whole output would bloat the table).
MAX_STEP_CHARS = 2000


@dataclass(frozen=True, slots=True)
class TaskRecord:
    task_id: str
    thread_id: str
    parent_task_id: str | None
    kind: str
    title: str
    prompt: str
    status: TaskStatus
    result: str | None
    input_tokens: int
    output_tokens: int
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class TaskStep:
    number: int
    kind: str
    text: str
    created_at: float


def _cut(text: str) -> str:
    return text if len(text) <= MAX_STEP_CHARS else text[: MAX_STEP_CHARS - 1] + "…"


class TaskStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def begin(
        self,
        *,
        task_id: str,
        thread_id: str,
        parent_task_id: str | None,
        tool_call_id: str,
        kind: str,
        title: str,
        prompt: str,
    ) -> int:
        """Record a task as queued (or mark an existing one queued again, for a redelivered turn).

        Returns the number the next step gets: a task run again continues its earlier steps.
        """
        now = time.time()
        async with self.engine.begin() as conn:
            exists = (
                await conn.execute(
                    select(subagent_tasks.c.task_id).where(subagent_tasks.c.task_id == task_id)
                )
            ).first()
            if exists is None:
                await conn.execute(
                    insert(subagent_tasks).values(
                        task_id=task_id,
                        thread_id=thread_id,
                        parent_task_id=parent_task_id,
                        tool_call_id=tool_call_id,
                        kind=kind,
                        title=title,
                        prompt=prompt,
                        status="queued",
                        result=None,
                        input_tokens=0,
                        output_tokens=0,
                        created_at=now,
                        updated_at=now,
                    )
                )
                return 1
            await conn.execute(
                update(subagent_tasks)
                .where(subagent_tasks.c.task_id == task_id)
                .values(status="queued", result=None, updated_at=now)
            )
            last = (
                await conn.execute(
                    select(func.max(subagent_steps.c.number)).where(subagent_steps.c.task_id == task_id)
                )
            ).scalar()
        return int(last or 0) + 1

    async def set_status(self, task_id: str, status: TaskStatus) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                update(subagent_tasks)
                .where(subagent_tasks.c.task_id == task_id)
                .values(status=status, updated_at=time.time())
            )

    async def add_step(self, *, task_id: str, thread_id: str, number: int, kind: str, text: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                insert(subagent_steps).values(
                    task_id=task_id,
                    number=number,
                    thread_id=thread_id,
                    kind=kind,
                    text=_cut(text),
                    created_at=time.time(),
                )
            )

    async def finish(
        self, task_id: str, *, status: TaskStatus, result: str, input_tokens: int, output_tokens: int
    ) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                update(subagent_tasks)
                .where(subagent_tasks.c.task_id == task_id)
                .values(
                    status=status,
                    result=result,
                    input_tokens=input_tokens,
                    output_tokens=output_tokens,
                    updated_at=time.time(),
                )
            )

    # --- reading (the bot's /tasks, the CLI, tests) ---------------------------------------------------
    async def task(self, task_id: str) -> TaskRecord | None:
        async with self.engine.connect() as conn:
            row = (
                (await conn.execute(select(subagent_tasks).where(subagent_tasks.c.task_id == task_id)))
                .mappings()
                .first()
            )
        return None if row is None else _record(row)

    async def tasks_of_thread(self, thread_id: str) -> list[TaskRecord]:
        """The thread's tasks, oldest first."""
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(subagent_tasks)
                    .where(subagent_tasks.c.thread_id == thread_id)
                    .order_by(subagent_tasks.c.created_at, subagent_tasks.c.task_id)
                )
            ).mappings()
            return [_record(row) for row in rows]

    async def steps(self, task_id: str) -> list[TaskStep]:
        """The task's steps in the order they happened (empty for an unknown task)."""
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(subagent_steps)
                    .where(subagent_steps.c.task_id == task_id)
                    .order_by(subagent_steps.c.number)
                )
            ).mappings()
            return [TaskStep(row["number"], row["kind"], row["text"], row["created_at"]) for row in rows]


def _record(row: RowMapping) -> TaskRecord:
    return TaskRecord(
        task_id=row["task_id"],
        thread_id=row["thread_id"],
        parent_task_id=row["parent_task_id"],
        kind=row["kind"],
        title=row["title"],
        prompt=row["prompt"],
        status=row["status"],
        result=row["result"],
        input_tokens=row["input_tokens"],
        output_tokens=row["output_tokens"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )
