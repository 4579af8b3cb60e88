"""Wires the agent's memory and goals into the manager: tables, after-turn hooks and a /status line.

Memory: after every turn that did not fail, the owner's conversation is noted for (debounced) fact
extraction. Goals: after every turn on a thread with an active goal, the goal keeper decides whether to
continue (a hidden follow-up turn with a visible "continuing" notice) or stop (a notice saying why).
"""

from __future__ import annotations

from typing import Any

from agent import tables as agent_tables
from agent.goals import GoalKeeper
from agent.memory import MemoryService
from bot.features import Feature
from bot.manager import ChannelManager, FollowUp, TurnOutcome
from bot.threads import Conversation


def memory_hook(manager: ChannelManager, memory: MemoryService):  # type: ignore[no-untyped-def]
    async def after_turn(outcome: TurnOutcome) -> FollowUp | None:
        if not outcome.failed:
            await memory.turn_finished(
                outcome.identity.owner,
                outcome.conversation.thread_id,
                manager.model_for(outcome.conversation),
            )
        return None

    return after_turn


def goal_hook(manager: ChannelManager, goals: GoalKeeper):  # type: ignore[no-untyped-def]
    async def after_turn(outcome: TurnOutcome) -> FollowUp | None:
        step = await goals.after_turn(
            outcome.conversation.thread_id,
            outcome.text,
            hidden=outcome.hidden,
            stopped=outcome.stopped,
            failed=outcome.failed,
            model=manager.model_for(outcome.conversation),
        )
        if step is None:
            return None
        if step.continue_with:
            return FollowUp(text=step.continue_with, hidden=True, notice=step.notice)
        if step.notice:
            await manager.send_notice(outcome.message, step.notice)
        return None

    return after_turn


def goal_status(goals: GoalKeeper):  # type: ignore[no-untyped-def]
    async def status(conversation: Conversation) -> str | None:
        goal = await goals.store.get(conversation.thread_id)
        if goal is None:
            return "Goal: none"
        if goal.active:
            return f"Goal: {goal.objective} ({goal.continuations}/{goals.max_continuations} continuations)"
        return f"Goal: {goal.objective} ({goal.status.replace('_', ' ')})"

    return status


class AgentFeature(Feature):
    name = "agent"

    def tables(self) -> list[Any]:
        return [agent_tables.metadata]

    async def start(self, service: Any) -> None:
        manager: ChannelManager = service.manager
        memory = getattr(service.agent, "memory", None)
        goals = getattr(service.agent, "goals", None)
        if isinstance(memory, MemoryService):
            manager.after_turn_hooks.append(memory_hook(manager, memory))
        if isinstance(goals, GoalKeeper):
            manager.after_turn_hooks.append(goal_hook(manager, goals))
            manager.status_providers.append(goal_status(goals))


FEATURE = AgentFeature()
