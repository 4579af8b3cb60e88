"""Telegram long polling that confirms an update only after it is stored.

Telegram keeps every update until a later ``getUpdates`` carries an ``offset`` above its ``update_id``;
that call *is* the confirmation, and a confirmed update is gone for good. python-telegram-bot's Updater
advances the offset as soon as updates are in its in-memory queue, so a crash (or a stop with a full
service) loses them. This loop calls ``Bot.get_updates`` itself and moves the offset past an update only
once the channel's ``store`` callback returned for it — i.e. the message is in the durable inbox (or was
not for this bot). While the service pushes back, polling waits on the same update; nothing is skipped.

At pause (shutdown) the loop stops fetching, finishes storing what it already fetched (for at most
``grace`` seconds), then sends one short ``getUpdates`` so Telegram forgets what was stored. Anything it
could not store stays unconfirmed, and Telegram hands it to the next start.

Under a cluster lease (several instances, one bot token) the poller is given the lease's
:class:`~channels.intake.IntakeWindow`: each long poll's ``timeout`` is cut to end before the lease
does (less the window's margin), and no poll starts while the window is shut or about to close —
the poller waits for the next renewal instead. So a holder whose renewals fail stops polling at its
lease's end by itself, and the instance that takes the lease over never has its poll ended by a 409
from the old one; since the ``offset`` is only ever sent with a poll, nothing is confirmed from an
instance that no longer holds the lease either.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta

import telegram.error as tg_errors
from telegram import Bot, Update

from channels.errors import Backpressure
from channels.intake import IntakeWindow
from channels.telegram.transport import map_error, retry_seconds
from channels.types import ChannelStatus

log = logging.getLogger(__name__)

#: After a 409 Conflict: first pause before polling again, doubling up to the maximum.
CONFLICT_RETRY_SECONDS = 60.0
CONFLICT_RETRY_MAX_SECONDS = 600.0
#: Under a cluster lease a 409 is the last poll of a former holder, which stops within a third of the
#: lease TTL: poll again soon instead of backing off for a minute.
LEASED_CONFLICT_RETRY_SECONDS = 2.0
#: After a network failure of getUpdates: first pause, doubling up to the maximum.
NETWORK_RETRY_SECONDS = 0.5
NETWORK_RETRY_MAX_SECONDS = 30.0
#: Waits while the service refuses an update (Backpressure) or the inbox write fails.
STORE_FIRST_WAIT = 0.2
STORE_MAX_WAIT = 2.0
#: Telegram returns at most 100 updates per call.
BATCH_LIMIT = 100
#: The update kinds asked for (polling and webhook alike): messages, and presses of our buttons.
ALLOWED_UPDATES: tuple[str, ...] = ("message", "callback_query")
#: How much longer than the long-poll timeout the HTTP read may take before it counts as a failure.
READ_TIMEOUT_MARGIN = 10.0

CONFLICT_SENTENCE = (
    "409 Conflict: another process is polling Telegram with this bot token "
    "(stop the other instance, or remove its webhook)."
)

#: Stores one update: returns once it is durable (or deliberately ignored); raises to be retried.
StoreUpdate = Callable[[Update], Awaitable[None]]


class UpdatePoller:
    """Fetch, store in order, then confirm. ``offset`` is the first update id not yet stored."""

    def __init__(
        self,
        bot: Bot,
        store: StoreUpdate,
        status: ChannelStatus,
        *,
        poll_timeout: int,
        connected_detail: Callable[[], str],
        conflict_retry: float = CONFLICT_RETRY_SECONDS,
        window: IntakeWindow | None = None,
    ) -> None:
        self.bot = bot
        self.store = store
        self.status = status
        self.poll_timeout = poll_timeout
        self.connected_detail = connected_detail
        self.conflict_retry = conflict_retry
        self.window = window
        #: Why the last getUpdates failed (None after a good one): ``/health`` says "polls failing".
        self.problem: str | None = None
        #: Why the service refuses the update being stored (None once it is in): not receiving either.
        self.holding: str | None = None
        self.offset: int | None = None  # None: "from the earliest unconfirmed", Telegram's default
        self.confirmed: int | None = None  # the offset Telegram last accepted from us
        self._fetching = False  # new getUpdates calls are allowed
        self._abandon = asyncio.Event()  # stop retrying a refused update (shutdown grace is over)
        self._wake = asyncio.Event()  # cuts a backoff short at pause
        self._fetch: asyncio.Task[tuple[Update, ...]] | None = None
        self._interrupted = False  # the running long poll was cancelled by interrupt(): poll again later
        self._task: asyncio.Task[None] | None = None

    # --- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> None:
        self._fetching = True
        self._abandon.clear()
        self._wake.clear()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="telegram-polling")

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def interrupt(self) -> None:
        """The lease window was shut: end the running long poll now (unconfirmed, so Telegram hands its
        updates to whoever polls next) without stopping the loop, which waits for the window to open."""
        fetch = self._fetch
        if fetch is not None and not fetch.done():
            self._interrupted = True
            fetch.cancel()

    async def pause(self, grace: float, *, confirm: bool = True) -> None:
        """Stop fetching; store what was fetched (up to ``grace`` s); confirm what was stored.

        ``confirm=False`` when another process may be polling now: a getUpdates from here would end its
        long poll with 409. The stored updates are redelivered to it instead, and the inbox knows them.
        Under a lease the confirmation is sent only while the lease window is still open."""
        self._fetching = False
        self._wake.set()
        if self._fetch is not None and not self._fetch.done():
            self._fetch.cancel()  # unconfirmed: whatever it was about to return is redelivered later
        task = self._task
        if task is not None:
            _done, pending = await asyncio.wait({task}, timeout=grace)
            if pending:
                log.warning(
                    "Telegram: the service did not take the fetched updates in time; leaving them "
                    "unconfirmed for the next start"
                )
                self._abandon.set()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if confirm and (self.window is None or self.window.open):
            await self._confirm_stored()

    async def _confirm_stored(self) -> None:
        """One short getUpdates with the next offset: Telegram forgets what we stored."""
        if self.offset is None or self.offset == self.confirmed:
            return
        try:
            await self.bot.get_updates(offset=self.offset, limit=1, timeout=timedelta(0))
            self.confirmed = self.offset
        except tg_errors.TelegramError as exc:  # harmless: the inbox dedupes the redelivery
            log.info(
                "Telegram: confirming stored updates at stop failed (%s); they will be redelivered",
                map_error(exc),
            )

    # --- the loop ------------------------------------------------------------------------------------
    async def _run(self) -> None:
        network_wait = NETWORK_RETRY_SECONDS
        conflict_wait = self.conflict_retry
        while self._fetching:
            poll_seconds = await self._poll_seconds()
            if poll_seconds is None:
                continue  # the lease window is shut, or pause() woke us: look again
            try:
                updates = await self._get_updates(poll_seconds)
            except asyncio.CancelledError:
                if self._interrupted:  # interrupt(): the lease window was shut
                    self._interrupted = False
                    continue
                if self._fetching:
                    raise
                return  # pause() cancelled the long poll
            except tg_errors.Conflict:
                self.problem = "409 Conflict: another process polls with this bot token"
                log.error("Telegram: %s Polling is paused.", CONFLICT_SENTENCE)
                self.status.set(
                    "error", f"{CONFLICT_SENTENCE} Polling paused; next attempt in {conflict_wait:g}s."
                )
                await self._sleep(conflict_wait)
                conflict_wait = min(conflict_wait * 2, CONFLICT_RETRY_MAX_SECONDS)
                continue
            except tg_errors.RetryAfter as exc:
                log.warning("Telegram asked getUpdates to wait %gs", retry_seconds(exc))
                await self._sleep(retry_seconds(exc))
                continue
            except tg_errors.TelegramError as exc:
                self.problem = f"getUpdates failed: {map_error(exc)}"
                if isinstance(exc, tg_errors.InvalidToken | tg_errors.Forbidden):
                    self.status.set("error", f"Telegram refused polling: {map_error(exc)}")
                else:
                    self.status.set("reconnecting", f"getUpdates failed: {map_error(exc)}; retrying")
                log.warning("Telegram polling failed: %s", map_error(exc))
                await self._sleep(network_wait)
                network_wait = min(network_wait * 2, NETWORK_RETRY_MAX_SECONDS)
                continue
            if self.status.state != "connected":
                if conflict_wait > self.conflict_retry:
                    log.info("Telegram: polling resumed after a conflict")
                self.status.set("connected", self.connected_detail())
            self.problem = None
            network_wait, conflict_wait = NETWORK_RETRY_SECONDS, self.conflict_retry
            for update in updates:
                if self.offset is not None and update.update_id < self.offset:
                    continue  # already stored (Telegram re-sent it before our confirmation arrived)
                if not await self._store(update):
                    return  # shutting down: this one and the rest stay unconfirmed at Telegram
                self.offset = update.update_id + 1

    async def _poll_seconds(self) -> int | None:
        """The next long poll's timeout, or None after waiting when no poll may start now.

        Without a lease: the configured timeout. Under one: cut to the whole seconds left in the lease
        window (the Bot API's ``timeout`` is an Integer), so the poll ends before the lease can. With
        less than a second left (and long polling configured) no poll starts: it waits for the renewal
        to move the window, or for it to be shut and opened again."""
        window = self.window
        if window is None:
            return self.poll_timeout
        left = window.left()
        if left > 0:
            bound = min(self.poll_timeout, int(left))
            if bound >= 1 or self.poll_timeout == 0:
                return bound
        waits = {
            asyncio.ensure_future(window.changed(left if left > 0 else None)),
            asyncio.ensure_future(self._wake.wait()),
        }
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()
        return None

    async def _get_updates(self, poll_seconds: int) -> tuple[Update, ...]:
        """One long poll; its ``offset`` confirms everything stored so far."""
        offset = self.offset
        self._interrupted = False
        self._fetch = asyncio.get_running_loop().create_task(
            self.bot.get_updates(
                offset=offset,
                limit=BATCH_LIMIT,
                timeout=timedelta(seconds=poll_seconds),
                allowed_updates=list(ALLOWED_UPDATES),
                read_timeout=poll_seconds + READ_TIMEOUT_MARGIN,
            )
        )
        try:
            updates = await self._fetch
        finally:
            self._fetch = None
        self.confirmed = offset
        return updates

    async def _store(self, update: Update) -> bool:
        """Hand ``update`` over until it is stored. False only when shutdown gave up on it."""
        wait = STORE_FIRST_WAIT
        warned = False
        while True:
            try:
                await self.store(update)
                self.holding = None
                return True
            except Backpressure as exc:
                self.holding = f"the service refuses updates: {exc}"
                if not warned:
                    log.warning("service is busy (%s); holding Telegram updates until it accepts", exc)
                    warned = True
            except Exception as exc:
                self.holding = f"storing updates fails: {type(exc).__name__}"
                log.exception("storing Telegram update %s failed; retrying", update.update_id)
            if self._abandon.is_set():
                log.warning(
                    "Telegram update %s was not stored before stop; Telegram keeps it unconfirmed",
                    update.update_id,
                )
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._abandon.wait(), wait)
            wait = min(wait * 2, STORE_MAX_WAIT)

    async def _sleep(self, seconds: float) -> None:
        """A backoff that pause() cuts short."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
