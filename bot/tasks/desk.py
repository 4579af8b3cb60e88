"""The task desk: which jobs get a card, the cards' Stop events, and the reporter bound to each turn.

Three ways a card comes to be:

* a turn that *is* a background job — a scheduled run — is answered with a card instead of a plain
  reply (:meth:`TaskDesk.for_turn`); the turn's own Stop token is the card's, and its inbox entry stores
  the card's state too, so the inbox's resume continues the card where it is;
* a goal (bot/goal_runner.py) opens its card when it starts working in the background, and each of
  its steps — a hidden turn carrying the card's id (``Turn.task``) — streams into that card
  (bot/tasks/goal_card.py);
* work inside a turn (a subagent started by the agent's ``task`` tool, a long tool call) reports through
  :class:`TurnTasks`, the :class:`~agent.events.TaskReporter` bound to every turn's request: each task
  id gets its own card, its Stop button sends ``/tasks stop ID`` and sets that task's stop event — except
  a long tool call of a turn that is itself a job with a card (a scheduled run, a goal's step): that is
  the job's current step, shown on the job's card, and the job's Stop is its Stop (one card per job).

Stop events live in this process: a card's Stop reaches the job on the instance that runs it (one
``serve``, or the instance holding the conversation's claim, which is where presses of that chat land
when the platform delivers to it; docs/tasks.md says what a cluster does not cover).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping

from agent.events import TaskStatus
from bot.schedules import is_occurrence
from bot.tasks.card import STATUS_LINES, CardStream, stop_action
from bot.tasks.goal_card import GoalCards
from bot.tasks.store import FINAL, TaskStore
from bot.turns import Turn
from channels.base import Channel
from channels.errors import ChannelError
from channels.resume import ReplyState
from channels.types import InboundMessage

log = logging.getLogger(__name__)

#: Stores a turn's reply state with its inbox entry (``Inbox.save_reply_ref``).
SaveReplyState = Callable[[str, ReplyState], Awaitable[None]]
#: Joins a long tool call's progress line and where it is: "running `make test` · for 40 s".
STEP_JOIN = " · "
#: The progress line of a call whose end a redelivered turn reports without having seen it start.
EARLIER_CALL = "a tool call from before the restart"


class TaskDesk:
    """Opens cards and keeps the stop events of the jobs running here."""

    def __init__(
        self, store: TaskStore, channels: Mapping[str, Channel], save_reply_state: SaveReplyState
    ) -> None:
        self.store = store
        self.channels = channels
        self.save_reply_state = save_reply_state
        self._stops: dict[str, asyncio.Event] = {}
        #: Goals' cards (bot/tasks/goal_card.py): each step of a goal answers in its goal's card.
        self.goals = GoalCards(store, channels)

    # --- a turn that is a background job -----------------------------------------------------------
    async def for_turn(
        self,
        message: InboundMessage,
        *,
        owner: str,
        thread_id: str,
        entry_id: str | None,
        token: str,
        shown: ReplyState | None,
    ) -> CardStream | None:
        """The card a scheduled run answers with (None for any other turn).

        ``shown`` is what the turn already showed (its stored state, or a "Queued" notice): a new card
        takes that message over instead of posting another."""
        if not is_occurrence(message) or entry_id is None:
            return None
        channel = self.channels.get(message.provider)
        if channel is None:
            return None
        row = await self.store.open(
            message.platform_message_id,
            message=message,
            owner=owner,
            thread_id=thread_id,
            kind="schedule",
            title=message.text,
            stop_token=token,
        )
        keep = functools.partial(self.save_reply_state, entry_id)
        return CardStream(self.store, row, channel, resume=row.reply_state or shown, also_keep=keep)

    async def open_for_turn(self, turn: Turn) -> CardStream | None:
        """The card of a turn that is a scheduled run, shown "queued" until the turn gets its slot, or of
        a goal step (its goal's card); None for any other turn. It becomes the turn's reply (the same card when asked again); a result stored
        before a restart is delivered into it without running the model again (``turn.reply_text``)."""
        if isinstance(turn.reply, CardStream):
            return turn.reply
        if turn.ask.task is not None:  # a goal step: it streams into its goal's card
            goal_card = await self.goals.for_turn(turn.ask.task, turn.token)
            if goal_card is not None:
                turn.reply = goal_card
            return goal_card
        shown = turn.reply.state if turn.reply is not None else None
        card = await self.for_turn(
            turn.message,
            owner=turn.identity.owner,
            thread_id=turn.conversation.thread_id,
            entry_id=turn.ask.entry_id,
            token=turn.token,
            shown=shown if shown is not None and shown.parts else turn.resume,
        )
        if card is None:
            return None
        turn.reply = card
        if card.row.result is not None:
            turn.reply_text = card.row.result
        else:
            try:
                await card.show_queued()
            except ChannelError as exc:
                log.info("the task card could not be shown yet: %s", exc)
        return card

    # --- work inside a turn ------------------------------------------------------------------------
    def reporter(
        self, message: InboundMessage, *, owner: str, thread_id: str, job: CardStream | None = None
    ) -> TurnTasks:
        """``job``: the card the turn answers in when it is a job (a scheduled run, a goal's step)."""
        return TurnTasks(self, message, owner=owner, thread_id=thread_id, job=job)

    def stop_event(self, task_id: str) -> asyncio.Event:
        event = self._stops.get(task_id)
        if event is None:
            event = self._stops[task_id] = asyncio.Event()
        return event

    def request_stop(self, task_id: str) -> bool:
        """Set a running task's stop event; False when no task of that id runs in this process."""
        event = self._stops.get(task_id)
        if event is None:
            return False
        event.set()
        return True

    def forget(self, task_id: str) -> None:
        self._stops.pop(task_id, None)


class TurnTasks:
    """The :class:`~agent.events.TaskReporter` of one turn: a card per task id, in the turn's chat.

    A turn that is a job with a card of its own (``job``) shows its long tool calls (kind ``tool``) on
    that card instead, as its current step: the call's progress line, how long it has run, then how it
    ended. A second card would say the same thing twice, and its Stop would stop only the command while
    the job went on; the job's Stop already stops the turn, and with it the command (the sandbox kills
    its processes). So such a call gets a stop event nothing sets, and no row of its own.

    No method raises for a card that cannot be shown (the platform refused, storage hiccuped): the task
    goes on, and its card catches up on the next change."""

    def __init__(
        self,
        desk: TaskDesk,
        message: InboundMessage,
        *,
        owner: str,
        thread_id: str,
        job: CardStream | None = None,
    ) -> None:
        self.desk = desk
        self.message = message
        self.owner = owner
        self.thread_id = thread_id
        self.job = job
        self._cards: dict[str, CardStream] = {}
        #: Long tool calls shown as steps of ``job``: their progress line (the card title they would have).
        self._steps: dict[str, str] = {}
        self._quiet_stops: dict[str, asyncio.Event] = {}
        self._own: set[str] = set()  # tasks started with a card of their own (subagents)
        #: Cards being posted (see :meth:`started`): what ends or changes a card waits for its posting.
        self._showing: dict[str, asyncio.Future[None]] = {}

    async def started(self, *, task_id: str, title: str, kind: str) -> None:
        if self.job is not None and kind == "tool":
            self._steps[task_id] = title
            await self._job_step(title)
            return
        self._own.add(task_id)  # a card of its own, even if it cannot be shown yet
        # Its stop event exists before its ⏹ does: a press handled while the card is still being shown
        # (the task asks for the event only after this returns) must not find "nothing running" and be lost.
        self.desk.stop_event(task_id)
        # Posted in a task of its own that a /stop does not cut: once the chat shows the card, its message
        # id is kept, so the stop's end edits that card (its ⏹ gone) instead of posting a second one
        # below a card whose ⏹ stays live.
        showing = self._showing[task_id] = asyncio.ensure_future(self._show(task_id, title, kind))
        await asyncio.shield(showing)

    async def _show(self, task_id: str, title: str, kind: str) -> None:
        with _quietly("starting a task card"):
            card = await self._card(task_id, title=title, kind=kind)
            if card is None or card.row.final:
                return
            await card.start("…", (stop_action(card.row.short),))

    async def _posted(self, task_id: str) -> None:
        """Wait until the card of ``task_id`` is posted (or its posting failed), if it is being posted."""
        showing = self._showing.get(task_id)
        if showing is not None and not showing.done():
            await asyncio.wait((showing,))

    async def step(self, *, task_id: str, text: str, status: TaskStatus = "running") -> None:
        if await self._is_job_step(task_id):
            await self._job_step(f"{self._steps[task_id]}{STEP_JOIN}{text}", status)
            return
        await self._posted(task_id)
        with _quietly("updating a task card"):
            card = self._cards.get(task_id) or await self._card(task_id)
            if card is not None and not card.row.final:
                await card.step(text, status)

    async def finished(self, *, task_id: str, status: TaskStatus, result: str) -> None:
        if await self._is_job_step(task_id):
            line = STATUS_LINES.get(status if status in FINAL else "done", "")
            await self._job_step(f"{self._steps.pop(task_id)}{STEP_JOIN}{line}")
            self._quiet_stops.pop(task_id, None)
            return
        await self._posted(task_id)
        with _quietly("finishing a task card"):
            card = self._cards.get(task_id) or await self._card(task_id)
            if card is not None and card.row.delivered_at is None:
                await card.close(status if status in FINAL else "done", result)
        self._showing.pop(task_id, None)
        self.desk.forget(task_id)

    def stop_requested(self, task_id: str) -> asyncio.Event:
        if task_id in self._steps:  # the job's Stop stops it, with the whole turn
            return self._quiet_stops.setdefault(task_id, asyncio.Event())
        return self.desk.stop_event(task_id)

    async def _is_job_step(self, task_id: str) -> bool:
        """A task shown as a step of the job's card: a long tool call of this turn, or — reported without
        ``started`` by a turn redelivered after a restart (a call that had ended before it) — any task
        of a job turn that has no card of its own (no card is opened for a bare step or end)."""
        if task_id in self._steps:
            return True
        if self.job is None or task_id in self._cards or task_id in self._own:
            return False
        with _quietly("looking up a task card"):
            if await self.desk.store.get(task_id) is not None:
                return False
        self._steps[task_id] = EARLIER_CALL
        return True

    async def _job_step(self, text: str, status: TaskStatus = "running") -> None:
        """The job's card shows ``text`` as its step, unless the job has ended meanwhile: a goal's Stop
        closes its card through another stream before the step's turn (and its call) is stopped, and a
        "running" edit must not flash over that end."""
        job = self.job
        if job is None or job.finished:
            return
        with _quietly("showing a tool call on its job's card"):
            row = await self.desk.store.get(job.row.id)
            if row is not None and not row.final:
                await job.step(text, status)

    async def stopped_with_turn(self) -> None:
        """The turn was stopped (``/stop``, its ⏹): every task of it is asked to stop, and a card its
        task did not end (the agent was cancelled first) ends as stopped instead of staying "running"."""
        if self._showing:  # a card the stop caught while it was being posted is ended, not re-posted
            await asyncio.wait(list(self._showing.values()))
        for task_id, card in list(self._cards.items()):
            self.desk.request_stop(task_id)
            if card.finished:
                continue
            with _quietly("stopping a task card with its turn"):
                await card.close("stopped", "Stopped with the reply it belonged to.")
            self.desk.forget(task_id)

    async def _card(self, task_id: str, *, title: str = "", kind: str = "subagent") -> CardStream | None:
        """The card of ``task_id``: this turn's, the stored one (a redelivered turn), or a new one."""
        card = self._cards.get(task_id)
        if card is not None:
            return card
        channel = self.desk.channels.get(self.message.provider)
        if channel is None:
            return None
        row = await self.desk.store.open(
            task_id,
            message=self.message,
            owner=self.owner,
            thread_id=self.thread_id,
            kind=kind,
            title=title or kind,
        )
        card = self._cards[task_id] = CardStream(self.desk.store, row, channel)
        if row.result is not None and row.delivered_at is None:
            await card.finish(row.result)  # decided before a restart, not shown yet: shown now, once
        return card


@contextlib.contextmanager
def _quietly(what: str) -> Iterator[None]:
    try:
        yield
    except (ChannelError, OSError) as exc:
        log.warning("%s failed: %s", what, exc)
    except Exception as exc:  # storage away: the task itself goes on
        log.warning("%s failed: %s: %s", what, type(exc).__name__, exc)
