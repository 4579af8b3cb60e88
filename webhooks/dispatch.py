"""Fan-out: one inbound message per matching agent, published to the bus.

The message for an agent is keyed so every layer dedupes on its own: the inbox on
``platform_message_id = "<delivery>:<agent>"`` (a retried delivery never re-runs an agent that already
got it), the conversation on (repo, number, agent) and the thread id is a UUID5 of
repo#number, agent and owner — the same thread for every delivery about that issue or pull request.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from channels.base import InboundSink
from channels.types import InboundMessage, Sender, Trust
from config.channels.github import GitHubAgent, GitHubConfig
from webhooks.events import GitHubEvent, build_prompt
from webhooks.triggers import binding_for, decision_command, effective_trigger, evaluate, mentions
from webhooks.trust import Standing, standing

#: Fixed namespace so thread ids are reproducible across processes and versions.
THREAD_NAMESPACE = uuid.UUID("6f1c2a4e-9b3d-5e7f-8a1b-2c3d4e5f6a7b")


def thread_id_for(repo: str, number: int, agent: str, owner: str) -> str:
    return uuid.uuid5(THREAD_NAMESPACE, f"{repo.lower()}#{number}|{agent}|{owner}").hex


@dataclass(slots=True)
class DispatchResult:
    """Who fired and why the others did not; ``trust`` says as what each matched agent's turn runs."""

    matched: list[str] = field(default_factory=list)
    fired: list[str] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    trust: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "matched": list(self.matched),
            "fired": list(self.fired),
            "skipped": list(self.skipped),
            "trust": list(self.trust),
        }


@dataclass(frozen=True, slots=True)
class Firing:
    """One agent a delivery starts: as whom, and whether the comment is an approval decision."""

    agent: GitHubAgent
    standing: Standing
    #: ``/approve ID`` or ``/deny ID`` when the comment decides an approval (answered as that command).
    command: str | None = None


def build_message(
    delivery_id: str,
    event: GitHubEvent,
    agent: GitHubAgent,
    *,
    trust: Trust = "member",
    command: str | None = None,
) -> InboundMessage:
    """The agent's message. A guest's prompt does not offer ``GH_TOKEN`` (its run gets none)."""
    owner = agent.owner_id
    return InboundMessage(
        provider="github",
        workspace=event.repo,
        chat=str(event.number),
        topic=agent.name,
        sender=Sender(id=event.author_id, name=event.author_login, is_bot=event.author_is_bot),
        text=command or build_prompt(event, token=trust != "guest"),
        platform_message_id=f"{delivery_id}:{agent.name}",
        mentioned=mentions(event.text, agent.bot_login),
        context={
            "installation_id": agent.installation_id or event.installation_id,
            "repo": event.repo,
            "number": event.number,
            "agent": agent.name,
            "owner": owner,
            "kind": event.kind,
            "comment_kind": event.name,
            "action": event.action,
            "url": event.url,
        },
        thread_id=thread_id_for(event.repo, event.number, agent.name, owner),
        trust=trust,
    )


def plan(config: GitHubConfig, event: GitHubEvent) -> tuple[list[Firing], DispatchResult]:
    """Which agents the event fires (pure: no I/O), with the reasons for the others.

    A guest's event fires an agent only when that agent lets guests chat (``guests: chat_only``); else
    the reason says who the author is and why that is not enough (docs/security.md).
    """
    result = DispatchResult()
    firings = []
    channel_admins = frozenset(config.admins)
    for agent in config.agents:
        fires, reason = evaluate(agent, event)
        if fires and (agent.installation_id or event.installation_id) is None:
            # Without an installation there is no token to reply with; running would only fail later.
            fires, reason = False, "no installation id (install the App on the repo, or set installation_id)"
        if not fires:
            result.skipped.append({"agent": agent.name, "reason": reason or "not triggered"})
            continue
        who = standing(agent, event, channel_admins)
        if who.level == "guest" and agent.guests == "ignore":
            result.skipped.append(
                {
                    "agent": agent.name,
                    "reason": f"@{event.author_login} is a guest ({who.why}) and {agent.name} has guests: ignore",
                }
            )
            continue
        firings.append(Firing(agent, who, _command(agent, event)))
        result.matched.append(agent.name)
        why = who.why + (
            "; guests: chat_only (no shell, no file writes, no GH_TOKEN)" if who.level == "guest" else ""
        )
        result.trust.append({"agent": agent.name, "level": who.level, "why": why})
    return firings, result


def _command(agent: GitHubAgent, event: GitHubEvent) -> str | None:
    binding = binding_for(agent, event.repo)
    trigger = effective_trigger(agent, binding, event.name) if binding is not None else None
    logins = (agent.bot_login, trigger.mention_login) if trigger is not None else (agent.bot_login,)
    return decision_command(event, logins)


async def publish(
    delivery_id: str, event: GitHubEvent, firings: list[Firing], result: DispatchResult, sink: InboundSink
) -> DispatchResult:
    """Hand each matching agent its message. Raises whatever the sink raises (e.g. Backpressure)."""
    for firing in firings:
        message = build_message(
            delivery_id, event, firing.agent, trust=firing.standing.level, command=firing.command
        )
        if await sink(message):
            result.fired.append(firing.agent.name)
        else:
            result.skipped.append({"agent": firing.agent.name, "reason": "already delivered"})
    return result
