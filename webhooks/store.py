"""The delivery log: every GitHub delivery is written here before it is acknowledged.

A row is keyed by ``X-GitHub-Delivery``. Its status tells the story an operator needs:

    received  stored, fan-out in progress (or the process died mid-way: shown as stuck)
    done      every matching agent's message is in the durable inbox (or nothing matched)
    failed    fan-out failed; GitHub was told 5xx; ``switchboard webhooks retry`` re-runs it
    retry     an operator asked for a re-run; the service claims it on its next poll

A delivery that runs an agent also stores its event's ``identity`` (:class:`webhooks.events.GitHubEvent`)
under a unique index: the same signed body sent again under a new ``X-GitHub-Delivery`` id (a replay —
the signature covers the body, not the headers) finds it taken and is a duplicate.

SQLAlchemy Core on its own ``MetaData`` so it works on SQLite and PostgreSQL alike; the bot creates the
table at start-up with everyone else's.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sqlite3
import time
from collections.abc import Awaitable, Callable, Sequence
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
    delete,
    select,
    text,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from config.writer import DEFAULT_MAX_BATCH, GroupCommitWriter
from webhooks.sqlite_writer import LoopSqliteWriter

metadata = MetaData()
deliveries_table = Table(
    "github_deliveries",
    metadata,
    Column("delivery_id", String(100), primary_key=True),
    Column("event", String(64), nullable=False),
    Column("action", String(64)),
    Column("body", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, default=1),
    Column("dispatch", Text),
    Column("error", Text),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    # What the event was (migration step 4); unique, so a replayed body under a new id is a duplicate.
    # NULL for deliveries that run nothing (a replay of those runs nothing either, under the same config).
    Column("identity", String(300)),
    Index("ix_github_deliveries_status", "status"),
    Index("ix_github_deliveries_identity", "identity", unique=True),
)

CLAIM_COLUMNS = (
    "delivery_id",
    "event",
    "action",
    "body",
    "status",
    "dispatch",
    "attempts",
    "created_at",
    "updated_at",
    "identity",
)

RECEIVED, DONE, FAILED, RETRY = "received", "done", "failed", "retry"
#: A delivery still "received" after this long belongs to a process that died mid-fan-out.
STUCK_AFTER_SECONDS = 300.0


@dataclass(slots=True)
class Delivery:
    id: str
    event: str
    action: str | None
    body: str
    status: str
    attempts: int
    dispatch: dict[str, Any] | None
    error: str | None
    created_at: float
    updated_at: float
    identity: str | None = None

    @property
    def stuck(self) -> bool:
        return self.status == RECEIVED and time.time() - self.updated_at > STUCK_AFTER_SECONDS

    @property
    def retryable(self) -> bool:
        return self.status == FAILED or self.stuck


OpKind = Literal["claim", "finish", "take_retries"]


_TABLE = deliveries_table.name
_COLUMNS = ", ".join(c.name for c in deliveries_table.columns)
#: The statements of a batch as plain SQL that SQLite (3.35+) and PostgreSQL both accept, with named
#: parameters that sqlite3 and SQLAlchemy's ``text()`` both bind, so one batch function serves the
#: delivery log's own sqlite3 connection and SQLAlchemy alike. The one-row insert is sqlite3's only
#: (SQLAlchemy inserts a batch's claims in one statement: ``claim_statement``). ``ON CONFLICT DO
#: NOTHING`` without a target covers both unique keys: the delivery id and the event identity.
_INSERT_ONE = (
    f"INSERT INTO {_TABLE} ({', '.join(CLAIM_COLUMNS)}) VALUES ({', '.join('?' * len(CLAIM_COLUMNS))}) "
    "ON CONFLICT DO NOTHING"
)
_SELECT_ONE = f"SELECT {_COLUMNS} FROM {_TABLE} WHERE delivery_id = :id"
_SELECT_IDENTITY = f"SELECT {_COLUMNS} FROM {_TABLE} WHERE identity = :identity"
_FINISH = (
    f"UPDATE {_TABLE} SET status = :status, dispatch = :dispatch, error = :error, updated_at = :now "
    "WHERE delivery_id = :id"
)
#: Compare-and-set on (status, updated_at), so two claimers (two instances on PostgreSQL) never both win.
_MOVE = (
    f"UPDATE {_TABLE} SET status = :status, attempts = :attempts, updated_at = :now "
    "WHERE delivery_id = :id AND status = :was AND updated_at = :was_at"
)
_RETRIES = f"SELECT {_COLUMNS} FROM {_TABLE} WHERE status = '{RETRY}' ORDER BY updated_at LIMIT :limit"


@functools.lru_cache(maxsize=64)
def claim_statement(rows: int) -> TextClause:
    """``INSERT … VALUES (…) × rows ON CONFLICT DO NOTHING RETURNING delivery_id``.

    For SQLAlchemy (PostgreSQL, and SQLite without its own connection): one round trip per batch. SQLAlchemy
    never caches its dialect INSERT … ON CONFLICT construct (the clause has no cache key), so that statement
    was compiled again for every batch — about a millisecond, on the path GitHub waits on
    (bench/webhooks.py). A text statement per batch size is compiled once and then reused.
    """
    columns = ", ".join(CLAIM_COLUMNS)
    values = ", ".join("(" + ", ".join(f":{c}_{i}" for c in CLAIM_COLUMNS) + ")" for i in range(rows))
    return text(
        f"INSERT INTO {_TABLE} ({columns}) VALUES {values} ON CONFLICT DO NOTHING RETURNING delivery_id"
    )


@functools.lru_cache(maxsize=32)
def _text(sql: str) -> TextClause:
    return text(sql)


@dataclass(slots=True)
class DeliveryOp:
    kind: OpKind
    args: dict[str, Any]


class _Sql(Protocol):
    """What a batch needs from a connection, inside the batch's transaction."""

    def insert_new(self, rows: list[tuple[Any, ...]]) -> set[str]:
        """Insert each row (``CLAIM_COLUMNS`` order) unless its id exists; the ids that were inserted."""

    def rows(self, sql: str, params: dict[str, Any]) -> Sequence[Any]:
        """A query's rows, each readable as ``row["column"]``."""

    def update(self, sql: str, params: dict[str, Any]) -> int:
        """Run an UPDATE; the number of rows it changed."""

    def update_many(self, sql: str, params: list[dict[str, Any]]) -> None: ...


