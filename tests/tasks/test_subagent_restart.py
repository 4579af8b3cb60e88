"""Issue 36: kill -9 of the service while a subagent's card says "running"; after the restart the same card
continues in place, the job runs to its end, and its result reaches the chat once.

Real ``python -m bot serve`` processes against the Telegram fake and the fake model. The model answers as
a person would expect a model to: asked a question, it delegates the job with the ``task`` tool; once a
task result is in the conversation, it answers. The subagent's answer streams for several seconds, so the
kill lands while it runs — nothing of the card or the task may rely on a clean stop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai_server import Reply, ToolCall, prompt_text
from tests.tasks.kit import card_body, card_status
from tests.tasks.restart_kit import telegram_restart

pytestmark = pytest.mark.slow  # real `serve` processes

CHAT = 78
PARENT = "PARENT-PROMPT-9120"
JOB = "JOB-AUDIT: list every open port"
RESULT = " ".join(f"port{i}" for i in range(100))
ANSWER = "The audit is finished; the ports are on the card above."


def model(request: dict[str, Any]) -> Reply:
    if "JOB-AUDIT" in prompt_text(request):  # the subagent: streams for about five seconds
        return Reply(text=RESULT, chunk_size=10, delay=0.5)
    if any(m.get("role") == "tool" for m in request.get("messages", [])):  # a task's result is in
        return Reply(text=ANSWER)
    return Reply(
        tool_calls=[ToolCall("task", {"title": "audit the ports", "prompt": JOB, "kind": "general"})]
    )


@pytest.mark.timeout(300)
def test_a_subagent_killed_mid_task_finishes_in_the_same_card_and_its_result_arrives_once(tmp_path: Path):
    config = f"agent: {{system_prompt: '{PARENT}', subagents: {{enabled: true}}}}\n"
    with telegram_restart(tmp_path, model, CHAT, config) as chat:
        chat.kill_while(
            "please audit the open ports",
            running=lambda: (
                any(card_status(m.text).startswith("▶️ Running") for m in chat.cards())
                and any("JOB-AUDIT" in prompt_text(b) for b in chat.llm.completions)
            ),
        )
        [before] = chat.cards()
        assert "✅ Done" not in before.text, "the kill came after the task had finished"

        chat.restart_until(lambda: any(ANSWER in t for t in chat.texts()))
        after = chat.cards()
        card_posts = chat.card_posts()
        everything = "\n".join(chat.texts())
    assert [m.message_id for m in after] == [before.message_id], "the same card, edited in place"
    assert card_posts == 1, "no second card was ever posted"
    assert card_status(after[0].text) == "✅ Done"
    assert card_body(after[0].text) == RESULT
    assert everything.count("port99") == 1, "the task's result arrived once"
    assert everything.count(ANSWER) == 1, "the turn's answer arrived once"
    assert after[0].buttons == []
