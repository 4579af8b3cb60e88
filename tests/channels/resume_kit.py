"""kill -9 mid-answer, after the second overflow message: the platform-neutral half of each platform's test.

A real ``python -m bot serve`` (bench/reliability_telegram.py's :class:`ServeProcess`) answers a long
question against a platform fake; once the service has stored a reply of three messages (the first and
two overflow ones) it is killed with SIGKILL, mid-answer. The next start resumes the turn; the chat must
end exactly like an uninterrupted answer to the same question in another chat. Each platform's test adds
what "live" means there (a Stop button, a card still streaming or "processing").
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.reliability_telegram import ServeProcess, wait_for
from channels.splitter import split_text
from tests.fakes.openai_server import FakeOpenAI, Reply, echo_reply, last_user_text

QUESTION = "tell me everything"
#: Messages a whole answer takes; the kill comes once three are stored, with most of the fourth to go.
CHUNKS = 4


def long_answer(limit: int) -> str:
    """An answer of about ``CHUNKS - 0.5`` messages: numbered words (so a repeat is visible) in paragraphs."""
    paragraphs, size, n = [], 0, 0
    while size < (CHUNKS - 0.5) * limit:
        words = " ".join(f"w{n + i}" for i in range(40))
        n += 40
        paragraphs.append(words)
        size += len(words) + 2
    return "\n\n".join(paragraphs)


def expected_messages(limit: int) -> list[str]:
    return split_text(long_answer(limit), limit)


def answering(
    limit: int, pieces_per_message: int = 40, seconds_per_message: float = 3.2
) -> Callable[[dict[str, Any]], Reply]:
    """The fake model: the long answer to :data:`QUESTION` (the same every run), streamed in
    ``pieces_per_message`` pieces per message's worth of text over ``seconds_per_message``."""

    def reply(request: dict[str, Any]) -> Reply:
        if last_user_text(request).strip() == QUESTION:
            size = max(20, limit // pieces_per_message)
            return Reply(
                text=long_answer(limit), chunk_size=size, delay=seconds_per_message / pieces_per_message
            )
        return echo_reply(request)

    return reply


def write_config(directory: Path, llm: FakeOpenAI, channel_yaml: str) -> Path:
    """A serve config for one platform (``channel_yaml``: the lines under ``channels:``, indented two
    spaces); the database lives in ``directory`` across restarts."""
    data = directory / "data"
    path = directory / "config.yaml"
    path.write_text(
        "server: {host: 127.0.0.1, port: 0}\n"
        f"data_dir: '{data}'\n"
        f"database: {{url: 'sqlite+aiosqlite:///{data / 'sb.db'}'}}\n"
        f"models: [{{name: default, model: fake-model, api_key: sk-fake, base_url: '{llm.base_url}', "
        "max_retries: 0}]\n"
        "memory: {enabled: false}\n"
        "bus: {drain_seconds: 2}\n"
        f"channels:\n{channel_yaml}"
    )
    return path


def _entry(directory: Path, chat: str) -> tuple[str, str | None] | None:
    """(status, reply_state) of the inbox entry asking :data:`QUESTION` in ``chat``, as another process
    reads it: only what is committed."""
    db = directory / "data" / "sb.db"
    if not db.exists():
        return None
    with contextlib.closing(sqlite3.connect(db)) as conn:
        try:
            rows = conn.execute("SELECT status, reply_state, payload FROM inbox WHERE chat = ?", (chat,))
            found = rows.fetchall()
        except sqlite3.OperationalError:  # the schema is not there yet
            return None
    for status, state, payload in found:
        if json.loads(payload).get("text", "").strip().endswith(QUESTION):
            return status, state
    return None


def stored_messages(directory: Path, chat: str) -> int:
    """How many messages of the reply in ``chat`` the service has stored."""
    entry = _entry(directory, chat)
    if entry is None or entry[1] is None:
        return 0
    return len(json.loads(entry[1])["parts"])


def answered(directory: Path, chat: str) -> bool:
    entry = _entry(directory, chat)
    return entry is not None and entry[0] == "done"


def kill_after_second_overflow(service: ServeProcess, directory: Path, chat: str, log: Path) -> None:
    """SIGKILL once the reply in ``chat`` has its first and two overflow messages stored, mid-answer."""
    stored = wait_for(lambda: stored_messages(directory, chat) >= 3, timeout=120)
    assert stored, log.read_text()[-3000:]
    service.kill()
    assert not answered(directory, chat), "the kill came after the answer was complete"


def resume_and_compare(
    config: Path, directory: Path, log: Path, ask: Callable[[], None], chats: tuple[str, str]
) -> None:
    """Start again, let the resumed answer finish in ``chats[0]``, then ask the same in ``chats[1]``
    (``ask``) on the same service, uninterrupted; returns once both are answered and the service stopped."""
    service = ServeProcess(config, log)
    try:
        assert wait_for(lambda: answered(directory, chats[0]), timeout=120), log.read_text()[-3000:]
        ask()
        assert wait_for(lambda: answered(directory, chats[1]), timeout=120), log.read_text()[-3000:]
    finally:
        service.terminate()
