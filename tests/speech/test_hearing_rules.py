"""The platform-neutral rules of voice in: what a spoken command sounds like, what name the audio is
uploaded under, and that an audio mark survives the durable inbox."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from bot.speech.hearing import spoken_command
from bot.speech.transcriber import upload_name
from channels.dingtalk.channel import DingTalkChannel
from channels.types import InboundFile, InboundMessage, Sender
from config.schema import Settings

COMMANDS = {"new", "stop", "help", "model"}


def known(name: str) -> bool:
    return name in COMMANDS


@pytest.mark.parametrize(
    ("heard", "command"),
    [
        ("/new", "/new"),
        ("New.", "/new"),
        ("  stop!  ", "/stop"),
        ("Slash new", "/new"),
        ("/model fast.", "/model fast"),
        ("Stop the build when it fails", None),
        ("banana", None),
        ("/unknown", None),
    ],
)
def test_a_transcript_is_a_command_only_when_it_is_one_known_command(heard: str, command: str | None) -> None:
    assert spoken_command(heard, known) == command


@pytest.mark.parametrize(
    ("name", "mime", "sent_as"),
    [
        ("voice_9001", "audio/ogg", "voice_9001.ogg"),  # Telegram: no extension at all
        ("voice_9001.oga", "audio/ogg", "voice_9001.ogg"),
        ("file_v3_abc.opus", None, "file_v3_abc.ogg"),  # Feishu
        ("audio_message.webm", "audio/webm", "audio_message.webm"),  # Slack clip: already fine
        ("song.mp3", "audio/mpeg", "song.mp3"),
    ],
)
def test_audio_is_uploaded_under_a_name_the_server_decodes(name: str, mime: str | None, sent_as: str) -> None:
    assert upload_name(name, mime) == sent_as


def test_an_audio_mark_survives_the_durable_inbox_and_old_entries_still_load() -> None:
    voice = InboundFile("voice_1", "FILE1", 120, "audio/ogg", audio=True, duration=3.0, transcript=None)
    message = InboundMessage(
        provider="telegram", workspace="", chat="42", sender=Sender("1"), text="", platform_message_id="1",
        files=[voice, InboundFile("a.txt", "FILE2", 3, "text/plain")],
    )  # fmt: skip
    data = message.to_json()
    assert data["files"][1] == {"name": "a.txt", "ref": "FILE2", "size": 3, "mime": "text/plain"}
    assert InboundMessage.from_json(data).files == message.files


def test_dingtalk_recognition_is_the_transcript_and_not_the_text() -> None:
    data: dict[str, Any] = {
        "msgtype": "audio",
        "content": {"duration": 4000, "downloadCode": "dc-1", "recognition": "/new"},
    }
    message = DingTalkChannel._content(_chatbot_message(data), data)
    text, [file] = message
    assert text == ""
    assert file.audio and file.transcript == "/new" and file.duration == 4.0


def test_a_transcription_url_must_be_http() -> None:
    with pytest.raises(ValidationError, match="must start with http"):
        Settings.model_validate({"speech": {"transcribe": {"base_url": "api.openai.com/v1"}}})


def _chatbot_message(data: dict[str, Any]) -> Any:
    from dingtalk_stream import ChatbotMessage

    return ChatbotMessage.from_dict(data)
