"""Prompt facts and usage: the model is told the date and time in ``agent.timezone``; ``/status`` shows the
thread's token usage as the provider reported it (the fake's usage chunk), and the model."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from config.loader import ConfigError, load_settings
from tests.agent.helpers import agent_settings, system_text
from tests.fakes.openai_server import Reply
from tests.harness import Harness


async def test_the_system_prompt_has_the_current_date_and_time_in_the_configured_zone(tmp_path, llm):
    settings = agent_settings(tmp_path, llm, agent={"timezone": "Asia/Tokyo"})
    async with Harness.running(settings) as h:
        before = datetime.now(ZoneInfo("Asia/Tokyo"))
        await h.ask("what day is it?")
    prompt = system_text(llm.completions[-1])
    stamps = {f"{t:%A, %Y-%m-%d %H:%M}" for t in (before, before + timedelta(minutes=1))}
    assert any(f"Current date and time: {stamp} (Asia/Tokyo, UTC+0900)." in prompt for stamp in stamps), (
        prompt
    )


async def test_the_default_zone_is_utc(harness, llm):
    await harness.ask("hi")
    assert "(UTC, UTC+0000)." in system_text(llm.completions[-1])


def test_an_unknown_time_zone_is_a_clear_config_error(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load_settings(overrides={"agent": {"timezone": "Mars/Olympus"}}, env={})
    assert "'Mars/Olympus' is not a known IANA time zone name" in str(caught.value.problems)


async def test_status_shows_the_threads_token_usage_from_the_providers_usage_report(tmp_path, llm):
    async with Harness.running(agent_settings(tmp_path, llm)) as h:
        assert "Tokens: none used yet in this thread" in await h.ask("/status")
        llm.script(
            Reply(text="first answer", prompt_tokens=1111, completion_tokens=22),
            Reply(text="second answer", prompt_tokens=3333, completion_tokens=44),
        )
        await h.ask("one")
        await h.ask("two")
        status = await h.ask("/status")
    assert "Model: default" in status
    assert (
        "Tokens: last turn 3,333 in / 44 out (default); thread total 4,444 in / 66 out over 2 turn(s)"
        in status
    )
    # Usage arrives in the stream's last chunk only because the runtime asks for it.
    assert all(b.get("stream_options", {}).get("include_usage") for b in llm.completions)
