"""Goals: an objective stored on a thread that keeps the agent working across turns.

After each turn on a thread with an active goal, :meth:`GoalKeeper.after_turn` decides what happens next:

1. a stopped or failed turn ends the goal (the user pressed /stop, or something broke);
2. a continuation that shows nothing new (empty, or the same text as an earlier goal turn) counts as
   "no progress"; two in a row end the goal — this check costs no model call;
3. otherwise an evaluator model call answers ``satisfied`` / ``continue`` / ``stand_down`` with a reason;
4. ``continue`` asks for another hidden turn, at most ``agent.max_goal_continuations`` times.

The keeper returns a :class:`GoalStep`; the bot turns it into a follow-up turn and a visible notice.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage
from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from agent.memory import parse_json_object
from agent.tables import goals

log = logging.getLogger(__name__)

NO_PROGRESS_LIMIT = 2
#: What the runtime shows when a turn produced no text; for goals that is "nothing new".
NOTHING_TO_ADD = "(I have nothing to add.)"
EVALUATOR_MARKER = "You judge whether an assistant has reached a goal"
EVALUATOR_PROMPT = f"""{EVALUATOR_MARKER}.
You get the goal and the assistant's latest reply. Answer with JSON only:
{{"decision": "satisfied" | "continue" | "stand_down", "reason": "one short sentence"}}
- satisfied: the goal is met.
- continue: real progress is possible with another step the assistant can take on its own.
- stand_down: it is blocked, needs the user, or the goal cannot be reached."""
DECISIONS = ("satisfied", "continue", "stand_down")


@dataclass(frozen=True, slots=True)
class Goal:
    thread_id: str
    owner: str
    objective: str
    status: str
    continuations: int
    no_progress: int
    last_decision: str | None
    last_reason: str | None
    seen_outputs: tuple[str, ...]

    @property
    def active(self) -> bool:
        return self.status == "active"


@dataclass(frozen=True, slots=True)
class Verdict:
    decision: str
    reason: str


@dataclass(frozen=True, slots=True)
class GoalStep:
    """What to do after a turn: ``continue_with`` is the next hidden turn's text; ``notice`` is for chat."""

    continue_with: str | None = None
    notice: str | None = None


def start_prompt(objective: str) -> str:
    return (
        f"New goal: {objective}\n\nWork toward it step by step using your tools. "
        "Say plainly what you did and what is left."
    )


def continuation_prompt(goal: Goal, verdict: Verdict, number: int, cap: int) -> str:
    return (
        f"[Goal continuation {number}/{cap}] Keep working toward the goal: {goal.objective}\n"
        f"Evaluator: {verdict.reason}\nTake the next step; do not repeat earlier answers."
    )


def fingerprint(text: str) -> str:
    normalised = re.sub(r"\s+", " ", text).strip().lower()
    return hashlib.sha256(normalised.encode()).hexdigest()[:16]


def parse_verdict(text: str) -> Verdict:
    data = parse_json_object(text) or {}
    decision = str(data.get("decision", "")).strip().lower().replace("-", "_").replace(" ", "_")
    reason = str(data.get("reason") or "").strip()[:300]
    if decision not in DECISIONS:
        # An unreadable verdict must not loop forever: stand down and say why.
        return Verdict("stand_down", "the evaluator's answer could not be read")
    return Verdict(decision, reason or decision.replace("_", " "))


class GoalStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def get(self, thread_id: str) -> Goal | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(goals).where(goals.c.thread_id == thread_id))).mappings().first()
        if row is None:
            return None
        return Goal(
            row["thread_id"],
            row["owner"],
            row["objective"],
            row["status"],
            row["continuations"],
            row["no_progress"],
            row["last_decision"],
            row["last_reason"],
            tuple(json.loads(row["seen_outputs"] or "[]")),
        )

    async def set(self, thread_id: str, owner: str, objective: str) -> Goal:
        now = time.time()
        async with self.engine.begin() as conn:
            await conn.execute(delete(goals).where(goals.c.thread_id == thread_id))
            await conn.execute(
                insert(goals).values(
                    thread_id=thread_id,
                    owner=owner,
                    objective=objective,
                    status="active",
                    continuations=0,
                    no_progress=0,
                    seen_outputs="[]",
                    created_at=now,
                    updated_at=now,
                )
            )
        goal = await self.get(thread_id)
        assert goal is not None
        return goal

    async def update(self, thread_id: str, **values: Any) -> None:
        if "seen_outputs" in values:
            values["seen_outputs"] = json.dumps(list(values["seen_outputs"])[-50:])
        async with self.engine.begin() as conn:
            await conn.execute(
                update(goals).where(goals.c.thread_id == thread_id).values(updated_at=time.time(), **values)
            )

    async def clear(self, thread_id: str) -> bool:
        async with self.engine.begin() as conn:
            result = await conn.execute(delete(goals).where(goals.c.thread_id == thread_id))
        return bool(result.rowcount)


