"""Voice in on Telegram: a voice note is written down by the transcription server and answered as text.

The voice notes are the Bot API's ``Voice`` objects (OGG/Opus, a duration, fetched through getFile); the
transcriber is the fake OpenAI-compatible ``/audio/transcriptions`` server (tests/fakes/transcription.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from channels.telegram.channel import TelegramChannel
from config.secrets import known_secrets
from tests.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram import FakeTelegram
from tests.fakes.transcription import FakeTranscriber
from tests.harness import Harness

from .conftest import telegram_config

pytestmark = pytest.mark.slow

#: The start of an Ogg page ("OggS") and an Opus head: what a Telegram voice note's bytes look like.
VOICE = b"OggS\x00\x02" + b"\x00" * 20 + b"OpusHead\x01\x01" + b"\x00" * 64


def voice(tag: str) -> bytes:
    """A distinct voice note per ``tag``, so the transcriber can tell them apart."""
    return VOICE + tag.encode()


@asynccontextmanager
async def running(
    tmp_path: Path, llm: FakeOpenAI, tg: FakeTelegram, stt: FakeTranscriber | None, **transcribe: Any
) -> AsyncIterator[Harness]:
    speech = stt.speech_settings(**transcribe) if stt else {}
    settings = make_settings(tmp_path, llm, speech=speech)
    channel = TelegramChannel(telegram_config(tg), settings=settings)
    async with Harness.running(settings, channels={"telegram": channel}) as harness:  # type: ignore[dict-item]
        yield harness


def prompt_of(llm: FakeOpenAI, index: int = -1) -> str:
    return str(llm.completions[index]["messages"])


async def test_a_voice_note_is_transcribed_and_answered(tmp_path, llm, tg, stt):
    stt.say(voice("q"), "What is on my calendar today?")
    async with running(tmp_path, llm, tg, stt) as harness:
        tg.user_message(42, voice=(voice("q"), 3))
        await tg.wait_for_bot_text(42, "echo: 🎙️ What is on my calendar today?")
        await harness.idle()

    [request] = stt.heard()
    assert request["fields"]["model"] == "whisper-1"
    assert request["filename"].endswith(".ogg"), "Telegram's .oga is sent under a name OpenAI decodes"
    assert request["authorization"] == f"Bearer {stt.api_key}"
    assert "Files attached" not in prompt_of(llm), "the model gets the words, not an audio file"
    assert not list(Path(harness.settings.data_dir).glob("users/*/threads/*/user-data/uploads/voice_*"))


async def test_a_spoken_new_starts_a_new_thread_and_the_chat_sees_what_was_heard(tmp_path, llm, tg, stt):
    stt.say(voice("new"), "/new")
    stt.say(voice("stop"), "Stop.")
    async with running(tmp_path, llm, tg, stt) as harness:
        tg.user_message(42, "remember the word banana")
        await tg.wait_for_bot_text(42, "echo: remember the word banana")
        await harness.idle()

        tg.user_message(42, voice=(voice("new"), 1))
        await tg.wait_for_bot_text(42, "🎙️ Heard: /new")
        await tg.wait_for_bot_text(42, "Started a new conversation")
        tg.user_message(42, voice=(voice("stop"), 1))  # a bare spoken word that is a command's name
        await tg.wait_for_bot_text(42, "🎙️ Heard: /stop")
        await tg.wait_for_bot_text(42, "Nothing is running right now.")
        tg.user_message(42, "what was the word?")
        await tg.wait_for_bot_text(42, "echo: what was the word?")
        await harness.idle()

    assert len(llm.completions) == 2, "the spoken commands were not turns"
    assert "banana" not in prompt_of(llm), "after the spoken /new the thread starts afresh"


async def test_a_voice_note_over_the_size_cap_gets_a_clear_message_and_is_not_sent(tmp_path, llm, tg, stt):
    async with running(tmp_path, llm, tg, stt, max_bytes=50) as harness:
        tg.user_message(42, voice=(voice("big"), 2))
        reply = await tg.wait_for_bot_text(42, "too large to transcribe")
        await harness.idle()

    assert "voice_" in reply.text and "the limit is 1 KB" in reply.text
    assert stt.requests == [] and llm.completions == [], "nothing was sent and no turn ran"


async def test_a_voice_note_over_the_duration_cap_is_not_even_downloaded(tmp_path, llm, tg, stt):
    async with running(tmp_path, llm, tg, stt, max_seconds=60) as harness:
        tg.user_message(42, voice=(voice("long"), 15 * 60))
        reply = await tg.wait_for_bot_text(42, "too long to transcribe")
        await harness.idle()

    assert "15:00 min; the limit is 1:00 min" in reply.text
    assert tg.calls("getFile") == [] and stt.requests == []


async def test_transcriber_down_says_so_and_the_message_is_answered_once_it_is_back(tmp_path, llm, tg, stt):
    stt.say(voice("later"), "Summarise the meeting")
    stt.fail_next(1, status=503)
    async with running(tmp_path, llm, tg, stt) as harness:
        tg.user_message(42, voice=(voice("later"), 4))
        notice = await tg.wait_for_bot_text(42, "couldn't transcribe your voice message just now")
        assert "HTTP 503" in notice.text and "try again" in notice.text
        await tg.wait_for_bot_text(42, "echo: 🎙️ Summarise the meeting", timeout=30)
        await harness.idle()

    assert [r["status"] for r in stt.requests] == [503, 200]


async def test_a_wrong_key_is_reported_without_the_key(tmp_path, llm, tg, stt):
    settings_key = "sk-wrong-key-for-the-test-98765"
    async with running(tmp_path, llm, tg, stt, api_key=settings_key) as harness:
        tg.user_message(42, voice=(voice("k"), 2))
        reply = await tg.wait_for_bot_text(42, "refused the API key")
        await harness.idle()
        secrets = known_secrets(harness.settings)

    assert settings_key not in "\n".join(tg.bot_texts(42))
    assert settings_key in secrets, "the key is one of the values the log masker hides"
    assert "HTTP 401" in reply.text and llm.completions == []


async def test_without_a_transcriber_the_person_is_told_once_how_to_enable_it(tmp_path, llm, tg):
    async with running(tmp_path, llm, tg, None) as harness:
        tg.user_message(42, voice=(voice("a"), 2))
        await tg.wait_for_bot_text(42, "speech.transcribe")
        await tg.wait_for_bot_text(42, "echo:")
        await harness.idle()
        tg.user_message(42, voice=(voice("b"), 2))
        await harness.idle()

    hints = [t for t in tg.bot_texts(42) if "speech.transcribe" in t]
    assert len(hints) == 1, "told once, not on every voice note"
    assert "Files attached" in prompt_of(llm), "the voice note still reaches the agent as a file"


async def test_voice_out_answers_a_voice_note_with_a_voice_note_too(tmp_path, llm, tg, stt):
    stt.say(voice("out"), "Say hello")
    speak = {"base_url": stt.base_url, "api_key": stt.api_key, "voice": "nova"}
    settings = make_settings(
        tmp_path,
        llm,
        speech={"transcribe": {"base_url": stt.base_url, "api_key": stt.api_key}, "speak": speak},
    )
    channel = TelegramChannel(telegram_config(tg), settings=settings)
    async with Harness.running(settings, channels={"telegram": channel}) as harness:  # type: ignore[dict-item]
        tg.user_message(42, voice=(voice("out"), 2))
        await tg.wait_for_bot_text(42, "echo: 🎙️ Say hello")
        await tg.wait_until(lambda: any(m.kind == "voice" for m in tg.bot_messages(42)))
        tg.user_message(42, "typed, not spoken")
        await tg.wait_for_bot_text(42, "echo: typed, not spoken")
        await harness.idle()

    [spoken] = stt.spoken()
    assert spoken["body"]["input"] == "echo: 🎙️ Say hello" and spoken["body"]["voice"] == "nova"
    assert spoken["body"]["response_format"] == "opus"
    [note] = [m for m in tg.bot_messages(42) if m.kind == "voice"]
    assert tg.files[note.file_id].data.startswith(b"OggS"), "Telegram plays Ogg/Opus as a voice note"
    assert len(tg.calls("sendVoice")) == 1, "a typed message is answered in text only"


async def test_a_long_recording_with_a_caption_still_reaches_the_agent_as_a_file(tmp_path, llm, tg, stt):
    async with running(tmp_path, llm, tg, stt, max_seconds=60) as harness:
        tg.user_message(
            42, caption="summarise this", audio=("standup.mp3", b"ID3" + b"\x00" * 64, "audio/mpeg", 1800)
        )
        await tg.wait_for_bot_text(42, "echo: summarise this")
        await harness.idle()

    assert any("standup.mp3 is too long to transcribe" in t for t in tg.bot_texts(42))
    assert "standup.mp3" in prompt_of(llm) and stt.requests == []
