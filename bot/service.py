"""Assembly: database, inbox, bus, agent, manager, channels and features, started and stopped in order.

Start order: schema → inbox writer → agent → manager → features → resume unfinished → channels.
Stop order is the reverse, with channels first so no new input arrives while the manager drains.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

from agent.events import Agent
from agent.runtime import AgentRuntime
from bot import features as feature_registry
from bot import inbox as inbox_module
from bot import migrations
from bot import threads as threads_module
from bot.bus import MessageBus
from bot.db import Database
from bot.inbox import Inbox
from bot.manager import ChannelManager
from bot.registry import channel_class
from bot.threads import ThreadStore
from channels.base import Channel
from config.schema import Settings

log = logging.getLogger(__name__)

VERSION = "0.1.0"


class Service:
    def __init__(
        self,
        settings: Settings,
        *,
        channels: dict[str, Channel] | None = None,
        agent: Agent | None = None,
        chat_models: dict[str, Any] | None = None,
        features: list[feature_registry.Feature] | None = None,
    ) -> None:
        self.settings = settings
        self.db = Database(settings.database.url)
        self.inbox = Inbox(self.db)
        self.bus = MessageBus(self.inbox, settings.bus.queue_size)
        self.threads = ThreadStore(self.db)
        self._given_channels = channels
        self._given_agent = agent
        self._chat_models = chat_models
        self.features = feature_registry.discover() if features is None else features
        self.channels: dict[str, Channel] = {}
        self.agent: Agent | None = None
        self.manager: ChannelManager | None = None
        self.started_at: float | None = None
        self.channel_errors: dict[str, str] = {}

    @property
    def data_dir(self) -> Path:
        return Path(self.settings.data_dir)

    def tables(self) -> list[Any]:
        metadatas = [inbox_module.metadata, threads_module.metadata, migrations.metadata]
        for feature in self.features:
            metadatas.extend(feature.tables())
        return metadatas

    def checkpoint_path(self) -> Path | None:
        """SQLite keeps agent checkpoints in a file beside the main database (separate write lock)."""
        path = self.db.sqlite_path
        return path.with_name(path.stem + "-checkpoints.db") if path is not None else None

    def build_channels(self) -> dict[str, Channel]:
        if self._given_channels is not None:
            return dict(self._given_channels)
        built: dict[str, Channel] = {}
        for provider, section in self.settings.channels.items():
            if not section.enabled:
                continue
            try:
                built[provider] = channel_class(provider)(section, settings=self.settings)
            except Exception as exc:
                log.error("channel %s could not be created: %s", provider, exc)
                self.channel_errors[provider] = str(exc)
        return built

    async def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        await self.db.create_schema(self.tables())
        self.db.start_maintenance()
        await self.inbox.start()
        if self._given_agent is not None:
            self.agent = self._given_agent
        else:
            runtime = AgentRuntime(
                self.settings,
                checkpoint_path=self.checkpoint_path(),
                chat_models=self._chat_models,
                engine=self.db.engine,
            )
            await runtime.start()
            self.agent = runtime
        self.channels = self.build_channels()
        self.manager = ChannelManager(
            settings=self.settings,
            bus=self.bus,
            inbox=self.inbox,
            threads=self.threads,
            agent=self.agent,
            channels=self.channels,
        )
        for feature in self.features:
            await feature.start(self)
        await self.manager.start()
        await self.bus.resume_unfinished()
        for provider, channel in self.channels.items():
            await self._start_channel(provider, channel)
        self.started_at = time.time()

    async def _start_channel(self, provider: str, channel: Channel) -> None:
        channel.status.set("starting")
        try:
            await channel.start(self.bus.publish)
        except Exception as exc:
            # One broken platform must not take the others down; /health and doctor show it.
            log.error("channel %s failed to start: %s", provider, exc)
            channel.status.set("error", str(exc))

    async def stop(self, grace: float | None = None) -> None:
        # 1. No new input; 2. running turns finish and can still reply; 3. disconnect.
        await self._each_channel("pause")
        if self.manager is not None:
            await self.manager.stop(grace)
        await self._each_channel("stop")
        for feature in reversed(self.features):
            try:
                await feature.stop(self)
            except Exception:
                log.exception("feature %s did not stop cleanly", getattr(feature, "name", feature))
        await self.inbox.close()
        if self.agent is not None:
            await self.agent.close()
        await self.db.close()

    async def _each_channel(self, method: str) -> None:
        for provider, channel in self.channels.items():
            try:
                await asyncio.wait_for(getattr(channel, method)(), timeout=10)
            except Exception as exc:
                log.warning("channel %s did not %s cleanly: %s", provider, method, exc)

    async def health(self) -> dict[str, Any]:
        db_ok = await self.db.ping()
        channels = {name: channel.health() for name, channel in self.channels.items()}
        for name, error in self.channel_errors.items():
            channels.setdefault(name, {"state": "error", "detail": error})
        degraded = not db_ok or any(c["state"] == "error" for c in channels.values())
        return {
            "status": "degraded" if degraded else "ok",
            "version": VERSION,
            "database": "ok" if db_ok else "unreachable",
            "sandbox": self.settings.sandbox.mode,
            "channels": channels,
            "inbox": {"unfinished": self.bus.load},
        }
