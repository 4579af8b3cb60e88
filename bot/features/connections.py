"""Wires :mod:`connections` into the service: its tables, its REST router and ``/connect`` page, the
connection store that ``/connect`` binds with, and the identity source that maps connected platform
accounts to the person who connected them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlalchemy import MetaData

from bot.features import Foundation, Running
from bot.identity import Identity
from bot.threads import ThreadStore
from channels.types import InboundMessage
from config.schema import Settings
from connections import ConnectionStore, OwnerResolver
from connections import metadata as connections_metadata

if TYPE_CHECKING:
    from fastapi import APIRouter

    from connections.api import ConnectionsApi


class ConnectionIdentity:
    """An :class:`~bot.identity.IdentitySource` that answers for every message (bound or not).

    A private chat's thread belongs to one owner. When the sender's owner changes (connected,
    disconnected, or taken over by another person), the chat moves to a fresh thread in the new owner's
    space, so nobody continues — or reads back — a conversation that belongs to someone else.
    """

    def __init__(self, owners: OwnerResolver, threads: ThreadStore) -> None:
        self.owners = owners
        self.threads = threads

    async def resolve(self, message: InboundMessage) -> Identity | None:
        resolved = await self.owners.resolve(message.provider, message.workspace, message.sender.id)
        if message.is_private and message.thread_id is None:
            conversation = await self.threads.get(message.conversation_key)  # cached after the first
            if conversation is not None and conversation.owner != resolved.owner:
                await self.threads.start_new_thread(message.conversation_key, resolved.owner)
        return Identity(owner=resolved.owner, bound=resolved.bound)


class ConnectionsFeature:
    name = "connections"

    def __init__(
        self,
        base: Foundation,
        live_providers: Callable[[], list[str]],
        handle: Callable[[str], str | None],
    ) -> None:
        self.settings: Settings = base.settings
        config = base.settings.connections
        self.store = ConnectionStore(
            base.db.engine,
            code_ttl_seconds=config.code_ttl_seconds,
            max_failed_attempts=config.max_failed_attempts,
            failed_attempts_window=config.failed_attempts_window_seconds,
        )
        self.identity = ConnectionIdentity(OwnerResolver(self.store), base.threads)
        self._live_providers = live_providers
        self._handle = handle
        self._api: ConnectionsApi | None = None

    def tables(self) -> list[MetaData]:
        return [connections_metadata]

    def routers(self) -> list[APIRouter]:
        from connections.api import build_router  # FastAPI: only when serving HTTP

        return [build_router(self.rest_api())]

    def rest_api(self) -> ConnectionsApi:
        """The one :class:`ConnectionsApi` of this service; the web chat signs people in through it too."""
        if self._api is None:
            from connections.api import ConnectionsApi

            self._api = ConnectionsApi(
                store=self.store,
                settings=self.settings,
                live_providers=self._live_providers,
                handle=self._handle,
            )
        return self._api

    async def start(self, running: Running) -> None:
        return None

    async def stop(self) -> None:
        return None
