"""The transcription client against the fake OpenAI-compatible server, and the fake's own strictness
(it must reject what OpenAI rejects, or the client's tests would prove nothing)."""

from __future__ import annotations

import httpx
import pytest

from bot.speech.transcriber import Transcriber, TranscriberRefused, TranscriberUnavailable
from config.speech import TranscribeConfig
from tests.fakes.transcription import MAX_FILE_BYTES, FakeTranscriber

pytestmark = pytest.mark.slow

AUDIO = b"OggS" + b"\x00" * 60


def client(stt: FakeTranscriber, **overrides: object) -> Transcriber:
    values: dict[str, object] = {"base_url": stt.base_url, "api_key": stt.api_key, **overrides}
    return Transcriber(TranscribeConfig.model_validate(values))


async def test_the_client_gets_the_transcript_and_names_the_upload_for_the_server(stt) -> None:
    stt.say(AUDIO, "  hello there \n")
    assert (
        await client(stt, model="gpt-4o-mini-transcribe").transcribe(AUDIO, "voice_1", "audio/ogg")
        == "hello there"
    )
    [request] = stt.requests
    assert request["filename"] == "voice_1.ogg" and request["fields"]["model"] == "gpt-4o-mini-transcribe"


async def test_errors_are_sorted_into_try_later_and_will_not_work(stt) -> None:
    stt.fail_next(1, status=502)
    with pytest.raises(TranscriberUnavailable, match="HTTP 502"):
        await client(stt).transcribe(AUDIO, "v.ogg", "audio/ogg")
    with pytest.raises(TranscriberRefused, match=r"API key \(HTTP 401\)") as refused:
        await client(stt, api_key="sk-not-the-right-key-000").transcribe(AUDIO, "v.ogg", "audio/ogg")
    assert "sk-not-the-right-key-000" not in str(refused.value)
    with pytest.raises(TranscriberUnavailable, match="could not be reached"):
        await client(stt, base_url="http://127.0.0.1:9/v1").transcribe(AUDIO, "v.ogg", "audio/ogg")


async def test_the_fake_rejects_what_openai_rejects(stt) -> None:
    url = f"{stt.base_url}/audio/transcriptions"
    auth = {"Authorization": f"Bearer {stt.api_key}"}
    async with httpx.AsyncClient() as http:
        no_file = await http.post(url, headers=auth, data={"model": "whisper-1"}, files={"x": ("a", b"1")})
        no_model = await http.post(url, headers=auth, files={"file": ("a.ogg", AUDIO)})
        bad_format = await http.post(
            url, headers=auth, data={"model": "whisper-1"}, files={"file": ("a.oga", AUDIO)}
        )
        no_key = await http.post(url, data={"model": "whisper-1"}, files={"file": ("a.ogg", AUDIO)})
        text = await http.post(
            url,
            headers=auth,
            data={"model": "whisper-1", "response_format": "text"},
            files={"file": ("a.ogg", AUDIO)},
        )
        too_big = await http.post(
            url,
            headers=auth,
            data={"model": "whisper-1"},
            files={"file": ("a.ogg", b"\x00" * (MAX_FILE_BYTES + 1))},
        )
    assert (no_file.status_code, no_file.json()["error"]["param"]) == (400, "file")
    assert (no_model.status_code, no_model.json()["error"]["param"]) == (400, "model")
    assert bad_format.status_code == 400 and "Invalid file format" in bad_format.json()["error"]["message"]
    assert no_key.status_code == 401 and no_key.json()["error"]["type"] == "invalid_request_error"
    assert text.status_code == 200 and text.headers["content-type"].startswith("text/plain")
    assert too_big.status_code == 413


async def test_the_fake_speech_endpoint_rejects_what_openai_rejects(stt) -> None:
    url = f"{stt.base_url}/audio/speech"
    auth = {"Authorization": f"Bearer {stt.api_key}"}
    async with httpx.AsyncClient() as http:
        no_voice = await http.post(url, headers=auth, json={"model": "tts-1", "input": "hi"})
        too_long = await http.post(
            url, headers=auth, json={"model": "tts-1", "input": "x" * 4097, "voice": "alloy"}
        )
        no_key = await http.post(url, json={"model": "tts-1", "input": "hi", "voice": "alloy"})
        opus = await http.post(
            url,
            headers=auth,
            json={"model": "tts-1", "input": "hi", "voice": "alloy", "response_format": "opus"},
        )
    assert (no_voice.status_code, no_voice.json()["error"]["param"]) == (400, "voice")
    assert (too_long.status_code, too_long.json()["error"]["param"]) == (400, "input")
    assert no_key.status_code == 401
    assert opus.status_code == 200 and opus.content.startswith(b"OggS")
