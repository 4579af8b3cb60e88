"""Goals: an objective stored on a thread that keeps the agent working across turns.

After each turn on a thread with an active goal, :meth:`GoalKeeper.after_turn` decides what happens next:

1. a stopped or failed turn ends the goal (the user pressed /stop, or something broke);
2. a continuation that shows nothing new (empty, or the same text as an earlier goal turn) counts as
   "no progress"; two in a row end the goal — this check costs no model call;
3. otherwise an evaluator model call answers ``satisfied`` / ``continue`` / ``stand_down`` with a reason;
4. ``continue`` asks for another hidden turn, at most ``agent.max_goal_continuations`` times.

The keeper returns a :class:`GoalStep`; the bot turns it into a follow-up turn, and shows its notice on
the goal's task card (bot/goal_runner.py).

A continuation is durable work: it is recorded in ``agent_goal_continuations`` in the same transaction
that counts it, moves ``queued → running → answered → done`` (or ``cancelled``), and a restart resumes
what was not done — a step whose answer was delivered is never run again, only evaluated.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage
from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from agent.memory import parse_json_object
from agent.tables import goal_continuations, goals

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
    created_at: float = 0.0

    @property
    def active(self) -> bool:
        return self.status == "active"


#: Continuation states that still owe work (a run, or the evaluation after a delivered answer).
#: ``inbox`` is the turn that set (or resumed) the goal: it runs as the user's message through the
#: inbox, and the row exists so its evaluation is not lost if the process dies right after its reply.
UNFINISHED = ("inbox", "queued", "running", "answered")


@dataclass(frozen=True, slots=True)
class Continuation:
    """One recorded goal step. ``origin`` is the JSON of the chat message that set the goal."""

    id: str
    thread_id: str
    owner: str
    goal_created_at: float
    number: int
    prompt: str
    notice: str
    origin: str
    status: str
    reply_text: str | None
    reason: str | None


@dataclass(frozen=True, slots=True)
class Verdict:
    decision: str
    reason: str


@dataclass(frozen=True, slots=True)
class GoalStep:
    """What to do after a turn: ``continue_with`` is the next hidden turn's text; ``notice`` is for chat."""

    continue_with: str | None = None
    notice: str | None = None
    continuation: Continuation | None = None


def start_prompt(objective: str) -> str:
    return (
        f"New goal: {objective}\n\nWork toward it step by step using your tools. "
        "Say plainly what you did and what is left."
    )


