"""Scheduled tasks: messages a person asked to be sent later, or again and again, in the same chat.

A schedule stores the message that created it (who, which chat and thread topic) and what to say. When
an occurrence is due, the scheduler hands the bus an ordinary :class:`InboundMessage` from the creator
whose platform message id is ``schedule:<id>:<due time>`` — so it goes through the durable inbox like
anything a person sends: stored before anything runs, answered exactly once. The inbox's dedupe key
makes an occurrence idempotent: a restart between "handed to the bus" and "next run recorded", or two
instances firing the same due time, produce the same id and the second is dropped.

An occurrence is never read as a chat command (its text may have been written by the model, which a
prompt injection can steer), and it runs at most at the trust level its creator had when making it
(``trust``, stored with the schedule; a row from an older release, without one, counts as ``member``)
— and never above the creator's level now (bot/trust.py, docs/security.md).

Occurrences missed while the service was down: ``schedules.missed: run_once`` (default) runs the most
recent missed one once on start, then carries on; ``skip`` moves on to the next future time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from sqlalchemy import Column, Float, MetaData, String, Table, Text, select, update

from bot.db import Database
from bot.schedule_spec import ScheduleSpec, next_cron
from channels.errors import Backpressure
from channels.types import InboundMessage

log = logging.getLogger(__name__)

metadata = MetaData()
schedules_table = Table(
    "schedules",
    metadata,
    Column("id", String(16), primary_key=True),
    Column("owner", String(200), nullable=False),
    Column("conversation", String(800), nullable=False),  # provider/workspace/chat/topic, for listing
    Column("message", Text, nullable=False),  # the creating message (JSON), text replaced by `what`
    Column("when_text", String(200), nullable=False),
    Column("cron", String(100)),
    Column("timezone", String(64), nullable=False),
    Column("next_at", Float),  # None: nothing left to run
    Column("created_at", Float, nullable=False),
    Column("cancelled_at", Float),
    Column("trust", String(16)),  # the creator's trust level when it was made (None: an older release's)
)
MAX_PER_CONVERSATION = 20
#: How often the scheduler looks even when nothing is due soon (a schedule made by another instance).
IDLE_POLL_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class Schedule:
    id: str
    owner: str
    conversation: str
    message: InboundMessage
    when: str
    cron: str | None
    timezone: str
    next_at: float | None
    cancelled: bool
    trust: str | None = None

    @property
    def what(self) -> str:
        return self.message.text

    def occurrence(self, due: float) -> InboundMessage:
        """The message this schedule sends for the run due at ``due``."""
        return replace(
            self.message,
            platform_message_id=f"{OCCURRENCE_PREFIX}{self.id}:{int(due)}",
            received_at=due,
            scheduled=self.trust or "member",
        )


#: The platform message id of every scheduled occurrence starts with this (no platform's ids do).
OCCURRENCE_PREFIX = "schedule:"


def is_occurrence(message: InboundMessage) -> bool:
    """A scheduled occurrence, also one an older release stored in the inbox before ``scheduled``."""
    return message.scheduled is not None or message.platform_message_id.startswith(OCCURRENCE_PREFIX)


def conversation_label(message: InboundMessage) -> str:
    return "/".join((message.provider, message.workspace or "", message.chat, message.topic or ""))


class TooManySchedules(Exception):
    pass


class ScheduleStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    @staticmethod
    def _from_row(row: object) -> Schedule:
        import json

        data = row._mapping  # type: ignore[attr-defined]
        return Schedule(
            id=data["id"],
            owner=data["owner"],
            conversation=data["conversation"],
            message=InboundMessage.from_json(json.loads(data["message"])),
            when=data["when_text"],
            cron=data["cron"],
            timezone=data["timezone"],
            next_at=data["next_at"],
            cancelled=data["cancelled_at"] is not None,
            trust=data["trust"],
        )

    async def create(
        self,
        message: InboundMessage,
        owner: str,
        spec: ScheduleSpec,
        *,
        tz: str,
        now: float,
        trust: str = "member",
    ) -> Schedule:
        import json

        label = conversation_label(message)
        active = await self.for_conversation(label)
        if len(active) >= MAX_PER_CONVERSATION:
            raise TooManySchedules(
                f"this chat already has {MAX_PER_CONVERSATION} schedules; cancel one first"
            )
        stored = replace(message, text=spec.what, files=[], mentioned=True, scheduled=None)
        schedule = Schedule(
            id=secrets.token_hex(3),
            owner=owner,
            conversation=label,
            message=stored,
            when=spec.when,
            cron=spec.cron,
            timezone=tz,
            next_at=spec.next_after(now, tz),
            cancelled=False,
            trust=trust,
        )
        async with self.db.engine.begin() as conn:
            await conn.execute(
                schedules_table.insert().values(
                    id=schedule.id,
                    owner=owner,
                    conversation=label,
                    message=json.dumps(stored.to_json()),
                    when_text=spec.when,
                    cron=spec.cron,
                    timezone=tz,
                    next_at=schedule.next_at,
                    created_at=now,
                    trust=trust,
                )
            )
        return schedule

    async def for_conversation(self, label: str) -> list[Schedule]:
        t = schedules_table.c
        query = (
            select(schedules_table)
            .where(t.conversation == label, t.cancelled_at.is_(None), t.next_at.is_not(None))
            .order_by(t.next_at)
        )
        async with self.db.engine.connect() as conn:
            return [self._from_row(row) for row in await conn.execute(query)]

    async def active(self, limit: int = 200) -> list[Schedule]:
        """Every schedule that will still run, soonest first (the operator console lists them)."""
        t = schedules_table.c
        query = (
            select(schedules_table)
            .where(t.cancelled_at.is_(None), t.next_at.is_not(None))
            .order_by(t.next_at)
            .limit(limit)
        )
        async with self.db.engine.connect() as conn:
            return [self._from_row(row) for row in await conn.execute(query)]

    async def find(self, schedule_id: str) -> Schedule | None:
        """One schedule by id, active or not."""
        query = select(schedules_table).where(schedules_table.c.id == schedule_id.strip().lower())
        async with self.db.engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return self._from_row(row) if row is not None else None

    async def cancel(self, label: str, schedule_id: str, now: float) -> bool:
        """Cancel a schedule of this conversation; False when there is none with that id."""
        t = schedules_table.c
        async with self.db.engine.begin() as conn:
            result = await conn.execute(
                update(schedules_table)
                .where(t.id == schedule_id.strip().lower(), t.conversation == label, t.cancelled_at.is_(None))
                .values(cancelled_at=now, next_at=None)
            )
        return bool(result.rowcount)

    async def due(self, now: float) -> list[Schedule]:
        t = schedules_table.c
        query = select(schedules_table).where(
            t.cancelled_at.is_(None), t.next_at.is_not(None), t.next_at <= now
        )
        async with self.db.engine.connect() as conn:
            return [self._from_row(row) for row in await conn.execute(query)]

    async def next_due(self) -> float | None:
        t = schedules_table.c
        query = select(t.next_at).where(t.cancelled_at.is_(None), t.next_at.is_not(None)).order_by(t.next_at)
        async with self.db.engine.connect() as conn:
            return await conn.scalar(query.limit(1))

    async def advance(self, schedule: Schedule, fired: float, following: float | None) -> None:
        """Record that the run due at ``fired`` was handed over; ``following`` is the next (or None)."""
        t = schedules_table.c
        async with self.db.engine.begin() as conn:
            # Only if nobody (another instance) advanced it already: next_at still names this run.
            await conn.execute(
                update(schedules_table)
                .where(t.id == schedule.id, t.next_at == fired, t.cancelled_at.is_(None))
                .values(next_at=following)
            )


Publish = Callable[[InboundMessage], Awaitable[bool]]


class Scheduler:
    """Fires due schedules into the bus. One task; wakes at the next due time or when poked."""

    def __init__(
        self,
        store: ScheduleStore,
        publish: Publish,
        *,
        missed: str = "run_once",
        clock: Callable[[], float] = time.time,
        grace_seconds: float = 60.0,
    ) -> None:
        self.store = store
        self.publish = publish
        self.missed = missed
        self.clock = clock
        self.grace_seconds = grace_seconds
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._first_pass = True

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="scheduler")

    def poke(self) -> None:
        """Look again now (a schedule was created or the clock was moved in a test)."""
        self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        while True:
            try:
                await self.fire_due()
                delay = await self._delay()
            except Exception:
                log.exception("scheduler pass failed; trying again shortly")
                delay = 5.0
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)

    async def _delay(self) -> float:
        upcoming = await self.store.next_due()
        if upcoming is None:
            return IDLE_POLL_SECONDS
        return max(0.05, min(IDLE_POLL_SECONDS, upcoming - self.clock()))

    async def fire_due(self) -> int:
        """Hand every due occurrence to the bus; returns how many were handed over."""
        now = self.clock()
        fired = 0
        for schedule in await self.store.due(now):
            assert schedule.next_at is not None
            due = schedule.next_at
            late = now - due > self.grace_seconds
            skip = late and self._first_pass and self.missed == "skip"
            if not skip:
                try:
                    await self.publish(schedule.occurrence(due))
                except Backpressure:
                    log.warning("schedule %s is due but the inbox is full; trying again shortly", schedule.id)
                    continue
                fired += 1
            following = next_cron(schedule.cron, max(now, due), schedule.timezone) if schedule.cron else None
            await self.store.advance(schedule, due, following)
        self._first_pass = False
        return fired


@dataclass(frozen=True, slots=True)
class ScheduleBook:
    """What ``/schedule`` works with: the stored schedules, the scheduler to wake, the zone and clock."""

    store: ScheduleStore
    scheduler: Scheduler
    timezone: str
    clock: Callable[[], float]
