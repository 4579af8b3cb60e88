"""Approving risky commands from chat: the durable record, the waiting turn, and ``/approve``/``/deny``.

A turn whose ``bash`` call is risky (``agent/approval.py``) asks through its :class:`ChatApproval` gate:
the request is stored (``approvals`` table), shown in the chat with the exact command, its id and
Approve / Deny buttons where the platform has buttons, and the turn waits until the person who asked
presses one (or types ``/approve ID`` / ``/deny ID``: a button *is* that command), or the timeout
passes. Every decision is written to the log as an audit line (who, when, what), and the request's
message is edited to say what happened, which also takes its buttons away.

Who may say yes is the channel's ``approvers`` setting: ``requester`` (the person whose message started
the turn, from the same conversation, or one of the channel's ``admins``) or ``admins`` (only an admin).
Unset, it is ``admins`` in group chats (GitHub included) and ``requester`` in a member's direct
messages; a guest's command always needs an admin. Otherwise a hostile person in a group could ask the
bot for something destructive and approve it himself. Saying no is always open to the requester too.
Decisions are taken with a conditional UPDATE on a pending row, so a decision delivered twice (a
redelivered press, two clicks) acts once.

``/approve ID session`` also allows the same command patterns (``git push``, ``rm``: program and
subcommand, see ``agent.approval.command_pattern``) for the rest of the conversation — until ``/new``
starts another thread — without asking again. The allowance lives in this process only: a restart,
or a turn run by another instance, asks again (failing closed).

A restart never runs a command approved for the old process: pending requests are marked expired at
start-up and their chats are told; the interrupted turn runs again and asks afresh if it still needs to.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from sqlalchemy import Column, Float, MetaData, String, Table, Text, select, update

from agent.events import ApprovalDecision, TrustLevel
from bot.engine import HasEngine
from channels.base import Channel
from channels.types import Action, InboundMessage

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
    # The request's message in the chat (migration step 2), edited with the outcome; None: not known.
    Column("notice_ref", Text),
)

PENDING, APPROVED, DENIED, EXPIRED, CANCELLED = "pending", "approved", "denied", "expired", "cancelled"
POSTED_WAIT_SECONDS = 10.0  # longest a decision waits for its request's message to be posted
ID_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O or 1/I: read aloud and typed on a phone
Approvers = Literal["requester", "admins"]


class Notify(Protocol):
    """Posts one message in an inbound message's conversation, or edits ``resume_ref`` into it (the
    manager's ``send_notice``); returns the posted message's reference where the platform gives one."""

    async def __call__(
        self,
        message: InboundMessage,
        text: str,
        *,
        actions: Sequence[Action] = (),
        resume_ref: str | None = None,
    ) -> str | None: ...


def _who(message: InboundMessage) -> str:
    return f"{message.provider}:{message.sender.id}"


def _buttons(approval_id: str, session: bool) -> tuple[Action, ...]:
    once = Action(f"/approve {approval_id}", "Approve", "primary")
    deny = Action(f"/deny {approval_id}", "Deny", "danger")
    if not session:
        return (once, deny)
    return (once, Action(f"/approve {approval_id} session", "Allow until /new"), deny)


def approvers_for(message: InboundMessage, trust: TrustLevel, setting: Approvers | None) -> Approvers:
    """Who may approve a command of this turn (see the module doc): a guest's always needs an admin."""
    if trust == "guest":
        return "admins"
    if setting is not None:
        return setting
    return "requester" if message.is_private else "admins"


def _patterns_text(patterns: Sequence[str]) -> str:
    return ", ".join(f"`{p}`" for p in patterns)


@dataclass(slots=True)
class _Asked:
    """What this process remembers of a request it is waiting on."""

    thread_id: str
    approvers: Approvers
    patterns: tuple[str, ...]
    future: asyncio.Future[ApprovalDecision] = field(repr=False)


def _settled_text(row: Mapping[str, Any], outcome: str) -> str:
    """The request's message once it is no longer waiting: the command, and what became of it."""
    return f"🔐 Approval {row['id']} — this command {row['reason']}:\n```\n{row['command']}\n```\n{outcome}"


