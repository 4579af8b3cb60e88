"""The ChannelManager: the one consumer of the bus.

For every accepted message it resolves the owner, routes commands, maps the conversation to an agent
thread, and runs the turn in that thread's lane — one turn at a time per thread (FIFO), any number of
threads at once (bounded by ``bus.max_concurrent_turns``). It streams the agent's text into the
channel's :class:`~channels.reply.ReplyStream` and marks the inbox entry done only after the final
reply is delivered. It never asks which platform a message came from.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agent.errors import describe_error
from agent.events import Agent, TextDelta, ToolFinished, ToolStarted, TrustLevel, TurnFinished, TurnRequest
from agent.paths import ThreadPaths, safe_filename, unique_path
from bot import metrics
from bot.approvals import ApprovalDesk, ChatApproval
from bot.bus import MessageBus
from bot.commands import Command, CommandContext, CommandRegistry, parse_command
from bot.faults import StorageRetry, StorageUnavailable, is_storage_error
from bot.identity import Identity, IdentityResolver, PlatformIdentityResolver
from bot.inbox import DEAD, FAILED, PENDING, Inbox, InboxEntry
from bot.logs import trace_id_var
from bot.pairing import PairingStore
from bot.schedule_desk import ScheduleDesk
from bot.schedules import ScheduleBook, is_occurrence
from bot.threads import Conversation, ThreadStore
from bot.trust import GUEST_COMMAND, TrustPolicy, as_level, lowest, profile_for
from channels.base import Channel
from channels.errors import ChannelError, FileTooLarge
from channels.reply import ReplyStream
from channels.resume import ReplyState
from channels.types import Action, InboundMessage
from config.schema import Settings
from connections import ConnectionStore

log = logging.getLogger(__name__)

PLACEHOLDER = "…"
STOPPED_NOTE = "⏹ Stopped."
STOP_LABEL = "⏹ Stop"
PAUSED_FOR_RESTART = "⏸ I'm restarting; I'll carry on with this when I'm back."
#: How long a "⏳ Queued" notice waits for the message of the turn ahead of it to appear first. That is
#: usually milliseconds; longer only when the turn ahead waits for a free turn slot (bus.max_concurrent_turns).
QUEUED_NOTICE_WAIT_SECONDS = 2.0
DEAD_LETTER_NOTE = (
    "⚠️ Sorry — I tried {attempts} times and could not handle this message, so I have stopped trying "
    "and set it aside for the operator (trace {trace})."
)
#: Messages routed at once (identity, command, conversation lookup). A burst of 10k new chats waits here
#: instead of in the connection pool, whose 30 s timeout failed them. Routing holds a connection only
#: for short reads and shares one per batch of new conversations, so the pool can be smaller than this.
ROUTE_CONCURRENCY = 64
#: Connections for routing and background work, on top of one per running turn (bot/service.py).
ROUTE_CONNECTIONS = 16
#: In-process retry of a message whose handling failed (e.g. the database briefly unreachable):
#: after 1, 2, 4 … seconds, up to this, until ``bus.max_attempts`` sets it aside.
RETRY_MAX_DELAY_SECONDS = 30.0

CONNECT_HINT = (
    "This bot only answers people who have connected their account. Open {url}/connect, "
    "get a code, and send /connect CODE here."
)


ApprovalMode = Literal["never", "risky", "always"]
APPROVAL_MODES: tuple[ApprovalMode, ...] = ("never", "risky", "always")


def approval_mode(stored: str | None) -> ApprovalMode | None:
    """A conversation's stored ``/approval`` override, or None (also for a value this build lacks)."""
    for mode in APPROVAL_MODES:
        if stored == mode:
            return mode
    return None


#: How often a stopped turn that is still running is cancelled again (see _keep_cancelling).
RECANCEL_SECONDS = 0.25


