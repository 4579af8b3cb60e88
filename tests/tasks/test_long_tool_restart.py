"""Issue 36: kill -9 of the service while a long tool call's card says "running"; after the restart the
redelivered turn runs the call again under the same id, the same card continues in place, and the
command's result reaches the chat once.

Real ``python -m bot serve`` processes against the Telegram fake and the fake model. The model asks for a
command that runs for several seconds (past ``agent.long_tool_seconds``), so the kill lands while it runs;
once a tool result is in the conversation, it answers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai_server import Reply, ToolCall
from tests.tasks.kit import card_body, card_status
from tests.tasks.restart_kit import runs, stored_rows, telegram_restart

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


def card_kept(tmp_path: Path) -> bool:
    """The card's message is recorded with its row (a kill before that would post it again: the platform
    and the database cannot be written at once, docs/tasks.md)."""
    rows = stored_rows(tmp_path, "SELECT reply_state FROM task_cards WHERE kind = 'tool'")
    return any(state for (state,) in rows)


@pytest.mark.timeout(300)
def test_a_long_tool_call_killed_mid_run_finishes_in_the_same_card_and_its_result_arrives_once(
    tmp_path: Path,
):
    with telegram_restart(tmp_path, model, CHAT, "agent: {long_tool_seconds: 1}\n") as chat:
        chat.kill_while(
            "please run the port audit",
            running=lambda: (
                any(card_status(m.text).startswith("▶️ Running") for m in chat.cards()) and card_kept(tmp_path)
            ),
        )
        [before] = chat.cards()
        assert "✅ Done" not in before.text, "the kill came after the command had finished"
        assert runs(tmp_path) == 1

        chat.restart_until(lambda: any(ANSWER in t for t in chat.texts()))
        after = chat.cards()
        card_posts = chat.card_posts()
        everything = "\n".join(chat.texts())
    assert runs(tmp_path) == 2, "the redelivered turn ran the cut-off command again"
    assert [m.message_id for m in after] == [before.message_id], "the same card, edited in place"
    assert card_posts == 1, "no second card was ever posted"
    assert any("started again after a restart" in v for v in after[0].history), after[0].history
    assert card_status(after[0].text) == "✅ Done"
    assert MARK in card_body(after[0].text)
    assert everything.count(MARK) == 1, "the command's result arrived once"
    assert everything.count(ANSWER) == 1, "the turn's answer arrived once"
    assert after[0].buttons == []
