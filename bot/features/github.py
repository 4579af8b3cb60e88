"""Wires GitHub webhooks into the service: the delivery table, the route, the retry loop, identities.

GitHub agents act in their own owner space (``agents[].owner``, default ``github:<name>``) rather than
the commenter's: the agent is configured by the operator, and every commenter on an issue talks to the
same thread. :class:`GitHubAgentIdentity` is one link of the service's identity chain that answers only
for GitHub messages and passes on everything else, so chat platforms keep the connections source.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from sqlalchemy import MetaData

from bot.features import Foundation, Running
from bot.identity import Identity
from bot.threads import ThreadStore
from channels.types import InboundMessage
from config.schema import Settings
from webhooks import store as store_module
from webhooks.processor import DeliveryProcessor
from webhooks.store import DeliveryStore

if TYPE_CHECKING:
    from fastapi import APIRouter

log = logging.getLogger(__name__)


class GitHubAgentIdentity:
    """GitHub messages belong to the bound agent's owner; any other message is not this source's."""

    async def resolve(self, message: InboundMessage) -> Identity | None:
        owner = message.context.get("owner") if message.provider == "github" else None
        return Identity(owner=str(owner), bound=True) if owner else None


class GitHubFeature:
    name = "github"

    def __init__(self, base: Foundation) -> None:
        self.settings: Settings = base.settings
        self.threads: ThreadStore = base.threads
        self.identity = GitHubAgentIdentity()
        db = base.db
        # SQLite: the delivery log commits on the event loop through its own connection (see
        # webhooks/sqlite_writer.py); the acknowledgement GitHub waits for is mostly that commit.
        self.store = DeliveryStore(
            db.engine, is_sqlite=db.is_sqlite, sqlite_connect=db.sqlite_connection if db.is_sqlite else None
        )
        self.processor = DeliveryProcessor(base.settings.channels.github, self.store)
        self._retries: asyncio.Task[None] | None = None

    def tables(self) -> list[MetaData]:
        return [store_module.metadata]

    def routers(self) -> list[APIRouter]:
        from webhooks.route import build_router  # FastAPI: only when serving HTTP

        return [build_router(self.settings.channels.github, self.processor)]

    async def start(self, running: Running) -> None:
        channel = running.channels.get("github")
        if channel is None:
            return
        from webhooks.channel import GitHubChannel  # the GitHub SDK: only when GitHub is enabled
        from webhooks.route import insecure_warning

        if not isinstance(channel, GitHubChannel):
            log.error("the github channel is a %s, not a GitHubChannel; webhooks stay off", type(channel))
            return
        config = self.settings.channels.github
        warning = insecure_warning(config)
        if warning:
            log.warning(warning)
        self.processor.channel = channel
        self.processor.before_publish = self._model_applier()
        self._retries = asyncio.create_task(
            self.processor.retry_loop(config.retry_poll_seconds), name="github-retries"
        )

    def _model_applier(self) -> Callable[[InboundMessage], Awaitable[None]] | None:
        """An agent's ``model`` becomes its conversations' model when they are first created."""
        models = {a.name: a.model for a in self.settings.channels.github.agents if a.model}
        known = {m.name for m in self.settings.models}
        for agent, model in models.items():
            if model not in known:
                log.warning(
                    "GitHub agent %s names model %r, which is not in models; using the default", agent, model
                )
        if not models:
            return None
        threads = self.threads

        async def apply(message: InboundMessage) -> None:
            model = models.get(message.topic or "")
            if model is None:
                return
            key = message.conversation_key
            owner = str(message.context.get("owner") or "")
            conversation = await threads.get_or_create(key, owner, message.thread_id)
            if conversation.model is None:
                await threads.set_model(key, owner, model)

        return apply

    async def stop(self) -> None:
        if self._retries is not None:
            self._retries.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._retries
            self._retries = None
        await self.store.close()
        if self.processor.channel is not None:
            channel, self.processor.channel = self.processor.channel, None
            await channel.close()
