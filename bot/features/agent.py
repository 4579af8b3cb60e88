"""Wires the agent's memory and goals into the manager: tables, after-turn hooks and a /status line.

Memory: after every turn that did not fail, the owner's conversation is noted for (debounced) fact
extraction. Goals: after every turn on a thread with an active goal, the goal keeper decides whether to
continue (a recorded, hidden follow-up turn with a visible "continuing" notice) or stop (a notice saying
why); :class:`bot.goal_runner.GoalRunner` runs and resumes those steps.
"""

from __future__ import annotations

from typing import Any

from agent import tables as agent_tables
from agent.goals import GoalKeeper
from agent.memory import MemoryService
from bot.features import Feature
from bot.goal_runner import GoalRunner
from bot.manager import ChannelManager, FollowUp, TurnOutcome


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
            runner = GoalRunner(manager, goals)  # durable continuations: bot/goal_runner.py
            manager.after_turn_hooks.append(runner.after_turn)
            manager.status_providers.append(runner.status)
            await runner.resume()


FEATURE = AgentFeature()
