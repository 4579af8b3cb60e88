"""Voice in on Discord: a voice message (``IS_VOICE_MESSAGE``, one Ogg/Opus attachment) is transcribed."""

from __future__ import annotations

from pathlib import Path

import pytest

from channels.discord.channel import DiscordChannel
from tests.channels.discord.conftest import USER_ID, discord_config, final_reply
from tests.conftest import make_settings
from tests.harness import Harness

pytestmark = pytest.mark.slow

OPUS = b"OggS\x00\x02" + b"\x00" * 20 + b"OpusHead" + b"\x00" * 40


async def test_a_voice_message_is_transcribed_and_answered(tmp_path: Path, llm, discord_fake, stt) -> None:
    stt.say(OPUS, "Deploy the staging branch")
    settings = make_settings(tmp_path, llm, speech=stt.speech_settings())
    channel = DiscordChannel(discord_config(discord_fake), settings=settings)
    async with Harness.running(settings, channels={"discord": channel}) as harness:  # type: ignore[dict-item]
        dm = discord_fake.new_id()
        discord_fake.voice_message(dm, USER_ID, OPUS, seconds=2.4)
        await final_reply(discord_fake, dm, "echo: 🎙️ Deploy the staging branch")
        await harness.idle()

    [request] = stt.heard()
    assert request["filename"] == "voice-message.ogg"
