"""What the console shows: each list the API returns, read from the service's stores and its manager.

Kept apart from the routes (:mod:`bot.console.api`) so that what is shown — and that every free-text
field passes the secret masker — is in one place. Turns are read from the durable inbox (a pending entry
is a message being answered or waiting its turn) and the manager's public
:meth:`~bot.manager.ChannelManager.lane_state`.
"""

from __future__ import annotations

import os
import time
from typing import Literal

from bot.console.models import (
    ApprovalOut,
    ChannelOut,
    DeadLetterOut,
    DeliveryOut,
    PersonOut,
    ScheduleOut,
    TurnOut,
)
from bot.inbox import DEAD, FAILED, PENDING, InboxEntry
from bot.service import Service
from config.secrets import SecretMasker, known_secrets
from connections.api import connection_out
from webhooks.store import Delivery

PREVIEW_CHARS = 200
LIST_LIMIT = 200


def _sender(entry: InboxEntry) -> str:
    sender = entry.message.sender
    return sender.name or sender.id


async def thread_of(service: Service, entry: InboxEntry) -> str | None:
    conversation = await service.threads.get(entry.message.conversation_key)
    return conversation.thread_id if conversation is not None else None


def _delivery_detail(delivery: Delivery) -> str:
    if delivery.error:
        return delivery.error
    fired = (delivery.dispatch or {}).get("fired", [])
    return "fired: " + (", ".join(str(name) for name in fired) or "-")


class Console:
    """The service plus its secret masker: every free-text field a response carries goes through it."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.mask = SecretMasker(known_secrets(service.settings, os.environ))

    def text(self, text: str) -> str:
        text = self.mask(text)
        return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"

    async def channels(self) -> list[ChannelOut]:
        svc, out = self.service, []
        for name, channel in svc.channels.items():
            health = channel.health()
            detail, intake = health.get("detail"), health.get("intake")
            out.append(
                ChannelOut(
                    name=name,
                    state=str(health["state"]),
                    detail=self.mask(str(detail)) if detail else None,
                    intake=self.mask(str(intake)) if intake else None,
                )
            )
        out.extend(
            ChannelOut(name=n, state="error", detail=self.mask(e)) for n, e in svc.channel_errors.items()
        )
        return out

    async def turns(self) -> list[TurnOut]:
        """Pending inbox entries, oldest first; per thread the oldest is running while the lane runs."""
        manager = self.service.manager
        now = time.time()
        seen_running: set[str] = set()
        out: list[TurnOut] = []
        for entry in await self.service.inbox.unfinished():
            if entry.status != PENDING:
                continue  # failed, waiting for its redelivery: listed with the dead letters
            thread = await thread_of(self.service, entry)
            lane = manager.lane_state(thread) if manager is not None and thread is not None else "idle"
            state: Literal["running", "queued", "waiting"] = "waiting"
            if thread is not None and lane.startswith("running"):
                state = "queued" if thread in seen_running else "running"
                seen_running.add(thread)
            out.append(
                TurnOut(
                    id=entry.id,
                    channel=entry.message.provider,
                    chat=entry.message.chat,
                    sender=_sender(entry),
                    text=self.text(entry.message.text),
                    state=state,
                    age_seconds=round(now - entry.created_at, 1),
                )
            )
        return out

    async def dead_letters(self) -> list[DeadLetterOut]:
        now = time.time()
        return [
            DeadLetterOut(
                id=e.id,
                channel=e.message.provider,
                chat=e.message.chat,
                sender=_sender(e),
                text=self.text(e.message.text),
                status="dead" if e.status == DEAD else "failed",
                attempts=e.attempts,
                error=self.mask(e.error) if e.error else None,
                age_seconds=round(now - e.created_at, 1),
            )
            for e in await self.service.inbox.entries(failed_only=True, limit=LIST_LIMIT)
            if e.status in (FAILED, DEAD)
        ]

    async def deliveries(self) -> list[DeliveryOut]:
        now = time.time()
        return [
            DeliveryOut(
                id=d.id,
                event=f"{d.event}.{d.action}" if d.action else d.event,
                status="stuck" if d.stuck else d.status,  # type: ignore[arg-type]
                attempts=d.attempts,
                detail=self.text(_delivery_detail(d)),
                retryable=d.retryable,
                age_seconds=round(now - d.created_at, 1),
            )
            for d in await self.service.github.store.list(limit=LIST_LIMIT)
        ]

    async def approvals(self) -> list[ApprovalOut]:
        desk = self.service.manager.approvals if self.service.manager is not None else None
        if desk is None:
            return []
        now = time.time()
        return [
            ApprovalOut(
                id=a.id,
                channel=a.message.provider,
                chat=a.message.chat,
                sender=a.message.sender.name or a.message.sender.id,
                command=self.mask(a.command),
                reason=self.mask(a.reason),
                age_seconds=round(now - a.created_at, 1),
            )
            for a in await desk.pending()
        ]

    async def schedules(self) -> list[ScheduleOut]:
        return [
            ScheduleOut(
                id=s.id,
                owner=s.owner,
                channel=s.message.provider,
                chat=s.message.chat,
                when=s.when,
                what=self.text(s.what),
                next_at=s.next_at,
            )
            for s in await self.service.schedules.book.store.active(LIST_LIMIT)
            if s.next_at is not None
        ]

    async def people(self) -> list[PersonOut]:
        return [
            PersonOut(
                id=p.id, last_seen_at=p.last_seen_at, connections=[connection_out(c) for c in p.connections]
            )
            for p in await self.service.connections.store.people(LIST_LIMIT)
        ]
