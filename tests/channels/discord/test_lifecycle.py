"""Connecting, health and `switchboard doctor` for Discord."""

from __future__ import annotations

import pytest

from channels.discord.channel import DiscordChannel
from channels.errors import ChannelError
from tests.channels.discord.conftest import USER_ID, discord_config, eventually, final_reply
from tests.fakes.discord import FakeDiscord


async def test_doctor_check_passes_with_a_good_token(discord_fake):
    assert await DiscordChannel(discord_config(discord_fake)).check() is None


async def test_doctor_check_names_the_problem(discord_fake):
    wrong = DiscordChannel(discord_config(discord_fake, bot_token="not-the-token"))
    assert "rejected the bot token" in (await wrong.check() or "")
    away = DiscordChannel(discord_config(discord_fake, api_base_url="http://127.0.0.1:9/api/v10"))
    assert "cannot reach Discord" in (await away.check() or "")
    with FakeDiscord(message_content_intent=False) as no_intent:
        problem = await DiscordChannel(discord_config(no_intent)).check()
    assert problem is not None and "Message Content intent" in problem
    assert discord_fake.token not in (await wrong.check() or "")


async def test_a_wrong_token_fails_start_with_a_clear_status(discord_fake):
    channel = DiscordChannel(discord_config(discord_fake, bot_token="not-the-token"))
    with pytest.raises(ChannelError, match="rejected the bot token"):
        await channel.start(_never_called)
    assert channel.status.state == "error"
    await channel.stop()


async def test_a_missing_message_content_intent_is_reported_as_the_reason(discord_fake):
    with FakeDiscord(message_content_intent=False) as fake:
        channel = DiscordChannel(discord_config(fake))
        with pytest.raises(ChannelError, match="Message Content intent"):
            await channel.start(_never_called)
        await channel.stop()
    assert channel.status.state == "error"
    assert "Privileged Gateway Intents" in (channel.status.detail or "")


@pytest.mark.slow
async def test_after_the_gateway_drops_the_bot_resumes_and_keeps_answering(
    discord_harness, discord_fake, llm
):
    channel = discord_harness.service.channels["discord"]
    assert channel.status.state == "connected"
    query = discord_fake.gateway_queries[0]
    assert query["v"] == "10" and query["encoding"] == "json"
    assert query.get("compress") in ("zstd-stream", "zlib-stream")  # the fake answers compressed frames
    assert discord_fake.identifies[0]["intents"] & (1 << 15)  # asks for message content
    discord_fake.gateway_down = True
    discord_fake.drop_connections()
    await eventually(lambda: channel.status.state == "reconnecting", what="status reconnecting")
    discord_fake.gateway_down = False
    await eventually(lambda: discord_fake.resumes, what="a RESUME")
    await eventually(lambda: channel.status.state == "connected" and discord_fake.connected)
    dm = discord_fake.new_id()
    discord_fake.message_create(dm, USER_ID, "still there?")
    await final_reply(discord_fake, dm, "echo: still there?")
    await discord_harness.idle()


async def _never_called(message):  # type: ignore[no-untyped-def]
    raise AssertionError("no message expected")
