"""Fixtures for the Telegram channel: the fake Bot API, a configured channel, and a running service.

async def test_x(tg, tg_harness):
    tg.user_message(42, "hi")
    reply = await tg.wait_for_bot_text(42, "echo: hi")
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from channels.telegram.channel import TelegramChannel
from config.channels.telegram import TelegramConfig
from config.schema import Settings
from tests.conftest import TEST_TRUST, make_settings
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram import FakeTelegram
from tests.harness import Harness

BOT_USERNAME = "switchboard_bot"
#: Reply pacing for tests: fast enough to keep the suite quick, slow enough to coalesce edits.
TEST_EDIT_INTERVAL = 0.05


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(bot_username=BOT_USERNAME, long_poll_cap=0.5) as server:
        yield server  # type: ignore[misc]


def telegram_config(fake: FakeTelegram, **overrides: Any) -> TelegramConfig:
    values: dict[str, Any] = {
        "enabled": True,
        "bot_token": fake.token,
        "bot_username": BOT_USERNAME,
        "api_base_url": fake.url,
        "edit_interval_seconds": TEST_EDIT_INTERVAL,
        "group_edit_interval_seconds": TEST_EDIT_INTERVAL,
        "poll_timeout_seconds": 1,
        # The scenarios written for the edit path keep it in private chats too; test_native.py turns
        # drafts on (the production default).
        "private_drafts": False,
        "trust": TEST_TRUST,  # test users are members (test_trust.py sets its own)
    }
    values.update(overrides)
    return TelegramConfig(**values)


@pytest.fixture
def tg_settings(tmp_path: Path, llm: FakeOpenAI) -> Settings:
    return make_settings(tmp_path, llm)


@pytest.fixture
def tg_channel(tg: FakeTelegram, tg_settings: Settings) -> TelegramChannel:
    return TelegramChannel(telegram_config(tg), settings=tg_settings)


@pytest.fixture
async def tg_harness(tg_settings: Settings, tg_channel: TelegramChannel) -> AsyncIterator[Harness]:
    async with Harness.running(tg_settings, channels={"telegram": tg_channel}) as harness:  # type: ignore[dict-item]
        yield harness
