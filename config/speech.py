"""Speech settings: voice messages transcribed through an OpenAI-compatible endpoint (docs/voice.md)."""

from __future__ import annotations

from pydantic import Field, field_validator

from config.base import Section

#: OpenAI's upload limit for ``/audio/transcriptions``; a local whisper server may take more.
OPENAI_AUDIO_LIMIT = 25 * 1024 * 1024


class TranscribeConfig(Section):
    """Where voice messages are sent to be written down: OpenAI or any server with the same API."""

    #: The API root; ``/audio/transcriptions`` is appended (``https://api.openai.com/v1``, or a local
    #: whisper server such as ``http://127.0.0.1:8000/v1``).
    base_url: str
    #: The transcription model the server knows (``whisper-1``, ``gpt-4o-mini-transcribe``, a local name).
    model: str = "whisper-1"
    #: Sent as ``Authorization: Bearer …``; None sends no header (a local server). Secret: never logged.
    api_key: str | None = None
    #: ISO-639-1 hint (``en``, ``de``) for better accuracy; None lets the model detect the language.
    language: str | None = None
    #: Larger audio is not sent; the person is told the limit instead.
    max_bytes: int = Field(OPENAI_AUDIO_LIMIT, gt=0)
    #: Longer audio (where the platform says how long it is) is not sent either.
    max_seconds: float = Field(300, gt=0)
    #: How long one transcription may take before the service gives up and tries again later.
    timeout_seconds: float = Field(60, gt=0)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"speech.transcribe.base_url must start with http:// or https://, not {value!r}")
        return value.rstrip("/")


class SpeakConfig(Section):
    """Voice out: an answer to a voice message is also sent as a voice message (where the platform
    has them), spoken by an OpenAI-compatible ``/audio/speech`` server."""

    #: The API root; ``/audio/speech`` is appended.
    base_url: str
    #: The speech model (``gpt-4o-mini-tts``, ``tts-1``, a local server's name).
    model: str = "gpt-4o-mini-tts"
    #: One of the server's voices (OpenAI: alloy, ash, coral, echo, fable, nova, onyx, sage, shimmer …).
    voice: str = "alloy"
    #: Sent as ``Authorization: Bearer …``; None sends no header. Secret: never logged.
    api_key: str | None = None
    #: Longer answers are not spoken (the text answer is there anyway; OpenAI takes up to 4096).
    max_chars: int = Field(1000, gt=0, le=4096)
    timeout_seconds: float = Field(60, gt=0)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"speech.speak.base_url must start with http:// or https://, not {value!r}")
        return value.rstrip("/")


class SpeechConfig(Section):
    """Voice in, and (off by default) voice out. Without ``transcribe`` voice messages reach the agent
    as audio files, as before."""

    transcribe: TranscribeConfig | None = None
    speak: SpeakConfig | None = None
