"""Wires the agent's memory and goals into the manager: tables, after-turn hooks and a /status line.

Memory: after every turn that did not fail, the owner's conversation is noted for (debounced) fact
extraction. Goals: after every turn on a thread with an active goal, the goal keeper decides whether to
continue (a recorded, hidden follow-up turn that streams into the goal's task card) or stop (the card
ends saying why); :class:`bot.goal_runner.GoalRunner` runs and resumes those steps. Both are optional capabilities
the :class:`~agent.events.Agent` protocol declares (``None`` when off).

Unlike the other features it starts once the agent is built (``serve`` takes input before that), and
what it imports (LangChain message types, via the goal runner) is imported only then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import MetaData

from agent import tables as agent_tables
from agent.events import Agent
from bot.manager import ChannelManager
from bot.turns import AfterTurnHook, FollowUp, TurnOutcome

if TYPE_CHECKING:
    from agent.memory import MemoryService


def memory_hook(manager: ChannelManager, memory: MemoryService) -> AfterTurnHook:
    async def after_turn(outcome: TurnOutcome) -> FollowUp | None:
        agents = manager.agents  # a named agent with ``memory: false`` keeps nothing (docs/agents.md)
        if agents is not None and not await agents.remembers(outcome.conversation.thread_id):
            return None
        if not outcome.failed:
            await memory.turn_finished(
                outcome.identity.owner,
                outcome.conversation.thread_id,
                manager.model_for(outcome.conversation),
            )
        return None

    return after_turn


class AgentFeature:
    name = "agent"

    def tables(self) -> list[MetaData]:
        return [agent_tables.metadata]

    async def start(self, agent: Agent, manager: ChannelManager) -> None:
        from bot.goal_runner import GoalRunner  # LangChain message types: loaded with the agent

        # Memory first: it notes the finished turn before a goal may queue a continuation after it.
        if agent.memory is not None:
            manager.after_turn_hooks.append(memory_hook(manager, agent.memory))
        if agent.goals is not None:
            runner = GoalRunner(manager, agent.goals)  # durable continuations: bot/goal_runner.py
            manager.after_turn_hooks.append(runner.after_turn)
            manager.status_providers.append(runner.status)
            await runner.resume()
