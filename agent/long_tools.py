"""Long tool calls: a tool call still running after ``agent.long_tool_seconds`` gets a task card.

Why a watcher around every call instead of a card per call: most calls end in well under a second, and
for them a card would only be noise. So each call gets a ``loop.call_later`` handle (no task, no
database row, nothing shown); only when it fires does the call become a *long* one, with a task of its
own (:class:`LongCall`'s keeper) that records it (:mod:`agent.task_store`), opens its card through the
turn's :class:`~agent.events.TaskReporter`, says how long it has run, and watches the card's ⏹ Stop.

Stop cancels the task running the tool call — the one ``_call_tool`` runs in — the way ``asyncio.timeout``
does: cancel, catch, ``uncancel``; the sandbox already kills a cancelled command's processes (the
contract of :meth:`agent.sandbox.Sandbox.run`, which ``/stop`` relies on too). A ``/stop`` of the whole
turn at the same moment leaves the cancel count above zero, so it still stops the turn.

The reporter decides where the card is shown: in a turn that is itself a job with a card (a scheduled
run, a goal's step) the bot shows the call as that job's step and never sets its stop event — the job's
Stop cancels the whole turn, which ends the call as a ``/stop`` does (bot/tasks/desk.py ``TurnTasks``).

The card's id comes from the thread and the tool call id (as a subagent's does), so a turn redelivered
after a crash that re-runs the call (:meth:`LongCalls.resume`) finds the same card and continues it; a
call that had ended before the crash answers with its stored result instead of running again.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.messages import ToolMessage

from agent.events import TaskReporter, TaskStatus
from agent.subagents import ENDED, task_id_for
from agent.task_store import TaskStore

log = logging.getLogger(__name__)

#: How often a long call's card says how long it has run (at least; never more often than the threshold).
STEP_SECONDS = 10.0
#: The card's result is the tail of the tool's output, cut to this many characters.
RESULT_CHARS = 1500
#: A bash result's first line: a non-zero exit or a timeout makes the card say ⚠️ Failed.
_BASH_STATUS = re.compile(r"^\[(?:exit code (-?\d+)|(timed out))\]")
#: What the model gets for a call its turn's /stop cut off (the same words a dangling call gets).
TURN_STOPPED = "(not finished: the user stopped this turn before the tool completed)"


def long_call_id(thread_id: str, call_id: str) -> str:
    """A subagent's id derivation (stable across a redelivered turn) under a prefix of its own, so a
    call's card can never be taken for the card of a subagent started by the same call id."""
    return "tool-" + task_id_for(thread_id, call_id).removeprefix("task-")


def elapsed(seconds: float) -> str:
    """``12 s``, ``3 min 5 s``, ``1 h 2 min``: how long a call has run, as a person reads it."""
    total = int(seconds)
    if total < 60:
        return f"{total} s"
    if total < 3600:
        return f"{total // 60} min {total % 60} s"
    return f"{total // 3600} h {total % 3600 // 60} min"


def outcome(ok: bool, output: str) -> TaskStatus:
    """done or failed: a tool error, or a bash command that exited non-zero or timed out, is a failure."""
    if not ok:
        return "failed"
    found = _BASH_STATUS.match(output)
    if found is not None and (found.group(2) or found.group(1) != "0"):
        return "failed"
    return "done"


def card_result(output: str) -> str:
    """The end of the output (where a command's summary or error usually is), cut for the card."""
    text = output.strip() or "(no output)"
    return text if len(text) <= RESULT_CHARS else "…" + text[-(RESULT_CHARS - 1) :]


class LongCalls:
    """One turn's watcher of its tool calls (the turn's own; a subagent's calls show on its card)."""

    def __init__(
        self, *, after: float, thread_id: str, reporter: TaskReporter, store: TaskStore | None
    ) -> None:
        self.after = after
        self.every = max(after, STEP_SECONDS)
        self.thread_id = thread_id
        self.reporter = reporter
        self.store = store
        #: Calls a redelivered turn runs again: their card was shown, so it is continued at once.
        self._resumed: set[str] = set()

    def watch(self, name: str, call_id: str, title: str) -> LongCall:
        return LongCall(self, name, call_id, title, at_once=call_id in self._resumed)

    async def resume(
        self, name: str, call_id: str, rerun: Callable[[], Awaitable[ToolMessage]]
    ) -> ToolMessage | None:
        """A call a killed turn left unanswered: None when it never became long (it gets the usual "not
        finished" result); its stored result when it had ended (its card gets that result, once); else
        ``rerun`` runs it again under the same id, its card continued from the start."""
        if self.store is None or not call_id:
            return None
        task_id = long_call_id(self.thread_id, call_id)
        try:
            earlier = await self.store.task(task_id)
        except Exception as exc:
            log.warning("reading long tool call %s failed: %s", task_id, type(exc).__name__)
            return None
        if earlier is None or earlier.kind != "tool":
            return None
        if earlier.status in ENDED and earlier.result is not None:
            await _quietly(
                self.reporter.finished(
                    task_id=task_id, status=earlier.status, result=card_result(earlier.result)
                )
            )
            status = "success" if earlier.status == "done" else "error"
            return ToolMessage(content=earlier.result, tool_call_id=call_id, name=name, status=status)
        self._resumed.add(call_id)
        return await rerun()