class _Sqlite3(_Sql):
    """The delivery log's own sqlite3 connection (on the loop; see webhooks/sqlite_writer.py). One
    ``execute`` per row: sqlite3 caches the prepared statement, which a multi-row INSERT of every batch
    size would defeat. Whether a row went in is the statement's change count (0 when ``DO NOTHING``
    applied), not ``RETURNING``: SQLite collects RETURNING rows in a temporary table per statement, which
    took the insert from ~15 to ~25 µs CPU per 5.6 KB delivery (docs/PERFORMANCE.md)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def insert_new(self, rows: list[tuple[Any, ...]]) -> set[str]:
        execute = self.conn.execute
        return {row[0] for row in rows if execute(_INSERT_ONE, row).rowcount == 1}

    def rows(self, sql: str, params: dict[str, Any]) -> Sequence[Any]:
        return self.conn.execute(sql, params).fetchall()

    def update(self, sql: str, params: dict[str, Any]) -> int:
        return self.conn.execute(sql, params).rowcount

    def update_many(self, sql: str, params: list[dict[str, Any]]) -> None:
        self.conn.executemany(sql, params)


class _Alchemy(_Sql):
    """A SQLAlchemy connection (inside ``run_sync``): PostgreSQL, or SQLite when no own connection."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def insert_new(self, rows: list[tuple[Any, ...]]) -> set[str]:
        params = {
            f"{column}_{i}": value
            for i, row in enumerate(rows)
            for column, value in zip(CLAIM_COLUMNS, row, strict=True)
        }
        return set(self.conn.execute(claim_statement(len(rows)), params).scalars())

    def rows(self, sql: str, params: dict[str, Any]) -> Sequence[Any]:
        return self.conn.execute(_text(sql), params).mappings().all()

    def update(self, sql: str, params: dict[str, Any]) -> int:
        return self.conn.execute(_text(sql), params).rowcount

    def update_many(self, sql: str, params: list[dict[str, Any]]) -> None:
        self.conn.execute(_text(sql), params)


