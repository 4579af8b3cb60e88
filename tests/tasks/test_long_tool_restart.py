"""Issue 36: kill -9 of the service while a long tool call's card says "running"; after the restart the
redelivered turn runs the call again under the same id, the same card continues in place, and the
command's result reaches the chat once.

Real ``python -m bot serve`` processes against the Telegram fake and the fake model. The model asks for a
command that runs for several seconds (past ``agent.long_tool_seconds``), so the kill lands while it runs;
once a tool result is in the conversation, it answers.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from bench.reliability_telegram import ServeProcess, wait_for, write_config
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tests.fakes.telegram import FakeMessage, FakeTelegram
from tests.tasks.kit import card_body, card_status, is_card

from ..channels.telegram.conftest import BOT_USERNAME

pytestmark = pytest.mark.slow  # real `serve` processes

CHAT = 79
MARK = "AUDIT-FINISHED-7781"
#: About eight seconds, printing as it goes; the runs are counted in a file of the thread's workspace.
COMMAND = f"echo run >> runs.txt; for i in $(seq 1 16); do echo tick $i; sleep 0.5; done; echo {MARK}"
ANSWER = "The audit command has finished; its output is on the card above."


def model(request: dict[str, Any]) -> Reply:
    if any(m.get("role") == "tool" for m in request.get("messages", [])):  # the command's result is in
        return Reply(text=ANSWER)
    return Reply(tool_calls=[ToolCall("bash", {"command": COMMAND})])


def cards(tg: FakeTelegram) -> list[FakeMessage]:
    return [m for m in tg.bot_messages(CHAT) if is_card(m.text)]


def card_kept(tmp_path: Path) -> bool:
    """The card's message is recorded with its row (a kill before that would post it again: the platform
    and the database cannot be written at once, docs/tasks.md)."""
    for db in tmp_path.rglob("sb.db"):
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
                rows = conn.execute("SELECT reply_state FROM task_cards WHERE kind = 'tool'").fetchall()
        except sqlite3.Error:
            return False
        return any(state for (state,) in rows)
    return False


def runs(tmp_path: Path) -> int:
    return sum(p.read_text().count("run") for p in tmp_path.rglob("runs.txt"))


@pytest.mark.timeout(300)
def test_a_long_tool_call_killed_mid_run_finishes_in_the_same_card_and_its_result_arrives_once(
    tmp_path: Path,
):
    log = tmp_path / "serve.log"
    with FakeTelegram(bot_username=BOT_USERNAME, long_poll_cap=1.0) as tg, FakeOpenAI(model) as llm:
        config = write_config(tmp_path, tg, llm)  # type: ignore[arg-type]
        with config.open("a") as extra:
            extra.write("agent: {long_tool_seconds: 1}\n")
        service = ServeProcess(config, log)
        try:
            tg.user_message(CHAT, "please run the port audit", user_id=CHAT)  # type: ignore[attr-defined]
            running = wait_for(
                lambda: (
                    any(card_status(m.text).startswith("▶️ Running") for m in cards(tg))
                    and card_kept(tmp_path)
                ),
                timeout=120,
            )
            assert running, log.read_text()[-3000:]
        finally:
            service.kill()
        [before] = cards(tg)
        assert "✅ Done" not in before.text, "the kill came after the command had finished"
        assert runs(tmp_path) == 1

        again = ServeProcess(config, log)
        try:
            answered = wait_for(lambda: any(ANSWER in m.text for m in tg.bot_messages(CHAT)), timeout=120)
            assert answered, log.read_text()[-3000:]
        finally:
            again.terminate()
        after = cards(tg)
        card_posts = [c for c in tg.calls("sendMessage") if is_card(str(c["params"].get("text", "")))]
        everything = "\n".join(m.text for m in tg.bot_messages(CHAT))
    assert runs(tmp_path) == 2, "the redelivered turn ran the cut-off command again"
    assert [m.message_id for m in after] == [before.message_id], "the same card, edited in place"
    assert len(card_posts) == 1, "no second card was ever posted"
    assert any("started again after a restart" in v for v in after[0].history), after[0].history
    assert card_status(after[0].text) == "✅ Done"
    assert MARK in card_body(after[0].text)
    assert everything.count(MARK) == 1, "the command's result arrived once"
    assert everything.count(ANSWER) == 1, "the turn's answer arrived once"
    assert after[0].buttons == []
