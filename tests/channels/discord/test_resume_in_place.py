"""kill -9 mid-answer on Discord: the resumed answer continues in its messages, none sent twice.

Before, only the first message was stored: after a kill among the overflow messages they were sent
again. (tests/channels/resume_kit.py has the shared scenario.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.reliability_telegram import ServeProcess, wait_for
from channels.discord.channel import DISCORD_LIMITS
from tests.channels.discord.conftest import USER_ID
from tests.channels.resume_kit import (
    QUESTION,
    answering,
    expected_messages,
    kill_after_second_overflow,
    resume_and_compare,
    write_config,
)
from tests.fakes.discord import FakeDiscord
from tests.fakes.openai_server import FakeOpenAI

LIMIT = DISCORD_LIMITS.text_limit


def discord_yaml(fake: FakeDiscord) -> str:
    return (
        f"  discord: {{enabled: true, bot_token: '{fake.token}', api_base_url: '{fake.api_base_url}', "
        f"gateway_url: '{fake.gateway_url}', guild_ready_timeout: 0.05, edit_interval_seconds: 0.25, "
        "connect_timeout: 20, trust: {members: ['*']}}\n"
    )


def ask(fake: FakeDiscord, dm: str) -> None:
    assert wait_for(lambda: fake.connected > 0, timeout=60), "the service connected"
    fake.message_create(dm, USER_ID, QUESTION)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_kill_after_the_second_overflow_message_ends_like_an_uninterrupted_answer(tmp_path: Path):
    log = tmp_path / "serve.log"
    with FakeDiscord() as fake, FakeOpenAI(answering(LIMIT)) as llm:
        first, second = fake.new_id(), fake.new_id()
        config = write_config(tmp_path, llm, discord_yaml(fake))
        service = ServeProcess(config, log)
        ask(fake, first)
        kill_after_second_overflow(service, tmp_path, first, log)
        assert len(fake.in_channel(first)) >= 3

        resume_and_compare(config, tmp_path, log, lambda: ask(fake, second), (first, second))
        resumed, uninterrupted = fake.in_channel(first), fake.in_channel(second)
    assert [m.text for m in uninterrupted] == expected_messages(LIMIT)
    assert [m.text for m in resumed] == [m.text for m in uninterrupted], "no chunk twice, none missing"
    assert all(m.buttons == [] for m in resumed), "no Stop button left on a finished answer"
