"""What a channel implements for a live reply: send, edit, send files, and optionally a native stream.

Kept apart from the reply machinery (:mod:`channels.reply`) so a platform package depends only on this
small interface; :class:`ObservedTransport` wraps any transport with the per-call metrics and logs.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import TypeVar

from channels import observe
from channels.errors import RetryAfter
from channels.types import Action

log = logging.getLogger(__name__)
T = TypeVar("T")


class ReplyTransport(ABC):
    """The platform half of a reply: the few calls a channel must implement.

    ``send`` returns an opaque reference to the created message; ``edit`` replaces its whole text *and*
    its buttons (an edit without ``actions`` removes any the message had). Both raise
    :mod:`channels.errors` types. ``fallback=True`` asks for the plainest form the platform has (e.g. a
    text message instead of a card) after an edit failed. A transport whose platform has no buttons
    leaves ``supports_actions`` False and ignores ``actions``.
    """

    #: Whether ``actions`` become buttons on this platform (False: they are ignored, commands are typed).
    supports_actions: bool = False

    @abstractmethod
    async def send(self, text: str, *, fallback: bool = False, actions: Sequence[Action] = ()) -> str: ...

    @abstractmethod
    async def edit(self, ref: str, text: str, *, actions: Sequence[Action] = ()) -> None: ...

    async def send_files(self, files: Sequence[Path]) -> None:
        """Deliver files produced by the agent. Channels without file support say so in text."""
        if files:
            names = ", ".join(p.name for p in files)
            await self.send(f"(files could not be attached on this platform: {names})")

    #: Seconds a typing indicator stays visible on this platform, minus a margin; None = no indicator.
    #: The stream re-sends :meth:`typing` after this long without a visible change.
    typing_interval: float | None = None

    async def typing(self) -> None:  # noqa: B027 - optional hook
        """Show a typing indicator where the platform has one."""

    def native_stream(self, actions: Sequence[Action] = ()) -> NativeStream | None:
        """The platform's own streaming primitive for this reply, or None for placeholder-and-edit.

        ``actions`` are the reply's live actions: a platform whose live message cannot show them returns
        None here when it has buttons elsewhere, so the Stop button is not lost to a nicer preview.
        """
        return None

    async def finished(self) -> None:  # noqa: B027 - optional hook
        """Called once after the final text and files were delivered (e.g. to clear a typing state)."""

    def resume_state(self) -> str:
        """What this transport needs, beyond the messages' refs, to continue its reply after a restart
        (a card id and its reserved sequence numbers, cards' flow status); "" for nothing.

        Read after each call; when it changed, the reply stores it (channels/resume.py) before showing
        more. Keep it small and let it change rarely: each change is one database write.
        """
        return ""

    def restore(self, state: str) -> None:  # noqa: B027 - optional hook
        """Take back a :meth:`resume_state` stored before a restart; called before any other call."""


class NativeStream(ABC):
    """A platform's own "message being written" primitive for one live message of a reply.

    The stream calls :meth:`begin` once instead of sending a placeholder, :meth:`show` with the whole text
    so far (one chunk at most; an implementation that appends sends only what is new), and :meth:`close`
    once with the first chunk of the final text. A native that ``rolls_over`` is one instance per chunk:
    each is closed with its full chunk once the text outgrows it, and the transport's
    ``native_stream`` gives the next one. Every call is paced by the chat's budget. A
    :class:`~channels.errors.ChannelError` from ``begin``/``show`` makes the stream fall back to the
    edit path for the rest of the reply; from ``close`` it delivers the final text as new messages.
    """

    #: False where the live message is only a preview that the next ordinary message replaces (then
    #: :meth:`close` is never called and the final text is sent as ordinary messages).
    closes_in_place: bool = True
    #: Seconds after which a live message that did not change must be shown again to stay visible
    #: (e.g. a Telegram draft lapses after about 30 s); None = it stays until closed.
    keepalive: float | None = None
    #: True where each chunk of a long reply may be a live message of its own: once the text outgrows
    #: the live message, it is closed with its full chunk and a new one (with the live buttons) begins,
    #: so the newest part streams and carries Stop. False: the live message shows the newest chunk.
    #: Only for natives that close in place and return the persisted message's reference.
    rolls_over: bool = False
    #: True for a stream continuing the live message a restart left open (the transport restored it):
    #: :meth:`begin` is not called; :meth:`show` and :meth:`close` go to that message.
    resumed: bool = False

    @abstractmethod
    async def begin(self, placeholder: str) -> str | None:
        """Open the live message; returns its reference when the platform created a real message."""

    @abstractmethod
    async def show(self, text: str) -> None: ...

    @abstractmethod
    async def close(self, text: str) -> str | None:
        """End the live message showing ``text``; returns the reference of the persisted message, or None
        when the platform persists nothing (then ``text`` goes out as an ordinary message)."""


async def _counted(provider: str, call: Awaitable[T]) -> T:
    """Report one platform call (and a rate limit on it) for ``provider``."""
    observe.emit(provider, observe.CALL)
    try:
        return await call
    except RetryAfter:
        observe.emit(provider, observe.RATE_LIMITED)
        raise


class _ObservedNative(NativeStream):
    def __init__(self, inner: NativeStream, provider: str) -> None:
        self.inner = inner
        self.provider = provider
        self.closes_in_place = inner.closes_in_place
        self.keepalive = inner.keepalive
        self.rolls_over = inner.rolls_over
        self.resumed = inner.resumed

    async def begin(self, placeholder: str) -> str | None:
        return await _counted(self.provider, self.inner.begin(placeholder))

    async def show(self, text: str) -> None:
        await _counted(self.provider, self.inner.show(text))

    async def close(self, text: str) -> str | None:
        return await _counted(self.provider, self.inner.close(text))


class ObservedTransport(ReplyTransport):
    """Reports each call (and each rate limit) of ``inner`` for ``provider``, then delegates."""

    def __init__(self, inner: ReplyTransport, provider: str) -> None:
        self.inner = inner
        self.provider = provider
        self.typing_interval = inner.typing_interval
        self.supports_actions = inner.supports_actions

    async def _counted(self, call: Awaitable[T]) -> T:
        return await _counted(self.provider, call)

    async def send(self, text: str, *, fallback: bool = False, actions: Sequence[Action] = ()) -> str:
        return await self._counted(self.inner.send(text, fallback=fallback, actions=actions))

    async def edit(self, ref: str, text: str, *, actions: Sequence[Action] = ()) -> None:
        await self._counted(self.inner.edit(ref, text, actions=actions))

    async def send_files(self, files: Sequence[Path]) -> None:
        await self._counted(self.inner.send_files(files))

    async def typing(self) -> None:
        await self._counted(self.inner.typing())

    def native_stream(self, actions: Sequence[Action] = ()) -> NativeStream | None:
        native = self.inner.native_stream(actions)
        return None if native is None else _ObservedNative(native, self.provider)

    async def finished(self) -> None:
        await self.inner.finished()

    def resume_state(self) -> str:
        return self.inner.resume_state()

    def restore(self, state: str) -> None:
        self.inner.restore(state)
