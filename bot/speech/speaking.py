"""Voice out: the answer to a voice message is also sent as a voice message (``speech.speak``).

Off by default. Only answers to messages that were spoken (hearing marks them) are spoken back, only
on platforms that can send a voice message (``Channel.send_voice``; Telegram today), and only up to
``max_chars``: the written answer is always delivered first, so a failure here costs nothing but the
voice note, and is logged rather than retried.

The server is OpenAI's ``POST /audio/speech`` shape: JSON ``{model, input, voice, response_format}``
answered with the audio bytes. ``opus`` is asked for: Ogg/Opus is what Telegram plays as a voice note.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import httpx

from bot.turns import FollowUp, TurnOutcome
from channels.base import Channel
from channels.errors import ChannelError
from config.speech import SpeakConfig

log = logging.getLogger(__name__)

#: Set by hearing on a message whose text was spoken (a JSON-safe flag: it travels with the message).
SPOKEN_FLAG = "spoken"


class SpeechFailed(Exception):
    """The speech server did not give audio. ``str()`` never carries the key."""


class Speaker:
    def __init__(self, config: SpeakConfig, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.config = config
        self._transport = transport

    async def speak(self, text: str) -> bytes:
        config = self.config
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        body = {"model": config.model, "input": text, "voice": config.voice, "response_format": "opus"}
        try:
            async with httpx.AsyncClient(timeout=config.timeout_seconds, transport=self._transport) as client:
                response = await client.post(f"{config.base_url}/audio/speech", headers=headers, json=body)
        except httpx.HTTPError as exc:
            raise SpeechFailed(f"the speech service could not be reached ({type(exc).__name__})") from None
        if response.status_code != 200:
            raise SpeechFailed(f"the speech service answered HTTP {response.status_code}")
        return response.content


class VoiceReplies:
    """The after-turn hook that speaks an answer back to whoever spoke to the bot."""

    def __init__(self, config: SpeakConfig, channels: Mapping[str, Channel]) -> None:
        self.config = config
        self.speaker = Speaker(config)
        self.channels = channels

    async def __call__(self, outcome: TurnOutcome) -> FollowUp | None:
        message = outcome.message
        text = outcome.text.strip()
        if not message.context.get(SPOKEN_FLAG) or outcome.hidden or outcome.stopped or outcome.failed:
            return None
        channel = self.channels.get(message.provider)
        if channel is None or not channel.sends_voice or not text or len(text) > self.config.max_chars:
            return None
        try:
            audio = await self.speaker.speak(text)
            await channel.send_voice(message, audio)
        except (SpeechFailed, ChannelError) as exc:
            log.warning("the spoken answer was not sent: %s", exc)
        return None
