"""Fixtures for the Feishu/Lark channel: a FakeLark server and a running Switchboard wired to it.

The chain under test is the real one: FakeLark (open-platform HTTP + protobuf websocket on 127.0.0.1) ↔
lark-oapi (its HTTP client and its ``ws.Client`` on its own thread) ↔ FeishuChannel ↔ Service/manager ↔
FakeOpenAI.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from channels.feishu.channel import FeishuChannel
from tests.conftest import make_settings
from tests.fakes.feishu import FakeLark
from tests.fakes.openai_server import FakeOpenAI
from tests.harness import Harness

#: Fast pacing keeps the suite quick; production default is 0.4 s between card updates.
TEST_FEISHU_KEYS: dict[str, Any] = {"edit_interval_seconds": 0.05}
ALICE = "ou_alice000000000000000000000001"
BOB = "ou_bob00000000000000000000000002"


@dataclass
class FeishuBot:
    """A running Switchboard with one Feishu channel, and the fake open platform it talks to."""

    harness: Harness
    channel: FeishuChannel
    lark: FakeLark

    @property
    def service(self):  # type: ignore[no-untyped-def]
        return self.harness.service


@pytest.fixture
def lark() -> Iterator[FakeLark]:
    with FakeLark() as server:
        yield server  # type: ignore[misc]


def feishu_section(lark: FakeLark, **overrides: Any) -> dict[str, Any]:
    return {
        "enabled": True,
        "app_id": lark.app_id,
        "app_secret": lark.app_secret,
        "domain": lark.url,
        **TEST_FEISHU_KEYS,
        **overrides,
    }


@asynccontextmanager
async def running_bot(
    tmp_path: Path,
    llm: FakeOpenAI,
    lark: FakeLark,
    *,
    channels: dict[str, Any] | None = None,
    settings_overrides: dict[str, Any] | None = None,
    wait: bool = True,
    **overrides: Any,
) -> AsyncIterator[FeishuBot]:
    """Start Switchboard with ``channels.feishu`` pointed at ``lark`` (extra channel keys in ``overrides``)."""
    settings = make_settings(
        tmp_path, llm, channels={"feishu": feishu_section(lark, **overrides)}, **(settings_overrides or {})
    )
    channel = FeishuChannel(settings.channels.feishu, settings=settings)
    all_channels: dict[str, Any] = {"feishu": channel, **(channels or {})}
    async with Harness.running(settings, channels=all_channels) as harness:
        if wait:
            await lark.wait_for(lambda f: f.connected)
        yield FeishuBot(harness, channel, lark)


@pytest.fixture
async def bot(tmp_path: Path, llm: FakeOpenAI, lark: FakeLark) -> AsyncIterator[FeishuBot]:
    async with running_bot(tmp_path, llm, lark) as running:
        yield running