class DeliveryStore:
    """The delivery log. Writes go through a :class:`config.writer.GroupCommitWriter` of its own: under a
    burst of deliveries, hundreds of claims share one transaction. Each caller still resumes only once
    its own row is committed; a failed batch is re-applied op by op (the writer's one failure rule).

    ``sqlite_connect`` (SQLite only) opens the log's own plain ``sqlite3`` connection, with the same
    pragmas as the engine's: batches then commit on the event loop when the write lock is free
    (webhooks/sqlite_writer.py), which is most of what a delivery's acknowledgement costs otherwise.
    Without it (PostgreSQL, the CLI) batches go through the engine.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        is_sqlite: bool,
        sqlite_connect: Callable[[], sqlite3.Connection] | None = None,
    ) -> None:
        self.engine = engine
        self.is_sqlite = is_sqlite  # the batch SQL is the same on both; kept for callers that branch
        self._sqlite_connect = sqlite_connect if is_sqlite else None
        self._sqlite: LoopSqliteWriter | None = None
        self._writer: GroupCommitWriter[DeliveryOp] = GroupCommitWriter(
            "github-deliveries", self._apply, max_batch=DEFAULT_MAX_BATCH
        )

    # --- writes (group-committed) --------------------------------------------------------------------
    def claim(
        self,
        delivery_id: str,
        event: str,
        action: str | None,
        body: str,
        *,
        status: str = RECEIVED,
        dispatch: dict[str, Any] | None = None,
        identity: str | None = None,
    ) -> Awaitable[tuple[Delivery | None, bool]]:
        """Record a delivery. Resolves to (existing row or None, whether this caller should run it).

        New → (None, True). Known and failed/stuck/queued for retry → it is atomically moved back to
        ``received`` and exactly one caller gets True (GitHub's "Redeliver" keeps the delivery id, so a
        redelivery of a failed delivery re-runs it). Known otherwise → (row, False): a duplicate.
        A new row may be stored already finished (``status``/``dispatch``) when nothing needs running,
        which saves the second write. A new id whose ``identity`` another delivery holds is a replay:
        (that delivery, False), whatever its status (the original is the one to retry).

        Not a coroutine: the caller awaits the writer's future itself. Every coroutine layer between a
        delivery and its commit is resumed once more when the batch lands, on the path GitHub waits on.
        """
        args = {
            "id": delivery_id,
            "event": event,
            "action": action,
            "body": body,
            "status": status,
            "dispatch": dispatch,
            "identity": identity,
        }
        return self._enqueue(DeliveryOp("claim", args))

    async def finish(
        self, delivery_id: str, status: str, dispatch: dict[str, Any] | None, error: str | None = None
    ) -> None:
        await self._submit("finish", id=delivery_id, status=status, dispatch=dispatch, error=error)

    async def take_retries(self, limit: int = 20) -> list[Delivery]:
        """Claim deliveries queued for retry; with several instances each is claimed exactly once."""
        return await self._submit("take_retries", limit=limit)

    async def close(self) -> None:
        """Let queued writes finish, then stop the writer (and close the log's own connection)."""
        await self._writer.close()
        if self._sqlite is not None:
            sqlite, self._sqlite = self._sqlite, None
            sqlite.close()

    async def _submit(self, kind: OpKind, **args: Any) -> Any:
        return await self._enqueue(DeliveryOp(kind, args))

    def _enqueue(self, op: DeliveryOp) -> asyncio.Future[Any]:
        self._writer.start()  # on first use: the CLI opens this store only to read and to request retries
        return self._writer.enqueue(op)

    async def _apply(self, batch: Sequence[DeliveryOp]) -> list[Any]:
        if self._sqlite is None and self._sqlite_connect is not None:
            self._sqlite = LoopSqliteWriter(self._sqlite_connect())  # opened on the first write
        if self._sqlite is not None:
            return await self._sqlite.run(lambda conn: self._apply_batch(_Sqlite3(conn), batch))
        async with self.engine.begin() as conn:
            return await conn.run_sync(lambda sync: self._apply_batch(_Alchemy(sync), batch))

    def _apply_batch(self, sql: _Sql, batch: Sequence[DeliveryOp]) -> list[Any]:
        """Claims first, then finishes (one executemany), then retries, in one transaction."""
        now = time.time()
        results: dict[int, Any] = {}
        claims = [(i, op) for i, op in enumerate(batch) if op.kind == "claim"]
        if claims:
            claimed = self._claim_many(sql, [op for _, op in claims], now)
            for (i, _), result in zip(claims, claimed, strict=True):
                results[i] = result
        finishes = [(i, op) for i, op in enumerate(batch) if op.kind == "finish"]
        if finishes:
            sql.update_many(
                _FINISH,
                [
                    {
                        "id": op.args["id"],
                        "status": op.args["status"],
                        "dispatch": _json(op.args["dispatch"]),
                        "error": op.args["error"][:2000] if op.args["error"] else None,
                        "now": now,
                    }
                    for _, op in finishes
                ],
            )
            for i, _ in finishes:
                results[i] = None
        for i, op in enumerate(batch):
            if op.kind == "take_retries":
                results[i] = self._take_retries(sql, op.args["limit"], now)
        return [results[i] for i in range(len(batch))]

    def _claim_many(self, sql: _Sql, ops: list[DeliveryOp], now: float) -> list[tuple[Delivery | None, bool]]:
        firsts: dict[str, tuple[Any, ...]] = {}
        for op in ops:
            a = op.args
            if a["id"] not in firsts:
                firsts[a["id"]] = (
                    a["id"],
                    a["event"],
                    a["action"],
                    a["body"],
                    a["status"],
                    _json(a["dispatch"]),
                    1,
                    now,
                    now,
                    a["identity"],
                )
        inserted = sql.insert_new(list(firsts.values()))
        known: dict[str, Delivery] = {}
        for delivery_id, row_values in firsts.items():
            if delivery_id not in inserted:  # a redelivery or a replay (rare): read what is stored
                for row in sql.rows(_SELECT_ONE, {"id": delivery_id}):
                    known[delivery_id] = self._from_row(row)
                identity = row_values[-1]
                if delivery_id not in known and identity is not None:  # a replay: its original
                    for row in sql.rows(_SELECT_IDENTITY, {"identity": identity}):
                        known[delivery_id] = self._from_row(row)
        results: list[tuple[Delivery | None, bool]] = []
        seen: set[str] = set()
        for op in ops:
            delivery_id = op.args["id"]
            first = delivery_id not in seen
            seen.add(delivery_id)
            if not first:
                results.append((None, False))  # the same id twice in one burst: the first one runs
            elif delivery_id in inserted:
                results.append((None, True))
            else:
                existing = known.get(delivery_id)
                if existing is None:
                    results.append((None, False))
                elif existing.id != delivery_id:
                    results.append((existing, False))  # a replay of another delivery's event
                elif (existing.retryable or existing.status == RETRY) and self._move(
                    sql, existing, RECEIVED, now
                ):
                    existing.status = RECEIVED
                    results.append((existing, True))
                else:
                    results.append((existing, False))
        return results

    def _take_retries(self, sql: _Sql, limit: int, now: float) -> list[Delivery]:
        claimed = []
        for row in sql.rows(_RETRIES, {"limit": limit}):
            delivery = self._from_row(row)
            if self._move(sql, delivery, RECEIVED, now):
                delivery.status = RECEIVED
                claimed.append(delivery)
        return claimed

    # --- retention (the bot's bot/retention.py runs it) -----------------------------------------------
    retention_label = "GitHub deliveries"

    async def prune_finished(self, before: float, limit: int) -> int:
        """Delete up to ``limit`` done deliveries last updated before ``before`` (one short transaction).
        A failed or stuck delivery stays until it is retried."""
        c = deliveries_table.c
        oldest = select(c.delivery_id).where(c.status == DONE, c.updated_at < before).limit(limit)
        async with self.engine.begin() as conn:
            result = await conn.execute(
                delete(deliveries_table).where(c.delivery_id.in_(oldest.scalar_subquery()))
            )
        return int(result.rowcount or 0)

    # --- reads and operator actions (direct) -----------------------------------------------------------
    async def get(self, delivery_id: str) -> Delivery | None:
        async with self.engine.connect() as conn:
            return await self._get(conn, delivery_id)

    async def list(self, *, failed_only: bool = False, limit: int = 50) -> list[Delivery]:
        """Newest first. ``failed_only`` also lists deliveries stuck in ``received``."""
        query = select(deliveries_table).order_by(deliveries_table.c.created_at.desc()).limit(limit)
        if failed_only:
            query = query.where(self._retryable_clause())
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [self._from_row(r) for r in rows]

    async def request_retry(self, delivery_id: str) -> bool:
        """Queue a failed (or stuck) delivery for the service to re-run; True when this call queued it.

        One conditional UPDATE: a read-then-write transaction could deadlock against the service's
        writer on SQLite. Its row count decides, not a read-back, which a running service may already
        have overtaken by picking the delivery up.
        """
        async with self.engine.begin() as conn:
            result = await conn.execute(
                update(deliveries_table)
                .where(deliveries_table.c.delivery_id == delivery_id, self._retryable_clause())
                .values(status=RETRY, updated_at=time.time())
            )
        return bool(result.rowcount)

    @staticmethod
    def _retryable_clause() -> Any:
        stuck_before = time.time() - STUCK_AFTER_SECONDS
        c = deliveries_table.c
        return (c.status == FAILED) | ((c.status == RECEIVED) & (c.updated_at < stuck_before))

    # --- internals -----------------------------------------------------------------------------------
    @staticmethod
    def _move(sql: _Sql, delivery: Delivery, status: str, now: float) -> bool:
        """Compare-and-set on (status, updated_at) so two claimers never both win."""
        attempts = delivery.attempts + (1 if status == RECEIVED else 0)
        moved = sql.update(
            _MOVE,
            {
                "status": status,
                "attempts": attempts,
                "now": now,
                "id": delivery.id,
                "was": delivery.status,
                "was_at": delivery.updated_at,
            },
        )
        if moved == 1:
            delivery.attempts = attempts
        return moved == 1

    async def _get(self, conn: Any, delivery_id: str) -> Delivery | None:
        row = (
            (
                await conn.execute(
                    select(deliveries_table).where(deliveries_table.c.delivery_id == delivery_id)
                )
            )
            .mappings()
            .first()
        )
        return self._from_row(row) if row else None

    @staticmethod
    def _from_row(row: Any) -> Delivery:
        return Delivery(
            id=row["delivery_id"],
            event=row["event"],
            action=row["action"],
            body=row["body"],
            status=row["status"],
            attempts=row["attempts"],
            dispatch=json.loads(row["dispatch"]) if row["dispatch"] else None,
            error=row["error"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            identity=row["identity"],
        )


def _json(value: dict[str, Any] | None) -> str | None:
    """A dispatch summary as stored (orjson: a few times cheaper than json, on the path GitHub waits on)."""
    return orjson.dumps(value).decode() if value is not None else None
