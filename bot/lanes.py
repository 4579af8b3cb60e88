"""The lane scheduler: each agent thread's turns, one at a time and in order.

A conversation maps to an agent thread, and each thread has a lane: a FIFO of turns with at most one
running. Different threads run at once (bounded by the turn runner's slots). The scheduler shows a
message that joins a busy lane as "⏳ Queued" (never above the message of the turn ahead of it), holds a
thread's cluster claim for hidden follow-ups, and stops or abandons the running turn on request. What a
turn does once it runs is the turn runner's job (:mod:`bot.turn_runner`); the scheduler only calls it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

from bot.bus import MessageBus
from bot.identity import Identity
from bot.inbox import PENDING, Inbox
from bot.logs import trace_id_var
from bot.own_context import OwnContext
from bot.tasks.card import CardStream
from bot.tasks.desk import TaskDesk
from bot.threads import Conversation, ThreadStore
from bot.turns import Lane, StopResult, StopScope, Turn, TurnAsk, new_token
from channels.base import Channel
from channels.errors import ChannelError
from channels.reply import ReplyStream
from channels.resume import ReplyState
from channels.types import InboundMessage

log = logging.getLogger(__name__)

PAUSED_FOR_RESTART = "⏸ I'm restarting; I'll carry on with this when I'm back."
#: How long a "⏳ Queued" notice waits for the message of the turn ahead of it to appear first. That is
#: usually milliseconds; longer only when the turn ahead waits for a free turn slot (bus.max_concurrent_turns).
QUEUED_NOTICE_WAIT_SECONDS = 2.0


#: How often a stopped turn that is still running is cancelled again (see _keep_cancelling).
RECANCEL_SECONDS = 0.25


async def stoppable(lane: Lane, work: Coroutine[Any, Any, None]) -> bool:
    """Run ``work`` as the part of the lane's running turn ``/stop`` may cancel: True when a person
    stopped it (``/stop``, ⏹ Stop), False when it finished. Any other cancellation (shutdown, a lost
    cluster claim) is passed on.

    ``work`` runs in the lane's task, not a task of its own (one task per message fewer): a stop is a
    cancellation of the lane's task that :meth:`LaneScheduler.cancel_running` counts in the scope. The
    task's cancellation count beyond the counted stops tells another cancellation apart, and the stops
    are taken back (``uncancel``) when the scope ends, however it ends, so what runs after it — the
    reply's delivery checks ``cancelling()`` — sees only cancellations that are not stops. A cancel sent
    while the scope is open is always raised inside ``work`` (the task is suspended there), never after.
    """
    task = asyncio.current_task()
    assert task is not None
    scope = lane.stoppable = StopScope(task, task.cancelling())
    try:
        await work
    except asyncio.CancelledError:
        if task.cancelling() - scope.baseline > scope.stops:  # not (only) a stop: shutdown, abandon
            raise
        return True
    finally:
        lane.stoppable = None
        for _ in range(scope.stops):
            task.uncancel()
    return False


async def _keep_cancelling(lane: Lane, scope: StopScope) -> None:
    """Cancel the stopped ``scope`` again until it ends: one cancellation can be lost.

    Python 3.11's ``asyncio.wait_for`` drops a cancellation that arrives in the same loop step as the
    awaited result, and langchain-openai wraps every chunk of a model stream in it: a /stop landing in
    that step used to take effect only when the model's stream ended (20 s and more, measured on the
    Feishu channel, whose presses wake the loop from the SDK's thread). The turn still ends as a stop.
    Only while the scope is open: the lane's task goes on to deliver the reply, then to the next turn.
    """
    while lane.stoppable is scope:
        await asyncio.sleep(RECANCEL_SECONDS)
        if lane.stoppable is scope:
            scope.stops += 1
            scope.task.cancel()


async def _shown_soon(turn: Turn) -> bool:
    """Whether ``turn``'s first message is in the chat, waiting briefly: its placeholder may be on its way."""
    try:
        await asyncio.wait_for(turn.shown.wait(), QUEUED_NOTICE_WAIT_SECONDS)
    except TimeoutError:
        return False
    return True


#: Runs a turn up to its delivered final reply: ``(text, stopped, failed)``, or None (see bot/turn_runner.py).
RunTurn = Callable[[Turn, Lane], Awaitable[tuple[str, bool, bool] | None]]
#: After the reply is delivered and the lane released: mark the entry done, run the after-turn hooks.
FinishTurn = Callable[[Turn, str, bool, bool], Awaitable[None]]


