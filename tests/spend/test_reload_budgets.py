"""``SIGHUP`` applies ``budgets:`` and prices to the next turn, without a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.reload import apply
from tests.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI, Reply, last_user_text
from tests.harness import Harness

pytestmark = pytest.mark.slow  # the fake model server


async def test_a_reload_prices_the_next_turn_and_its_budget_stops_the_one_after(
    tmp_path: Path, llm: FakeOpenAI
):
    llm.default_reply = lambda body: Reply(
        text=f"echo: {last_user_text(body)}", prompt_tokens=1000, completion_tokens=100
    )
    settings = make_settings(tmp_path, llm)
    async with Harness.running(settings) as h:
        assert await h.ask("free") == "echo: free"
        models = [m.model_dump() for m in settings.models]
        priced = make_settings(
            tmp_path,
            llm,
            models=[{**models[0], "pricing": {"input": "1", "output": "10"}}, models[1]],
            budgets={"per_chat": {"day": "0.002"}, "on_limit": "stop"},
        )
        report = await apply(h.service, priced)
        assert report.applied == ["budgets.on_limit", "budgets.per_chat", "models"]
        priced_turn = await h.ask("priced")  # $0.001 + $0.001: the chat is at its $0.002
        refused = await h.ask("and again")
        usage = await h.ask("/usage")
    assert refused.startswith(
        "💸 This turn did not run: this chat's daily budget is used up ($0.0020 of $0.0020 today)."
    )
    assert (
        priced_turn
        == "echo: priced\n💸 Heads-up: 100 % of this chat's daily budget is spent ($0.0020 of $0.0020 today)."
    )
    assert "Today: $0.0020 — 2 turn(s)" in usage
