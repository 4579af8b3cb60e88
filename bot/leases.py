"""Platform connections that must exist once in the cluster, held through a lease (docs/scale-out.md).

Why: Telegram lets one ``getUpdates`` run per bot token (a second one gets 409 Conflict), and every
Discord gateway session receives every message, so two instances each holding one would fight or answer
twice. With several instances on one PostgreSQL database, each channel that
:attr:`~channels.base.Channel.receives_exclusively` is started on every instance for *replies* (any
instance may run any claimed turn, and must be able to answer on that platform), but *receives* only on
the instance holding the lease ``channel:<provider>``.

Each lease has its own loop here, and nothing ends it but shutdown:

- the holder renews every third of ``cluster.lease_ttl_seconds`` (keyed by its fencing token). Each
  good renewal moves the channel's :class:`~channels.intake.IntakeWindow` to that renewal's start plus
  the TTL — never later than the database's own expiry — and the channel never receives past it
  (Telegram bounds each long poll by it). So a holder whose renewals fail or hang stops receiving at
  its lease's end by itself, however late this loop hears back from the database;
- a renewal that fails is retried at once with a short back-off (0.2 s doubling, at most a third of
  the TTL); once the window has passed, the loop stops the channel's receiving and contends for the
  lease again, with the same back-off, until it holds it or sees another instance holding it. A renewal
  that finds its token moved (another instance took over) stops receiving at once and does the same;
- a standby tries when the holder's lease would lapse (PostgreSQL's clock says when), so after a holder
  dies another instance receives within the TTL;
- every database call is bounded by a third of the TTL without waiting for its cancellation to finish
  (a cancelled query on a stuck connection can take longer to give up than the query was allowed);
- a graceful stop releases the lease after the channel paused and says so (``NOTIFY
  switchboard_lease``), so the next instance takes it at once instead of at its next look.

The keeper speaks only the channel contract's neutral hooks; it never asks which platform it drives.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from bot.bounded import NoAnswer, within
from bot.cluster import Lease
from bot.db import Database
from channels.base import Channel
from channels.intake import IntakeWindow

log = logging.getLogger(__name__)

T = TypeVar("T")

#: A standby tries this long after the holder's lease would lapse (clock rounding, commit latency).
LAPSE_MARGIN_SECONDS = 0.05
#: After a failed renewal or acquisition: the first retry, doubling up to a third of the TTL.
RETRY_FIRST_SECONDS = 0.2
#: The window ends this share of the TTL (at most WINDOW_MARGIN_MAX seconds) before the lease does:
#: room for a long poll's request to reach the platform and for the next holder's first one.
WINDOW_MARGIN_SHARE = 0.2
WINDOW_MARGIN_MAX = 2.0
#: A channel's start/stop hook is waited for this long; one that takes longer runs on, logged.
HOOK_WAIT_SECONDS = 5.0


class _Held:
    """One channel under a lease: its lease row, its window, whether it receives here."""

    def __init__(self, provider: str, channel: Channel, lease: Lease, window: IntakeWindow) -> None:
        self.provider = provider
        self.channel = channel
        self.lease = lease
        self.window = window
        self.receiving = False
        self.failures = 0  # database calls failed in a row (the back-off)
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        #: The last database call, left running when it did not answer in time: the next one waits for
        #: it first instead of queueing a second call behind a stuck connection.
        self.query: asyncio.Task[Any] | None = None


class LeaseKeeper:
    """Acquires, renews and releases ``channel:<provider>`` leases; starts and stops receiving."""

    def __init__(self, db: Database, holder: str, ttl: float) -> None:
        self.db = db
        self.holder = holder
        self.ttl = ttl
        self.period = ttl / 3
        self._held: dict[str, _Held] = {}
        self._halted = False

    def govern(self, channels: dict[str, Channel]) -> None:
        """Before the channels start: those that receive exclusively wait for their lease to receive."""
        for provider, channel in channels.items():
            if channel.receives_exclusively:
                channel.lease_intake()
                window = channel.intake_window
                assert window is not None
                window.margin = min(self.ttl * WINDOW_MARGIN_SHARE, WINDOW_MARGIN_MAX)
                lease = Lease(self.db, f"channel:{provider}", self.holder, self.ttl)
                self._held[provider] = _Held(provider, channel, lease, window)

    async def start(self, started: set[str]) -> None:
        """After the channels started: one attempt each at once (the first instance up receives right
        away), then each lease's loop. Channels that failed to start are left alone: holding their lease
        here would keep the platform from an instance where they work."""
        for provider in [p for p in self._held if p not in started]:
            del self._held[provider]
        for held in self._held.values():
            first_wait = await self._step(held)
            held.task = asyncio.create_task(self._keep(held, first_wait), name=f"lease-{held.provider}")

    def halt(self) -> None:
        """At shutdown, before the channels pause: no more starting or stopping of receiving."""
        self._halted = True
        for held in self._held.values():
            if held.task is not None:
                held.task.cancel()

    async def stop(self) -> None:
        """After the channels paused (and confirmed what they stored): free the leases for the others."""
        self.halt()
        for held in self._held.values():
            if held.task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await held.task
                held.task = None
            held.window.revoke("stopping")
            held.receiving = False
            token = held.lease.token
            if token is None:
                continue
            try:
                await self._query(held, held.lease.release)
                log.info("cluster: released lease %s (another instance may take it now)", held.lease.name)
            except Exception as exc:  # it lapses by itself after the TTL
                log.warning("cluster: releasing lease %s failed: %s", held.lease.name, _why(exc))

    def held(self) -> list[dict[str, Any]]:
        """For /health: the leases this instance holds, with their fencing tokens."""
        return [
            {"name": h.lease.name, "token": h.lease.token}
            for h in self._held.values()
            if h.lease.token is not None
        ]

    def wake(self, name: str) -> None:
        """Another instance released lease ``name``: look now rather than at the next period."""
        for held in self._held.values():
            if held.lease.name == name and held.lease.token is None:
                held.wake.set()

    # --- one lease's loop ----------------------------------------------------------------------------
    async def _keep(self, held: _Held, wait: float) -> None:
        while not self._halted:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(held.wake.wait(), min(max(wait, 0.0), self.period))
            held.wake.clear()
            wait = await self._step(held)

    async def _step(self, held: _Held) -> float:
        """Renew or acquire once; the seconds until the next attempt. Raises only at shutdown."""
        try:
            return await (self._renew(held) if held.lease.token is not None else self._acquire(held))
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._halted or (task is not None and task.cancelling()):
                raise
            log.warning("cluster: keeping lease %s was interrupted; trying again", held.lease.name)
        except Exception:
            log.exception("cluster: keeping lease %s failed; trying again", held.lease.name)
        return self._backoff(held)

    async def _renew(self, held: _Held) -> float:
        token = held.lease.token
        assert token is not None
        started = time.monotonic()
        try:
            # Bounded by the window too: when it ends, this loop stops the channel's receiving then,
            # not a whole query timeout later (a Discord session would overlap the next holder's).
            kept = await self._query(held, lambda: held.lease.extend(token), held.window.left())
        except Exception as exc:
            wait = self._backoff(held)
            if held.window.open:  # still surely ours: the channel keeps receiving until the window ends
                log.warning(
                    "cluster: renewing lease %s failed (%s); retrying in %.1f s",
                    held.lease.name,
                    _why(exc),
                    wait,
                )
                return min(wait, max(held.window.left(), 0.0))
            log.warning(
                "cluster: lease %s could not be renewed in time (%s): stop receiving %s here; "
                "contending for it again",
                held.lease.name,
                _why(exc),
                held.provider,
            )
            held.lease.token = None
            await self._stop_receiving(held, f"lease lost, retrying: renewal failed ({_why(exc)})")
            return 0.0
        if self._halted:
            return 0.0
        if kept:
            held.failures = 0
            held.window.grant(started + self.ttl)
            return started + self.period - time.monotonic()
        log.warning(
            "cluster: lease %s lost (another instance holds it now): stop receiving %s here",
            held.lease.name,
            held.provider,
        )
        held.lease.token = None
        await self._stop_receiving(held, "lease lost: another instance took it over")
        return 0.0  # look at once: who holds it, and when it lapses

    async def _acquire(self, held: _Held) -> float:
        started = time.monotonic()
        try:
            offer = await self._query(held, held.lease.try_acquire)
        except Exception as exc:  # PostgreSQL away or stuck: try again soon
            wait = self._backoff(held)
            held.window.revoke(f"lease not held: the database did not answer ({_why(exc)}); retrying")
            log.warning(
                "cluster: acquiring lease %s failed (%s); retrying in %.1f s",
                held.lease.name,
                _why(exc),
                wait,
            )
            return wait
        held.failures = 0
        if offer.token is None:
            held.window.revoke(f"standby: lease held by instance {offer.holder}")
            return offer.lapses_in + LAPSE_MARGIN_SECONDS
        if offer.token != held.lease.token:
            log.info("cluster: lease %s now held by %s (token %d)", held.lease.name, self.holder, offer.token)
        held.lease.token = offer.token  # recorded even while stopping: stop() then releases it
        if self._halted:
            return 0.0
        held.window.grant(started + self.ttl)
        if not held.receiving:
            held.receiving = True
            log.info(
                "cluster: lease %s acquired (token %s): %s receives here now",
                held.lease.name,
                offer.token,
                held.provider,
            )
            await self._hook(held, held.channel.start_receiving, "start receiving")
        return started + self.period - time.monotonic()

    async def _stop_receiving(self, held: _Held, reason: str) -> None:
        held.window.revoke(reason)
        if held.receiving:
            held.receiving = False
            await self._hook(held, held.channel.stop_receiving, "stop receiving")

    def _backoff(self, held: _Held) -> float:
        held.failures += 1
        return min(RETRY_FIRST_SECONDS * 2 ** (held.failures - 1), self.period)

    async def _query(self, held: _Held, call: Callable[[], Awaitable[T]], limit: float | None = None) -> T:
        """``call()`` against the database, bounded by a third of the TTL (and ``limit``), not waiting
        for a cancelled call to finish (:mod:`bot.bounded`). The next call waits for a left-over one
        first (within the same bound) rather than queueing behind it on another connection."""
        seconds = self.period if limit is None else min(self.period, limit)
        deadline = time.monotonic() + seconds
        leftover = held.query
        if leftover is not None and not leftover.done():
            await asyncio.wait({leftover}, timeout=max(seconds, 0.0))
            if not leftover.done():
                raise NoAnswer("the previous lease query is still waiting for the database")
        if seconds <= 0:
            raise NoAnswer("no time left before the lease's end")
        task: asyncio.Task[T] = asyncio.ensure_future(call())
        held.query = task
        return await within(task, deadline - time.monotonic())

    async def _hook(self, held: _Held, hook: Callable[[], Awaitable[None]], what: str) -> None:
        """A channel's start/stop hook; they return promptly, but this loop never waits on one for long."""
        try:
            await within(hook(), HOOK_WAIT_SECONDS)
        except NoAnswer:
            log.warning("cluster: %s %s is taking long; the lease loop goes on", what, held.provider)
        except Exception as exc:
            log.warning("cluster: %s %s failed: %s", what, held.provider, _why(exc))


def _why(exc: BaseException | None) -> str:
    return (str(exc) or type(exc).__name__) if exc is not None else "unknown"  # a timeout has no message
