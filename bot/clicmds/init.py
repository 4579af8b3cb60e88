"""``switchboard init``: write a starter ``config.yaml`` (and, on request, the deploy files) from the wheel.

The starter file is ``config.example.yaml`` as shipped — every key with its default and a comment — so
a fresh install needs no checkout of the repository. Nothing is ever overwritten: an operator's edited
config is worth more than a fresh copy, so an existing file is refused in one line and left alone.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from config.loader import CONFIG_ENV_VAR, DEFAULT_CONFIG_FILE

EXAMPLE = "config.example.yaml"


def register(subparsers: Any, load_or_exit: Callable[[str | None], Any]) -> None:
    init = subparsers.add_parser(
        "init", help="write a starter config.yaml (every key with its default); never overwrites"
    )
    init.add_argument(
        "--deploy-dir",
        help="also copy the deploy files (systemd unit, Dockerfile steps, compose, Kubernetes) into this folder",
    )
    init.set_defaults(func=cmd_init)


def shipped() -> Traversable:
    """The package's data folder: real files in a wheel, symlinks to the repository in a checkout."""
    return resources.files("bot._data")


def target_path(explicit: str | None) -> Path:
    """Where the config goes: ``--config``, else ``$SWITCHBOARD_CONFIG``, else ``./config.yaml``.

    The same order ``serve`` reads it in, so ``init`` then ``serve`` with the same flags finds the file.
    """
    return Path(explicit or os.environ.get(CONFIG_ENV_VAR) or DEFAULT_CONFIG_FILE)


def write_new(path: Path, data: bytes, mode: int) -> str | None:
    """Create ``path`` with ``data``; a problem (it exists, no such folder) comes back as one line."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        return f"{path} already exists; not overwriting it (move it away, or pass --config OTHER.yaml)"
    except OSError as exc:
        return f"cannot create {path}: {exc.strerror or exc}"
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    return None


def _deploy_files(root: Traversable, prefix: str = "") -> list[tuple[str, Traversable]]:
    found: list[tuple[str, Traversable]] = []
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        name = f"{prefix}{entry.name}"
        if entry.is_dir():
            found.extend(_deploy_files(entry, f"{name}/"))
        elif not entry.name.startswith("."):
            found.append((name, entry))
    return found


def cmd_init(args: argparse.Namespace) -> int:
    path = target_path(args.config)
    # Secrets end up in this file (or next to it): readable by its owner only, like /etc/switchboard/env.
    problem = write_new(path, shipped().joinpath(EXAMPLE).read_bytes(), 0o600)
    if problem is not None:
        print(f"switchboard: {problem}", file=sys.stderr)
        return 1
    print(f"wrote {path}: edit channels, models and server.public_url, then `switchboard config check`")
    if args.deploy_dir:
        out = Path(args.deploy_dir)
        for name, entry in _deploy_files(shipped().joinpath("deploy")):
            dest = out / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            mode = 0o755 if name.endswith(".sh") else 0o644
            problem = write_new(dest, entry.read_bytes(), mode)
            if problem is not None:
                print(f"switchboard: {problem}", file=sys.stderr)
                return 1
            print(f"wrote {dest}")
    return 0
