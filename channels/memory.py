"""An in-memory channel: the platform is a Python object you can talk to.

It is a real :class:`Channel` (same reply pacing, splitting and inbox path as every platform), used by
the test suite, the benchmark, and anyone embedding Switchboard. Every visible message keeps its edit
history, so a test can assert what a user saw and in what order. Failures can be injected per call.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from channels.base import Channel, InboundSink
from channels.errors import ChannelError
from channels.reply import ReplyTransport
from channels.types import Action, InboundFile, InboundMessage, ReplyLimits, Sender
from config.base import TrustSection


@dataclass(slots=True)
class VisibleMessage:
    """One message as the user sees it, with every version it went through."""

    ref: str
    chat: str
    topic: str | None
    history: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    #: The buttons the message shows now (an edit replaces them, like on every platform).
    actions: tuple[Action, ...] = ()
    workspace: str = ""
    private: bool = True

    @property
    def text(self) -> str:
        return self.history[-1] if self.history else ""


class MemoryTransport(ReplyTransport):
    supports_actions = True

    def __init__(self, channel: MemoryChannel, message: InboundMessage) -> None:
        self.channel = channel
        self.message = message

    async def send(self, text: str, *, fallback: bool = False, actions: Sequence[Action] = ()) -> str:
        self.channel._maybe_fail("send")
        ref = f"m{next(self.channel._ids)}"
        m = self.message
        visible = VisibleMessage(
            ref, m.chat, m.topic, [text], actions=tuple(actions), workspace=m.workspace, private=m.is_private
        )
        self.channel.messages[ref] = visible
        self.channel.calls.append(("send", ref, text))
        self.channel._changed()
        return ref

    async def edit(self, ref: str, text: str, *, actions: Sequence[Action] = ()) -> None:
        self.channel._maybe_fail("edit")
        visible = self.channel.messages[ref]
        visible.history.append(text)
        visible.actions = tuple(actions)
        self.channel.calls.append(("edit", ref, text))
        self.channel._changed()

    async def send_files(self, files: Sequence[Path]) -> None:
        self.channel._maybe_fail("send_files")
        ref = f"m{next(self.channel._ids)}"
        visible = VisibleMessage(ref, self.message.chat, self.message.topic, [""], [p.name for p in files])
        self.channel.messages[ref] = visible
        self.channel.sent_files.extend(files)
        self.channel.calls.append(("send_files", ref, ", ".join(p.name for p in files)))
        self.channel._changed()

    async def finished(self) -> None:
        """The reply is complete (its final text and files are out): what a user waits for."""
        self.channel.finished.append(self.message.platform_message_id)
        self.channel._changed()


class MemoryChannel(Channel):
    provider = "memory"
    limits = ReplyLimits(text_limit=4000, min_edit_interval=0.0)

    def __init__(
        self,
        provider: str = "memory",
        *,
        limits: ReplyLimits | None = None,
        allowed_users: Sequence[str] = (),
        admins: Sequence[str] = (),
        trust: TrustSection | None = None,
        approvers: Literal["requester", "admins"] | None = None,
        handle: str | None = None,
    ) -> None:
        self.provider = provider  # type: ignore[misc]
        self._handle = handle
        if limits is not None:
            self.limits = limits  # type: ignore[misc]
        super().__init__()
        self.allowed_users = set(allowed_users)
        self.admins = frozenset(admins)
        if trust is not None:  # default (the base's): everyone who talks to it is a member
            self.trust = trust
        self.approvers = approvers
        self.messages: dict[str, VisibleMessage] = {}
        self.calls: list[tuple[str, str, str]] = []
        self.sent_files: list[Path] = []
        #: Platform ids of the inbound messages whose reply has finished, in order.
        self.finished: list[str] = []
        self.file_store: dict[str, bytes] = {}
        self._failures: dict[str, list[BaseException]] = {}
        self._ids = itertools.count(1)
        self._msg_ids = itertools.count(1)
        self._change = asyncio.Condition()
        self._watchers = 0

    def handle(self) -> str | None:
        return self._handle

    async def start(self, sink: InboundSink) -> None:
        self._sink = sink
        self.status.set("connected")

    async def stop(self) -> None:
        self.status.set("stopped")

    def reply_transport(self, message: InboundMessage) -> ReplyTransport:
        return MemoryTransport(self, message)

    def is_allowed(self, message: InboundMessage) -> bool:
        return not self.allowed_users or message.sender.id in self.allowed_users

    def allow_listed(self, message: InboundMessage) -> bool:
        return message.sender.id in self.allowed_users

    async def _download(self, file: InboundFile, max_bytes: int) -> bytes:
        try:
            return self.file_store[file.ref]
        except KeyError:
            raise ChannelError(f"no such file {file.ref}") from None

    # --- driving it from a test -------------------------------------------------------------------
    def make_message(
        self,
        text: str,
        *,
        chat: str = "chat-1",
        sender: str = "user-1",
        sender_name: str | None = None,
        workspace: str = "",
        topic: str | None = None,
        message_id: str | None = None,
        private: bool = True,
        mentioned: bool = False,
        files: Sequence[tuple[str, bytes]] = (),
    ) -> InboundMessage:
        inbound_files = []
        for name, data in files:
            ref = f"f{next(self._ids)}"
            self.file_store[ref] = data
            inbound_files.append(InboundFile(name=name, ref=ref, size=len(data)))
        return InboundMessage(
            provider=self.provider,
            workspace=workspace,
            chat=chat,
            topic=topic,
            sender=Sender(id=sender, name=sender_name or sender),
            text=text,
            platform_message_id=message_id or f"in-{next(self._msg_ids)}",
            mentioned=mentioned,
            is_private=private,
            files=inbound_files,
        )

    async def say(self, text: str, **kwargs) -> InboundMessage:  # type: ignore[no-untyped-def]
        """Deliver a user message to the service, as the platform would. Returns what was sent."""
        if self._sink is None:
            raise RuntimeError("channel not started")
        message = self.make_message(text, **kwargs)
        await self._sink(message)
        return message

    def press_message(
        self, ref: str, label: str, *, sender: str = "user-1", sender_name: str | None = None
    ) -> InboundMessage:
        """The inbound event of ``sender`` pressing the button ``label`` on message ``ref``.

        Refuses a button the message does not show (a user cannot press what is gone). Each call is a
        new press with its own id; deliver the same object twice to model a platform redelivering it.
        """
        visible = self.messages[ref]
        action = next((a for a in visible.actions if a.label == label), None)
        if action is None:
            shown = ", ".join(a.label for a in visible.actions) or "none"
            raise LookupError(f"message {ref} shows no button {label!r} (it shows: {shown})")
        return InboundMessage(
            provider=self.provider,
            workspace=visible.workspace,
            chat=visible.chat,
            topic=visible.topic,
            sender=Sender(id=sender, name=sender_name or sender),
            text=action.command,
            platform_message_id=f"press-{next(self._msg_ids)}",
            is_private=visible.private,
            pressed=ref,
        )

    async def press(self, ref: str, label: str, **kwargs) -> InboundMessage:  # type: ignore[no-untyped-def]
        """Press a button, as the platform would report it. Returns the press delivered."""
        message = self.press_message(ref, label, **kwargs)
        await self.deliver(message)
        return message

    async def deliver(self, message: InboundMessage) -> bool:
        """Deliver an exact message (e.g. a redelivery of an earlier one)."""
        if self._sink is None:
            raise RuntimeError("channel not started")
        return await self._sink(message)

    def fail_next(self, operation: str, error: BaseException, times: int = 1) -> None:
        """Make the next ``times`` calls of ``operation`` (send/edit/send_files) raise ``error``."""
        self._failures.setdefault(operation, []).extend([error] * times)

    def recover(self) -> None:
        """The platform is healthy again: drop every failure still queued by :meth:`fail_next`."""
        self._failures.clear()

    def _maybe_fail(self, operation: str) -> None:
        queue = self._failures.get(operation)
        if queue:
            raise queue.pop(0)

    def _changed(self) -> None:
        if not self._watchers:
            return

        async def notify() -> None:
            async with self._change:
                self._change.notify_all()

        asyncio.get_running_loop().create_task(notify())

    def in_chat(self, chat: str = "chat-1", topic: str | None = None) -> list[VisibleMessage]:
        return [m for m in self.messages.values() if m.chat == chat and (topic is None or m.topic == topic)]

    async def wait_for(self, predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]  # noqa: ASYNC109
        """Wait until ``predicate(self)`` is true (checked after every visible change)."""

        async def waiter() -> None:
            async with self._change:
                await self._change.wait_for(lambda: predicate(self))

        self._watchers += 1
        try:
            await asyncio.wait_for(waiter(), timeout)
        finally:
            self._watchers -= 1

    async def wait_for_text(
        self,
        needle: str,
        chat: str = "chat-1",
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> VisibleMessage:
        await self.wait_for(lambda ch: any(needle in m.text for m in ch.in_chat(chat)), timeout)
        return next(m for m in self.in_chat(chat) if needle in m.text)
