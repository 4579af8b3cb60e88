"""The durable inbox: every accepted message is on disk before the platform is told "got it".

Writes are group-committed by the shared :class:`config.writer.GroupCommitWriter`: callers await their
operation; one writer task applies everything queued in a single transaction. Under load that turns
hundreds of tiny commits into a few large ones, which is what lets SQLite keep up with a busy bot, while
each caller still only proceeds once its own row is durable. A failed batch is re-applied op by op, so
one bad write fails only its own caller.

With SQLite a batch is applied **on the event loop**, through one plain ``sqlite3`` connection the
inbox owns, whenever the write lock is free at once (``BEGIN IMMEDIATE`` with no busy wait). A WAL
commit with ``synchronous=NORMAL`` is a ``write()`` into the page cache, tens of microseconds; handing it
to a thread cost more than the write itself (a hop there and back, SQLAlchemy's per-statement work, and
the writer thread and the event loop queueing for the GIL at every statement). Only when another
connection holds the lock does the batch go to the writer thread, which waits for it there — never on
the loop. PostgreSQL runs the same batch through SQLAlchemy (asyncpg): every operation's SQL is written
once (``_apply_batch``), in a form both databases accept, so the two backends cannot drift apart.

Reply references (``set_reply_ref``/``save_reply_ref``) are the one write that races the platform: the
message exists there from the moment ``sendMessage`` answers, and until its id is committed a kill -9
would leave it behind, unfindable (see docs/bus.md). With SQLite they are committed directly, before
the call returns, when nothing else is in the way; otherwise they take the writer's urgent lane.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import sqlite3
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import orjson
from sqlalchemy import (
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TextClause,
    UniqueConstraint,
    delete,
    select,
    text,
    update,
)
from sqlalchemy.engine import Connection

from bot.db import SQLITE_BUSY_TIMEOUT_MS, Database
from channels.resume import ReplyState
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
    #: Every message of the reply and its transport's resume data (channels/resume.py, JSON).
    Column("reply_state", Text),
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

# Every statement of a batch, once: plain SQL that SQLite (3.35+) and PostgreSQL both accept, with named
# parameters that sqlite3 and SQLAlchemy's ``text()`` both bind. One batch function (``_apply_batch``)
# runs them over the inbox's own sqlite3 connection or over SQLAlchemy (PostgreSQL), so the rules of a
# write are written once, not once per driver.
_INSERT = INSERT_IF_NEW.text
_DONE = "UPDATE inbox SET status = 'done', updated_at = :now, error = :note WHERE id = :id"
#: A done mark and the reply's last state in one statement: the final answer's state, staged by
#: :meth:`Inbox.stage_reply_ref`, usually meets its entry's done in the same batch.
_DONE_REF = _DONE.replace(" WHERE", ", reply_ref = :reply_ref, reply_state = :reply_state WHERE")
_REF = "UPDATE inbox SET reply_ref = :reply_ref, reply_state = :reply_state WHERE id = :id"
_FAILED = (
    "UPDATE inbox SET attempts = attempts + 1, "
    "status = CASE WHEN attempts + 1 >= :max_attempts THEN 'dead' ELSE 'failed' END, "
    "error = :error, updated_at = :now, reply_text = COALESCE(:reply_text, reply_text) "
    "WHERE id = :id RETURNING status"
)
_BY_KEY = (
    "SELECT * FROM inbox WHERE provider = :provider AND workspace = :workspace AND chat = :chat "
    "AND platform_message_id = :platform_message_id"
)
_KEY_NAMES = ("provider", "workspace", "chat", "platform_message_id")
_RETRIES = "SELECT * FROM inbox WHERE status = 'retry' ORDER BY updated_at LIMIT :limit"
#: Conditional, so with several instances (PostgreSQL) each entry is claimed once.
_CLAIM = "UPDATE inbox SET status = 'pending', updated_at = :now WHERE id = :id AND status = 'retry'"


class _Sql(Protocol):
    """What a batch needs from a connection, inside the batch's transaction."""

    def execute(self, sql: str, params: dict[str, Any]) -> int:
        """Run a write; the number of rows it changed."""

    def executemany(self, sql: str, params: list[dict[str, Any]]) -> int:
        """Run a write once per parameter set; the rows changed in all (-1 if the driver cannot say)."""

    def rows(self, sql: str, params: dict[str, Any]) -> Sequence[Any]:
        """A statement's rows (a query, or a write's ``RETURNING``), each readable as ``row["column"]``."""


