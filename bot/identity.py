"""Who owns an inbound message. The manager asks this for every message.

The default resolver gives each platform identity its own owner space. ``connections/`` provides the
database-backed resolver that maps bound identities to the person who connected them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from channels.types import InboundMessage


@dataclass(frozen=True, slots=True)
class Identity:
    owner: str
    bound: bool


class IdentityResolver(Protocol):
    async def resolve(self, message: InboundMessage) -> Identity: ...


def unbound_owner(message: InboundMessage) -> str:
    """The owner id of a platform identity that nobody has connected yet."""
    workspace = message.workspace or "-"
    return f"{message.provider}:{workspace}:{message.sender.id}"


class PlatformIdentityResolver:
    """Every sender is their own owner; nobody is ever 'bound'."""

    async def resolve(self, message: InboundMessage) -> Identity:
        return Identity(owner=unbound_owner(message), bound=False)
