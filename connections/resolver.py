"""Owner resolution for every inbound message, with a small cache.

The manager asks for the owner of every message, so a database round trip each time would be the
hottest query in the service. Bindings change rarely and always through :class:`ConnectionStore`, which
tells this resolver to forget the identity it changed. Another instance's change (PostgreSQL scale-out)
becomes visible here after at most ``ttl`` seconds.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from connections.identity import PlatformIdentity, ResolvedOwner
from connections.store import ConnectionStore

DEFAULT_TTL_SECONDS = 30.0
DEFAULT_MAX_ENTRIES = 50_000


class OwnerResolver:
    def __init__(
        self,
        store: ConnectionStore,
        *,
        ttl: float = DEFAULT_TTL_SECONDS,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.ttl = ttl
        self.max_entries = max_entries
        self.clock = clock
        self._cache: OrderedDict[PlatformIdentity, tuple[str | None, float]] = OrderedDict()
        # Bumped on every invalidation: a lookup that raced with a bind must not cache its stale answer.
        self._generation = 0
        store.subscribe(self.invalidate)

    def invalidate(self, identity: PlatformIdentity | None = None) -> None:
        self._generation += 1
        if identity is None:
            self._cache.clear()
        else:
            self._cache.pop(identity, None)

    async def resolve(self, provider: str, workspace: str, sender_id: str) -> ResolvedOwner:
        identity = PlatformIdentity(provider, workspace or "", sender_id)
        now = self.clock()
        hit = self._cache.get(identity)
        if hit is not None and now - hit[1] < self.ttl:
            owner = hit[0]
        else:
            generation = self._generation
            owner = await self.store.owner_of(identity)
            if generation == self._generation:
                self._cache[identity] = (owner, now)
                self._cache.move_to_end(identity)
                while len(self._cache) > self.max_entries:
                    self._cache.popitem(last=False)
        if owner is None:
            return ResolvedOwner(identity.unbound_owner, bound=False)
        return ResolvedOwner(owner, bound=True)
