"""Platform connections that must exist once in the cluster, held through a lease (docs/scale-out.md).

Why: Telegram lets one ``getUpdates`` run per bot token (a second one gets 409 Conflict), and every
Discord gateway session receives every message, so two instances each holding one would fight or answer
twice. With several instances on one PostgreSQL database, each channel that
:attr:`~channels.base.Channel.receives_exclusively` is started on every instance for *replies* (any
instance may run any claimed turn, and must be able to answer on that platform), but *receives* only on
the instance holding the lease ``channel:<provider>``:

- every third of ``cluster.lease_ttl_seconds`` the holder renews (keyed by its fencing token); a renewal
  that finds the token moved, or that cannot reach the database before the lease would lapse, stops
  receiving at once (:meth:`~channels.base.Channel.stop_receiving`);
- the others try to acquire it when it would lapse (PostgreSQL's clock says when), so after a holder
  dies another instance receives within the TTL;
- a graceful stop releases the lease after the channel paused and says so (``NOTIFY
  switchboard_lease``), so the next instance takes it at once instead of at its next look.

The keeper speaks only the channel contract's neutral hooks; it never asks which platform it drives.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from bot.cluster import Lease
from bot.db import Database
from channels.base import Channel

log = logging.getLogger(__name__)

#: A standby tries this long after the holder's lease would lapse (clock rounding, commit latency).
LAPSE_MARGIN_SECONDS = 0.05


class _Held:
    """One channel under a lease: its lease row, whether it receives here, the last good renewal."""

    def __init__(self, provider: str, channel: Channel, lease: Lease) -> None:
        self.provider = provider
        self.channel = channel
        self.lease = lease
        self.receiving = False
        self.renewed_at = 0.0  # time.monotonic() when the last successful renewal started


class LeaseKeeper:
    """Acquires, renews and releases ``channel:<provider>`` leases; starts and stops receiving."""

    def __init__(self, db: Database, holder: str, ttl: float) -> None:
        self.db = db
        self.holder = holder
        self.ttl = ttl
        self.period = ttl / 3
        self._held: dict[str, _Held] = {}
        self._task: asyncio.Task[None] | None = None
        self._halted = False
        self._wake = asyncio.Event()

    def govern(self, channels: dict[str, Channel]) -> None:
        """Before the channels start: those that receive exclusively wait for their lease to receive."""
        for provider, channel in channels.items():
            if channel.receives_exclusively:
                channel.lease_intake()
                lease = Lease(self.db, f"channel:{provider}", self.holder, self.ttl)
                self._held[provider] = _Held(provider, channel, lease)

    async def start(self, started: set[str]) -> None:
        """After the channels started: one pass at once (the first instance up receives right away),
        then the loop. Channels that failed to start are left alone: holding their lease here would
        keep the platform from an instance where they work."""
        for provider in [p for p in self._held if p not in started]:
            del self._held[provider]
        if not self._held:
            return
        await self._pass()
        self._task = asyncio.create_task(self._loop(), name="cluster-leases")

    def halt(self) -> None:
        """At shutdown, before the channels pause: no more starting or stopping of receiving."""
        self._halted = True
        if self._task is not None:
            self._task.cancel()

    async def stop(self) -> None:
        """After the channels paused (and confirmed what they stored): free the leases for the others."""
        self.halt()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        for held in self._held.values():
            if held.lease.token is None:
                continue
            try:
                await held.lease.release()
                log.info("cluster: released lease %s (another instance may take it now)", held.lease.name)
            except Exception as exc:  # it lapses by itself after the TTL
                log.warning("cluster: releasing lease %s failed: %s", held.lease.name, exc)
            held.receiving = False

    def held(self) -> list[dict[str, Any]]:
        """For /health: the leases this instance holds, with their fencing tokens."""
        return [
            {"name": h.lease.name, "token": h.lease.token}
            for h in self._held.values()
            if h.lease.token is not None
        ]

    def wake(self, name: str) -> None:
        """Another instance released lease ``name``: look now rather than at the next period."""
        if any(h.lease.name == name and h.lease.token is None for h in self._held.values()):
            self._wake.set()

    # --- the loop ------------------------------------------------------------------------------------
    async def _loop(self) -> None:
        while not self._halted:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._next_wait())
            self._wake.clear()
            await self._pass()

    def _next_wait(self) -> float:
        """Holders renew every third of the TTL; a standby looks again when the holder's lease lapses."""
        waits = [self.period]
        for held in self._held.values():
            if held.lease.token is None:
                waits.append(held.lease.lapses_in + LAPSE_MARGIN_SECONDS)
        return max(min(waits), LAPSE_MARGIN_SECONDS)

    async def _pass(self) -> None:
        for held in self._held.values():
            if self._halted:
                return
            try:
                await (self._renew(held) if held.lease.token is not None else self._acquire(held))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("cluster: keeping lease %s failed", held.lease.name)

    async def _acquire(self, held: _Held) -> None:
        started = time.monotonic()
        try:
            got = await asyncio.wait_for(held.lease.acquire(), self.period)
        except Exception as exc:  # PostgreSQL away or stuck: try again next period
            log.warning("cluster: acquiring lease %s failed: %s", held.lease.name, _why(exc))
            held.lease.lapses_in = self.period
            return
        if not got or self._halted:
            return
        held.renewed_at = started
        if not held.receiving:
            held.receiving = True
            log.info(
                "cluster: lease %s acquired (token %s): %s receives here now",
                held.lease.name,
                held.lease.token,
                held.provider,
            )
            await held.channel.start_receiving()

    async def _renew(self, held: _Held) -> None:
        started = time.monotonic()
        try:
            # Bounded: a renewal stuck on an unreachable or locked database must not keep this
            # instance receiving past the lease's end.
            kept = await asyncio.wait_for(held.lease.renew(), self.period)
        except Exception as exc:
            # Unknown: the lease may still be ours. Keep receiving only while it surely is, i.e. until
            # the next attempt would come after the last good renewal's lease lapsed.
            if started + self.period < held.renewed_at + self.ttl:
                log.warning("cluster: renewing lease %s failed (retrying): %s", held.lease.name, _why(exc))
                return
            log.warning(
                "cluster: lease %s could not be renewed in time (%s): stop receiving %s here",
                held.lease.name,
                _why(exc),
                held.provider,
            )
            held.lease.token = None
            await self._stop_receiving(held)
            return
        if kept:
            held.renewed_at = started
            return
        log.warning(
            "cluster: lease %s lost (another instance holds it now): stop receiving %s here",
            held.lease.name,
            held.provider,
        )
        await self._stop_receiving(held)

    async def _stop_receiving(self, held: _Held) -> None:
        if held.receiving:
            held.receiving = False
            await held.channel.stop_receiving()


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__  # a timeout has no message
