"""One cgroup per sandboxed command, so its memory and process count are limited *in total*.

``ulimit`` limits each process on its own: eight processes under a 4 GB address-space limit can still
take 32 GB together. A cgroup counts everything a command starts (including what it keeps in its
``/tmp``, which is RAM) against one number, and the kernel's OOM killer acts inside that cgroup only,
so the service and other people's commands keep running.

Where a cgroup can be made (checked once, at start):

* **cgroup v2, delegated** — the service's own cgroup (``0::/…`` in ``/proc/self/cgroup``) offers the
  ``memory`` and ``pids`` controllers and was handed to us: a systemd unit with ``Delegate=yes`` (the
  directory belongs to the service's user, or carries systemd's ``trusted.delegate`` mark), or the
  root of a cgroup hierarchy we may write. The service moves itself into a leaf ``service/`` (v2 allows
  processes only in leaves of a subtree with controllers on) and makes ``cmd-…`` siblings.
* **cgroup v1** — separate ``memory`` and ``pids`` hierarchies we can write (root on a v1 or hybrid
  host): ``switchboard-<pid>-<n>/cmd-…`` below the service's own cgroup in each.
* otherwise **none** — the per-process ``ulimit`` s still apply; ``/health`` and ``doctor`` say so.

A command joins its cgroup before it starts: a ``/bin/sh`` in front of it writes ``0`` to the cgroup's
``cgroup.procs`` (which moves the writer) and then ``exec`` s the command, so not even its first child
can start outside it. (Doing that in Python between ``fork`` and ``exec`` would force ``subprocess`` to
``fork`` the whole service instead of ``vfork``, which cost ~15 ms per command here; the shell ~1 ms.)
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

log = logging.getLogger(__name__)

#: Tells apart the Cgroups of one process (tests run several services in one process).
_INSTANCES = itertools.count(1)
#: How long removal waits for the kernel to finish tearing down a killed command's processes.
REMOVE_WAIT_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class Mount:
    """One mounted cgroup hierarchy: where it is, and which cgroup path its root shows."""

    point: Path
    root: str
    version: Literal[1, 2]
    controllers: frozenset[str]


def _mounts(mountinfo: str) -> list[Mount]:
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 10:
            continue
        after = line.split(" - ", 1)[1].split()
        fstype, options = after[0], after[2] if len(after) > 2 else ""
        if fstype == "cgroup2":
            found.append(Mount(Path(fields[4]), fields[3], 2, frozenset()))
        elif fstype == "cgroup":
            found.append(Mount(Path(fields[4]), fields[3], 1, frozenset(options.split(","))))
    return found


def _own_paths(proc_cgroup: str) -> dict[str, str]:
    """``{"": v2 path, "memory": v1 path, "pids": …}`` from ``/proc/self/cgroup``."""
    paths = {}
    for line in proc_cgroup.splitlines():
        number, controllers, path = line.split(":", 2)
        if number == "0" and controllers == "":
            paths[""] = path
        for controller in controllers.split(","):
            if controller:
                paths[controller] = path
    return paths


def _below(mount: Mount, path: str) -> Path | None:
    """The directory of cgroup ``path`` in ``mount`` (None when the mount does not show it)."""
    root = mount.root.rstrip("/")
    if path != root and not path.startswith(root + "/"):
        return None
    return mount.point / path[len(root) :].lstrip("/")


def _write(path: Path, value: str) -> None:
    with path.open("w") as handle:
        handle.write(value)


def _count(path: Path, key: str) -> int:
    """A ``key value`` line from a flat-keyed cgroup file (``memory.events``, ``memory.oom_control``)."""
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    return 0


class CommandCgroup:
    """The cgroup(s) of one command: join from the child, watch for OOM kills, kill, remove."""

    def __init__(self, directories: list[Path], memory_dir: Path, version: Literal[1, 2]) -> None:
        self.directories = directories
        self.memory_dir = memory_dir
        self.version = version

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run by a shell that first moves itself (and so all it starts) into the cgroup.

        If joining fails the command does not run (the shell's error is the output).
        """
        joins = " && ".join(f'echo 0 > "${n}"' for n in range(1, len(self.directories) + 1))
        script = f'{joins} && shift {len(self.directories)} && exec "$@"'
        return ["/bin/sh", "-c", script, "sh", *(str(d / "cgroup.procs") for d in self.directories), *argv]

    def add(self, pid: int) -> None:
        """Move process ``pid`` (the service's view of it) into the cgroup; raises ``OSError`` if refused.

        For a command forked inside a long-lived sandbox, which holds before ``exec`` until it is in.
        """
        for directory in self.directories:
            _write(directory / "cgroup.procs", str(pid))

    def oom_kills(self) -> int:
        """How many processes the kernel killed because the command's memory was full."""
        if self.version == 2:
            return _count(self.memory_dir / "memory.events", "oom_kill")
        return _count(self.memory_dir / "memory.oom_control", "oom_kill")

    def kill(self) -> None:
        """SIGKILL everything in the cgroup (what escaped the sandbox's process group included)."""
        kill_file = self.memory_dir / "cgroup.kill"
        if self.version == 2 and kill_file.exists():
            with contextlib.suppress(OSError):
                _write(kill_file, "1")
            return
        for directory in self.directories:
            with contextlib.suppress(OSError):
                for pid in (directory / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(int(pid), signal.SIGKILL)

    def remove(self) -> None:
        """Remove the directories (after the processes are gone)."""
        deadline = time.monotonic() + REMOVE_WAIT_SECONDS
        for directory in self.directories:
            pause = 0.001
            while True:
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY: a killed process is not reaped yet
                    if time.monotonic() > deadline:
                        log.warning("could not remove cgroup %s (still busy)", directory)
                        break
                    self.kill()
                    time.sleep(pause)
                    pause = min(pause * 2, 0.05)


class Cgroups:
    """Makes :class:`CommandCgroup` s for the service, or says why it cannot."""

    def __init__(self, kind: Literal["v2", "v1", "none"], parents: list[Path], reason: str = "") -> None:
        self.kind = kind
        #: v2: the service's own (delegated) cgroup; v1: the service's cgroup in memory, then in pids.
        self.parents = parents
        self.reason = reason
        self._numbers = itertools.count(1)
        self._prepared = False
        #: v1: this instance's directory in each hierarchy, named after the service's pid.
        self.instance = f"switchboard-{os.getpid()}-{next(_INSTANCES)}"

    @classmethod
    def detect(cls) -> Cgroups:
        """What this process may do here. Never raises: the answer may be "none, because …"."""
        try:
            mounts = _mounts(Path("/proc/self/mountinfo").read_text())
            own = _own_paths(Path("/proc/self/cgroup").read_text())
        except OSError as exc:
            return cls("none", [], f"cannot read the process's cgroups ({exc.strerror})")
        v2 = _delegated_v2(mounts, own)
        if v2 is not None:
            return cls("v2", [v2])
        v1 = _writable_v1(mounts, own)
        if v1 is not None:
            return cls("v1", v1)
        return cls("none", [], "no writable cgroup with memory and pids controllers")

    def describe(self) -> str:
        """What ``/health`` shows under ``memory``."""
        if self.kind == "none":
            return "per process only"
        return f"cgroup {self.kind} per command"

    def create(self, memory_mb: int, processes: int) -> CommandCgroup | None:
        """A fresh cgroup limited to ``memory_mb`` and ``processes``, or None if making it failed."""
        if self.kind == "none":
            return None
        name = (
            f"cmd-{next(self._numbers)}"
            if self.kind == "v1"
            else f"{self.instance}-cmd-{next(self._numbers)}"
        )
        made: list[Path] = []
        try:
            self._prepare()
            if self.kind == "v2":
                directory = self.parents[0] / name
                directory.mkdir()
                made.append(directory)
                _write(directory / "memory.max", str(memory_mb * 1024 * 1024))
                with contextlib.suppress(OSError):  # no swap accounting: nothing to limit
                    _write(directory / "memory.swap.max", "0")
                _write(directory / "memory.oom.group", "1")  # an OOM kill ends the whole command
                _write(directory / "pids.max", str(processes))
                return CommandCgroup(made, directory, 2)
            memory_dir, pids_dir = (parent / self.instance / name for parent in self.parents)
            for directory in (memory_dir, pids_dir):
                directory.mkdir()
                made.append(directory)
            _write(memory_dir / "memory.limit_in_bytes", str(memory_mb * 1024 * 1024))
            with contextlib.suppress(OSError):  # memory+swap, where swap accounting exists
                _write(memory_dir / "memory.memsw.limit_in_bytes", str(memory_mb * 1024 * 1024))
            _write(pids_dir / "pids.max", str(processes))
            return CommandCgroup(made, memory_dir, 1)
        except OSError as exc:
            log.warning("could not create a cgroup for a command (%s); per-process limits only", exc)
            for directory in reversed(made):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            return None

    def _prepare(self) -> None:
        """Once: v1 — this instance's directory in each hierarchy; v2 — move ourselves into a leaf."""
        if self._prepared:
            return
        if self.kind == "v1":
            for parent in self.parents:
                _remove_stale(parent)
                (parent / self.instance).mkdir(exist_ok=True)
        else:
            _enable_controllers(self.parents[0])
        self._prepared = True

    def close(self) -> None:
        """Remove this instance's v1 directories (commands' own cgroups are already gone)."""
        if self.kind == "v1" and self._prepared:
            for parent in self.parents:
                with contextlib.suppress(OSError):
                    (parent / self.instance).rmdir()


def _remove_stale(parent: Path) -> None:
    """Empty v1 directories a crashed instance (its pid is gone) left behind."""
    for instance in parent.glob("switchboard-*"):
        pid = instance.name.split("-")[1]
        if not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        with contextlib.suppress(OSError):
            for command in instance.glob("cmd-*"):
                command.rmdir()
            instance.rmdir()


def _delegated_v2(mounts: list[Mount], own: dict[str, str]) -> Path | None:
    """The service's v2 cgroup when it has memory+pids and is ours to manage."""
    path = own.get("")
    for mount in mounts:
        if mount.version != 2 or path is None:
            continue
        directory = _below(mount, path)
        if directory is None:
            continue
        try:
            controllers = set((directory / "cgroup.controllers").read_text().split())
        except OSError:
            continue
        if not {"memory", "pids"} <= controllers:
            continue
        if not os.access(directory / "cgroup.subtree_control", os.W_OK):
            continue
        if directory == mount.point:
            # The root of a hierarchy (a container's own, or a root service): used only as it is.
            enabled = set((directory / "cgroup.subtree_control").read_text().split())
            if {"memory", "pids"} <= enabled:
                return directory
            continue
        if _is_delegated(directory):
            return directory
    return None


def _is_delegated(directory: Path) -> bool:
    """systemd ``Delegate=yes``: the cgroup is the service user's, or carries systemd's mark."""
    uid = os.geteuid()
    if uid != 0 and directory.stat().st_uid == uid:
        return True
    for name in ("trusted.delegate", "user.delegate"):
        with contextlib.suppress(OSError):
            if os.getxattr(directory, name) == b"1":
                return True
    return False


def _enable_controllers(directory: Path) -> None:
    """Move every process of ``directory`` into ``service/`` and turn on memory and pids below it."""
    subtree = directory / "cgroup.subtree_control"
    if {"memory", "pids"} <= set(subtree.read_text().split()):
        return
    leaf = directory / "service"
    leaf.mkdir(exist_ok=True)
    for pid in (directory / "cgroup.procs").read_text().split():
        with contextlib.suppress(ProcessLookupError):
            _write(leaf / "cgroup.procs", pid)
    _write(subtree, "+memory +pids")


def _writable_v1(mounts: list[Mount], own: dict[str, str]) -> list[Path] | None:
    """The service's cgroup in the v1 memory and pids hierarchies, when we can make children there."""
    found = []
    for controller in ("memory", "pids"):
        directory = next(
            (
                d
                for m in mounts
                if m.version == 1 and controller in m.controllers and controller in own
                for d in [_below(m, own[controller])]
                if d is not None and d.is_dir()
            ),
            None,
        )
        if directory is None or not os.access(directory, os.W_OK):
            return None
        found.append(directory)
    return found


__all__ = ["Cgroups", "CommandCgroup"]
