"""Voice in on Feishu: an ``audio`` message (Ogg/Opus, named ``.opus``) is transcribed and answered; a
spoken /new starts a new thread."""

from __future__ import annotations

import pytest

from tests.channels.feishu.conftest import ALICE, running_bot

pytestmark = pytest.mark.slow

P2P = "oc_p2p_alice"
OPUS = b"OggS\x00\x02" + b"\x00" * 20 + b"OpusHead" + b"\x00" * 40


async def test_a_voice_message_is_transcribed_and_answered(tmp_path, llm, lark, stt):
    stt.say(OPUS + b"q", "Book the small meeting room")
    async with running_bot(tmp_path, llm, lark, settings_overrides={"speech": stt.speech_settings()}) as bot:
        bot.lark.send_audio_event(P2P, "p2p", ALICE, OPUS + b"q", duration_ms=2500)
        await bot.lark.wait_for_text(P2P, "echo: 🎙️ Book the small meeting room")
        await bot.harness.idle()

    [request] = stt.heard()
    assert request["filename"].endswith(".ogg"), "Feishu's .opus is sent under a name OpenAI decodes"


async def test_a_spoken_new_starts_a_new_thread(tmp_path, llm, lark, stt):
    stt.say(OPUS + b"new", "/new")
    async with running_bot(tmp_path, llm, lark, settings_overrides={"speech": stt.speech_settings()}) as bot:
        bot.lark.send_message_event(P2P, "p2p", ALICE, "remember the word banana")
        await bot.lark.wait_for_text(P2P, "echo: remember the word banana")
        await bot.harness.idle()
        bot.lark.send_audio_event(P2P, "p2p", ALICE, OPUS + b"new", duration_ms=900)
        await bot.lark.wait_for_text(P2P, "🎙️ Heard: /new")
        await bot.lark.wait_for_text(P2P, "Started a new conversation")
        bot.lark.send_message_event(P2P, "p2p", ALICE, "what was the word?")
        await bot.lark.wait_for_text(P2P, "echo: what was the word?")
        await bot.harness.idle()

    assert len(llm.completions) == 2
    assert "banana" not in str(llm.completions[-1]["messages"])