def open_turn_reply(channels: Mapping[str, Channel], inbox: Inbox, turn: Turn) -> ReplyStream:
    """The turn's reply, continuing what a run before a restart showed; each new message or card it
    makes is stored with the inbox entry before it shows more (channels/resume.py)."""
    channel = channels[turn.message.provider]
    if turn.ask.entry_id is None:
        return channel.open_reply(turn.message, resume=turn.resume)
    keeper = _StateKeeper(inbox, turn)
    keeper.reply = channel.open_reply(turn.message, resume=turn.resume, on_change=keeper)
    return keeper.reply


class _StateKeeper:
    """Stores a turn's reply state with its inbox entry (the reply's ``on_change``)."""

    __slots__ = ("inbox", "reply", "turn")

    def __init__(self, inbox: Inbox, turn: Turn) -> None:
        self.inbox, self.turn = inbox, turn
        self.reply: ReplyStream | None = None

    async def __call__(self, state: ReplyState) -> None:
        entry_id = self.turn.ask.entry_id
        assert entry_id is not None
        self.turn.resume = state
        if self.reply is not None and self.reply.settling:
            # The final answer's last message: its state joins the entry's done, submitted in this same
            # loop step once the answer is out — one write instead of a commit of its own first.
            self.inbox.stage_reply_ref(entry_id, state)
            return
        await self.inbox.save_reply_ref(entry_id, state)


