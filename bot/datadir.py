"""Before start-up: can this process's user write to ``data_dir``?

Why a check of its own: a service moved from root to its own user (the shipped systemd unit runs it as
``switchboard``) finds a data directory, a database and thread folders that root made. Without this it
fails later and far from the cause — inside SQLite ("readonly database") or in a thread's first
command. One line names the folder, who owns it and the ``chown`` that fixes it.

Only ``data_dir`` and what lies directly in it are looked at (a few ``stat`` calls, no imports), which is
where a previous root run shows: the database files and ``users/`` are made there first.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

WRITE_AND_ENTER = os.W_OK | os.X_OK


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _writable(path: Path) -> bool:
    if path.is_dir() and not path.is_symlink():
        return os.access(path, WRITE_AND_ENTER)
    return os.access(path, os.W_OK)


def _owner(path: Path) -> str:
    try:
        return user_name(path.stat().st_uid)
    except OSError:
        return "another user"


def data_dir_problem(data_dir: str) -> str | None:
    """One line saying why this process cannot use ``data_dir``, or None when it can."""
    root = Path(data_dir).absolute()
    me = user_name(os.geteuid())
    who = f"this service's user ({me}, uid {os.geteuid()})"
    if not root.exists():
        parent = next((p for p in root.parents if p.exists()), Path("/"))
        if _writable(parent):
            return None
        return (
            f"data_dir {root} does not exist and {who} cannot create it in {parent}: "
            f"create it for this user (install -d -o {me} {root}) or point data_dir at a folder it owns"
        )
    if not root.is_dir():
        return f"data_dir {root} is not a folder"
    try:
        children = sorted(root.iterdir())
    except PermissionError:
        children = []
    for path in [root, *children]:
        # A file gone since the listing (SQLite removes -shm and -wal when a last connection closes,
        # e.g. a backup or a CLI command reading the database) is no reason to refuse start-up.
        if not _writable(path) and path.exists():
            return (
                f"data_dir {root} is not writable by {who}: {path} belongs to {_owner(path)} "
                f"(was the service run as root before?): chown -R {me}: {root}"
            )
    return None
