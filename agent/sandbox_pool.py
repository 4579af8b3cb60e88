"""Long-lived sandboxes per thread: made on a thread's first command, reused, closed when idle.

A thread's commands run one at a time in a sandbox (:class:`~agent.sandbox_session.RunnerSession`); a
command that starts while another of the same thread runs (parallel tool calls, a subagent) gets a
second sandbox, which stays for the next time. A thread's sandboxes share its egress proxy and network
holder (``sandbox.network: true``), which end with the last of them.

A sandbox closes after ``sandbox.idle_seconds`` without a command, when more than ``sandbox.max_idle``
are idle (the longest idle first), when its runner died (found when the next command asks for it), when
the thread's tree was deleted or replaced underneath it (its mounts would show the old one), and at
shutdown (:meth:`SandboxPool.close`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from agent.egress import EgressProxy, NetworkHolder
from agent.paths import ThreadPaths
from agent.sandbox_session import RunnerSession

log = logging.getLogger(__name__)

#: The directories a sandbox binds: if one is replaced, the sandbox would show the old one.
BOUND = ("workspace", "outputs", "uploads")


class SessionFactory(Protocol):
    """What the pool needs from the provider: networks and sandboxes for one thread."""

    async def open_network(self, paths: ThreadPaths) -> tuple[EgressProxy, NetworkHolder] | None: ...

    async def open_session(
        self, paths: ThreadPaths, holder: NetworkHolder | None, box: ThreadBox, mounts: tuple[str, ...] = ()
    ) -> RunnerSession: ...


def tree_stamp(root: Path) -> tuple[tuple[int, int], ...]:
    """Which directories (device, inode) a sandbox made now would bind."""
    stamp = []
    for name in BOUND:
        try:
            info = os.stat(root / name)
        except OSError:
            return ()
        stamp.append((info.st_dev, info.st_ino))
    return tuple(stamp)


@dataclass(eq=False)
class ThreadBox:
    """One thread's sandboxes and its network."""

    key: str
    stamp: tuple[tuple[int, int], ...]
    idle: list[RunnerSession] = field(default_factory=list)
    #: Every open sandbox of the thread, idle or running a command.
    sessions: set[RunnerSession] = field(default_factory=set)
    #: The extra read-only mounts each sandbox was made with (a coding agent's; none for ``bash``).
    mounts: dict[RunnerSession, tuple[str, ...]] = field(default_factory=dict)
    busy: int = 0
    egress: EgressProxy | None = None
    holder: NetworkHolder | None = None
    network_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    retired: bool = False


