"""A client for an OpenAI-compatible ``POST {base_url}/audio/transcriptions``.

Why OpenAI's shape: OpenAI, Groq, and the local whisper servers (faster-whisper-server, whisper.cpp's
server, LocalAI) all take the same multipart form — ``file`` and ``model`` required, ``language`` and
``response_format`` optional — so one small client covers a paid API and a box under the desk.

The server picks the decoder from the file name's extension, and only a fixed list is accepted
(flac, mp3, mp4, mpeg, mpga, m4a, ogg, wav, webm). Platforms name voice notes otherwise (Telegram's
``.oga``, Feishu's ``.opus``, both Ogg/Opus), so the upload is named by what the audio really is.

Failures come in two kinds, because they end differently: :class:`TranscriberUnavailable` (the server
is down, 5xx, 429, a timeout) is worth trying again later; :class:`TranscriberRefused` (a 4xx: a wrong
key, an unreadable file) will not get better by waiting. Neither ever carries the API key.
"""

from __future__ import annotations

import json
from pathlib import PurePosixPath

import httpx

from config.speech import TranscribeConfig

#: The extensions OpenAI's endpoint decodes (its API reference lists them).
ACCEPTED = frozenset({"flac", "mp3", "mp4", "mpeg", "mpga", "m4a", "ogg", "wav", "webm"})
#: Names platforms give Ogg/Opus voice notes, and the extension the server knows them by.
_RENAMED = {"oga": "ogg", "opus": "ogg", "spx": "ogg"}
_BY_MIME = {
    "audio/ogg": "ogg",
    "audio/opus": "ogg",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
    "audio/mp4": "m4a",
    "audio/m4a": "m4a",
    "audio/x-m4a": "m4a",
    "audio/aac": "m4a",
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/webm": "webm",
    "audio/flac": "flac",
    "audio/x-flac": "flac",
    "video/mp4": "mp4",
    "video/webm": "webm",
}
#: How much of a server's error message is repeated to the person.
_MESSAGE_CHARS = 200


class TranscriptionError(Exception):
    """A transcription did not happen. ``str()`` is fit for the chat: no key, no request body."""


class TranscriberUnavailable(TranscriptionError):
    """The server could not answer now (down, 5xx, 429, timeout): try the message again later."""


class TranscriberRefused(TranscriptionError):
    """The server said no (4xx): waiting will not help, the person is told why."""


def upload_name(name: str, mime: str | None) -> str:
    """A file name whose extension the server decodes: the platform's own when accepted."""
    path = PurePosixPath(name or "voice")
    suffix = path.suffix.lower().lstrip(".")
    if suffix in ACCEPTED:
        return path.name
    ext = _RENAMED.get(suffix) or _BY_MIME.get((mime or "").split(";")[0].strip().lower())
    if ext is None:
        return path.name  # a local server may still know it; OpenAI says which formats it takes
    return f"{path.stem or 'voice'}.{ext}"


class Transcriber:
    """Sends audio to the configured server and returns what it heard (the text, stripped)."""

    def __init__(self, config: TranscribeConfig, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.config = config
        self._transport = transport

    @property
    def url(self) -> str:
        return f"{self.config.base_url}/audio/transcriptions"

    async def transcribe(self, data: bytes, name: str, mime: str | None) -> str:
        config = self.config
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        form = {"model": config.model, "response_format": "json"}
        if config.language:
            form["language"] = config.language
        filename = upload_name(name, mime)
        files = {"file": (filename, data, mime or "application/octet-stream")}
        try:
            async with httpx.AsyncClient(timeout=config.timeout_seconds, transport=self._transport) as client:
                response = await client.post(self.url, headers=headers, data=form, files=files)
        except httpx.TimeoutException:
            raise TranscriberUnavailable(
                f"the transcription service did not answer within {config.timeout_seconds:g} s"
            ) from None
        except httpx.HTTPError as exc:
            raise TranscriberUnavailable(
                f"the transcription service could not be reached ({type(exc).__name__})"
            ) from None
        return _transcript(response)


def _transcript(response: httpx.Response) -> str:
    status = response.status_code
    if status >= 500 or status == 429:
        raise TranscriberUnavailable(f"the transcription service answered HTTP {status}")
    if status == 401:
        raise TranscriberRefused("the transcription service refused the API key (HTTP 401)")
    if status == 413:
        raise TranscriberRefused("the transcription service says the audio is too large (HTTP 413)")
    if status >= 400:
        raise TranscriberRefused(
            f"the transcription service refused it (HTTP {status}: {_message(response)})"
        )
    kind = response.headers.get("content-type", "").split(";")[0].strip()
    if kind == "application/json":
        try:
            body = response.json()
        except json.JSONDecodeError:
            raise TranscriberRefused("the transcription service answered with broken JSON") from None
        text = body.get("text") if isinstance(body, dict) else None
        if not isinstance(text, str):
            raise TranscriberRefused("the transcription service's answer has no text")
        return text.strip()
    return response.text.strip()  # response_format=text, or a server that ignores the form field


def _message(response: httpx.Response) -> str:
    """OpenAI's ``{"error": {"message": …}}``, or the start of whatever else came back."""
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return response.text[:_MESSAGE_CHARS].strip() or "no details"
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return str(message or body)[:_MESSAGE_CHARS]
