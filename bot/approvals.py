"""Approving risky commands from chat: the durable record, the waiting turn, and ``/approve``/``/deny``.

A turn whose ``bash`` call is risky (``agent/approval.py``) asks through its :class:`ChatApproval` gate:
the request is stored (``approvals`` table), shown in the chat with the exact command and its id, and
the turn waits until the person who asked answers ``/approve ID`` or ``/deny ID``, or the timeout
passes. Every decision is written to the log as an audit line (who, when, what).

Only the person whose message started the turn may decide, from the same conversation: in a group,
somebody else's "yes" must not run a command on another person's behalf. Decisions are taken with a
conditional UPDATE on a pending row, so a decision delivered twice (a redelivered message, two
clicks) acts once.

A restart never runs a command approved for the old process: pending requests are marked expired at
start-up and their chats are told; the interrupted turn runs again and asks afresh if it still needs to.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sqlalchemy import Column, Float, MetaData, String, Table, Text, select, update

from agent.events import ApprovalDecision
from bot.db import Database
from channels.types import InboundMessage

log = logging.getLogger(__name__)
audit = logging.getLogger("switchboard.audit")

metadata = MetaData()
approvals_table = Table(
    "approvals",
    metadata,
    Column("id", String(16), primary_key=True),
    Column("thread_id", String(64), nullable=False),
    Column("requester", String(200), nullable=False),  # provider:sender id
    Column("message", Text, nullable=False),  # the turn's InboundMessage (where to answer), JSON
    Column("command", Text, nullable=False),  # as shown to the person (secrets masked)
    Column("reason", String(200), nullable=False),
    Column("status", String(16), nullable=False),  # pending | approved | denied | expired | cancelled
    Column("decided_by", String(200)),
    Column("created_at", Float, nullable=False),
    Column("decided_at", Float),
)

PENDING, APPROVED, DENIED, EXPIRED, CANCELLED = "pending", "approved", "denied", "expired", "cancelled"
ID_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O or 1/I: read aloud and typed on a phone

#: Posts one message in the conversation of an inbound message (the manager's ``send_notice``).
Notify = Callable[[InboundMessage, str], Awaitable[None]]


def _who(message: InboundMessage) -> str:
    return f"{message.provider}:{message.sender.id}"


def _conversation(message: InboundMessage) -> tuple[str, str, str, str]:
    return message.conversation_key


@dataclass(frozen=True, slots=True)
class Verdict:
    """What ``/approve`` or ``/deny`` tells the person who sent it."""

    ok: bool
    text: str


class ApprovalDesk:
    """Every approval request of this process: stored, waited on, decided once."""

    def __init__(self, db: Database, notify: Notify, *, timeout: float) -> None:
        self.db = db
        self.notify = notify
        self.timeout = timeout
        self._waiting: dict[str, asyncio.Future[ApprovalDecision]] = {}

    async def expire_leftovers(self) -> int:
        """At start-up: requests a previous process left pending are expired, and their chats told."""
        # This process's own requests (a resumed turn may already be asking) are not leftovers.
        leftover = (approvals_table.c.status == PENDING) & approvals_table.c.id.notin_(list(self._waiting))
        async with self.db.engine.begin() as conn:
            rows = (await conn.execute(select(approvals_table).where(leftover))).mappings().all()
            if rows:
                await conn.execute(
                    update(approvals_table)
                    .where(leftover, approvals_table.c.id.in_([r["id"] for r in rows]))
                    .values(status=EXPIRED, decided_at=time.time(), decided_by="restart")
                )
        for row in rows:
            audit.info(
                "approval %s expired by a restart: %s",
                row["id"],
                row["command"],
                extra={"fields": {"approval": row["id"], "decision": EXPIRED, "by": "restart"}},
            )
            message = InboundMessage.from_json(json.loads(row["message"]))
            try:
                await self.notify(
                    message,
                    f"⌛ Approval {row['id']} expired: the bot restarted before it was answered, so the "
                    "command did not run. The reply continues and asks again if it still needs it.",
                )
            except Exception as exc:  # the platform may be down; the record is already expired
                log.warning("could not tell a chat its approval %s expired: %s", row["id"], exc)
        return len(rows)

    async def request(
        self, message: InboundMessage, thread_id: str, command: str, reason: str
    ) -> ApprovalDecision:
        """Store, show and wait for one decision (see the module doc)."""
        approval_id = "".join(secrets.choice(ID_ALPHABET) for _ in range(6))
        future: asyncio.Future[ApprovalDecision] = asyncio.get_running_loop().create_future()
        self._waiting[approval_id] = future
        try:
            async with self.db.engine.begin() as conn:
                await conn.execute(
                    approvals_table.insert().values(
                        id=approval_id,
                        thread_id=thread_id,
                        requester=_who(message),
                        message=json.dumps(message.to_json()),
                        command=command,
                        reason=reason,
                        status=PENDING,
                        created_at=time.time(),
                    )
                )
            minutes = max(1, round(self.timeout / 60))
            await self.notify(
                message,
                f"🔐 Approval needed — this command {reason}:\n```\n{command}\n```\n"
                f"Reply /approve {approval_id} to run it or /deny {approval_id} to refuse "
                f"(only {message.sender.name or 'the person who asked'} can; expires in {minutes} min).",
            )
            try:
                return await asyncio.wait_for(asyncio.shield(future), self.timeout)
            except TimeoutError:
                if await self._settle(approval_id, EXPIRED, "timeout"):
                    audit.info(
                        "approval %s expired unanswered: %s",
                        approval_id,
                        command,
                        extra={"fields": {"approval": approval_id, "decision": EXPIRED, "by": "timeout"}},
                    )
                    await self.notify(message, f"⌛ Approval {approval_id} expired; the command did not run.")
                    return ApprovalDecision(
                        False,
                        f"Nobody approved the command within {self.timeout:g} s, so it did not run. "
                        "Tell the user it needs their approval if it is still wanted.",
                    )
                return await future  # decided in the same instant the timeout fired
        except asyncio.CancelledError:
            # /stop, or a shutdown cutting the turn off: withdrawn for good, and the chat says so (the
            # turn resumed after a restart asks again).
            await asyncio.shield(self._withdraw(approval_id, message))
            raise
        finally:
            self._waiting.pop(approval_id, None)

    async def decide(self, approval_id: str, message: InboundMessage, *, approve: bool) -> Verdict:
        """``/approve`` / ``/deny`` from ``message``'s sender."""
        approval_id = approval_id.strip().upper()
        async with self.db.engine.connect() as conn:
            row = (
                (await conn.execute(select(approvals_table).where(approvals_table.c.id == approval_id)))
                .mappings()
                .first()
            )
        if row is None:
            return Verdict(False, f"There is no approval request {approval_id or '(missing id)'}.")
        asked_in = InboundMessage.from_json(json.loads(row["message"]))
        if _conversation(asked_in) != _conversation(message):
            return Verdict(False, f"Approval {approval_id} belongs to another conversation.")
        if row["requester"] != _who(message):
            return Verdict(
                False,
                f"Sorry, only {asked_in.sender.name or 'the person who asked'} can decide on approval "
                f"{approval_id}.",
            )
        if row["status"] != PENDING or approval_id not in self._waiting:
            state = row["status"] if row["status"] != PENDING else "no longer waiting"
            return Verdict(False, f"Approval {approval_id} is {state}; nothing changed.")
        status = APPROVED if approve else DENIED
        if not await self._settle(approval_id, status, _who(message)):
            return Verdict(False, f"Approval {approval_id} was already decided; nothing changed.")
        audit.info(
            "approval %s %s by %s: %s",
            approval_id,
            status,
            _who(message),
            row["command"],
            extra={"fields": {"approval": approval_id, "decision": status, "by": _who(message)}},
        )
        future = self._waiting.get(approval_id)
        decision = (
            ApprovalDecision(True, "approved")
            if approve
            else ApprovalDecision(
                False,
                "The user denied this command, so it did not run. Do not retry it; ask what they want instead.",
            )
        )
        if future is not None and not future.done():
            future.set_result(decision)
        return Verdict(
            True, f"✅ Approved {approval_id} — running it." if approve else f"🚫 Denied {approval_id}."
        )

    async def _withdraw(self, approval_id: str, message: InboundMessage) -> None:
        try:
            if not await self._settle(approval_id, CANCELLED, "stop"):
                return
            audit.info(
                "approval %s withdrawn: the reply stopped before a decision",
                approval_id,
                extra={"fields": {"approval": approval_id, "decision": CANCELLED, "by": "stop"}},
            )
            await self.notify(
                message,
                f"⌛ Approval {approval_id} withdrawn: the reply stopped first; the command did not run.",
            )
        except Exception as exc:  # shutting down: the database or platform may be gone already
            log.warning("could not withdraw approval %s cleanly: %s", approval_id, exc)

    async def _settle(self, approval_id: str, status: str, by: str) -> bool:
        """Move a pending request to ``status``; False when it was not pending any more (decided once)."""
        async with self.db.engine.begin() as conn:
            result = await conn.execute(
                update(approvals_table)
                .where(approvals_table.c.id == approval_id, approvals_table.c.status == PENDING)
                .values(status=status, decided_by=by, decided_at=time.time())
            )
        return bool(result.rowcount)


@dataclass(slots=True)
class ChatApproval:
    """The :class:`agent.events.ApprovalGate` of one turn: asks in that turn's chat."""

    desk: ApprovalDesk
    message: InboundMessage
    thread_id: str

    async def approve(self, command: str, reason: str) -> ApprovalDecision:
        return await self.desk.request(self.message, self.thread_id, command, reason)