class _Sqlite3(_Sql):
    """The inbox's own sqlite3 connection (rows are ``sqlite3.Row``; statements cached by sqlite3)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: dict[str, Any]) -> int:
        return self.conn.execute(sql, params).rowcount

    def executemany(self, sql: str, params: list[dict[str, Any]]) -> int:
        return self.conn.executemany(sql, params).rowcount

    def rows(self, sql: str, params: dict[str, Any]) -> Sequence[Any]:
        return self.conn.execute(sql, params).fetchall()


@functools.lru_cache(maxsize=16)
def _text(sql: str) -> TextClause:
    return text(sql)


class _Alchemy(_Sql):
    """A SQLAlchemy connection (PostgreSQL through asyncpg, inside ``run_sync``)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: dict[str, Any]) -> int:
        return int(self.conn.execute(_text(sql), params).rowcount)

    def executemany(self, sql: str, params: list[dict[str, Any]]) -> int:
        return int(self.conn.execute(_text(sql), params).rowcount)

    def rows(self, sql: str, params: dict[str, Any]) -> Sequence[Any]:
        return self.conn.execute(_text(sql), params).mappings().all()


def _payload(message: InboundMessage) -> str:
    """The stored form of a message: its JSON, encoded once per accept (orjson: a fraction of json's cost)."""
    data = message.to_json()
    try:
        return orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS).decode()
    except (TypeError, orjson.JSONEncodeError):  # e.g. an integer beyond 64 bits in ``context``
        return json.dumps(data, ensure_ascii=False)


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
    reply_state: str | None = None

    @property
    def resume(self) -> ReplyState | None:
        """The stored reply to continue after a restart: every message, or only the first one where an
        older version stored just that (or the stored state does not parse)."""
        if self.reply_state:
            try:
                return ReplyState.from_json(self.reply_state)
            except ValueError as exc:
                log.warning("inbox entry %s: %s; continuing its first message only", self.id, exc)
        return ReplyState.first_only(self.reply_ref) if self.reply_ref else None


OpKind = Literal["accept", "done", "failed", "reply_ref", "take_retries"]


@dataclass(slots=True)
class InboxOp:
    """One queued write; ``args`` depend on the kind (see the public methods that make them)."""

    kind: OpKind
    args: dict[str, Any]


def _reply_op(entry_id: str, reply: ReplyState) -> InboxOp:
    """The write of a reply's state; ``reply_ref`` keeps its first message for older versions."""
    return InboxOp(
        "reply_ref", {"id": entry_id, "reply_ref": reply.first_ref, "reply_state": reply.to_json()}
    )


