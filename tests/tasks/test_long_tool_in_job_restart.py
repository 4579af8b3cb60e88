"""kill -9 while a scheduled run's long command runs: after the restart the run's one card continues in
place, says the command started again, and the run's answer arrives once — no card of the command's own,
before or after.

Real ``python -m bot serve`` processes against the Telegram fake and the fake model. The scheduled run
asks for a command that runs for several seconds (past ``agent.long_tool_seconds``), so the kill lands
while it runs; once a tool result is in the conversation, it answers.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from bench.reliability_telegram import write_config
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall, echo_reply, last_user_text
from tests.fakes.telegram import FakeMessage, FakeTelegram
from tests.tasks.kit import card_body, card_status, telegram_card_posts, telegram_cards
from tests.tasks.restart_kit import kill_while, restart_until

from ..channels.telegram.conftest import BOT_USERNAME

pytestmark = pytest.mark.slow  # real `serve` processes

CHAT = 81
WHAT = "run the nightly audit"
#: About eight seconds; the runs are counted in a file of the thread's workspace.
COMMAND = "echo run >> runs.txt; for i in $(seq 1 16); do echo tick $i; sleep 0.5; done; echo AUDIT-OK"
ANSWER = "The nightly audit finished: AUDIT-OK."


def model(request: dict[str, Any]) -> Reply:
    if any(m.get("role") == "tool" for m in request.get("messages", [])):  # the command's result is in
        return Reply(text=ANSWER)
    if last_user_text(request).strip() == WHAT:
        return Reply(tool_calls=[ToolCall("bash", {"command": COMMAND})])
    return echo_reply(request)


def cards(tg: FakeTelegram) -> list[FakeMessage]:
    return telegram_cards(tg, CHAT)


def call_recorded(tmp_path: Path) -> bool:
    """The call became long and is recorded (kind ``tool``): what the redelivered run resumes from."""
    for db in tmp_path.rglob("sb.db"):
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
                rows = conn.execute("SELECT status FROM agent_tasks WHERE kind = 'tool'").fetchall()
        except sqlite3.Error:
            return False
        return any(status == "running" for (status,) in rows)
    return False


def runs(tmp_path: Path) -> int:
    return sum(p.read_text().count("run") for p in tmp_path.rglob("runs.txt"))


@pytest.mark.timeout(300)
def test_a_scheduled_run_killed_in_its_long_command_continues_its_one_card_after_restart(tmp_path: Path):
    log = tmp_path / "serve.log"
    with FakeTelegram(bot_username=BOT_USERNAME, long_poll_cap=1.0) as tg, FakeOpenAI(model) as llm:
        config = write_config(tmp_path, tg, llm)  # type: ignore[arg-type]
        with config.open("a") as extra:
            extra.write("agent: {long_tool_seconds: 1}\n")
        kill_while(
            config,
            log,
            start=lambda: tg.user_message(CHAT, f"/schedule in 3s {WHAT}", user_id=CHAT),  # type: ignore[attr-defined]
            running=lambda: (
                any("runs.txt" in card_status(m.text) for m in cards(tg)) and call_recorded(tmp_path)
            ),
        )
        [before] = cards(tg)
        assert before.text.startswith("🗂 Scheduled task"), before.text
        assert "✅ Done" not in before.text, "the kill came after the run had finished"
        assert runs(tmp_path) == 1

        restart_until(config, log, lambda: any("✅ Done" in card_status(m.text) for m in cards(tg)))
        after = cards(tg)
        posts = telegram_card_posts(tg)
        everything = "\n".join(m.text for m in tg.bot_messages(CHAT))
    assert runs(tmp_path) == 2, "the redelivered run ran the cut-off command again"
    assert [m.message_id for m in after] == [before.message_id], "the run's one card, edited in place"
    assert posts == 1, "no second card was ever posted"
    assert any("started again after a restart" in card_status(v) for v in after[0].history), after[0].history
    assert card_body(after[0].text) == ANSWER
    assert everything.count(ANSWER) == 1, "the run's answer arrived once"
    assert after[0].buttons == []
