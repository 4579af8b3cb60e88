"""Voice in on Slack: an audio clip recorded in the composer is transcribed and answered; a spoken /new
starts a new thread."""

from __future__ import annotations

import pytest

from tests.channels.slack.conftest import running_bot

pytestmark = pytest.mark.slow

CLIP = b"\x1aE\xdf\xa3" + b"\x00" * 64  # the EBML header a WebM clip starts with


async def test_an_audio_clip_is_transcribed_and_answered(tmp_path, llm, slack, stt):
    stt.say(CLIP + b"q", "How many open tickets do we have?")
    async with running_bot(tmp_path, llm, slack, settings_overrides={"speech": stt.speech_settings()}) as bot:
        bot.slack.dm("U1", "", files=[bot.slack.host_audio_clip(CLIP + b"q", seconds=3.5)])
        await bot.slack.wait_for_text("echo: 🎙️ How many open tickets do we have?", "DU1")
        await bot.harness.idle(timeout=30)

    [request] = stt.heard()
    assert request["filename"] == "audio_message.webm"
    downloads = [r for r in slack.requests if "download" in r]
    assert downloads and all(r["authorized"] for r in downloads), "fetched with the bot token"
    assert "Files attached" not in str(llm.completions[-1]["messages"])


async def test_a_spoken_new_starts_a_new_thread(tmp_path, llm, slack, stt):
    stt.say(CLIP + b"new", "/new")
    async with running_bot(tmp_path, llm, slack, settings_overrides={"speech": stt.speech_settings()}) as bot:
        bot.slack.dm("U1", "remember the word banana")
        await bot.slack.wait_for_text("echo: remember the word banana", "DU1")
        await bot.harness.idle(timeout=30)
        bot.slack.dm("U1", "", files=[bot.slack.host_audio_clip(CLIP + b"new", seconds=1)])
        await bot.slack.wait_for_text("🎙️ Heard: /new", "DU1")
        await bot.slack.wait_for_text("Started a new conversation", "DU1")
        bot.slack.dm("U1", "what was the word?")
        await bot.slack.wait_for_text("echo: what was the word?", "DU1")
        await bot.harness.idle(timeout=30)

    assert len(llm.completions) == 2
    assert "banana" not in str(llm.completions[-1]["messages"])
