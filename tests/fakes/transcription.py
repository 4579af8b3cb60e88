"""A fake OpenAI-compatible audio server: ``POST /v1/audio/transcriptions`` (and ``/v1/audio/speech``).

Written from OpenAI's API reference, and strict where OpenAI is: the body must be
``multipart/form-data`` with a ``file`` part (with a file name) and a ``model`` field, else 400 with
OpenAI's error JSON (``{"error": {"message", "type", "param", "code"}}``); the file's extension must be
one the reference lists (flac, mp3, mp4, mpeg, mpga, m4a, ogg, wav, webm); a file over 25 MB is 413; a
missing or wrong ``Authorization: Bearer`` key is 401; ``response_format`` ``json`` (the default) answers
``{"text": …}``, ``text`` answers the bare text, ``verbose_json`` adds ``language`` and ``duration``.

What it "hears" is scripted: :meth:`say` maps audio bytes to a transcript; :meth:`fail_next` makes the
next requests answer a 5xx, as an overloaded or restarting server does.
"""

from __future__ import annotations

from typing import Any

from aiohttp import BodyPartReader, web

from tests.fakes.server import ThreadedServer

#: OpenAI's per-file upload limit for transcriptions.
MAX_FILE_BYTES = 25 * 1024 * 1024
FORMATS = ("flac", "mp3", "mp4", "mpeg", "mpga", "m4a", "ogg", "wav", "webm")
RESPONSE_FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
#: ``/audio/speech``: the longest ``input``, and each ``response_format`` with its files' first bytes.
SPEECH_INPUT_LIMIT = 4096
SPEECH_FORMATS = {
    "mp3": b"ID3",
    "opus": b"OggS",
    "aac": b"\xff\xf1",
    "flac": b"fLaC",
    "wav": b"RIFF",
    "pcm": b"",
}


def _error(status: int, message: str, *, param: str | None = None, code: str | None = None) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}
    return web.json_response(body, status=status)


