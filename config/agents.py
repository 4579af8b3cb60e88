"""Named agents and the bindings that choose one for a message (docs/agents.md).

An agent is a persona with its own prompt, model, tools, skills, MCP servers, approval policy, memory
switch and group context. A binding names a place (a platform, a workspace, a chat, a thread) and the
agent that answers there; the most specific matching binding wins. With no ``agents`` configured the
service runs its one built-in agent, exactly as before.

Names that point elsewhere in the configuration (models, MCP servers, tools, agents) are checked here,
with the whole settings in view, so ``switchboard config check`` names every dangling one at once.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from config.base import Section

#: The agent's built-in tools (agent/tools.py ``TOOLS``; a test keeps the two equal). ``config`` may not
#: import ``agent``, and a misspelt tool must fail at ``config check``, not when the first turn runs.
BUILTIN_TOOLS = frozenset(
    {
        "bash",
        "ls",
        "read_file",
        "write_file",
        "str_replace",
        "present_files",
        "web_fetch",
        "web_search",
        "load_skill",
        "schedule_task",
        "list_scheduled_tasks",
        "cancel_scheduled_task",
        "task",
    }
)
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
#: The largest ``ambient`` window: each message costs prompt tokens on every mention.
MAX_AMBIENT = 50


class AmbientContext(Section):
    """Read the room: the last ``ambient`` messages of a group chat the bot saw go into each turn."""

    ambient: int = Field(ge=1, le=MAX_AMBIENT)


class NamedAgent(Section):
    """One agent. Every key but ``name`` is optional; an omitted key means the service-wide setting."""

    name: str
    #: The agent's system prompt (replaces ``agent.system_prompt``). A persona kept in a file is
    #: ``system_prompt_file: path`` (the loader reads any ``<key>_file`` into ``<key>``).
    system_prompt: str | None = None
    #: The agent's model (a ``models[].name``); None: the first model. ``/models`` still overrides it.
    model: str | None = None
    #: Models tried in order when ``model`` cannot be reached (a model error, not a refusal).
    fallback_models: list[str] = Field(default_factory=list)
    #: Built-in tools the agent may use (``[]``: none, chat only); None: all of them.
    tools: list[str] | None = None
    #: Skills (folder names under ``skills_dir``) it may load; None: all.
    skills: list[str] | None = None
    #: ``mcp_servers[].name`` whose tools it gets; None: all configured servers.
    mcp_servers: list[str] | None = None
    #: Which ``bash`` commands wait for approval under this agent; None: ``sandbox.approval``.
    approval: Literal["never", "risky", "always"] | None = None
    #: Per-person memory (facts remembered across threads) for this agent's turns.
    memory: bool = True
    #: ``mentions``: a turn sees only the messages addressed to the bot (its thread). ``{ambient: N}``:
    #: also the last N messages of the group chat, with who wrote them (never in a DM).
    context: Literal["mentions"] | AmbientContext = "mentions"
    #: A chat admin may switch a chat to this agent with ``/agent NAME``.
    switchable: bool = False

    @field_validator("name")
    @classmethod
    def _name_shape(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(
                f"agent name {value!r}: use 1-40 lower-case letters, digits, - or _ (it is typed in /agent)"
            )
        return value

    @field_validator("tools")
    @classmethod
    def _known_tools(cls, value: list[str] | None) -> list[str] | None:
        unknown = sorted(set(value or ()) - BUILTIN_TOOLS)
        if unknown:
            raise ValueError(
                f"unknown tool(s) {', '.join(unknown)}; built-in tools are {', '.join(sorted(BUILTIN_TOOLS))}"
            )
        return value

    @property
    def ambient(self) -> int:
        """How many room messages a turn sees (0: mentions only)."""
        return self.context.ambient if isinstance(self.context, AmbientContext) else 0

    def prompt(self) -> str | None:
        """The agent's own system prompt (None: ``agent.system_prompt``)."""
        return self.system_prompt.strip() if self.system_prompt else None


class AgentBinding(Section):
    """Where an agent answers. Every key given must match; a binding with none is the default.

    Specificity, most specific first: ``topic`` (a thread), ``chat``, ``workspace`` + ``role``,
    ``workspace``, ``provider``, the default. ``role`` matches the sender's platform role, where the
    platform event carries one (Discord roles); a binding with a role never matches elsewhere.
    """

    agent: str
    provider: str | None = None
    workspace: str | None = None
    chat: str | None = None
    topic: str | None = None
    role: str | None = None

    @model_validator(mode="after")
    def _topic_needs_chat(self) -> AgentBinding:
        if self.topic is not None and self.chat is None:
            raise ValueError("a binding with topic also needs chat (a thread lives in one chat)")
        return self

    @property
    def rank(self) -> int:
        """Higher is more specific."""
        if self.topic is not None:
            return 5
        if self.chat is not None:
            return 4
        if self.role is not None:
            return 3
        if self.workspace is not None:
            return 2
        return 1 if self.provider is not None else 0

    def describe(self) -> str:
        parts = [
            f"{key} {value}"
            for key, value in (
                ("provider", self.provider),
                ("workspace", self.workspace),
                ("chat", self.chat),
                ("topic", self.topic),
                ("role", self.role),
            )
            if value is not None
        ]
        return ", ".join(parts) if parts else "the default binding"


def agent_problems(
    agents: list[NamedAgent],
    bindings: list[AgentBinding],
    *,
    models: set[str],
    mcp_servers: set[str],
    github_agents: dict[str, str | None],
) -> list[str]:
    """Every name in ``agents``/``bindings`` that points at nothing, one sentence each."""
    problems: list[str] = []
    names = [a.name for a in agents]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        problems.append(f"agents: names must be unique; repeated: {', '.join(repeated)}")
    known = set(names)
    for index, agent in enumerate(agents):
        where = f"agents.{index} ({agent.name})"
        for model in [m for m in (agent.model, *agent.fallback_models) if m is not None]:
            if model not in models:
                problems.append(f"{where}: unknown model {model!r}; models are {', '.join(sorted(models))}")
        for server in agent.mcp_servers or ():
            if server not in mcp_servers:
                listed = ", ".join(sorted(mcp_servers)) or "none configured"
                problems.append(f"{where}: unknown MCP server {server!r} (mcp_servers: {listed})")
    for index, binding in enumerate(bindings):
        if binding.agent not in known:
            listed = ", ".join(sorted(known)) or "no agents are configured"
            problems.append(f"bindings.{index}: binding to unknown agent {binding.agent!r} ({listed})")
    defaults = [i for i, b in enumerate(bindings) if b.rank == 0]
    if len(defaults) > 1:
        problems.append(f"bindings: more than one default binding (entries {', '.join(map(str, defaults))})")
    for github, agent_name in github_agents.items():
        if agent_name is not None and agent_name not in known:
            problems.append(f"channels.github.agents ({github}): agent {agent_name!r} is not in agents")
    return problems
