"""Where an owner's files live: ``<data_dir>/users/<owner>/threads/<thread>/user-data/{workspace,uploads,outputs}``.

The agent sees the same tree as ``/mnt/user-data/...``. Owner and thread ids are sanitised into single
path components so no id can climb out of ``data_dir``.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

VIRTUAL_ROOT = "/mnt/user-data"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
MAX_NAME = 120


def safe_component(value: str) -> str:
    """A single, harmless path component for an id (never empty, never '.' or '..')."""
    cleaned = _UNSAFE.sub("_", value).strip("._") or "_"
    return cleaned[:MAX_NAME]


def safe_filename(name: str) -> str:
    """Keep a file's readable name but drop directories, control characters and shell-hostile bytes."""
    name = unicodedata.normalize("NFKC", name).replace("\\", "/").split("/")[-1]
    name = "".join(ch for ch in name if ch.isprintable())
    stem, dot, ext = name.rpartition(".")
    if not dot:
        stem, ext = name, ""
    stem = re.sub(r"[^\w.\- ]+", "_", stem).strip(" ._") or "file"
    ext = re.sub(r"[^\w]+", "", ext)[:16]
    return (stem[: MAX_NAME - len(ext) - 1] + (f".{ext}" if ext else "")).replace(" ", "_")


def unique_path(directory: Path, name: str) -> Path:
    """``name`` in ``directory``, or ``name_1``, ``name_2``… if taken."""
    candidate = directory / name
    stem, ext = candidate.stem, candidate.suffix
    counter = 1
    while candidate.exists():
        candidate = directory / f"{stem}_{counter}{ext}"
        counter += 1
    return candidate


@dataclass(frozen=True, slots=True)
class ThreadPaths:
    data_dir: Path
    owner: str
    thread_id: str

    @property
    def root(self) -> Path:
        return (
            self.data_dir
            / "users"
            / safe_component(self.owner)
            / "threads"
            / safe_component(self.thread_id)
            / "user-data"
        )

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def uploads(self) -> Path:
        return self.root / "uploads"

    @property
    def outputs(self) -> Path:
        return self.root / "outputs"

    def ensure(self) -> ThreadPaths:
        for directory in (self.workspace, self.uploads, self.outputs):
            directory.mkdir(parents=True, exist_ok=True)
        return self

    def virtual(self, real: Path) -> str:
        """The agent-visible path of a real path inside this tree."""
        return f"{VIRTUAL_ROOT}/{real.resolve().relative_to(self.root.resolve()).as_posix()}"
