"""Display names for Feishu users: who pressed "Approve", who wrote a message.

Why a lookup: neither ``im.message.receive_v1`` nor ``card.action.trigger`` names the person, only their
``open_id``. The contact API does (``GET /open-apis/contact/v3/users/:open_id``), given the scope
``contact:contact.base:readonly`` for the call and ``contact:user.base:readonly`` for the ``name``
field, for users inside the app's contact range. Names are cached (they rarely change, and the lookup
sits on the path that must answer Feishu within 3 s); a lookup that is slow or fails for a passing
reason gives no name this time and is tried again next time. A refusal is remembered: for that user
(outside the contact range), or for everyone (no contact scope), so the id is shown without asking.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict

from channels.errors import ChannelError
from channels.feishu.api import LarkApi, UserRefused

log = logging.getLogger(__name__)

#: How long a looked-up name (or a refusal) is kept before Feishu is asked again.
NAME_TTL = 3600.0
#: Bound on one lookup: it runs before the event is stored, inside Feishu's 3 s answer deadline.
LOOKUP_TIMEOUT = 1.0
MAX_NAMES = 4096


class UserNames:
    """A bounded, expiring cache of ``open_id`` → display name in front of the contact API."""

    def __init__(self, api: LarkApi, *, ttl: float = NAME_TTL, timeout: float = LOOKUP_TIMEOUT) -> None:
        self.api = api
        self.ttl = ttl
        self.timeout = timeout
        self._names: OrderedDict[str, tuple[str | None, float]] = OrderedDict()
        self._refused_until = 0.0  # the app may not look anybody up (no contact scope) until then

    def remember(self, open_id: str | None, name: str | None) -> None:
        """A name Feishu told us elsewhere (an @mention carries the person's name)."""
        if open_id and name:
            self._put(open_id, name)

    def _put(self, open_id: str, name: str | None) -> None:
        self._names[open_id] = (name, time.monotonic() + self.ttl)
        self._names.move_to_end(open_id)
        while len(self._names) > MAX_NAMES:
            self._names.popitem(last=False)

    async def lookup(self, open_id: str) -> str | None:
        """The user's display name, or None (refused, not visible to the app, or not known right now)."""
        now = time.monotonic()
        cached = self._names.get(open_id)
        if cached is not None and cached[1] > now:
            return cached[0]
        if now < self._refused_until:
            return None
        try:
            async with asyncio.timeout(self.timeout):
                name = await self.api.user_name(open_id)
        except UserRefused as exc:
            if exc.app_wide:
                if not self._refused_until:
                    log.warning(
                        "feishu refused contact lookups (%s); approvals and notices show open_ids. "
                        "Grant contact:contact.base:readonly and contact:user.base:readonly for names",
                        exc,
                    )
                self._refused_until = now + self.ttl
            else:
                self._put(open_id, None)
            return None
        except (ChannelError, TimeoutError) as exc:
            log.info("looking up the feishu user %s failed for now: %s", open_id, exc)
            return None
        self._put(open_id, name)
        return name
