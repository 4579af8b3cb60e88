"""The one small interface every platform implements, and what it hands the rest of the service."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar, Literal

from channels.errors import FileTooLarge
from channels.intake import IntakeWindow
from channels.reply import (
    CALL_KINDS,
    BudgetRegistry,
    CallKind,
    Pacing,
    RateBudget,
    ReplyStream,
    ReplyTransport,
    StateSink,
)
from channels.resume import ReplyState
from channels.types import ChannelStatus, ChatCommand, InboundFile, InboundMessage, ReplyLimits
from config.base import EVERYONE, TrustSection

log = logging.getLogger(__name__)

#: Where a worker hands a normalised message. Returns True when newly accepted, False for a duplicate;
#: raises :class:`channels.errors.Backpressure` when the service cannot take more right now.
InboundSink = Callable[[InboundMessage], Awaitable[bool]]


class Channel(ABC):
    """A platform worker: connects, normalises events into :class:`InboundMessage`, renders replies.

    It never calls the agent and never decides what a message means; the manager does. Everything that
    differs between platforms (pacing, size limits, markup, editing, files) stays behind this class.
    """

    provider: ClassVar[str]
    #: The platform lets only one connection receive a bot's messages (Telegram long polling) or does
    #: not spread them over several connections (a Discord gateway session). When True and
    #: several instances share the work, the service calls :meth:`lease_intake` before :meth:`start`
    #: and then :meth:`start_receiving` / :meth:`stop_receiving` as this instance gains and loses the
    #: channel's lease. A channel may set it per instance (Telegram: polling mode only).
    receives_exclusively: bool = False
    #: Commands the channel answers itself, never sent to the service (the terminal's /quit): (name, help).
    local_commands: ClassVar[tuple[tuple[str, str], ...]] = ()
    limits: ClassVar[ReplyLimits]

    def __init__(self) -> None:
        self.status = ChannelStatus()
        self._budgets = BudgetRegistry(self.limits.min_edit_interval)
        self._sink: InboundSink | None = None
        #: Told about group messages not addressed to the bot (set by the service when an agent reads the
        #: room, docs/agents.md); they are never stored or answered. None: not wanted.
        self.overhear: Callable[[InboundMessage], None] | None = None
        #: Whether the platform hands the bot a group's messages that are not addressed to it (Telegram:
        #: ``getMe``'s ``can_read_all_group_messages``, false while privacy mode is on); None: not known.
        #: The room window of an ambient agent holds only addressed messages where this is False.
        self.reads_all_group_messages: bool | None = None
        #: The service's chat commands, for platforms with a command menu (set before :meth:`start`).
        self.commands: tuple[ChatCommand, ...] = ()
        #: Platform user ids of the channel's admins (``channels.<name>.admins``; see :meth:`is_admin`).
        self.admins: frozenset[str] = frozenset()
        #: Who is a member here and what guests get (``channels.<name>.trust``; bot/trust.py decides).
        #: A channel without a trust section of its own (the memory test channel; GitHub, whose
        #: outsiders are judged in webhooks/ before the bus) treats everyone who reaches it as a member.
        self.trust: TrustSection = TrustSection(members=[EVERYONE])
        #: Who approves risky commands here (``channels.<name>.approvers``); None: by the kind of chat.
        self.approvers: Literal["requester", "admins"] | None = None
        #: Set by :meth:`lease_intake`: receiving waits for :meth:`start_receiving`.
        self.intake_leased = False
        #: Set by :meth:`lease_intake`: until when the lease lets this instance receive (the keeper
        #: moves it at each renewal); the channel never receives past it.
        self.intake_window: IntakeWindow | None = None

    def offer_commands(self, commands: Sequence[ChatCommand]) -> None:
        """Called by the service just before :meth:`start`: the commands the manager answers.

        Channels never import the bot package; this is how a platform's command menu learns the names.
        """
        self.commands = tuple(commands)

    # --- lifecycle -------------------------------------------------------------------------------
    @abstractmethod
    async def start(self, sink: InboundSink) -> None:
        """Connect and begin delivering messages to ``sink``. Returns once the worker is running."""

    def lease_intake(self) -> None:
        """Called before :meth:`start` for a channel that :attr:`receives_exclusively` when another
        instance may hold its intake: :meth:`start` then connects for replies only, and receiving waits
        for :meth:`start_receiving`. Without this call :meth:`start` receives as always."""
        self.intake_leased = True
        self.intake_window = IntakeWindow()

    async def start_receiving(self) -> None:  # noqa: B027 - optional hook
        """This instance now holds the channel's lease: begin taking messages (after :meth:`start`).

        Must return promptly (start a background task rather than wait for a connection)."""

    async def stop_receiving(self) -> None:  # noqa: B027 - optional hook
        """The lease is gone (lost to another instance, or not renewable): stop taking messages now,
        without touching the platform in a way that disturbs the new holder. Replies keep working."""

    async def pause(self) -> None:  # noqa: B027 - optional hook
        """Stop taking new messages but keep the ability to reply.

        Called at shutdown before the manager drains, so turns that finish during the grace period can
        still deliver their answers; :meth:`stop` follows. Default: nothing to pause.
        """

    @abstractmethod
    async def stop(self) -> None:
        """Disconnect completely (after :meth:`pause` and the drain). Must be safe to call twice."""

    # --- replies ---------------------------------------------------------------------------------
    @abstractmethod
    def reply_transport(self, message: InboundMessage) -> ReplyTransport:
        """The low-level transport that answers ``message`` in its conversation."""

    def private_transport(self, message: InboundMessage) -> ReplyTransport | None:
        """A transport whose messages only ``message``'s sender sees (Slack/Discord ephemeral), or None.

        Used for command answers about the sender (``/status``, ``/memory``). None (the default) means
        the platform has no such message here and the answer goes to the conversation as usual.
        """
        return None

    def budget_key(self, message: InboundMessage) -> str:
        """The unit the platform rate-limits by; the chat by default."""
        return f"{message.workspace}/{message.chat}"

    def shared_budgets(self, message: InboundMessage, kind: CallKind) -> Sequence[RateBudget]:
        """Budgets wider than one chat that a ``kind`` call answering ``message`` also draws on.

        For limits a platform counts across chats: a Slack workspace's ``chat.update`` bucket, a
        Telegram group's per-minute cap, a bot-wide cap. The channel keeps the budgets (one object per
        scope, so every reply in that scope shares it). Default: none, the chat's budget alone.
        """
        return ()

    def pacing(self, message: InboundMessage) -> Pacing:
        """The budgets a reply to ``message`` draws on: its chat's, plus :meth:`shared_budgets` per kind."""
        chat = self._budgets.for_chat(self.budget_key(message))
        return Pacing(chat, {kind: self.shared_budgets(message, kind) for kind in CALL_KINDS})

    def open_reply(
        self,
        message: InboundMessage,
        *,
        resume_ref: str | None = None,
        resume: ReplyState | None = None,
        on_change: StateSink | None = None,
        private: bool = False,
    ) -> ReplyStream:
        """A paced, editable reply to ``message``. ``resume_ref`` continues a message sent before a restart,
        ``resume`` every message (and live card) of a reply stored by ``on_change`` before a restart;
        ``private`` asks for a reply only the sender sees, where :meth:`private_transport` offers one."""
        transport = self.private_transport(message) if private else None
        return ReplyStream(
            transport or self.reply_transport(message),
            self.pacing(message),
            self.limits,
            resume_ref=resume_ref,
            resume=resume,
            on_change=on_change,
            provider=self.provider,
        )

    # --- per-message policy ----------------------------------------------------------------------
    def is_allowed(self, message: InboundMessage) -> bool:
        """The channel's allow-list. Applied by the manager *after* ``/connect`` had its chance."""
        return True

    def is_admin(self, message: InboundMessage) -> bool:
        """The sender is one of this channel's ``admins`` (config): may press anybody's Stop button and
        decide anybody's approval request. Default: the platform user id is in :attr:`admins`."""
        return message.sender.id in self.admins

    def is_approver(self, message: InboundMessage) -> bool:
        """The sender may decide somebody else's approval request in this same conversation (an admin may
        in any). Default: nobody beyond the admins; GitHub: the repository's collaborators."""
        return False

    def allow_listed(self, message: InboundMessage) -> bool:
        """The sender is named on this channel's own allow-list (``allowed_users``), which makes them a
        member. Default: the channel has none."""
        return False

    def handle(self) -> str | None:
        """The name people address the bot by on this platform, learnt from the platform once connected
        (Telegram: the @username getMe returned), so pages can link to the bot without configuring it.
        None when the platform has no such name or it is not known yet."""
        return None

    def system_prompt(self, message: InboundMessage) -> str | None:
        """An extra system prompt for this message's agent (e.g. a GitHub agent's); None for the default."""
        return None

    async def run_secrets(self, message: InboundMessage) -> dict[str, str]:
        """Environment for this turn's sandbox commands only (e.g. a short-lived ``GH_TOKEN``)."""
        return {}

    #: The platform has voice messages and this channel can send one (voice out, docs/voice.md).
    sends_voice = False

    async def send_voice(self, message: InboundMessage, audio: bytes) -> None:
        """Send Ogg/Opus ``audio`` as a voice message where ``message`` is answered."""
        raise NotImplementedError(f"{self.provider} does not send voice messages")

    # --- files -----------------------------------------------------------------------------------
    async def download(self, file: InboundFile, max_bytes: int) -> bytes:
        """Fetch an inbound file's bytes, refusing anything over ``max_bytes`` (FileTooLarge)."""
        if file.size is not None and file.size > max_bytes:
            raise FileTooLarge(file.name, file.size, max_bytes)
        data = await self._download(file, max_bytes)
        if len(data) > max_bytes:
            raise FileTooLarge(file.name, len(data), max_bytes)
        return data

    async def _download(self, file: InboundFile, max_bytes: int) -> bytes:
        raise NotImplementedError(f"{self.provider} does not support inbound files")

    # --- health ----------------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        receiving, why_not = self.receiving()
        intake = "receiving" if receiving else f"not receiving ({why_not})"
        return {"state": self.status.state, "detail": self.status.detail, "intake": intake}

    def receiving(self) -> tuple[bool, str]:
        """Whether messages from the platform reach the service through this instance right now, and if
        not, why (``/health``'s ``intake``, the ``switchboard_component_up`` metric).

        Default: while connected, and (under a lease) while the lease window is open. Channels with a
        finer view (Telegram's polls, Discord's gateway session) override it."""
        window = self.intake_window
        if window is not None and not window.open:
            return False, window.why_shut()
        if self.status.state != "connected":
            detail = self.status.detail
            return False, f"{self.status.state}: {detail}" if detail else self.status.state
        return True, ""
