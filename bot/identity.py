"""Who owns an inbound message. The manager asks this for every message.

Resolution is an explicit chain built by :mod:`bot.service`: each :class:`IdentitySource` either claims
a message (returns an :class:`Identity`) or passes (``None``), in the order the service lists them; the
last word is :class:`PlatformIdentityResolver`, which gives each platform identity its own owner space.
A chain, not wrappers around wrappers, so adding a source never hides another one's type or state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from channels.types import InboundMessage


@dataclass(frozen=True, slots=True)
class Identity:
    owner: str
    bound: bool


class IdentityResolver(Protocol):
    """Always answers: the manager needs an owner for every message."""

    async def resolve(self, message: InboundMessage) -> Identity: ...


class IdentitySource(Protocol):
    """May answer: ``None`` means "not mine, ask the next source"."""

    async def resolve(self, message: InboundMessage) -> Identity | None: ...


def unbound_owner(message: InboundMessage) -> str:
    """The owner id of a platform identity that nobody has connected yet."""
    workspace = message.workspace or "-"
    return f"{message.provider}:{workspace}:{message.sender.id}"


class PlatformIdentityResolver:
    """Every sender is their own owner; nobody is ever 'bound'."""

    async def resolve(self, message: InboundMessage) -> Identity:
        return Identity(owner=unbound_owner(message), bound=False)


class IdentityChain:
    """Ask each source in order; the first that answers owns the message, else the fallback does."""

    def __init__(self, sources: Sequence[IdentitySource], fallback: IdentityResolver | None = None) -> None:
        self.sources = tuple(sources)
        self.fallback: IdentityResolver = fallback or PlatformIdentityResolver()

    async def resolve(self, message: InboundMessage) -> Identity:
        for source in self.sources:
            identity = await source.resolve(message)
            if identity is not None:
                return identity
        return await self.fallback.resolve(message)
