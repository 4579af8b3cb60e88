"""One task card: a reply stream whose every text is the card (title, status, step) around its body.

Why a :class:`~channels.reply.ReplyStream`: it already paces edits per platform, splits what is too long,
keeps the Stop button on while the job runs and takes it off with the final text, and — given the state
it stored — continues the same message after a restart instead of posting another. The card adds what
a plain answer does not have: a status line kept in the ``task_cards`` row (:mod:`bot.tasks.store`),
written there *before* it is shown, and the result stored before the final edit and marked delivered
after it, so a restart in between delivers that stored result into the same message, once.

A card always uses placeholder-and-edit, never a platform's native streaming: a native stream (a
Telegram draft, a Slack stream) cannot carry the status line above a growing body, and a card must stay
one message that is edited in place.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from agent.events import TaskStatus
from bot.tasks.store import FINAL, TaskRow, TaskStore
from channels.base import Channel
from channels.reply import NativeStream, ReplyStream, ReplyTransport, StateSink
from channels.resume import ReplyState
from channels.types import Action

log = logging.getLogger(__name__)

KIND_LABELS = {"schedule": "Scheduled task", "subagent": "Subagent", "goal": "Goal", "tool": "Tool call"}
STATUS_LINES: dict[str, str] = {
    "queued": "⏳ Queued",
    "running": "▶️ Running",
    "waiting": "✋ Waiting for approval",
    "done": "✅ Done",
    "failed": "⚠️ Failed",
    "stopped": "⏹ Stopped",
}
MAX_TITLE = 120
STOP_LABEL = "⏹ Stop"


def stop_action(short: str) -> Action:
    """A card's ⏹ Stop button: it sends ``/tasks stop ID`` (bot/commands/tasks.py)."""
    return Action(f"/tasks stop {short}", STOP_LABEL, "danger")


def render(row: TaskRow, status: TaskStatus, step: str | None, body: str) -> str:
    """The card's text: a header naming the job, its status (and current step), then the body."""
    title = " ".join(row.title.split())
    if len(title) > MAX_TITLE:
        title = title[: MAX_TITLE - 1] + "…"
    label = KIND_LABELS.get(row.kind, "Task")
    line = STATUS_LINES.get(status, status)
    if step and status not in FINAL:
        line = f"{line} — {' '.join(step.split())[:300]}"
    head = f"🗂 {label} {row.short}: {title}\n{line}"
    body = body.strip()
    return f"{head}\n\n{body}" if body and body != "…" else head


class _EditOnly(ReplyTransport):
    """The channel's transport without its native stream (see the module docstring)."""

    def __init__(self, inner: ReplyTransport) -> None:
        self.inner = inner
        self.supports_actions = inner.supports_actions
        self.typing_interval = inner.typing_interval
        #: Set for an end that is not the card's last (a goal step): the platform is not told the
        #: message is finished (a terminal would print it, DingTalk would close its card).
        self.quiet = False

    async def send(self, text: str, *, fallback: bool = False, actions: Sequence[Action] = ()) -> str:
        return await self.inner.send(text, fallback=fallback, actions=actions)

    async def edit(self, ref: str, text: str, *, actions: Sequence[Action] = ()) -> None:
        await self.inner.edit(ref, text, actions=actions)

    async def send_files(self, files: Sequence[Path]) -> None:
        await self.inner.send_files(files)

    async def typing(self) -> None:
        await self.inner.typing()

    def native_stream(self, actions: Sequence[Action] = ()) -> NativeStream | None:
        return None

    async def finished(self) -> None:
        if not self.quiet:
            await self.inner.finished()

    def resume_state(self) -> str:
        return self.inner.resume_state()

    def restore(self, state: str) -> None:
        self.inner.restore(state)


class CardStream(ReplyStream):
    """A task's card. Driven like any reply (start → update … → finish) by a turn, or through
    :meth:`step` and :meth:`close` by a :class:`~agent.events.TaskReporter`."""

    def __init__(
        self,
        store: TaskStore,
        row: TaskRow,
        channel: Channel,
        *,
        resume: ReplyState | None = None,
        also_keep: StateSink | None = None,
    ) -> None:
        self.store = store
        self.row = row
        self._also_keep = also_keep
        self._edit_only = _EditOnly(channel.reply_transport(row.message))
        super().__init__(
            self._edit_only,
            channel.pacing(row.message),
            channel.limits,
            resume=resume or row.reply_state,
            on_change=self._keep,
            provider=channel.provider,
        )
        self.status: TaskStatus = row.status
        self.current_step: str | None = row.step
        self.body = ""
        #: What the job ended as, when its runner knows better than "done" (stopped, failed).
        self.outcome: TaskStatus = "done"
        #: Set while the stream itself re-shows a whole card text (its start edits through update()).
        self._whole = False
        self._waits = 0  # approvals being awaited now
        self._after_wait: str | None = None  # the step to show again once they are answered

    async def _keep(self, state: ReplyState) -> None:
        await self.store.save_state(self.row.id, state)
        if self._also_keep is not None:
            await self._also_keep(state)

    def text(self) -> str:
        return render(self.row, self.status, self.current_step, self.body)

    async def show_queued(self) -> None:
        """The card as it first appears: queued, no buttons (nothing runs yet to stop)."""
        self.status = "queued"
        await self.store.set_status(self.row.id, "queued")
        await self._start(self.text(), ())

    async def start(self, placeholder: str = "…", actions: Sequence[Action] = ()) -> None:
        """The job runs now: the card says so, with its Stop button."""
        self.status = "running"
        await self.store.set_status(self.row.id, "running")
        await self._start(self.text(), actions)

    async def _start(self, text: str, actions: Sequence[Action]) -> None:
        self._whole = True
        try:
            await super().start(text, actions)
        finally:
            self._whole = False

    def update(self, text: str) -> None:
        if self._whole:  # the stream showing a card text it was given whole (see _start)
            super().update(text)
            return
        self.body = text
        super().update(self.text())

    async def step(self, text: str, status: TaskStatus = "running") -> None:
        """The job's current step (stored with the card's steps, then shown).

        While an approval is awaited (:meth:`waiting`), a step reported late (the tool's start event
        arrives after its approval request) is kept for afterwards, not shown over "waiting"."""
        if status in FINAL:
            return
        if self._waits and status == "running":
            self._after_wait = text
            return
        self.status, self.current_step = status, text
        await self.store.set_status(self.row.id, status, text)
        super().update(self.text())

    async def waiting(self, what: str) -> None:
        """An approval is awaited for ``what``: the card says so until :meth:`waited`."""
        self._waits += 1
        self._after_wait = self.current_step
        await self.step(what, "waiting")

    async def waited(self) -> None:
        self._waits = max(0, self._waits - 1)
        if not self._waits:
            await self.step(self._after_wait or "continuing")

    async def finish(self, text: str, files: Sequence[Path] = (), actions: Sequence[Action] = ()) -> None:
        """The result: stored first (a restart from here delivers it, not a new one), shown, marked shown."""
        stored = await self.store.get(self.row.id)
        if stored is not None and stored.result is not None:
            status, text = stored.status, stored.result  # decided before a restart: deliver that one
        else:
            status = self.outcome
            await self.store.finish(self.row.id, status, text)
        self.status, self.current_step, self.body = status, None, text
        await super().finish(self.text(), files, actions)
        await self.store.delivered(self.row.id)

    async def close(self, status: TaskStatus, result: str) -> None:
        """A reporter's end of the job (see :meth:`finish`)."""
        self.outcome = status if status in FINAL else "done"
        await self.finish(result)