def resume_prompt(objective: str) -> str:
    return (
        f"Resume the goal: {objective}\n\nContinue from where you stopped; do not redo finished steps. "
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
    """Goals and their continuation steps in the database, plus an in-memory index of active goals.

    Most threads never have a goal, yet the goal hook runs after every turn; a SELECT per turn cost
    ~0.8 ms CPU. So the store keeps the set of thread ids whose goal is active — loaded once, then kept
    in step by this store's own writes (every status change goes through it) — and answers
    :meth:`has_active` without the database. The rows stay the durable truth.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._active: set[str] | None = None  # None until first loaded
        self._early: dict[str, bool] = {}  # changes committed while the index was still loading

    async def has_active(self, thread_id: str) -> bool:
        """Whether ``thread_id`` has an active goal, from the in-memory index (loaded on first use)."""
        if self._active is None:
            async with self.engine.connect() as conn:
                rows = await conn.execute(select(goals.c.thread_id).where(goals.c.status == "active"))
                loaded = set(rows.scalars())
            if self._active is None:  # another caller may have loaded (and changed) it meanwhile
                for changed, active in self._early.items():  # committed after (or before) the SELECT
                    (loaded.add if active else loaded.discard)(changed)
                self._active, self._early = loaded, {}
        return thread_id in self._active

    def _note(self, thread_id: str, active: bool) -> None:
        if self._active is None:
            self._early[thread_id] = active
        else:
            (self._active.add if active else self._active.discard)(thread_id)

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
            row["created_at"],
        )

    async def set(self, thread_id: str, owner: str, objective: str) -> Goal:
        now = time.time()
        async with self.engine.begin() as conn:
            await conn.execute(delete(goals).where(goals.c.thread_id == thread_id))
            await self._cancel_unfinished(conn, thread_id, "a new goal replaced it")
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
        self._note(thread_id, True)
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
        if "status" in values:
            self._note(thread_id, values["status"] == "active")

    async def clear(self, thread_id: str) -> bool:
        """Delete the goal; its unfinished continuations are cancelled in the same transaction."""
        async with self.engine.begin() as conn:
            result = await conn.execute(delete(goals).where(goals.c.thread_id == thread_id))
            await self._cancel_unfinished(conn, thread_id, "the goal was cleared")
        self._note(thread_id, False)
        return bool(result.rowcount)

    async def resume(self, thread_id: str) -> Goal | None:
        """Re-activate a goal that ended without being reached, keeping its continuation count."""
        async with self.engine.begin() as conn:
            result = await conn.execute(
                update(goals)
                .where(goals.c.thread_id == thread_id, goals.c.status.notin_(("active", "satisfied")))
                .values(status="active", no_progress=0, updated_at=time.time())
            )
        if result.rowcount:
            self._note(thread_id, True)
        return await self.get(thread_id) if result.rowcount else None

    async def close(self, thread_id: str, status: str, reason: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                update(goals)
                .where(goals.c.thread_id == thread_id, goals.c.status == "active")
                # Not an evaluation: drop the last decision so /goal does not present it as one.
                .values(status=status, last_decision=None, last_reason=reason, updated_at=time.time())
            )
            await self._cancel_unfinished(conn, thread_id, reason)
        self._note(thread_id, False)

    @staticmethod
    async def _cancel_unfinished(conn: Any, thread_id: str, reason: str) -> None:
        await conn.execute(
            update(goal_continuations)
            .where(
                goal_continuations.c.thread_id == thread_id,
                goal_continuations.c.status.in_(("inbox", "queued", "running")),
            )
            .values(status="cancelled", reason=reason, updated_at=time.time())
        )

    # --- continuations --------------------------------------------------------------------------
    async def queue_continuation(
        self,
        goal: Goal,
        number: int,
        prompt: str,
        notice: str,
        origin: str,
        *,
        finishing: str | None = None,
        **goal_values: Any,
    ) -> Continuation:
        """Count the step on the goal and record it, atomically: a crash leaves both or neither."""
        now = time.time()
        if "seen_outputs" in goal_values:
            goal_values["seen_outputs"] = json.dumps(list(goal_values["seen_outputs"])[-50:])
        step_id = uuid.uuid4().hex
        row: dict[str, object] = {
            "id": step_id,
            "thread_id": goal.thread_id,
            "owner": goal.owner,
            "goal_created_at": goal.created_at,
            "number": number,
            "prompt": prompt,
            "notice": notice,
            "message": origin,
            "status": "queued",
            "created_at": now,
            "updated_at": now,
        }
        async with self.engine.begin() as conn:
            await conn.execute(
                update(goals)
                .where(goals.c.thread_id == goal.thread_id)
                .values(continuations=number, updated_at=now, **goal_values)
            )
            await conn.execute(insert(goal_continuations).values(**row))
            if finishing is not None:
                await conn.execute(
                    update(goal_continuations)
                    .where(goal_continuations.c.id == finishing)
                    .values(status="done", updated_at=now)
                )
        continuation = await self.continuation(step_id)
        assert continuation is not None
        return continuation

    async def note_start(self, goal: Goal, prompt: str, origin: str) -> None:
        """Record the turn that starts (or resumes) the goal as step 0, owned by the inbox."""
        now = time.time()
        step = (
            goal_continuations.c.thread_id == goal.thread_id,
            goal_continuations.c.goal_created_at == goal.created_at,
            goal_continuations.c.number == 0,
        )
        async with self.engine.begin() as conn:
            # A resume is a new start of the same goal: the earlier start's row (long finished) goes.
            await conn.execute(delete(goal_continuations).where(*step))
            await conn.execute(
                insert(goal_continuations).values(
                    id=uuid.uuid4().hex,
                    thread_id=goal.thread_id,
                    owner=goal.owner,
                    goal_created_at=goal.created_at,
                    number=0,
                    prompt=prompt,
                    notice="",
                    message=origin,
                    status="inbox",
                    created_at=now,
                    updated_at=now,
                )
            )

    async def continuation(self, continuation_id: str) -> Continuation | None:
        async with self.engine.connect() as conn:
            row = (
                (
                    await conn.execute(
                        select(goal_continuations).where(goal_continuations.c.id == continuation_id)
                    )
                )
                .mappings()
                .first()
            )
        return _continuation(row) if row is not None else None

    async def unfinished(self, thread_id: str | None = None) -> list[Continuation]:
        """Steps that still owe work, oldest first (all threads, or one)."""
        query = select(goal_continuations).where(goal_continuations.c.status.in_(UNFINISHED))
        if thread_id is not None:
            query = query.where(goal_continuations.c.thread_id == thread_id)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query.order_by(goal_continuations.c.created_at))).mappings()
            return [_continuation(r) for r in rows]

    async def start_id(self, thread_id: str, goal_created_at: float) -> str | None:
        """The id of the turn that started (or last resumed) this goal: a goal run's name, which its
        task card is named after (a resume is a new start, with a new id)."""
        c = goal_continuations.c
        query = select(c.id).where(
            c.thread_id == thread_id, c.goal_created_at == goal_created_at, c.number == 0
        )
        async with self.engine.connect() as conn:
            return (await conn.execute(query.limit(1))).scalar()

    async def last_answer(self, thread_id: str, goal_created_at: float) -> str | None:
        """The latest answer a continuation of this goal delivered: a goal's task card ends with it,
        also when the goal ends before its next step (cleared, stopped, over budget)."""
        c = goal_continuations.c
        query = (
            select(c.reply_text)
            .where(
                c.thread_id == thread_id,
                c.goal_created_at == goal_created_at,
                c.number > 0,
                c.reply_text.is_not(None),
            )
            .order_by(c.number.desc())
            .limit(1)
        )
        async with self.engine.connect() as conn:
            return (await conn.execute(query)).scalar()

    async def mark(
        self, continuation_id: str, status: str, *, expect: tuple[str, ...], **values: Any
    ) -> bool:
        """Move a step to ``status`` if it is in one of ``expect``; False when someone else moved it."""
        async with self.engine.begin() as conn:
            result = await conn.execute(
                update(goal_continuations)
                .where(goal_continuations.c.id == continuation_id, goal_continuations.c.status.in_(expect))
                .values(status=status, updated_at=time.time(), **values)
            )
        return bool(result.rowcount)


def _continuation(row: Any) -> Continuation:
    return Continuation(
        row["id"],
        row["thread_id"],
        row["owner"],
        row["goal_created_at"],
        row["number"],
        row["prompt"],
        row["notice"],
        row["message"],
        row["status"],
        row["reply_text"],
        row["reason"],
    )


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
        self,
        thread_id: str,
        text: str,
        *,
        hidden: bool,
        stopped: bool,
        failed: bool,
        model: str | None,
        origin: str = "{}",
        finishing: str | None = None,
    ) -> GoalStep | None:
        """Decide what follows a turn; ``origin`` (opaque JSON) is stored with a queued continuation.

        ``finishing`` is the continuation whose answer this is: it is marked done in the same
        transaction that queues the next step, so a crash can neither lose nor duplicate a step.
        """
        if not await self.store.has_active(thread_id):
            return None  # most threads: no database read at all
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
        prompt = continuation_prompt(goal, verdict, number, self.max_continuations)
        notice = f"🎯 continuing toward the goal ({number}/{self.max_continuations})…"
        continuation = await self.store.queue_continuation(
            goal, number, prompt, notice, origin, finishing=finishing, **values
        )
        return GoalStep(continue_with=prompt, notice=notice, continuation=continuation)

    @staticmethod
    def state_label(goal: Goal, step: Continuation | None = None) -> str:
        """One wording of a goal's state, shared by ``/goal`` and ``/status`` so they always agree."""
        labels = {
            "active": "working on it",
            "satisfied": "reached",
            "stood_down": "stood down",
            "cap_reached": "paused at the continuation limit",
            "no_progress": "stopped (no progress)",
            "stopped": "paused",
            "closed": "closed",
        }
        label = labels.get(goal.status, goal.status.replace("_", " "))
        if goal.active and step is not None and step.status in ("queued", "running"):
            label += f", continuation {step.number} {step.status}"
        return label

    @staticmethod
    def describe(goal: Goal, cap: int, step: Continuation | None = None) -> str:
        lines = [
            f"🎯 Goal: {goal.objective}",
            f"Status: {GoalKeeper.state_label(goal, step)} — {goal.continuations}/{cap} continuations used",
        ]
        if goal.last_reason:
            decision = f"{goal.last_decision.replace('_', ' ')}: " if goal.last_decision else ""
            lines.append(f"Last evaluation: {decision}{goal.last_reason}")
        return "\n".join(lines)
