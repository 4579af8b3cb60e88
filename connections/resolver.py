"""Owner resolution for every inbound message, with a small cache.

The manager asks for the owner of every message, so a database round trip each time would be the
hottest query in the service. Bindings change rarely and always through :class:`ConnectionStore`, which
tells this resolver to forget the identity it changed. Another instance's change (PostgreSQL scale-out)
becomes visible here after at most ``ttl`` seconds.

Cache misses are looked up in batches: a burst of first messages (the same new sender in 10,000 chats,
or 10,000 new senders) is a few SELECTs instead of one pooled connection and query per message. A miss
joins only a batch that has not been sent yet, so its answer is never older than the lookup itself.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from config.batching import Batcher
from connections.identity import PlatformIdentity, ResolvedOwner
from connections.store import ConnectionStore

DEFAULT_TTL_SECONDS = 30.0
DEFAULT_MAX_ENTRIES = 50_000
MAX_BATCH = 500  # identities per SELECT (3 bound parameters each)


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
        # Misses for the next batched SELECT: identity -> its owner (None: not connected).
        self._misses: Batcher[PlatformIdentity, None, str] = Batcher(
            self._read_many, max_batch=MAX_BATCH, name="owners-read"
        )
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
            owner = await self._look_up(identity)
        if owner is None:
            return ResolvedOwner(identity.unbound_owner, bound=False)
        return ResolvedOwner(owner, bound=True)

    async def _look_up(self, identity: PlatformIdentity) -> str | None:
        return await self._misses.lookup(identity, None)

    async def _read_many(self, batch: dict[PlatformIdentity, None]) -> dict[PlatformIdentity, str]:
        """One SELECT for a batch of misses (see :class:`config.batching.Batcher` for the rules); the
        answers, absent ones too, are cached for ``ttl`` unless a bind raced with the query."""
        generation, now = self._generation, self.clock()
        owners = await self.store.owners_of(list(batch))
        if generation == self._generation:  # a bind raced with this lookup: do not keep its answers
            for identity in batch:
                self._cache[identity] = (owners.get(identity), now)
                self._cache.move_to_end(identity)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return owners