class SandboxPool:
    def __init__(self, factory: SessionFactory, *, idle_seconds: float, max_idle: int) -> None:
        self.factory = factory
        self.idle_seconds = idle_seconds
        self.max_idle = max_idle
        self.boxes: dict[str, ThreadBox] = {}
        #: Idle sandboxes, the longest idle first, with the timer that closes each.
        self._idle: OrderedDict[RunnerSession, tuple[ThreadBox, asyncio.TimerHandle]] = OrderedDict()
        self._closing: set[asyncio.Task[None]] = set()
        self.closed = False

    async def lease(
        self, paths: ThreadPaths, mounts: tuple[str, ...] = ()
    ) -> tuple[RunnerSession, ThreadBox]:
        """A sandbox of this thread's for one command; it comes back through the box's ``idle`` hook.

        Only a sandbox made with exactly ``mounts`` is reused: a coding agent's extra mounts are never
        seen by a ``bash`` command, nor an agent's sandbox without them.
        """
        if self.closed:
            raise RuntimeError("the sandbox pool is closed")
        key = str(paths.root.resolve())
        stamp = await asyncio.to_thread(tree_stamp, Path(key))
        box = self.boxes.get(key)
        if box is not None and (box.stamp != stamp or not _holder_alive(box)):
            self._retire(box)
            box = None
        if box is None:
            box = self.boxes[key] = ThreadBox(key, stamp)
        while (session := _idle_with(box, mounts)) is not None:
            _, timer = self._idle.pop(session)
            timer.cancel()
            if session.alive:
                box.busy += 1
                return session, box
            self._close_later(session, box)
        box.busy += 1
        try:
            async with box.network_lock:
                if box.holder is None:
                    network = await self.factory.open_network(paths)
                    if network is not None:
                        box.egress, box.holder = network
            session = await self.factory.open_session(paths, box.holder, box, mounts)
            box.sessions.add(session)
            box.mounts[session] = mounts
        except BaseException:
            box.busy -= 1
            self._drop_if_empty(box)
            raise
        return session, box

    def idle(self, box: ThreadBox, session: RunnerSession) -> None:
        """A command is over: keep its sandbox for the next one, or close it."""
        box.busy -= 1
        if not session.alive or self.closed or box.retired:
            self._close_later(session, box)
            return
        box.idle.append(session)
        loop = asyncio.get_running_loop()
        timer = loop.call_later(self.idle_seconds, self._expire, box, session)
        self._idle[session] = (box, timer)
        while len(self._idle) > self.max_idle:
            oldest, (oldest_box, oldest_timer) = next(iter(self._idle.items()))
            oldest_timer.cancel()
            self._expire(oldest_box, oldest)

    def _expire(self, box: ThreadBox, session: RunnerSession) -> None:
        entry = self._idle.pop(session, None)
        if entry is not None:
            entry[1].cancel()
        with contextlib.suppress(ValueError):
            box.idle.remove(session)
        self._close_later(session, box)

    def _close_later(self, session: RunnerSession, box: ThreadBox) -> None:
        task = asyncio.get_running_loop().create_task(self._close_session(session, box))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _close_session(self, session: RunnerSession, box: ThreadBox) -> None:
        try:
            await session.close()
        except Exception:
            log.exception("closing a sandbox failed")
        box.sessions.discard(session)
        box.mounts.pop(session, None)
        self._drop_if_empty(box)

    def _drop_if_empty(self, box: ThreadBox) -> None:
        if box.busy or box.idle or box.sessions:
            return
        if self.boxes.get(box.key) is box:
            del self.boxes[box.key]
        if box.holder is not None or box.egress is not None:
            task = asyncio.get_running_loop().create_task(_close_network(box))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def _retire(self, box: ThreadBox) -> None:
        """Stop handing out this box's sandboxes (busy ones finish their command first)."""
        box.retired = True
        if self.boxes.get(box.key) is box:
            del self.boxes[box.key]
        for session in list(box.idle):
            self._expire(box, session)
        self._drop_if_empty(box)

    async def forget(self, paths: ThreadPaths) -> None:
        """Close a thread's idle sandboxes now (the start-up check's scratch thread)."""
        box = self.boxes.get(str(paths.root.resolve()))
        if box is not None:
            self._retire(box)
        await self.settle()

    async def settle(self) -> None:
        """Wait until every sandbox being closed is gone."""
        while self._closing:
            await asyncio.gather(*list(self._closing), return_exceptions=True)

    async def close(self) -> None:
        """Shutdown: close every sandbox (a command still running ends with them) and every network."""
        self.closed = True
        for box in list(self.boxes.values()):
            self._retire(box)
            for session in box.sessions - set(box.idle):
                self._close_later(session, box)  # its command ends, told that the sandbox ended
        await self.settle()

    def count(self) -> int:
        """Sandboxes open now (idle ones and those running a command)."""
        return sum(len(box.sessions) for box in self.boxes.values())


def _idle_with(box: ThreadBox, mounts: tuple[str, ...]) -> RunnerSession | None:
    """Take the most recently idle sandbox made with ``mounts`` out of the box's idle list."""
    for index in range(len(box.idle) - 1, -1, -1):
        if box.mounts.get(box.idle[index], ()) == mounts:
            return box.idle.pop(index)
    return None


def _holder_alive(box: ThreadBox) -> bool:
    return box.holder is None or box.holder.process.returncode is None


async def _close_network(box: ThreadBox) -> None:
    holder, egress = box.holder, box.egress
    box.holder = box.egress = None
    if holder is not None:
        await holder.close()
    if egress is not None:
        await egress.close()


__all__ = ["SandboxPool", "SessionFactory", "ThreadBox"]