async def _keep_cancelling(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` again until it ends: one cancellation can be lost.

    Python 3.11's ``asyncio.wait_for`` drops a cancellation that arrives in the same loop step as the
    awaited result, and langchain-openai wraps every chunk of a model stream in it: a /stop landing in
    that step used to take effect only when the model's stream ended (20 s and more, measured on the
    Feishu channel, whose presses wake the loop from the SDK's thread). The turn still ends as a stop.
    """
    while not task.done():
        await asyncio.sleep(RECANCEL_SECONDS)
        if not task.done():
            task.cancel()


@dataclass(slots=True)
class TurnOutcome:
    """What a finished turn looked like; after-turn hooks (goals, memory) read it."""

    message: InboundMessage
    identity: Identity
    conversation: Conversation
    text: str
    hidden: bool
    stopped: bool
    failed: bool


class StopResult(enum.Enum):
    """What a ``/stop`` (typed, or a Stop button's ``/stop TOKEN``) did."""

    STOPPED = "stopped"  # the turn is being cancelled (here, or on the instance that runs it)
    NOTHING = "nothing"  # no turn runs in this conversation
    FINISHED = "finished"  # the button's turn is not the one running (it ended; its button is stale)
    NOT_YOURS = "not_yours"  # the button's turn was asked for by somebody else


#: Asked right before a turn starts: None to run it, or a sentence that ends its reply instead.
BeforeStart = Callable[[], Awaitable[str | None]]
#: Told once the turn's final reply is delivered: (text, stopped, failed).
AfterDelivery = Callable[[str, bool, bool], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class FollowUp:
    """A hook's request to run another (usually hidden) turn on the same thread.

    Hidden follow-ups are not started once the manager is stopping: their owner must have recorded
    them durably (goal continuations are) and resubmit them at the next start.
    """

    text: str
    hidden: bool = True
    notice: str | None = None
    system_prompt: str | None = None
    before_start: BeforeStart | None = None
    after_delivery: AfterDelivery | None = None


AfterTurnHook = Callable[[TurnOutcome], Awaitable[FollowUp | None]]
StatusProvider = Callable[[Conversation], Awaitable[str | None]]


@dataclass(slots=True)
class Turn:
    message: InboundMessage
    identity: Identity
    conversation: Conversation
    text: str
    trace_id: str
    entry_id: str | None = None
    #: What of its reply a run before a restart made visible (channels/resume.py).
    resume: ReplyState | None = None
    reply_text: str | None = None
    hidden: bool = False
    system_prompt: str | None = None
    skill: str | None = None
    reply: ReplyStream | None = None
    before_start: BeforeStart | None = None
    after_delivery: AfterDelivery | None = None
    #: The sender's trust level when the turn was asked for (bot/trust.py); None: decide when it runs.
    trust: TrustLevel | None = None
    #: Names this turn in its Stop button (``/stop TOKEN``): a press stops this turn and no later one.
    #: Its inbox entry id where it has one, so any instance can look up who asked.
    token: str = field(default_factory=lambda: secrets.token_hex(6))
    #: Cluster only, for a turn no inbox entry stands for (a hidden follow-up): its hold on the
    #: thread's claim, so no other instance starts a turn of the thread while it runs.
    hold: str | None = None
    #: Set once the turn's first message is in the chat (placeholder or queued notice), or once it
    #: leaves the lane without one: a later turn's "⏳ Queued" notice waits for it, so the chat shows
    #: the messages in the order they were asked.
    shown: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(slots=True)
class Lane:
    """One thread's queue. ``agent_task`` is the cancellable part of the running turn."""

    thread_id: str
    pending: deque[Turn] = field(default_factory=deque)
    current: Turn | None = None
    agent_task: asyncio.Task[None] | None = None
    stop_requested: bool = False
    worker: asyncio.Task[None] | None = None


class ChannelManager:
    def __init__(
        self,
        *,
        settings: Settings,
        bus: MessageBus,
        inbox: Inbox,
        threads: ThreadStore,
        agent: Agent,
        channels: dict[str, Channel],
        commands: CommandRegistry | None = None,
        identity: IdentityResolver | None = None,
        connections: ConnectionStore | None = None,
        schedules: ScheduleBook | None = None,
        pairing: PairingStore | None = None,
    ) -> None:
        self.settings = settings
        self.bus = bus
        self.inbox = inbox
        self.threads = threads
        self.agent = agent
        self.channels = channels
        self.commands = commands or CommandRegistry.discover()
        self.identity: IdentityResolver = identity or PlatformIdentityResolver()
        #: Where ``/connect`` binds accounts; None when the service runs without connections.
        self.connections = connections
        #: Where ``/schedule`` keeps scheduled tasks; None when the service runs without them.
        self.schedules = schedules
        #: Where risky commands wait for ``/approve`` (bot/approvals.py); None: ``sandbox.approval: never``.
        self.approvals: ApprovalDesk | None = None
        #: Who is an admin, member or guest, and what guests get (docs/security.md).
        self.trust = TrustPolicy(pairing)
        self.after_turn_hooks: list[AfterTurnHook] = []
        self.status_providers: list[StatusProvider] = []
        self.data_dir = Path(settings.data_dir)
        self._lanes: dict[str, Lane] = {}
        # Per-conversation lock + number of handlers using it, so it is dropped only when nobody waits.
        self._conversation_locks: dict[tuple[str, str, str, str], tuple[asyncio.Lock, int]] = {}
        self._turn_slots = asyncio.Semaphore(settings.bus.max_concurrent_turns)
        self._route_slots = asyncio.Semaphore(ROUTE_CONCURRENCY)
        self._handlers: set[asyncio.Task[None]] = set()
        self._dispatcher: asyncio.Task[None] | None = None
        self._stopping = False
        #: Work that failed because storage was unreachable runs again, in place (bot/faults.py).
        self.storage = StorageRetry(inbox.save_reply_ref, bus.release)

    # --- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        self._dispatcher = asyncio.create_task(self._dispatch_loop(), name="manager-dispatch")
        cluster = self.bus.cluster
        if cluster is not None:  # PostgreSQL, several instances: run what this instance claims
            cluster.on_stop = self.cancel_running
            cluster.on_lost = self._abandon
            self.bus.start_claiming(self.is_command)

    def is_command(self, message: InboundMessage) -> bool:
        """A chat command the manager answers itself (not a skill turn): it does not wait for a turn."""
        if is_occurrence(message):  # a scheduled occurrence is never a command (bot/schedules.py)
            return False
        parsed = parse_command(message.text)
        return parsed is not None and self.commands.get(parsed.name) is not None

    def _abandon(self, entry_id: str) -> None:
        """Another instance took this entry's claim over (ours lapsed): stop the turn, reply nothing more.

        ``entry_id`` may also be a hidden turn's hold on the thread's claim."""
        for lane in self._lanes.values():
            current = lane.current
            if (
                current is not None
                and entry_id in (current.entry_id, current.hold)
                and lane.worker is not None
            ):
                lane.worker.cancel()

    async def stop(self, grace: float | None = None) -> None:
        """Stop taking messages, let running work finish for ``grace`` seconds, then cancel the rest.

        Anything not finished stays unfinished in the inbox and resumes at the next start.
        """
        grace = self.settings.bus.drain_seconds if grace is None else grace
        self._stopping = True  # running turns finish; hidden follow-ups wait for the next start
        self.bus.close()
        if self._dispatcher is not None:
            await self._dispatcher
        pending = {t for t in self._handlers if not t.done()}
        pending |= {lane.worker for lane in self._lanes.values() if lane.worker and not lane.worker.done()}
        if pending:
            _done, still = await asyncio.wait(pending, timeout=grace)
            for task in still:
                task.cancel()
            if still:
                log.warning("stopped %d unfinished turn(s); they resume at next start", len(still))
                await asyncio.gather(*still, return_exceptions=True)

    async def wait_idle(self) -> None:
        """Return once nothing is left to do: every accepted message finished (done, failed or set aside)
        and no thread has a turn running or queued — including follow-ups that no inbox entry counts,
        such as goal continuations. Tests and ``switchboard chat`` wait on this instead of polling."""
        while True:
            await self.bus.wait_idle()
            busy = {t for t in self._handlers if not t.done()}
            busy |= {lane.worker for lane in self._lanes.values() if lane.worker and not lane.worker.done()}
            if busy:
                await asyncio.wait(busy)
            elif self._lanes or self.bus.load:
                await asyncio.sleep(0.005)  # a lane between its creation and its worker's start
            else:
                return

    async def _dispatch_loop(self) -> None:
        while (entry := await self.bus.get()) is not None:
            task = asyncio.create_task(self._handle_entry(entry))
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)

    # --- inbound -----------------------------------------------------------------------------------
    async def _handle_entry(self, entry: InboxEntry) -> None:
        message = entry.message
        token = trace_id_var.set(entry.id[:12])
        key = message.conversation_key
        lock, users = self._conversation_locks.get(key, (asyncio.Lock(), 0))
        self._conversation_locks[key] = (lock, users + 1)
        try:
            # The lock keeps a conversation's messages in arrival order up to their lane.
            async with lock, self._route_slots:
                await self.storage.call("routing a message", lambda: self._route(entry))
        except asyncio.CancelledError:
            self.bus.release(entry.id)
            raise
        except Exception as exc:
            log.exception("handling message failed")
            status = await self._fail(entry.id, f"{type(exc).__name__}: {exc}", message=message)
            if status == FAILED and not self._stopping:  # transient (a busy database): try again soon
                delay = min(RETRY_MAX_DELAY_SECONDS, 2.0**entry.attempts)
                entry.attempts += 1
                self.bus.redeliver_later(entry, delay)
        finally:
            lock, users = self._conversation_locks[key]
            if users <= 1:
                del self._conversation_locks[key]
            else:
                self._conversation_locks[key] = (lock, users - 1)
            trace_id_var.reset(token)

    async def _route(self, entry: InboxEntry) -> None:
        message = entry.message
        channel = self.channels.get(message.provider)
        if channel is None:
            raise LookupError(f"no channel running for provider {message.provider!r}")
        identity = await self.identity.resolve(message)
        # A scheduled occurrence is text stored earlier (maybe by the model): never read as a command.
        scheduled = is_occurrence(message)
        parsed = None if scheduled else parse_command(message.text)
        command = self.commands.get(parsed.name) if parsed else None

        # A code gets past every gate; a bare /start (every Telegram chat's first message) does not, so
        # a stranger gets what the trust policy gives guests (a pairing code) rather than a connect hint.
        if command is not None and command.before_gate and parsed is not None and parsed.args:
            await self._run_command(entry, identity, command, parsed.args if parsed else "")
            return
        if not channel.is_allowed(message):
            log.info("ignoring message from a sender not on the allow-list")
            if message.is_private:
                await self.send_notice(message, "Sorry, you're not allowed to use this bot.")
            await self._complete(entry.id)
            return
        if self.settings.connections.require_bound_identity and not identity.bound:
            await self.send_notice(
                message, CONNECT_HINT.format(url=self.settings.server.public_url.rstrip("/"))
            )
            await self._complete(entry.id)
            return
        level = await self.trust.level(message, channel, identity)
        if scheduled:  # never above its creator's level when it was made (nor, above, their level now)
            level = lowest(level, as_level(message.scheduled or "member"))
        if level == "guest":
            refusal = await self.trust.refuse_guest(message, channel, now=time.time(), automated=scheduled)
            if refusal is None and command is not None and not command.guests:
                refusal_note = GUEST_COMMAND.format(name=command.name)
                await self.send_notice(message, refusal_note, private=True)
                await self._complete(entry.id, note="a guest asked for a members' command")
                return
            if refusal is not None:
                if refusal.notice:
                    await self.send_notice(message, refusal.notice)
                await self._complete(entry.id, note=refusal.reason)
                return
        if parsed is not None and command is None and parsed.name in self.agent.skill_names():
            # /release-notes … : an ordinary turn, with that skill's instructions in its prompt.
            await self.submit_turn(
                message,
                identity,
                text=parsed.args or f"Use the {parsed.name} skill.",
                entry_id=entry.id,
                resume=entry.resume,
                reply_text=entry.reply_text,
                system_prompt=channel.system_prompt(message),
                skill=parsed.name,
                trust=level,
            )
            return
        if parsed is not None and command is None:
            await self.send_notice(
                message, f"Unknown command /{parsed.name}. Send /help to see what I understand."
            )
            await self._complete(entry.id)
            return
        if command is not None:
            await self._run_command(entry, identity, command, parsed.args if parsed else "", level)
            return
        await self.submit_turn(
            message,
            identity,
            text=message.text,
            entry_id=entry.id,
            resume=entry.resume,
            reply_text=entry.reply_text,
            system_prompt=channel.system_prompt(message),
            trust=level,
        )

    async def _run_command(
        self, entry: InboxEntry, identity: Identity, command: Command, args: str, trust: TrustLevel = "guest"
    ) -> None:
        ctx = CommandContext(
            manager=self,
            message=entry.message,
            identity=identity,
            args=args,
            entry_id=entry.id,
            private=command.private,
            trust=trust,
        )
        await command.handler(ctx)
        if ctx.entry_id is not None:  # the command did not hand the entry to a turn
            await self._complete(entry.id)

    # --- conversations and lanes ---------------------------------------------------------------------
    async def conversation_for(self, message: InboundMessage, identity: Identity) -> Conversation:
        return await self.threads.get_or_create(message.conversation_key, identity.owner, message.thread_id)

    def model_for(self, conversation: Conversation) -> str:
        names = self.agent.model_names()
        return conversation.model if conversation.model in names else names[0]

    def lane_state(self, thread_id: str) -> str:
        lane = self._lanes.get(thread_id)
        if lane is None or (lane.current is None and not lane.pending):
            return "idle"
        queued = len(lane.pending)
        return "running" + (f", {queued} queued" if queued else "")

    def is_admin(self, message: InboundMessage) -> bool:
        """The sender is one of their channel's ``admins``: may stop and approve for anybody."""
        channel = self.channels.get(message.provider)
        return channel is not None and channel.is_admin(message)

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
        if lane is None or lane.agent_task is None or lane.agent_task.done():
            return False
        if token is not None and (lane.current is None or lane.current.token != token):
            return False
        lane.stop_requested = True
        task = lane.agent_task
        task.cancel()
        watch = asyncio.create_task(_keep_cancelling(task), name="stop-watch")
        self._handlers.add(watch)
        watch.add_done_callback(self._handlers.discard)
        return True

    @staticmethod
    def live_actions(turn: Turn) -> tuple[Action, ...]:
        """The buttons a turn's reply shows while it streams: Stop, for this turn only."""
        return (Action(f"/stop {turn.token}", STOP_LABEL, "danger"),)

    async def submit_turn(
        self,
        message: InboundMessage,
        identity: Identity,
        *,
        text: str,
        entry_id: str | None = None,
        resume: ReplyState | None = None,
        reply_text: str | None = None,
        hidden: bool = False,
        system_prompt: str | None = None,
        skill: str | None = None,
        notice: str | None = None,
        before_start: BeforeStart | None = None,
        after_delivery: AfterDelivery | None = None,
        trust: TrustLevel | None = None,
    ) -> None:
        """Queue a turn on the conversation's thread; it starts now if the thread is idle.

        ``trust`` is the asker's level (bot/trust.py); None decides it from the message when it runs."""
        conversation = await self.conversation_for(message, identity)
        turn = Turn(
            message=message,
            identity=identity,
            conversation=conversation,
            text=text,
            trace_id=trace_id_var.get() or "-",
            entry_id=entry_id,
            resume=resume,
            reply_text=reply_text,
            hidden=hidden,
            system_prompt=system_prompt,
            skill=skill,
            before_start=before_start,
            after_delivery=after_delivery,
            trust=trust,
        )
        if entry_id is not None:
            turn.token = entry_id
        if hidden and self.bus.cluster is not None:  # keep the thread's claim for it (None: acquired later)
            turn.hold = self.bus.cluster.hold(message)
        lane = self._lanes.get(conversation.thread_id)
        if lane is None:
            lane = self._lanes[conversation.thread_id] = Lane(conversation.thread_id)
        busy = lane.current is not None or bool(lane.pending)
        if busy and not hidden:
            ahead = len(lane.pending) + 1
            before = lane.pending[-1] if lane.pending else lane.current
            if before is not None:  # its placeholder may be on its way right now: not above it
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(before.shown.wait(), QUEUED_NOTICE_WAIT_SECONDS)
            turn.reply = self._open_reply(turn)
            try:
                await turn.reply.start(
                    f"⏳ Queued — I'll answer after the {ahead} message(s) ahead of this one."
                )
            except ChannelError as exc:
                log.info("could not show the queued notice: %s", exc)
            turn.shown.set()
            await self._remember_notice(turn)
        elif notice:
            turn.reply = self.channels[message.provider].open_reply(message)
            with contextlib.suppress(ChannelError):
                await turn.reply.start(notice)
        lane.pending.append(turn)
        if lane.worker is None or lane.worker.done():
            lane.worker = asyncio.create_task(self._drain_lane(lane), name=f"lane-{lane.thread_id[:8]}")

    async def _remember_notice(self, turn: Turn) -> None:
        """Store the queued notice's reference with the inbox entry now, not when the turn starts.

        The turn may start minutes later; if the process dies before that, the resumed turn finds the
        reference and edits the notice into its answer instead of leaving a stale "Queued" behind.
        """
        state = turn.reply.state if turn.reply is not None else None
        if turn.entry_id is None or state is None or not state.parts or state == turn.resume:
            return
        try:
            await self.inbox.save_reply_ref(turn.entry_id, state)
        except Exception as exc:  # the turn still runs; only a crash before it starts would cost a notice
            log.warning("saving the queued notice's reference failed: %s", exc)
            return
        turn.resume = state

    def _open_reply(self, turn: Turn) -> ReplyStream:
        """The turn's reply, continuing what a run before a restart showed; each new message or card it
        makes is stored with the inbox entry before it shows more (channels/resume.py)."""
        channel = self.channels[turn.message.provider]
        keep = None if turn.entry_id is None else functools.partial(self._keep_reply_state, turn)
        return channel.open_reply(turn.message, resume=turn.resume, on_change=keep)

    async def _keep_reply_state(self, turn: Turn, state: ReplyState) -> None:
        assert turn.entry_id is not None
        turn.resume = state
        await self.inbox.save_reply_ref(turn.entry_id, state)

    async def _drain_lane(self, lane: Lane) -> None:
        try:
            while lane.pending:
                turn = lane.pending.popleft()
                if self._stopping and turn.hidden:
                    log.info("not starting a hidden follow-up during shutdown; it resumes at next start")
                    if turn.reply is not None:  # its notice ("continuing…") must not look like work
                        with contextlib.suppress(Exception):
                            await turn.reply.finish(PAUSED_FOR_RESTART)
                    if turn.hold is not None:
                        self.bus.release(turn.hold)
                    turn.shown.set()
                    continue
                if turn.hidden and self.bus.cluster is not None and turn.hold is None:
                    turn.hold = await self._acquire_thread(turn)
                    if turn.hold is None:  # shutting down meanwhile: the step resumes at next start
                        turn.shown.set()
                        continue
                lane.current = turn
                lane.stop_requested = False
                token = trace_id_var.set(turn.trace_id)
                try:
                    with metrics.observe_turn(self._turn_record(turn)):  # the per-turn log line and metrics
                        delivered = await self.storage.run_turn(
                            turn, functools.partial(self._run_turn, turn, lane)
                        )
                    # The reply is out: the lane is free before the bookkeeping and after-turn hooks run,
                    # so a message sent right after the reply starts next instead of reading "Queued".
                    lane.current = None
                    lane.agent_task = None
                    if delivered is not None:
                        await self._finish_turn(turn, *delivered)
                finally:
                    trace_id_var.reset(token)
                    lane.current = None
                    lane.agent_task = None
                    turn.shown.set()
                    if turn.hold is not None:
                        self.bus.release(turn.hold)
        except asyncio.CancelledError:
            for turn in lane.pending:  # left for the next start: still pending in the inbox
                turn.shown.set()
                if turn.entry_id:
                    self.bus.release(turn.entry_id)
                if turn.hold is not None:
                    self.bus.release(turn.hold)
            raise
        finally:
            if not lane.pending and self._lanes.get(lane.thread_id) is lane:
                del self._lanes[lane.thread_id]

    # --- one turn ------------------------------------------------------------------------------------
    async def _run_turn(self, turn: Turn, lane: Lane) -> tuple[str, bool, bool] | None:
        """Run the turn up to its delivered final reply: ``(text, stopped, failed)``, or None when it
        did not run or its failure is already recorded. :meth:`_finish_turn` does the rest."""
        channel = self.channels[turn.message.provider]
        if turn.before_start is not None and not await self._may_start(turn, channel):
            return None
        reply: ReplyStream | None = None
        try:
            async with self._turn_slots:
                reply = turn.reply or self._open_reply(turn)
                try:
                    await reply.start(PLACEHOLDER, self.live_actions(turn))
                except ChannelError as exc:
                    log.info("placeholder failed; the final reply will be sent fresh: %s", exc)
                turn.shown.set()
                files: tuple[Path, ...]
                if turn.reply_text is not None:
                    final, files, stopped, failed = turn.reply_text, (), False, False
                else:
                    final, files, stopped, failed = await self._stream_agent(turn, lane, reply, channel)
                    metrics.mark_outcome("stopped" if stopped else "failed" if failed else "ok")
                try:
                    await reply.finish(final, files)
                except Exception as exc:
                    log.warning("delivering the final reply failed: %s", exc)
                    metrics.mark_outcome("delivery_failed")
                    if turn.entry_id:
                        await self._fail(
                            turn.entry_id,
                            f"reply delivery failed: {exc}",
                            reply_text=final,
                            message=turn.message,
                        )
                    return None
        except asyncio.CancelledError:
            if turn.entry_id:
                self.bus.release(turn.entry_id)  # shutdown: stays pending in the inbox
            raise
        except Exception as exc:
            if is_storage_error(exc):  # not the message's fault: run again once storage is back
                metrics.mark_outcome("storage_unavailable")
                if isinstance(exc, StorageUnavailable):
                    raise
                raise StorageUnavailable(reply) from exc
            log.exception("turn failed outside the agent")
            metrics.mark_outcome("error")
            if turn.entry_id:
                await self._fail(turn.entry_id, f"{type(exc).__name__}: {exc}", message=turn.message)
            return None
        return final, stopped, failed

    async def _finish_turn(self, turn: Turn, final: str, stopped: bool, failed: bool) -> None:
        """After the reply is delivered and the lane released: mark the entry done, then the hooks.

        In a cluster the thread's claim is held until the hooks have run: a follow-up they start
        takes its own hold first, so the thread never looks free to another instance in between."""
        cluster = self.bus.cluster
        finishing = cluster.hold(turn.message) if cluster is not None else None
        try:
            if turn.entry_id:
                try:
                    await self._complete(turn.entry_id)
                except asyncio.CancelledError:
                    self.bus.release(turn.entry_id)  # shutdown: the delivered turn re-runs at next start
                    raise
            if turn.after_delivery is not None:
                try:
                    await turn.after_delivery(final, stopped, failed)
                except Exception:
                    log.exception("after-delivery callback failed")
            await self._after_turn(turn, final, stopped=stopped, failed=failed)
        finally:
            if finishing is not None:
                self.bus.release(finishing)

    async def _acquire_thread(self, turn: Turn) -> str | None:
        """Cluster only: wait until this instance may run a hidden turn of the thread (no other
        instance runs one of its turns); None when the service stops first."""
        cluster = self.bus.cluster
        assert cluster is not None
        while not self._stopping:
            try:
                hold = await cluster.acquire(turn.message)
            except Exception as exc:  # PostgreSQL briefly away: try again
                log.warning("cluster: claiming a thread for a follow-up failed: %s", exc)
                hold = None
            if hold is not None:
                return hold
            await asyncio.sleep(min(1.0, cluster.poll_seconds))
        return None

    async def _may_start(self, turn: Turn, channel: Channel) -> bool:
        """Ask the turn's guard; a refused turn's reply (e.g. its notice) ends with the guard's reason."""
        assert turn.before_start is not None
        try:
            refusal = await turn.before_start()
        except Exception:
            log.exception("a turn's start check failed; not running it")
            refusal = "⚠️ Something went wrong, so I did not run this step."
        if refusal is None:
            return True
        reply = turn.reply or channel.open_reply(turn.message)
        try:
            await reply.finish(refusal)
        except Exception as exc:
            log.info("could not show why a turn did not run: %s", exc)
        return False

    def _turn_record(self, turn: Turn) -> metrics.TurnRecord:
        m = turn.message
        return metrics.TurnRecord(
            trace_id=turn.trace_id,
            provider=m.provider,
            chat=metrics.chat_hash(m.provider, m.workspace, m.chat),
            thread=turn.conversation.thread_id,
            model=self.model_for(turn.conversation),
            hidden=turn.hidden,
            received_at=None if turn.hidden else m.received_at,
        )

    async def _stream_agent(
        self, turn: Turn, lane: Lane, reply: ReplyStream, channel: Channel
    ) -> tuple[str, tuple[Path, ...], bool, bool]:
        parts: list[str] = []
        progress: list[str | None] = [None]
        result: dict[str, object] = {}

        def render() -> str:
            body = "".join(parts)
            if progress[0]:
                return f"{body}\n\n{progress[0]}" if body else progress[0]
            return body or PLACEHOLDER

        text = turn.text
        attachments, notices = await self._store_files(turn, channel)
        if notices:
            progress[0] = " ".join(notices)
        if attachments:
            text = f"{text}\n\n[Files attached: {', '.join(attachments)}]".strip()
        level = await self._turn_level(turn, channel)
        # A guest's turn may only chat, and its sandbox never gets the channel's secrets.
        profile = profile_for(level)
        request = TurnRequest(
            thread_id=turn.conversation.thread_id,
            owner=turn.identity.owner,
            text=text,
            model=self.model_for(turn.conversation),
            attachments=attachments,
            hidden=turn.hidden,
            system_prompt=turn.system_prompt,
            secrets=await channel.run_secrets(turn.message) if profile.secrets else {},
            sender_name=turn.message.sender.name,
            skill=turn.skill,
            scheduler=(
                ScheduleDesk(self.schedules, turn.message, turn.identity.owner, level)
                if self.schedules and level != "guest"
                else None
            ),
            approvals=(
                ChatApproval(self.approvals, turn.message, turn.conversation.thread_id)
                if self.approvals
                else None
            ),
            approval_mode=approval_mode(turn.conversation.approval),
            trust=level,
            profile=profile,
        )

        async def consume() -> None:
            async for event in self.agent.run(request):
                metrics.observe_event(event)
                if isinstance(event, TextDelta):
                    parts.append(event.text)
                elif isinstance(event, ToolStarted):
                    progress[0] = f"⏳ {event.summary or f'running `{event.name}`'}…"
                elif isinstance(event, ToolFinished):
                    progress[0] = None
                elif isinstance(event, TurnFinished):
                    result["text"], result["files"] = event.text, event.files
                    progress[0] = None
                reply.update(render())

        lane.agent_task = asyncio.create_task(consume(), name="agent-turn")
        try:
            await lane.agent_task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not lane.stop_requested or (current is not None and current.cancelling()):
                lane.agent_task.cancel()
                raise
            partial = "".join(parts).rstrip()
            return (f"{partial}\n\n{STOPPED_NOTE}" if partial else STOPPED_NOTE), (), True, False
        except Exception as exc:
            if is_storage_error(exc):
                raise StorageUnavailable(reply, "".join(parts)) from exc
            log.exception("agent turn failed")
            sentence = f"⚠️ {describe_error(exc)} (trace {turn.trace_id})"
            partial = "".join(parts).rstrip()
            return (f"{partial}\n\n{sentence}" if partial else sentence), (), False, True
        final = str(result.get("text") or "".join(parts))
        if notices:  # e.g. a skipped oversize file: the user must still see it once streaming is over
            final = "\n".join(notices) + "\n\n" + final
        return final, tuple(result.get("files", ())), False, False  # type: ignore[arg-type]

    async def _turn_level(self, turn: Turn, channel: Channel) -> TrustLevel:
        """The level a turn runs at: the one decided when it was asked for; a follow-up (a goal step,
        perhaps resumed after a restart) also never above its creator's level now."""
        if turn.trust is not None and not turn.hidden:
            return turn.trust
        identity = await self.identity.resolve(turn.message)
        now = await self.trust.level(turn.message, channel, identity)
        return now if turn.trust is None else lowest(turn.trust, now)

    async def _store_files(self, turn: Turn, channel: Channel) -> tuple[list[str], list[str]]:
        """Save inbound files into the owner's uploads; return agent-visible paths and user notices."""
        files = turn.message.files
        if not files or turn.reply_text is not None:
            return [], []
        paths = ThreadPaths(self.data_dir, turn.identity.owner, turn.conversation.thread_id)
        await asyncio.to_thread(paths.ensure)
        limit = self.settings.sandbox.max_upload_bytes
        stored: list[str] = []
        notices: list[str] = []
        for file in files:
            try:
                data = await channel.download(file, limit)
            except FileTooLarge as exc:
                notices.append(
                    f"📎 {file.name} is too large ({exc.size // 1024} KiB; limit {exc.limit // 1024} KiB), so I skipped it."
                )
                continue
            except (ChannelError, NotImplementedError) as exc:
                log.warning("downloading %s failed: %s", file.name, exc)
                notices.append(f"📎 I couldn't download {file.name}.")
                continue
            target = await asyncio.to_thread(self._write_upload, paths.uploads, file.name, data)
            stored.append(paths.virtual(target))
        return stored, notices

    @staticmethod
    def _write_upload(directory: Path, name: str, data: bytes) -> Path:
        target = unique_path(directory, safe_filename(name))
        target.write_bytes(data)
        return target

    async def _after_turn(self, turn: Turn, text: str, *, stopped: bool, failed: bool) -> None:
        outcome = TurnOutcome(
            turn.message, turn.identity, turn.conversation, text, turn.hidden, stopped, failed
        )
        for hook in self.after_turn_hooks:
            try:
                follow = await hook(outcome)
            except Exception:
                log.exception("after-turn hook failed")
                continue
            if follow is not None:
                await self.submit_turn(
                    turn.message,
                    turn.identity,
                    text=follow.text,
                    hidden=follow.hidden,
                    system_prompt=follow.system_prompt,
                    notice=follow.notice,
                    before_start=follow.before_start,
                    after_delivery=follow.after_delivery,
                    trust=turn.trust,
                )

    # --- outbound helpers -----------------------------------------------------------------------------
    async def send_notice(
        self,
        message: InboundMessage,
        text: str,
        *,
        private: bool = False,
        actions: Sequence[Action] = (),
        resume_ref: str | None = None,
    ) -> str | None:
        """A one-off answer (command output, gate messages): one message, no placeholder.

        ``private`` asks for an answer only the sender sees where the platform has one; ``actions`` are
        buttons that stay on it; ``resume_ref`` edits that earlier notice instead (its buttons go).
        Returns the message's reference, where the platform gives one.
        """
        reply = self.channels[message.provider].open_reply(message, private=private, resume_ref=resume_ref)
        await reply.finish(text, actions=actions)
        return reply.ref

    async def _complete(self, entry_id: str, note: str | None = None) -> None:
        await self.storage.call("marking a message done", lambda: self.inbox.mark_done(entry_id, note))
        self.bus.release(entry_id)

    async def _fail(
        self, entry_id: str, error: str, reply_text: str | None = None, *, message: InboundMessage
    ) -> str:
        """Count the failed attempt; return the entry's new status (``failed`` or ``dead``)."""
        try:
            status = await self.inbox.mark_failed(entry_id, error, reply_text)
        finally:
            self.bus.release(entry_id)
        if status == DEAD:
            # Said once, when the entry is set aside; it is never run (or answered) again by itself.
            log.error(
                "inbox entry %s failed %d times; dead-lettered: %s", entry_id, self.inbox.max_attempts, error
            )
            note = DEAD_LETTER_NOTE.format(attempts=self.inbox.max_attempts, trace=trace_id_var.get() or "-")
            try:
                await self.send_notice(message, note)
            except Exception as exc:  # the platform may be what keeps failing
                log.warning("could not tell the user their message was set aside: %s", exc)
        return status
