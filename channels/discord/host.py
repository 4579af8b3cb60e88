"""What the Discord helpers (transport, interactions) need of their channel, as a narrow protocol.

The helpers used to take the whole ``DiscordChannel`` (and reach into its private state), which made an
import circle inside the package: the channel builds them, and they named the channel for typing. They
now name only this; ``DiscordChannel`` satisfies it.
"""

from __future__ import annotations

from typing import Protocol

import discord

from channels.base import InboundSink
from config.channels.discord import DiscordConfig


class DiscordHost(Protocol):
    @property
    def provider(self) -> str: ...
    @property
    def client(self) -> discord.Client: ...
    @property
    def config(self) -> DiscordConfig: ...
    @property
    def paused(self) -> bool:
        """Stopping or handed over: nothing new is taken in."""
        ...

    @property
    def sink(self) -> InboundSink | None:
        """Where inbound messages go (None before start)."""
        ...

    def guild_allowed(self, workspace: str) -> bool: ...
    def vouches_for(self, guild: str | None, author: discord.User | discord.Member) -> bool: ...
    def thread_parent(self, channel_id: int) -> int | None:
        """The channel a thread this bot opened belongs to, or None for any other channel."""
        ...
