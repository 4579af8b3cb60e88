"""Helpers for the connections tests: the real app (FastAPI + Service) with in-memory platforms."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from bot.app import create_app
from bot.service import Service
from channels.memory import MemoryChannel
from config.schema import Settings
from connections.auth import mint_token

JWT_SECRET = "test-secret-0123456789abcdef-0123456789"
#: Where a person on this machine reaches the API: with auth.mode none only a loopback name or the host of
#: server.public_url (default http://localhost:8001) is accepted as Host (connections.auth.check_host);
#: an ASGI test client would otherwise send its own made-up name and be refused like a rebinding page.
LOCAL_URL = "http://localhost:8001"


@dataclass
class App:
    """A running service plus an HTTP client on its ASGI app."""

    service: Service
    client: httpx.AsyncClient
    channels: dict[str, MemoryChannel]

    @property
    def telegram(self) -> MemoryChannel:
        return self.channels["telegram"]

    async def idle(self, timeout: float = 10) -> None:
        import asyncio

        assert self.service.manager is not None
        await asyncio.wait_for(self.service.manager.wait_idle(), timeout)

    async def say(self, text: str, *, channel: str = "telegram", **kwargs: Any) -> str:
        """Send a chat message and return the text of every message the bot posted in reply."""
        chan = self.channels[channel]
        before = set(chan.messages)
        await chan.say(text, **kwargs)
        await self.idle()
        return "\n".join(m.text for ref, m in chan.messages.items() if ref not in before)

    async def new_code(self, provider: str = "telegram", token: str | None = None) -> dict[str, Any]:
        response = await self.client.post(f"/api/channels/{provider}/connect", headers=auth(token))
        assert response.status_code == 200, response.text
        return response.json()

    async def connections(self, token: str | None = None) -> list[dict[str, Any]]:
        response = await self.client.get("/api/channels/connections", headers=auth(token))
        assert response.status_code == 200, response.text
        return response.json()


def auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def token_for(user: str, ttl: int = 3600) -> str:
    return mint_token(JWT_SECRET, user, ttl)


def jwt_overrides() -> dict[str, Any]:
    return {"auth": {"mode": "jwt", "jwt_secret": JWT_SECRET}}


@asynccontextmanager
async def running_app(
    settings: Settings, channels: dict[str, MemoryChannel] | None = None
) -> AsyncIterator[App]:
    channels = channels if channels is not None else {"telegram": MemoryChannel("telegram")}
    app = create_app(settings, channels=dict(channels))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=LOCAL_URL) as client:
            yield App(app.state.service, client, channels)


@pytest.fixture
async def app(settings: Settings) -> AsyncIterator[App]:
    async with running_app(settings) as running:
        yield running
