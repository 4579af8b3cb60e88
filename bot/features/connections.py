"""Wires :mod:`connections` into the service: its tables, its REST router and ``/connect`` page, and the
database-backed identity resolver the manager asks for every message's owner.

Features are module singletons while a process may run several services (tests do), so per-service
state lives in a weak map keyed by the service.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from bot.features import Feature
from bot.identity import Identity
from bot.threads import ThreadStore
from channels.types import InboundMessage
from connections import ConnectionStore, OwnerResolver
from connections import metadata as connections_metadata


class DatabaseIdentityResolver:
    """The manager's ``IdentityResolver``: bound identities map to the person who connected them.

    A private chat's thread belongs to one owner. When the sender's owner changes (connected,
    disconnected, or taken over by another person), the chat moves to a fresh thread in the new owner's
    space, so nobody continues — or reads back — a conversation that belongs to someone else.
    """

    def __init__(self, store: ConnectionStore, owners: OwnerResolver, threads: ThreadStore | None) -> None:
        self.store = store
        self.owners = owners
        self.threads = threads

    async def resolve(self, message: InboundMessage) -> Identity:
        resolved = await self.owners.resolve(message.provider, message.workspace, message.sender.id)
        if message.is_private and self.threads is not None and message.thread_id is None:
            conversation = await self.threads.get(message.conversation_key)  # cached after the first
            if conversation is not None and conversation.owner != resolved.owner:
                await self.threads.start_new_thread(message.conversation_key, resolved.owner)
        return Identity(owner=resolved.owner, bound=resolved.bound)


@dataclass
class _State:
    store: ConnectionStore
    resolver: DatabaseIdentityResolver


class ConnectionsFeature(Feature):
    name = "connections"

    def __init__(self) -> None:
        self._states: weakref.WeakKeyDictionary[Any, _State] = weakref.WeakKeyDictionary()

    def state(self, service: Any) -> _State:
        found = self._states.get(service)
        if found is None:
            config = service.settings.connections
            store = ConnectionStore(
                service.db.engine,
                code_ttl_seconds=config.code_ttl_seconds,
                max_failed_attempts=config.max_failed_attempts,
                failed_attempts_window=config.failed_attempts_window_seconds,
            )
            resolver = DatabaseIdentityResolver(
                store, OwnerResolver(store), getattr(service, "threads", None)
            )
            found = _State(store, resolver)
            self._states[service] = found
        return found

    def tables(self) -> list[Any]:
        return [connections_metadata]

    def routers(self, service: Any) -> list[Any]:
        from connections.api import ConnectionsApi, build_router  # FastAPI: only when serving HTTP

        api = ConnectionsApi(
            store=self.state(service).store,
            settings=service.settings,
            live_providers=lambda: list(service.channels),
        )
        return [build_router(api)]

    async def start(self, service: Any) -> None:
        service.manager.identity = self.state(service).resolver


FEATURE = ConnectionsFeature()
