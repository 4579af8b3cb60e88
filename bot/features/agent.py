"""Wires the agent's memory and goals into the manager: tables, after-turn hooks and a /status line.

Memory: after every turn that did not fail, the owner's conversation is noted for (debounced) fact
extraction. Goals: after every turn on a thread with an active goal, the goal keeper decides whether to
continue (a hidden follow-up turn with a visible "continuing" notice) or stop (a notice saying why).
Both are optional capabilities the :class:`~agent.events.Agent` protocol declares (``None`` when off).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import MetaData

from agent import tables as agent_tables
from agent.goals import GoalKeeper
from agent.memory import MemoryService
from bot.features import Running
from bot.manager import AfterTurnHook, ChannelManager, FollowUp, StatusProvider, TurnOutcome
from bot.threads import Conversation

if TYPE_CHECKING:
    from fastapi import APIRouter  # FastAPI is imported only when serving HTTP


def memory_hook(manager: ChannelManager, memory: MemoryService) -> AfterTurnHook:
    async def after_turn(outcome: TurnOutcome) -> FollowUp | None:
        if not outcome.failed:
            await memory.turn_finished(
                outcome.identity.owner,
                outcome.conversation.thread_id,
                manager.model_for(outcome.conversation),
            )
        return None

    return after_turn


def goal_hook(manager: ChannelManager, goals: GoalKeeper) -> AfterTurnHook:
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


def goal_status(goals: GoalKeeper) -> StatusProvider:
    async def status(conversation: Conversation) -> str | None:
        goal = await goals.store.get(conversation.thread_id)
        if goal is None:
            return "Goal: none"
        if goal.active:
            return f"Goal: {goal.objective} ({goal.continuations}/{goals.max_continuations} continuations)"
        return f"Goal: {goal.objective} ({goal.status.replace('_', ' ')})"

    return status


class AgentFeature:
    name = "agent"

    def tables(self) -> list[MetaData]:
        return [agent_tables.metadata]

    def routers(self) -> list[APIRouter]:
        return []

    async def start(self, running: Running) -> None:
        manager, agent = running.manager, running.agent
        # Memory first: it notes the finished turn before a goal may queue a continuation after it.
        if agent.memory is not None:
            manager.after_turn_hooks.append(memory_hook(manager, agent.memory))
        if agent.goals is not None:
            manager.after_turn_hooks.append(goal_hook(manager, agent.goals))
            manager.status_providers.append(goal_status(agent.goals))

    async def stop(self) -> None:
        return None
