"""Names for people and platform identities, shared by the store, the resolver and the API.

Owner ids of connected people (user ids) and of unconnected platform identities must never collide,
otherwise a user called ``telegram:-:42`` could read the files of Telegram account 42. User ids therefore
may not contain ``:``, and the unbound form always does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_USER = "default"
DEFAULT_TOKEN_TTL_SECONDS = 30 * 24 * 3600
USER_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")


class InvalidUserId(ValueError):
    """A user id that could escape its namespace or is unusable as a name."""


def validate_user_id(value: str) -> str:
    if not isinstance(value, str) or not USER_ID_PATTERN.match(value):
        raise InvalidUserId(
            "a user id is 1-128 characters of letters, digits, '.', '_', '@' or '-' "
            "and starts with a letter or digit"
        )
    return value


@dataclass(frozen=True, slots=True)
class PlatformIdentity:
    """One account on one platform: what a connection binds to an owner."""

    provider: str
    workspace: str
    external_id: str

    @property
    def unbound_owner(self) -> str:
        """The owner id this identity has while nobody has connected it (same rule as the bot's)."""
        return f"{self.provider}:{self.workspace or '-'}:{self.external_id}"


@dataclass(frozen=True, slots=True)
class ResolvedOwner:
    owner: str
    bound: bool
