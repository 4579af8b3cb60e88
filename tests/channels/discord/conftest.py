"""Fixtures for the Discord channel: a fake Discord, the real discord.py client, a running Service.

fake Discord (REST + gateway) ↔ discord.py ↔ DiscordChannel ↔ Service/manager ↔ FakeOpenAI
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

import pytest

from channels.discord.channel import DiscordChannel
from config.channels.discord import DiscordConfig
from config.schema import Settings
from tests.conftest import TEST_TRUST
from tests.fakes.discord import FakeDiscord, FakeMessage
from tests.harness import Harness

T = TypeVar("T")

USER_ID = "4242"  # the human talking to the bot


@pytest.fixture
def discord_fake() -> Iterator[FakeDiscord]:
    with FakeDiscord() as fake:
        yield fake  # type: ignore[misc]


def discord_config(fake: FakeDiscord, **overrides: Any) -> DiscordConfig:
    values: dict[str, Any] = {
        "enabled": True,
        "bot_token": fake.token,
        "api_base_url": fake.api_base_url,
        "gateway_url": fake.gateway_url,
        "guild_ready_timeout": 0.05,
        "edit_interval_seconds": 0.25,  # Discord's pace is 1 s; a quarter keeps the suite quick
        "connect_timeout": 20,
        "trust": TEST_TRUST,  # test users are members (see tests/conftest.py)
    }
    values.update(overrides)
    return DiscordConfig(**values)


@pytest.fixture
async def discord_harness(settings: Settings, discord_fake: FakeDiscord) -> AsyncIterator[Harness]:
    channel = DiscordChannel(discord_config(discord_fake), settings=settings)
    async with Harness.running(settings, channels={"discord": channel}) as harness:  # type: ignore[dict-item]
        yield harness


async def eventually(probe: Callable[[], T | None], timeout: float = 20.0, what: str = "condition") -> T:
    """Poll ``probe`` until it returns something truthy (the fake runs in another thread)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def final_reply(fake: FakeDiscord, channel_id: str, needle: str, timeout: float = 20.0) -> FakeMessage:
    """The bot's message in ``channel_id`` whose latest text contains ``needle``."""

    def probe() -> FakeMessage | None:
        return next((m for m in fake.in_channel(channel_id) if needle in m.text), None)

    return await eventually(probe, timeout, f"a reply containing {needle!r} in {channel_id}")