class FakeTranscriber(ThreadedServer):
    def __init__(self, api_key: str | None = "sk-test-transcribe-key-0123456789") -> None:
        super().__init__()
        self.api_key = api_key
        self.transcripts: dict[bytes, str] = {}
        self._failures: list[int] = []

    @property
    def base_url(self) -> str:
        """What ``speech.transcribe.base_url`` is set to (OpenAI's is ``https://api.openai.com/v1``)."""
        return f"{self.url}/v1"

    def speech_settings(self, **transcribe: Any) -> dict[str, Any]:
        """The ``speech`` settings section that sends voice to this server (``transcribe`` adds keys)."""
        return {"transcribe": {"base_url": self.base_url, "api_key": self.api_key, **transcribe}}

    def say(self, audio: bytes, transcript: str) -> None:
        """Hearing ``audio`` yields ``transcript``."""
        with self._lock:
            self.transcripts[audio] = transcript

    def fail_next(self, times: int = 1, status: int = 503) -> None:
        with self._lock:
            self._failures.extend([status] * times)

    def heard(self) -> list[dict[str, Any]]:
        """The requests that were answered with a transcript."""
        with self._lock:
            return [r for r in self.requests if r.get("route") != "speech" and r["status"] == 200]

    def setup_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        app.router.add_post("/v1/audio/speech", self._speech)

    def spoken(self) -> list[dict[str, Any]]:
        """The ``/audio/speech`` requests answered with audio."""
        with self._lock:
            return [r for r in self.requests if r.get("route") == "speech" and r["status"] == 200]

    async def _speech(self, request: web.Request) -> web.Response:
        """``POST /audio/speech``: JSON with ``model``, ``input`` (at most 4096 characters) and ``voice``
        required; answers the audio in ``response_format`` (mp3 by default)."""
        entry: dict[str, Any] = {"route": "speech", "authorization": request.headers.get("Authorization")}
        response = await self._speak(request, entry)
        entry["status"] = response.status
        self.record(entry)
        return response

    async def _speak(self, request: web.Request, entry: dict[str, Any]) -> web.Response:
        if self.api_key is not None and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return _error(401, "Incorrect API key provided.", code="invalid_api_key")
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "We could not parse the JSON body of your request.")
        entry["body"] = body
        for name in ("model", "input", "voice"):
            if not body.get(name):
                return _error(400, f"Missing required parameter: '{name}'.", param=name)
        if len(body["input"]) > SPEECH_INPUT_LIMIT:
            return _error(400, f"string too long. Expected a string with maximum length {SPEECH_INPUT_LIMIT}",
                          param="input")  # fmt: skip
        fmt = body.get("response_format", "mp3")
        if fmt not in SPEECH_FORMATS:
            return _error(400, f"Invalid value: '{fmt}'. Supported values are: {list(SPEECH_FORMATS)}",
                          param="response_format")  # fmt: skip
        audio = SPEECH_FORMATS[fmt] + body["input"].encode()  # the format's magic bytes, then "speech"
        return web.Response(body=audio, content_type="audio/ogg" if fmt == "opus" else f"audio/{fmt}")

    async def _transcribe(self, request: web.Request) -> web.Response:
        entry: dict[str, Any] = {"authorization": request.headers.get("Authorization")}
        response = await self._answer(request, entry)
        entry["status"] = response.status
        self.record(entry)
        return response

    async def _answer(self, request: web.Request, entry: dict[str, Any]) -> web.Response:
        if self.api_key is not None:
            auth = request.headers.get("Authorization", "")
            if not auth.startswith("Bearer "):
                return _error(401, "You didn't provide an API key. You need to provide your API key in an "
                              "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")  # fmt: skip
            if auth.removeprefix("Bearer ") != self.api_key:
                return _error(401, "Incorrect API key provided.", code="invalid_api_key")
        with self._lock:
            failure = self._failures.pop(0) if self._failures else None
        if failure is not None:
            return _error(failure, "The server is overloaded or not ready yet.")
        if request.content_length is not None and request.content_length > MAX_FILE_BYTES + 64 * 1024:
            return _error(413, f"Maximum content size limit ({MAX_FILE_BYTES}) exceeded.")
        if not request.content_type.startswith("multipart/form-data"):
            return _error(400, "Invalid Content-Type header; expected multipart/form-data.")
        fields: dict[str, str] = {}
        upload: tuple[str, bytes] | None = None
        reader = await request.multipart()
        async for part in reader:
            if not isinstance(part, BodyPartReader):  # a nested multipart: not a form field
                return _error(400, "Nested multipart bodies are not supported.")
            if part.name == "file":
                if not part.filename:
                    return _error(400, "Could not parse multipart form: the file part has no file name.",
                                  param="file")  # fmt: skip
                data = await part.read()
                if len(data) > MAX_FILE_BYTES:
                    return _error(413, f"Maximum content size limit ({MAX_FILE_BYTES}) exceeded "
                                  f"({len(data)} bytes read).")  # fmt: skip
                upload = (part.filename, bytes(data))
            elif part.name:
                fields[part.name] = await part.text()
        entry.update(
            fields=fields, filename=upload[0] if upload else None, size=len(upload[1]) if upload else 0
        )
        if upload is None:
            return _error(400, "you must provide a file", param="file")
        if not fields.get("model"):
            return _error(400, "you must provide a model parameter", param="model")
        name, data = upload
        extension = name.rsplit(".", 1)[-1].lower() if "." in name else ""
        if extension not in FORMATS:
            return _error(400, f"Invalid file format. Supported formats: {list(FORMATS)}", param="file")
        response_format = fields.get("response_format", "json")
        if response_format not in RESPONSE_FORMATS:
            return _error(400, f"'{response_format}' is not one of {list(RESPONSE_FORMATS)} - 'response_format'",
                          param="response_format")  # fmt: skip
        with self._lock:
            text = self.transcripts.get(data, "")
        entry["transcript"] = text
        if response_format == "text":
            return web.Response(text=text + "\n", content_type="text/plain")
        if response_format == "verbose_json":
            body = {
                "task": "transcribe",
                "language": "english",
                "duration": 1.0,
                "text": text,
                "segments": [],
            }
            return web.json_response(body)
        if response_format in ("srt", "vtt"):
            return web.Response(text=f"1\n00:00:00,000 --> 00:00:01,000\n{text}\n", content_type="text/plain")
        return web.json_response({"text": text})
