"""What a chat command is, the context it runs with, and what it may ask of the service.

Adding a command is one module in this package that defines ``COMMAND = Command(...)``; the registry
finds it. Commands answer immediately (they do not wait behind a running turn) unless they start a turn
themselves with :meth:`CommandContext.start_turn`.

A command reaches the service through :class:`CommandHost`, the few things commands use, typed here.
The :class:`~bot.manager.ChannelManager` satisfies it without this package importing the manager (which
imports the commands), so there is no ``commands ⇄ manager`` import circle, and a command cannot reach
into lanes, retries or claims.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from bot.approvals import ApprovalDesk
from bot.identity import Identity
from bot.pairing import PairingStore
from bot.schedules import ScheduleBook
from bot.spend.keeper import SpendKeeper
from bot.tasks.desk import TaskDesk
from bot.thread_retention import ThreadEraser
from bot.threads import Conversation, ThreadStore
from bot.turns import StatusProvider, StopResult, TurnAsk
from channels.base import Channel
from channels.types import Action, InboundMessage
from config.schema import Settings
from connections import ConnectionStore

if TYPE_CHECKING:  # the agent's types, not its LangChain imports: `serve` loads those in the background
    from agent.events import Agent, TrustLevel
    from agent.goals import GoalKeeper
    from agent.memory import MemoryService
    from bot.agents.directory import AgentDirectory

COMMAND_PATTERN = re.compile(
    r"^/(?P<name>[A-Za-z][A-Za-z0-9_-]{0,31})(?:@(?P<bot>[A-Za-z0-9_.\-]+))?(?:\s+(?P<args>.*))?$", re.S
)
LEADING_MENTION = re.compile(r"^\s*(?:<@[^>]+>|@[\w.\-]+)\s+(?=/)")


@dataclass(frozen=True, slots=True)
class ParsedCommand:
    name: str
    args: str


def parse_command(text: str) -> ParsedCommand | None:
    """``/cmd args``, ``/cmd@bot args`` and ``@bot /cmd args`` are commands; other text is not."""
    stripped = LEADING_MENTION.sub("", text.strip(), count=1)
    match = COMMAND_PATTERN.match(stripped)
    if not match:
        return None
    return ParsedCommand(name=match.group("name").lower(), args=(match.group("args") or "").strip())


class CommandHost(Protocol):
    """What commands may use of the service: stores, the agent, and a few questions and actions.

    Read-only properties, so the manager's plain attributes satisfy them."""

    @property
    def settings(self) -> Settings: ...
    @property
    def agent(self) -> Agent: ...
    @property
    def threads(self) -> ThreadStore: ...
    @property
    def channels(self) -> Mapping[str, Channel]: ...
    @property
    def connections(self) -> ConnectionStore | None: ...
    @property
    def schedules(self) -> ScheduleBook | None: ...
    @property
    def approvals(self) -> ApprovalDesk | None: ...
    @property
    def spend(self) -> SpendKeeper | None: ...
    @property
    def pairing(self) -> PairingStore | None: ...
    @property
    def status_providers(self) -> Sequence[StatusProvider]: ...
    @property
    def eraser(self) -> ThreadEraser | None: ...
    @property
    def agents(self) -> AgentDirectory | None:
        """Named agents and their bindings (``/agent``); None: only the built-in agent."""
        ...

    @property
    def tasks(self) -> TaskDesk | None: ...

    def listed_commands(self) -> Sequence[Command]:
        """The chat commands, by name (what ``/help`` lists)."""
        ...

    def is_admin(self, message: InboundMessage) -> bool: ...
    def model_for(self, conversation: Conversation) -> str: ...
    def lane_state(self, thread_id: str) -> str: ...
    async def conversation_for(self, message: InboundMessage, identity: Identity) -> Conversation: ...

    async def send_notice(
        self,
        message: InboundMessage,
        text: str,
        *,
        private: bool = False,
        actions: Sequence[Action] = (),
        resume_ref: str | None = None,
    ) -> str | None: ...

    async def submit_turn(self, message: InboundMessage, identity: Identity, ask: TurnAsk) -> None: ...

    async def stop_turn(
        self, message: InboundMessage, thread_id: str, token: str | None = None
    ) -> StopResult: ...

    async def publish(self, message: InboundMessage) -> bool:
        """Hand a message to the bus again, as if it had just arrived (``/pair`` does)."""
        ...


@dataclass(slots=True)
class CommandContext:
    host: CommandHost
    message: InboundMessage
    identity: Identity
    args: str
    entry_id: str | None = None
    replies: list[str] = field(default_factory=list)
    #: Answer only the person who asked, where the platform can (see :attr:`Command.private`).
    private: bool = False
    #: The sender's trust level (bot/trust.py); a turn the command starts runs at it.
    trust: TrustLevel = "guest"

    @property
    def connections(self) -> ConnectionStore | None:
        """Where ``/connect`` binds accounts (None: this server runs without connections)."""
        return self.host.connections

    @property
    def goals(self) -> GoalKeeper | None:
        """The agent's goal keeper, or None when the agent has no goals."""
        return self.host.agent.goals

    @property
    def schedules(self) -> ScheduleBook | None:
        """Scheduled tasks of this service, or None when they are off."""
        return self.host.schedules

    @property
    def memory(self) -> MemoryService | None:
        """The agent's memory, or None when memory is turned off."""
        return self.host.agent.memory

    async def conversation(self) -> Conversation:
        return await self.host.conversation_for(self.message, self.identity)

    async def reply(self, text: str) -> None:
        """Answer in the conversation with one message."""
        await self.host.send_notice(self.message, text, private=self.private)
        self.replies.append(text)

    async def start_turn(self, text: str, *, hidden: bool = False, system_prompt: str | None = None) -> None:
        """Run ``text`` as a turn on this conversation's thread (queued behind a running one)."""
        await self.host.submit_turn(
            self.message,
            self.identity,
            TurnAsk(
                text=text,
                hidden=hidden,
                system_prompt=system_prompt,
                entry_id=self.entry_id,
                trust=self.trust,
            ),
        )
        self.entry_id = None  # the turn now owns completing the inbox entry


Handler = Callable[[CommandContext], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    help: str
    handler: Handler
    usage: str = ""
    aliases: tuple[str, ...] = ()
    #: Runs before the identity gate and allow-lists (only /connect and /start need this).
    before_gate: bool = False
    #: The answer is about the person who asked (their usage, their memory): where the platform can show
    #: a message to one person only (Slack and Discord ephemeral answers), only they see it.
    private: bool = False
    #: A guest (docs/security.md) may use it too. Off by default: a new command is for members.
    guests: bool = False
