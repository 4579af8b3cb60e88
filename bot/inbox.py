"""The durable inbox: every accepted message is on disk before the platform is told "got it".

Writes are group-committed by the shared :class:`config.writer.GroupCommitWriter`: callers await their
operation; one writer task applies everything queued in a single transaction. Under load that turns
hundreds of tiny commits into a few large ones, which is what lets SQLite keep up with a busy bot, while
each caller still only proceeds once its own row is durable. A failed batch is re-applied op by op, so
one bad write fails only its own caller.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import (
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    bindparam,
    case,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.engine import Connection

from bot.db import Database
from channels.types import InboundMessage
from config.writer import GroupCommitWriter, WriterClosed

log = logging.getLogger(__name__)

metadata = MetaData()
inbox_table = Table(
    "inbox",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("provider", String(32), nullable=False),
    Column("workspace", String(200), nullable=False),
    Column("chat", String(200), nullable=False),
    Column("platform_message_id", String(200), nullable=False),
    Column("payload", Text, nullable=False),
    Column("status", String(16), nullable=False, default="pending"),  # pending|done|failed|dead|retry
    Column("attempts", Integer, nullable=False, default=0),
    Column("reply_ref", String(200)),
    Column("reply_text", Text),
    Column("error", Text),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    UniqueConstraint("provider", "workspace", "chat", "platform_message_id", name="uq_inbox_dedupe"),
    Index("ix_inbox_status", "status"),
)

PENDING, DONE, FAILED = "pending", "done", "failed"
#: Failed ``max_attempts`` times: set aside for the operator (``switchboard inbox list --failed``), never
#: run again by itself — not by a redelivery, not at start — so one poison message cannot loop forever.
DEAD = "dead"
#: An operator asked for another run (``switchboard inbox retry ID``); the service claims it on its poll.
RETRY = "retry"
DEFAULT_MAX_ATTEMPTS = 3

_INSERT_COLUMNS = (
    "id",
    "provider",
    "workspace",
    "chat",
    "platform_message_id",
    "payload",
    "status",
    "attempts",
    "created_at",
    "updated_at",
)
#: Plain SQL that SQLite and PostgreSQL both accept. Written as text because SQLAlchemy recompiled the
#: dialect-specific ``on_conflict_do_nothing`` construct on every execution (half of an accept's cost).
INSERT_IF_NEW = text(
    f"INSERT INTO inbox ({', '.join(_INSERT_COLUMNS)}) "
    f"VALUES ({', '.join(':' + c for c in _INSERT_COLUMNS)}) "
    "ON CONFLICT (provider, workspace, chat, platform_message_id) DO NOTHING"
)
MAX_BATCH = 500


@dataclass(slots=True)
class InboxEntry:
    """A stored message plus what is known about its progress."""

    id: str
    message: InboundMessage
    status: str
    attempts: int = 0
    reply_ref: str | None = None
    reply_text: str | None = None
    duplicate: bool = False
    error: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0


OpKind = Literal["accept", "done", "failed", "reply_ref", "take_retries"]


@dataclass(slots=True)
class InboxOp:
    """One queued write; ``args`` depend on the kind (see the public methods that make them)."""

    kind: OpKind
    args: dict[str, Any]


def _log_reply_ref_failure(future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("saving reply ref failed: %s", future.exception())


class Inbox:
    def __init__(self, db: Database, *, max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> None:
        self.db = db
        self.max_attempts = max_attempts
        self._writer: GroupCommitWriter[InboxOp] = GroupCommitWriter(
            "inbox", self._apply, max_batch=MAX_BATCH
        )
        self._insert = INSERT_IF_NEW
        # SQLite: one dedicated thread applies whole batches (one hop per batch, not per statement).
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="inbox-writer") if db.is_sqlite else None

    async def start(self) -> None:
        self._writer.start()

    async def close(self) -> None:
        """Flush everything queued, then stop the writer (and its thread)."""
        await self._writer.close()
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    # --- public API --------------------------------------------------------------------------------
    async def accept(self, message: InboundMessage) -> InboxEntry:
        """Store ``message`` unless its dedupe key exists; return the stored entry either way."""
        return await self._submit("accept", message=message)

    async def mark_done(self, entry_id: str) -> None:
        await self._submit("done", id=entry_id)

    async def mark_failed(self, entry_id: str, error: str, reply_text: str | None = None) -> str:
        """Count a failed attempt and return the new status: ``failed`` (a redelivery runs it again) or,
        after ``max_attempts`` failures, ``dead``. ``reply_text`` (the agent's answer, when only delivery
        failed) lets a retry deliver it without asking the model again."""
        status: str = await self._submit("failed", id=entry_id, error=error[:2000], reply_text=reply_text)
        return status

    async def take_retries(self, limit: int = 50) -> list[InboxEntry]:
        """Claim entries an operator queued for retry (``retry`` → ``pending``), oldest first."""
        entries: list[InboxEntry] = await self._submit("take_retries", limit=limit)
        return entries

    def set_reply_ref(self, entry_id: str, ref: str) -> None:
        """Remember the visible reply so a resumed run edits it. Not awaited: it only saves a duplicate
        placeholder if the process dies in the next few milliseconds, and must not slow the turn."""
        if not self._writer.running:
            return
        future = self._writer.enqueue(InboxOp("reply_ref", {"id": entry_id, "reply_ref": ref}))
        future.add_done_callback(_log_reply_ref_failure)

    async def save_reply_ref(self, entry_id: str, ref: str) -> None:
        """Like :meth:`set_reply_ref`, but returns once the reference is durable.

        For a "Queued" notice: it can sit in the chat for minutes before its turn starts, and after a
        crash the resumed turn must edit it into the answer instead of leaving it behind.
        """
        await self._submit("reply_ref", id=entry_id, reply_ref=ref)

    async def unfinished(self) -> list[InboxEntry]:
        """Messages accepted but neither done nor dead, oldest first: what a restart must resume."""
        async with self.db.engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(inbox_table)
                    .where(inbox_table.c.status.in_((PENDING, FAILED)))
                    .order_by(inbox_table.c.created_at, inbox_table.c.id)
                )
            ).mappings()
            return [self._entry(row) for row in rows]

    async def counts(self) -> dict[str, int]:
        from sqlalchemy import func

        async with self.db.engine.connect() as conn:
            rows = await conn.execute(
                select(inbox_table.c.status, func.count()).group_by(inbox_table.c.status)
            )
            return {status: count for status, count in rows}

    # --- operator actions (``switchboard inbox``; direct, from another process) ----------------------
    async def get(self, entry_id: str) -> InboxEntry | None:
        async with self.db.engine.connect() as conn:
            row = (
                (await conn.execute(select(inbox_table).where(inbox_table.c.id == entry_id)))
                .mappings()
                .first()
            )
        return self._entry(row) if row else None

    async def entries(self, *, failed_only: bool = False, limit: int = 50) -> list[InboxEntry]:
        """Newest first; ``failed_only``: failed and dead-lettered entries (what an operator must see)."""
        query = select(inbox_table).order_by(inbox_table.c.updated_at.desc()).limit(limit)
        if failed_only:
            query = query.where(inbox_table.c.status.in_((FAILED, DEAD)))
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [self._entry(row) for row in rows]

    async def request_retry(self, entry_id: str) -> bool:
        """Queue a failed or dead entry for the service to run again, with its attempts reset.

        One conditional UPDATE (no read-then-write), so it cannot deadlock against the service's writer.
        True when this call queued it. Decided by the UPDATE itself, not by reading the entry back: a
        running service may claim it (``retry`` → ``pending``) before any read-back.
        """
        async with self.db.engine.begin() as conn:
            result = await conn.execute(
                update(inbox_table)
                .where(inbox_table.c.id == entry_id, inbox_table.c.status.in_((FAILED, DEAD)))
                .values(status=RETRY, attempts=0, updated_at=time.time())
            )
        return bool(result.rowcount)

    # --- writer ------------------------------------------------------------------------------------
    async def _submit(self, kind: OpKind, **args: Any) -> Any:
        try:
            return await self._writer.submit(InboxOp(kind, args))
        except WriterClosed:
            raise RuntimeError("inbox is not started") from None

    async def _apply(self, ops: Sequence[InboxOp]) -> list[Any]:
        """The writer's batch: one transaction, one result per op in order (see GroupCommitWriter)."""
        if self._executor is not None:
            loop = asyncio.get_running_loop()
            results = await loop.run_in_executor(self._executor, self._apply_sqlite, ops)
        else:
            async with self.db.engine.begin() as conn:
                results = await conn.run_sync(self._apply_in, ops)
        return [results.get(id(op)) for op in ops]

    def _apply_sqlite(self, ops: Sequence[InboxOp]) -> dict[int, Any]:
        with self.db.sync_engine.begin() as conn:
            return self._apply_in(conn, ops)

    def _apply_in(self, conn: Connection, ops: Sequence[InboxOp]) -> dict[int, Any]:
        """Apply one batch inside an open transaction (runs in the writer thread or via run_sync)."""
        now = time.time()
        results: dict[int, Any] = {}
        accepts = [op for op in ops if op.kind == "accept"]
        # Finishing marks first: a redelivery in the same batch as its original's "done" must read
        # as done (a duplicate), not as pending.
        done_ids = [op.args["id"] for op in ops if op.kind == "done"]
        if done_ids:
            conn.execute(
                update(inbox_table)
                .where(inbox_table.c.id.in_(done_ids))
                .values(status=DONE, updated_at=now, error=None)
            )
        for op in ops:
            if op.kind == "failed":
                attempts = inbox_table.c.attempts + 1
                values: dict[str, Any] = {
                    "status": case((attempts >= self.max_attempts, DEAD), else_=FAILED),
                    "error": op.args["error"],
                    "updated_at": now,
                    "attempts": attempts,
                }
                if op.args.get("reply_text") is not None:
                    values["reply_text"] = op.args["reply_text"]
                status = conn.execute(
                    update(inbox_table)
                    .where(inbox_table.c.id == op.args["id"])
                    .values(**values)
                    .returning(inbox_table.c.status)
                ).scalar()
                results[id(op)] = status or FAILED
            elif op.kind == "take_retries":
                results[id(op)] = self._take_retries(conn, op.args["limit"], now)
        refs = [
            {"b_id": op.args["id"], "b_ref": op.args["reply_ref"]} for op in ops if op.kind == "reply_ref"
        ]
        if refs:
            conn.execute(
                update(inbox_table)
                .where(inbox_table.c.id == bindparam("b_id"))
                .values(reply_ref=bindparam("b_ref")),
                refs,
            )
        if accepts:
            rows = []
            for op in accepts:
                msg: InboundMessage = op.args["message"]
                op.args["id"] = uuid.uuid4().hex
                rows.append(
                    {
                        "id": op.args["id"],
                        "provider": msg.provider,
                        "workspace": msg.workspace,
                        "chat": msg.chat,
                        "platform_message_id": msg.platform_message_id,
                        "payload": json.dumps(msg.to_json(), ensure_ascii=False),
                        "status": PENDING,
                        "attempts": 0,
                        "created_at": now,
                        "updated_at": now,
                    }
                )
            inserted = conn.execute(self._insert, rows)
            keys = [op.args["message"].dedupe_key for op in accepts]
            if inserted.rowcount == len(rows) and len(set(keys)) == len(keys):
                # The common case: every message is new, so no need to read anything back.
                for op, row in zip(accepts, rows, strict=True):
                    results[id(op)] = InboxEntry(id=row["id"], message=op.args["message"], status=PENDING)
            else:
                self._resolve_conflicts(conn, accepts, results)
        return results

    def _take_retries(self, conn: Connection, limit: int, now: float) -> list[InboxEntry]:
        rows = (
            conn.execute(
                select(inbox_table)
                .where(inbox_table.c.status == RETRY)
                .order_by(inbox_table.c.updated_at)
                .limit(limit)
            )
            .mappings()
            .all()
        )
        claimed = []
        for row in rows:
            moved = conn.execute(
                update(inbox_table)
                .where(inbox_table.c.id == row["id"], inbox_table.c.status == RETRY)
                .values(status=PENDING, updated_at=now)
            )
            if moved.rowcount == 1:  # several instances: each entry is claimed once
                entry = self._entry(row)
                entry.status = PENDING
                claimed.append(entry)
        return claimed

    def _resolve_conflicts(self, conn: Connection, accepts: list[InboxOp], results: dict[int, Any]) -> None:
        """Some keys already existed: read the stored rows and tell new from duplicate."""
        keys = list({op.args["message"].dedupe_key for op in accepts})
        cols = (
            inbox_table.c.provider,
            inbox_table.c.workspace,
            inbox_table.c.chat,
            inbox_table.c.platform_message_id,
        )
        stored: dict[tuple[str, str, str, str], Any] = {}
        for start in range(0, len(keys), 200):
            found = conn.execute(select(inbox_table).where(tuple_(*cols).in_(keys[start : start + 200])))
            for row in found.mappings():
                stored[(row["provider"], row["workspace"], row["chat"], row["platform_message_id"])] = row
        claimed: set[str] = set()
        for op in accepts:
            row = stored[op.args["message"].dedupe_key]
            entry = self._entry(row)
            # Two copies in one batch: only the row's own inserter is "new".
            entry.duplicate = row["id"] != op.args["id"] or row["id"] in claimed
            claimed.add(row["id"])
            results[id(op)] = entry

    @staticmethod
    def _entry(row: Any) -> InboxEntry:
        return InboxEntry(
            id=row["id"],
            message=InboundMessage.from_json(json.loads(row["payload"])),
            status=row["status"],
            attempts=row["attempts"],
            reply_ref=row["reply_ref"],
            reply_text=row["reply_text"],
            error=row["error"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )
