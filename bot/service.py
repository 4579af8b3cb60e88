"""Assembly: what runs, in which order, and what each part is given.

Read top to bottom, :meth:`Service.__init__` lists every part and :meth:`Service.start` starts them:

    database schema → WAL maintenance → inbox writer → agent → manager (identity chain, /connect store)
    → features (agent hooks, connections, GitHub, schedules) → resume unfinished → retry poll → channels

:meth:`Service.stop` reverses it: channels pause (no new input), the manager drains running turns,
channels stop, features stop in reverse, then the inbox writer, the agent, and last the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import MetaData

from agent.events import Agent
from agent.runtime import AgentRuntime
from bot import approvals as approvals_module
from bot import inbox as inbox_module
from bot import migrations
from bot import threads as threads_module
from bot.approvals import ApprovalDesk
from bot.bus import MessageBus
from bot.db import Database
from bot.features import Feature, Foundation, Running
from bot.features.agent import AgentFeature
from bot.features.connections import ConnectionsFeature
from bot.features.github import GitHubFeature
from bot.features.schedules import SchedulesFeature
from bot.identity import IdentityChain
from bot.inbox import Inbox
from bot.manager import ROUTE_CONNECTIONS, ChannelManager
from bot.registry import channel_class
from bot.threads import ThreadStore
from channels.base import Channel
from channels.types import ChatCommand
from config.schema import Settings

log = logging.getLogger(__name__)

VERSION = "0.1.0"
CHANNEL_CALL_TIMEOUT_SECONDS = 10


class Service:
    def __init__(
        self,
        settings: Settings,
        *,
        channels: dict[str, Channel] | None = None,
        agent: Agent | None = None,
        chat_models: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        # Storage: one database, the durable inbox in front of the bus, the conversation → thread map.
        # A connection for every running turn plus some for routing and background work; routing waits
        # on its own bound (bot/manager.py) and creates new conversations in batches, so a burst of new
        # chats queues in the process instead of timing out in the pool.
        pool = settings.bus.max_concurrent_turns + ROUTE_CONNECTIONS
        self.db = Database(settings.database.url, pool_size=pool)
        self.inbox = Inbox(self.db, max_attempts=settings.bus.max_attempts)
        self.bus = MessageBus(self.inbox, settings.bus.queue_size)
        self.threads = ThreadStore(self.db)
        base = Foundation(settings=settings, db=self.db, threads=self.threads)
        # Features, in the order they start (and the reverse of the order they stop).
        self.agent_feature = AgentFeature()
        self.connections = ConnectionsFeature(base, live_providers=lambda: list(self.channels))
        self.github = GitHubFeature(base)
        self.schedules = SchedulesFeature(base, publish=self.bus.publish, clock=clock)
        self.features: list[Feature] = [self.agent_feature, self.connections, self.github, self.schedules]
        # Who owns a message: GitHub agents own their threads; everyone else per their connection.
        self.identity = IdentityChain([self.github.identity, self.connections.identity])

        self._given_channels = channels
        self._given_agent = agent
        self._chat_models = chat_models
        self.channels: dict[str, Channel] = {}
        self.agent: Agent | None = None
        self.manager: ChannelManager | None = None
        self.started_at: float | None = None
        self._retry_poll: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self.channel_errors: dict[str, str] = {}

    @property
    def data_dir(self) -> Path:
        return Path(self.settings.data_dir)

    def tables(self) -> list[MetaData]:
        metadatas = [
            inbox_module.metadata,
            threads_module.metadata,
            approvals_module.metadata,
            migrations.metadata,
        ]
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

    async def _build_agent(self) -> Agent:
        if self._given_agent is not None:
            return self._given_agent
        runtime = AgentRuntime(
            self.settings,
            checkpoint_path=self.checkpoint_path(),
            chat_models=self._chat_models,
            engine=self.db.engine,
        )
        await runtime.start()
        return runtime

    async def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.db.claim_instance()  # SQLite: one instance per database file (PostgreSQL: any number)
        await self.db.create_schema(self.tables())
        self.db.start_maintenance()
        await self.inbox.start()
        self.agent = await self._build_agent()
        self.channels = self.build_channels()
        self.manager = ChannelManager(
            settings=self.settings,
            bus=self.bus,
            inbox=self.inbox,
            threads=self.threads,
            agent=self.agent,
            channels=self.channels,
            identity=self.identity,
            connections=self.connections.store,
            schedules=self.schedules.book,
        )
        if self.settings.sandbox.approval != "never":  # risky commands wait for /approve in their chat
            self.manager.approvals = ApprovalDesk(
                self.db, self.manager.send_notice, timeout=self.settings.sandbox.approval_timeout_seconds
            )
        running = Running(agent=self.agent, manager=self.manager, channels=self.channels)
        for feature in self.features:
            await feature.start(running)
        await self.manager.start()
        await self.bus.resume_unfinished()
        self._retry_poll = asyncio.create_task(self._poll_retries(), name="inbox-retries")
        for provider, channel in self.channels.items():
            await self._start_channel(provider, channel)
        if self.manager.approvals is not None:  # nothing approved for a previous process runs now
            await self.manager.approvals.expire_leftovers()
        self.started_at = time.time()

    async def _poll_retries(self) -> None:
        """Pick up ``switchboard inbox retry ID`` requests (the CLI only marks the row in the database)."""
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.settings.bus.retry_poll_seconds)
                return
            try:
                await self.bus.resume_retries()
            except Exception as exc:  # a busy or briefly unreachable database: the next poll does it
                log.warning("checking for inbox retries failed: %s", exc)

    async def _start_channel(self, provider: str, channel: Channel) -> None:
        channel.status.set("starting")
        if self.manager is not None:  # platforms with a command menu list what the manager answers
            channel.offer_commands([ChatCommand(c.name, c.help) for c in self.manager.commands.commands])
        try:
            await channel.start(self.bus.publish)
        except Exception as exc:
            # One broken platform must not take the others down; /health and doctor show it.
            log.error("channel %s failed to start: %s", provider, exc)
            channel.status.set("error", str(exc))

    async def stop(self, grace: float | None = None) -> None:
        # 1. pause: no new input; 2. drain: running turns finish and can still reply; 3. stop: disconnect.
        await self._each_channel("pause")
        self._stopping.set()
        if self._retry_poll is not None:
            await self._retry_poll  # stopped between polls, so a claimed retry is never lost mid-way
            self._retry_poll = None
        if self.manager is not None:
            await self.manager.stop(grace)
        await self._each_channel("stop")
        for feature in reversed(self.features):
            try:
                await feature.stop()
            except Exception:
                log.exception("feature %s did not stop cleanly", feature.name)
        await self.inbox.close()
        if self.agent is not None:
            await self.agent.close()
        await self.db.close()  # last: it awaits the WAL maintenance task before closing connections

    async def _each_channel(self, method: str) -> None:
        for provider, channel in self.channels.items():
            call = channel.pause if method == "pause" else channel.stop
            try:
                await asyncio.wait_for(call(), timeout=CHANNEL_CALL_TIMEOUT_SECONDS)
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
            "mcp": self.agent.mcp_status() if self.agent is not None else {},
            "channels": channels,
            "inbox": {"unfinished": self.bus.load},
        }
