"""kill -9 while a scheduled run's long command runs: after the restart the run's one card continues in
place, says the command started again, and the run's answer arrives once — no card of the command's own,
before or after.

Real ``python -m bot serve`` processes against the Telegram fake and the fake model. The scheduled run
asks for a command that runs for several seconds (past ``agent.long_tool_seconds``), so the kill lands
while it runs; once a tool result is in the conversation, it answers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai_server import Reply, ToolCall, echo_reply, last_user_text
from tests.tasks.kit import card_body, card_status
from tests.tasks.restart_kit import runs, stored_rows, telegram_restart

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


def call_recorded(tmp_path: Path) -> bool:
    """The call became long and is recorded (kind ``tool``): what the redelivered run resumes from."""
    rows = stored_rows(tmp_path, "SELECT status FROM agent_tasks WHERE kind = 'tool'")
    return any(status == "running" for (status,) in rows)


@pytest.mark.timeout(300)
def test_a_scheduled_run_killed_in_its_long_command_continues_its_one_card_after_restart(tmp_path: Path):
    with telegram_restart(tmp_path, model, CHAT, "agent: {long_tool_seconds: 1}\n") as chat:
        chat.kill_while(
            f"/schedule in 3s {WHAT}",
            running=lambda: (
                any("runs.txt" in card_status(m.text) for m in chat.cards()) and call_recorded(tmp_path)
            ),
        )
        [before] = chat.cards()
        assert before.text.startswith("🗂 Scheduled task"), before.text
        assert "✅ Done" not in before.text, "the kill came after the run had finished"
        assert runs(tmp_path) == 1

        chat.restart_until(lambda: any("✅ Done" in card_status(m.text) for m in chat.cards()))
        after = chat.cards()
        posts = chat.card_posts()
        everything = "\n".join(chat.texts())
    assert runs(tmp_path) == 2, "the redelivered run ran the cut-off command again"
    assert [m.message_id for m in after] == [before.message_id], "the run's one card, edited in place"
    assert posts == 1, "no second card was ever posted"
    assert any("started again after a restart" in card_status(v) for v in after[0].history), after[0].history
    assert card_body(after[0].text) == ANSWER
    assert everything.count(ANSWER) == 1, "the run's answer arrived once"
    assert after[0].buttons == []
