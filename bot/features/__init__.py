"""Optional subsystems (connections, GitHub webhooks, the agent's memory and goals), one module each.

:mod:`bot.service` constructs every feature itself, in a fixed order, and hands each one a typed view of
what it may use — :class:`Foundation` when the service is built (to declare tables and HTTP routers),
:class:`Running` at start (once channels exist; the agent may still be building, so the one feature
that needs it, :class:`bot.features.agent.AgentFeature`, is started by the service once the agent is
ready). Nothing is discovered by module name, so the order in which features start, stop and answer
identity questions is written down in one place rather than following the alphabet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from sqlalchemy import MetaData

from bot.db import Database
from bot.threads import ThreadStore
from channels.base import Channel
from config.schema import Settings

if TYPE_CHECKING:
    from fastapi import APIRouter


@dataclass(frozen=True, slots=True)
class Foundation:
    """What exists as soon as the service object does: enough to declare tables and routers."""

    settings: Settings
    db: Database
    threads: ThreadStore


@dataclass(frozen=True, slots=True)
class Running:
    """What a feature may use once it starts: the live channels (before they connect)."""

    channels: Mapping[str, Channel]


class Feature(Protocol):
    """One optional subsystem. ``start`` runs before channels connect, without waiting for the agent."""

    name: str

    def tables(self) -> list[MetaData]: ...

    def routers(self) -> list[APIRouter]: ...

    async def start(self, running: Running) -> None: ...

    async def stop(self) -> None: ...
