"""Wires named agents into the service: their table, the room window's intake, the turn runner, /status.

Built only when ``agents`` is configured; without it the service runs exactly as before (the table is
still declared, so switching agents on later needs no migration step).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import MetaData

from bot.agents import directory as directory_module
from bot.agents.directory import AgentDirectory
from bot.features import Foundation, Running
from bot.threads import Conversation

if TYPE_CHECKING:
    from fastapi import APIRouter

    from bot.manager import ChannelManager


class AgentsFeature:
    name = "agents"

    def __init__(self, base: Foundation) -> None:
        self.directory = AgentDirectory(base.settings, base.db) if base.settings.agents else None

    def tables(self) -> list[MetaData]:
        return [directory_module.metadata]

    def routers(self) -> list[APIRouter]:
        return []

    async def start(self, running: Running) -> None:
        """Before channels connect: group messages not addressed to the bot feed the room window."""
        if self.directory is None or self.directory.room is None:
            return
        for channel in running.channels.values():
            channel.overhear = self.directory.overheard

    def attach(self, manager: ChannelManager) -> None:
        """Once the manager exists: turns are fitted to their agent, and /status names it."""
        if self.directory is None:
            return
        manager.agents = self.directory
        manager.status_providers.append(self.status)

    async def status(self, conversation: Conversation) -> str | None:
        assert self.directory is not None
        kept = await self.directory.kept(conversation.thread_id)
        if kept is None:
            return "Agent: chosen by this chat's binding at the thread's first turn (/agent shows which)"
        agent = self.directory.agents.get(kept)
        name = "built-in" if agent is None else agent.name
        own_model = (
            f"; its model {agent.model} answers unless /models picked one"
            if agent is not None and agent.model and conversation.model is None
            else ""
        )
        return (
            f"Agent: {name} (this thread keeps it; a changed binding or /agent switch applies to new"
            f" threads — /agent shows why{own_model})"
        )

    async def stop(self) -> None:
        return None
