"""How long this instance may still receive on a platform that allows one receiver (the lease window).

Why: with several instances on one database, Telegram long polling and the Discord gateway are held
through a cluster lease (bot/leases.py). The lease is valid until a moment the database decides; after
it, another instance may take it and start receiving. The channel must stop *at* that moment, not when
the keeper next manages to tell it — a keeper waiting on a slow database may notice late. So the keeper
hands the channel the lease's validity (a ``time.monotonic()`` deadline, measured from the start of the
renewal that set it, hence never later than the database's own expiry), and the channel checks it
before each receive: Telegram bounds each long poll by it, Discord stops handing messages over.

The keeper also says why the window is shut (``standby: lease held by instance b``), for ``/health``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time


class IntakeWindow:
    """The lease's validity as the receiving channel sees it. Single event loop; no locking."""

    def __init__(self, margin: float = 0.0) -> None:
        #: Kept free before the deadline: a receive that ends later than ``until - margin`` is not begun
        #: (request latency, the new holder's first poll arriving early).
        self.margin = margin
        self.until = 0.0
        #: Why messages are not taken here while the window is shut (``/health``).
        self.reason = "waiting for the lease"
        self._changed = asyncio.Event()

    def grant(self, until: float) -> None:
        """The lease is this instance's until ``until`` (monotonic)."""
        self.until = until
        self._changed.set()

    def revoke(self, reason: str) -> None:
        """The lease is not (or no longer surely) this instance's."""
        self.until = 0.0
        self.reason = reason
        self._changed.set()

    def left(self) -> float:
        """Seconds a receive begun now may last (the margin taken off); <= 0 when shut."""
        return self.until - self.margin - time.monotonic()

    @property
    def open(self) -> bool:
        return self.left() > 0

    def why_shut(self) -> str:
        """The sentence for ``/health`` when :attr:`open` is False."""
        if self.until and time.monotonic() >= self.until - self.margin:
            return "lease not renewed in time, retrying"
        return self.reason

    async def changed(self, within: float | None) -> None:
        """Wait until :meth:`grant` or :meth:`revoke` is called, or ``within`` seconds pass."""
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), within)
