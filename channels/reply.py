"""Streaming replies: one message edited in place, paced to each platform's budget.

A channel implements only a small :class:`ReplyTransport` (send, edit, send files). Everything about pacing
is here, once: the :class:`RateBudget` of each rate-limit scope a reply draws on (:class:`Pacing`: the
chat's, plus the wider scopes the channel names per call kind), coalescing (only the newest text is ever
sent; stale intermediate updates are dropped), ``retry_after`` handling, splitting at the platform limit,
and the guarantee that the final text is delivered — first in line, by editing, by retrying, and finally
by a new message.

A reply can carry *actions* (buttons, :class:`~channels.types.Action`): *live* actions (Stop) ride on the
last visible message while the reply streams and disappear with the final text; *final* actions
(Approve / Deny on a notice) stay on the final message until somebody edits it again. A transport
without buttons ignores them: every action's command can also be typed.

Two optional platform features also live behind the transport, so the manager never learns which
platform it talks to: a *native stream* (a platform's own primitive for a message that is still being
written, e.g. Telegram drafts) used instead of the placeholder-and-edit path where the transport offers
one, and a *typing heartbeat* re-sent while nothing visible changes (the model thinks or a tool runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TypeVar

from channels.errors import (
    ChannelError,
    EditFailed,
    Forbidden,
    MessageNotModified,
    NetworkError,
    RetryAfter,
)
from channels.pacing import CALL_KINDS, Budget, BudgetRegistry, CallKind, Pacing, RateBudget
from channels.reply_transport import NativeStream, ObservedTransport, ReplyTransport
from channels.resume import ReplyState, ShownPart, digest
from channels.splitter import split_text
from channels.types import Action, ReplyLimits

#: The reply's interface and pacing live in their own modules; importable from here as well.
__all__ = [
    "CALL_KINDS",
    "Budget",
    "BudgetRegistry",
    "CallKind",
    "NativeStream",
    "ObservedTransport",
    "Pacing",
    "RateBudget",
    "ReplyStream",
    "ReplyTransport",
    "StateSink",
]

log = logging.getLogger(__name__)
T = TypeVar("T")
#: Stores a reply's state durably (the manager: with its inbox entry); awaited before more is shown.
StateSink = Callable[[ReplyState], Awaitable[None]]

MAX_FINAL_ATTEMPTS = 3


class ReplyStream:
    """start() → update(text) … → finish(text, files), driven by the manager.

    ``update`` never blocks: it records the newest text and a background pump sends it when the reply's
    budgets allow. ``finish`` drops the pump's pending update (waiting only for a call already on the
    wire) and delivers the final text with priority: it goes out as soon as the budgets allow, ahead of
    intermediate updates of other replies waiting on the same scope.
    """

    def __init__(
        self,
        transport: ReplyTransport,
        budget: Pacing | RateBudget,
        limits: ReplyLimits,
        *,
        resume_ref: str | None = None,
        resume: ReplyState | None = None,
        on_change: StateSink | None = None,
        provider: str = "unknown",
    ) -> None:
        self.transport: ReplyTransport = ObservedTransport(transport, provider)
        self.pacing = budget if isinstance(budget, Pacing) else Pacing(budget)
        self.limits = limits
        if resume is None and resume_ref:
            resume = ReplyState.first_only(resume_ref)
        # (ref, text, buttons) per visible message, in order; buttons None = not known (a resumed message)
        self._sent: list[tuple[str, str, tuple[Action, ...] | None]] = []
        #: What the chat showed before a restart (its messages' fingerprints), by position.
        self._resumed: tuple[ShownPart, ...] = resume.parts if resume else ()
        self._sent.extend((part.ref, "", None) for part in self._resumed)
        if resume is not None and resume.platform:
            transport.restore(resume.platform)
        #: Intermediate updates no longer than what the chat already shows are dropped: a resumed reply
        #: does not rewind its messages to the new run's first words, it continues past them.
        self._hold_below = resume.visible_length if resume else 0
        self._on_change = on_change
        self._recorded: ReplyState | None = resume
        #: True while ``on_change`` is told of the final text's last message: nothing more of the text
        #: follows it, so the sink may let that write join its next one (the manager: the entry's done).
        self.settling = False
        self._placeholder: str | None = None
        self._live: tuple[Action, ...] = ()  # buttons shown while streaming (Stop), gone with the final
        self._latest: str | None = None
        self._wake = asyncio.Event()
        self._closing = False
        self._pump: asyncio.Task[None] | None = None
        self._pump_due = False  # the pump starts on the loop's next round (see update)
        self._answer_ready = False  # the final text is known: nothing intermediate goes out (answer_ready)
        #: Called once, when the reply's first message is visible (a placeholder :meth:`start_soon`
        #: left to the pump, or the answer itself): a "⏳ Queued" notice behind it waits for that.
        self.on_visible: Callable[[], None] | None = None
        self._on_wire = False  # the pump has a platform call in flight (finish waits for it)
        self._prepaid: tuple[RateBudget, ...] = ()  # budgets the pump already waited on for its next call
        self._kind: CallKind = "send"  # kind of the call made last (a RetryAfter holds its budgets)
        self.finished = False
        # The native stream is chosen at start(), once the live actions are known. A resumed reply uses it
        # only when the transport can continue the live message it left (a card still streaming);
        # otherwise it continues its messages on the edit path.
        self._native: NativeStream | None = None
        self._native_pending = True
        self._native_open = False
        self._native_ref: str | None = None
        self._native_shown = ""
        self._native_at = 0.0  # when the live message was last shown
        self._last_visible = time.monotonic()
        self._typing: asyncio.Task[None] | None = None

    @property
    def ref(self) -> str | None:
        """Reference of the first visible message (stored so a resumed run edits it, not a new one)."""
        return self._sent[0][0] if self._sent else self._native_ref

    @property
    def state(self) -> ReplyState:
        """Every visible message of this reply and the transport's resume data (see channels/resume.py).

        A message showing only the placeholder (or a queued notice) counts no characters of the answer.
        """
        if self._sent:
            parts = tuple(
                self._resumed[index]
                if on is None and index < len(self._resumed)
                else ShownPart.of(ref, "" if text == self._placeholder else text, on is None or bool(on))
                for index, (ref, text, on) in enumerate(self._sent)
            )
        elif self._native_ref is not None:
            shown = "" if self._native_shown == self._placeholder else self._native_shown
            parts = (ShownPart.of(self._native_ref, shown, bool(self._live)),)
        else:
            parts = ()
        return ReplyState(parts, self.transport.resume_state())

    async def _record(self, *, structural: bool = True, settling: bool = False) -> None:
        """Hand the state to ``on_change`` when it changed, before anything more is shown.

        Called after every call that creates a message or card (``structural``) and after the others
        only to see whether the transport's own resume data moved (a new reserved sequence block, a
        card's flow status) — a string comparison, so streaming stays one write per new message.
        """
        if self._on_change is None:
            return
        recorded = self._recorded
        if not structural and recorded is not None and recorded.platform == self.transport.resume_state():
            return
        state = self.state
        if state == (recorded or ReplyState()):
            return
        self._recorded = state
        self.settling = settling
        try:
            await self._on_change(state)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the reply goes on; only a crash before the next store would repeat
            log.warning("storing the reply's state failed: %s", exc)
        finally:
            self.settling = False

    # --- pacing ------------------------------------------------------------------------------------
    async def _acquire(self, kind: CallKind, *, priority: bool = False) -> None:
        """Wait for every budget a ``kind`` call draws on (less those the pump already waited on)."""
        prepaid, self._prepaid = self._prepaid, ()
        await self.pacing.acquire(kind, priority=priority, skip=prepaid)
        self._kind = kind

    async def _call(self, kind: CallKind, call: Callable[[], Awaitable[T]], *, priority: bool = False) -> T:
        await self._acquire(kind, priority=priority)
        self._on_wire = True
        try:
            return await call()
        finally:
            self._on_wire = False

    def _penalize(self, exc: RetryAfter) -> None:
        self.pacing.penalize(self._kind, exc.retry_after)

    # --- start ---------------------------------------------------------------------------------------
    async def start(self, placeholder: str = "…", actions: Sequence[Action] = ()) -> None:
        """Show ``placeholder`` (or continue an earlier message) with ``actions`` as live buttons.

        Called again on a reply that is already visible (a queued notice whose turn now starts), it
        changes the text and the live buttons in place.
        """
        if not self.limits.supports_edit:
            return  # final-only platforms: nothing to show until finish()
        self._live = tuple(actions) if self.transport.supports_actions else ()
        if self._placeholder is None:
            self._placeholder = placeholder
        if self._native_pending:
            self._native_pending = False
            self._native = self.transport.native_stream(self._live)
            if self._native is not None and self._native.resumed and len(self._sent) == 1:
                # The live message a crash left open (a card still streaming): continue and close it.
                # With more messages it was closed already (overflow follows the close): edit them.
                self._native_open, self._native_ref, self._native_shown = True, self._sent[0][0], ""
        if self._native_open:
            if placeholder != self._native_shown:
                self.update(placeholder)
            return
        if self._native is not None and not self._sent and await self._begin_native(placeholder):
            self._start_typing()
            return
        if not self._sent and self._latest is not None:
            self.update(placeholder)  # start_soon's placeholder is still on its way: the pump sends this
            return
        if not self._sent:
            try:
                live = self._live
                ref = await self._call("send", lambda: self.transport.send(placeholder, actions=live))
            except RetryAfter as exc:
                # The placeholder (or a queued notice) shares the chat's budget: whatever goes to this
                # chat next waits as long as the platform asked.
                self._penalize(exc)
                raise
            self._sent.append((ref, placeholder, self._live))
            self._last_visible = time.monotonic()
            await self._record()
        elif self._sent[0][1] != placeholder or self._sent[-1][2] != self._live:
            self.update(placeholder)
        self._start_typing()

    def start_soon(self, placeholder: str = "…", actions: Sequence[Action] = ()) -> bool:
        """Like :meth:`start`, but the placeholder goes out from the pump, on the loop's next rounds,
        while the caller goes on (runs the agent); True when it took the placeholder that way.

        An answer that is complete before the pump sends anything (:meth:`answer_ready`: an instant
        answer, a cached one) then reaches the chat as one message — one platform call instead of a
        placeholder, an edit and their state write. Any slower answer shows the placeholder as before,
        a loop round or two later. False (the caller awaits :meth:`start`) for a reply that already shows
        something (a queued notice, a resumed one), a platform's native live message, or a platform
        that cannot edit.
        """
        if not self.limits.supports_edit or self._sent or not self._native_pending:
            return False
        live = tuple(actions) if self.transport.supports_actions else ()
        self._native_pending = False
        self._native = self.transport.native_stream(live)
        if self._native is not None:
            return False  # start() opens it
        self._live, self._placeholder = live, placeholder
        self._latest, self._pump_due = placeholder, True
        self._wake.set()
        # The pump starts two loop rounds from now, not one: an agent task the caller starts right after
        # this runs first, and an instant answer is then ready before any pump task exists.
        loop = asyncio.get_running_loop()
        loop.call_soon(loop.call_soon, self._start_pump)
        self._start_typing()
        return True

    def answer_ready(self) -> None:
        """The final text is known and :meth:`finish` follows: no intermediate update goes out from now
        on — above all no placeholder the answer would replace at once."""
        self._answer_ready = True

    def _shown(self) -> None:
        if self.on_visible is not None:
            visible, self.on_visible = self.on_visible, None
            visible()

    async def _begin_native(self, placeholder: str) -> bool:
        """Open the native live message; False (and the edit path from now on) when the platform refuses."""
        native = self._native
        assert native is not None
        try:
            self._native_ref = await self._call("native", lambda: native.begin(placeholder))
        except RetryAfter as exc:
            self._penalize(exc)
            raise
        except ChannelError as exc:
            log.info("the platform refused its native live reply (%s); editing a message instead", exc)
            self._native = None
            return False
        self._native_open, self._native_shown = True, placeholder
        self._last_visible = self._native_at = time.monotonic()
        await self._record()
        return True

    def _start_typing(self) -> None:
        interval = self.transport.typing_interval
        if interval and self._typing is None and not self._closing:
            self._typing = asyncio.get_running_loop().create_task(
                self._run_typing(interval), name="reply-typing"
            )

    async def _run_typing(self, interval: float) -> None:
        """Re-send the typing indicator whenever nothing visible changed for ``interval`` seconds.

        Thinking and tool calls can take minutes with no new text; without this the user sees a "…" that
        might as well be a hung bot. Each indicator is one call in the reply's budgets, like any other.
        """
        while not self._closing:
            wait = self._last_visible + interval - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            await self.pacing.acquire("typing")
            if self._closing:
                return
            try:
                await self.transport.typing()
                await self._keep_native_alive()
            except RetryAfter as exc:
                self.pacing.penalize("typing", exc.retry_after)
            except ChannelError as exc:
                log.info("typing indicator failed: %s", exc)
            except Exception:  # the indicator is decoration; it must never break a reply
                log.exception("typing indicator crashed")
            self._last_visible = time.monotonic()

    async def _keep_native_alive(self) -> None:
        """A live message that lapses when unchanged (a long tool call) is shown again, in the budget."""
        native = self._native
        if not self._native_open or native is None or native.keepalive is None:
            return
        if time.monotonic() - self._native_at < native.keepalive:
            return
        await self.pacing.acquire("native")
        if self._closing or not self._native_open:
            return
        await native.show(self._native_shown)
        self._native_at = time.monotonic()

    # --- streaming -----------------------------------------------------------------------------------
    def update(self, text: str) -> None:
        if (
            self._closing
            or self._answer_ready
            or not self.limits.supports_edit
            or len(text) <= self._hold_below
        ):
            return
        self._latest = text
        self._wake.set()
        if self._pump is None and not self._pump_due:
            # Started on the loop's next round, not here: a turn whose text and end arrive together
            # (a short answer, a cached one) finishes first and never needs a pump task at all.
            self._pump_due = True
            asyncio.get_running_loop().call_soon(self._start_pump)

    def _start_pump(self) -> None:
        if not self._closing and not self._answer_ready and self._pump is None:
            self._pump = asyncio.get_running_loop().create_task(self._run_pump(), name="reply-pump")

    def _next_kind(self, text: str) -> CallKind:
        """The kind of call showing ``text`` starts with (an edit of a message, or a new one)."""
        if self._native_open:
            return "native"
        for index, chunk in enumerate(self._chunks(text)):
            if index >= len(self._sent):
                return "send"
            if self._sent[index][1] != chunk:
                return "edit"
        return "edit"

    async def _run_pump(self) -> None:
        while not self._closing:
            await self._wake.wait()
            self._wake.clear()
            if self._closing or self._answer_ready or self._latest is None:
                return
            # Wait for the budgets *before* reading the text, so what goes out is the newest version.
            kind = self._next_kind(self._latest)
            await self.pacing.acquire(kind)
            self._prepaid = self.pacing.budgets(kind)
            text = self._latest
            if self._closing or self._answer_ready:
                return
            try:
                chunks = self._chunks(text)
                if self._native_open:
                    await self._roll_native(chunks)
                if self._native_open:
                    await self._show_native(chunks[-1])
                else:
                    await self._sync(chunks, allow_new=True)
                self._last_visible = time.monotonic()
            except RetryAfter as exc:
                self._penalize(exc)  # drop this update; newer text goes later
            except MessageNotModified:
                pass
            except ChannelError as exc:
                log.info("intermediate reply update failed: %s", exc)
            except Exception:  # a bug in a transport must not kill the final delivery
                log.exception("intermediate reply update crashed")
            finally:
                self._prepaid = ()
                self._shown()  # shown, or refused: a queued notice behind it has nothing to wait for

    async def _show_native(self, chunk: str) -> None:
        """One native update; a refusal moves the rest of the reply to the edit path.

        The live message shows one chunk at most (the newest); the final text is split as usual.
        """
        native = self._native
        assert native is not None
        if chunk == self._native_shown:
            return
        try:
            await self._call("native", lambda: native.show(chunk))
        except (RetryAfter, MessageNotModified):
            raise
        except ChannelError as exc:
            log.info("native live reply update refused (%s); editing a message instead", exc)
            self._abandon_native()
            return
        self._native_shown = chunk
        self._native_at = time.monotonic()
        await self._record(structural=False)

    async def _roll_native(self, chunks: list[str]) -> None:
        """A live message that ``rolls_over`` and is full: close it with its whole chunk (its live
        buttons go) and begin the next chunk as a new live message, which gets the live buttons.

        Each rolled message is stored (``_record``) before the next one begins, so a restart knows every
        card. A resumed reply does not roll: it continues the one live card its state names, and the
        rest goes out as overflow messages, as for natives that do not roll."""
        while (
            self._native_open and self._native is not None and self._native.rolls_over and not self._resumed
        ):
            index = len(self._sent)
            if len(chunks) <= index + 1:
                return
            full = chunks[index]
            try:
                ref = await self._call("native", partial(self._native.close, full))
            except (RetryAfter, MessageNotModified):
                raise
            except ChannelError as exc:
                log.info("closing the full live message failed (%s); editing messages instead", exc)
                self._abandon_native()
                return
            ref = ref or self._native_ref
            if ref is None:  # not a native that may roll over; the edit path sends the rest
                self._native, self._native_open = None, False
                return
            self._sent.append((ref, full, ()))
            self._native, self._native_open, self._native_ref = None, False, None
            await self._record()
            self._native = self.transport.native_stream(self._live)
            if self._native is None or not await self._begin_native(chunks[index + 1]):
                self._native = None
                return
            await self._record()

    def _abandon_native(self) -> None:
        """Continue on the edit path: a live message the platform created becomes the message to edit."""
        if self._native_ref is not None and all(ref != self._native_ref for ref, _, _ in self._sent):
            self._sent.append((self._native_ref, self._native_shown, None))
        self._native, self._native_open = None, False

    def _chunks(self, text: str) -> list[str]:
        """While streaming, full chunks settle and only the last one keeps being edited."""
        return split_text(text if text.strip() else "…", self.limits.text_limit)

    async def _sync(
        self,
        chunks: list[str],
        *,
        allow_new: bool,
        priority: bool = False,
        actions: tuple[Action, ...] | None = None,
    ) -> None:
        """Make the visible messages equal ``chunks``: edit what differs, send what is missing.

        The buttons (``actions``; the live ones by default) go on the last message only, and come off a
        message that is no longer last. Each call waits for the budgets of its kind; ``priority`` (the
        final) goes ahead of ordinary calls.
        """
        buttons = self._live if actions is None else actions
        last = len(chunks) - 1
        for index, chunk in enumerate(chunks):
            want = buttons if index == last else ()
            settling = priority and index == last  # the final text's last message: nothing follows it
            if index < len(self._sent):
                ref, shown, on = self._sent[index]
                if (shown == chunk and on == want) or (on is None and self._still_shows(index, chunk, want)):
                    self._sent[index] = (ref, chunk, want)
                    continue
                edit = partial(self.transport.edit, ref, chunk, actions=want)
                with contextlib.suppress(MessageNotModified):
                    await self._call("edit", edit, priority=priority)
                self._sent[index] = (ref, chunk, want)
                await self._record(structural=False, settling=settling)
            elif allow_new:
                send = partial(self.transport.send, chunk, actions=want)
                ref = await self._call("send", send, priority=priority)
                self._sent.append((ref, chunk, want))
                self._shown()
                await self._record(settling=settling)

    def _still_shows(self, index: int, chunk: str, want: tuple[Action, ...]) -> bool:
        """A message from before a restart already shows ``chunk`` without buttons: no edit needed.

        Trusted only for a message another one followed when the state was stored (the last one may
        have been edited after that; on a platform that cannot edit, none was), and only where no
        buttons are wanted or were shown.
        """
        settled = len(self._resumed) - (1 if self.limits.supports_edit else 0)
        if index >= settled or want:
            return False
        part = self._resumed[index]
        return not part.buttons and part.length == len(chunk) and part.digest == digest(chunk)

    # --- finish --------------------------------------------------------------------------------------
    async def finish(self, text: str, files: Sequence[Path] = (), actions: Sequence[Action] = ()) -> None:
        """Deliver the final text (always) and any files. Safe to call once.

        The live buttons come off; ``actions`` (e.g. Approve / Deny) stay on the final message.
        """
        if self.finished:
            return
        final_actions = tuple(actions) if self.transport.supports_actions else ()
        self._closing = True
        self._wake.set()
        if self._typing is not None:
            self._typing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._typing
            self._typing = None
        if self._pump is not None:
            if not self._on_wire:
                # A pending intermediate update (waiting for its budget) is dropped: the final replaces
                # it, and must not wait for a slot the stale text would have used.
                self._pump.cancel()
            try:
                await self._pump
            except asyncio.CancelledError:
                # The pump's own end is expected; the caller being cancelled (a shutdown cutting off a
                # hung delivery) is not, and swallowing it left the turn stuck in delivery forever.
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
        self._prepaid = ()
        chunks = split_text(text if text.strip() else "(no answer)", self.limits.text_limit)
        if self._native_open:
            await self._close_native(chunks)
        await self._deliver_final(chunks, final_actions)
        self._shown()
        if files:
            try:
                await self._call("files", lambda: self.transport.send_files(files), priority=True)
            except RetryAfter as exc:
                self._penalize(exc)
                raise
        self.finished = True
        await self.transport.finished()
        await self._record(structural=False)  # cards the transport closed (DingTalk's flowStatus)

    async def _close_native(self, chunks: list[str]) -> None:
        """End the native live message with its chunk of the final text — the first, or the one after
        those already closed when it rolled over — and the rest goes out as usual.

        Platforms whose live message is only a preview (``closes_in_place`` False) skip the call: the
        ordinary message sent next replaces the preview.
        """
        native = self._native
        assert native is not None
        index = min(len(self._sent), len(chunks) - 1)
        first = chunks[index]
        if not native.closes_in_place:
            self._native, self._native_open = None, False
            return
        for attempt in range(1, MAX_FINAL_ATTEMPTS + 1):
            try:
                ref = await self._call("native", lambda: native.close(first), priority=True)
            except RetryAfter as exc:
                self._penalize(exc)
                continue
            except ChannelError as exc:
                log.info("closing the native live reply failed (attempt %d): %s", attempt, exc)
                break
            if ref is not None:
                # A resumed card is already among the sent messages (its overflow ones stay where they
                # are); a card that rolled over adds its message after the ones closed before it.
                known = [i for i, (sent_ref, _shown, _on) in enumerate(self._sent) if sent_ref == ref]
                if known:
                    self._sent[known[0]] = (ref, first, ())
                else:
                    self._sent.append((ref, first, ()))
            self._native, self._native_open = None, False
            await self._record()
            return
        self._abandon_native()

    async def _deliver_final(self, chunks: list[str], actions: tuple[Action, ...]) -> None:
        """Edit the visible messages into the final text; a new message only when they cannot be edited.

        A rate limit or a network failure is not a reason to post the answer anew: that left the "…"
        (or a "⏳ Queued" notice) behind. After ``MAX_FINAL_ATTEMPTS`` of those the last one is raised,
        and the caller retries later (bot/redelivery.py); what already landed stays in ``_sent``, so a
        later :meth:`finish` sends only what is still missing. A refusal (:class:`Forbidden`: the bot
        is not in the channel, it is archived, the token was revoked) is not retried: the answer is
        posted anew once (a plain post may be allowed where an edit was not), and a refusal of that
        ends the delivery at once, so the turn's ``delivery_failed`` is not delayed by back-off."""
        transient: ChannelError | None = None
        for attempt in range(1, MAX_FINAL_ATTEMPTS + 1):
            try:
                await self._sync(chunks, allow_new=True, priority=True, actions=actions)
                return
            except RetryAfter as exc:
                log.info("final reply rate limited (attempt %d): %s", attempt, exc)
                self._penalize(exc)
                transient = exc
            except EditFailed as exc:
                log.info("editing the reply failed, sending it as a new message: %s", exc)
                transient = None
                break
            except NetworkError as exc:
                log.info("final reply failed (attempt %d): %s", attempt, exc)
                self.pacing.chat.penalize(self.limits.final_retry_backoff * 2 ** (attempt - 1))
                transient = exc
            except Forbidden as exc:
                # Not a member, archived, token revoked: the same call gets the same answer, so it is not
                # retried. A new message is a different call (a platform may refuse an edit, or a card
                # update, and still take a plain post), so it gets its one try below.
                log.info("final reply refused, not retried: %s", exc)
                transient = None
                break
            except ChannelError as exc:
                log.info("final reply failed (attempt %d): %s", attempt, exc)
                self.pacing.chat.penalize(self.limits.final_retry_backoff * 2 ** (attempt - 1))
                transient = None
        if transient is not None:
            raise transient
        await self._send_fresh(chunks)

    async def _send_fresh(self, chunks: list[str]) -> None:
        """Last resort: post the reply as new messages, in the platform's plainest form (no buttons:
        every action can still be typed, and a button may be what the platform refused)."""
        remaining = [
            c
            for i, c in enumerate(chunks)
            if i >= len(self._sent)
            or (self._sent[i][1] != c and not (self._sent[i][2] is None and self._still_shows(i, c, ())))
        ]
        for chunk in remaining:
            for attempt in range(1, MAX_FINAL_ATTEMPTS + 1):
                try:
                    send = partial(self.transport.send, chunk, fallback=True)
                    ref = await self._call("send", send, priority=True)
                    self._sent.append((ref, chunk, ()))
                    await self._record()
                    break
                except RetryAfter as exc:
                    self._penalize(exc)
                    if attempt == MAX_FINAL_ATTEMPTS:
                        raise
