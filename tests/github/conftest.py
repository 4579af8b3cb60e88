"""GitHub test kit: an App key pair, the fake GitHub API, realistic payloads and a running service.

    async with running_service(settings) as sb:
        response = await sb.deliver("issue_comment", comment_payload("@switchboard-bot hi"))

``sb.deliver`` signs the exact bytes it sends, like GitHub does, and goes through the real FastAPI app
(lifespan included) over httpx's ASGI transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from bot.app import create_app
from config.schema import Settings
from tests.conftest import make_settings
from tests.fakes.github import FakeGitHub
from tests.fakes.openai_server import FakeOpenAI
from webhooks.channel import GitHubChannel
from webhooks.signature import sign

PAYLOADS = Path(__file__).parent / "payloads"
REPO = "Codertocat/Hello-World"
BOT = "switchboard-bot"
SECRET = "whsec-test-0123456789abcdef"
APP_ID = "424242"
INSTALLATION = 777


@cache
def _key_pair() -> tuple[bytes, bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public


def fresh_id() -> int:
    """A GitHub object id no other payload of any run has (PostgreSQL tests share one database)."""
    return uuid.uuid4().int % 10**15


def payload(name: str, *, association: str | None = None) -> dict[str, Any]:
    """A copy of one of GitHub's documented example payloads (from @octokit/webhooks-examples).

    Each copy is a new event, as on GitHub: its issue, comment, pull request and review get fresh ids
    (the same event twice is a replay: webhooks/store.py). ``association`` sets the author's
    ``author_association`` on each of them (the examples' authors are all ``OWNER``).
    """
    data = json.loads((PAYLOADS / f"{name}.json").read_text())
    data["installation"] = {"id": INSTALLATION, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uMQ=="}
    for key in ("issue", "comment", "pull_request", "review"):
        if isinstance(data.get(key), dict):
            data[key]["id"] = fresh_id()
            if association is not None:
                data[key]["author_association"] = association
    return data


def comment_payload(
    body: str,
    *,
    author: str = "Codertocat",
    author_type: str = "User",
    number: int | None = None,
    association: str = "OWNER",
    author_id: int | None = None,
) -> dict[str, Any]:
    data = payload("issue_comment.created")
    data["comment"]["body"] = body
    data["comment"]["author_association"] = association
    user = {**data["comment"]["user"], "login": author, "type": author_type}
    if author_id is not None:
        user["id"] = author_id
    data["comment"]["user"] = user
    data["sender"] = {**data["sender"], "login": author, "type": author_type, "id": user["id"]}
    if number is not None:
        data["issue"]["number"] = number
    return data


def agent(name: str = "reviewer", **overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": name,
        "bot_login": BOT,
        "system_prompt": f"You are {name}, reviewing code for the Hello-World team.",
        "bindings": [{"repo": REPO}],
    }
    base.update(overrides)
    return base


@pytest.fixture
def app_key() -> tuple[bytes, bytes]:
    return _key_pair()


@pytest.fixture
def github(app_key: tuple[bytes, bytes]) -> Iterator[FakeGitHub]:
    with FakeGitHub(app_id=APP_ID, public_key_pem=app_key[1], bot_login=f"{BOT}[bot]") as server:
        yield server  # type: ignore[misc]


def github_settings(
    tmp_path: Path,
    llm: FakeOpenAI,
    github: FakeGitHub | None,
    *,
    agents: list[dict[str, Any]] | None = None,
    bus: dict[str, Any] | None = None,
    database: dict[str, Any] | None = None,
    sandbox: dict[str, Any] | None = None,
    **section: Any,
) -> Settings:
    tmp_path.mkdir(parents=True, exist_ok=True)
    key_path = tmp_path / "app-private-key.pem"
    key_path.write_bytes(_key_pair()[0])
    config: dict[str, Any] = {
        "enabled": True,
        "webhook_secret": SECRET,
        "app_id": APP_ID,
        "private_key_path": str(key_path),
        "api_base_url": github.url if github else "http://127.0.0.1:9",
        "edit_interval_seconds": 0.05,
        "retry_poll_seconds": 0.1,
        "agents": agents if agents is not None else [agent()],
    }
    config.update(section)
    extra: dict[str, Any] = {"bus": bus} if bus else {}
    if database:
        extra["database"] = database
    if sandbox:
        extra["sandbox"] = sandbox
    # Memory extraction is another area's concern and would add a model call after every turn here.
    return make_settings(tmp_path, llm, channels={"github": config}, memory={"enabled": False}, **extra)


@dataclass
class Running:
    settings: Settings
    client: httpx.AsyncClient
    service: Any
    channel: GitHubChannel | None

    async def deliver(
        self,
        event: str,
        data: dict[str, Any] | bytes,
        *,
        delivery: str | None = None,
        secret: str | None = SECRET,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        body = data if isinstance(data, bytes) else json.dumps(data).encode()
        sent = {
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
            "X-GitHub-Hook-ID": "1",
            "Content-Type": "application/json",
            "User-Agent": "GitHub-Hookshot/test",
        }
        if secret is not None:
            sent["X-Hub-Signature-256"] = sign(secret, body)
        sent.update(headers or {})
        return await self.client.post("/api/webhooks/github", content=body, headers=sent)

    async def idle(self, timeout: float = 30) -> None:
        """Every accepted message answered (or failed) and no lane busy."""
        await asyncio.wait_for(self.service.manager.wait_idle(), timeout)


@asynccontextmanager
async def running_service(settings: Settings, *, with_channel: bool = True) -> AsyncIterator[Running]:
    """The real app (``bot.app.create_app``) with the GitHub channel, lifespan running."""
    channel = GitHubChannel(settings.channels.github, settings=settings) if with_channel else None
    app = create_app(settings, channels={"github": channel} if channel else {})
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://switchboard.test") as client:
            running = Running(settings, client, app.state.service, channel)
            yield running
            with contextlib.suppress(TimeoutError):
                await running.idle(10)


def deep_copy(data: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(data)
