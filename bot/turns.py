"""The vocabulary shared by the router, the lane scheduler, the turn runner and the commands.

A turn (one message's answer, or a hidden follow-up), the lane a thread's turns wait in, what a finished
turn looked like, and the hooks around it. These are plain data and callable types with no behaviour of
their own, kept apart from :mod:`bot.manager` so the commands, the agent feature and the goal runner can
name them without importing the manager (which imports the commands): no import circle.
"""

from __future__ import annotations

import asyncio
import enum
import secrets
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from agent.events import TrustLevel
from bot.agents.directory import AgentChoice
from bot.identity import Identity
from bot.threads import Conversation
from channels.reply import ReplyStream
from channels.resume import ReplyState
from channels.types import Action, InboundMessage

PLACEHOLDER = "…"
STOPPED_NOTE = "⏹ Stopped."
STOP_LABEL = "⏹ Stop"

ApprovalMode = Literal["never", "risky", "always"]
APPROVAL_MODES: tuple[ApprovalMode, ...] = ("never", "risky", "always")


def approval_mode(stored: str | None) -> ApprovalMode | None:
    """A conversation's stored ``/approval`` override, or None (also for a value this build lacks)."""
    for mode in APPROVAL_MODES:
        if stored == mode:
            return mode
    return None


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
    #: The task card the turn answered in (``Turn.task``): a goal step's goal card.
    task: str | None = None


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
    #: The task card the turn answers in (bot/tasks/goal_card.py): a goal step streams into its goal's
    #: card instead of posting a reply of its own.
    task: str | None = None


AfterTurnHook = Callable[[TurnOutcome], Awaitable[FollowUp | None]]
StatusProvider = Callable[[Conversation], Awaitable[str | None]]


def new_token() -> str:
    """A fresh Stop-button token for a turn no inbox entry names (a follow-up, a scheduled run)."""
    return secrets.token_hex(6)


@dataclass(slots=True)
class Turn:
    """A turn on its way through a lane: what was asked (:class:`TurnAsk`), who asked and where, and
    the state of its run.

    The ask is kept whole rather than copied field by field: the router, commands, goals and follow-ups
    build a :class:`TurnAsk`, and a field added there reaches the turn runner without a second list to
    keep in step. ``resume`` and ``reply_text`` start as the ask's and change while the turn waits or
    runs (a queued notice's stored reference, a task card's finished result), so they are the turn's own.
    """

    message: InboundMessage
    identity: Identity
    conversation: Conversation
    ask: TurnAsk
    trace_id: str
    #: What of its reply is visible so far (channels/resume.py): the ask's, then each stored change.
    resume: ReplyState | None = None
    #: The answer already known (a task card's stored result): the ask's, or the card's.
    reply_text: str | None = None
    reply: ReplyStream | None = None
    #: The named agent answering (bot/agents/), decided before the budget check so spending counts for
    #: it; None: not decided yet (or no named agents).
    agent: AgentChoice | None = None
    #: Names this turn in its Stop button (``/stop TOKEN``): a press stops this turn and no later one.
    #: Its inbox entry id where it has one, so any instance can look up who asked.
    token: str = field(default_factory=new_token)
    #: Cluster only, for a turn no inbox entry stands for (a hidden follow-up): its hold on the
    #: thread's claim, so no other instance starts a turn of the thread while it runs.
    hold: str | None = None
    #: Set once the turn's first message is in the chat (placeholder or queued notice), or once it
    #: leaves the lane without one: a later turn's "⏳ Queued" notice waits for it, so the chat shows
    #: the messages in the order they were asked.
    shown: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(slots=True)
class StopScope:
    """The part of the running turn ``/stop`` may cancel (the agent's stream, the budget check).

    It runs in the lane's own task (:func:`bot.lanes.stoppable`) rather than a task of its own, so a stop
    is a cancellation of that task which the scope counts: a cancellation it did not count (shutdown,
    a lost cluster claim) is passed on, and the counted ones are taken back when the scope ends, so the
    rest of the turn (delivering what was written) never mistakes a stop for a shutdown."""

    task: asyncio.Task[None]
    #: The task's cancellation count when the scope began: cancellations from before it are not stops.
    baseline: int
    #: Cancellations ``/stop`` (and its re-cancelling watcher) sent into this scope.
    stops: int = 0


@dataclass(slots=True)
class Lane:
    """One thread's queue. ``stoppable`` is the part of the running turn ``/stop`` may cancel now."""

    thread_id: str
    pending: deque[Turn] = field(default_factory=deque)
    current: Turn | None = None
    stoppable: StopScope | None = None
    worker: asyncio.Task[None] | None = None


def live_actions(turn: Turn) -> tuple[Action, ...]:
    """The buttons a turn's reply shows while it streams: Stop, for this turn only."""
    return (Action(f"/stop {turn.token}", STOP_LABEL, "danger"),)


#: Where a failed turn broke: ``agent`` (the model or a tool), ``delivery`` (sending the final answer to
#: the platform) or ``turn`` (the bot itself, e.g. a file it could not save).
TurnStage = Literal["agent", "delivery", "turn"]


@dataclass(frozen=True, slots=True)
class TurnError:
    """A turn that failed, for the service's one error hook (:attr:`bot.manager.ChannelManager.on_turn_error`).

    Storage faults are not reported here: they are not the turn's failure, and the turn runs again in
    place once the database is back (bot/faults.py)."""

    message: InboundMessage
    thread_id: str
    #: The id the user saw in the reply's ``(trace …)`` and every log line of the turn carries.
    trace_id: str
    stage: TurnStage
    error: BaseException
    hidden: bool


OnTurnError = Callable[[TurnError], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class TurnAsk:
    """What a turn is asked to do; who asks and where are the message and identity beside it.

    One value instead of a dozen keyword arguments, so the router, commands, goals and after-turn
    follow-ups hand the lane scheduler the same thing and a new field is added in one place.
    The running turn keeps it whole (:attr:`Turn.ask`).
    """

    text: str
    entry_id: str | None = None
    #: What of its reply a run before a restart made visible (channels/resume.py).
    resume: ReplyState | None = None
    reply_text: str | None = None
    hidden: bool = False
    system_prompt: str | None = None
    skill: str | None = None
    #: Shown in the chat at once, unless the turn waits behind another (then "⏳ Queued" is shown).
    notice: str | None = None
    #: Asked right before the turn starts; its sentence, if any, ends the reply instead.
    before_start: BeforeStart | None = None
    after_delivery: AfterDelivery | None = None
    #: The sender's trust level when the turn was asked for (bot/trust.py); None: decide from the
    #: message when it runs.
    trust: TrustLevel | None = None
    #: The task card the turn answers in (a goal step: its goal's card); None: a reply of its own.
    #: Its guard (``before_start``) shows a refusal on that card, so none is posted beside it.
    task: str | None = None


class SubmitTurn(Protocol):
    """Queue a turn on a conversation's thread (:meth:`bot.lanes.LaneScheduler.submit_turn`)."""

    async def __call__(self, message: InboundMessage, identity: Identity, ask: TurnAsk) -> None: ...


class SendNotice(Protocol):
    """A one-off answer in a message's conversation (:meth:`bot.settle.Settler.send_notice`)."""

    async def __call__(
        self,
        message: InboundMessage,
        text: str,
        *,
        private: bool = False,
        actions: Sequence[Action] = (),
        resume_ref: str | None = None,
    ) -> str | None: ...
