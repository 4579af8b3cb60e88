"""GitHub App installation tokens: minted from the App's private key, cached, refreshed before expiry.

The App JWT (RS256, ``iss`` = App id) is valid for at most ten minutes; GitHub rejects one whose ``iat``
is in the future, so it is backdated a minute against clock drift. An installation token lasts an hour:
API calls reuse it until five minutes before expiry; a sandbox run asks for one with a longer remaining
life so ``gh``/``git`` inside a long run do not see it lapse.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx
import jwt
from githubkit import GitHub

from channels.errors import ChannelError, Forbidden
from webhooks.errors import map_github_error

log = logging.getLogger(__name__)

JWT_BACKDATE = 60
JWT_LIFETIME = 9 * 60  # + the backdate = 10 minutes, GitHub's maximum
REFRESH_MARGIN = 5 * 60
RUN_MIN_VALIDITY = 30 * 60


@dataclass(frozen=True, slots=True)
class InstallationToken:
    token: str
    expires_at: float

    def __repr__(self) -> str:  # never print the token itself
        return f"InstallationToken(expires_at={self.expires_at:.0f})"


class SharedTransport(httpx.AsyncBaseTransport):
    """One connection pool for every githubkit call of a channel.

    githubkit opens a fresh ``httpx.AsyncClient`` per call unless used as a context manager (which is
    bound to a ContextVar, so it does not span the service's tasks). A fresh client means a fresh pool
    and TLS context — about 0.3 s per comment edit. Handing each of those clients this transport keeps
    one pool; its ``aclose`` is a no-op because the short-lived clients close their transport on exit.
    """

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport(retries=0)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        return None

    async def shutdown(self) -> None:
        await self._inner.aclose()


def github_client(api_base_url: str, transport: httpx.AsyncBaseTransport | None = None) -> GitHub:
    """A githubkit client with our policy: no HTTP cache, no hidden retries (the reply scheduler
    retries), and no client-side body validation (we build the bodies; validation costs a schema build)."""
    return GitHub(
        None,
        base_url=api_base_url,
        http_cache=False,
        auto_retry=False,
        timeout=30,
        async_transport=transport,
        rest_api_validate_body=False,
    )


def load_private_key(path: str) -> str:
    file = Path(path).expanduser()
    try:
        text = file.read_text()
    except OSError as exc:
        raise ValueError(f"cannot read GitHub App private key {file}: {exc.strerror}") from None
    if "PRIVATE KEY" not in text:
        raise ValueError(f"{file} does not look like a PEM private key")
    return text


class TokenProvider:
    """Per-installation token cache. Concurrent callers share one exchange per installation."""

    def __init__(
        self,
        app_id: str,
        private_key: str,
        github: GitHub,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.app_id = str(app_id)
        self._private_key = private_key
        self.github = github
        self._clock = clock
        self._cache: dict[int, InstallationToken] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self.minted = 0

    def app_jwt(self) -> str:
        now = int(self._clock())
        claims = {"iat": now - JWT_BACKDATE, "exp": now + JWT_LIFETIME, "iss": self.app_id}
        return jwt.encode(claims, self._private_key, algorithm="RS256")

    async def token(self, installation_id: int, *, min_validity: float = REFRESH_MARGIN) -> str:
        """A token valid for at least ``min_validity`` more seconds."""
        cached = self._cache.get(installation_id)
        if cached is not None and cached.expires_at - self._clock() > min_validity:
            return cached.token
        lock = self._locks.setdefault(installation_id, asyncio.Lock())
        async with lock:
            cached = self._cache.get(installation_id)
            if cached is not None and cached.expires_at - self._clock() > min_validity:
                return cached.token
            fresh = await self._exchange(installation_id)
            self._cache[installation_id] = fresh
            return fresh.token

    def forget(self, installation_id: int) -> None:
        """Drop a cached token GitHub no longer accepts; the next call mints a fresh one."""
        self._cache.pop(installation_id, None)

    async def _exchange(self, installation_id: int) -> InstallationToken:
        try:
            response = await self.github.rest.apps.async_create_installation_access_token(
                installation_id, headers={"Authorization": f"Bearer {self.app_jwt()}"}
            )
            data = response.json()
        except Exception as exc:
            error = map_github_error(exc)
            log.warning("minting an installation token for %s failed: %s", installation_id, error)
            raise error from None
        token, expires = data.get("token"), data.get("expires_at")
        if not isinstance(token, str) or not token:
            raise Forbidden("GitHub returned no installation token")
        self.minted += 1
        log.info("minted an installation token for installation %s", installation_id)
        return InstallationToken(token, _parse_time(expires) if expires else self._clock() + 3600)


def _parse_time(value: str) -> float:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError as exc:
        raise ChannelError(f"GitHub returned an unreadable expires_at: {value!r}") from exc
