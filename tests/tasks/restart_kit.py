"""kill -9 while a task card runs, then start again: the half every card restart test shares.

The restart tests (``test_task_card_restart.py``, ``test_goal_card_restart.py``,
``test_subagent_restart.py``, ``test_long_tool_restart.py``, ``test_long_tool_in_job_restart.py``) each
start a real ``python -m bot serve`` (bench/reliability_telegram.py's :class:`ServeProcess`), make a card
run, kill the service with SIGKILL while it runs — so nothing of the card's durability may rely on a clean
stop — and start it again until the work is finished. What differs is what starts the work, what "running"
and "finished" look like, and what the chat must show after; that stays in each test.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.reliability_telegram import ServeProcess, wait_for, write_config
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.telegram import FakeMessage, FakeTelegram
from tests.tasks.kit import telegram_card_posts, telegram_cards

from ..channels.telegram.conftest import BOT_USERNAME

#: How long a step of a restart test may take: a ``serve`` start plus a streamed answer, on a loaded machine.
STEP_TIMEOUT = 120


def kill_while(config: Path, log: Path, start: Callable[[], None], running: Callable[[], bool]) -> None:
    """Start ``serve``, call ``start`` (the user's message), and SIGKILL the service once ``running``
    holds; fails with the service's log when it never does."""
    service = ServeProcess(config, log)
    try:
        start()
        assert wait_for(running, timeout=STEP_TIMEOUT), log.read_text()[-3000:]
    finally:
        service.kill()


def restart_until(config: Path, log: Path, finished: Callable[[], bool]) -> None:
    """Start ``serve`` again on the same database and stop it gracefully (SIGTERM) once ``finished``
    holds; fails with the service's log when it never does."""
    service = ServeProcess(config, log)
    try:
        assert wait_for(finished, timeout=STEP_TIMEOUT), log.read_text()[-3000:]
    finally:
        service.terminate()


@dataclass
class TelegramRestart:
    """One Telegram chat served by ``serve`` processes that share a config and a database (see
    :func:`telegram_restart`): kill one while a card runs, start the next, read the chat."""

    tg: FakeTelegram
    llm: FakeOpenAI
    config: Path
    log: Path
    chat: int

    def kill_while(self, text: str, running: Callable[[], bool]) -> None:
        """Start ``serve``, send ``text`` as the chat's person, SIGKILL it once ``running`` holds."""
        kill_while(
            self.config,
            self.log,
            start=lambda: self.tg.user_message(self.chat, text, user_id=self.chat),  # type: ignore[attr-defined]
            running=running,
        )

    def restart_until(self, finished: Callable[[], bool]) -> None:
        restart_until(self.config, self.log, finished)

    def cards(self) -> list[FakeMessage]:
        return telegram_cards(self.tg, self.chat)

    def card_posts(self) -> int:
        return telegram_card_posts(self.tg)

    def texts(self) -> list[str]:
        """Every message the bot shows in the chat, as it reads now."""
        return [m.text for m in self.tg.bot_messages(self.chat)]


@contextmanager
def telegram_restart(
    tmp_path: Path, model: Callable[[dict[str, Any]], Reply], chat: int, config: str = ""
) -> Iterator[TelegramRestart]:
    """The Telegram fake and the fake model (answering with ``model``), and a ``serve`` config for them
    with ``config`` (YAML lines) added; the service's output goes to ``serve.log``."""
    log = tmp_path / "serve.log"
    with FakeTelegram(bot_username=BOT_USERNAME, long_poll_cap=1.0) as tg, FakeOpenAI(model) as llm:
        path = write_config(tmp_path, tg, llm)  # type: ignore[arg-type]
        if config:
            with path.open("a") as extra:
                extra.write(config)
        yield TelegramRestart(tg, llm, path, log, chat)


def stored_rows(tmp_path: Path, query: str) -> list[tuple[Any, ...]]:
    """``query``'s rows in the service's SQLite database, read-only while ``serve`` writes it; none while
    the database or the table does not exist yet."""
    for db in tmp_path.rglob("sb.db"):
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
                return conn.execute(query).fetchall()
        except sqlite3.Error:
            return []
    return []


def runs(tmp_path: Path) -> int:
    """How many times a command that appends ``run`` to ``runs.txt`` in its workspace has started."""
    return sum(p.read_text().count("run") for p in tmp_path.rglob("runs.txt"))