@dataclass(frozen=True, slots=True)
class Verdict:
    """What ``/approve`` or ``/deny`` tells the person who sent it."""

    ok: bool
    text: str
    #: The request's own message now shows the outcome (a press needs no second message saying it).
    edited: bool = False


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A request waiting for a decision: where it was asked, and the command as shown (secrets masked)."""

    id: str
    message: InboundMessage
    command: str
    reason: str
    created_at: float


class ApprovalDesk:
    """Every approval request of this process: stored, waited on, decided once."""

    def __init__(
        self,
        db: HasEngine,
        notify: Notify,
        *,
        timeout: float,
        channels: Mapping[str, Channel] | None = None,
        runs_elsewhere: Callable[[InboundMessage], Awaitable[bool]] | None = None,
    ) -> None:
        self.db = db
        #: Several instances on one database (bot/cluster.py): whether another live instance runs the
        #: conversation of a message now, so a pending request of it is that instance's, not a leftover.
        self.runs_elsewhere = runs_elsewhere
        self.notify = notify
        self.timeout = timeout
        #: The service's channels, for their ``approvers`` setting and whether they have admins.
        self.channels: Mapping[str, Channel] = channels if channels is not None else {}
        self._waiting: dict[str, _Asked] = {}
        #: thread id → command patterns allowed for the rest of that conversation (until /new).
        self._allowed: dict[str, set[str]] = {}
        # Set once a request's message is posted and its reference stored: a press that arrives in
        # between waits for it, so the outcome edits the request instead of missing it.
        self._posted: dict[str, asyncio.Event] = {}

    async def expire_leftovers(self) -> int:
        """At start-up: requests a previous process left pending are expired, and their chats told."""
        # This process's own requests (a resumed turn may already be asking) are not leftovers.
        leftover = (approvals_table.c.status == PENDING) & approvals_table.c.id.notin_(list(self._waiting))
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(select(approvals_table).where(leftover))).mappings().all()
        expired = []
        for row in rows:
            message = InboundMessage.from_json(json.loads(row["message"]))
            if self.runs_elsewhere is not None and await self.runs_elsewhere(message):
                continue  # another live instance runs that conversation: its turn waits on this request
            if await self._settle(row["id"], EXPIRED, "restart"):  # not decided meanwhile
                expired.append(row)
        for row in expired:
            audit.info(
                "approval %s expired by a restart: %s",
                row["id"],
                row["command"],
                extra={"fields": {"approval": row["id"], "decision": EXPIRED, "by": "restart"}},
            )
            await self._announce(
                dict(row),
                f"⌛ Approval {row['id']} expired: the bot restarted before it was answered, so the "
                "command did not run. The reply continues and asks again if it still needs it.",
            )
        return len(expired)

    async def _announce(self, row: Mapping[str, Any], outcome: str) -> None:
        """Say what became of a request: its message edited in place (buttons gone), else a new message."""
        message = InboundMessage.from_json(json.loads(row["message"]))
        ref = row.get("notice_ref")
        try:
            if ref:
                await self.notify(message, _settled_text(row, outcome), resume_ref=ref)
            else:
                await self.notify(message, outcome)
        except Exception as exc:  # the platform may be down; the record is already settled
            log.warning("could not tell a chat what became of approval %s: %s", row["id"], exc)

    async def pending(self) -> list[PendingApproval]:
        """Requests of this process still waiting for a decision, oldest first (the operator console).

        Only this process's: a request another instance or an earlier process made cannot be decided
        here (its turn waits elsewhere, or is gone)."""
        waiting = list(self._waiting)
        if not waiting:
            return []
        query = (
            select(approvals_table)
            .where(approvals_table.c.status == PENDING, approvals_table.c.id.in_(waiting))
            .order_by(approvals_table.c.created_at)
        )
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [
            PendingApproval(
                id=row["id"],
                message=InboundMessage.from_json(json.loads(row["message"])),
                command=row["command"],
                reason=row["reason"],
                created_at=row["created_at"],
            )
            for row in rows
        ]

    def allowed(self, thread_id: str, patterns: Sequence[str]) -> bool:
        """Every one of ``patterns`` was allowed for this conversation by an ``/approve … session``."""
        granted = self._allowed.get(thread_id)
        return bool(patterns) and granted is not None and set(patterns) <= granted

    def _who_may(self, message: InboundMessage, approvers: Approvers, patterns: Sequence[str]) -> str:
        """The end of the request's message: who can answer, what ``session`` covers, when it expires."""
        minutes = max(1, round(self.timeout / 60))
        channel = self.channels.get(message.provider)
        if approvers == "requester":
            who = f"only {message.sender.name or 'the person who asked'} or an admin can"
        elif channel is not None and not channel.admins:
            who = (
                f"only an admin of this chat can approve, and none is set (channels.{message.provider}.admins), "
                "so it will expire unless denied"
            )
        else:
            who = "only an admin of this chat can approve"
        session = (
            f"\nOr /approve ID session to also let {_patterns_text(patterns)} run without asking in this "
            "conversation until /new."
            if patterns
            else ""
        )
        return f"({who}; expires in {minutes} min).{session}"

    async def request(
        self,
        message: InboundMessage,
        thread_id: str,
        command: str,
        reason: str,
        *,
        patterns: Sequence[str] = (),
        trust: TrustLevel = "member",
        subject: str = "command",
    ) -> ApprovalDecision:
        """Store, show and wait for one decision (see the module doc). ``subject`` names what is asked
        about in the request's first line (a turn over its budget asks too: bot/spend/)."""
        approval_id = "".join(secrets.choice(ID_ALPHABET) for _ in range(6))
        future: asyncio.Future[ApprovalDecision] = asyncio.get_running_loop().create_future()
        channel = self.channels.get(message.provider)
        approvers = approvers_for(message, trust, channel.approvers if channel is not None else None)
        self._waiting[approval_id] = _Asked(thread_id, approvers, tuple(patterns), future)
        posted = self._posted[approval_id] = asyncio.Event()
        # Posting runs in a task of its own that a /stop does not cut: a request the chat shows has its
        # message id stored before the stop withdraws it, so the withdrawal edits that message (buttons
        # gone) instead of leaving live buttons above a second message.
        posting = asyncio.ensure_future(
            self._post(message, approval_id, thread_id, command, reason, subject, approvers, patterns)
        )
        try:
            await asyncio.shield(posting)
            posted.set()
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
                    await self._announce(
                        await self._row(approval_id),
                        f"⌛ Approval {approval_id} expired; the command did not run.",
                    )
                    return ApprovalDecision(
                        False,
                        f"Nobody approved the command within {self.timeout:g} s, so it did not run. "
                        "Tell the user it needs their approval if it is still wanted.",
                    )
                if (await self._row(approval_id)).get("status") in (APPROVED, DENIED):
                    return await future  # decided here in the same instant the timeout fired
                # Settled by no decision of this process (another instance's start-up took it for a
                # leftover): nothing will ever answer the future, so the turn goes on as on a timeout.
                return ApprovalDecision(
                    False,
                    "The approval request was closed before anyone answered, so the command did not run. "
                    "Tell the user it needs their approval if it is still wanted.",
                )
        except asyncio.CancelledError:
            # /stop, or a shutdown cutting the turn off: withdrawn for good, and the chat says so (the
            # turn resumed after a restart asks again).
            await asyncio.shield(self._withdraw(approval_id, posting))
            raise
        finally:
            self._waiting.pop(approval_id, None)
            self._posted.pop(approval_id, None)

    async def _post(
        self,
        message: InboundMessage,
        approval_id: str,
        thread_id: str,
        command: str,
        reason: str,
        subject: str,
        approvers: Approvers,
        patterns: Sequence[str],
    ) -> None:
        """Store the request, show it in the chat and store where it was shown."""
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
        ref = await self.notify(
            message,
            f"🔐 Approval needed — this {subject} {reason}:\n```\n{command}\n```\n"
            f"Reply /approve {approval_id} to run it or /deny {approval_id} to refuse "
            + self._who_may(message, approvers, patterns).replace("ID", approval_id),
            actions=_buttons(approval_id, bool(patterns)),
        )
        if ref:
            async with self.db.engine.begin() as conn:
                await conn.execute(
                    update(approvals_table).where(approvals_table.c.id == approval_id).values(notice_ref=ref)
                )

    async def _row(self, approval_id: str) -> dict[str, Any]:
        async with self.db.engine.connect() as conn:
            row = (
                (await conn.execute(select(approvals_table).where(approvals_table.c.id == approval_id)))
                .mappings()
                .first()
            )
        return dict(row) if row is not None else {}

    async def decide(
        self,
        approval_id: str,
        message: InboundMessage,
        *,
        approve: bool,
        admin: bool = False,
        approver: bool = False,
        session: bool = False,
    ) -> Verdict:
        """``/approve`` / ``/deny`` (typed or pressed) from ``message``'s sender; ``admin``: the sender is
        one of the channel's admins, who may decide for anybody in any conversation of that channel;
        ``approver``: the sender may decide for anybody in this conversation (a GitHub collaborator);
        ``session``: also allow the request's command patterns for the rest of the conversation."""
        approval_id = approval_id.strip().upper()
        posted = self._posted.get(approval_id)
        if posted is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(posted.wait(), POSTED_WAIT_SECONDS)
        row = await self._row(approval_id)
        if not row:
            return Verdict(False, f"There is no approval request {approval_id or '(missing id)'}.")
        asked_in = InboundMessage.from_json(json.loads(row["message"]))
        if asked_in.conversation_key != message.conversation_key and not admin:
            return Verdict(False, f"Approval {approval_id} belongs to another conversation.")
        asked = self._waiting.get(approval_id)
        if row["status"] != PENDING or asked is None:
            state = row["status"] if row["status"] != PENDING else "no longer waiting"
            return Verdict(False, f"Approval {approval_id} is {state}; nothing changed.")
        requester = row["requester"] == _who(message)
        if approve and asked.approvers == "admins" and not (admin or approver):
            also = " You can still /deny it." if requester else ""
            return Verdict(
                False, f"Sorry, only an admin of this chat can approve this ({approval_id}).{also}"
            )
        if not (requester or admin or approver):
            return Verdict(
                False,
                f"Sorry, only {asked_in.sender.name or 'the person who asked'} can decide on approval "
                f"{approval_id}.",
            )
        if session and not asked.patterns:
            return Verdict(
                False,
                f"Approval {approval_id} cannot be allowed for the whole conversation (the command could not "
                f"be narrowed to a program); /approve {approval_id} runs it once.",
            )
        status = APPROVED if approve else DENIED
        if not await self._settle(approval_id, status, _who(message)):
            return Verdict(False, f"Approval {approval_id} was already decided; nothing changed.")
        scope = " for this conversation" if session else ""
        audit.info(
            "approval %s %s%s by %s: %s",
            approval_id,
            status,
            scope,
            _who(message),
            row["command"],
            extra={
                "fields": {
                    "approval": approval_id,
                    "decision": status,
                    "by": _who(message),
                    "session": list(asked.patterns) if session else [],
                }
            },
        )
        if session:
            self._allowed.setdefault(asked.thread_id, set()).update(asked.patterns)
        future = asked.future
        decision = (
            ApprovalDecision(True, "approved")
            if approve
            else ApprovalDecision(
                False,
                "The user denied this command, so it did not run. Do not retry it; ask what they want instead.",
            )
        )
        if not future.done():
            future.set_result(decision)
        who = message.sender.name or message.sender.id
        later = (
            f" {_patterns_text(asked.patterns)} now runs without asking in this conversation until /new."
            if session
            else ""
        )
        await self._announce(
            row,
            f"✅ Approved by {who} — running it.{later}"
            if approve
            else f"🚫 Denied by {who}; it did not run.",
        )
        return Verdict(
            True,
            f"✅ Approved {approval_id} — running it.{later}" if approve else f"🚫 Denied {approval_id}.",
            edited=bool(row.get("notice_ref")),
        )

    async def _withdraw(self, approval_id: str, posting: asyncio.Future[None]) -> None:
        await asyncio.wait([posting])
        if not posting.cancelled() and (error := posting.exception()) is not None:
            log.warning("approval %s was not shown before its turn stopped: %s", approval_id, error)
        try:
            if not await self._settle(approval_id, CANCELLED, "stop"):
                return
            audit.info(
                "approval %s withdrawn: the reply stopped before a decision",
                approval_id,
                extra={"fields": {"approval": approval_id, "decision": CANCELLED, "by": "stop"}},
            )
            await self._announce(
                await self._row(approval_id),
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

    async def approve(
        self, command: str, reason: str, *, patterns: Sequence[str] = (), trust: TrustLevel = "member"
    ) -> ApprovalDecision:
        if self.desk.allowed(self.thread_id, patterns):
            audit.info(
                "command ran under a conversation allowance (%s): %s",
                ", ".join(patterns),
                command,
                extra={"fields": {"thread": self.thread_id, "allowance": list(patterns)}},
            )
            return ApprovalDecision(True, "allowed for this conversation")
        return await self.desk.request(
            self.message, self.thread_id, command, reason, patterns=patterns, trust=trust
        )
