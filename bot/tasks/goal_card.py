"""A goal's task card: one card per goal run, which every step of the goal streams into.

A goal (``/goal``, bot/goal_runner.py) runs as several hidden turns — its steps — on its thread. Each
step's reply is the goal's card: a :class:`GoalCard` opened on the stored row, which continues the same
message (its reply state is in the row), so the chat shows one message for the whole goal. A step's end
is not the card's end: the goal runner judges the answer first. So a step ends "quietly" — the card
shows the answer and "checking it against the goal", keeps its ⏹ Stop button, and the platform is not
told the message is final — and the goal runner closes the card once, with the last step's answer and
the verdict (stored before it is shown, like every card's result).

The card is named after the goal's start (the id of its step 0, ``GoalStore.start_id``): the same for
every step, for a user's own turn the goal judges too, and across restarts; new for a goal started again
with ``/goal OBJECTIVE`` (a new start), whose earlier card has already ended.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from agent.events import TaskStatus
from bot.tasks.card import CardStream, stop_action
from bot.tasks.store import FINAL, TaskRow, TaskStore
from channels.base import Channel
from channels.reply import ReplyStream
from channels.types import Action, InboundMessage

GOAL_KIND = "goal"
#: Joins a step's name and what it does now: "step 2 of 8 · list files in /mnt/user-data/workspace".
STEP_JOIN = " · "
CHECKING = "checking the answer against the goal"
#: Room left below a platform's message limit, so a running card stays one message (see GoalCard.text).
MARGIN = 32


def goal_task_id(start_id: str) -> str:
    """The card of the goal run that ``start_id`` (its step 0) started."""
    return f"goal:{start_id}"


def step_name(number: int, cap: int) -> str:
    return f"step {number} of {cap}"


class GoalCard(CardStream):
    """The goal's card, for one step (as the step's reply) or one change of the goal runner."""

    def __init__(self, store: TaskStore, row: TaskRow, channel: Channel) -> None:
        super().__init__(store, row, channel)
        # Each step rewinds the card's body (a new answer), so nothing is held back for being shorter
        # than what the card showed before — that rule is for one answer continued after a restart.
        self._hold_below = 0
        #: The step this stream shows ("step 2 of 8"), kept in front of each tool step it reports.
        self.name = (row.step or "").split(STEP_JOIN)[0]

    def text(self) -> str:
        """The card; while the goal runs, clipped to one message, so a long answer of one step leaves
        no extra message behind that the next, shorter step could not take back."""
        full = super().text()
        limit = self.limits.text_limit - MARGIN
        if self.status in FINAL or len(full) <= limit:
            return full
        return full[: max(0, limit - 1)] + "…"

    async def start(self, placeholder: str = "…", actions: Sequence[Action] = ()) -> None:
        """A step starts: its answer replaces the last one's; ⏹ Stop stops the goal, not only the step."""
        if self.row.final:
            return
        self.body = ""
        await super().start(placeholder, (stop_action(self.row.short),))

    async def step(self, text: str, status: TaskStatus = "running") -> None:
        if self.name and not text.startswith(self.name):
            text = f"{self.name}{STEP_JOIN}{text}"
        await super().step(text, status)

    async def finish(self, text: str, files: Sequence[Path] = (), actions: Sequence[Action] = ()) -> None:
        """A step's answer is delivered: shown, with the card still running while it is judged. A goal
        that ended meanwhile (⏹ Stop) shows its stored end instead."""
        stored = await self.store.get(self.row.id)
        if stored is None or stored.result is not None:
            await CardStream.finish(self, text, files)
            return
        await self.settle(f"{self.name} answered{STEP_JOIN}{CHECKING}", text, files)

    async def settle(self, step: str, body: str = "", files: Sequence[Path] = ()) -> None:
        """Show the card running ``step`` over ``body`` and end this stream; the next change of the card
        opens another stream on the same message."""
        if self.row.final:
            return
        self.status, self.current_step, self.body = "running", step, body
        await self.store.set_status(self.row.id, "running", step)
        self._edit_only.quiet = True
        await ReplyStream.finish(self, self.text(), files, (stop_action(self.row.short),))

    async def close(self, status: TaskStatus, result: str) -> None:
        """The goal's end: stored, shown once, Stop button off (:meth:`CardStream.finish`)."""
        self.outcome = status if status in FINAL else "done"
        self._edit_only.quiet = False
        await CardStream.finish(self, result)


class GoalCards:
    """Opens goal cards for the goal runner, the turns of its steps and ``/tasks stop``."""

    def __init__(self, store: TaskStore, channels: Mapping[str, Channel]) -> None:
        self.store = store
        self.channels = channels

    async def open(
        self, task_id: str, origin: InboundMessage, *, thread_id: str, owner: str, title: str
    ) -> GoalCard | None:
        """The goal's card: the stored one, or a new one (shown at its first change)."""
        channel = self.channels.get(origin.provider)
        if channel is None:
            return None
        row = await self.store.open(
            task_id,
            message=origin,
            owner=owner,
            thread_id=thread_id,
            kind=GOAL_KIND,
            title=title,
            status="running",
        )
        return GoalCard(self.store, row, channel)

    async def get(self, task_id: str) -> GoalCard | None:
        row = await self.store.get(task_id)
        channel = self.channels.get(row.message.provider) if row is not None else None
        if row is None or channel is None:
            return None
        return GoalCard(self.store, row, channel)

    async def for_turn(self, task_id: str, token: str) -> GoalCard | None:
        """A step's card, as its reply; the step's Stop token is kept so ``/tasks stop`` can stop it."""
        card = await self.get(task_id)
        if card is not None and not card.row.final:
            await self.store.set_stop_token(task_id, token)
        return card

    async def deliver_owed(self) -> int:
        """Show goal ends stored before a restart and not shown yet, once, in their cards."""
        shown = 0
        for row in await self.store.owed():
            card = await self.get(row.id) if row.kind == GOAL_KIND else None
            if card is not None and row.result is not None:
                await card.close(row.status, row.result)
                shown += 1
        return shown