class LongCall:
    """One tool call being watched; see the module docstring for the life of a long one."""

    def __init__(self, calls: LongCalls, name: str, call_id: str, title: str, *, at_once: bool) -> None:
        self.calls = calls
        self.name = name
        self.call_id = call_id
        self.title = title
        self.task_id = long_call_id(calls.thread_id, call_id)
        self.resumed = at_once
        self.owner = asyncio.current_task()
        self._loop = asyncio.get_running_loop()
        self.began = self._loop.time()
        self.running = True
        #: A person pressed ⏹ Stop on the card, and the call was cancelled for it.
        self.stopped = False
        self._cancelled = False
        self._waiting = False  # the keeper sleeps between steps (the only place it may be cancelled)
        self._keeper: asyncio.Task[None] | None = None
        self._handle: asyncio.TimerHandle | None = None
        if at_once:
            self._open()
        else:
            self._handle = self._loop.call_later(calls.after, self._open)

    # --- while it runs ------------------------------------------------------------------------------
    def note(self, _text: str, status: TaskStatus) -> None:
        """The call waits for a person's approval (``waiting``) or goes on: the wait does not count as
        running, so a command is "long" only once it runs that long (agent.subagents.WatchedApprovals)."""
        if self._keeper is not None or not self.running:
            return
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if status != "waiting":
            self.began = self._loop.time()
            self._handle = self._loop.call_later(self.calls.after, self._open)

    async def run(self, work: Awaitable[str]) -> str:
        """Await the tool's work; a cancel that is this card's Stop (and only that) becomes its result."""
        try:
            output = await work
        except asyncio.CancelledError:
            if self._cancelled and self.owner is not None and self.owner.uncancel() == 0:
                return self._stop_note()
            # The turn itself is stopped (/stop): the card ends too, then the turn goes on stopping.
            await asyncio.shield(self.end(False, TURN_STOPPED, with_turn=True))
            raise
        if self._cancelled and self.owner is not None:  # the work swallowed the cancel: count it off
            self.owner.uncancel()
        return self._stop_note() if self._cancelled else output

    def _open(self) -> None:
        self._handle = None
        if self.running:
            self._keeper = asyncio.create_task(self._keep(), name=f"long tool call {self.task_id}")

    async def _keep(self) -> None:
        reporter = self.calls.reporter
        await self._record("begin")
        await _quietly(reporter.started(task_id=self.task_id, title=self.title, kind="tool"))
        stop = reporter.stop_requested(self.task_id)
        if self.resumed:  # its card says where it was when the service stopped: say why it starts over
            await _quietly(reporter.step(task_id=self.task_id, text="started again after a restart"))
        while self.running:
            self._waiting = True
            try:
                async with asyncio.timeout(self.calls.every):
                    await stop.wait()
            except TimeoutError:
                pass
            finally:
                self._waiting = False
            if not stop.is_set():
                if self.running:  # one edit per interval at most, and the card's own pacing on top
                    await _quietly(reporter.step(task_id=self.task_id, text=f"for {self._ran()}"))
                continue
            if self.running and self.owner is not None:
                self.stopped = self._cancelled = True
                self.owner.cancel("stopped with ⏹ Stop on its task card")
            return

    # --- its end ------------------------------------------------------------------------------------
    async def end(self, ok: bool, output: str, *, with_turn: bool = False) -> None:
        """The call returned (``output`` masked), or its turn was stopped (``with_turn``): a long one's
        record and card say how it ended."""
        self.running = False
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        keeper = self._keeper
        if keeper is None:
            return  # it never became long: nothing was shown
        if self._waiting:
            keeper.cancel()
        await asyncio.wait((keeper,))
        status: TaskStatus = "stopped" if self.stopped or with_turn else outcome(ok, output)
        if self.stopped:
            shown = f"Stopped with ⏹ Stop after {self._ran()}."
        elif with_turn:
            shown = f"Stopped with the reply it belonged to, after {self._ran()}."
        else:
            shown = card_result(output)
        await self._record("finish", status, output)
        await _quietly(self.calls.reporter.finished(task_id=self.task_id, status=status, result=shown))

    def _stop_note(self) -> str:
        what = "command" if self.name == "bash" else f"{self.name} call"
        return (
            f"[stopped] The person stopped this {what} with ⏹ Stop on its task card after {self._ran()};"
            " it was ended and everything it started was killed. Do not run it again unless they ask;"
            " go on without its result."
        )

    def _ran(self) -> str:
        return elapsed(self._loop.time() - self.began)

    async def _record(self, what: str, status: TaskStatus = "running", result: str = "") -> None:
        """The call's row in ``agent_tasks`` (kind ``tool``): what a redelivered turn resumes from."""
        store = self.calls.store
        if store is None:
            return
        try:
            if what == "begin":
                await store.begin(
                    task_id=self.task_id,
                    thread_id=self.calls.thread_id,
                    parent_task_id=None,
                    tool_call_id=self.call_id,
                    kind="tool",
                    title=self.title,
                    prompt=self.title,
                )
                await store.set_status(self.task_id, "running")
            else:
                await store.finish(
                    self.task_id, status=status, result=result, input_tokens=0, output_tokens=0
                )
        except Exception as exc:  # bookkeeping never fails the call
            log.warning("recording long tool call %s failed: %s", self.task_id, type(exc).__name__)


async def _quietly(call: Awaitable[Any]) -> None:
    """A card that cannot be shown never fails the tool call (the reporter should not raise anyway)."""
    try:
        await call
    except Exception as exc:
        log.warning("long tool call card update failed: %s", type(exc).__name__)
