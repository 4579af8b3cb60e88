"""Who sent a message — ``admin``, ``member`` or ``guest`` — and what that lets the agent do.

Decided by the manager for every message, before anything runs (docs/security.md). The facts come from
the channel without the manager asking which platform it is: ``Channel.is_admin`` (``admins``),
``Channel.allow_listed`` (``allowed_users``), ``Sender.member`` (the platform vouches the sender belongs
to the workspace the bot is installed in) and ``Channel.trust`` (the ``channels.<name>.trust`` policy);
from the bot: a connected account (the identity is bound) and an admin's pairing approval.

A level maps to a tool profile (agent/events.py): admins and members get every tool (approvals still
apply), guests get the chat-only profile — or no answer at all, or a pairing request, per the policy.
Scheduled occurrences and goal steps never run above the level their creator had when they were made,
nor above the creator's level now.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from agent.events import CHAT_ONLY_PROFILE, FULL_PROFILE, ToolProfile, TrustLevel
from bot.identity import Identity
from bot.pairing import PairingStore, TooManyRequests
from channels.base import Channel
from channels.types import InboundMessage
from config.base import EVERYONE

log = logging.getLogger(__name__)

_RANK: dict[str, int] = {"guest": 0, "member": 1, "admin": 2}
LEVELS: tuple[TrustLevel, ...] = ("guest", "member", "admin")

PAIRING_NOTE = (
    "🔐 I don't know you yet, so I haven't read your message. Your pairing code is {code}. "
    "Send it to an admin of this bot (someone you know who runs it); once they approve it with "
    "/pair {code}, I'll answer your message. The code expires in an hour."
)
PAIRING_FULL = (
    "🔐 I don't know you yet, and too many people are waiting for approval right now. Please try again "
    "later, or ask an admin of this bot to add you."
)
GUEST_COMMAND = (
    "Sorry, /{name} is only for members of this bot. You can still ask me questions in plain words."
)


def as_level(value: str | None) -> TrustLevel:
    """A stored level (a schedule's) → a level; anything unknown counts as the lowest, ``guest``."""
    for level in LEVELS:
        if value == level:
            return level
    return "guest"


def lowest(a: TrustLevel, b: TrustLevel) -> TrustLevel:
    return a if _RANK[a] <= _RANK[b] else b


def profile_for(level: TrustLevel) -> ToolProfile:
    """What a level may make the agent do."""
    return CHAT_ONLY_PROFILE if level == "guest" else FULL_PROFILE


@dataclass(frozen=True, slots=True)
class GuestRefusal:
    """A guest's message that is not answered by a turn: what they are told (if anything) and why."""

    notice: str | None
    reason: str


GuestMode = Literal["ignore", "chat_only", "pair"]


class TrustPolicy:
    """Decides levels and what happens to guests; holds the pairing store (None: pairing unavailable)."""

    def __init__(self, pairing: PairingStore | None = None) -> None:
        self.pairing = pairing

    async def level(self, message: InboundMessage, channel: Channel, identity: Identity) -> TrustLevel:
        if message.trust is not None:  # decided at the edge from the event itself (GitHub's association)
            return message.trust
        if channel.is_admin(message):
            return "admin"
        policy = channel.trust
        if EVERYONE in policy.members or message.sender.id in policy.members:
            return "member"
        if channel.allow_listed(message) or identity.bound:
            return "member"
        if message.sender.member and policy.workspace_members == "member":
            return "member"
        if self.pairing is not None and await self.pairing.is_paired(message.provider, message.sender.id):
            return "member"
        return "guest"

    @staticmethod
    def guest_mode(message: InboundMessage, channel: Channel) -> GuestMode:
        policy = channel.trust
        return policy.guests if message.is_private else policy.group_guests

    async def refuse_guest(
        self, message: InboundMessage, channel: Channel, *, now: float, automated: bool = False
    ) -> GuestRefusal | None:
        """None: answer this guest under the chat-only profile. Otherwise what to do instead.

        ``automated`` (a scheduled occurrence) never starts a pairing request: nobody is there to pair.
        """
        mode = self.guest_mode(message, channel)
        if mode == "chat_only":
            return None
        if mode == "ignore" or automated or self.pairing is None:
            log.info(
                "not answering a guest (trust.%s: %s)",
                "guests" if message.is_private else "group_guests",
                mode,
            )
            return GuestRefusal(
                None, f"not answered: the sender is a guest and this channel's policy is {mode}"
            )
        try:
            request = await self.pairing.request(message, now)
        except TooManyRequests:
            return GuestRefusal(PAIRING_FULL, "not answered: a guest, and the pairing queue is full")
        log.info("pairing requested by a guest on %s", message.provider)
        return GuestRefusal(
            PAIRING_NOTE.format(code=request.code),
            f"not answered: a guest; pairing code {request.code} waits for an admin",
        )
