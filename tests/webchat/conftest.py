"""Helpers for the web chat tests: the real app under uvicorn, and a reader of its event stream."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx

from tests.connections.conftest import auth

WAIT_SECONDS = 20.0


def web_channel() -> dict[str, Any]:
    return {"web": {"enabled": True}}


async def new_conversation(client: httpx.AsyncClient, token: str | None) -> str:
    response = await client.post("/api/chat/conversations", headers=auth(token))
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def send(
    client: httpx.AsyncClient,
    token: str | None,
    conversation: str,
    text: str,
    *,
    files: list[tuple[str, bytes]] | None = None,
    pressed: str | None = None,
    client_id: str | None = None,
) -> httpx.Response:
    data = {"client_id": client_id or secrets.token_urlsafe(9), "text": text}
    if pressed:
        data["pressed"] = pressed
    upload = [("files", (name, body)) for name, body in files or []]
    return await client.post(
        f"/api/chat/conversations/{conversation}/messages",
        headers=auth(token),
        data=data,
        files=upload or None,
    )


class Events:
    """The conversation as one open tab sees it: the snapshot, then every change, folded by ref."""

    def __init__(self) -> None:
        self.entries: dict[str, dict[str, Any]] = {}
        self.snapshot: list[dict[str, Any]] | None = None
        self.changed = asyncio.Condition()

    async def take(self, event: dict[str, Any]) -> None:
        async with self.changed:
            if event["type"] == "snapshot":
                self.snapshot = event["entries"]
                self.entries = {e["ref"]: e for e in event["entries"]}
            elif event["type"] == "entry":
                self.entries[event["entry"]["ref"]] = event["entry"]
            elif event["type"] == "delete":
                self.entries.pop(event["ref"], None)
            self.changed.notify_all()

    async def until(self, check: Callable[[list[dict[str, Any]]], bool]) -> list[dict[str, Any]]:
        async with asyncio.timeout(WAIT_SECONDS), self.changed:
            await self.changed.wait_for(lambda: check(list(self.entries.values())))
            return list(self.entries.values())


@asynccontextmanager
async def watching(client: httpx.AsyncClient, token: str | None, conversation: str) -> AsyncIterator[Events]:
    """Follow ``GET .../events`` in the background while the block runs."""
    events = Events()

    async def read() -> None:
        url = f"/api/chat/conversations/{conversation}/events"
        async with client.stream("GET", url, headers=auth(token), timeout=None) as response:
            assert response.status_code == 200, await response.aread()
            assert response.headers["content-type"].startswith("text/event-stream")
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    await events.take(json.loads(line[6:]))

    task = asyncio.create_task(read())
    try:
        async with asyncio.timeout(WAIT_SECONDS), events.changed:
            await events.changed.wait_for(lambda: events.snapshot is not None or task.done())
        if task.done():
            task.result()
        yield events
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def texts(entries: list[dict[str, Any]], role: str = "assistant") -> list[str]:
    return [e["text"] for e in entries if e["role"] == role]
