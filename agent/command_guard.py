"""Everything set up around one ``bash`` command besides the sandbox itself: quotas and the filter.

One :class:`CommandGuard` per command. Before the command starts it measures the thread's tree (for
``ulimit -f`` and the over-quota note) and makes the command's cgroup (the seccomp filter is the
sandbox's, loaded once when a thread's sandbox starts); while it runs it watches the disk quota and the cgroup's OOM counter; afterwards it removes
the cgroup and says which of these limits ended the command, in a sentence the model can act on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass, field

from agent.cgroups import Cgroups, CommandCgroup
from agent.quota import DiskQuota, DiskWatcher
from config.schema import SandboxLimits


@dataclass(slots=True)
class RunPlan:
    """What the command line and ``spawn`` need from the guard."""

    #: ``ulimit -f`` in KB (None: the per-file limit from ``sandbox.limits``).
    file_kb: int | None = None
    #: Puts the command line into the command's cgroup (None: no cgroup).
    cgroup: CommandCgroup | None = None
    #: Said before the command's output (e.g. that the tree is already over the quota).
    note: str = ""

    def wrap(self, argv: list[str]) -> list[str]:
        """The command line that starts inside the command's cgroup (``argv`` itself without one)."""
        return self.cgroup.wrap(argv) if self.cgroup is not None else argv


@dataclass(slots=True)
class CommandGuard:
    limits: SandboxLimits | None
    quota: DiskQuota | None
    cgroups: Cgroups | None = None
    plan: RunPlan = field(default_factory=RunPlan)
    cgroup: CommandCgroup | None = None
    watcher: DiskWatcher | None = None
    used: int = 0
    memory_killed: bool = False

    async def begin(self) -> RunPlan:
        """Measure, make the cgroup. Cancelled half-way, it undoes what it made."""
        task = asyncio.ensure_future(asyncio.to_thread(self._begin))
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await task
            await asyncio.to_thread(self._end)
            raise
        return self.plan

    def _begin(self) -> None:
        if self.quota is not None and self.limits is not None:
            self.used = self.quota.usage()
            self.plan.file_kb = self.quota.file_limit_kb(self.used, self.limits.file_size_mb)
            if self.used > self.quota.limit:
                self.plan.note = self.quota.over_note(self.used)
        if self.cgroups is not None and self.limits is not None:
            self.cgroup = self.cgroups.create(self.limits.memory_total_mb, self.limits.processes)
            self.plan.cgroup = self.cgroup

    def spawned(self, pid: int | None) -> None:
        """The command started (``pid`` is its process group; None: it failed to start)."""
        if pid is None or self.quota is None:
            return
        group = pid

        def stop(_reason: str) -> None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
            if self.cgroup is not None:
                self.cgroup.kill()

        # Over the quota already: the command may shrink the tree, and is stopped only if it grows.
        ceiling = max(self.quota.limit, self.used)
        self.watcher = DiskWatcher(self.quota, ceiling, stop, also=self._oom)
        self.watcher.start()

    def _oom(self) -> str | None:
        return "memory" if self.cgroup is not None and self.cgroup.oom_kills() > 0 else None

    async def end(self) -> None:
        """The command is over: stop watching, kill what is left in its cgroup, remove the cgroup."""
        await asyncio.to_thread(self._end)

    def _end(self) -> None:
        if self.watcher is not None:
            self.watcher.close()
        if self.cgroup is not None:
            self.cgroup.kill()
            self.memory_killed = self.cgroup.oom_kills() > 0
            self.cgroup.remove()

    def notice(self, exit_code: int | None, output: str) -> str:
        """Which of the guard's limits ended the command ("" when none did)."""
        reason = self.watcher.reason if self.watcher is not None else None
        if reason == "memory" or self.memory_killed:
            assert self.limits is not None
            return f"\n… [stopped: the command used more than {self.limits.memory_total_mb} MB of memory in total]"
        if reason == "disk" and self.quota is not None:
            return f"\n… {self.quota.stopped_note()}"
        if self.quota is not None and self.limits is not None and self._quota_cut_file(exit_code, output):
            return f"\n… {self.quota.stopped_note()}"
        return ""

    def _quota_cut_file(self, exit_code: int | None, output: str) -> bool:
        """A file hit ``ulimit -f`` while that limit was the quota's remainder, not the per-file one."""
        assert self.limits is not None
        if self.plan.file_kb is None or self.plan.file_kb >= self.limits.file_size_mb * 1024:
            return False
        xfsz = exit_code is not None and (exit_code - 128 == signal.SIGXFSZ or -exit_code == signal.SIGXFSZ)
        return xfsz or "File size limit exceeded" in output