ModelGetter = Callable[[str | None], Any]


class GoalKeeper:
    """The goal loop's decisions; storage in :class:`GoalStore`, model calls through ``chat_model``."""

    def __init__(self, store: GoalStore, *, chat_model: ModelGetter, max_continuations: int) -> None:
        self.store = store
        self._chat_model = chat_model
        self.max_continuations = max_continuations

    async def evaluate(self, goal: Goal, reply: str, model: str | None) -> Verdict:
        request = [
            SystemMessage(EVALUATOR_PROMPT),
            HumanMessage(f"Goal: {goal.objective}\n\nLatest reply:\n{reply[:6000] or '(empty)'}"),
        ]
        try:
            answer = await self._chat_model(model).ainvoke(request)
        except Exception as exc:
            log.warning("goal evaluation failed: %s", type(exc).__name__)
            return Verdict("stand_down", "the evaluator could not be reached")
        content = answer.content if isinstance(answer.content, str) else str(answer.content)
        return parse_verdict(content)

    async def after_turn(
        self, thread_id: str, text: str, *, hidden: bool, stopped: bool, failed: bool, model: str | None
    ) -> GoalStep | None:
        goal = await self.store.get(thread_id)
        if goal is None or not goal.active:
            return None
        if stopped or failed:
            reason = "stopped with /stop" if stopped else "a turn failed"
            await self.store.update(thread_id, status="stopped", last_reason=reason)
            return GoalStep(notice=f"🎯 Goal paused: {reason}. Send /goal {goal.objective} to resume.")
        mark = fingerprint(text)
        seen = set(goal.seen_outputs)
        no_progress = goal.no_progress
        if hidden:
            empty = text.strip() in {"", NOTHING_TO_ADD}
            no_progress = no_progress + 1 if (empty or mark in seen) else 0
        seen_outputs = (*goal.seen_outputs, mark) if mark not in seen else goal.seen_outputs
        if no_progress >= NO_PROGRESS_LIMIT:
            await self.store.update(
                thread_id,
                status="no_progress",
                no_progress=no_progress,
                seen_outputs=seen_outputs,
                last_reason="two continuations added nothing new",
            )
            return GoalStep(notice="🎯 Goal stopped: the last two continuations added nothing new.")
        verdict = await self.evaluate(goal, text, model)
        values: dict[str, Any] = {
            "no_progress": no_progress,
            "seen_outputs": seen_outputs,
            "last_decision": verdict.decision,
            "last_reason": verdict.reason,
        }
        if verdict.decision == "satisfied":
            await self.store.update(thread_id, status="satisfied", **values)
            return GoalStep(notice=f"🎯 Goal reached: {verdict.reason}")
        if verdict.decision == "stand_down":
            await self.store.update(thread_id, status="stood_down", **values)
            return GoalStep(notice=f"🎯 Standing down from the goal: {verdict.reason}")
        if goal.continuations >= self.max_continuations:
            await self.store.update(thread_id, status="cap_reached", **values)
            return GoalStep(
                notice=f"🎯 Goal paused after {goal.continuations} continuations (the limit). "
                f"Last evaluation: {verdict.reason}"
            )
        number = goal.continuations + 1
        await self.store.update(thread_id, continuations=number, **values)
        return GoalStep(
            continue_with=continuation_prompt(goal, verdict, number, self.max_continuations),
            notice=f"🎯 continuing toward the goal ({number}/{self.max_continuations})…",
        )

    @staticmethod
    def describe(goal: Goal, cap: int) -> str:
        labels = {
            "active": "working on it",
            "satisfied": "reached",
            "stood_down": "stood down",
            "cap_reached": "paused at the continuation limit",
            "no_progress": "stopped (no progress)",
            "stopped": "paused",
        }
        lines = [
            f"🎯 Goal: {goal.objective}",
            f"Status: {labels.get(goal.status, goal.status)} — {goal.continuations}/{cap} continuations used",
        ]
        if goal.last_reason:
            decision = f"{goal.last_decision.replace('_', ' ')}: " if goal.last_decision else ""
            lines.append(f"Last evaluation: {decision}{goal.last_reason}")
        return "\n".join(lines)
