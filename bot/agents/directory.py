"""Which named agent answers a message, and why (docs/agents.md).

Order: the agent the thread started with (a thread keeps its agent, so changing a binding never
changes a conversation half way), then a chat admin's ``/agent NAME`` for the chat, then the most
specific binding (thread → chat → workspace + role → workspace → platform → default), then — for GitHub —
the App's ``agent``; with none of these, the built-in agent (``agent.system_prompt``, every tool).

The choice is stored in ``agent_choices``: one row per thread (written when its first turn runs) and one
per chat an admin switched. With SQLite (one process) rows are cached; with PostgreSQL every instance
reads them, so a switch on one instance holds on all.

Applying a choice to a turn (:meth:`AgentDirectory.prepare`) narrows, never widens: the agent's tools
are intersected with what the sender's trust level allows, and a person's ``/models`` or a chat's
``/approval`` still win over the agent's defaults.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, replace

from sqlalchemy import Column, Float, MetaData, String, Table, select
from sqlalchemy.dialects import postgresql, sqlite

from agent.events import ToolProfile, TurnRequest
from bot.agents.room import RoomLog, room_block
from bot.db import Database
from bot.threads import Conversation
from channels.types import InboundMessage
from config.agents import AgentBinding, NamedAgent
from config.schema import Settings

log = logging.getLogger(__name__)

metadata = MetaData()
agent_choices_table = Table(
    "agent_choices",
    metadata,
    # ``thread\x1f<thread id>`` or ``chat\x1f<provider>\x1f<workspace>\x1f<chat>``.
    Column("scope", String(700), primary_key=True),
    # A named agent, or "" for the built-in agent.
    Column("agent", String(64), nullable=False),
    Column("updated_at", Float, nullable=False),
)

BUILT_IN = ""
CACHE_SIZE = 50_000
_SEP = "\x1f"


def thread_scope(thread_id: str) -> str:
    return f"thread{_SEP}{thread_id}"


def chat_scope(message: InboundMessage) -> str:
    return _SEP.join(("chat", message.provider, message.workspace, message.chat))


@dataclass(frozen=True, slots=True)
class AgentChoice:
    """The agent for a message (None: the built-in one), the sentence saying why, and whether the thread
    already keeps it."""

    agent: NamedAgent | None
    why: str
    kept: bool = False

    @property
    def name(self) -> str:
        return self.agent.name if self.agent is not None else "built-in"


def _matches(binding: AgentBinding, message: InboundMessage) -> bool:
    roles = message.context.get("roles")
    checks = (
        (binding.provider, message.provider),
        (binding.workspace, message.workspace),
        (binding.chat, message.chat),
        (binding.topic, message.topic or ""),
    )
    if any(want is not None and want != have for want, have in checks):
        return False
    return binding.role is None or (isinstance(roles, list) and binding.role in roles)


def narrowed(profile: ToolProfile, agent: NamedAgent, servers: frozenset[str]) -> ToolProfile:
    """What a turn may use under ``agent``: the trust level's profile, narrowed to the agent's lists."""
    if agent.tools is None and agent.mcp_servers is None and agent.skills is None:
        return profile
    tools = profile.tools
    if agent.tools is not None:
        own = frozenset(agent.tools)
        tools = own if tools is None else tools & own
    mcp_servers = profile.mcp_servers
    if agent.mcp_servers is not None or agent.tools is not None:
        own_servers = frozenset(agent.mcp_servers) if agent.mcp_servers is not None else servers
        mcp_servers = own_servers if mcp_servers is None else mcp_servers & own_servers
    skills = profile.skills
    if agent.skills is not None:
        skills = frozenset(agent.skills) if skills is None else skills & frozenset(agent.skills)
    why = profile.why or f"the agent {agent.name} answering here is set up without the others"
    return replace(
        profile,
        name=f"{profile.name}+{agent.name}",
        tools=tools,
        mcp_servers=mcp_servers,
        skills=skills,
        why=why,
    )


class AgentDirectory:
    """Resolves, remembers and applies named agents. Built only when ``agents`` is configured."""

    def __init__(self, settings: Settings, db: Database) -> None:
        self.settings = settings
        self.db = db
        self.agents: dict[str, NamedAgent] = {a.name: a for a in settings.agents}
        depth = max((a.ambient for a in settings.agents), default=0)
        #: Group chats' recent messages, kept only when some agent reads the room.
        self.room: RoomLog | None = RoomLog(depth) if depth else None
        self._servers = frozenset(s.name for s in settings.mcp_servers)
        self._cache: OrderedDict[str, str | None] | None = None if not db.is_sqlite else OrderedDict()
        self._insert = (sqlite.insert if db.is_sqlite else postgresql.insert)(agent_choices_table)

    # --- storage -----------------------------------------------------------------------------------
    async def kept(self, thread_id: str) -> str | None:
        """The agent a thread keeps ("" for the built-in one); None before its first turn."""
        return await self._read(thread_scope(thread_id))

    async def _read(self, scope: str) -> str | None:
        if self._cache is not None and scope in self._cache:
            return self._cache[scope]
        async with self.db.engine.connect() as conn:
            found = (
                await conn.execute(
                    select(agent_choices_table.c.agent).where(agent_choices_table.c.scope == scope)
                )
            ).scalar_one_or_none()
        self._remember(scope, found)
        return found

    def _remember(self, scope: str, agent: str | None) -> None:
        if self._cache is None:
            return
        self._cache[scope] = agent
        self._cache.move_to_end(scope)
        while len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)

    async def _write(self, scope: str, agent: str, *, replace_existing: bool) -> str:
        """Store ``agent`` for ``scope``; unless ``replace_existing``, a row already there wins (two
        instances starting a thread's first turn agree on one agent). Returns the stored agent."""
        c = agent_choices_table.c
        row = {"scope": scope, "agent": agent, "updated_at": time.time()}
        insert = self._insert.values(row)
        statement = (
            insert.on_conflict_do_update(
                index_elements=["scope"], set_={"agent": agent, "updated_at": row["updated_at"]}
            )
            if replace_existing
            else insert.on_conflict_do_nothing(index_elements=["scope"])
        )
        async with self.db.engine.begin() as conn:
            await conn.execute(statement)
            stored = (await conn.execute(select(c.agent).where(c.scope == scope))).scalar_one()
        self._remember(scope, stored)
        return str(stored)

    # --- choosing ----------------------------------------------------------------------------------
    def bound(self, message: InboundMessage) -> AgentChoice:
        """The agent the configuration gives this place (bindings, then a GitHub App's ``agent``)."""
        best: tuple[int, int, AgentBinding] | None = None
        for index, binding in enumerate(self.settings.bindings):
            if _matches(binding, message) and (best is None or binding.rank > best[2].rank):
                best = (binding.rank, index, binding)
        if best is not None and best[2].rank > 0:
            _, index, binding = best
            return AgentChoice(self.agents.get(binding.agent), f"binding {index} ({binding.describe()})")
        if message.provider == "github":  # an App is its own default: it answers as it always did
            for app in self.settings.channels.github.agents:
                if app.name == message.topic and app.agent is not None:
                    return AgentChoice(
                        self.agents.get(app.agent), f"the GitHub agent {app.name} (channels.github.agents)"
                    )
            return AgentChoice(
                None, f"the GitHub agent {message.topic} names no agent, so the built-in one answers"
            )
        if best is not None:
            _, index, binding = best
            return AgentChoice(self.agents.get(binding.agent), f"binding {index} (the default binding)")
        return AgentChoice(None, "no binding matches here, so the built-in agent answers")

    async def configured(self, message: InboundMessage) -> AgentChoice:
        """What a new thread here would get: an admin's ``/agent`` switch for the chat, else the config."""
        switched = await self._read(chat_scope(message))
        if switched is not None and (switched == BUILT_IN or switched in self.agents):
            agent = self.agents.get(switched)
            return AgentChoice(agent, "an admin switched this chat with /agent")
        return self.bound(message)

    async def current(
        self, message: InboundMessage, conversation: Conversation, *, explain: bool = True
    ) -> AgentChoice:
        """The agent answering in this conversation now, without recording anything; ``explain`` also
        says what new threads here would get (one more read, for ``/agent``)."""
        kept = await self._read(thread_scope(conversation.thread_id))
        if kept is not None and (kept == BUILT_IN or kept in self.agents):
            why = "this thread started with it and keeps it"
            new = await self.configured(message) if explain else None
            if new is not None and new.name != (kept or "built-in"):
                why += f"; new threads here get {new.name} ({new.why})"
            return AgentChoice(self.agents.get(kept), why, kept=True)
        return await self.configured(message)

    async def choose(self, message: InboundMessage, conversation: Conversation) -> AgentChoice:
        """The agent for a turn; a thread's first turn records it, so the thread keeps it."""
        choice = await self.current(message, conversation, explain=False)
        if not choice.kept:
            stored = await self._write(
                thread_scope(conversation.thread_id),
                choice.agent.name if choice.agent else BUILT_IN,
                replace_existing=False,
            )
            if stored != (choice.agent.name if choice.agent else BUILT_IN):
                return await self.current(message, conversation, explain=False)
        return choice

    async def switch(self, message: InboundMessage, conversation: Conversation, name: str) -> None:
        """``/agent NAME``: this chat's new threads, and this conversation's thread, get ``name``."""
        stored = BUILT_IN if name == "built-in" else name
        await self._write(chat_scope(message), stored, replace_existing=True)
        await self._write(thread_scope(conversation.thread_id), stored, replace_existing=True)

    def switchable(self) -> list[str]:
        return [a.name for a in self.settings.agents if a.switchable]

    async def remembers(self, thread_id: str) -> bool:
        """Whether the thread's agent keeps the person's memory (the built-in one does)."""
        agent = self.agents.get(await self._read(thread_scope(thread_id)) or BUILT_IN)
        return agent is None or agent.memory

    # --- applying ----------------------------------------------------------------------------------
    def overheard(self, message: InboundMessage) -> None:
        """A group message not addressed to the bot (the channels call this): kept for the window."""
        if self.room is not None:
            self.room.record(message)

    async def prepare(
        self,
        request: TurnRequest,
        message: InboundMessage,
        conversation: Conversation,
        choice: AgentChoice | None = None,
    ) -> AgentChoice:
        """Fit the turn's request to its agent: prompt, model, tools, approval, memory, room window.
        ``choice``: the agent already chosen for this turn (the budget check chose it), else chosen here."""
        choice = choice or await self.choose(message, conversation)
        agent = choice.agent
        if self.room is not None and not request.hidden and message.scheduled is None:
            self.room.record(message)  # what was said to the bot is part of the room too
        if agent is None:
            return choice
        own = agent.prompt()
        if own:
            request.system_prompt = f"{own}\n\n{request.system_prompt}" if request.system_prompt else own
        window = self.room.before(message, agent.ambient) if self.room is not None else []
        if window:
            base = request.system_prompt or self.settings.agent.system_prompt
            request.system_prompt = f"{base}\n\n{room_block(window)}"
        if conversation.model is None and agent.model is not None:
            request.model = agent.model
            request.fallbacks = tuple(agent.fallback_models)
        if request.approval_mode is None:
            request.approval_mode = agent.approval
        request.memory = request.memory and agent.memory
        request.profile = narrowed(request.profile, agent, self._servers)
        tools = request.profile.tools
        if tools is not None and "bash" not in tools:  # only commands use them
            request.secrets = {}
        return choice
