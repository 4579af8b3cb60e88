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

from bench.reliability_telegram import write_config
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall, prompt_text
from tests.fakes.telegram import FakeMessage, FakeTelegram
from tests.tasks.kit import card_body, card_status, telegram_card_posts, telegram_cards
from tests.tasks.restart_kit import kill_while, restart_until

from ..channels.telegram.conftest import BOT_USERNAME

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


def cards(tg: FakeTelegram) -> list[FakeMessage]:
    return telegram_cards(tg, CHAT)


@pytest.mark.timeout(300)
def test_a_subagent_killed_mid_task_finishes_in_the_same_card_and_its_result_arrives_once(tmp_path: Path):
    log = tmp_path / "serve.log"
    with FakeTelegram(bot_username=BOT_USERNAME, long_poll_cap=1.0) as tg, FakeOpenAI(model) as llm:
        config = write_config(tmp_path, tg, llm)  # type: ignore[arg-type]
        with config.open("a") as extra:
            extra.write(f"agent: {{system_prompt: '{PARENT}', subagents: {{enabled: true}}}}\n")
        kill_while(
            config,
            log,
            start=lambda: tg.user_message(CHAT, "please audit the open ports", user_id=CHAT),  # type: ignore[attr-defined]
            running=lambda: (
                any(card_status(m.text).startswith("▶️ Running") for m in cards(tg))
                and any("JOB-AUDIT" in prompt_text(b) for b in llm.completions)
            ),
        )
        [before] = cards(tg)
        assert "✅ Done" not in before.text, "the kill came after the task had finished"

        restart_until(config, log, lambda: any(ANSWER in m.text for m in tg.bot_messages(CHAT)))
        after = cards(tg)
        card_posts = telegram_card_posts(tg)
        everything = "\n".join(m.text for m in tg.bot_messages(CHAT))
    assert [m.message_id for m in after] == [before.message_id], "the same card, edited in place"
    assert card_posts == 1, "no second card was ever posted"
    assert card_status(after[0].text) == "✅ Done"
    assert card_body(after[0].text) == RESULT
    assert everything.count("port99") == 1, "the task's result arrived once"
    assert everything.count(ANSWER) == 1, "the turn's answer arrived once"
    assert after[0].buttons == []
