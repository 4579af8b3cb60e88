"""A whole Switchboard service wired to in-memory channels and the fake model: the test kit's core.

    async with Harness.running(settings) as h:
        await h.chat.say("hello")
        msg = await h.chat.wait_for_text("echo: hello")

It starts the real ``Service`` (database, inbox, bus, manager, LangGraph runtime, features) — only the
platform and the model are fakes, and both sit across a real boundary (a Channel object / HTTP).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from bot.manager import ChannelManager
from bot.service import Service
from channels.memory import MemoryChannel
from config.schema import Settings


class Harness:
    def __init__(
        self, settings: Settings, channels: dict[str, MemoryChannel] | None = None, **service_kwargs: Any
    ) -> None:
        self.settings = settings
        self.channels = channels or {"memory": MemoryChannel("memory")}
        self.service = Service(settings, channels=dict(self.channels), **service_kwargs)

    @property
    def chat(self) -> MemoryChannel:
        return next(iter(self.channels.values()))

    @property
    def manager(self) -> ChannelManager:
        assert self.service.manager is not None
        return self.service.manager

    async def start(self) -> Harness:
        await self.service.start()
        return self

    async def stop(self, grace: float | None = 5) -> None:
        await self.service.stop(grace)

    async def idle(self, timeout: float = 10) -> None:
        """Wait until every accepted message is finished and no thread has work left."""
        await asyncio.wait_for(self.manager.wait_idle(), timeout)

    async def ask(self, text: str, *, channel: MemoryChannel | None = None, **kwargs: Any) -> str:
        """Send ``text`` and return the final text of the reply that follows it."""
        channel = channel or self.chat
        before = set(channel.messages)
        await channel.say(text, **kwargs)
        await self.idle()
        new = [m for ref, m in channel.messages.items() if ref not in before]
        return "\n".join(m.text for m in new)

    @classmethod
    @asynccontextmanager
    async def running(cls, settings: Settings, **kwargs: Any) -> AsyncIterator[Harness]:
        harness = cls(settings, **kwargs)
        await harness.start()
        try:
            yield harness
        finally:
            await harness.stop()
