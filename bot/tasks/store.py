"""The ``task_cards`` table: every background job's card, its steps, its result and where it is shown.

Why a table of its own and not only the inbox: a subagent's card is not a turn's reply (a turn may run
several), and ``/tasks`` lists a chat's jobs long after their inbox entries were pruned. The row is the
card's truth: its status and current step, the result once there is one, and the card message's reply
state (channels/resume.py) — so after a restart the card is edited where it is, never posted twice.

``delivered_at`` is set once the card showed its final result: a row with a result and no
``delivered_at`` is a result still owed to the chat (a restart delivers it, without running anything
again); a row with ``delivered_at`` is never delivered again.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass

from sqlalchemy import Column, Float, Index, MetaData, String, Table, Text, delete, select, update
from sqlalchemy.exc import IntegrityError

from agent.events import TaskStatus
from bot.engine import HasEngine
from channels.resume import ReplyState
from channels.types import InboundMessage

metadata = MetaData()
task_cards_table = Table(
    "task_cards",
    metadata,
    Column("id", String(200), primary_key=True),  # the job's own id (schedule:<id>:<due>, the agent's)
    Column("short", String(16), nullable=False, unique=True),  # what /tasks shows and Stop names
    Column("owner", String(200), nullable=False),
    Column("thread_id", String(200), nullable=False),
    Column("conversation", String(800), nullable=False),  # provider/workspace/chat/topic
    Column("message", Text, nullable=False),  # the message the card answers (JSON): reopens it
    Column("kind", String(32), nullable=False),
    Column("title", String(400), nullable=False),
    Column("status", String(16), nullable=False),
    Column("step", Text),
    Column("steps", Text, nullable=False),  # JSON list of the steps so far (the last MAX_STEPS)
    Column("result", Text),
    Column("reply_state", Text),
    Column("stop_token", String(200)),  # a turn's Stop token when the card is a turn's reply
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("delivered_at", Float),
    Index("ix_task_cards_conversation", "conversation", "created_at"),
)

#: Statuses after which nothing changes any more.
FINAL: frozenset[str] = frozenset({"done", "failed", "stopped"})
STATUSES: frozenset[str] = frozenset({"queued", "running", "waiting", *FINAL})
MAX_STEPS = 50
MAX_RESULT_CHARS = 20_000


def conversation_label(message: InboundMessage) -> str:
    return "/".join((message.provider, message.workspace or "", message.chat, message.topic or ""))


@dataclass(frozen=True, slots=True)
class TaskRow:
    id: str
    short: str
    owner: str
    thread_id: str
    conversation: str
    message: InboundMessage
    kind: str
    title: str
    status: TaskStatus
    step: str | None
    steps: tuple[str, ...]
    result: str | None
    reply_state: ReplyState | None
    stop_token: str | None
    created_at: float
    updated_at: float
    delivered_at: float | None

    @property
    def final(self) -> bool:
        return self.status in FINAL


def _status(value: str) -> TaskStatus:
    for status in ("queued", "running", "waiting", "done", "failed", "stopped"):
        if value == status:
            return status
    return "failed"  # a value this build does not know counts as ended


def _state(raw: str | None) -> ReplyState | None:
    if not raw:
        return None
    try:
        return ReplyState.from_json(raw)
    except ValueError:
        return None


def _row(data: object) -> TaskRow:
    m = data._mapping  # type: ignore[attr-defined]
    return TaskRow(
        id=m["id"],
        short=m["short"],
        owner=m["owner"],
        thread_id=m["thread_id"],
        conversation=m["conversation"],
        message=InboundMessage.from_json(json.loads(m["message"])),
        kind=m["kind"],
        title=m["title"],
        status=_status(m["status"]),
        step=m["step"],
        steps=tuple(json.loads(m["steps"] or "[]")),
        result=m["result"],
        reply_state=_state(m["reply_state"]),
        stop_token=m["stop_token"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        delivered_at=m["delivered_at"],
    )


class TaskStore:
    """Reads and writes task cards. Every write is one short transaction."""

    #: For the retention pass (bot/retention.py), which deletes delivered cards past the period.
    retention_label = "task cards"

    def __init__(self, db: HasEngine) -> None:
        self.db = db

    async def prune_finished(self, before: float, limit: int) -> int:
        """Delete up to ``limit`` cards whose result was delivered and that did not change since
        ``before``. A card still running, or with a result still owed to its chat, is never deleted."""
        t = task_cards_table.c
        async with self.db.engine.begin() as conn:
            ids = (
                (
                    await conn.execute(
                        select(t.id).where(t.delivered_at.is_not(None), t.updated_at < before).limit(limit)
                    )
                )
                .scalars()
                .all()
            )
            if not ids:
                return 0
            await conn.execute(delete(task_cards_table).where(t.id.in_(ids)))
        return len(ids)

    async def open(
        self,
        task_id: str,
        *,
        message: InboundMessage,
        owner: str,
        thread_id: str,
        kind: str,
        title: str,
        status: TaskStatus = "queued",
        stop_token: str | None = None,
    ) -> TaskRow:
        """The card of ``task_id``: the stored one when it exists (a resumed job), else a new one."""
        found = await self.get(task_id)
        if found is not None:
            return found
        now = time.time()
        values = {
            "id": task_id,
            "owner": owner,
            "thread_id": thread_id,
            "conversation": conversation_label(message),
            "message": json.dumps(message.to_json(), ensure_ascii=False),
            "kind": kind[:32],
            "title": title[:400],
            "status": status,
            "steps": "[]",
            "stop_token": stop_token,
            "created_at": now,
            "updated_at": now,
        }
        for _ in range(5):  # a clash of the short id (or a second instance opening the same card)
            try:
                async with self.db.engine.begin() as conn:
                    await conn.execute(task_cards_table.insert().values(short=secrets.token_hex(3), **values))
                break
            except IntegrityError:
                if await self.get(task_id) is not None:
                    break
        found = await self.get(task_id)
        if found is None:
            raise RuntimeError(f"could not store task card {task_id}")
        return found

    async def get(self, task_id: str) -> TaskRow | None:
        async with self.db.engine.connect() as conn:
            row = (
                await conn.execute(select(task_cards_table).where(task_cards_table.c.id == task_id))
            ).first()
        return _row(row) if row is not None else None

    async def by_short(self, conversation: str, short: str) -> TaskRow | None:
        """A card of this conversation by the id ``/tasks`` shows (another chat's cards are not found)."""
        t = task_cards_table.c
        query = select(task_cards_table).where(
            t.short == short.strip().lower(), t.conversation == conversation
        )
        async with self.db.engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return _row(row) if row is not None else None

    async def for_conversation(self, conversation: str, limit: int = 10) -> list[TaskRow]:
        """This conversation's cards: unfinished ones first, then the most recent."""
        t = task_cards_table.c
        query = select(task_cards_table).where(t.conversation == conversation).order_by(t.created_at.desc())
        async with self.db.engine.connect() as conn:
            rows = [_row(r) for r in await conn.execute(query.limit(200))]
        running = [r for r in rows if not r.final]
        recent = [r for r in rows if r.final]
        return (running + recent)[:limit]

    async def owed(self) -> list[TaskRow]:
        """Cards with a result the chat has not been shown yet (a restart came in between)."""
        t = task_cards_table.c
        query = select(task_cards_table).where(t.result.is_not(None), t.delivered_at.is_(None))
        async with self.db.engine.connect() as conn:
            return [_row(r) for r in await conn.execute(query)]

    async def unfinished(self) -> list[TaskRow]:
        t = task_cards_table.c
        query = select(task_cards_table).where(t.status.in_(("queued", "running", "waiting")))
        async with self.db.engine.connect() as conn:
            return [_row(r) for r in await conn.execute(query)]

    async def set_status(self, task_id: str, status: TaskStatus, step: str | None = None) -> None:
        """A new status (and step); a finished card's status never changes again."""
        t = task_cards_table.c
        current = await self.get(task_id)
        if current is None or current.final:
            return
        values: dict[str, object] = {"status": status, "updated_at": time.time()}
        if step is not None:
            values["step"] = step[:1000]
            if not current.steps or current.steps[-1] != step:
                values["steps"] = json.dumps([*current.steps, step[:1000]][-MAX_STEPS:], ensure_ascii=False)
        async with self.db.engine.begin() as conn:
            await conn.execute(
                update(task_cards_table)
                .where(t.id == task_id, t.status.in_(("queued", "running", "waiting")))
                .values(**values)
            )

    async def finish(self, task_id: str, status: TaskStatus, result: str) -> bool:
        """Record the outcome before it is shown; False when the card had one already (kept as it is)."""
        t = task_cards_table.c
        async with self.db.engine.begin() as conn:
            done = await conn.execute(
                update(task_cards_table)
                .where(t.id == task_id, t.result.is_(None))
                .values(status=status, result=result[:MAX_RESULT_CHARS], step=None, updated_at=time.time())
            )
        return bool(done.rowcount)

    async def delivered(self, task_id: str) -> None:
        t = task_cards_table.c
        now = time.time()
        async with self.db.engine.begin() as conn:
            await conn.execute(
                update(task_cards_table).where(t.id == task_id).values(delivered_at=now, updated_at=now)
            )

    async def set_stop_token(self, task_id: str, token: str) -> None:
        """The Stop token of the turn now running in the card (a goal's card: each step is a turn)."""
        t = task_cards_table.c
        async with self.db.engine.begin() as conn:
            await conn.execute(update(task_cards_table).where(t.id == task_id).values(stop_token=token))

    async def save_state(self, task_id: str, state: ReplyState) -> None:
        t = task_cards_table.c
        async with self.db.engine.begin() as conn:
            await conn.execute(
                update(task_cards_table).where(t.id == task_id).values(reply_state=state.to_json())
            )
