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
from channels.types import InboundMessage, Sender
from config.channels.github import GitHubAgent, GitHubConfig
from webhooks.events import GitHubEvent, build_prompt
from webhooks.triggers import evaluate, mentions

#: Fixed namespace so thread ids are reproducible across processes and versions.
THREAD_NAMESPACE = uuid.UUID("6f1c2a4e-9b3d-5e7f-8a1b-2c3d4e5f6a7b")


def thread_id_for(repo: str, number: int, agent: str, owner: str) -> str:
    return uuid.uuid5(THREAD_NAMESPACE, f"{repo.lower()}#{number}|{agent}|{owner}").hex


@dataclass(slots=True)
class DispatchResult:
    matched: list[str] = field(default_factory=list)
    fired: list[str] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"matched": list(self.matched), "fired": list(self.fired), "skipped": list(self.skipped)}


def build_message(delivery_id: str, event: GitHubEvent, agent: GitHubAgent) -> InboundMessage:
    owner = agent.owner_id
    return InboundMessage(
        provider="github",
        workspace=event.repo,
        chat=str(event.number),
        topic=agent.name,
        sender=Sender(id=event.author_id, name=event.author_login, is_bot=event.author_is_bot),
        text=build_prompt(event),
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
    )


def plan(config: GitHubConfig, event: GitHubEvent) -> tuple[list[GitHubAgent], DispatchResult]:
    """Which agents the event fires (pure: no I/O), with the reasons for the others."""
    result = DispatchResult()
    agents = []
    for agent in config.agents:
        fires, reason = evaluate(agent, event)
        if fires and (agent.installation_id or event.installation_id) is None:
            # Without an installation there is no token to reply with; running would only fail later.
            fires, reason = False, "no installation id (install the App on the repo, or set installation_id)"
        if fires:
            agents.append(agent)
            result.matched.append(agent.name)
        else:
            result.skipped.append({"agent": agent.name, "reason": reason or "not triggered"})
    return agents, result


async def publish(
    delivery_id: str, event: GitHubEvent, agents: list[GitHubAgent], result: DispatchResult, sink: InboundSink
) -> DispatchResult:
    """Hand each matching agent its message. Raises whatever the sink raises (e.g. Backpressure)."""
    for agent in agents:
        if await sink(build_message(delivery_id, event, agent)):
            result.fired.append(agent.name)
        else:
            result.skipped.append({"agent": agent.name, "reason": "already delivered"})
    return result