def _log_reply_ref_failure(future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("saving reply ref failed: %s", future.exception())


class _SqliteWriter:
    """The inbox's own plain ``sqlite3`` connection and the batch over it (see the module docstring).

    The connection never waits for a lock on the event loop: :meth:`try_apply` returns None at once when
    another connection writes, and :meth:`apply_waiting` (run in the writer thread) waits for it there.
    One caller at a time — the writer task, or a direct reference write between its batches.
    """

    def __init__(self, conn: sqlite3.Connection, max_attempts: int) -> None:
        conn.isolation_level = None  # transactions are ours: BEGIN IMMEDIATE ... COMMIT
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA busy_timeout=0")
        # Never a checkpoint (an fsync and a copy of the log) inside a commit on the loop: the
        # maintenance task checkpoints every second, and the other connections keep the safety net.
        conn.execute("PRAGMA wal_autocheckpoint=0")
        self.conn = conn
        self.max_attempts = max_attempts
        self.in_thread = False  # a batch runs in the writer thread: nobody else may use the connection

    def try_apply(self, ops: Sequence[InboxOp]) -> dict[int, Any] | None:
        """Apply ``ops`` in one transaction if the write lock is free now; None if it is not."""
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                return None
            raise
        return self._finish(ops)

    def apply_waiting(self, ops: Sequence[InboxOp]) -> dict[int, Any]:
        """In the writer thread: wait for the lock as every other connection does, then apply."""
        self.conn.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        finally:
            self.conn.execute("PRAGMA busy_timeout=0")
        return self._finish(ops)

    def close(self) -> None:
        self.conn.close()

    def _finish(self, ops: Sequence[InboxOp]) -> dict[int, Any]:
        try:
            results = self._apply(ops)
            self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise
        return results

    def _apply(self, ops: Sequence[InboxOp]) -> dict[int, Any]:
        return _apply_batch(_Sqlite3(self.conn), ops, self.max_attempts)


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


class _ArrivalClock:
    """Arrival stamps that never repeat or go back within this process.

    Why: ``created_at`` orders a conversation's messages wherever they are read back (a restart's
    resume, a cluster's claims: ``ORDER BY created_at, id``). A group commit accepts many messages at
    one ``now``, and the ids are random, so two messages of one chat in the same batch used to come back
    in a random order — the later one answered first. Each stamp is at least a microsecond after the
    previous one (a double still tells those apart at today's epoch), in the order messages were accepted.
    """

    STEP = 1e-6

    def __init__(self) -> None:
        self._last = 0.0

    def stamp(self, now: float) -> float:
        self._last = max(now, self._last + self.STEP)
        return self._last


_arrivals = _ArrivalClock()


def _accept_rows(accepts: Sequence[InboxOp], now: float) -> list[dict[str, Any]]:
    """The rows to insert, in acceptance order; gives each op its new entry id (``op.args["id"]``)."""
    rows = []
    for op in accepts:
        msg: InboundMessage = op.args["message"]
        op.args["id"] = uuid.uuid4().hex
        arrived = _arrivals.stamp(now)
        rows.append(
            {
                "id": op.args["id"],
                "provider": msg.provider,
                "workspace": msg.workspace,
                "chat": msg.chat,
                "platform_message_id": msg.platform_message_id,
                "payload": _payload(msg),
                "status": PENDING,
                "attempts": 0,
                "created_at": arrived,
                "updated_at": arrived,
            }
        )
    return rows


def _tell_duplicates(accepts: Sequence[InboxOp], stored: dict[Any, Any], results: dict[int, Any]) -> None:
    """Some keys already existed: each op gets the stored row, marked duplicate unless it inserted it."""
    claimed: set[str] = set()
    for op in accepts:
        row = stored[op.args["message"].dedupe_key]
        entry = Inbox._entry(row)
        # Two copies in one batch: only the row's own inserter is "new".
        entry.duplicate = row["id"] != op.args["id"] or row["id"] in claimed
        claimed.add(row["id"])
        results[id(op)] = entry


def _apply_batch(sql: _Sql, ops: Sequence[InboxOp], max_attempts: int) -> dict[int, Any]:
    """Apply one batch inside an open transaction: one result per op, keyed by ``id(op)``."""
    now = time.time()
    results: dict[int, Any] = {}
    # Reply states by entry, the last one of each winning (what applying them in order left stored).
    refs = {op.args["id"]: op.args for op in ops if op.kind == "reply_ref"}
    # Finishing marks first: a redelivery in the same batch as its original's "done" must read as done
    # (a duplicate), not as pending. An entry's reply state in the same batch joins its done mark: one
    # statement (a turn's final answer is usually staged just before its done, see stage_reply_ref).
    done: list[dict[str, Any]] = []
    done_ref: list[dict[str, Any]] = []
    for op in ops:
        if op.kind == "done":
            mark = {"id": op.args["id"], "now": now, "note": op.args.get("note")}
            ref = refs.pop(mark["id"], None)
            if ref is None:
                done.append(mark)
            else:
                done_ref.append({**mark, "reply_ref": ref["reply_ref"], "reply_state": ref["reply_state"]})
    if done:
        sql.executemany(_DONE, done)
    if done_ref:
        sql.executemany(_DONE_REF, done_ref)
    if refs:
        sql.executemany(
            _REF, [{k: args[k] for k in ("id", "reply_ref", "reply_state")} for args in refs.values()]
        )
    accepts: list[InboxOp] = []
    for op in ops:
        if op.kind == "accept":
            accepts.append(op)
        elif op.kind == "failed":
            params = {**op.args, "now": now, "max_attempts": max_attempts}
            row = next(iter(sql.rows(_FAILED, params)), None)
            results[id(op)] = row["status"] if row is not None else FAILED
        elif op.kind == "take_retries":
            results[id(op)] = _take_retries(sql, op.args["limit"], now)
    if accepts:
        rows = _accept_rows(accepts, now)
        inserted = sql.executemany(_INSERT, rows)
        keys = [op.args["message"].dedupe_key for op in accepts]
        if inserted == len(rows) and len(set(keys)) == len(keys):
            # The common case: every message is new, so nothing to read back.
            for op, row in zip(accepts, rows, strict=True):
                results[id(op)] = InboxEntry(id=row["id"], message=op.args["message"], status=PENDING)
        else:  # some keys existed (a redelivery), or the driver could not count: read the stored rows
            stored = {key: sql.rows(_BY_KEY, dict(zip(_KEY_NAMES, key, strict=True)))[0] for key in set(keys)}
            _tell_duplicates(accepts, stored, results)
    return results


def _take_retries(sql: _Sql, limit: int, now: float) -> list[InboxEntry]:
    claimed = []
    for row in sql.rows(_RETRIES, {"limit": limit}):
        if sql.execute(_CLAIM, {"now": now, "id": row["id"]}) == 1:  # several instances: claimed once
            entry = Inbox._entry(row)
            entry.status = PENDING
            claimed.append(entry)
    return claimed


class Inbox:
    def __init__(self, db: Database, *, max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> None:
        self.db = db
        self.max_attempts = max_attempts
        self._writer: GroupCommitWriter[InboxOp] = GroupCommitWriter(
            "inbox", self._apply, max_batch=MAX_BATCH
        )
        # SQLite: the inbox's own connection (opened at start); batches run on the loop when the lock is
        # free, else in this one thread, which waits for it.
        self._sqlite: _SqliteWriter | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="inbox-writer") if db.is_sqlite else None
        self._queued_refs = 0  # reply references waiting in the writer (a direct write must not pass them)

    async def start(self) -> None:
        if self.db.is_sqlite and self._sqlite is None:
            self._sqlite = _SqliteWriter(self.db.sqlite_connection(), self.max_attempts)
        self._writer.start()

    async def close(self) -> None:
        """Flush everything queued, then stop the writer (and its thread and connection)."""
        await self._writer.close()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        if self._sqlite is not None:
            self._sqlite.close()
            self._sqlite = None

    # --- public API --------------------------------------------------------------------------------
    async def accept(self, message: InboundMessage) -> InboxEntry:
        """Store ``message`` unless its dedupe key exists; return the stored entry either way."""
        # Straight to the writer's future (no _submit/submit layers): every message passes here and
        # through mark_done, and each coroutine layer cost a frame, a resumption and a return.
        entry: InboxEntry = await self._enqueue(InboxOp("accept", {"message": message}))
        return entry

    async def mark_done(self, entry_id: str, note: str | None = None) -> None:
        """Finished. ``note`` says why an entry finished without an answer (kept in ``error``, which
        ``switchboard inbox`` shows), e.g. a guest's message the trust policy ignores."""
        await self._enqueue(InboxOp("done", {"id": entry_id, "note": note}))

    async def mark_failed(self, entry_id: str, error: str, reply_text: str | None = None) -> str:
        """Count a failed attempt and return the new status: ``failed`` (a redelivery runs it again) or,
        after ``max_attempts`` failures, ``dead``. ``reply_text`` (the agent's answer, when only delivery
        failed) lets a retry deliver it without asking the model again."""
        status: str = await self._submit("failed", id=entry_id, error=error[:2000], reply_text=reply_text)
        return status

    async def save_answer(self, entry_id: str, text: str) -> None:
        """Keep the agent's final answer with its entry while its delivery is retried (bot/redelivery.py):
        a restart delivers it without asking the model again. Not an attempt: the status and the count
        stay, so a platform rate-limiting for a while sets nothing aside. Direct (not through the
        writer): rare, and it must be durable before the first wait."""
        async with self.db.engine.begin() as conn:
            await conn.execute(
                update(inbox_table).where(inbox_table.c.id == entry_id).values(reply_text=text)
            )

    async def take_retries(self, limit: int = 50) -> list[InboxEntry]:
        """Claim entries an operator queued for retry (``retry`` → ``pending``), oldest first."""
        entries: list[InboxEntry] = await self._submit("take_retries", limit=limit)
        return entries

    def set_reply_ref(self, entry_id: str, reply: ReplyState) -> None:
        """Remember the visible reply so a resumed run (after a crash) edits it instead of leaving it.

        Not awaited by the turn. With SQLite it is usually committed before this returns (see
        :meth:`_write_ref_now`); otherwise it goes to the front of the writer's queue.
        """
        if not self._writer.running:
            return
        op = _reply_op(entry_id, reply)
        if self._write_ref_now(op):
            return
        self._queue_ref(op, unawaited=True)

    def stage_reply_ref(self, entry_id: str, reply: ReplyState) -> None:
        """Like :meth:`set_reply_ref`, but always through the writer's next batch (its urgent lane),
        never as a commit of its own first.

        For the state of a final answer's last message (``ReplyStream.settling``): the turn submits
        its entry's done in the same loop step, so both join one batch and one statement
        (``_DONE_REF``) instead of two commits. What a crash may cost is unchanged in kind: the
        reference is durable at the writer's next batch, which runs on the loop's next round — the
        same as any reference that found the writer busy — or while the next platform call is on the
        wire. Never for a message more of the reply follows: that one is stored before it is sent.
        """
        if self._writer.running:
            self._queue_ref(_reply_op(entry_id, reply), unawaited=True)

    async def save_reply_ref(self, entry_id: str, reply: ReplyState) -> None:
        """Like :meth:`set_reply_ref`, but returns once the reference is durable.

        For a "Queued" notice: it can sit in the chat for minutes before its turn starts, and after a
        crash the resumed turn must edit it into the answer instead of leaving it behind.
        """
        if not self._writer.running:
            raise RuntimeError("inbox is not started")
        op = _reply_op(entry_id, reply)
        if not self._write_ref_now(op):
            await self._queue_ref(op)

    def _write_ref_now(self, op: InboxOp) -> bool:
        """SQLite: commit a reference at once, before the caller goes on, when nothing is in the way.

        Every millisecond between the platform's answer and this commit is a window in which a kill -9
        leaves a message nobody can find again. Only when the writer has nothing queued: otherwise its
        batch is due on the loop's next round anyway, and the reference joins the head of it (one
        commit instead of two — under a burst that halved the inbox's commits). Never when a batch runs
        in the writer thread (it holds the connection), when an earlier reference is still queued (this
        one must not overtake it), or when another connection holds the lock.
        """
        sqlite = self._sqlite
        if sqlite is None or sqlite.in_thread or self._queued_refs or self._writer.queued:
            return False
        try:
            return sqlite.try_apply([op]) is not None
        except Exception as exc:  # the writer tries again and reports it to the caller
            log.debug("direct reply reference write failed, queueing it: %s", exc)
            return False

    def _queue_ref(self, op: InboxOp, *, unawaited: bool = False) -> asyncio.Future[Any]:
        """Into the writer's urgent lane; ``unawaited``: nobody awaits it, so its failure is logged here
        (one callback for both jobs: each is a loop callback per message)."""
        future = self._writer.enqueue(op, urgent=True)
        self._queued_refs += 1
        future.add_done_callback(self._unawaited_ref_written if unawaited else self._ref_written)
        return future

    def _ref_written(self, _future: asyncio.Future[Any]) -> None:
        self._queued_refs -= 1

    def _unawaited_ref_written(self, future: asyncio.Future[Any]) -> None:
        self._queued_refs -= 1
        _log_reply_ref_failure(future)

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

    # --- retention (bot/retention.py) -----------------------------------------------------------------
    retention_label = "inbox entries"

    async def prune_finished(self, before: float, limit: int) -> int:
        """Delete up to ``limit`` done entries last updated before ``before`` (one short transaction)."""
        c = inbox_table.c
        oldest = select(c.id).where(c.status == DONE, c.updated_at < before).limit(limit)
        async with self.db.engine.begin() as conn:
            result = await conn.execute(delete(inbox_table).where(c.id.in_(oldest.scalar_subquery())))
        return int(result.rowcount or 0)

    # --- writer ------------------------------------------------------------------------------------
    async def _submit(self, kind: OpKind, **args: Any) -> Any:
        return await self._enqueue(InboxOp(kind, args))

    def _enqueue(self, op: InboxOp) -> asyncio.Future[Any]:
        try:
            return self._writer.enqueue(op)
        except WriterClosed:
            raise RuntimeError("inbox is not started") from None

    async def _apply(self, ops: Sequence[InboxOp]) -> list[Any]:
        """The writer's batch: one transaction, one result per op in order (see GroupCommitWriter)."""
        sqlite = self._sqlite
        if sqlite is not None:
            results = sqlite.try_apply(ops)
            if results is None:  # another connection writes: wait for it in the thread, not on the loop
                sqlite.in_thread = True
                try:
                    loop = asyncio.get_running_loop()
                    results = await loop.run_in_executor(self._executor, sqlite.apply_waiting, ops)
                finally:
                    sqlite.in_thread = False
        else:
            max_attempts = self.max_attempts
            async with self.db.engine.begin() as conn:
                results = await conn.run_sync(lambda sync: _apply_batch(_Alchemy(sync), ops, max_attempts))
        return [results.get(id(op)) for op in ops]

    @staticmethod
    def _entry(row: Any) -> InboxEntry:
        return InboxEntry(
            id=row["id"],
            message=InboundMessage.from_json(json.loads(row["payload"])),
            status=row["status"],
            attempts=row["attempts"],
            reply_ref=row["reply_ref"],
            reply_state=row["reply_state"],
            reply_text=row["reply_text"],
            error=row["error"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )
