"""Neutral message types shared by every channel, the bus and the manager.

They are plain dataclasses that round-trip through JSON because the durable inbox stores them: a message
accepted before a crash must be rebuilt, byte for byte, after the restart.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

#: How far the service trusts a message's sender, when the channel decided it at the edge (docs/security.md):
#: ``admin``, ``member`` (allowed on that platform) or ``guest`` (anyone else). The same three values as
#: the agent seam's ``TrustLevel``; channels import only ``config``, so the literal is spelled out here.
Trust = Literal["admin", "member", "guest"]


@dataclass(frozen=True, slots=True)
class Sender:
    """Who wrote a message, as the platform identifies them (``id`` is stable, ``name`` is for display)."""

    id: str
    name: str | None = None
    is_bot: bool = False
    #: The platform vouches that the sender belongs to the workspace the bot is installed in (a Slack team
    #: member rather than a Slack Connect guest, a user of the Feishu tenant or DingTalk organisation, a
    #: member of an allowed Discord server). A fact for the trust policy (docs/security.md), nothing more.
    member: bool = False


@dataclass(frozen=True, slots=True)
class InboundFile:
    """A file attached to a message. ``ref`` is whatever the channel needs to download it later.

    ``audio`` marks a voice message or audio clip, which the service transcribes (docs/voice.md); the
    channel only says so, with the ``duration`` in seconds where the platform gives it, and ``transcript``
    when the platform already recognised the speech itself (DingTalk's ``recognition``).
    """

    name: str
    ref: str
    size: int | None = None
    mime: str | None = None
    audio: bool = False
    duration: float | None = None
    transcript: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "ref": self.ref, "size": self.size, "mime": self.mime}
        if self.audio:  # only then: a stored message without audio keeps its old shape
            data.update(audio=True, duration=self.duration, transcript=self.transcript)
        return data


@dataclass(frozen=True, slots=True)
class ChatCommand:
    """A chat command as a platform's command menu lists it (``name`` without the slash)."""

    name: str
    description: str


@dataclass(frozen=True, slots=True)
class Action:
    """A button on a reply. Pressing it means exactly what typing ``command`` in that chat means.

    The command is the text fallback (every platform can type ``/approve K7PX2M``) and the whole
    payload a platform carries back on a press (Telegram's 64-byte ``callback_data``, a Discord
    ``custom_id``, a Slack button ``value``), so a press needs no lookup table that a restart would lose.
    """

    command: str
    label: str
    style: Literal["primary", "danger"] | None = None


@dataclass(slots=True)
class InboundMessage:
    """One message from a platform, normalised.

    ``workspace`` is the team/tenant/guild (``""`` where the platform has none), ``chat`` the room or DM,
    ``topic`` the thread/reply chain inside it (``None`` for the chat itself). The four together with the
    provider are the *conversation key*; ``platform_message_id`` makes the inbox dedupe key.
    ``context`` carries opaque, JSON-safe values the channel needs to reply (e.g. a session webhook).

    A button press is an inbound message too: ``text`` is the pressed :class:`Action`'s command,
    ``pressed`` the reference of the reply the button was on (as the transport returned it), and
    ``platform_message_id`` the platform's id of that press, so a press delivered twice dedupes like a
    message delivered twice.

    ``trust`` is set by a channel that knows the sender's standing from the event itself (GitHub's
    ``author_association``), so it travels with the message through the durable inbox; None leaves the
    decision to the service (the manager treats it as ``member``).
    """

    provider: str
    workspace: str
    chat: str
    sender: Sender
    text: str
    platform_message_id: str
    topic: str | None = None
    mentioned: bool = False
    is_private: bool = False
    files: list[InboundFile] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)
    thread_id: str | None = None
    received_at: float = field(default_factory=time.time)
    pressed: str | None = None
    trust: Trust | None = None
    #: Set only by the scheduler on a scheduled occurrence: the trust level its creator had when making
    #: it. Such a message is never read as a chat command and never runs above that level.
    scheduled: str | None = None

    @property
    def conversation_key(self) -> tuple[str, str, str, str]:
        return (self.provider, self.workspace, self.chat, self.topic or "")

    @property
    def dedupe_key(self) -> tuple[str, str, str, str]:
        return (self.provider, self.workspace, self.chat, self.platform_message_id)

    def to_json(self) -> dict[str, Any]:
        # Written out by hand: dataclasses.asdict deep-copies every value, which showed up as a
        # measurable share of the per-message cost in bench/manager.py.
        return {
            "provider": self.provider,
            "workspace": self.workspace,
            "chat": self.chat,
            "sender": {
                "id": self.sender.id,
                "name": self.sender.name,
                "is_bot": self.sender.is_bot,
                "member": self.sender.member,
            },
            "text": self.text,
            "platform_message_id": self.platform_message_id,
            "topic": self.topic,
            "mentioned": self.mentioned,
            "is_private": self.is_private,
            "files": [f.to_json() for f in self.files],
            "context": self.context,
            "thread_id": self.thread_id,
            "received_at": self.received_at,
            "pressed": self.pressed,
            "trust": self.trust,
            "scheduled": self.scheduled,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> InboundMessage:
        data = dict(data)
        data["sender"] = Sender(**data["sender"])
        data["files"] = [InboundFile(**f) for f in data.get("files", [])]
        return cls(**data)


@dataclass(frozen=True, slots=True)
class ReplyLimits:
    """How a platform wants replies paced and sized. One instance per channel, in its own module.

    ``min_edit_interval`` is the per-chat spacing between outbound calls (sends and edits alike);
    ``text_limit`` the longest message body in characters; ``final_retry_backoff`` the pause before
    the second try of a final reply the platform failed (5xx, network), doubling each try.
    """

    text_limit: int
    min_edit_interval: float
    supports_edit: bool = True
    final_retry_backoff: float = 0.5


@dataclass(slots=True)
class ChannelStatus:
    """What ``/health`` shows for a channel."""

    state: str = "stopped"  # stopped | starting | connected | reconnecting | error
    detail: str | None = None
    since: float = field(default_factory=time.time)

    def set(self, state: str, detail: str | None = None) -> None:
        self.state, self.detail, self.since = state, detail, time.time()
