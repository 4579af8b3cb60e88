"""Counting outbound platform calls without the channels knowing who counts.

:class:`channels.reply.ReplyStream` wraps its transport in an observing one; every send, edit
and file upload is reported as a ``call``, and every :class:`~channels.errors.RetryAfter` (HTTP 429 or
the platform's own rate-limit answer) as ``rate_limited``. The bot installs the listener (its metrics);
channels import nothing from the bot, so the listener is a plain callable set at start-up.
"""

from __future__ import annotations

from collections.abc import Callable

CALL = "call"
RATE_LIMITED = "rate_limited"

Listener = Callable[[str, str], None]
_listener: Listener | None = None


def set_listener(listener: Listener | None) -> None:
    """Install the function called with ``(provider, event)`` for each outbound call."""
    global _listener
    _listener = listener


def emit(provider: str, event: str) -> None:
    """Report one outbound ``event`` (:data:`CALL` or :data:`RATE_LIMITED`) for ``provider``."""
    if _listener is not None:
        _listener(provider, event)
