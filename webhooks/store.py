"""The delivery log: every GitHub delivery is written here before it is acknowledged.

A row is keyed by ``X-GitHub-Delivery``. Its status tells the story an operator needs:

    received  stored, fan-out in progress (or the process died mid-way: shown as stuck)
    done      every matching agent's message is in the durable inbox (or nothing matched)
    failed    fan-out failed; GitHub was told 5xx; ``switchboard webhooks retry`` re-runs it
    retry     an operator asked for a re-run; the service claims it on its next poll

SQLAlchemy Core on its own ``MetaData`` so it works on SQLite and PostgreSQL alike; the bot creates the
table at start-up with everyone else's.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Sequence
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
    TextClause,
    bindparam,
    select,
    text,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from config.writer import DEFAULT_MAX_BATCH, GroupCommitWriter

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
    Index("ix_github_deliveries_status", "status"),
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

    @property
    def stuck(self) -> bool:
        return self.status == RECEIVED and time.time() - self.updated_at > STUCK_AFTER_SECONDS

    @property
    def retryable(self) -> bool:
        return self.status == FAILED or self.stuck


OpKind = Literal["claim", "finish", "take_retries"]


@functools.cache
def claim_statement(rows: int) -> TextClause:
    """``INSERT … VALUES (…) × rows ON CONFLICT (delivery_id) DO NOTHING RETURNING delivery_id``.

    SQLAlchemy never caches its dialect INSERT … ON CONFLICT construct (the clause has no cache key), so
    that statement was compiled again for every batch — about a millisecond, on the path GitHub waits on
    (bench/webhooks.py). A text statement per batch size is compiled once and then reused; the syntax is
    the same on SQLite (3.35+) and PostgreSQL.
    """
    columns = ", ".join(CLAIM_COLUMNS)
    values = ", ".join("(" + ", ".join(f":{c}_{i}" for c in CLAIM_COLUMNS) + ")" for i in range(rows))
    return text(
        f"INSERT INTO {deliveries_table.name} ({columns}) VALUES {values} "
        "ON CONFLICT (delivery_id) DO NOTHING RETURNING delivery_id"
    )


@dataclass(slots=True)
class DeliveryOp:
    kind: OpKind
    args: dict[str, Any]


class DeliveryStore:
    """The delivery log. Writes go through the shared :class:`config.writer.GroupCommitWriter` (the
    inbox's too): under a burst of deliveries, hundreds of claims share one transaction, and SQLite never
    sees two writers from this process fighting for its lock. Each caller still resumes only once its
    own row is committed; a failed batch is re-applied op by op (the writer's one failure rule)."""

    def __init__(self, engine: AsyncEngine, *, is_sqlite: bool) -> None:
        self.engine = engine
        self.is_sqlite = is_sqlite  # the claim SQL is the same on both; kept for callers that branch
        self._writer: GroupCommitWriter[DeliveryOp] = GroupCommitWriter(
            "github-deliveries", self._apply, max_batch=DEFAULT_MAX_BATCH
        )

    # --- writes (group-committed) --------------------------------------------------------------------
    async def claim(
        self,
        delivery_id: str,
        event: str,
        action: str | None,
        body: str,
        *,
        status: str = RECEIVED,
        dispatch: dict[str, Any] | None = None,
    ) -> tuple[Delivery | None, bool]:
        """Record a delivery. Returns (existing row or None, whether this caller should run it).

        New → (None, True). Known and failed/stuck/queued for retry → it is atomically moved back to
        ``received`` and exactly one caller gets True (GitHub's "Redeliver" keeps the delivery id, so a
        redelivery of a failed delivery re-runs it). Known otherwise → (row, False): a duplicate.
        A new row may be stored already finished (``status``/``dispatch``) when nothing needs running,
        which saves the second write.
        """
        return await self._submit(
            "claim", id=delivery_id, event=event, action=action, body=body, status=status, dispatch=dispatch
        )

    async def finish(
        self, delivery_id: str, status: str, dispatch: dict[str, Any] | None, error: str | None = None
    ) -> None:
        await self._submit("finish", id=delivery_id, status=status, dispatch=dispatch, error=error)

    async def take_retries(self, limit: int = 20) -> list[Delivery]:
        """Claim deliveries queued for retry; with several instances each is claimed exactly once."""
        return await self._submit("take_retries", limit=limit)

    async def close(self) -> None:
        """Let queued writes finish, then stop the writer."""
        await self._writer.close()

    async def _submit(self, kind: OpKind, **args: Any) -> Any:
        self._writer.start()  # on first use: the CLI opens this store only to read and to request retries
        return await self._writer.submit(DeliveryOp(kind, args))

    async def _apply(self, batch: Sequence[DeliveryOp]) -> list[Any]:
        async with self.engine.begin() as conn:
            return await self._apply_batch(conn, batch)

    async def _apply_batch(self, conn: AsyncConnection, batch: Sequence[DeliveryOp]) -> list[Any]:
        """Claims as one multi-row insert, finishes as one executemany, retries one by one."""
        results: dict[int, Any] = {}
        claims = [(i, op) for i, op in enumerate(batch) if op.kind == "claim"]
        if claims:
            for i, result in zip(
                (i for i, _ in claims), await self._claim_many(conn, [op for _, op in claims]), strict=True
            ):
                results[i] = result
        finishes = [(i, op) for i, op in enumerate(batch) if op.kind == "finish"]
        if finishes:
            now = time.time()
            await conn.execute(
                update(deliveries_table)
                .where(deliveries_table.c.delivery_id == bindparam("b_id"))
                .values(
                    status=bindparam("b_status"),
                    dispatch=bindparam("b_dispatch"),
                    error=bindparam("b_error"),
                    updated_at=now,
                ),
                [
                    {
                        "b_id": op.args["id"],
                        "b_status": op.args["status"],
                        "b_dispatch": json.dumps(op.args["dispatch"])
                        if op.args["dispatch"] is not None
                        else None,
                        "b_error": op.args["error"][:2000] if op.args["error"] else None,
                    }
                    for _, op in finishes
                ],
            )
            for i, _ in finishes:
                results[i] = None
        for i, op in enumerate(batch):
            if op.kind == "take_retries":
                results[i] = await self._take_retries(conn, op.args["limit"])
        return [results[i] for i in range(len(batch))]

    async def _claim_many(
        self, conn: AsyncConnection, ops: list[DeliveryOp]
    ) -> list[tuple[Delivery | None, bool]]:
        now = time.time()
        firsts: dict[str, tuple[Any, ...]] = {}
        for op in ops:
            a = op.args
            if a["id"] not in firsts:
                dispatch = json.dumps(a["dispatch"]) if a["dispatch"] is not None else None
                firsts[a["id"]] = (
                    a["id"],
                    a["event"],
                    a["action"],
                    a["body"],
                    a["status"],
                    dispatch,
                    1,
                    now,
                    now,
                )
        # One multi-row INSERT … RETURNING, its SQL compiled once per batch size (claim_statement).
        params = {
            f"{column}_{i}": value
            for i, row in enumerate(firsts.values())
            for column, value in zip(CLAIM_COLUMNS, row, strict=True)
        }
        inserted = set((await conn.execute(claim_statement(len(firsts)), params)).scalars())
        known: dict[str, Delivery] = {}
        conflicts = [i for i in firsts if i not in inserted]
        if conflicts:
            rows = (
                (
                    await conn.execute(
                        select(deliveries_table).where(deliveries_table.c.delivery_id.in_(conflicts))
                    )
                )
                .mappings()
                .all()
            )
            known = {row["delivery_id"]: self._from_row(row) for row in rows}
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
                elif (existing.retryable or existing.status == RETRY) and await self._move(
                    conn, existing, RECEIVED
                ):
                    existing.status = RECEIVED
                    results.append((existing, True))
                else:
                    results.append((existing, False))
        return results

    async def _take_retries(self, conn: Any, limit: int) -> list[Delivery]:
        rows = (
            (
                await conn.execute(
                    select(deliveries_table)
                    .where(deliveries_table.c.status == RETRY)
                    .order_by(deliveries_table.c.updated_at)
                    .limit(limit)
                )
            )
            .mappings()
            .all()
        )
        claimed = []
        for row in rows:
            delivery = self._from_row(row)
            if await self._move(conn, delivery, RECEIVED):
                delivery.status = RECEIVED
                claimed.append(delivery)
        return claimed

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
    async def _move(self, conn: Any, delivery: Delivery, status: str) -> bool:
        """Compare-and-set on (status, updated_at) so two claimers never both win."""
        result = await conn.execute(
            update(deliveries_table)
            .where(
                deliveries_table.c.delivery_id == delivery.id,
                deliveries_table.c.status == delivery.status,
                deliveries_table.c.updated_at == delivery.updated_at,
            )
            .values(
                status=status,
                attempts=delivery.attempts + (1 if status == RECEIVED else 0),
                updated_at=time.time(),
            )
        )
        if result.rowcount == 1 and status == RECEIVED:
            delivery.attempts += 1
        return result.rowcount == 1

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
        )
