"""Await a coroutine in a :class:`contextvars.Context` of its own, in the awaiting task: :class:`OwnContext`.

Why: one task runs a lane's turns one after another — the task that routed the first message goes on to
run its lane (``LaneScheduler.carry``), and the agent's stream runs in that task too (one task per
message, not three). A context variable a turn sets and never resets — an agent framework's tracing or
config state, a library's "current run" — would then be what the next turn in that task starts with:
another person's message, in a group. Every turn runs in a fresh context instead: each time the
coroutine resumes it runs inside that context, so what it sets stays there, and tasks it creates copy it.

A task of its own per turn (``asyncio.create_task(…, context=…)``) would do the same, and is what the
one-task change took away: a task, its future and its wake-ups per message cost a visible share of a
burst of new chats (docs/PERFORMANCE.md). Here the turn stays in the lane's task, so ``/stop`` (a
cancellation of that task, counted by ``bot.lanes.stoppable``) and ``asyncio.current_task()`` are
unchanged: a cancellation is thrown into the coroutine where it waits, as the task would.
"""

from __future__ import annotations

import contextvars
from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class OwnContext(Generic[T]):
    """``await OwnContext(coro, context)``: ``await coro``, with each of its steps run in ``context``.

    ``context`` must not be in use elsewhere (a fresh ``contextvars.Context()`` or a ``copy()``): a
    context can be entered by one thread of execution at a time."""

    __slots__ = ("_context", "_coro")

    def __init__(self, coro: Coroutine[Any, Any, T], context: contextvars.Context) -> None:
        self._coro = coro
        self._context = context

    def __await__(self) -> Generator[Any, Any, T]:
        run, send, throw = self._context.run, self._coro.send, self._coro.throw
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            try:
                waiting = run(send, sent) if thrown is None else run(throw, thrown)
            except StopIteration as done:
                return done.value
            try:
                sent, thrown = (yield waiting), None  # the future the coroutine waits on, to the task
            except BaseException as exc:  # a cancellation (or close) of the task: into the coroutine
                sent, thrown = None, exc
