"""Fixtures for the Slack channel: a FakeSlack server and a running Switchboard wired to it.

The chain under test is the real one: FakeSlack (Web API + Socket Mode on 127.0.0.1) ↔ slack-sdk /
slack-bolt ↔ SlackChannel ↔ Service/manager ↔ FakeOpenAI.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from channels.slack.channel import SlackChannel
from tests.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack import FakeSlack
from tests.harness import Harness

#: Fast pacing and keep-alive so the suite stays quick; production defaults are 1.2 s and 10 s.
TEST_SLACK_KEYS: dict[str, Any] = {"edit_interval_seconds": 0.05, "ping_interval_seconds": 5}


@dataclass
class SlackBot:
    """A running Switchboard with one Slack channel, and the fake workspace it talks to."""

    harness: Harness
    channel: SlackChannel
    slack: FakeSlack

    @property
    def service(self):  # type: ignore[no-untyped-def]
        return self.harness.service


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as server:
        yield server  # type: ignore[misc]


def slack_section(slack: FakeSlack, **overrides: Any) -> dict[str, Any]:
    return {
        "enabled": True,
        "bot_token": slack.bot_token,
        "app_token": slack.app_token,
        "api_base_url": slack.api_url,
        **TEST_SLACK_KEYS,
        # The scenarios written for chat.update keep it; test_slack_native.py turns streaming on.
        "native_streaming": False,
        **overrides,
    }


@asynccontextmanager
async def running_bot(
    tmp_path: Path,
    llm: FakeOpenAI,
    slack: FakeSlack,
    *,
    wait: bool = True,
    settings_overrides: dict[str, Any] | None = None,
    **overrides: Any,
) -> AsyncIterator[SlackBot]:
    """Start Switchboard with ``channels.slack`` pointed at ``slack``.

    ``overrides`` are extra ``channels.slack`` keys; ``settings_overrides`` top-level settings.
    """
    # Memory extraction would add model calls of its own; these tests count and read model requests.
    top: dict[str, Any] = {"memory": {"enabled": False}, **(settings_overrides or {})}
    settings = make_settings(tmp_path, llm, channels={"slack": slack_section(slack, **overrides)}, **top)
    channel = SlackChannel(settings.channels.slack, settings=settings)
    async with Harness.running(settings, channels={"slack": channel}) as harness:  # type: ignore[dict-item]
        if wait:
            await slack.wait_connected()
            await slack.wait_for(lambda: channel.status.state == "connected", what="status connected")
        yield SlackBot(harness, channel, slack)


@pytest.fixture
async def bot(tmp_path: Path, llm: FakeOpenAI, slack: FakeSlack) -> AsyncIterator[SlackBot]:
    async with running_bot(tmp_path, llm, slack) as running:
        yield running
