"""A goal checks the budget before every step: over it, the goal pauses cleanly and says why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.goals import EVALUATOR_MARKER
from tests.agent.helpers import agent_settings, system_text
from tests.fakes.openai_server import FakeOpenAI, Reply, last_user_text
from tests.harness import Harness
from tests.tasks.kit import card_body, card_status

pytestmark = pytest.mark.slow  # the fake model server

#: $2.50 / $1.25 cached / $10 per million: 1,000 prompt tokens (400 cached) and 200 out cost $0.004.
PRICING = {"input": "2.50", "cached": "1.25", "output": "10.00"}


def model(body: dict[str, Any]) -> Reply:
    if EVALUATOR_MARKER in system_text(body):  # the goal's evaluator: always "continue" (not priced in turns)
        return Reply(text=json.dumps({"decision": "continue", "reason": "more to tidy"}))
    return Reply(
        text=f"echo: {last_user_text(body)}", prompt_tokens=1000, cached_tokens=400, completion_tokens=200
    )


async def test_a_goal_pauses_before_the_step_that_would_go_over_the_daily_budget(
    tmp_path: Path, llm: FakeOpenAI
):
    llm.default_reply = model
    settings = agent_settings(tmp_path, llm, budgets={"per_owner": {"day": "0.008"}})
    for cfg in settings.models:
        cfg.pricing = PRICING  # type: ignore[assignment]
    async with Harness.running(settings) as h:
        await h.chat.say("/goal tidy the workspace")
        card = await h.chat.wait_for_text("🎯 Goal paused", timeout=60)
        await h.idle(timeout=30)
        status = await h.ask("/goal")
    worked = [b for b in llm.completions if EVALUATOR_MARKER not in system_text(b)]
    assert len(worked) == 2, "the goal's turn and one continuation ran; the second continuation did not"
    # The goal's task card ends paused, with the one continuation's answer and why no more ran.
    assert card_status(card.text) == "⏹ Stopped"
    assert card_body(card.text).startswith("echo: [Goal continuation 1/8]")
    assert card_body(card.text).endswith(
        "🎯 Goal paused: your daily budget is used up ($0.0080 of $0.0080 today). Send /goal tidy the "
        "workspace to resume when there is budget again."
    )
    assert "paused" in status
