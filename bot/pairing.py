"""Pairing: how a stranger's private chat becomes a member's, with an admin's say-so (docs/security.md).

Under ``channels.<name>.trust.guests: pair`` an unknown sender's private message is not answered; the
sender gets a short code instead, and one of the channel's admins approves it with ``/pair CODE`` from any
conversation with the bot on that platform. The approval is durable (``paired_senders``), so the sender
stays a member across restarts and instances, until an admin removes them with ``/pair remove ID``.

Why a code and not "approve the last stranger": the admin must name exactly whom they let in, and the
code travels from the stranger to the admin by a path the bot does not control (they know each other).
Codes are short-lived and one request per sender is kept, so a stranger who writes again gets the same
code, not a new one — and a flood of strangers cannot grow the table beyond :data:`MAX_PENDING`.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass

from sqlalchemy import Column, Float, MetaData, String, Table, Text, delete, func, insert, select

from bot.engine import HasEngine
from channels.types import InboundMessage

metadata = MetaData()
pairing_requests_table = Table(
    "pairing_requests",
    metadata,
    Column("code", String(16), primary_key=True),
    Column("provider", String(32), nullable=False),
    Column("sender_id", String(200), nullable=False),
    Column("sender_name", String(200)),
    Column("message", Text, nullable=False),  # the message that asked (JSON): answered once approved
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False, index=True),
)
paired_senders_table = Table(
    "paired_senders",
    metadata,
    Column("provider", String(32), primary_key=True),
    Column("sender_id", String(200), primary_key=True),
    Column("sender_name", String(200)),
    Column("approved_by", String(200), nullable=False),
    Column("approved_at", Float, nullable=False),
)

#: How long a pairing code can be approved.
PAIRING_TTL_SECONDS = 3600.0
#: Open requests per platform; more strangers than this wait until some expire.
MAX_PENDING = 100
#: No 0/O or 1/I: the code is read out or retyped by people.
CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8


class TooManyRequests(Exception):
    """Every slot for open pairing requests on this platform is taken."""


@dataclass(frozen=True, slots=True)
class PairingRequest:
    code: str
    provider: str
    sender_id: str
    sender_name: str | None
    message: InboundMessage
    expires_at: float


def normalise_code(text: str) -> str:
    """What a person types (``abcd-efgh``, ``ABCDEFGH``) → the stored form."""
    return "".join(ch for ch in text.upper() if ch.isalnum())[: CODE_LENGTH * 2]


class PairingStore:
    def __init__(self, db: HasEngine) -> None:
        self.db = db

    @staticmethod
    def _request(row: object) -> PairingRequest:
        data = row._mapping  # type: ignore[attr-defined]
        return PairingRequest(
            code=data["code"],
            provider=data["provider"],
            sender_id=data["sender_id"],
            sender_name=data["sender_name"],
            message=InboundMessage.from_json(json.loads(data["message"])),
            expires_at=data["expires_at"],
        )

    async def is_paired(self, provider: str, sender_id: str) -> bool:
        t = paired_senders_table.c
        query = select(t.sender_id).where(t.provider == provider, t.sender_id == sender_id)
        async with self.db.engine.connect() as conn:
            return (await conn.scalar(query)) is not None

    async def request(self, message: InboundMessage, now: float) -> PairingRequest:
        """The sender's open request (the same code again), or a new one; raises :class:`TooManyRequests`."""
        t = pairing_requests_table.c
        async with self.db.engine.begin() as conn:
            await conn.execute(delete(pairing_requests_table).where(t.expires_at <= now))
            row = (
                await conn.execute(
                    select(pairing_requests_table).where(
                        t.provider == message.provider, t.sender_id == message.sender.id
                    )
                )
            ).first()
            if row is not None:
                return self._request(row)
            open_requests = await conn.scalar(
                select(func.count()).select_from(pairing_requests_table).where(t.provider == message.provider)
            )
            if (open_requests or 0) >= MAX_PENDING:
                raise TooManyRequests(message.provider)
            code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
            name = (message.sender.name or "")[:200] or None
            await conn.execute(
                insert(pairing_requests_table).values(
                    code=code,
                    provider=message.provider,
                    sender_id=message.sender.id,
                    sender_name=name,
                    message=json.dumps(message.to_json(), ensure_ascii=False),
                    created_at=now,
                    expires_at=now + PAIRING_TTL_SECONDS,
                )
            )
        return PairingRequest(
            code, message.provider, message.sender.id, name, message, now + PAIRING_TTL_SECONDS
        )

    async def pending(self, provider: str, now: float) -> list[PairingRequest]:
        t = pairing_requests_table.c
        query = (
            select(pairing_requests_table)
            .where(t.provider == provider, t.expires_at > now)
            .order_by(t.created_at)
        )
        async with self.db.engine.connect() as conn:
            return [self._request(row) for row in await conn.execute(query)]

    async def approve(self, provider: str, code: str, by: str, now: float) -> PairingRequest | None:
        """Make the code's sender a member; None when this platform has no such open code."""
        found = await self._take(provider, code, now)
        if found is None:
            return None
        t = paired_senders_table.c
        async with self.db.engine.begin() as conn:
            await conn.execute(
                delete(paired_senders_table).where(t.provider == provider, t.sender_id == found.sender_id)
            )
            await conn.execute(
                insert(paired_senders_table).values(
                    provider=provider,
                    sender_id=found.sender_id,
                    sender_name=found.sender_name,
                    approved_by=by[:200],
                    approved_at=now,
                )
            )
        return found

    async def deny(self, provider: str, code: str, now: float) -> PairingRequest | None:
        return await self._take(provider, code, now)

    async def _take(self, provider: str, code: str, now: float) -> PairingRequest | None:
        """Remove and return an open request; of two admins approving at once, one gets it."""
        t = pairing_requests_table.c
        where = (t.code == normalise_code(code), t.provider == provider, t.expires_at > now)
        async with self.db.engine.begin() as conn:
            row = (await conn.execute(select(pairing_requests_table).where(*where))).first()
            if row is None:
                return None
            result = await conn.execute(delete(pairing_requests_table).where(*where))
            if not result.rowcount:
                return None
        return self._request(row)

    async def remove(self, provider: str, sender_id: str) -> bool:
        """Unpair a sender (they are a guest again); False when they were not paired."""
        t = paired_senders_table.c
        async with self.db.engine.begin() as conn:
            result = await conn.execute(
                delete(paired_senders_table).where(t.provider == provider, t.sender_id == sender_id)
            )
        return bool(result.rowcount)
