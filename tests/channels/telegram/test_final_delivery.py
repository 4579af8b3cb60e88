"""Final replies that Telegram rate-limits still land, through a real ``python -m bot serve``.

A busy Bot API answers 429 to a share of the final edits; every answer must still arrive, once, in the
message that showed "…" or "⏳ Queued" (bot/redelivery.py) — and a kill -9 while a final waits to be
retried must not lose the answer or post it twice.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from bench.reliability_telegram import (
    Outcome,
    ServeProcess,
    all_answered,
    answer_for,
    judge,
    wait_for,
    write_config,
)
from tests.fakes.openai_server import FakeOpenAI, Reply, last_user_text
from tests.fakes.telegram import FakeTelegram

from .conftest import BOT_USERNAME

FINAL_METHODS = ("editMessageText", "sendMessage")


def is_final(params: dict[str, Any]) -> bool:
    """A call showing an answer: no Stop button (the placeholder and the streamed edits carry one),
    and not a "⏳ Queued" notice."""
    return "reply_markup" not in params and not str(params.get("text", "")).startswith("⏳")


def quick_answer(request: dict[str, Any]) -> Reply:
    return Reply(text=answer_for(last_user_text(request).strip()), chunk_size=10, delay=0.02)


def saved_answers(directory: Path) -> int:
    """Inbox entries whose answer is kept for a later delivery (read as another process reads it)."""
    with contextlib.closing(sqlite3.connect(directory / "data" / "sb.db")) as conn:
        return int(conn.execute("SELECT count(*) FROM inbox WHERE reply_text IS NOT NULL").fetchone()[0])


def failed_finals(tg: FakeTelegram) -> int:
    return sum(1 for c in tg.calls() if c["method"] in FINAL_METHODS and c["status"] == 429)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_with_30_percent_429s_on_final_calls_all_150_answers_land_once_and_nothing_stale_stays(
    tmp_path: Path,
):
    chats = tuple(range(601, 607))
    sent: dict[int, list[str]] = {chat: [] for chat in chats}
    with FakeTelegram(bot_username=BOT_USERNAME, long_poll_cap=1.0) as tg, FakeOpenAI(quick_answer) as llm:
        tg.fail_share(FINAL_METHODS, 0.3, retry_after=1, when=is_final, seed=29)  # type: ignore[attr-defined]
        config = write_config(tmp_path, tg, llm)  # type: ignore[arg-type]
        service = ServeProcess(config, tmp_path / "serve.log")
        try:
            assert wait_for(lambda: tg.calls("getUpdates"), timeout=60), "the service polls"  # type: ignore[attr-defined]
            for number in range(150):
                chat = chats[number % len(chats)]
                text = f"q{number}"
                tg.user_message(chat, text, user_id=chat)  # type: ignore[attr-defined]
                sent[chat].append(text)
            finished = wait_for(lambda: all_answered(tg, sent), timeout=300)  # type: ignore[arg-type]
            time.sleep(1.0)  # a late duplicate or a late stale edit would show up now
        finally:
            service.terminate()
        log = (tmp_path / "serve.log").read_text()[-3000:]
        outcome = Outcome(cycles=0, messages=150)
        judge(tg, sent, outcome)  # type: ignore[arg-type]
        assert finished, log
        assert outcome.lost == [] and outcome.duplicated == [], log
        assert outcome.stale == [], "a '…' or '⏳ Queued' stayed: " + ", ".join(outcome.stale[:5])
        assert failed_finals(tg) >= 30, "a third of the final calls were refused"  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_kill_while_final_replies_wait_out_429s_still_delivers_each_answer_once(tmp_path: Path):
    chats = (611, 612, 613)
    sent: dict[int, list[str]] = {chat: [] for chat in chats}
    with FakeTelegram(bot_username=BOT_USERNAME, long_poll_cap=1.0) as tg, FakeOpenAI(quick_answer) as llm:
        tg.fail_share(FINAL_METHODS, 1.0, retry_after=1, when=is_final)  # type: ignore[attr-defined]
        config = write_config(tmp_path, tg, llm)  # type: ignore[arg-type]
        log = tmp_path / "serve.log"
        service = ServeProcess(config, log)
        assert wait_for(lambda: tg.calls("getUpdates"), timeout=60), "the service polls"  # type: ignore[attr-defined]
        for number in range(6):
            chat = chats[number % len(chats)]
            tg.user_message(chat, f"k{number}", user_id=chat)  # type: ignore[attr-defined]
            sent[chat].append(f"k{number}")
        # The first answer of each chat waits out Telegram's 429s, kept with its inbox entry.
        assert wait_for(lambda: saved_answers(tmp_path) == len(chats), timeout=60), log.read_text()[-3000:]
        service.kill()
        asked = len(llm.completions)  # type: ignore[attr-defined]

        tg.fail_share(FINAL_METHODS, 0.0)  # type: ignore[attr-defined]
        service = ServeProcess(config, log)
        try:
            finished = wait_for(lambda: all_answered(tg, sent), timeout=120)  # type: ignore[arg-type]
            time.sleep(1.0)
        finally:
            service.terminate()
        outcome = Outcome(cycles=1, messages=6)
        judge(tg, sent, outcome)  # type: ignore[arg-type]
        assert finished, log.read_text()[-3000:]
        assert outcome.lost == [] and outcome.duplicated == [] and outcome.stale == [], outcome
        again = [last_user_text(b).strip() for b in llm.completions[asked:]]  # type: ignore[attr-defined]
        # Each chat's later message waited behind the kept answer; after the restart only those were asked
        # for: the kept answers (k0-k2) were delivered as they were.
        assert sorted(again) == ["k3", "k4", "k5"], again
