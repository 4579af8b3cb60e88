"""An agent that answers at once: a test implementation of the Agent protocol, not a mock of ours.

With no model in the way, what a test sees depends only on the bot's own path (inbox, routing, lanes,
the reply path). ``wait = True`` holds every answer until ``release`` is set, so a test can look at
the chat while a turn is still running.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from agent.events import TextDelta, TurnFinished, TurnRequest


class InstantAgent:
    goals = None
    memory = None

    def __init__(self, *, wait: bool = False) -> None:
        self.release = asyncio.Event()
        self.wait = wait

    async def run(self, request: TurnRequest) -> AsyncIterator[Any]:
        if self.wait:
            await self.release.wait()
        yield TextDelta("ok")
        yield TurnFinished(text=f"ok: {request.text}")

    def model_names(self) -> list[str]:
        return ["instant"]

    async def storage_problem(self) -> str | None:
        return None

    async def close(self) -> None:
        return None
