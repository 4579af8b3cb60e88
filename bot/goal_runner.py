"""Runs goal continuations as durable work through the manager's lanes.

The goal keeper (``agent/goals.py``) decides and records each step; this module is the bot side: it turns
a recorded step into a hidden turn, checks right before the turn starts that the step is still wanted,
marks it answered once its reply is delivered, and at start-up resubmits every step a restart interrupted.

The chat sees a goal as one task card (bot/tasks/goal_card.py), opened once the first answer is
delivered and the goal goes on by itself: each step streams into it, it says which step runs and what it
does, and it ends with the verdict — reached, paused, stopped — and the last step's answer, once.

A step does not run — and its card says why — when the goal was cleared, stopped or replaced, or when
the conversation moved to a new thread (``/new``); in the last case the goal is closed too, so nothing
ever continues in the new thread. During shutdown the manager starts no hidden turn: queued steps stay
recorded and resume at the next start.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable

from langchain_core.messages import AIMessage, BaseMessage

from agent.events import TaskStatus
from agent.goals import Continuation, Goal, GoalKeeper, GoalStep
from agent.runtime import message_text
from bot.identity import Identity
from bot.manager import ChannelManager
from bot.tasks.goal_card import GoalCard, goal_task_id, step_name
from bot.threads import Conversation
from bot.turns import FollowUp, TurnAsk, TurnOutcome
from channels.types import InboundMessage

log = logging.getLogger(__name__)

MOVED_ON = "the conversation moved to a new thread (/new)"
#: A goal's end as its card shows it: reached; ended by a person or a limit; could not be reached.
CARD_STATUS: dict[str, TaskStatus] = {"satisfied": "done", "stood_down": "failed", "no_progress": "failed"}


def card_status(goal: Goal | None, failed: bool = False) -> TaskStatus:
    if failed:
        return "failed"
    return CARD_STATUS.get(goal.status, "stopped") if goal is not None else "stopped"


async def _quietly(change: Awaitable[None]) -> None:
    """A card change that fails (the platform refused, storage hiccuped) does not stop the goal."""
    try:
        await change
    except Exception as exc:
        log.warning("the goal's task card could not be changed: %s: %s", type(exc).__name__, exc)


class GoalRunner:
    def __init__(self, manager: ChannelManager, keeper: GoalKeeper) -> None:
        self.manager = manager
        self.keeper = keeper
        self.store = keeper.store
        self.cards = manager.tasks.goals

    # --- after a turn --------------------------------------------------------------------------
    async def after_turn(self, outcome: TurnOutcome) -> FollowUp | None:
        thread_id = outcome.conversation.thread_id
        if not outcome.hidden and not await self.store.has_active(thread_id):
            return None  # the common case, answered from memory: no goal, so nothing to evaluate or start
        finishing: str | None = None
        if outcome.hidden:  # a goal step just delivered its answer (after_delivery marked it)
            answered = [c for c in await self.store.unfinished(thread_id) if c.status == "answered"]
            finishing = answered[-1].id if answered else None
        elif not outcome.stopped and not outcome.failed:
            # The turn that set the goal: its answer is delivered, so its evaluation is owed now.
            for start in await self.store.unfinished(thread_id):
                if start.status == "inbox" and await self.store.mark(
                    start.id, "answered", expect=("inbox",), reply_text=outcome.text[:20_000]
                ):
                    finishing = start.id
        step = await self.keeper.after_turn(
            thread_id,
            outcome.text,
            hidden=outcome.hidden,
            stopped=outcome.stopped,
            failed=outcome.failed,
            model=self.manager.model_for(outcome.conversation),
            origin=json.dumps(outcome.message.to_json(), ensure_ascii=False),
            finishing=finishing,
        )
        return await self._follow(
            step,
            outcome.message,
            finishing,
            thread_id,
            outcome.identity.owner,
            failed=outcome.failed,
            task=outcome.task,
        )

    async def _follow(
        self,
        step: GoalStep | None,
        message: InboundMessage,
        finished: str | None,
        thread_id: str,
        owner: str,
        *,
        failed: bool = False,
        task: str | None = None,
    ) -> FollowUp | None:
        """Queue the next step (its card says which), or end the goal's card with the verdict.

        ``task`` is the card the turn answered in (a goal step's); else the card of the thread's goal."""
        answered = await self.store.continuation(finished) if finished is not None else None
        # The card shows the steps' answers; the first answer is the reply to the /goal message itself.
        body = (answered.reply_text or "") if answered is not None and answered.number > 0 else ""
        goal = await self.store.get(thread_id)
        if task is None:
            started = goal.created_at if goal is not None else answered.goal_created_at if answered else None
            task = await self._task_id(thread_id, started)
        if step is None or step.continuation is None:
            if finished is not None:  # the goal ended (or was gone): nothing more is owed for this step
                await self.store.mark(finished, "done", expect=("answered",))
                goal = await self.store.get(thread_id)
            notice = step.notice if step is not None else None
            # A decision about the goal opens its card if need be; "no goal any more" only ends one.
            card = await self._card(task, message, owner, goal, create=step is not None)
            if card is not None and not card.row.final:
                reason = notice or self._gone(goal)
                result = f"{body}\n\n{reason}" if body else reason
                await _quietly(card.close(card_status(goal, failed), result))
            elif card is None and notice:  # no card (its platform is gone): the verdict still shows
                await self.manager.send_notice(message, notice)
            return None
        card = await self._card(task, message, owner, goal, create=True)
        if card is not None:
            number = step.continuation.number
            await _quietly(card.settle(step_name(number, self.keeper.max_continuations), body))
        return self._follow_up(step.continuation, task)

    @staticmethod
    def _gone(goal: Goal | None) -> str:
        if goal is None:
            return "🎯 The goal was cleared."
        return f"🎯 Goal ended: {goal.last_reason or goal.status.replace('_', ' ')}."

    async def _task_id(self, thread_id: str, goal_created_at: float | None) -> str | None:
        """The card of the goal run created at ``goal_created_at`` (named after its start)."""
        if goal_created_at is None:
            return None
        start = await self.store.start_id(thread_id, goal_created_at)
        return goal_task_id(start) if start is not None else None

    async def _card(
        self, task: str | None, message: InboundMessage, owner: str, goal: Goal | None, *, create: bool
    ) -> GoalCard | None:
        if task is None:
            return None
        try:
            if create and goal is not None:
                return await self.cards.open(
                    task, message, thread_id=goal.thread_id, owner=owner, title=goal.objective
                )
            return await self.cards.get(task)
        except Exception as exc:  # storage hiccup: the goal goes on without its card this time
            log.warning("the goal's task card could not be opened: %s: %s", type(exc).__name__, exc)
            return None

    async def _end_card(self, step: Continuation, status: TaskStatus, reason: str) -> None:
        """A step that will not run ends its goal's card with the reason (it is the goal's end)."""
        task = await self._task_id(step.thread_id, step.goal_created_at)
        card = await self.cards.get(task) if task is not None else None
        if card is not None and not card.row.final:
            answer = await self.store.last_answer(step.thread_id, step.goal_created_at)
            await _quietly(card.close(status, f"{answer}\n\n{reason}" if answer else reason))

    def _follow_up(self, step: Continuation, task: str | None) -> FollowUp:
        async def before_start() -> str | None:
            return await self._still_wanted(step)

        async def after_delivery(text: str, stopped: bool, failed: bool) -> None:
            await self.store.mark(step.id, "answered", expect=("running",), reply_text=text[:20_000])

        return FollowUp(
            text=step.prompt,
            hidden=True,
            before_start=before_start,
            after_delivery=after_delivery,
            task=task,
        )

    async def _still_wanted(self, step: Continuation) -> str | None:
        """None when the step may run now (and it is claimed as running); otherwise the reason, which
        also ends the goal's card when the goal itself has ended."""
        current = await self.store.continuation(step.id)
        if current is None or current.status != "queued":
            reason = current.reason if current is not None and current.reason else "it was already handled"
            handled = f"🎯 Not continuing the goal: {reason}."
            if current is not None and current.status == "cancelled":  # cleared or replaced meanwhile
                await self._end_card(step, "stopped", handled)
            return handled  # otherwise the step is someone else's (another instance): so is the card
        refusal = await self._refusal(step)
        if refusal is not None:
            await self._end_card(step, "stopped", refusal)
            return refusal
        # The claim: of two starts of one step (two instances resuming it), only one gets past here.
        if not await self.store.mark(step.id, "running", expect=("queued",)):
            return "🎯 Not continuing the goal: this step is already being handled."
        return None

    async def _refusal(self, step: Continuation) -> str | None:
        """Why the goal of ``step`` is over before the step starts (None: it may run)."""
        goal = await self.store.get(step.thread_id)
        if goal is None:
            await self.store.mark(
                step.id, "cancelled", expect=("queued", "running"), reason="the goal was cleared"
            )
            return "🎯 Not continuing the goal: the goal was cleared."
        if not goal.active or goal.created_at != step.goal_created_at:
            reason = "the goal was stopped or replaced"
            await self.store.mark(step.id, "cancelled", expect=("queued", "running"), reason=reason)
            return f"🎯 Not continuing the goal: {reason}."
        origin = InboundMessage.from_json(json.loads(step.origin))
        conversation = await self.manager.threads.get(origin.conversation_key)
        if conversation is None or conversation.thread_id != step.thread_id:
            await self.store.close(step.thread_id, "closed", MOVED_ON)
            return f"🎯 Goal closed: {MOVED_ON}, so I did not continue it there."
        # Every step is checked against the budgets (bot/spend/): over one, the goal pauses cleanly.
        spend = self.manager.spend
        over = await spend.over_budget(origin, step.owner) if spend is not None else None
        if over is not None:
            await self.store.mark(step.id, "cancelled", expect=("queued", "running"), reason="over budget")
            await self.store.update(step.thread_id, status="stopped", last_reason=f"over budget: {over}")
            return (
                f"🎯 Goal paused: {over}. Send /goal {goal.objective} to resume when there is budget again."
            )
        return None

    # --- start-up --------------------------------------------------------------------------------
    async def resume(self) -> int:
        """Resubmit the steps a restart interrupted; evaluate steps whose answer was already delivered.

        A goal's starting turn belongs to the inbox: if its message is still unfinished there, the inbox
        re-runs it (and its evaluation follows as usual); if not, its reply was delivered and only the
        evaluation was lost — it is made now from the thread's last answer.
        """
        await _quietly(self._deliver_owed())
        resumed = 0
        waiting = {entry.message.conversation_key for entry in await self.manager.inbox.unfinished()}
        for step in await self.store.unfinished():
            if step.status == "inbox":
                recovered = await self._recover_start(step, waiting)
                if recovered is None:
                    continue
                step = recovered
            try:
                message = InboundMessage.from_json(json.loads(step.origin))
            except (ValueError, TypeError, KeyError):
                log.warning("goal step %s has an unreadable origin; cancelling it", step.id[:8])
                await self.store.mark(
                    step.id, "cancelled", expect=("queued", "running", "answered"), reason="unreadable"
                )
                continue
            identity = Identity(owner=step.owner, bound=True)
            if step.status == "answered":
                follow = await self._evaluate_delivered(step, message, identity)
                if follow is None:
                    continue
            else:
                if step.status == "running":  # it died with the previous process: run it again
                    await self.store.mark(step.id, "queued", expect=("running",))
                follow = self._follow_up(step, await self._task_id(step.thread_id, step.goal_created_at))
            await self.manager.submit_turn(
                message,
                identity,
                TurnAsk(
                    text=follow.text,
                    hidden=True,
                    before_start=follow.before_start,
                    after_delivery=follow.after_delivery,
                    task=follow.task,
                ),
            )
            resumed += 1
        if resumed:
            log.info("resumed %d goal step(s) after a restart", resumed)
        return resumed

    async def _deliver_owed(self) -> None:
        shown = await self.cards.deliver_owed()
        if shown:
            log.info("showed %d goal end(s) a restart had kept from the chat", shown)

    async def _recover_start(
        self, step: Continuation, waiting: set[tuple[str, str, str, str]]
    ) -> Continuation | None:
        try:
            key = InboundMessage.from_json(json.loads(step.origin)).conversation_key
        except (ValueError, TypeError, KeyError):
            key = None
        if key in waiting:
            return None  # the inbox resumes that turn
        last = ""
        for message in reversed(await self._thread_messages(step.thread_id)):
            if isinstance(message, AIMessage) and message_text(message).strip():
                last = message_text(message)
                break
        if not await self.store.mark(step.id, "answered", expect=("inbox",), reply_text=last[:20_000]):
            return None
        return await self.store.continuation(step.id)

    async def _thread_messages(self, thread_id: str) -> list[BaseMessage]:
        reader = getattr(self.manager.agent, "thread_messages", None)
        return list(await reader(thread_id)) if reader is not None else []

    async def _evaluate_delivered(
        self, step: Continuation, message: InboundMessage, identity: Identity
    ) -> FollowUp | None:
        conversation = await self.manager.conversation_for(message, identity)
        next_step = await self.keeper.after_turn(
            step.thread_id,
            step.reply_text or "",
            hidden=True,
            stopped=False,
            failed=False,
            model=self.manager.model_for(conversation),
            origin=step.origin,
            finishing=step.id,
        )
        return await self._follow(next_step, message, step.id, step.thread_id, step.owner)

    # --- /status ---------------------------------------------------------------------------------
    async def status(self, conversation: Conversation) -> str | None:
        goal = await self.store.get(conversation.thread_id)
        if goal is None:
            return "Goal: none"
        steps = await self.store.unfinished(conversation.thread_id)
        label = self.keeper.state_label(goal, steps[-1] if steps else None)
        if goal.active:
            return f"Goal: {goal.objective} ({label}; {goal.continuations}/{self.keeper.max_continuations} continuations)"
        return f"Goal: {goal.objective} ({label})"
