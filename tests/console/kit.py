"""The console tests' shared setup: a service with Telegram (in memory) and GitHub (the fake API) whose
every console list has something in it, so a test can walk all of ``/api/admin``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jwt
from fastapi import FastAPI
from fastapi.routing import APIRoute

from bot.app import create_app
from bot.console import build_router as console_router
from bot.inbox import DEAD
from bot.service import Service
from channels.memory import MemoryChannel
from config.schema import Settings
from tests.connections.conftest import JWT_SECRET, LOCAL_URL, auth, token_for
from tests.fakes.github import FakeGitHub
from tests.fakes.openai_server import FakeOpenAI
from tests.github.conftest import BOT, comment_payload, github_settings
from tests.github.conftest import SECRET as WEBHOOK_SECRET
from webhooks.channel import GitHubChannel
from webhooks.signature import sign


def admin_token(user: str = "ops") -> str:
    return jwt.encode({"sub": user, "exp": 2**31 - 1, "admin": True}, JWT_SECRET, algorithm="HS256")


def console_routes(app: FastAPI) -> list[tuple[str, str]]:
    """Every (method, path) of the console, read from the code so a route added later is covered without
    editing a list here: all routes of the console's own router (documented or not, the page included)
    and every ``/api/admin/`` path the app documents at ``/docs`` (wherever it was defined)."""
    found: set[tuple[str, str]] = set()
    for route in console_router(app.state.service).routes:
        if isinstance(route, APIRoute) and not route.path.startswith("/admin/assets/"):
            found.update((method, route.path) for method in route.methods)
    for path, operations in app.openapi()["paths"].items():
        if path.startswith("/api/admin/"):
            found.update((method.upper(), path) for method in operations)
    return sorted(found)


def console_settings(
    tmp_path: Path, llm: FakeOpenAI, github: FakeGitHub, *, jwt_auth: bool = True, **bus: Any
) -> Settings:
    """GitHub (webhook secret, App key) and Telegram, jwt sign-in, commands run on the host, a failed
    message is dead at once."""
    settings = github_settings(
        tmp_path, llm, github, sandbox={"mode": "host"}, bus={"max_attempts": 1, **bus}
    )
    if not jwt_auth:
        return settings
    return settings.model_copy(
        update={"auth": settings.auth.model_copy(update={"mode": "jwt", "jwt_secret": JWT_SECRET})}
    )


@dataclass
class Console:
    """A running service, an admin's HTTP client, and the ids of what each console list shows."""

    app: FastAPI
    service: Service
    client: httpx.AsyncClient
    telegram: MemoryChannel
    ids: dict[str, str] = field(default_factory=dict)

    async def get(self, path: str, token: str | None = None) -> Any:
        response = await self.client.get(path, headers=auth(token or admin_token()))
        assert response.status_code == 200, response.text
        return response.json()

    async def deliver(self, event: str, data: dict[str, Any], delivery: str) -> httpx.Response:
        body, headers = signed_delivery(event, data, delivery)
        return await self.client.post("/api/webhooks/github", content=body, headers=headers)

    async def idle(self, timeout: float = 30) -> None:
        assert self.service.manager is not None
        await asyncio.wait_for(self.service.manager.wait_idle(), timeout)


def console_app(settings: Settings) -> tuple[FastAPI, MemoryChannel]:
    """The real app with Telegram in memory and the real GitHub channel (talking to the fake API)."""
    telegram = MemoryChannel("telegram")
    channels = {"telegram": telegram, "github": GitHubChannel(settings.channels.github, settings=settings)}
    return create_app(settings, channels=channels), telegram  # type: ignore[arg-type]


def signed_delivery(event: str, data: dict[str, Any], delivery: str) -> tuple[bytes, dict[str, str]]:
    """A webhook body and the headers GitHub sends with it (signed with the configured secret)."""
    body = json.dumps(data).encode()
    headers = {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": sign(WEBHOOK_SECRET, body),
        "Content-Type": "application/json",
    }
    return body, headers


@asynccontextmanager
async def running_console(settings: Settings) -> AsyncIterator[Console]:
    app, telegram = console_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=LOCAL_URL) as client:
            yield Console(app, app.state.service, client, telegram)


async def fill_every_list(console: Console, dead_error: str) -> None:
    """A dead letter (its error is ``dead_error``), a schedule, a person with a Telegram connection, a
    GitHub delivery, usage; ids kept under the names the routes' path parameters use."""
    inbox = console.service.inbox
    entry = await inbox.accept(
        console.telegram.make_message("are you there?", chat="chat-9", message_id="d1")
    )
    assert await inbox.mark_failed(entry.id, dead_error) == DEAD
    console.ids["entry_id"] = entry.id

    code = await console.client.post("/api/channels/telegram/connect", headers=auth(token_for("alice")))
    assert code.status_code == 200, code.text
    await console.telegram.say(f"/start {code.json()['code']}", sender="tg-alice", sender_name="Alice")
    await console.telegram.say("/schedule every day 09:00 water the plants", sender="tg-alice")
    await console.telegram.wait_for_text("Scheduled")
    delivered = await console.deliver("issue_comment", comment_payload(f"@{BOT} have a look"), "gh-1")
    assert delivered.status_code == 200, delivered.text
    await console.idle()

    [person] = [p for p in await console.get("/api/admin/people") if p["id"] == "alice"]
    console.ids["person"] = "alice"
    console.ids["connection_id"] = person["connections"][0]["id"]
    [schedule] = await console.get("/api/admin/schedules")
    console.ids["schedule_id"] = schedule["id"]
    console.ids["delivery_id"] = "gh-1"
