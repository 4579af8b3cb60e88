"""Whether the service can write where it keeps its data: a real write, small and off the event loop.

Why: with the data disk full, SQLite still answered ``SELECT 1`` — ``/health`` said ``database: ok``
and ``/ready`` 200 — while every turn failed to store its checkpoint. Reading does not need space;
only a write tells. So this check writes :data:`PROBE_BYTES` (room for a few SQLite pages and a WAL
frame) to a new file in each directory that must take writes — ``data_dir`` and, for SQLite, the
database file's directory when that is elsewhere — and removes it again. No ``fsync``: the file
systems the service runs on (ext4, xfs, btrfs, tmpfs) reserve space at ``write()`` and refuse it there
when there is none. It runs through :class:`bot.probes.CachedProbe` (at most once per 2 s, bounded by
2 s), so it is ``/health``'s ``disk``, a reason for ``/ready``, ``switchboard_component_up{component=
"disk"}``, and what tells a turn waiting for storage (bot/faults.py) that space is back.

The answer names the directory by its role and the error by its ``errno`` name and text only
(``not writable: No space left on device [ENOSPC] (data_dir)``), never its contents.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
from collections.abc import Sequence
from pathlib import Path

#: Bytes written per check: a write that needs new blocks, as the database's next one does.
PROBE_BYTES = 64 * 1024
PROBE_NAME = ".switchboard-write-check"


def _try_write(directory: Path) -> str | None:
    """Write and remove a probe file in ``directory``; None when that worked, else the OS's reason."""
    path = directory / f"{PROBE_NAME}-{os.getpid()}"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError as exc:
        return _reason(exc)
    try:
        os.write(fd, b"\0" * PROBE_BYTES)
    except OSError as exc:
        return _reason(exc)
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
    return None


def _reason(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    text = exc.strerror or type(exc).__name__
    return f"{text} [{name}]" if name else text


class DiskCheck:
    """The check itself: ``problem()`` is None when every directory takes a write, else why not."""

    def __init__(self, directories: Sequence[tuple[str, Path]]) -> None:
        #: (role, directory): the role names it in the answer (``data_dir``, ``database``).
        self.directories = list(directories)
        self._running: asyncio.Future[str | None] | None = None

    async def problem(self) -> str | None:
        """Run the check in a thread; while an earlier one still runs (a hung disk), wait for that one
        instead of starting another: a disk that does not answer holds one thread, not one per check."""
        running = self._running
        if running is None or running.done():
            running = self._running = asyncio.ensure_future(asyncio.to_thread(self._check))
        return await asyncio.shield(running)

    def _check(self) -> str | None:
        for role, directory in self.directories:
            reason = _try_write(directory)
            if reason is not None:
                return f"not writable: {reason} ({role})"
        return None


def disk_check(data_dir: Path, sqlite_path: Path | None) -> DiskCheck:
    """The check for a service: its ``data_dir``, and the SQLite file's directory when elsewhere."""
    directories: list[tuple[str, Path]] = [("data_dir", data_dir)]
    if sqlite_path is not None and sqlite_path.parent.resolve() != data_dir.resolve():
        directories.append(("database", sqlite_path.parent))
    return DiskCheck(directories)
