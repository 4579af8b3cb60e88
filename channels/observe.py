"""Counting outbound platform calls without the channels knowing who counts.

:class:`channels.reply.ReplyStream` wraps its transport in :class:`ObservedTransport`; every send, edit
and file upload is reported as a ``call``, and every :class:`~channels.errors.RetryAfter` (HTTP 429 or
the platform's own rate-limit answer) as ``rate_limited``. The bot installs the listener (its metrics);
channels import nothing from the bot, so the listener is a plain callable set at start-up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from channels.errors import RetryAfter

CALL = "call"
RATE_LIMITED = "rate_limited"

Listener = Callable[[str, str], None]
_listener: Listener | None = None


def set_listener(listener: Listener | None) -> None:
    """Install the function called with ``(provider, event)`` for each outbound call."""
    global _listener
    _listener = listener


def provider_of(transport: object) -> str:
    """The platform a transport talks to, read from its module (``channels.telegram_transport`` → telegram)."""
    module = type(transport).__module__
    if module.startswith("webhooks"):
        return "github"
    return module.rsplit(".", 1)[-1].split("_", 1)[0]


def _emit(provider: str, event: str) -> None:
    if _listener is not None:
        _listener(provider, event)


class ObservedTransport:
    """A transport proxy that reports calls and rate limits; everything else passes straight through."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._provider = provider_of(inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        _emit(self._provider, CALL)
        try:
            return await getattr(self._inner, method)(*args, **kwargs)
        except RetryAfter:
            _emit(self._provider, RATE_LIMITED)
            raise

    async def send(self, text: str, *, fallback: bool = False) -> str:
        return await self._call("send", text, fallback=fallback)  # type: ignore[no-any-return]

    async def edit(self, ref: str, text: str) -> None:
        await self._call("edit", ref, text)

    async def send_files(self, files: Sequence[Path]) -> None:
        await self._call("send_files", files)
