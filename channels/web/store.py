"""What the web chat keeps on disk per person: transcripts, uploads and the files the agent handed back.

Everything lives under ``<data_dir>/web-chat/<user>/``, so one person's requests can only ever name their
own files: a conversation or file id from somebody else's page simply does not exist in the caller's
folder. A transcript is a JSON-lines file of *entries*; an entry with a ``ref`` seen before replaces the
earlier one (a reply is written when it starts and again when it is final), so reading folds by ``ref``.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Conversation, file and upload ids: what :func:`new_id` makes (and nothing that could leave a folder).
ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{8,64}$")
TITLE_CHARS = 80


class UnknownId(LookupError):
    """The id is malformed or names nothing of this person's; safe to show."""


def new_id() -> str:
    return secrets.token_urlsafe(12)


def check_id(value: str, what: str) -> str:
    if not ID_PATTERN.match(value):
        raise UnknownId(f"no such {what}")
    return value


@dataclass(slots=True)
class Entry:
    """One bubble on the page: a person's message, or one message of a reply (text, buttons, files)."""

    ref: str
    role: str  # "user" | "assistant"
    text: str = ""
    actions: list[dict[str, Any]] = field(default_factory=list)
    files: list[dict[str, str]] = field(default_factory=list)
    live: bool = False
    at: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "role": self.role,
            "text": self.text,
            "actions": self.actions,
            "files": self.files,
            "live": self.live,
            "at": self.at,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Entry:
        return cls(
            ref=str(data["ref"]),
            role=str(data["role"]),
            text=str(data.get("text", "")),
            actions=list(data.get("actions", [])),
            files=list(data.get("files", [])),
            live=bool(data.get("live", False)),
            at=float(data.get("at", 0.0)),
        )


@dataclass(frozen=True, slots=True)
class ConversationInfo:
    id: str
    title: str
    updated_at: float


class WebChatStore:
    """The files of the web chat. Blocking calls: the channel runs them in a worker thread."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _user_dir(self, user: str) -> Path:
        if not user or "/" in user or user.startswith("."):
            raise UnknownId("no such person")
        return self.root / user

    def _transcript(self, user: str, conversation: str) -> Path:
        return self._user_dir(user) / "conversations" / f"{check_id(conversation, 'conversation')}.jsonl"

    # --- conversations ---------------------------------------------------------------------------
    def create(self, user: str) -> str:
        conversation = new_id()
        path = self._transcript(user, conversation)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        return conversation

    def exists(self, user: str, conversation: str) -> bool:
        try:
            return self._transcript(user, conversation).is_file()
        except UnknownId:
            return False

    def append(self, user: str, conversation: str, entry: Entry) -> None:
        path = self._transcript(user, conversation)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(entry.to_json(), ensure_ascii=False) + "\n")

    def entries(self, user: str, conversation: str) -> list[Entry]:
        path = self._transcript(user, conversation)
        if not path.is_file():
            raise UnknownId("no such conversation")
        folded: dict[str, Entry] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            try:
                entry = Entry.from_json(json.loads(line))
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short by a crash: the rest of the transcript still reads
            if entry.role == "deleted":
                folded.pop(entry.ref, None)
                continue
            earlier = folded.get(entry.ref)
            if earlier is not None:
                entry.at = earlier.at  # keeps its place in the conversation
            folded[entry.ref] = entry
        return sorted(folded.values(), key=lambda e: e.at)

    def conversations(self, user: str) -> list[ConversationInfo]:
        folder = self._user_dir(user) / "conversations"
        if not folder.is_dir():
            return []
        out = []
        for path in folder.glob("*.jsonl"):
            title = ""
            with path.open(encoding="utf-8") as lines:
                for line in lines:
                    try:
                        data = json.loads(line)
                    except ValueError:
                        continue
                    if data.get("role") == "user" and data.get("text"):
                        title = str(data["text"])
                        break
            title = " ".join(title.split())
            if len(title) > TITLE_CHARS:
                title = title[: TITLE_CHARS - 1] + "…"
            out.append(ConversationInfo(path.stem, title or "New conversation", path.stat().st_mtime))
        return sorted(out, key=lambda c: c.updated_at, reverse=True)

    # --- files -----------------------------------------------------------------------------------
    def save_upload(self, user: str, name: str, data: bytes) -> str:
        """Keep an uploaded file; the returned ref is what :meth:`read_upload` takes."""
        upload = new_id()
        folder = self._user_dir(user) / "uploads" / upload
        folder.mkdir(parents=True, exist_ok=True)
        (folder / safe_name(name)).write_bytes(data)
        return f"{user}/{upload}"

    def read_upload(self, ref: str) -> bytes:
        user, _, upload = ref.partition("/")
        folder = self._user_dir(user) / "uploads" / check_id(upload, "upload")
        files = list(folder.iterdir()) if folder.is_dir() else []
        if len(files) != 1:
            raise UnknownId("no such upload")
        return files[0].read_bytes()

    def keep_output(self, user: str, source: Path) -> dict[str, str]:
        """Copy a file the agent presented into the person's folder: the link outlives the thread."""
        file_id = new_id()
        folder = self._user_dir(user) / "files" / file_id
        folder.mkdir(parents=True, exist_ok=True)
        name = safe_name(source.name)
        shutil.copyfile(source, folder / name)
        return {"id": file_id, "name": name}

    def output(self, user: str, file_id: str) -> Path:
        folder = self._user_dir(user) / "files" / check_id(file_id, "file")
        files = list(folder.iterdir()) if folder.is_dir() else []
        if len(files) != 1:
            raise UnknownId("no such file")
        return files[0]


def safe_name(name: str) -> str:
    """A file name that stays one name in one folder (no separators, no leading dot), never empty."""
    cleaned = re.sub(r"[^\w.\- ]", "_", Path(name.replace("\\", "/")).name).strip().lstrip(".")
    return cleaned[:120] or "file"
