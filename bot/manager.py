"""The ChannelManager: the one consumer of the bus, assembled from three parts with one job each.

* the router (:mod:`bot.router`): identity, the gates, commands — what a message is and where it goes;
* the lane scheduler (:mod:`bot.lanes`): one turn at a time per agent thread (FIFO), queued notices,
  cluster holds, ``/stop``;
* the turn runner (:mod:`bot.turn_runner`): one turn from its placeholder to its delivered answer, at
  most ``bus.max_concurrent_turns`` at once, then the inbox entry and the after-turn hooks.

The manager owns their lifecycle (start, drain, stop, idle) and is what the rest of the service holds:
the commands see it through the small :class:`~bot.commands.CommandHost` protocol, the agent feature and
the goal runner through :meth:`submit_turn`, :meth:`send_notice` and the hook lists. It never asks which
platform a message came from.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from agent.events import Agent, TrustLevel
from bot.agents.directory import AgentDirectory
from bot.approvals import ApprovalDesk
from bot.bus import MessageBus
from bot.commands import Command, CommandRegistry
from bot.faults import StorageRetry
from bot.identity import Identity, IdentityResolver, PlatformIdentityResolver
from bot.inbox import Inbox
from bot.lanes import LaneScheduler
from bot.pairing import PairingStore
from bot.router import Router
from bot.schedules import ScheduleBook
from bot.settle import Settler
from bot.speech.speaking import VoiceReplies
from bot.spend.keeper import SpendKeeper
from bot.tasks.desk import TaskDesk
from bot.tasks.store import TaskStore
from bot.thread_retention import ThreadEraser
from bot.threads import Conversation, ThreadStore
from bot.trust import TrustPolicy
from bot.turn_runner import TurnRunner
from bot.turns import (
    STOPPED_NOTE,
    AfterTurnHook,
    FollowUp,
    OnTurnError,
    StatusProvider,
    StopResult,
    TurnAsk,
    TurnError,
    TurnOutcome,
)
from channels.base import Channel
from channels.types import Action, InboundMessage
from config.schema import Settings
from connections import ConnectionStore

__all__ = [  # the turn vocabulary lives in bot/turns.py; these names stay importable from here
    "STOPPED_NOTE",
    "AfterTurnHook",
    "ChannelManager",
    "FollowUp",
    "TurnError",
    "TurnOutcome",
]

log = logging.getLogger(__name__)


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
        eraser: ThreadEraser | None = None,
    ) -> None:
        self.settings = settings
        #: Deletes a thread's history, rows and files for good (``/forget``); None: not offered.
        self.eraser = eraser
        self.bus = bus
        self.inbox = inbox
        self.threads = threads
        self.agent = agent
        self.channels = channels
        self.commands = commands or CommandRegistry.discover()
        #: Where ``/connect`` binds accounts; None when the service runs without connections.
        self.connections = connections
        #: Where ``/schedule`` keeps scheduled tasks; None when the service runs without them.
        self.schedules = schedules
        #: Who is an admin, member or guest, and what guests get (docs/security.md).
        self.trust = TrustPolicy(pairing)
        self.status_providers: list[StatusProvider] = []
        self._handlers: set[asyncio.Task[None]] = set()
        self._dispatcher: asyncio.Task[None] | None = None
        #: Work that failed because storage was unreachable runs again, in place (bot/faults.py).
        self.storage = StorageRetry(inbox.save_reply_ref, bus.release)
        self.settler = Settler(inbox=inbox, bus=bus, channels=channels, storage=self.storage)
        self.runner = TurnRunner(
            settings=settings,
            agent=agent,
            bus=bus,
            inbox=inbox,
            channels=channels,
            storage=self.storage,
            settler=self.settler,
            level_now=self._level_now,
            submit=self.submit_turn,
            schedules=schedules,
        )
        #: Task cards: scheduled runs and the agent's background tasks (bot/tasks/, docs/tasks.md).
        self.tasks = TaskDesk(TaskStore(inbox.db), channels, inbox.save_reply_ref)
        self.runner.tasks = self.tasks
        self.lanes = LaneScheduler(
            bus=bus,
            inbox=inbox,
            threads=threads,
            channels=channels,
            is_admin=self.is_admin,
            run=self.runner.run,
            finish=self.runner.finish_turn,
        )
        self.lanes.cards = self.tasks
        self.router = Router(
            settings=settings,
            bus=bus,
            channels=channels,
            agent=agent,
            commands=self.commands,
            identity=identity or PlatformIdentityResolver(),
            trust=self.trust,
            storage=self.storage,
            settler=self.settler,
            submit=self.lanes.submit_turn,
            stopping=lambda: self.lanes.stopping,
            host=self,
        )
        #: Run after every turn's answer is delivered, in order; one may ask for a follow-up turn.
        self.after_turn_hooks: list[AfterTurnHook] = self.runner.after_turn_hooks
        if settings.speech.speak is not None:  # voice out: answers to voice messages are spoken back
            self.after_turn_hooks.append(VoiceReplies(settings.speech.speak, channels))

    # --- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        self._dispatcher = asyncio.create_task(self._dispatch_loop(), name="manager-dispatch")
        cluster = self.bus.cluster
        if cluster is not None:  # PostgreSQL, several instances: run what this instance claims
            cluster.on_stop = self.lanes.cancel_running
            cluster.on_lost = self.lanes.abandon
            self.bus.start_claiming(self.router.is_command)

    async def stop(self, grace: float | None = None) -> None:
        """Stop taking messages, let running work finish for ``grace`` seconds, then cancel the rest.

        Anything not finished stays unfinished in the inbox and resumes at the next start.
        """
        grace = self.settings.bus.drain_seconds if grace is None else grace
        self.lanes.stopping = True  # running turns finish; hidden follow-ups wait for the next start
        self.bus.close()
        if self._dispatcher is not None:
            await self._dispatcher
        pending = {t for t in self._handlers if not t.done()} | self.lanes.tasks()
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
            busy = {t for t in self._handlers if not t.done()} | self.lanes.tasks()
            if busy:
                await asyncio.wait(busy)
            elif self.lanes.active or self.bus.load:
                await asyncio.sleep(0.005)  # a lane between its creation and its worker's start
            else:
                return

    async def _dispatch_loop(self) -> None:
        while (entry := await self.bus.get()) is not None:
            # One task per message: it routes the message, then runs the lane it starts (LaneScheduler.carry).
            task = asyncio.create_task(self.lanes.carry(self.router.handle(entry)))
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)

    # --- the parts' settings that are installed after construction ------------------------------------
    @property
    def identity(self) -> IdentityResolver:
        """Who a sender is (the connections feature installs the database-backed chain)."""
        return self.router.identity

    @identity.setter
    def identity(self, resolver: IdentityResolver) -> None:
        self.router.identity = resolver

    @property
    def approvals(self) -> ApprovalDesk | None:
        """Where risky commands wait for ``/approve`` (bot/approvals.py); None: ``sandbox.approval: never``."""
        return self.runner.approvals

    @approvals.setter
    def approvals(self, desk: ApprovalDesk | None) -> None:
        self.runner.approvals = desk

    @property
    def spend(self) -> SpendKeeper | None:
        """Prices turns and checks budgets (bot/spend/); None: the service runs without it."""
        return self.runner.spend

    @spend.setter
    def spend(self, keeper: SpendKeeper | None) -> None:
        self.runner.spend = keeper

    @property
    def on_turn_error(self) -> OnTurnError | None:
        """The one hook told about every failed turn (model, delivery or the bot's own error): e.g. to
        page an operator. It runs after the failure is logged; its own failure is only logged."""
        return self.runner.on_turn_error

    @on_turn_error.setter
    def on_turn_error(self, hook: OnTurnError | None) -> None:
        self.runner.on_turn_error = hook

    @property
    def agents(self) -> AgentDirectory | None:
        """Named agents (bot/agents/): which answers each turn; None: only the built-in agent."""
        return self.runner.agents

    @agents.setter
    def agents(self, directory: AgentDirectory | None) -> None:
        self.runner.agents = directory

    @property
    def pairing(self) -> PairingStore | None:
        """Where ``/pair`` approves strangers; None when pairing is off."""
        return self.trust.pairing

    # --- what commands, features and the goal runner ask ------------------------------------------------
    def is_command(self, message: InboundMessage) -> bool:
        """A chat command the manager answers itself (not a skill turn): it does not wait for a turn."""
        return self.router.is_command(message)

    def listed_commands(self) -> Sequence[Command]:
        return self.commands.commands

    def is_admin(self, message: InboundMessage) -> bool:
        """The sender is one of their channel's ``admins``: may stop and approve for anybody."""
        channel = self.channels.get(message.provider)
        return channel is not None and channel.is_admin(message)

    async def _level_now(self, message: InboundMessage, channel: Channel) -> TrustLevel:
        return await self.router.level_now(message, channel)

    def model_for(self, conversation: Conversation) -> str:
        return self.runner.model_for(conversation)

    async def conversation_for(self, message: InboundMessage, identity: Identity) -> Conversation:
        return await self.lanes.conversation_for(message, identity)

    def lane_state(self, thread_id: str) -> str:
        return self.lanes.lane_state(thread_id)

    async def stop_turn(
        self, message: InboundMessage, thread_id: str, token: str | None = None
    ) -> StopResult:
        """``/stop``: cancel the thread's running turn here, or on the instance that runs it."""
        return await self.lanes.stop_turn(message, thread_id, token)

    def cancel_running(self, thread_id: str, token: str | None = None) -> bool:
        return self.lanes.cancel_running(thread_id, token)

    async def publish(self, message: InboundMessage) -> bool:
        return await self.bus.publish(message)

    async def submit_turn(self, message: InboundMessage, identity: Identity, ask: TurnAsk) -> None:
        """Queue a turn on the conversation's thread (:meth:`bot.lanes.LaneScheduler.submit_turn`)."""
        await self.lanes.submit_turn(message, identity, ask)

    async def send_notice(
        self,
        message: InboundMessage,
        text: str,
        *,
        private: bool = False,
        actions: Sequence[Action] = (),
        resume_ref: str | None = None,
    ) -> str | None:
        """A one-off answer (command output, gate messages): see :meth:`bot.settle.Settler.send_notice`."""
        return await self.settler.send_notice(
            message, text, private=private, actions=actions, resume_ref=resume_ref
        )
