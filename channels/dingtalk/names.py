"""People's names by staff id, for what a card callback does not carry.

A robot message carries its sender's name (``senderNick``); a card callback (a button press) carries only
the presser's staff id, so "✅ Approved by …" would show an id. Names come from two places:

* every robot message: its ``senderNick`` is remembered for its ``senderStaffId`` (free);
* otherwise DingTalk's "query user details" API, ``POST /topapi/v2/user/get`` on the oapi host
  (``{"userid": …}`` → ``result.name``), which needs the app permission ``qyapi_get_member`` (成员信息读权限,
  read user information). Without it DingTalk answers errcode 88 with sub_code 60011; we then log once,
  stop asking for a while, and the id is shown, as before.

Names are cached (the newest ``limit``) for ``ttl`` seconds so a name change shows up eventually.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict

from channels.dingtalk.api import DingTalkApi
from channels.errors import ChannelError, Forbidden

log = logging.getLogger(__name__)

NAME_TTL = 24 * 3600.0
NAME_MEMORY = 5000
#: After DingTalk refused the lookup (permission missing), wait this long before asking again.
REFUSED_PAUSE = 3600.0


class NameBook:
    """Staff id → display name, from messages seen and the user-details API.

    Read and filled from the stream thread (messages, presses) and the service loop (look-ups): the map
    is guarded by a lock.
    """

    def __init__(self, api: DingTalkApi, *, ttl: float = NAME_TTL, limit: int = NAME_MEMORY) -> None:
        self.api = api
        self.ttl = ttl
        self.limit = limit
        self._names: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._lock = threading.Lock()
        self._refused_until = 0.0
        self.lookups = 0

    def remember(self, staff_id: str, name: str | None) -> None:
        if not staff_id or not name:
            return
        with self._lock:
            self._names[staff_id] = (name, time.monotonic() + self.ttl)
            self._names.move_to_end(staff_id)
            while len(self._names) > self.limit:
                self._names.popitem(last=False)

    def known(self, staff_id: str) -> str | None:
        with self._lock:
            entry = self._names.get(staff_id)
        if entry is None or time.monotonic() >= entry[1]:
            return None
        return entry[0]

    async def lookup(self, staff_id: str) -> str | None:
        """The person's name, asking DingTalk when it is not cached; None when it cannot be had."""
        name = self.known(staff_id)
        if name is not None or not staff_id or time.monotonic() < self._refused_until:
            return name
        self.lookups += 1
        try:
            name = await self.api.user_name(staff_id)
        except Forbidden as exc:
            self._refused_until = time.monotonic() + REFUSED_PAUSE
            log.warning(
                "DingTalk refused to look up a user's name (%s); grant the app the permission "
                "qyapi_get_member to show names instead of staff ids",
                exc,
            )
            return None
        except ChannelError as exc:
            log.info("looking up the name of a DingTalk user failed: %s", exc)
            return None
        self.remember(staff_id, name)
        return name
