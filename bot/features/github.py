"""Wires GitHub webhooks into the service: the delivery table, the route, the retry loop, identities.

GitHub agents act in their own owner space (``agents[].owner``, default ``github:<name>``) rather than
the commenter's: the agent is configured by the operator, and every commenter on an issue talks to the
same thread. The identity resolver is wrapped (not replaced) so other providers keep whatever resolver
the connections feature installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from typing import Any

from bot.features import Feature
from bot.identity import Identity, IdentityResolver
from channels.types import InboundMessage
from webhooks import store as store_module
from webhooks.processor import DeliveryProcessor
from webhooks.route import build_router, insecure_warning
from webhooks.store import DeliveryStore

log = logging.getLogger(__name__)


class GitHubAgentIdentity:
    """GitHub messages belong to the bound agent's owner; everything else goes to the wrapped resolver."""

    def __init__(self, inner: IdentityResolver) -> None:
        self.inner = inner

    async def resolve(self, message: InboundMessage) -> Identity:
        owner = message.context.get("owner") if message.provider == "github" else None
        if owner:
            return Identity(owner=str(owner), bound=True)
        return await self.inner.resolve(message)


class GitHubFeature(Feature):
    name = "github"

    def __init__(self) -> None:
        self._processors: weakref.WeakKeyDictionary[Any, DeliveryProcessor] = weakref.WeakKeyDictionary()
        self._tasks: weakref.WeakKeyDictionary[Any, asyncio.Task[None]] = weakref.WeakKeyDictionary()

    def tables(self) -> list[Any]:
        return [store_module.metadata]

    def processor(self, service: Any) -> DeliveryProcessor:
        processor = self._processors.get(service)
        if processor is None:
            store = DeliveryStore(service.db.engine, is_sqlite=service.db.is_sqlite)
            processor = DeliveryProcessor(service.settings.channels.github, store)
            self._processors[service] = processor
        return processor

    def routers(self, service: Any) -> list[Any]:
        return [build_router(service.settings.channels.github, self.processor(service))]

    async def start(self, service: Any) -> None:
        channel = service.channels.get("github")
        if channel is None or not hasattr(channel, "sink"):
            return
        config = service.settings.channels.github
        warning = insecure_warning(config)
        if warning:
            log.warning(warning)
        processor = self.processor(service)
        processor.channel = channel
        processor.before_publish = self._model_applier(service)
        manager = service.manager
        if manager is not None and not isinstance(manager.identity, GitHubAgentIdentity):
            manager.identity = GitHubAgentIdentity(manager.identity)
        self._tasks[service] = asyncio.create_task(
            processor.retry_loop(config.retry_poll_seconds), name="github-retries"
        )

    @staticmethod
    def _model_applier(service: Any) -> Any:
        """An agent's ``model`` becomes its conversations' model when they are first created."""
        models = {a.name: a.model for a in service.settings.channels.github.agents if a.model}
        known = {m.name for m in service.settings.models}
        for agent, model in models.items():
            if model not in known:
                log.warning(
                    "GitHub agent %s names model %r, which is not in models; using the default", agent, model
                )
        if not models:
            return None

        async def apply(message: InboundMessage) -> None:
            model = models.get(message.topic or "")
            if model is None:
                return
            key = message.conversation_key
            owner = str(message.context.get("owner") or "")
            conversation = await service.threads.get_or_create(key, owner, message.thread_id)
            if conversation.model is None:
                await service.threads.set_model(key, owner, model)

        return apply

    async def stop(self, service: Any) -> None:
        task = self._tasks.pop(service, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        processor = self._processors.get(service)
        if processor is None:
            return
        await processor.store.close()
        if processor.channel is not None:
            channel, processor.channel = processor.channel, None
            await channel.close()


FEATURE = GitHubFeature()
