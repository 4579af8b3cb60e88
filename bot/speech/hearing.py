"""Voice messages become text before the router reads them, so a spoken command is a command.

A channel only marks an attachment as audio (with its duration, and with the platform's own
transcript where there is one: DingTalk's ``recognition``). Here, platform-neutrally, each marked
attachment is checked against the caps, downloaded, sent to the transcriber, and the message's text
becomes what was heard; the transcribed files leave the message, so the agent sees words, not an
``.oga`` it cannot play.

What the person sees:

* a transcript that is a command (``/new``, or the bare word "stop") runs as that command, and the
  chat is first shown ``🎙️ Heard: /new`` so nobody wonders why the thread changed;
* any other transcript is the turn's text, marked ``🎙️`` so the model knows it was spoken;
* audio over the size or duration cap, or refused by the server: one plain sentence; a message that
  had nothing else in it ends there, one with typed text (a caption) goes on with the audio attached;
* the transcriber unreachable (5xx, timeout): one sentence on the first attempt, then the message
  fails like any other and the inbox runs it again later (``bus.max_attempts``) — it is not lost;
* no transcriber configured: the sender is told once (per process) how to enable it, and the audio
  reaches the agent as a file, as it did before voice in existed.

The message is changed in place (text and files): a retry after a later failure starts from the
transcript instead of transcribing again.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bot.speech.speaking import SPOKEN_FLAG
from bot.speech.transcriber import Transcriber, TranscriberRefused, TranscriberUnavailable
from channels.base import Channel
from channels.errors import ChannelError, FileTooLarge
from channels.types import InboundFile, InboundMessage
from config.speech import SpeechConfig

log = logging.getLogger(__name__)

#: What the turn text starts with when it was spoken.
SPOKEN = "🎙️"
HEARD_COMMAND = SPOKEN + " Heard: {command}"
ENABLE_HINT = (
    SPOKEN + " I can't listen to voice messages here yet: the operator can turn it on by setting "
    "speech.transcribe (an OpenAI-compatible transcription server) in the config — see docs/voice.md."
)
UNAVAILABLE = (
    SPOKEN + " I couldn't transcribe your voice message just now ({reason}). I'll try again shortly."
)
#: ``/new`` as heard, or a bare word ("Stop.", "slash new"): what a command may sound like.
_SPOKEN_WORD = re.compile(r"^(?:/\s*|slash\s+)?([a-z][a-z0-9_-]{0,31})$")
_EDGE_PUNCTUATION = " \t\n.,!?;:'\"«»“”…。！？，"

Notify = Callable[[InboundMessage, str], Awaitable[object]]
IsCommand = Callable[[str], bool]


@dataclass(frozen=True, slots=True)
class Heard:
    """What hearing left: ``empty`` when nothing remains to answer (the notes were the answer)."""

    empty: bool
    command: str | None = None


class TranscriberUnavailableError(Exception):
    """Raised out of routing so the inbox runs the message again later (the person was told)."""


def spoken_command(transcript: str, is_command: IsCommand) -> str | None:
    """The command a transcript is, or None: ``/new``, ``New.``, ``slash new`` → ``/new`` (known names only)."""
    text = transcript.strip().strip(_EDGE_PUNCTUATION).lower()
    if text.startswith("/") and " " in text:  # "/model fast": a typed-looking command with arguments
        name = text[1:].split()[0]
        return transcript.strip().rstrip(_EDGE_PUNCTUATION) if is_command(name) else None
    match = _SPOKEN_WORD.match(text)
    if match and is_command(match.group(1)):
        return f"/{match.group(1)}"
    return None


class Hearing:
    """Turns a message's audio into text, or says why not. One per service."""

    def __init__(self, config: SpeechConfig, notify: Notify, is_command: IsCommand) -> None:
        self.config = config
        self.transcriber = Transcriber(config.transcribe) if config.transcribe is not None else None
        self.notify = notify
        self.is_command = is_command
        #: Senders already told how to enable voice in (this process).
        self._hinted: set[tuple[str, str, str]] = set()

    @staticmethod
    def applies(message: InboundMessage) -> bool:
        return any(f.audio for f in message.files)

    async def hear(self, message: InboundMessage, channel: Channel, *, first_attempt: bool) -> Heard:
        transcripts: list[str] = []
        kept: list[InboundFile] = []
        notes: list[str] = []
        for file in message.files:
            if not file.audio:
                kept.append(file)
            elif file.transcript is not None:  # the platform recognised it already
                transcripts.append(file.transcript.strip())
            elif self.transcriber is None:
                kept.append(file)
                await self._hint_once(message)
            else:
                heard = await self._transcribe(file, message, channel, notes, first_attempt)
                if heard is not None:
                    transcripts.append(heard)
                elif message.text.strip():  # "summarise this" + a long recording: the agent may use it
                    kept.append(file)
        spoken = " ".join(t for t in transcripts if t)
        message.files = kept
        if notes:
            await self.notify(message, "\n".join(notes))
        if not spoken:
            return Heard(empty=not message.text.strip() and not kept)
        command = None if message.text.strip() else spoken_command(spoken, self.is_command)
        if command is not None:
            message.text = command
            await self.notify(message, HEARD_COMMAND.format(command=command))
            return Heard(empty=False, command=command)
        said = f"{SPOKEN} {spoken}"
        message.context[SPOKEN_FLAG] = True  # voice out answers it with a voice message too
        message.text = f"{message.text.strip()}\n\n{said}" if message.text.strip() else said
        return Heard(empty=False)

    async def _transcribe(
        self, file: InboundFile, message: InboundMessage, channel: Channel, notes: list[str], first: bool
    ) -> str | None:
        assert self.config.transcribe is not None and self.transcriber is not None
        cap = self.config.transcribe
        if file.duration is not None and file.duration > cap.max_seconds:
            notes.append(
                f"{SPOKEN} {file.name} is too long to transcribe "
                f"({_clock(file.duration)}; the limit is {_clock(cap.max_seconds)})."
            )
            return None
        try:
            data = await channel.download(file, cap.max_bytes)
            return await self.transcriber.transcribe(data, file.name, file.mime)
        except FileTooLarge as exc:
            notes.append(
                f"{SPOKEN} {file.name} is too large to transcribe "
                f"({_size(exc.size)}; the limit is {_size(exc.limit)})."
            )
        except TranscriberRefused as exc:
            log.warning("transcribing %s failed: %s", file.name, exc)
            notes.append(f"{SPOKEN} I couldn't transcribe {file.name}: {exc}.")
        except (TranscriberUnavailable, ChannelError) as exc:
            log.warning("transcribing %s failed for now: %s", file.name, exc)
            if first:
                await self.notify(message, UNAVAILABLE.format(reason=exc))
            raise TranscriberUnavailableError(str(exc)) from None
        return None

    async def _hint_once(self, message: InboundMessage) -> None:
        who = (message.provider, message.workspace, message.sender.id)
        if who in self._hinted:
            return
        self._hinted.add(who)
        await self.notify(message, ENABLE_HINT)


def _clock(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 60}:{whole % 60:02d} min" if whole >= 60 else f"{whole} s"


def _size(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB" if size >= 1024 * 1024 else f"{max(1, size // 1024)} KB"
