"""Whose and where a turn's spending counts: owner, chat, agent and schedule.

:func:`agent_of` is the agent name when no named agent answers (bot/agents/ chose none): the GitHub agent
the delivery was for, else ``default``. A named agent's turn counts under that agent's name
(:meth:`bot.spend.keeper.SpendKeeper.key`, from the choice the turn runner made before the check).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bot.schedules import OCCURRENCE_PREFIX
from channels.types import InboundMessage

Scope = Literal["owner", "chat", "agent", "schedule"]
SCOPES: tuple[Scope, ...] = ("owner", "chat", "agent", "schedule")
DEFAULT_AGENT = "default"


def agent_of(message: InboundMessage) -> str:
    """The agent a turn of this message runs as (see the module doc)."""
    if message.provider == "github":
        name = message.context.get("agent")
        if isinstance(name, str) and name:
            return name
    return DEFAULT_AGENT


def chat_of(message: InboundMessage) -> str:
    """The chat a turn counts for: provider, workspace and chat (topics and threads of it share it)."""
    return "/".join((message.provider, message.workspace or "-", message.chat))


def schedule_of(message: InboundMessage) -> str:
    """The schedule whose occurrence this message is (``schedule:<id>:<due>``), or ``""``."""
    if not message.platform_message_id.startswith(OCCURRENCE_PREFIX):
        return ""
    return message.platform_message_id[len(OCCURRENCE_PREFIX) :].rsplit(":", 1)[0]


@dataclass(frozen=True, slots=True)
class SpendKey:
    """The four scopes of one turn."""

    owner: str
    chat: str
    agent: str
    schedule: str = ""

    @classmethod
    def of(cls, message: InboundMessage, owner: str, agent: str | None = None) -> SpendKey:
        return cls(owner, chat_of(message), agent or agent_of(message), schedule_of(message))

    def value(self, scope: Scope) -> str:
        return {"owner": self.owner, "chat": self.chat, "agent": self.agent, "schedule": self.schedule}[scope]
