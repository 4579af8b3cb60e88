"""Issue 36: kill -9 of the service while a goal's card shows a step running; after the restart the goal
resumes, the same card continues in place, and the goal's last answer and verdict arrive once.

Real ``python -m bot serve`` processes against the Telegram fake and the fake model; the first is killed
with SIGKILL while step 2 of the goal streams into the card, so nothing may rely on a clean stop.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.goals import EVALUATOR_MARKER
from tests.agent.helpers import system_text
from tests.fakes.openai_server import Reply, last_user_text
from tests.tasks.kit import card_body, card_status
from tests.tasks.restart_kit import telegram_restart

pytestmark = pytest.mark.slow  # real `serve` processes

CHAT = 79
OBJECTIVE = "count every alert"
FIRST = "Starting: I will count them in two passes."
STEP_1 = "Pass one: the alerts are in three files."
STEP_2 = " ".join(f"part{i}" for i in range(120))


def model(request: dict[str, Any]) -> Reply:
    """Reached once step 2 answered; step 2 streams for about six seconds, so the kill lands in it."""
    text = last_user_text(request)
    if EVALUATOR_MARKER in system_text(request):
        done = "part119" in text
        return Reply(text=json.dumps({"decision": "satisfied" if done else "continue", "reason": "counted"}))
    if text.startswith("[Goal continuation 1/"):
        return Reply(text=STEP_1)
    if text.startswith("[Goal continuation 2/"):
        return Reply(text=STEP_2, chunk_size=10, delay=0.1)
    return Reply(text=FIRST)


@pytest.mark.timeout(300)
def test_a_goal_killed_mid_step_continues_in_the_same_card_and_ends_once(tmp_path: Path):
    with telegram_restart(tmp_path, model, CHAT) as chat:
        chat.kill_while(
            f"/goal {OBJECTIVE}",
            running=lambda: any(
                card_status(m.text) == "▶️ Running — step 2 of 8" and "part20" in m.text for m in chat.cards()
            ),
        )
        [before] = chat.cards()
        assert "part119" not in before.text, "the kill came after step 2 had finished"

        chat.restart_until(lambda: any("✅ Done" in card_status(m.text) for m in chat.cards()))
        after = chat.cards()
        card_posts = chat.card_posts()
        texts = chat.texts()
    assert [m.message_id for m in after] == [before.message_id], "the same card, edited in place"
    assert card_posts == 1, "no second card was ever posted"
    assert card_body(after[0].text) == f"{STEP_2}\n\n🎯 Goal reached: counted"
    assert sum("part119" in t for t in texts) == 1, "the goal's last answer arrived once"
    assert texts.count(FIRST) == 1, "the reply to /goal was not repeated"
    assert not any(t.startswith("🎯") and "Goal set" not in t for t in texts), "no notice beside the card"
    assert after[0].buttons == [], "no Stop button left on the finished card"
