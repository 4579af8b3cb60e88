"""The agent seam: what goes in (a :class:`TurnRequest`) and what comes out (events).

The manager only knows these types. Anything richer (graphs, checkpointers, tools) stays inside
``agent/`` so it can change without touching the bot.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from langchain_core.callbacks import BaseCallbackHandler

    from agent.goals import GoalKeeper
    from agent.memory import MemoryService


class TaskScheduler(Protocol):
    """Scheduled tasks for this turn's chat and person, for the agent's schedule tools.

    The bot binds one to each turn (the agent knows neither chats nor the database); every method
    answers with a sentence for the model to pass on, never raises for bad input.
    """

    async def add(self, when_and_what: str) -> str: ...

    async def listing(self) -> str: ...

    async def cancel(self, schedule_id: str) -> str: ...


#: Where a background task stands; ``waiting`` is waiting for an approval in the chat.
TaskStatus = Literal["queued", "running", "waiting", "done", "failed", "stopped"]


class TaskReporter(Protocol):
    """Background work inside a turn (a subagent started by the ``task`` tool, a long tool call), shown to
    the chat as one task card that is edited in place.

    The bot binds one to each turn (the agent knows neither chats nor cards). ``task_id`` is chosen by the
    agent and is stable across a redelivered turn (derived from the thread and the tool call), so after a
    restart the same card is found and continued, and its result delivered once. ``stop_requested`` is set
    when a person presses Stop on the card or sends ``/stop``: the agent ends that task (and the sandbox
    processes it started) and reports it ``stopped``. No method raises for a card that cannot be shown.
    """

    async def started(self, *, task_id: str, title: str, kind: str) -> None: ...

    async def step(self, *, task_id: str, text: str, status: TaskStatus = "running") -> None: ...

    async def finished(self, *, task_id: str, status: TaskStatus, result: str) -> None: ...

    def stop_requested(self, task_id: str) -> asyncio.Event: ...


@dataclass(frozen=True, slots=True)
class ApprovalDecision:
    """A person's answer to an approval request; ``note`` is the sentence the model gets."""

    approved: bool
    note: str


#: Who sent a turn, decided at the edge by the bot (docs/security.md): ``admin`` (a channel admin),
#: ``member`` (allowed on that platform) or ``guest`` (anyone else).
TrustLevel = Literal["admin", "member", "guest"]


class ApprovalGate(Protocol):
    """Asks the people in this turn's chat to approve one command, and waits for the answer.

    The bot binds one to each turn. It never raises for a refusal: a denial, a timeout or a restart is
    an :class:`ApprovalDecision` with ``approved=False`` and a sentence saying which. ``patterns`` is
    what an "allow for this conversation" answer would cover (``git push``; empty: only this once);
    ``trust`` is the turn's sender's level (a guest's command needs an admin's yes).
    """

    async def approve(
        self, command: str, reason: str, *, patterns: Sequence[str] = (), trust: TrustLevel = "member"
    ) -> ApprovalDecision: ...


@dataclass(frozen=True, slots=True)
class ToolProfile:
    """What one turn's agent may do. The bot picks it from the sender's trust level; the runtime enforces it.

    Why here and not in the bot: the runtime is the one place every tool call passes, so a tool outside the
    profile is neither offered to the model nor run if the model asks for it anyway (a prompt-injected
    guest turn cannot talk its way into ``bash``). ``tools`` None means every tool the runtime has;
    otherwise only the built-in tools named. ``why`` is the sentence a refused call gives the model.
    """

    name: str
    tools: frozenset[str] | None = None
    mcp: bool = True
    secrets: bool = True
    why: str = ""
    #: MCP servers whose tools (``<server>__<tool>``) are allowed; None: every server's (a named agent's
    #: ``mcp_servers``, docs/agents.md).
    mcp_servers: frozenset[str] | None = None
    #: Skills the turn may see and load; None: all.
    skills: frozenset[str] | None = None

    def allows(self, tool: str, *, is_mcp: bool = False) -> bool:
        if is_mcp:
            if not self.mcp:
                return False
            if self.mcp_servers is not None:
                return tool.partition("__")[0] in self.mcp_servers
            return self.tools is None or tool in self.tools
        return self.tools is None or tool in self.tools

    def allows_skill(self, skill: str) -> bool:
        return self.skills is None or skill in self.skills


