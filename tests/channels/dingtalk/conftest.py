"""Fixtures: a fake DingTalk, and a whole Switchboard service whose DingTalk channel talks to it.

``rig`` is parametrised over both reply modes where a test applies to both; ``card_rig`` and
``markdown_rig`` pin one. Pacing is shortened through the channel's config keys, never by patching.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from channels.dingtalk.channel import DingTalkChannel
from config.channels.dingtalk import DingTalkConfig
from tests.conftest import make_settings
from tests.fakes.dingtalk import Bubble, FakeDingTalk
from tests.fakes.openai_server import FakeOpenAI
from tests.harness import Harness

TEMPLATE = "ai-card-template.schema"


@dataclass
class Rig:
    """The fake platform, the channel under test and the running service, plus user-level views."""

    fake: FakeDingTalk
    channel: DingTalkChannel
    harness: Harness
    mode: str

    def p2p(self, sender: str = "alice") -> str:
        return self.fake.p2p_conversation(sender)

    def visible(self, conversation: str) -> list[Bubble]:
        return self.fake.bubbles(conversation)

    def final_texts(self, conversation: str) -> list[str]:
        """What the user can read now, one entry per message/card, in order."""
        return [b.text for b in self.fake.bubbles(conversation)]

    async def wait_text(self, conversation: str, needle: str, timeout: float = 20.0) -> Bubble:
        """Wait until a message/card in the conversation shows ``needle`` (cards: finalised)."""

        def found() -> Bubble | None:
            for bubble in self.fake.bubbles(conversation):
                if needle in bubble.text and (bubble.kind != "card" or bubble.finalized):
                    return bubble
            return None

        return await self.fake.wait_for(found, timeout)


def dingtalk_config(fake: FakeDingTalk, mode: str, **overrides: Any) -> DingTalkConfig:
    values: dict[str, Any] = {
        "enabled": True,
        "client_id": fake.client_id,
        "client_secret": fake.client_secret,
        "api_base_url": fake.url,
        "oapi_base_url": fake.url,
        "edit_interval_seconds": 0.05,
        # Off unless a test sets its own threshold: at the default 5 s a slow machine adds a "working on
        # it" message to any markdown test that counts messages (tests/channels/dingtalk/test_live_replies.py
        # sets it where the notice is what is tested).
        "progress_notice_after_seconds": None,
    }
    if mode == "card":
        values["card_template_id"] = TEMPLATE
    values.update(overrides)
    return DingTalkConfig(**values)


@pytest.fixture
def fake_dingtalk() -> Iterator[FakeDingTalk]:
    with FakeDingTalk() as fake:
        yield fake  # type: ignore[misc]


async def _rig(
    tmp_path: Path,
    llm: FakeOpenAI,
    fake: FakeDingTalk,
    mode: str,
    settings_overrides: dict[str, Any] | None = None,
    **cfg: Any,
) -> Rig:
    settings = make_settings(tmp_path, llm, **(settings_overrides or {}))
    channel = DingTalkChannel(dingtalk_config(fake, mode, **cfg), settings=settings)
    harness = Harness(settings, channels={"dingtalk": channel})  # type: ignore[dict-item]
    await harness.start()
    await fake.wait_for(lambda: fake.connected and channel.status.state == "connected")
    return Rig(fake, channel, harness, mode)


@asynccontextmanager
async def _running_rig(tmp_path: Path, llm: FakeOpenAI, fake: FakeDingTalk, mode: str) -> AsyncIterator[Rig]:
    """A rig in ``mode`` with the default settings, stopped when the test is done."""
    r = await _rig(tmp_path, llm, fake, mode)
    try:
        yield r
    finally:
        await r.harness.stop()


@pytest.fixture(params=["card", "markdown"])
async def rig(request, tmp_path: Path, llm: FakeOpenAI, fake_dingtalk: FakeDingTalk) -> AsyncIterator[Rig]:
    async with _running_rig(tmp_path, llm, fake_dingtalk, request.param) as r:
        yield r


@pytest.fixture
async def card_rig(tmp_path: Path, llm: FakeOpenAI, fake_dingtalk: FakeDingTalk) -> AsyncIterator[Rig]:
    async with _running_rig(tmp_path, llm, fake_dingtalk, "card") as r:
        yield r


@pytest.fixture
async def markdown_rig(tmp_path: Path, llm: FakeOpenAI, fake_dingtalk: FakeDingTalk) -> AsyncIterator[Rig]:
    async with _running_rig(tmp_path, llm, fake_dingtalk, "markdown") as r:
        yield r


@pytest.fixture
async def start_rig(tmp_path: Path, llm: FakeOpenAI, fake_dingtalk: FakeDingTalk) -> AsyncIterator[Any]:
    """A rig with custom settings/channel config: ``await start_rig("card", {"bus": ...}, max_file_bytes=1024)``."""
    started: list[Rig] = []

    async def start(mode: str, settings_overrides: dict[str, Any] | None = None, **cfg: Any) -> Rig:
        r = await _rig(tmp_path, llm, fake_dingtalk, mode, settings_overrides, **cfg)
        started.append(r)
        return r

    try:
        yield start
    finally:
        for r in started:
            await r.harness.stop()
