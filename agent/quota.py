"""The per-thread disk quota (``sandbox.limits.disk_mb``) over the thread's writable tree.

``ulimit -f`` bounds one file; nothing bounded the sum, so a loop of files each under the limit could
fill the data volume for everybody. Filesystem quotas (project quotas on XFS/ext4) would do it in the
kernel, but need a filesystem set up for them and root — so the service measures instead:

* file tools refuse a write that would take the tree past the quota (:meth:`DiskQuota.refuse_write`);
* a command's ``ulimit -f`` is at most what is left (:meth:`DiskQuota.file_limit_kb`), so no single
  file can cross the line;
* while a command runs, :class:`DiskWatcher` measures the tree every fraction of a second and kills the
  command once the tree is over the quota (many small files).

Usage is allocated blocks (``st_blocks``), counted once per inode, so hard links and sparse files cost
what they take on disk. A command may still run when the tree is already over (``rm`` must work); it
then gets ``ulimit -f 0`` and is stopped only if the tree grows further.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

MB = 1024 * 1024
#: Fastest and slowest pace of the watcher; in between it waits ten times as long as a walk took, so
#: a huge tree costs at most a tenth of a core.
WATCH_MIN_SECONDS = 0.1
WATCH_MAX_SECONDS = 2.0


def tree_usage(roots: Iterable[Path], *, fix_permissions: bool = False) -> int:
    """Bytes allocated under ``roots`` (each inode once; symlinks are not followed).

    ``fix_permissions``: a directory we own but cannot read (a command's ``chmod 000``, which the
    service's non-root user cannot override) is given back ``u+rwx`` so its content is counted.
    """
    seen: set[tuple[int, int]] = set()
    total = 0
    pending = [str(root) for root in roots]
    while pending:
        directory = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except PermissionError:
            if fix_permissions and _regain(directory):
                pending.append(directory)
            continue
        except OSError:
            continue  # removed while we looked
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            key = (info.st_dev, info.st_ino)
            if key in seen:
                continue
            seen.add(key)
            total += info.st_blocks * 512
            if stat.S_ISDIR(info.st_mode):
                pending.append(entry.path)
    return total


def _regain(directory: str) -> bool:
    try:
        mode = os.lstat(directory).st_mode
        if stat.S_IMODE(mode) & 0o700 == 0o700:
            return False
        os.chmod(directory, stat.S_IMODE(mode) | 0o700)
        return True
    except OSError:
        return False


class DiskQuota:
    """``limit_mb`` over a thread's writable areas."""

    def __init__(self, limit_mb: int, roots: list[Path], *, fix_permissions: bool = False) -> None:
        self.limit_mb = limit_mb
        self.limit = limit_mb * MB
        self.roots = roots
        self.fix_permissions = fix_permissions

    def usage(self) -> int:
        return tree_usage(self.roots, fix_permissions=self.fix_permissions)

    def refuse_write(self, target: Path, size: int, *, append: bool) -> str | None:
        """Why writing ``size`` bytes to ``target`` is refused (None: it fits). Shrinking always fits."""
        try:
            existing = target.stat().st_size
        except OSError:
            existing = 0
        growth = size if append else size - existing
        if growth <= 0:
            return None
        used = self.usage()
        if used + growth <= self.limit:
            return None
        return (
            f"writing {target.name} would take this conversation's files past the {self.limit_mb} MB disk "
            f"quota ({used / MB:.0f} MB used); delete files to free space"
        )

    def file_limit_kb(self, used: int, per_file_mb: int) -> int:
        """The ``ulimit -f`` for a command: the per-file limit, or what is left of the quota if less."""
        left = max(0, self.limit - used) // 1024
        return min(per_file_mb * 1024, left)

    def over_note(self, used: int) -> str:
        """What a command started over the quota is told (it runs, so it can delete files)."""
        return (
            f"[note: this conversation's files use {used / MB:.0f} MB, more than the {self.limit_mb} MB "
            "disk quota; files cannot grow until some are deleted]"
        )

    def stopped_note(self) -> str:
        return (
            f"[stopped: this conversation's files grew past the {self.limit_mb} MB disk quota; "
            "delete files to free space]"
        )


class DiskWatcher:
    """Measures the tree while one command runs; calls ``stop`` once when it is over ``ceiling`` bytes.

    A thread of its own (not the event loop's executor), so a large tree never delays other tools.
    ``also`` is checked each round as well (the cgroup's OOM counter), with the same ``stop``.
    """

    def __init__(
        self,
        quota: DiskQuota,
        ceiling: int,
        stop: Callable[[str], None],
        also: Callable[[], str | None] | None = None,
    ) -> None:
        self.quota = quota
        self.ceiling = ceiling
        self.stop = stop
        self.also = also
        self.reason: str | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="sandbox-quota", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _watch(self) -> None:
        pause = WATCH_MIN_SECONDS
        while not self._done.wait(pause):
            began = time.monotonic()
            reason = self.also() if self.also is not None else None
            if reason is None and self.quota.usage() > self.ceiling:
                reason = "disk"
            if reason is not None:
                self.reason = reason
                self.stop(reason)
                return
            took = time.monotonic() - began
            pause = min(WATCH_MAX_SECONDS, max(WATCH_MIN_SECONDS, took * 10))

    def close(self) -> None:
        self._done.set()
        with contextlib.suppress(RuntimeError):
            self._thread.join()


__all__ = ["DiskQuota", "DiskWatcher", "tree_usage"]