class LaneScheduler:
    """Per-thread FIFO lanes, queued notices, cluster holds, and stopping the running turn."""

    def __init__(
        self,
        *,
        bus: MessageBus,
        inbox: Inbox,
        threads: ThreadStore,
        channels: Mapping[str, Channel],
        is_admin: Callable[[InboundMessage], bool],
        run: RunTurn,
        finish: FinishTurn,
    ) -> None:
        self.bus = bus
        self.inbox = inbox
        self.threads = threads
        self.channels = channels
        self.is_admin = is_admin
        self._run_turn = run
        self._finish_turn = finish
        self._lanes: dict[str, Lane] = {}
        #: Tasks that re-cancel a stopped turn until it ends (see _keep_cancelling).
        self._watchers: set[asyncio.Task[None]] = set()
        #: Set once the service is stopping: running turns finish; hidden follow-ups wait for the next start.
        self.stopping = False
        #: Task cards (bot/tasks/): a scheduled run waiting in a busy lane shows as its queued card.
        self.cards: TaskDesk | None = None
        #: Routing tasks that run the lane their message starts themselves, once routing is done
        #: (:meth:`carry`): the lane they took, or None while they have not taken one.
        self._carriers: dict[asyncio.Task[None], Lane | None] = {}

    @property
    def active(self) -> int:
        """Threads that have a lane now (a turn running or queued, or a lane just created)."""
        return len(self._lanes)

    def tasks(self) -> set[asyncio.Task[None]]:
        """What still runs: lane workers and stop watchers (the manager waits on them when it stops)."""
        busy = {lane.worker for lane in self._lanes.values() if lane.worker and not lane.worker.done()}
        return busy | {t for t in self._watchers if not t.done()}

    def abandon(self, entry_id: str) -> None:
        """Another instance took this entry's claim over (ours lapsed): stop the turn, reply nothing more.

        ``entry_id`` may also be a hidden turn's hold on the thread's claim."""
        for lane in self._lanes.values():
            current = lane.current
            if (
                current is not None
                and entry_id in (current.ask.entry_id, current.hold)
                and lane.worker is not None
            ):
                lane.worker.cancel()

    async def conversation_for(self, message: InboundMessage, identity: Identity) -> Conversation:
        return await self.threads.get_or_create(message.conversation_key, identity.owner, message.thread_id)

    def lane_state(self, thread_id: str) -> str:
        lane = self._lanes.get(thread_id)
        if lane is None or (lane.current is None and not lane.pending):
            return "idle"
        queued = len(lane.pending)
        return "running" + (f", {queued} queued" if queued else "")

    async def stop_turn(
        self, message: InboundMessage, thread_id: str, token: str | None = None
    ) -> StopResult:
        """``/stop``: cancel the thread's running turn here, or on the instance that runs it.

        With ``token`` (a Stop button) only the turn that button belongs to is stopped, and only for the
        person who asked for it or an admin: a stale button never stops the next answer, and nobody
        stops somebody else's answer by pressing its button.
        """
        lane = self._lanes.get(thread_id)
        turn = lane.current if lane is not None else None
        cluster = self.bus.cluster
        if token is not None:
            if turn is not None and turn.token == token:
                asker: InboundMessage | None = turn.message
            elif cluster is not None:  # it may run on another instance: its inbox entry names the asker
                entry = await self.inbox.get(token)
                asker = entry.message if entry is not None and entry.status == PENDING else None
            else:
                asker = None
            if asker is None:
                return StopResult.FINISHED
            if (
                asker.sender.id != message.sender.id or asker.provider != message.provider
            ) and not self.is_admin(message):
                return StopResult.NOT_YOURS
        if self.cancel_running(thread_id, token):
            return StopResult.STOPPED
        if cluster is not None and await cluster.stop_elsewhere(message, thread_id, token):
            return StopResult.STOPPED
        return StopResult.FINISHED if token is not None else StopResult.NOTHING

    def cancel_running(self, thread_id: str, token: str | None = None) -> bool:
        """Cancel the thread's running turn (only the one ``token`` names, when given)."""
        lane = self._lanes.get(thread_id)
        scope = lane.stoppable if lane is not None else None
        if lane is None or scope is None:
            return False
        if token is not None and (lane.current is None or lane.current.token != token):
            return False
        scope.stops += 1
        scope.task.cancel()
        watch = asyncio.create_task(_keep_cancelling(lane, scope), name="stop-watch")
        self._watchers.add(watch)
        watch.add_done_callback(self._watchers.discard)
        return True

    async def submit_turn(self, message: InboundMessage, identity: Identity, ask: TurnAsk) -> None:
        """Queue a turn on the conversation's thread; it starts now if the thread is idle.

        ``ask.trust`` is the asker's level (bot/trust.py); None decides it from the message when it runs."""
        conversation = await self.conversation_for(message, identity)
        turn = Turn(
            message=message,
            identity=identity,
            conversation=conversation,
            ask=ask,
            trace_id=trace_id_var.get() or "-",
            resume=ask.resume,
            reply_text=ask.reply_text,
            # Its entry id names a message's turn (no random token drawn for it); others get a fresh one.
            token=ask.entry_id if ask.entry_id is not None else new_token(),
        )
        if (
            ask.hidden and self.bus.cluster is not None
        ):  # keep the thread's claim for it (None: acquired later)
            turn.hold = self.bus.cluster.hold(message)
        lane = self._lanes.get(conversation.thread_id)
        if lane is None:
            lane = self._lanes[conversation.thread_id] = Lane(conversation.thread_id)
        busy = lane.current is not None or bool(lane.pending)
        if busy and not ask.hidden:
            ahead = len(lane.pending) + 1
            before = lane.pending[-1] if lane.pending else lane.current
            if before is not None and not await _shown_soon(before):
                # The turn ahead shows nothing yet (it waits for a turn slot): a notice now would sit
                # above its answer. This turn shows its placeholder when it starts, after that one, and
                # is not "shown" until then, so the next message to the thread waits on it the same way.
                log.info("no queued notice: the message ahead of it is not visible yet")
            else:
                if await self._open_card(turn) is None:  # a scheduled run waits as its task card
                    turn.reply = open_turn_reply(self.channels, self.inbox, turn)
                    try:
                        await turn.reply.start(
                            f"⏳ Queued — I'll answer after the {ahead} message(s) ahead of this one."
                        )
                    except ChannelError as exc:
                        log.info("could not show the queued notice: %s", exc)
                turn.shown.set()
                await self._remember_notice(turn)
        elif ask.notice:
            turn.reply = self.channels[message.provider].open_reply(message)
            with contextlib.suppress(ChannelError):
                await turn.reply.start(ask.notice)
        lane.pending.append(turn)
        if lane.worker is None or lane.worker.done():
            task = asyncio.current_task()
            if task is not None and task in self._carriers and self._carriers[task] is None:
                self._carriers[task] = lane  # the routing task runs it next (carry): no task of its own
                lane.worker = task
            else:
                lane.worker = asyncio.create_task(self._drain_lane(lane), name=f"lane-{lane.thread_id[:8]}")

    async def carry(self, route: Awaitable[None]) -> None:
        """Await ``route`` (a message's routing), then run here the lane it started, if it started one.

        An idle conversation's message is one task, not two: the routing task becomes the lane's worker
        (``lane.worker``) for the one lane whose worker it would have created, and drains it once routing
        is over — after the conversation's arrival-order lock and the routing slot are released, so the
        next message of the conversation routes meanwhile and joins the lane's queue as before. Another
        lane the routing starts (a command's turn elsewhere) gets a task of its own, as does every lane
        started outside routing (follow-ups, goal steps, scheduled runs). Shutdown and ``abandon`` cancel
        ``lane.worker`` as before, which is this task once it drains.
        """
        task = asyncio.current_task()
        assert task is not None
        self._carriers[task] = None
        try:
            await route
        except BaseException:
            lane = self._carriers.pop(task, None)
            if lane is not None:  # cancelled after queuing its turn (shutdown): leave it for the next start
                self._release_pending(lane)
                if self._lanes.get(lane.thread_id) is lane and lane.current is None:
                    del self._lanes[lane.thread_id]
            raise
        lane = self._carriers.pop(task, None)
        if lane is not None:
            await self._drain_lane(lane)

    async def _open_card(self, turn: Turn) -> CardStream | None:
        """A scheduled run's task card, queued (bot/tasks/); None for other turns, or when the card
        cannot be stored now (the turn then shows the usual notice and gets its card when it starts)."""
        if self.cards is None:
            return None
        try:
            return await self.cards.open_for_turn(turn)
        except Exception as exc:
            log.warning("could not open the task card of a queued scheduled run: %s", exc)
            return None

    async def _remember_notice(self, turn: Turn) -> None:
        """Store the queued notice's reference with the inbox entry now, not when the turn starts.

        The turn may start minutes later; if the process dies before that, the resumed turn finds the
        reference and edits the notice into its answer instead of leaving a stale "Queued" behind.
        """
        state = turn.reply.state if turn.reply is not None else None
        if turn.ask.entry_id is None or state is None or not state.parts or state == turn.resume:
            return
        try:
            await self.inbox.save_reply_ref(turn.ask.entry_id, state)
        except Exception as exc:  # the turn still runs; only a crash before it starts would cost a notice
            log.warning("saving the queued notice's reference failed: %s", exc)
            return
        turn.resume = state

    async def _drain_lane(self, lane: Lane) -> None:
        try:
            while lane.pending:
                turn = lane.pending.popleft()
                if self.stopping and turn.ask.hidden:
                    log.info("not starting a hidden follow-up during shutdown; it resumes at next start")
                    if turn.reply is not None:  # its notice ("continuing…") must not look like work
                        with contextlib.suppress(Exception):
                            await turn.reply.finish(PAUSED_FOR_RESTART)
                    if turn.hold is not None:
                        self.bus.release(turn.hold)
                    turn.shown.set()
                    continue
                if turn.ask.hidden and self.bus.cluster is not None and turn.hold is None:
                    turn.hold = await self._acquire_thread(turn)
                    if turn.hold is None:  # shutting down meanwhile: the step resumes at next start
                        turn.shown.set()
                        continue
                lane.current = turn
                try:
                    # In a context of its own: what a turn sets (its trace id, whatever the agent's runtime
                    # keeps in a context variable) is not what the next turn this task runs starts with.
                    await OwnContext(self._turn(turn, lane), contextvars.Context())
                finally:
                    lane.current = None
                    turn.shown.set()
                    if turn.hold is not None:
                        self.bus.release(turn.hold)
        except asyncio.CancelledError:
            self._release_pending(lane)
            raise
        finally:
            if not lane.pending and self._lanes.get(lane.thread_id) is lane:
                del self._lanes[lane.thread_id]

    async def _turn(self, turn: Turn, lane: Lane) -> None:
        """One turn of the lane, up to its after-turn hooks (in the turn's own context: see _drain_lane)."""
        trace_id_var.set(turn.trace_id)  # every log line of the turn carries it; the context ends with it
        delivered = await self._run_turn(turn, lane)  # metrics, storage retries, the turn
        # The reply is out: the lane is free before the bookkeeping and after-turn hooks run, so a
        # message sent right after the reply starts next instead of reading "Queued".
        lane.current = None
        if delivered is not None:
            await self._finish_turn(turn, *delivered)

    def _release_pending(self, lane: Lane) -> None:
        """The lane's queued turns are left for the next start: still pending in the inbox."""
        for turn in lane.pending:
            turn.shown.set()
            if turn.ask.entry_id:
                self.bus.release(turn.ask.entry_id)
            if turn.hold is not None:
                self.bus.release(turn.hold)

    async def _acquire_thread(self, turn: Turn) -> str | None:
        """Cluster only: wait until this instance may run a hidden turn of the thread (no other
        instance runs one of its turns); None when the service stops first."""
        cluster = self.bus.cluster
        assert cluster is not None
        while not self.stopping:
            try:
                hold = await cluster.acquire(turn.message)
            except Exception as exc:  # PostgreSQL briefly away: try again
                log.warning("cluster: claiming a thread for a follow-up failed: %s", exc)
                hold = None
            if hold is not None:
                return hold
            await asyncio.sleep(min(1.0, cluster.poll_seconds))
        return None