#: Everything the runtime offers (members and admins, under the default policy).
FULL_PROFILE = ToolProfile("full")
#: Talk, and read the conversation's own files: no shell, no writes, no schedules, no MCP, no secrets.
CHAT_ONLY_PROFILE = ToolProfile(
    "chat_only",
    tools=frozenset({"ls", "read_file", "load_skill"}),
    mcp=False,
    secrets=False,
    why=(
        "this conversation's sender is a guest, who may chat but may not make the agent run commands, change"
        " files, schedule tasks, use external tools or see credentials"
    ),
)


@dataclass(slots=True)
class TurnRequest:
    """One turn of a thread.

    ``hidden`` turns (goal continuations) are not shown as user input; ``secrets`` are environment
    values for this run's sandbox commands only (e.g. ``GH_TOKEN``), masked in anything shown.
    """

    thread_id: str
    owner: str
    text: str
    model: str | None = None
    attachments: list[str] = field(default_factory=list)
    hidden: bool = False
    system_prompt: str | None = None
    secrets: dict[str, str] = field(default_factory=dict)
    sender_name: str | None = None
    #: A skill a person asked for with ``/skill-name``: its full text goes into this turn's prompt.
    skill: str | None = None
    #: Scheduled tasks in this turn's chat, as this turn's person (None: the tools say "not available").
    scheduler: TaskScheduler | None = None
    #: Where risky commands are approved (None: nobody can be asked, so risky commands do not run).
    approvals: ApprovalGate | None = None
    #: This chat's override of ``sandbox.approval`` (an admin's ``/approval``); None: the service's.
    approval_mode: Literal["never", "risky", "always"] | None = None
    #: The sender's trust level and what it may make the agent do (decided at the edge by the bot).
    trust: TrustLevel = "member"
    profile: ToolProfile = FULL_PROFILE
    #: Shown with the run in LangSmith / Langfuse (the bot's trace id, provider, thread): docs/operations.md.
    metadata: dict[str, str] = field(default_factory=dict)
    #: LangChain callbacks for this run (the bot's OpenTelemetry step spans).
    callbacks: list[BaseCallbackHandler] = field(default_factory=list)
    #: Task cards for background work in this turn (subagents); None: tasks run without a card.
    tasks: TaskReporter | None = None
    #: Models tried in order when ``model`` fails (a named agent's ``fallback_models``).
    fallbacks: tuple[str, ...] = ()
    #: The person's memory is read into this turn's prompt (a named agent's ``memory: false`` turns it off).
    memory: bool = True


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class TextWithdrawn:
    """The last ``chars`` characters streamed so far are taken back: the model's answer was cut off and
    it is being asked again (agent/stream_end.py). The live reply drops them; the final text never had them."""

    chars: int


@dataclass(frozen=True, slots=True)
class ToolStarted:
    name: str
    summary: str = ""


@dataclass(frozen=True, slots=True)
class ToolFinished:
    name: str
    ok: bool = True
    summary: str = ""


@dataclass(frozen=True, slots=True)
class TurnFinished:
    """The last event of a successful turn: the full visible answer and files to deliver."""

    text: str
    files: tuple[Path, ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0
    #: Of ``input_tokens``, those the provider served from its prompt cache (priced apart: bot/spend/).
    cached_tokens: int = 0
    #: The configured model (``models[].name``) the turn ran on: its pricing applies.
    model: str = ""


AgentEvent = TextDelta | TextWithdrawn | ToolStarted | ToolFinished | TurnFinished


class Agent(Protocol):
    """What the manager needs from the agent runtime."""

    def run(self, request: TurnRequest) -> AsyncIterator[AgentEvent]:
        """Stream one turn. Cancelling the consuming task cancels the turn (and any running tool)."""
        ...

    def model_names(self) -> list[str]: ...

    def skill_names(self) -> list[str]:
        """Skills a person can ask for with ``/skill-name`` (empty when the agent has none)."""
        ...

    def tool_descriptions(self) -> list[tuple[str, str]]:
        """(name, one line) for every tool the model is offered, for ``/tools``."""
        ...

    def mcp_status(self) -> dict[str, str]:
        """Each MCP server: ``ok (N tools)`` or ``error: …`` (empty without MCP servers)."""
        ...

    def sandbox_limits(self) -> dict[str, object]:
        """Which sandbox protections and limits are in force (seccomp, user namespaces, memory, disk)."""
        ...

    async def storage_problem(self) -> str | None:
        """None when the agent can store checkpoints now; else why not, in a few words (for /ready)."""
        ...

    async def close(self) -> None: ...

    # Optional capabilities, declared here so callers ask the agent instead of probing it: None = off.
    @property
    def goals(self) -> GoalKeeper | None: ...

    @property
    def memory(self) -> MemoryService | None: ...
